"""The ``costlab`` command line: ``costlab <command> [<subcommand>] ...``; ``--help`` at every level."""

from __future__ import annotations

import argparse
import errno
import sys

from costlab import __version__
from costlab.commands import dataset as dataset_cmd
from costlab.commands import exploit as exploit_cmd
from costlab.commands import export as export_cmd
from costlab.commands import featurize as featurize_cmd
from costlab.commands import library as library_cmd
from costlab.commands import models as models_cmd
from costlab.commands import train as train_cmd
from costlab.commands import transfer as transfer_cmd
from costlab.commands import tune as tune_cmd
from costlab.commands.signals import Terminated
from costlab.common.errors import CostlabError
from costlab.common.files import home_expanded
from costlab.datasets.store import abandoned_files, hdf5_read_failure

# an OSError of these, naming its file, is a write the machine refused (space, a quota, a size limit, read-only)
WRITE_FAILURES = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO)

# in the order `costlab --help` lists them
COMMANDS = [dataset_cmd, featurize_cmd, train_cmd, tune_cmd, export_cmd, models_cmd, transfer_cmd, exploit_cmd,
            library_cmd]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="costlab",
        description="Learned cost models for tensor-program tuning in Apache TVM MetaSchedule: build datasets "
        "from measured logs, featurize, train, evaluate, export, and tune with the model.",
    )
    parser.add_argument("--version", action="version", version=f"costlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for mod in COMMANDS:
        mod.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except CostlabError as exc:  # an option value refused by its checked type (costlab/commands/options.py)
        print(f"costlab: error: {exc}", file=sys.stderr)
        return 2
    for name, value in vars(args).items():  # `--out=~/runs`: the shell leaves a `~` after `=` as written
        setattr(args, name, home_expanded(value))
    previous = _terminate_as_interrupt()
    try:
        return int(args.func(args) or 0)
    except CostlabError as exc:
        print(f"costlab: error: {exc}", file=sys.stderr)
        _exit_now_if_hdf5_failed(2)
        return 2
    except BrokenPipeError:  # output piped into a reader that stopped early (e.g. `| head`)
        import os

        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)  # (main may be called again in this process)
        return 0
    except OSError as exc:  # after BrokenPipeError, an OSError too
        if hdf5_read_failure(exc):  # read outside a dataset's own context (training's data module): no file named
            print(f"costlab: error: a dataset is damaged: HDF5 could not read its data ({str(exc).strip()}); restore "
                  "it from a copy, or `costlab dataset unpack` its pack", file=sys.stderr)
            return 2
        if exc.filename is not None and exc.errno in WRITE_FAILURES:
            # a write that failed (a full disk, a quota): the file it was for, left as it was (atomic_file)
            print(f"costlab: error: cannot write {exc.filename}: {exc.strerror}; it is as it was", file=sys.stderr)
            return 2
        raise
    except KeyboardInterrupt as exc:
        print("costlab: interrupted; data written before is kept", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    except Exception:
        if not _TERMINATED:
            raise
        # Ctrl-C or SIGTERM raised inside a Python function TVM called (a builder's or runner's wait for its
        # workers) comes back as TVM's error: it is the interruption still
        print("costlab: interrupted; data written before is kept", file=sys.stderr)
        import signal

        return 143 if _TERMINATED[-1] == signal.SIGTERM else 130
    finally:
        if previous is not None:
            import signal

            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _exit_now_if_hdf5_failed(code: int) -> None:
    """After HDF5 failed to write a transaction's file (a full disk) its library state cannot be cleaned up
    without a crash: the transaction is undone already, so the process ends here, skipping that clean-up."""
    if abandoned_files():
        import os

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _terminate_as_interrupt():
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        _TERMINATED.append(signum)
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    _TERMINATED.clear()
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, handler)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not a background job's ignored SIGINT
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, handler)
    return previous


_TERMINATED: list = []  # the Ctrl-C or SIGTERM that arrived during the command (main's handler)


if __name__ == "__main__":
    sys.exit(main())
