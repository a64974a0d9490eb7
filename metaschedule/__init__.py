"""costlab.metaschedule: what talks to TVM's MetaSchedule, in one room above ``costlab.common``.

- ``targets``: TVM targets as JSON dicts (from the string form too), this machine as a target, which kinds
  are GPUs (``GPU_KINDS``, ``is_gpu``), platform ids derived from targets;
- ``workloads``: a workload's database form (``[shash, base64 IR]``), decoded, and a task's name, kernel
  class and FLOPs; its buffers named apart when two share a name (``unique_buffer_names``); ``structure``:
  its blocks, anchor block, kernel class and block signatures;
- ``traces``: a trace as the JSON a database stores (``trace_json``, ``compact_json``) and replayed on a
  workload (``replay``, ``replay_candidate``: the one replay every layer uses);
- ``databases``: MetaSchedule's JSON databases, the one reader (plain or gzip) and the one writer;
  ``repair``: a work dir's database with bad lines moved aside; ``results``: a measurement's ``run_secs``
  as raw costs and an error code;
- ``tune_context``: tune contexts without the tensor-intrinsic registry where a task cannot use it;
- ``builders``, ``runners``, ``pools``: how candidates are built and run (``build_and_run``), the worker
  pools behind them; ``rpc``: measuring through an RPC tracker; ``screening``: the runner that measures
  in full only the candidates that may be their task's best.

It imports nothing of costlab but ``costlab.common``, and TVM only lazily (``screening`` excepted, which
only a tuning run imports), so reading a dataset or a database never needs TVM.
"""
