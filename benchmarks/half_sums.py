"""How far a correct float16 program's output lies from the reference's when both sum in a float16 accumulator in
another order, against the output check's tolerance (``export/check.py``: ``close`` with and without the sum's
length, ``narrow_sum_rtol`` of ``structure.narrow_float_sums``), and how far a wrong program's lies.

Per sum length n: the reference is the unscheduled 16x16 matmul over n values (float16 in, float16 accumulator);
the correct programs are it with the reduction split into 4 and 16 partial sums (rfactor), the wrong one sums
only the first 15/16 of the values. Each is built for this CPU and run on ``--seeds`` draws of uniform(-1, 1)
inputs. Printed per program: the largest difference over the output's largest value (its least and its worst
over the seeds), and
on how many seeds the check accepts it with the fixed float16 tolerance (no ``narrow_rtol``, the check before)
and with the length's tolerance. No timing: the host is recorded for the record only.

    .venv/bin/python benchmarks/half_sums.py --json benchmarks/results/half-sums-zen4.json
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

from costlab.common.files import write_atomically
from costlab.common.host import describe_host, host_info

LENGTHS = [1024, 4096, 16384, 65536]


def _gmm(n: int, used: int):
    import tvm
    from tvm import te

    a, b = te.placeholder((16, n), "float16", name="A"), te.placeholder((n, 16), "float16", name="B")
    k = te.reduce_axis((0, used), name="k")
    z = te.compute((16, 16), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="Z")
    return tvm.IRModule({"main": te.create_prim_func([a, b, z])})


def _rfactor(mod, parts: int):
    import tvm

    sch = tvm.s_tir.Schedule(mod)
    _outer, inner = sch.split(sch.get_loops(sch.get_sblock("Z"))[-1], [None, parts])
    sch.rfactor(inner, 0)
    return sch.mod


def _length(n: int, seeds: int, target) -> list[dict]:
    import tvm

    from costlab.export.check import close, narrow_sum_rtol
    from costlab.metaschedule.structure import narrow_float_sums

    reference = _gmm(n, n)
    programs = {"rfactor 4": _rfactor(reference, 4), "rfactor 16": _rfactor(reference, 16),
                "wrong: 15/16 of the sum": _gmm(n, n - n // 16)}
    libs = {name: tvm.compile(mod, target=target) for name, mod in [("reference", reference), *programs.items()]}
    narrow = narrow_sum_rtol(narrow_float_sums(reference))
    rows = {name: dict(n=n, program=name, least=math.inf, worst=0.0, before=0, now=0) for name in programs}
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        inputs = [rng.uniform(-1, 1, (16, n)).astype("float16"), rng.uniform(-1, 1, (n, 16)).astype("float16")]

        def run(lib):
            args = [tvm.runtime.tensor(x) for x in inputs] + [tvm.runtime.tensor(np.zeros((16, 16), "float16"))]
            lib["main"](*args)
            return args[-1].numpy()

        expected = run(libs["reference"])
        scale = float(np.abs(expected.astype(np.float64)).max())
        for name, row in rows.items():
            got = run(libs[name])
            diff = float(np.abs(got.astype(np.float64) - expected.astype(np.float64)).max()) / scale
            row["worst"], row["least"] = max(row["worst"], round(diff, 5)), min(row["least"], round(diff, 5))
            row["before"] += bool(close(expected, got))  # seeds accepted
            row["now"] += bool(close(expected, got, narrow))
    return list(rows.values())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--json", help="write the rows and the host here")
    args = ap.parse_args(argv)
    import tvm

    from costlab.export.check import reference_cpu_target

    target = tvm.target.Target(reference_cpu_target())
    rows = []
    print(f"{'n':>6} {'program':<24} {'diff/scale: least':>17} {'worst':>7} {'seeds accepted: fixed':>16} "
          f"{'length tolerance':>17}")
    for n in LENGTHS:
        for row in _length(n, args.seeds, target):
            rows.append(row)
            print(f"{n:>6} {row['program']:<24} {row['least']:>17.4f} {row['worst']:>7.4f} {row['before']:>13}/{args.seeds:<2} "
                  f"{row['now']:>14}/{args.seeds:<2}")
    if args.json:
        write_atomically(args.json, json.dumps(dict(host=host_info(), seeds=args.seeds, rows=rows), indent=1).encode())
    print(describe_host(host_info()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
