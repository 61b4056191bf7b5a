"""The headless run of the notebooks, in six parts (``tools/run_notebooks.py`` is its command):

- :mod:`runner.folders`: where a run of each mode and stack writes;
- :mod:`runner.execute`: one notebook through papermill, with its parameters and kept files;
- :mod:`runner.memory`: the peak memory of its kernel and the processes it starts, and the budget;
- :mod:`runner.blocks`: whether each block declared with ``helpers.blocks.runs_on`` ran where it
  says;
- :mod:`runner.cache`: what a result depends on, so an unchanged notebook is not run twice;
- :mod:`runner.summary`: each notebook's row, its headline in words, and the summary files.

Nothing here knows a particular notebook: what is particular lives in notebooks/manifest.toml.
"""
