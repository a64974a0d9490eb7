"""``costlab featurize``: compute a featurizer's features for a dataset's records and cache them in the file."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from costlab.commands.options import positive_int
from costlab.common.errors import CostlabError, InputError
from costlab.datasets import open_dataset
from costlab.featurizers import available, create
from costlab.featurizers.base import ConfigError
from costlab.featurizers.cache import (build_cache, cached_fits, caches_of_other_fits, fitted_featurizer,
                                       length_warning, open_cache, vocabulary_warning)
from costlab.featurizers.psa.hardware import NoHardwareSpec

EPILOG = """\
The features are stored in the dataset under features/<featurizer>@<version>/<platform>/, one row per
record. A run resumes where an earlier one stopped, featurizes only records added since, and rebuilds a
platform's cache only when the featurizer's version or config changed. A featurizer that learns from data
(TLP: the vocabulary and the sequence length) is fitted once on all platforms of the dataset and keeps that
fit for later runs; --refit fits it again on all platforms and, when the fit changes, rebuilds the caches of
every platform (those --platform leaves out too, so that all keep sharing one fit).

examples:
  costlab featurize data.h5 --featurizer tlp
  costlab featurize data.h5 --featurizer tlp --platform llvm-x86_64-2c --config '{"num_slots": 20}'
"""


def register(sub) -> None:
    p = sub.add_parser(
        "featurize",
        help=f"compute and cache features of a dataset's records ({', '.join(available())})",
        description="Featurize the records of a dataset with TLP (schedule primitive tokens), PaCM\n"
        "(data-flow patterns) or PSA (static analyzer estimates) and cache the features in the dataset.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("data", type=Path, metavar="DATA.h5")
    p.add_argument("--featurizer", required=True, metavar="NAME", help=", ".join(available()))
    p.add_argument("--platform", action="append", metavar="ID",
                   help="featurize this platform's records (repeatable, or comma-separated; default: all)")
    p.add_argument("--config", metavar="JSON|@FILE",
                   help="featurizer settings as a JSON object, or @path of a JSON file (default: the defaults)")
    p.add_argument("--refit", action="store_true",
                   help="fit the featurizer's learned part (vocabulary, sequence length) again, on all platforms, "
                   "and rebuild every platform's cache made with the old fit")
    p.add_argument("--chunk", type=positive_int("--chunk"), default=256, metavar="N", help="records featurized per step")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_featurize)


def _config(text: str | None, data: Path) -> dict:
    if not text:
        return {}
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text = path.read_text()
        except OSError as exc:
            raise InputError(path, f"cannot read the featurizer config ({exc.strerror})") from None
        except UnicodeDecodeError:  # a ValueError: below it read as an unknown featurizer, the file unnamed
            raise InputError(path, "featurizer config is not UTF-8 text (a JSON file is)") from None
        where = path
    else:
        where = Path("--config")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(where, f"featurizer config is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                         line=exc.lineno) from None
    if not isinstance(value, dict):
        raise InputError(where, "featurizer config must be a JSON object ({\"key\": value, ...})")
    return value


def _config_source(text: str | None, data) -> Path:
    """Where a config came from, as its errors name it: the @file, the option itself, or without one the dataset
    (its stored cache's config, its platform's spec)."""
    if not text:
        return Path(data)
    return Path(text[1:]) if text.startswith("@") else Path("--config")


def _featurize(args) -> int:
    try:
        featurizer = create(args.featurizer, _config(args.config, args.data))
    except ConfigError as exc:  # a value of the wrong type or out of range: named against where it was given
        raise InputError(_config_source(args.config, args.data), exc.problem) from None
    except ValueError as exc:  # unknown featurizer or config key
        raise SystemExit(f"costlab featurize: {exc}") from None
    with open_dataset(args.data) as ds:
        known = ds.record_platforms()
        wanted = [p for arg in args.platform or [] for p in arg.split(",") if p] or known
        missing = [p for p in wanted if p not in known]
        if missing:
            raise InputError(args.data, f"no records for platform {', '.join(map(repr, missing))} "
                             f"(platforms with records: {', '.join(known) or 'none'})")
        if not wanted:
            raise InputError(args.data, "the dataset has no records to featurize")
        try:
            featurizer = fitted_featurizer(ds, featurizer, refit=args.refit)
        except ValueError as exc:
            raise InputError(args.data, str(exc)) from None
        fits_then = cached_fits(ds, featurizer)  # a cache moved to another fit after this is a refit's meanwhile
        if args.refit:  # the new fit replaces the old on every platform, not only the ones asked for: the next run
            # takes its fit from any cache of these settings, so one left on the old fit would bring that fit back
            wanted = wanted + _left_on_the_old_fit(ds, featurizer, known, wanted)
    if featurizer.learned_keys:
        learned = ", ".join(f"{k} {_describe(featurizer.config[k])}" for k in featurizer.learned_keys)
        print(f"{featurizer.key}: {learned}", file=sys.stderr)
    unfeaturized, queue, late = [], list(wanted), []
    while queue:
        pid = queue.pop(0)
        try:
            s = build_cache(args.data, featurizer, pid, chunk=args.chunk, progress=not args.no_progress, fit=False,
                            refit=args.refit, fits_then=fits_then)
        except ConfigError as exc:  # a config that only this platform refuses (CPU spec fields on a GPU platform)
            raise InputError(_config_source(args.config, args.data), exc.problem) from None
        except NoHardwareSpec as exc:  # a target kind PSA models no machine of: said, and the others featurized
            print(f"costlab featurize: error: {args.data}: platform {pid!r}: {exc}; its records are not featurized",
                  file=sys.stderr)
            unfeaturized.append(pid)
            continue
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: build_cache saved the rows done; say how far that got
            _say_how_far(args.data, featurizer, pid)
            raise
        if s["computed"] == 0:
            print(f"{s['featurizer']} {pid}: {s['total']} records, cache up to date", file=sys.stderr)
        else:
            print(f"{s['featurizer']} {pid}: {s['total']} records, {s['cached_before']} cached before, "
                  f"{s['computed']} featurized in {s['seconds']:.1f} s ({s['invalid']} unreadable)",
                  file=sys.stderr)
        for warning in (vocabulary_warning(s), length_warning(s), _generic_spec_note(args.data, featurizer, pid)):
            if warning:
                print(f"costlab featurize: {warning}", file=sys.stderr)
        if args.refit and not queue:  # a platform cached on the old fit while this refit ran (a featurize that
            # took the old fit before it) is refit too, once
            with open_dataset(args.data) as ds:
                queue = _left_on_the_old_fit(ds, featurizer, known, wanted + late)
            late += queue
    return 2 if unfeaturized else 0


def _left_on_the_old_fit(ds, featurizer, known: list, skip: list) -> list:
    """The platforms (but ``skip``) whose cache of these settings is not on ``featurizer``'s fit, said on stderr."""
    left = [p for p in caches_of_other_fits(ds, featurizer) if p in known and p not in skip]
    if left:
        print(f"costlab featurize: --refit: also rebuilding {featurizer.key} on {', '.join(left)} (cached with the "
              "old fit; every platform shares one fit)", file=sys.stderr)
    return left


