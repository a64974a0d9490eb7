"""One dataset holding every CPU's records the project has: Emerald Rapids (``corpus/``: random samples of the
design space) and AMD Zen 5 (``corpus/trajectories/llvm-znver5-2c``: tuning trajectories). The first pack is
unpacked; each further one is unpacked, exported as a MetaSchedule database and imported into the first with
its own host record, so that every platform keeps its CPU (and the features their own spec).

Used by ``loco.py`` (leave one CPU out) and ``learning_curve.py`` (the ``both`` kind).
"""

from __future__ import annotations

import json
from pathlib import Path

from costlab.cli import main
from costlab.datasets import open_dataset

ROOT = Path(__file__).resolve().parent.parent
EMR, ZEN5 = "llvm-emeraldrapids-2c", "llvm-znver5-2c"
PLATFORMS = {EMR: ROOT / "corpus", ZEN5: ROOT / "corpus" / "trajectories" / ZEN5}


def build(out: Path, name: str = "cpus.h5", featurizer: str | None = None) -> Path:
    """``out/name`` with every platform of ``PLATFORMS`` (rebuilt only when missing); ``featurizer``: its
    features cached for every platform as well."""
    data = out / name
    if data.exists():
        return data
    out.mkdir(parents=True, exist_ok=True)
    tmp = data.with_suffix(".h5.tmp")
    tmp.unlink(missing_ok=True)
    first, *rest = PLATFORMS.items()
    if main(["dataset", "unpack", str(first[1]), "-o", str(tmp)]) != 0:
        raise SystemExit(f"error: unpacking {first[1]} failed")
    for pid, packed in rest:
        part = out / f"{pid}.h5"
        part.unlink(missing_ok=True)
        if main(["dataset", "unpack", str(packed), "-o", str(part)]) != 0:
            raise SystemExit(f"error: unpacking {packed} failed")
        with open_dataset(part) as ds:
            host = ds.platforms[pid].host
        (out / f"{pid}.host.json").write_text(json.dumps(host))
        if main(["dataset", "export-ms", str(part), "--platform", pid, "-o", str(out / f"{pid}.ms")]) != 0:
            raise SystemExit(f"error: exporting {pid} failed")
        if main(["dataset", "import-ms", str(out / f"{pid}.ms"), "-o", str(tmp), "--platform", pid,
                 "--host", str(out / f"{pid}.host.json")]) != 0:
            raise SystemExit(f"error: importing {pid} failed")
    if featurizer and main(["featurize", str(tmp), "--featurizer", featurizer, "--no-progress"]) != 0:
        raise SystemExit("error: featurizing failed")
    tmp.replace(data)
    return data
