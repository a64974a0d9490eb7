"""TLP featurizer on real records: Ansor logs, a MetaSchedule tuning database, sampled GPU traces."""

from __future__ import annotations

import json
import math

import numpy as np
import orjson
import pytest

from conftest import FIXTURES
from costlab.datasets import open_dataset
from costlab.datasets.ansor_log import import_ansor
from costlab.datasets.ms_database import import_ms
from costlab.featurizers import create, from_json
from costlab.featurizers.tlp import PAD, TLPFeaturizer, UNK, tokens_of
from costlab.featurizers.tlp_tokens import ansor_tokens, ms_tokens

ANSOR = FIXTURES / "ansor"
BERT = ANSOR / "2080ti-bert-B1-head128.json"  # cuda -model=2080ti
MLP = ANSOR / "platinum-8358-MLP1-B256-head128.json"  # llvm -mcpu=icelake-server
MS_DB = FIXTURES / "ms_tune_db"  # tune_tir of a 16x16x16 matmul and a small conv2d, 8 trials each
SAMPLED = FIXTURES / "tlp" / "sampled_traces.jsonl"


def L(x):
    """The log scaling of the numeric slots."""
    return math.copysign(math.log1p(abs(x)), x)


@pytest.fixture(scope="module")
def ansor_ds(tmp_path_factory):
    path = tmp_path_factory.mktemp("tlp") / "ansor.h5"
    import_ansor([BERT, MLP], path, progress=False)
    return path


@pytest.fixture(scope="module")
def ms_ds(tmp_path_factory):
    path = tmp_path_factory.mktemp("tlp") / "ms.h5"
    import_ms([MS_DB], path, progress=False)
    return path


def _ms_traces():
    lines = (MS_DB / "database_tuning_record.json").read_bytes().splitlines()
    return [orjson.loads(line)[1][0] for line in lines]


def _sampled():
    return {r["task"]: r["trace"] for r in map(orjson.loads, SAMPLED.read_bytes().splitlines())}


# --- tokens ------------------------------------------------------------------------------------------

def test_ansor_steps_of_a_real_record():
    steps = orjson.loads(MLP.read_bytes().splitlines()[0])["i"][1][1]
    toks = ansor_tokens(steps)
    assert [k[0] for k, _ in toks] == ["SP", "SP", "SP", "RE", "FSP", "FSP", "RE", "CA", "FU", "AN:parallel",
                                       "PR:auto_unroll_max_step", "AN:vectorize"]
    nums = [n for _, n in toks]
    assert nums[0] == [2, 0, 256, 1, 3, 2, 64, 1]  # stage, iter, extent, inner_to_outer, 3 lengths
    assert nums[3] == [2, 10, 0, 4, 1, 5, 8, 2, 6, 9, 3, 7]
    # FollowSplit of step 0 ([2, 64, 1]) into 2: its first length, then the product of the rest
    assert nums[4] == [3, 0, 0, 2, 2, 64]
    assert nums[5] == [3, 3, 1, 2, 1, 128]  # follows step 1 ([1, 16, 8])
    assert nums[7] == [2, 3, 3]
    assert nums[8] == [3, 4, 0, 1, 2, 3]
    assert nums[9] == [3, 0, 3] and nums[10] == [2, 0, 16] and nums[11] == [2, 9, 2]
    # the logged form [[], steps] reads the same as the bare step list
    assert ansor_tokens([[], steps]) == toks


def test_ansor_gpu_steps_follow_fused_splits_and_cache_scopes():
    for line in BERT.read_bytes().splitlines():
        steps = orjson.loads(line)["i"][1][1]
        if any(s[0] == "FFSP" for s in steps):
            break
    toks = ansor_tokens(steps)
    keys = {k[0] for k, _ in toks}
    assert "CHR:shared" in keys and "AN:threadIdx.x" in keys
    for (k, nums), step in zip(toks, steps):
        if step[0] == "FFSP":
            srcs, level = step[3], step[4]
            assert nums[-1] == math.prod(steps[s][4][level] for s in srcs)


