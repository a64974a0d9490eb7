"""costlab.common: the helpers every layer uses, in one bottom room.

- ``errors``: the error classes the command line reports as one clear line (``CostlabError``, ``InputError``,
  ``DatasetFormatError``, ``UsageError``);
- ``jsontext``: strict JSON text (no bare ``NaN``, numpy values as plain numbers);
- ``checks``: checks of option values against the types of the dataclass that takes them;
- ``host``: the machine a measurement runs on (CPU model, ISA flags, caches, threads): the one parser of
  ``/proc/cpuinfo`` and sysfs's cache folders, for the host record and for the hardware spec of the local CPU,
  and the one count of the cores this process may use (``usable_cores``);
- ``import_report``: what reading input files did (lines, records added, bad lines counted as ``FILE:LINE``);
- ``files``: the one atomic file writer (``write_atomically``, ``atomic_file``): a temporary file beside the
  target, fsync, rename, no debris on failure, the target's permissions kept, symbolic links written through;
- ``locks``: the one file lock (``take_lock``: an exclusive ``flock`` held by an open file, waited for or
  refused with the name of its holder); ``cpu_lock``: the machine's measuring lock, built on it.

It imports nothing of costlab above it (``metaschedule``, ``datasets``, ``featurizers``, ``costmodels``, ``train``, ``export``,
the command line): every other room may import it, and it stays pure Python (no TVM, no torch).
"""
