"""Training configuration: one YAML file (or none, with defaults), every option overridable from the
command line as ``--set section.key=value``.

    model: tlp                  # tlp | pacm | mtl (TLP with one head per platform)
    data: data.h5
    split: task-s0              # a split stored in the dataset; none = train on everything
    platforms: [llvm-2c]        # label columns; the first is the target; mtl wants several
    out: runs/tlp
    seed: 0
    loss: lambdarank            # or mse
    gain_scale: 1.0             # lambdarank's gains 2^(gain_scale * score) - 1: above 1, pairs of near-best weigh more
    lr: 0.0007
    lr_schedule: constant       # or cosine (decays to 1% of lr over max_epochs)
    weight_decay: 1.0e-6
    net: {d_model: 256}         # net options (see costmodels/*_net.py); tlp/mtl: hardware_dim: 8 = a hardware input
    data_options: {list_size: 32, lists_per_batch: 16, val_fraction: 0.1, keep_fraction: {},
                   tail_lists: 0, tail_fraction: 0.25,   # tail_lists: per task and epoch, lists of its best programs
                   row_platforms: [], hardware_jitter: 0.0,  # several CPUs' records as rows, each labelled on its
                                # own platform; jitter: log2 noise on the hardware vector's caches and clock
                   mtl_rows: union}  # mtl: every program any platform measured (union), or base_platform's alone
    trainer: {max_epochs: 50, gradient_clip_val: 0.5, accelerator: auto, devices: auto, strategy: auto}
    momentum: null              # MoA fine-tuning: EMA factor (0.99) of the momentum copy
    momentum_every: 1           # epochs per momentum round
    init_from: null             # checkpoint or pretrained model to start from (fine-tuning)
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from costlab.common.checks import coerce
from costlab.common.errors import InputError, UsageError
from costlab.common.files import home_expanded
from costlab.costmodels import kinds

LR_SCHEDULES = ("constant", "cosine")

DEFAULTS = {
    "model": "tlp",
    "data": None,
    "split": None,
    "platforms": [],
    "out": "runs/model",
    "seed": 0,
    "loss": "lambdarank",
    "gain_scale": 1.0,
    "lr": 7e-4,
    "lr_schedule": "constant",
    "weight_decay": 1e-6,
    "net": {},
    "data_options": {"list_size": 32, "lists_per_batch": 16, "val_fraction": 0.1, "keep_fraction": {},
                     "num_workers": 0, "tail_lists": 0, "tail_fraction": 0.25, "features_in_memory_mb": 1024},
    "trainer": {"max_epochs": 50, "gradient_clip_val": 0.5, "accelerator": "auto", "devices": "auto",
                "strategy": "auto", "num_nodes": 1, "log_every_n_steps": 10},
    "momentum": None,
    "momentum_every": 1,
    "init_from": None,
}


def _merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in (extra or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def parse_override(text: str) -> tuple[list[str], object]:
    """``trainer.max_epochs=5`` -> (["trainer", "max_epochs"], 5); values are read as YAML."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise UsageError(f"override must look like section.key=value, not {text!r}")
    try:
        return key.split("."), yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise UsageError(f"--set {text}: the value is not valid YAML ({_yaml_problem(exc)})") from None


def _yaml_problem(exc) -> str:
    """PyYAML's reason for an error, in one line, with the line and column it points at."""
    problem = getattr(exc, "problem", None) or str(exc).strip().splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    return f"{problem} at line {mark.line + 1} column {mark.column + 1}" if mark is not None else problem