def test_ms_trace_decisions_folded_and_ordinals():
    trace = _ms_traces()[0]  # the matmul record printed in docs/featurizers.md
    toks = ms_tokens(trace)
    assert [k[0] for k, _ in toks] == [
        "Annotate:meta_schedule.tiling_structure=SSRSRS", "Split", "Split", "Split", "Reorder",
        "Annotate:meta_schedule.parallel", "Annotate:meta_schedule.vectorize",
        "Annotate:meta_schedule.unroll_explicit", "Fuse", "Parallel", "Fuse", "Vectorize",
        "Annotate:pragma_auto_unroll_max_step", "Annotate:pragma_unroll_explicit", "DecomposeReduction"]
    nums = [n for _, n in toks]
    # Split: outputs, the loop (ordinal), the tile factors SamplePerfectTile decided, then the attrs
    assert nums[1] == [4, 0, 1, 1, 4, 4, 1, 0]
    assert nums[2] == [4, 1, 4, 1, 1, 4, 1, 0]
    assert nums[3] == [2, 2, 4, 4, 1, 0]
    assert nums[4] == [0, 3, 7, 4, 8, 11, 5, 9, 12, 6, 10]  # the new loops, per-trace ordinals
    assert nums[7] == [0, 1, 64]  # SampleCategorical picked index 2 of [0, 16, 64, 512]
    # loops of the dropped GetLoops still count: l28..l37 are loops 13..22, the fused one is 23
    assert nums[8] == [1, 13, 14, 15, 16, 1]
    assert nums[9] == [0, 23] and nums[12] == [0, 23, 64]
    assert nums[14] == [1, 4, 26]


def test_ms_compute_location_folded_into_compute_at():
    trace = _ms_traces()[8]  # conv2d: SampleComputeLocation decided -2 (inline) for the padding block
    assert [1 for i in trace[0] if i[0] == "SampleComputeLocation"]
    toks = ms_tokens(trace)
    (nums,) = [n for k, n in toks if k[0] == "ComputeAt"]
    dec = dict(map(tuple, trace[1]))
    loc = next(dec[i] for i, inst in enumerate(trace[0]) if inst[0] == "SampleComputeLocation")
    assert nums == [0, 0, loc, 1, -1]


def test_ms_gpu_traces_bind_scopes_and_categorical_splits():
    traces = _sampled()
    toks = ms_tokens(traces["gpu:GMM/0"])
    keys = [k[0] for k, _ in toks]
    assert {"Bind:blockIdx.x", "Bind:vthread.x", "Bind:threadIdx.x", "CacheRead:shared", "CacheWrite:local"} <= set(keys)
    fetch = [n[-1] for k, n in toks if k[0] == "Annotate:meta_schedule.cooperative_fetch"]
    assert len(fetch) == 2 and set(fetch) <= {1, 2, 3, 4}
    # softmax: Split(loop, None, v) where v is a SampleCategorical output: the chosen candidate
    trace = traces["gpu:SFM/0"]
    dec = dict(map(tuple, trace[1]))
    chosen = {i[3][0]: i[2][0][dec[n]] for n, i in enumerate(trace[0]) if i[0] == "SampleCategorical"}
    splits = [i for i in trace[0] if i[0] == "Split"]
    got = [n for k, n in ms_tokens(trace) if k[0] == "Split"]
    assert [n[2:4] for n in got] == [[-1, chosen[s[1][2]]] for s in splits]
    assert "SetScope:shared" in {k[0] for k, _ in ms_tokens(trace)}
    assert "RFactor" in {k[0] for k, _ in ms_tokens(traces["cpu:SFM/0"])}
    # list-valued annotations (software pipelining) are flattened into the numbers
    conv = traces["gpu:C2D/0"]
    (stage,) = [i[1][1] for i in conv[0] if i[0] == "Annotate" and i[2] == ["software_pipeline_stage"]]
    (nums,) = [n for k, n in ms_tokens(conv) if k[0] == "Annotate:software_pipeline_stage"]
    assert nums[2:] == stage and len(stage) == 3


def test_bookkeeping_dropped_and_configurable():
    trace = _ms_traces()[0]
    kinds = {i[0] for i in trace[0]}
    assert {"GetLoops", "GetSBlock", "EnterPostproc", "SamplePerfectTile"} <= kinds
    kept = {k[-1] for k, _ in ms_tokens(trace)}
    assert not kept & {"GetLoops", "GetSBlock", "GetChildBlocks", "EnterPostproc", "Unannotate",
                       "SamplePerfectTile", "SampleCategorical"}
    everything = ms_tokens(trace, drop=frozenset())
    assert len(everything) == len(trace[0])
    (gl,) = [n for k, n in everything if k[0] == "GetLoops"][:1]
    assert gl == [3, 0]  # GetLoops(b0) -> 3 loops


# --- featurizer --------------------------------------------------------------------------------------

