"""Regenerate tests/fixtures/ms_tune_db/: a tiny MetaSchedule database left by ``tune_tir``.

Two small te_workload tasks (a 16x16x16 matmul and a 1x6x6x4 -> 4 conv2d), 8 trials each, on
``llvm -num-cores=2``. Run it under the CPU lock (it builds and measures):

    flock /tmp/costlab-cpu.lock .venv/bin/python scripts/make_ms_database.py tests/fixtures/ms_tune_db
"""

import shutil
import sys
import tempfile
from pathlib import Path

import tvm
from tvm import te
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.testing import te_workload


def _preload_intrinsics() -> None:
    # MetaSchedule's default build imports tvm.s_tir.tensor_intrin in the builder worker on its first
    # job, which takes 10-25 s here and counts against the build timeout: most builds of a fresh worker
    # pool then "time out". Importing it in the pool's initializer (which has no timeout) avoids that.
    from costlab.metaschedule import intrinsics

    intrinsics.load("all")


def main(out: str) -> None:
    out_dir = Path(out)
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    funcs = {
        "matmul": te.create_prim_func(te_workload.matmul(16, 16, 16)),
        "conv2d": te.create_prim_func(te_workload.conv2d_nhwc(1, 6, 6, 4, 4, 3, 1, 1)),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, func in funcs.items():
            ms.tune_tir(
                func, target, work_dir=f"{tmp}/{name}", max_trials_global=8, num_trials_per_iter=8,
                cost_model="random", seed=1, num_tuning_cores=2,
                builder=ms.builder.LocalBuilder(initializer=_preload_intrinsics),
            )
        # One database holding both tasks: concatenate the workload tables and re-index the records.
        out_dir.mkdir(parents=True, exist_ok=True)
        workloads, records = [], []
        for name in funcs:
            w = Path(f"{tmp}/{name}/database_workload.json").read_text().splitlines()
            base = len(workloads)
            workloads += w
            for line in Path(f"{tmp}/{name}/database_tuning_record.json").read_text().splitlines():
                idx, rest = line[1:].split(",", 1)
                records.append(f"[{int(idx) + base},{rest}")
        (out_dir / "database_workload.json").write_text("".join(x + "\n" for x in workloads))
        (out_dir / "database_tuning_record.json").write_text("".join(x + "\n" for x in records))
    print(f"{out_dir}: {len(workloads)} workloads, {len(records)} records")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/ms_tune_db")