def read_config_file(path) -> dict:
    """The mapping a YAML training config holds; an unreadable, non-YAML or non-mapping file is an InputError."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(path, "no such training config") from None
    except IsADirectoryError:
        raise InputError(path, "is a directory, not a YAML training config") from None
    except UnicodeDecodeError:
        raise InputError(path, "not a YAML training config (not UTF-8 text)") from None
    except OSError as exc:
        raise InputError(path, f"cannot read the training config ({exc.strerror})") from None
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError(path, f"training config is not valid YAML ({_yaml_problem(exc)})",
                         line=mark.line + 1 if mark is not None else None) from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise InputError(path, f"a training config must be a YAML mapping, not a {type(loaded).__name__}")
    return loaded


def load_config(path=None, overrides=(), **named) -> dict:
    cfg = copy.deepcopy(DEFAULTS)
    if path:
        loaded = read_config_file(path)
        unknown = set(loaded) - set(DEFAULTS)
        if unknown:
            raise InputError(path, f"unknown config keys {sorted(unknown)} (known: {sorted(DEFAULTS)})")
        cfg = _merge(cfg, loaded)
    for key, value in named.items():
        if value is not None:
            cfg[key] = value
    for text in overrides:
        keys, value = parse_override(text)
        if keys[0] not in DEFAULTS:
            raise UsageError(f"unknown config key {keys[0]!r} in override {text!r}")
        node = cfg
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise UsageError(f"override {text!r}: {k} is not a section")
        node[keys[-1]] = value
    if not cfg["data"]:
        raise UsageError("no dataset: give --data DATA.h5 or `data:` in the config")
    if isinstance(cfg["platforms"], str):
        cfg["platforms"] = [p for p in cfg["platforms"].split(",") if p]
    return check_config(cfg)


# Every value with a meaning costlab knows is checked here, whether it came from the YAML file or --set, so
# that a wrong type or range is one clear line, never a traceback from torch or Lightning (or, for
# trainer.max_epochs, Lightning's -1 = "never stop"). (checker, what it must be) per dotted key; the model
# kinds are the registry's (costmodels/kinds.py) as it is when the config is checked.
LOSSES = ("lambdarank", "mse")
MTL_ROWS = ("union", "base")  # a multi-head model's rows (train/data.py)


def _positive(x):
    return x > 0


def _non_negative(x):
    return x >= 0


CHECKS = {
    "model": (str, lambda x: x in kinds.trainable(), lambda: f"one of {', '.join(kinds.trainable())}"),
    "loss": (str, lambda x: x in LOSSES, f"one of {', '.join(LOSSES)}"),
    "lr_schedule": (str, lambda x: x in LR_SCHEDULES, f"one of {', '.join(LR_SCHEDULES)}"),
    "gain_scale": (float, _positive, "a positive number"),
    "seed": (int, lambda x: 0 <= x < 2**32, "an integer from 0 to 2^32 - 1"),
    "lr": (float, _positive, "a positive number"),
    "weight_decay": (float, _non_negative, "a number >= 0"),
    "momentum": (float, lambda x: 0 < x < 1, "a number between 0 and 1 (exclusive), or null"),
    "momentum_every": (int, _positive, "a positive integer"),
    "trainer.max_epochs": (int, _positive, "a positive integer"),
    "trainer.num_nodes": (int, _positive, "a positive integer"),
    "trainer.log_every_n_steps": (int, _positive, "a positive integer"),
    "trainer.gradient_clip_val": (float, _non_negative, "a number >= 0, or null"),
    # a list of one program ranks nothing, and training draws none: list_size 1 would be a run of no step
    "data_options.list_size": (int, lambda x: x >= 2, "an integer >= 2 (a ranking list of two programs or more)"),
    "data_options.lists_per_batch": (int, _positive, "a positive integer"),
    "data_options.val_fraction": (float, lambda x: 0 <= x < 1, "a number from 0 to 1 (1 excluded)"),
    "data_options.num_workers": (int, _non_negative, "an integer >= 0"),
    "data_options.features_in_memory_mb": (float, _non_negative, "a number >= 0 (MB)"),
    "data_options.tail_lists": (int, _non_negative, "an integer >= 0"),
    "data_options.tail_fraction": (float, lambda x: 0 < x <= 1, "a number above 0, at most 1"),
    "data_options.hardware_jitter": (float, _non_negative, "a number >= 0 (log2 units)"),
    "data_options.mtl_rows": (str, lambda x: x in MTL_ROWS, f"one of {', '.join(MTL_ROWS)}"),
}
NULLABLE = {"momentum", "trainer.gradient_clip_val"}
SECTIONS = ("net", "data_options", "trainer")


def _check_keep_fraction(options: dict) -> None:
    """``data_options.keep_fraction``: {platform id: fraction of its labels kept}, each fraction in (0, 1]
    (converted to a float in place). Whether the ids are platforms of the run is checked once the dataset is
    open (train/fit.py)."""
    keep = options.get("keep_fraction")
    if keep is None:
        options["keep_fraction"] = {}
        return
    if not isinstance(keep, dict):
        raise UsageError(f"data_options.keep_fraction must be a mapping {{platform id: fraction of its labels kept}}, "
                         f"not {keep!r}")
    for platform, value in keep.items():
        try:
            fraction = coerce(value, float, f"data_options.keep_fraction.{platform}")
        except ValueError:
            fraction = None
        if not isinstance(platform, str) or fraction is None or not 0 < fraction <= 1:
            raise UsageError(f"data_options.keep_fraction must map platform ids to numbers above 0, at most 1, not "
                             f"{platform!r}: {value!r}")
        keep[platform] = fraction


def _check_max_time(trainer: dict) -> None:
    """``trainer.max_time``: Lightning's duration, text ``DD:HH:MM:SS`` or a mapping of ``days``, ``hours``,
    ``minutes``, ``seconds``. A number (``max_time=5``, or ``1:00:00:00``, which YAML reads as a base-60 integer)
    reached Lightning's Timer as an int: an AttributeError traceback."""
    value = trainer.get("max_time")
    if value is None or isinstance(value, (str, dict)):
        return  # Lightning checks the text and the mapping's keys itself, in one line (trainer options: ...)
    raise UsageError(f"trainer.max_time must be a duration as text 'DD:HH:MM:SS' (quoted in YAML, which reads "
                     f"1:00:00:00 as a number) or a mapping such as {{minutes: 30}}, not {value!r}")