def test_fit_and_arrays_on_ansor_records(ansor_ds):
    f = create("tlp")
    with open_dataset(ansor_ds) as ds:
        f.fit(ds)
        texts = {p: ds.records(p).schedules() for p in ds.record_platforms()}
        feats = {p: f.featurize_records(ds, p, np.arange(ds.num_records(p))) for p in ds.record_platforms()}
    lengths = [len(ansor_tokens(orjson.loads(t))) for ts in texts.values() for t in ts]
    assert f.config["seq_len"] == math.ceil(np.percentile(lengths, 99))
    voc = f.vocabulary
    assert voc[:2] == ["<pad>", "<unk>"] and {"SP", "FSP", "AN:vectorize", "AN:threadIdx.x", "CHR:shared"} <= set(voc)
    L_, S = f.config["seq_len"], f.config["num_slots"]
    for p, out in feats.items():
        n = len(texts[p])
        assert out["kind"].shape == (n, L_) and out["kind"].dtype == np.int32
        assert out["numeric"].shape == (n, L_, S) and out["numeric"].dtype == np.float32
        assert out["mask"].dtype == bool and out["valid"].all()
        assert (out["mask"].sum(1) == np.minimum(out["length"], L_)).all()
        assert (out["kind"][out["mask"]] > UNK).all()  # every token known: the vocabulary came from here
        assert (out["kind"][~out["mask"]] == PAD).all() and (out["numeric"][~out["mask"]] == 0).all()
    # the first MLP record, token 0 (SP): log-scaled numbers, zero-padded
    out = feats["platinum-8358"]
    first = orjson.loads(MLP.read_bytes().splitlines()[0])["i"][1][1]
    with open_dataset(ansor_ds) as ds:
        row = [i for i, t in enumerate(ds.records("platinum-8358").schedules()) if orjson.loads(t) == first][0]
    assert voc[out["kind"][row, 0]] == "SP"
    np.testing.assert_allclose(out["numeric"][row, 0, :8], [L(x) for x in [2, 0, 256, 1, 3, 2, 64, 1]], rtol=1e-6)
    assert (out["numeric"][row, 0, 8:] == 0).all()
    assert out["length"][row] == 12


def test_vocabulary_round_trip(ansor_ds, ms_ds):
    f = create("tlp")
    with open_dataset(ms_ds) as ds:
        f.fit(ds)
        a = f.featurize_records(ds, ds.record_platforms()[0], np.arange(16))
        g = from_json(json.loads(json.dumps(f.to_json())))
        b = g.featurize_records(ds, ds.record_platforms()[0], np.arange(16))
    assert isinstance(g, TLPFeaturizer) and g.config == f.config and g.fingerprint == f.fingerprint
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert set(f.learned_keys) <= set(json.loads(json.dumps(f.to_json()))["config"])
    with open_dataset(ms_ds) as ds:  # rows in any order, repeated: the same rows of the same arrays
        rows = np.array([9, 2, 2, 15, 0])
        c = f.featurize_records(ds, ds.record_platforms()[0], rows)
    for k in a:
        np.testing.assert_array_equal(c[k], a[k][rows])
    bad = f.to_json() | {"version": f.version + 1}
    with pytest.raises(ValueError, match="version"):
        from_json(bad)


def test_unknown_tokens_fall_back_never_crash(ansor_ds):
    with open_dataset(ansor_ds) as ds:
        cpu = create("tlp").fit(ds, ["platinum-8358"])  # a CPU vocabulary ...
        out = cpu.featurize_records(ds, "2080ti", np.arange(ds.num_records("2080ti")))  # ... on GPU records
        gpu_steps = [orjson.loads(t) for t in ds.records("2080ti").schedules()]
    voc = cpu.vocabulary
    assert "AN:threadIdx.x" not in voc and "AN" in voc and "CHR" not in voc
    ids = {k[0]: cpu.token_id(k) for s in gpu_steps for k, _ in ansor_tokens(s)}
    assert ids["AN:threadIdx.x"] == voc.index("AN")  # unseen annotation: the generic AN entry
    assert ids["CHR:shared"] == UNK  # unseen step kind: unknown
    assert out["valid"].all() and (out["kind"][out["mask"]] == UNK).any()
    # a MetaSchedule primitive no vocabulary has, and an unreadable schedule
    trace = _ms_traces()[0]
    trace[0].insert(3, ["SomeFuturePrimitive", ["b0", 7], ["key"], []])
    res = cpu.featurize_schedules([trace, "not json", "[1, 2", "[[7, 1]]", '{"a": 1}', "[[[1, 2]], []]"],
                                  ["ms", "ms", "ansor", "ansor", "ms", "ms"])
    assert res["kind"][0, 1] == UNK and res["numeric"][0, 1, :3].tolist() == pytest.approx([0, 0, L(7)])
    assert res["valid"].tolist() == [True, False, False, False, False, False]
    assert not res["mask"][1:].any() and (res["kind"][1:] == PAD).all()


