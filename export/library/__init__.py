"""The schedule library: the checked best programs of every finished run, per host platform, from which every
run starts each task.

- ``store.py``: a library file (``library.json`` of one host platform: per workload its structure and its
  fastest checked programs), where libraries live (``--library DIR``, ``$COSTLAB_LIBRARY``, the user's cache
  folder), and the starter library shipped with costlab;
- ``collect.py``: a finished run's (or any MetaSchedule work dir's) best programs per task, checked against a
  reference build, as library programs;
- ``start.py``: a run's start: the library's tasks that match the run's tasks (``export/transfer/match``),
  as transfer-tuning sources, and the run's results added back when it ends.

A library entry is a starting point, never a measurement: its programs are replayed on the new task with their
tilings adapted, ranked by the model and measured like any candidate.
"""

from costlab.export.library.store import Library, default_root, open_library, starter_library

__all__ = ["Library", "default_root", "open_library", "starter_library"]