def check_config(cfg: dict) -> dict:
    """``cfg`` with every known value checked and numbers converted (``lr: 1e-3`` is text to YAML)."""
    for section in SECTIONS:
        if not isinstance(cfg.get(section), dict):
            raise UsageError(f"{section} must be a mapping of options, not {cfg.get(section)!r}")
    for key, (kind, ok, what) in CHECKS.items():
        node, _, name = key.rpartition(".")
        holder = cfg[node] if node else cfg
        if name not in holder or (holder[name] is None and key in NULLABLE):
            continue
        value = holder[name]
        try:
            converted = coerce(value, kind, key)
        except ValueError:
            converted = None
        if converted is None or not ok(converted):
            raise UsageError(f"{key} must be {what() if callable(what) else what}, not {value!r}")
        holder[name] = converted
    if "heads" in cfg["net"]:  # net_config_for sets it; given twice, it would be a TypeError
        raise UsageError("net.heads is not an option: a net has one head, or (mtl) one per platform of platforms")
    _check_keep_fraction(cfg["data_options"])
    _check_max_time(cfg["trainer"])
    if not isinstance(cfg["platforms"], list) or not all(isinstance(p, str) for p in cfg["platforms"]):
        raise UsageError(f"platforms must be a list of platform ids, not {cfg['platforms']!r}")
    for key in ("data", "out", "split", "init_from"):
        if cfg[key] is not None and not isinstance(cfg[key], str):
            cfg[key] = str(cfg[key])
    for key in ("data", "out", "init_from"):  # `data: ~/d.h5` in a config, `--set init_from=~/m`: no shell expands them
        cfg[key] = home_expanded(cfg[key])
    return cfg
