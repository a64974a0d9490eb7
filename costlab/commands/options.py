"""Checked option values for every command: argparse ``type=`` functions that refuse a bad value with a
``UsageError`` naming the option, so that the command line answers it in one ``costlab: error:`` line (exit 2).

A ``UsageError`` is not a ``ValueError``, so argparse does not turn it into its own usage message: it leaves
``parse_args`` and ``costlab.cli.main`` reports it like every other refusal.
"""

from __future__ import annotations

from pathlib import Path

from costlab.common.errors import UsageError
from costlab.common.files import home_expanded
from costlab.export.library.add import add_finished_run


def positive_int(option: str):
    """An integer >= 1 (counts of epochs, records per chunk, candidates, ...)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise UsageError(f"{option} must be a positive integer, not {text!r}") from None
        if value < 1:
            raise UsageError(f"{option} must be a positive integer (1 or more), not {value}")
        return value

    parse.__name__ = "positive integer"  # what argparse would call the type in its own messages
    return parse


def int_in(option: str, low: int, high: int, why: str = ""):
    """An integer from ``low`` to ``high``; the refusal states that range (``why``: what it is for, e.g.
    "a t-test needs two measurements"), so message and check always agree."""

    def parse(text: str) -> int:
        reason = f" ({why})" if why else ""
        try:
            value = int(text)
        except ValueError:
            raise UsageError(f"{option} must be an integer from {low:,} to {high:,}{reason}, not {text!r}") from None
        if not low <= value <= high:
            raise UsageError(f"{option} must be an integer from {low:,} to {high:,}{reason}, not {value}")
        return value

    parse.__name__ = "integer"
    return parse


def fraction(option: str):
    """A number strictly between 0 and 1 (NaN refused: it compares false with both bounds)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise UsageError(f"{option} must be a number between 0 and 1, not {text!r}") from None
        if not 0 < value < 1:
            raise UsageError(f"{option} must be between 0 and 1 (exclusive), not {text}")
        return value

    parse.__name__ = "fraction"
    return parse


def directory(option: str):
    """A directory to write into: it may not exist yet, but may not be an existing file."""

    def parse(text: str) -> Path:
        path = Path(home_expanded(text))
        if path.exists() and not path.is_dir():
            raise UsageError(f"{option} {text}: exists and is not a directory (give a new or existing directory)")
        return path

    parse.__name__ = "directory"
    return parse



def builder_timeout_option(q) -> None:
    """``--builder-timeout``, for every command that builds programs (its value is checked by the options it
    reaches: a NaN or a negative number is refused there, from Python too)."""
    q.add_argument("--builder-timeout", type=float, default=30.0, help="seconds per build (default 30)")


def library_options(q) -> None:
    """``--library DIR`` and ``--no-library`` of the commands whose finished runs add to the schedule library."""
    q.add_argument("--library", metavar="DIR",
                   help="the schedule library's folder the run's checked best programs are added to (default "
                   "$COSTLAB_LIBRARY, else ~/.cache/costlab/library; costlab library)")
    q.add_argument("--no-library", action="store_true", help="add nothing to the schedule library")


def add_to_library(args, summary: dict) -> None:
    """A finished run's work dir into the schedule library (unless --no-library), said on stderr and recorded in
    ``summary["library"]``."""
    import sys

    if args.no_library:
        return

    row = add_finished_run(args.work_dir, args.library, progress=not args.no_progress)
    summary["library"] = row
    print(row.get("why") or f"library: {row['added']} programs of {row['tasks']} tasks added to {row['library']}",
          file=sys.stderr)
