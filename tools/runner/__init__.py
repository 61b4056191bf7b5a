"""The headless run of the notebooks, in six parts (``tools/run_notebooks.py`` is its command):

``folders``, ``execute``, ``memory``, ``blocks``, ``cache`` and ``summary``. Nothing here knows a
particular notebook: that lives in notebooks/manifest.toml.
"""
