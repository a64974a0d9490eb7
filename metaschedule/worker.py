"""The program costlab's TVM worker processes run (``pools.worker_pool``): TVM's own worker loop
(``tvm.exec.popen_worker``), without PyTorch, ending with the command that started it.

``import tvm`` imports PyTorch first when it is installed (tvm-ffi does, to avoid a symbol clash on Windows),
and costlab installs it: 1.63 CPU s and 385 MB a worker (Zen 5), where TVM alone takes 0.56 s and 188 MB. No builder,
runner or check worker uses it, so the import is refused before TVM is imported (``import torch`` raises
ImportError, which tvm-ffi passes over).

A worker runs in a session of its own (a terminal's Ctrl-C or hang-up reaches the command only), so it asks the
kernel to kill it when the thread of the command that started it ends (Linux's parent-death signal): a command
that is killed, or that exits without stopping its workers, leaves none behind, even one stuck in a kernel.

Run as ``python -m costlab.metaschedule.worker PARENT_PID READ_FD WRITE_FD``.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys

PR_SET_PDEATHSIG = 1
# set to 1: the workers import PyTorch as TVM's do (a machine whose CUDA runtime TVM finds only through the
# libraries PyTorch loads first: scripts/gpu_setup.sh sets it where its check finds that)
WITH_TORCH = "COSTLAB_WORKERS_IMPORT_TORCH"


def end_with_parent(parent: int) -> None:
    """Be killed when the thread that started this process ends; end now if the command is already gone."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):  # no prctl in this C library: the worker ends when its pipe closes
            pass
    if os.getppid() != parent:  # the command ended before the signal was asked for
        os._exit(1)


def output_to_stderr(pipes: tuple = ()) -> None:
    """What the worker (TVM, a compiler it runs, a task's own print) writes to standard output goes to the command's
    standard error: the command's standard output is its result (``--json``), which a worker's line would break.
    The worker's answers travel through pipes of their own (``pipes``). Left as it is where the command runs with
    its standard output or error closed (``>&-``, ``2>&-``): standard error is then no file to write to, or one of
    the answers' pipes took descriptor 1 or 2."""
    import fcntl

    try:
        writable = (fcntl.fcntl(2, fcntl.F_GETFL) & os.O_ACCMODE) in (os.O_WRONLY, os.O_RDWR)
    except OSError:  # closed
        return
    if not writable or 1 in pipes or 2 in pipes:
        return
    if sys.stdout is not None:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
    os.dup2(2, 1)


def main() -> None:
    parent = int(sys.argv.pop(1))
    end_with_parent(parent)
    output_to_stderr(tuple(int(fd) for fd in sys.argv[1:3]))
    if os.environ.get(WITH_TORCH) != "1":
        sys.modules.setdefault("torch", None)  # None in sys.modules: `import torch` raises ImportError
    runpy.run_module("tvm.exec.popen_worker", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
