"""Names that become HDF5 paths (platform ids, split names): one rule for all of them.

A name is used as one component of a path inside the dataset file (``/records/<platform>``,
``/splits/<name>``). Anything that h5py would read as a path of its own (``/records``, ``a/b``, ``.``, ``""``)
would reach other groups of the file, so names are checked before any group is opened by them.
"""

from __future__ import annotations

import re

from costlab.common.errors import UsageError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def check_name(name, what: str, example: str) -> str:
    """``name`` if it is a plain name (letters, digits and ``. _ + -``, starting with a letter or digit)."""
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > 200:
        raise UsageError(f"bad {what} {name!r}: use letters, digits and . _ + - (e.g. {example!r})")
    return name


def check_platform_id(pid: str) -> str:
    return check_name(pid, "platform id", "x86-avx2-2c")
