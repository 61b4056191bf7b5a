"""Programs that lessons start in child processes; nothing here is lesson API.

- :mod:`helpers._programs.worker`: one worker of the local cluster of notebook 09_scaling_out_to_pods (its parent
  side: :mod:`helpers.multiworker`).

Each starts with :func:`helpers.processes.default_sigint` and gets its environment from
:func:`helpers.processes.child_env`.
"""
