"""What a resumable benchmark's runs were made under (``OUT/benchmark.json``): the host, the target and the model
(its versioned name and weights' hash). A benchmark continued in the same ``--out`` must match it, so that the
seeds and arms of one table are never runs of two machines, targets or models (an alias such as ``x86-cpu``
moves on to a new version between sessions: the runs keep the version they were made with)."""

from __future__ import annotations

import json
from pathlib import Path

from costlab.common.files import write_atomically
from costlab.common.host import describe_host, host_difference, same_host

FILE = "benchmark.json"


def check_identity(out: Path, target_text: str, model: str | None) -> str | None:
    """Record, or check against the record, the benchmark's host, target and model; returns the model's
    versioned name (what the runs must be given). SystemExit, naming what differs, for another one's."""
    from costlab.costmodels.predictors import pinned_name, weights_sha256  # lazy: pulls torch
    from costlab.metaschedule.targets import measuring_host, runnable_target

    target = runnable_target(target_text)
    mine = dict(host=measuring_host(target), target=target, model=pinned_name(model) if model else None,
                model_sha256=weights_sha256(model) if model else None)
    path = Path(out) / FILE
    if path.exists():
        old = json.loads(path.read_text())
        if not same_host(old.get("host") or {}, mine["host"]):
            raise SystemExit(f"{out} holds a benchmark of another host ({describe_host(old.get('host') or {})}; "
                             f"{host_difference(old.get('host') or {}, mine['host'])}): use another --out")
        for key in ("target", "model_sha256"):
            if (old.get(key) or mine[key]) and old.get(key) != mine[key]:
                raise SystemExit(f"{out} holds a benchmark of another {key.split('_')[0]} ({str(old.get(key))[:80]}, "
                                 f"not {str(mine[key])[:80]}): give the one it ran with, or use another --out")
        mine["host"] = old["host"]  # the identity is the host's, whatever its clock now
    else:  # an --out of runs made before it recorded one: their done.json say which weights they ran with
        ran = {json.loads(p.read_text()).get("model_sha256") for p in Path(out).glob("runs/**/done.json")} - {None}
        if ran and ran != {mine["model_sha256"]}:
            raise SystemExit(f"{out} holds runs of other weights ({', '.join(sorted(x[:12] for x in ran))}), not "
                             f"{mine['model']}'s: give the --model they ran with, or use another --out")
    Path(out).mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(mine, indent=1).encode())
    return mine["model"]


def check_measuring_host(out: Path, target=None, doing: str = "measuring here") -> tuple[dict, dict]:
    """``(record, here)``: the benchmark's record (``OUT/benchmark.json``, {} for none) and this machine as the host
    that measures ``target`` (by default the record's target; with the GPU it runs on). SystemExit when the record
    names another host: what is ``doing`` (a final re-measured or retimed, OpenBLAS) would be compared with another
    machine's runs."""
    from costlab.metaschedule.targets import measuring_host  # lazy: pulls tvm

    path = Path(out) / FILE
    meta = json.loads(path.read_text()) if path.exists() else {}
    here = measuring_host(target if target is not None else meta.get("target") or {})
    if meta.get("host") and not same_host(meta["host"], here):
        raise SystemExit(f"error: {out}'s runs were measured on {describe_host(meta['host'])}; this host is "
                         f"{describe_host(here)} ({host_difference(meta['host'], here)}): {doing} would compare two "
                         "machines")
    return meta, here
