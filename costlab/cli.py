"""The ``costlab`` command line: ``costlab <command> [<subcommand>] ...``; ``--help`` at every level."""

from __future__ import annotations

import argparse
import sys

from costlab import __version__
from costlab.commands import dataset as dataset_cmd
from costlab.commands import featurize as featurize_cmd
from costlab.commands import train as train_cmd

COMMANDS = [dataset_cmd, featurize_cmd, train_cmd]


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
    from costlab.datasets.errors import CostlabError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CostlabError as exc:
        print(f"costlab: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into a reader that stopped early (e.g. `| head`)
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("costlab: interrupted; data written before is kept", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
