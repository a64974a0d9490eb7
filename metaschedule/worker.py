"""The program costlab's TVM worker processes run (``pools.worker_pool``): TVM's own worker loop
(``tvm.exec.popen_worker``), without PyTorch.

``import tvm`` imports PyTorch first when it is installed (tvm-ffi does, to avoid a symbol clash on Windows),
and costlab installs it: 2.0 s and a few hundred MB a worker here, where TVM alone takes 0.5 s. No builder,
runner or check worker uses it, so the import is refused before TVM is imported (``import torch`` raises
ImportError, which tvm-ffi passes over).

Run as ``python -m costlab.metaschedule.worker READ_FD WRITE_FD``.
"""

from __future__ import annotations

import runpy
import sys


def main() -> None:
    sys.modules.setdefault("torch", None)  # None in sys.modules: `import torch` raises ImportError
    runpy.run_module("tvm.exec.popen_worker", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
