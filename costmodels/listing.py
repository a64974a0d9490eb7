"""``costlab models``: the models shipped with costlab, as a table (one line per model, the way model hubs
list checkpoints) or as their raw records (``--json``).

A row is what a user picks a model by: its name (what ``--model NAME`` takes), kind, the TVM target it was
measured on, the data it trained on (tasks / records) and its held-out top-1 beside that of the reference kind
on the same splits (``kinds.reference``: XGBoost, MetaSchedule's default cost model, the figure to beat).
Every config is read with all the checks of ``artifact.read_config``: a damaged shipped model is one error
line, not a row.
"""

from __future__ import annotations

from costlab.costmodels import kinds
from costlab.costmodels.artifact import read_config
from costlab.costmodels.shipped import aliases, shipped_names, shipped_path
from costlab.featurizers import from_json


def columns() -> tuple[str, ...]:
    """The table's columns, the last the reference kind's top-1 (``XGBOOST TOP-1``)."""
    return ("NAME", "KIND", "TARGET", "TRAINED ON", "HELD-OUT TOP-1",
            f"{kinds.create(kinds.reference()).title.upper()} TOP-1")


def shipped_models() -> list[dict]:
    """The raw record of each shipped model: name, path, kind, platforms, targets, and what its config says of
    the corpus it trained on, the training data and the held-out figures (None where it says nothing)."""
    rows = []
    alias = aliases()
    for name in shipped_names():
        path = shipped_path(name)
        c = read_config(path)
        rows.append(dict(name=name, alias_of=alias.get(name), path=str(path), kind=c["kind"], platforms=c["platforms"],
                         targets=c.get("targets"), corpus=c.get("corpus"), data=c.get("data"),
                         held_out=c.get("held_out"), featurizer=c.get("featurizer")))
    return rows


def target_text(target) -> str:
    """A target JSON as TVM writes the target on a command line (``llvm -mcpu=emeraldrapids -num-cores=2``),
    its keys and empty tag left out."""
    if not isinstance(target, dict):
        return "?" if target is None else str(target)
    words = [str(target.get("kind", "?"))]
    for key in sorted(target):
        value = target[key]
        if key in ("kind", "keys", "tag") or value in (None, "", [], {}):
            continue
        words.append(f"-{key}={','.join(map(str, value)) if isinstance(value, list) else value}")
    return " ".join(words)


def trained_on(row: dict) -> str:
    """``162 tasks / 10,245 records``: the corpus the model trained on, else its training dataset."""
    corpus, data = row.get("corpus") or {}, row.get("data") or {}
    tasks, records = corpus.get("tasks"), corpus.get("records")
    if tasks is None and records is None:
        tasks = data.get("tasks")
        per_platform = data.get("records")
        records = sum(per_platform.values()) if isinstance(per_platform, dict) and per_platform else None
    parts = [f"{tasks:,} tasks" if isinstance(tasks, int) else None,
             f"{records:,} records" if isinstance(records, int) else None]
    return " / ".join(p for p in parts if p) or "-"


def held_out_top1(row: dict, model: str) -> str:
    """The mean held-out top-1 of ``model`` (the row's own kind, or the reference kind) as its config records
    it."""
    mean = (row.get("held_out") or {}).get("mean") or {}
    value = (mean.get(model) or {}).get("top1")
    return f"{value:.3f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def older_features(featurizer) -> str | None:
    """What a model's features lack of this costlab's (it learned them before a fix that changed some programs'
    features: a featurizer's revision), or None when it learned this costlab's own."""
    if not isinstance(featurizer, dict):
        return None
    made = from_json(featurizer)
    learned, now = made.trained_revision, made.revision
    if learned == now:
        return None
    was = "of a revision it does not record" if learned is None else f"of revision {learned}"
    return (f"learned {made.name} features {was}; this costlab computes revision {now} (fixes that change some "
            f"programs' features, listed beside {type(made).__module__}.{type(made).__name__}.revision)")


def models_table(rows: list[dict]) -> str:
    """The rows as an aligned table, with a line saying what the held-out figures are."""
    if not rows:
        return "no shipped models"
    heads, reference = columns(), kinds.reference()
    cells = [heads] + [(r["name"] + (f" = {r['alias_of']}" if r.get("alias_of") else ""), r["kind"],
                        ", ".join(target_text((r.get("targets") or {}).get(p)) for p in r["platforms"]) or "-",
                        trained_on(r), held_out_top1(r, r["kind"]), held_out_top1(r, reference)) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(heads))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in cells]
    lines.append("")
    for r in rows:
        if r.get("alias_of"):
            lines.append(f"{r['name']} is {r['alias_of']} now; every version stays loadable by its versioned name")
            continue
        held = r.get("held_out") or {}
        if held.get("mean"):
            splits = held.get("splits") or []
            how = f", {held['held_out']}" if held.get("held_out") else ""
            over = f"the mean over {len(splits) or 'its'} splits{how}" if len(splits) != 1 else \
                (held.get("held_out") or f"on split {splits[0]}")
            lines.append(f"{r['name']}: held-out top-1 is {over}")
        lines += [f"{r['name']}: {older}" for older in [older_features(r.get("featurizer"))] if older]
    lines.append("use a model by name (--model NAME); costlab models --json prints every figure")
    return "\n".join(lines)