def test_long_sequences_cut_and_masked(ms_ds):
    with open_dataset(ms_ds) as ds:
        f = create("tlp", {"max_seq_len": 10}).fit(ds)
        out = f.featurize_records(ds, ds.record_platforms()[0], np.arange(16))
        texts = ds.records(ds.record_platforms()[0]).schedules()
    assert f.config["seq_len"] == 10
    full = [len(ms_tokens(orjson.loads(t))) for t in texts]
    assert out["length"].tolist() == full and min(full) > 10
    assert out["mask"].all() and out["kind"].shape == (16, 10)


def test_not_fitted_and_bad_config():
    with pytest.raises(ValueError, match="not fitted"):
        create("tlp").featurize_schedules(["[]"], "ansor")
    with pytest.raises(ValueError, match="unknown config keys"):
        create("tlp", {"vocab": []})
    with pytest.raises(ValueError, match="dialect"):
        tokens_of("[]", "relay")


@pytest.mark.slow
def test_live_candidates_equal_their_database_records(tmp_path):
    """Candidates of MetaSchedule's evolutionary search, committed to a JSON database, imported into a dataset:
    the dataset records and the live schedules give identical features."""
    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.testing import te_workload

    from costlab.metaschedule.traces import plain_json, trace_json

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    mod = tvm.IRModule({"main": te.create_prim_func(te_workload.matmul(16, 16, 16))})
    strategy = ms.search_strategy.EvolutionarySearch(population_size=8, init_min_unmeasured=8, genetic_num_iters=1)
    ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", search_strategy=strategy,
                         task_name="mm", num_threads=1, rand_state=7)
    (tmp_path / "db").mkdir()
    db = ms.database.JSONDatabase(work_dir=str(tmp_path / "db"))
    ctx.pre_tuning(max_trials=4, num_trials_per_iter=4, design_spaces=ctx.generate_design_space(), database=db,
                   cost_model=ms.CostModel.create("random"))
    cands = ctx.generate_measure_candidates()
    assert len(cands) >= 2
    workload = db.commit_workload(mod)
    for c in cands:
        record = ms.database.TuningRecord(c.sch.trace, workload, [1e-5], target, c.args_info)
        # the trace form the database stores is what featurize_candidates reads
        assert plain_json(record.as_json()[0], bools_as_ints=True) == trace_json(c.sch.trace)
        db.commit_tuning_record(record)
    import_ms([tmp_path / "db"], tmp_path / "d.h5", progress=False)
    with open_dataset(tmp_path / "d.h5") as ds:
        pid = ds.record_platforms()[0]
        f = create("tlp").fit(ds)
        stored = [orjson.loads(s) for s in ds.records(pid).schedules()]
        live = [trace_json(c.sch.trace) for c in cands]
        order = [live.index(s) for s in stored]  # the database may reorder or dedupe
        from_records = f.featurize_records(ds, pid, np.arange(len(stored)))
    from_live = f.featurize_candidates(mod, target, [cands[i].sch for i in order])
    assert from_records.keys() == from_live.keys()
    for k in from_records:
        np.testing.assert_array_equal(from_records[k], from_live[k], err_msg=k)
    assert from_live["valid"].all() and (from_live["kind"][from_live["mask"]] > UNK).all()


def test_an_ansor_pragma_value_that_is_no_finite_number_gives_finite_features():
    """``PR`` steps carry their value after a ``$``: "inf", "nan" or "1e400" became inf or NaN features of a record
    marked valid."""
    from costlab.featurizers.tlp_tokens import ansor_tokens

    for value in ("inf", "nan", "1e400", "-inf", "16"):
        (token,) = ansor_tokens([["PR", 2, 0, f"auto_unroll_max_step${value}"]])
        assert all(math.isfinite(x) for x in token[1]), (value, token)


def test_an_ansor_record_whose_followed_splits_overflow_a_float_is_unreadable_not_a_crash(ansor_ds):
    """A damaged record's split lengths (twenty of 9e18) followed by FSP / FFSP multiply to more than a float holds:
    the batch raised OverflowError, naming no record; the record is now unreadable and the others are featurized."""
    huge = [9_000_000_000_000_000_000] * 20
    fsp = json.dumps([["SP", 2, 0, 256, huge, 1], ["FSP", 3, 0, 0, 1]])
    ffsp = json.dumps([["SP", 2, i, 256, huge, 1] for i in range(20)] + [["FFSP", 3, 0, list(range(20)), 1, 1]])
    with open_dataset(ansor_ds) as ds:
        f = create("tlp").fit(ds, ["platinum-8358"])
    good = json.dumps([["SP", 2, 0, 256, [16, 4], 1], ["FSP", 3, 0, 0, 1]])
    res = f.featurize_schedules([fsp, ffsp, good], ["ansor"] * 3)
    assert res["valid"].tolist() == [False, False, True]
    assert np.isfinite(res["numeric"]).all()
