"""Checks of option values against the types of the dataclass that takes them (net configs, data options).

One rule for every options dataclass: an unknown key, or a value of the wrong type for a field annotated
``int``, ``float``, ``bool``, ``str``, ``list`` or ``dict`` (optionally ``| None``), is refused with a
``ValueError`` that names the key, before the value reaches torch or Lightning (where it would surface as
an unrelated traceback). Numbers given as text (YAML reads ``1e-3`` as a string) are converted.
"""

from __future__ import annotations

import dataclasses
import math
import typing

_SIMPLE = {"int": int, "float": float, "bool": bool, "str": str, "list": list, "dict": dict}


def _kinds(annotation) -> tuple[set, bool]:
    """The simple types an annotation (a string under ``from __future__ import annotations``) allows, and
    whether it allows None; an empty set means "not checked"."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    parts = [p.strip() for p in text.split("|")]
    optional = "None" in parts
    kinds = {_SIMPLE[p] for p in parts if p in _SIMPLE}
    if len(kinds) + optional != len(parts):  # a type this check does not know: leave it to the dataclass
        return set(), optional
    return kinds, optional


def coerce(value, kind, key: str):
    """``value`` as ``kind`` (int, float, bool, str, list or dict), or ValueError naming ``key``."""
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
    elif kind is float:
        number = value
        if isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                number = None
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            if math.isfinite(number):
                return float(number)
            raise ValueError(f"{key} must be a finite number, not {value!r}")
    elif isinstance(value, kind):
        return value
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string", list: "a list",
             dict: "a mapping"}
    raise ValueError(f"{key} must be {names[kind]}, not {value!r}")


def check_fields(cls, values: dict, what: str, reserved=()) -> dict:
    """``values`` checked (and numbers converted) against the fields of dataclass ``cls``; ``what`` prefixes
    the keys in messages (e.g. ``net`` gives ``net.d_model``). Fields in ``reserved`` are set by the caller
    from elsewhere and are not options."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in reserved}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(f"unknown {what} option{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(f'{what}.{k}' for k in unknown)} (known: {', '.join(sorted(fields))})")
    hints = typing.get_type_hints(cls) if not all(isinstance(f.type, str) for f in fields.values()) else {}
    out = {}
    for key, value in values.items():
        kinds, optional = _kinds(hints.get(key, fields[key].type))
        if value is None and optional or not kinds:
            out[key] = value
            continue
        errors = []
        for kind in sorted(kinds, key=lambda k: k is not bool):  # bool before int: True is an int too
            try:
                out[key] = coerce(value, kind, f"{what}.{key}")
                break
            except ValueError as exc:
                errors.append(str(exc))
        else:
            raise ValueError(errors[0] if len(errors) == 1 else f"{what}.{key} has the wrong type: {value!r}")
    return out
