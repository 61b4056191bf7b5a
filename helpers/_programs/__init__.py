"""Programs that lessons start in child processes; nothing here is lesson API.

- :mod:`helpers._programs.preemptible`: a training run that notebook 08 kills and resumes
  (its parent side: :mod:`helpers.preemption`), with the lesson's own restartable loop,
  :mod:`helpers._programs.resume_loop`;
- :mod:`helpers._programs.worker`: one worker of the local cluster of notebook 09 (its parent
  side: :mod:`helpers.multiworker`).

Each starts with :func:`helpers.processes.default_sigint` and gets its environment from
:func:`helpers.processes.child_env`.
"""