def _generic_spec_note(data: Path, featurizer, pid: str) -> str | None:
    """A note when a hardware-dependent featurizer (PSA, PaCM) took the generic CPU for a platform: no host is
    recorded and its -mcpu is not in PSA's table, so its caches and clock are a guess the user can replace."""
    if not hasattr(featurizer, "spec_for"):
        return None
    with open_dataset(data) as ds:
        spec = featurizer.spec_for(ds.platforms[pid])
    if not str(getattr(spec, "name", "")).startswith("generic CPU"):
        return None
    return (f"note: platform {pid!r}: {spec.name}: its features assume a generic CPU's caches and clock; "
            f"`costlab dataset set-machine {data} --platform {pid} --host FILE` (a host record of that machine) or "
            "`--spec FILE` states it")


def _say_how_far(data: Path, featurizer, pid: str) -> None:
    """After an interruption: how many of the platform's records the file's cache now holds, the point a rerun
    continues from. Read from the file, the truth whatever the interrupt cut short; nothing said when it cannot be
    read, so that the interruption is still what the command reports."""
    try:
        with open_dataset(data) as ds:
            cache = open_cache(ds, featurizer, pid)
            total = ds.num_records(pid)
    except (OSError, CostlabError):
        return
    done = cache.n_done if cache is not None else 0
    print(f"{featurizer.key} {pid}: {done} of {total} records cached; a rerun continues from there", file=sys.stderr)


def _describe(value) -> str:
    return f"of {len(value)}" if isinstance(value, (list, dict)) else str(value)
