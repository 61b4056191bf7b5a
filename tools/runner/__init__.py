"""The headless run of the notebooks, in four parts (``tools/run_notebooks.py`` is its command):

- :mod:`runner.folders`: where a run of each mode and stack writes;
- :mod:`runner.execute`: one notebook through papermill, with its parameters and kept files;
- :mod:`runner.cache`: what a result depends on, so an unchanged notebook is not run twice;
- :mod:`runner.summary`: each notebook's row, its headline in words, and the summary files.

Nothing here knows a particular notebook: what is particular lives in notebooks/manifest.toml.
"""
