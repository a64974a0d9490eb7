"""Errors raised on bad input, each naming the file (and line or record) and what is wrong."""

from __future__ import annotations


class CostlabError(Exception):
    """Base class of errors the command line reports as one clear line (exit code 2)."""


class InputError(CostlabError):
    """Bad input: a file that is missing, empty, malformed or of the wrong kind.

    ``path`` and ``line`` (1-based) locate the problem; ``record`` names a record when there is no line.
    """

    def __init__(self, path, message: str, line: int | None = None, record: str | None = None):
        self.path = str(path)
        self.line = line
        self.record = record
        self.message = message
        where = self.path
        if line is not None:
            where += f":{line}"
        if record is not None:
            where += f" (record {record})"
        super().__init__(f"{where}: {message}")


class DatasetFormatError(InputError):
    """A file that is not a costlab dataset, or one written by a newer schema."""


class UsageError(CostlabError):
    """A command asked for something that cannot be done as asked (a missing cache, a bad option value)."""


def require_seconds(option: str, seconds) -> None:
    """Refuse a time limit that is not a positive, finite number of seconds (a NaN compares false with every
    bound and would let a build run forever), naming the option."""
    if not (isinstance(seconds, (int, float)) and seconds > 0 and seconds != float("inf")):
        raise UsageError(f"{option} must be a positive number of seconds, not {seconds}")


def last_line(exc: BaseException) -> str:
    """What an exception says, on one line: the last non-empty line of its message (TVM's errors put the
    frames of a C++ traceback first and what went wrong last), or its type's name when it says nothing."""
    text = str(exc).strip()
    return text.splitlines()[-1].strip() if text else type(exc).__name__
