"""Transfer-tuning: a new workload starts from the schedules already tuned for kernels of the same class.

- ``sources.py``: the measured programs of costlab datasets and MetaSchedule work dirs, best first per task;
- ``match.py``: which source tasks a task can take schedules from (same anchor computation; same or other
  fused blocks), and how their blocks' names map;
- ``replay.py``: a source schedule replayed on the new task, its tilings adapted to the new loop extents;
- ``run.py``: ``costlab transfer`` (and ``costlab tune --transfer-from``): replay, rank with a model (PSA
  without one), measure the best K per task, commit them to the work dir's database.
"""
