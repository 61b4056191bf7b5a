"""The hardware lane: every lesson run on a real TPU host, and the records that say so.

- :mod:`hardware.__main__`: the command, ``python -m tools.hardware kaggle|colab|local``;
- :mod:`hardware.driver`: the run on the TPU host (route, lessons, self-test, record);
- :mod:`hardware.kernel`: the script a host runs to check out the exact commit and start the driver;
- :mod:`hardware.kaggle_lane`, :mod:`hardware.colab_lane`: the two platforms' lanes;
- :mod:`hardware.lane`: what the lanes share (checks, the end of a run, exit statuses);
- :mod:`hardware.records`: the record's schema and the rule that decides "verified on a TPU".
"""
