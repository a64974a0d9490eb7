"""Bad input to every command but the imports (tests/test_bad_input.py has those): one row per case, each
answered with exit code 2 and exactly one ``costlab: error:`` line holding the expected words, no traceback,
and the dataset files byte for byte as they were. Then the cases that are not a plain refusal: a diverged
training run, JSON without bare NaN, import-ms with nothing usable, evaluate on another dialect, help texts."""

from __future__ import annotations

import hashlib
import json
import shutil

import h5py
import orjson
import pytest
import torch

from conftest import FIXTURES, TINY
from costlab.cli import main
from costlab.common import jsontext
from costlab.datasets import open_dataset, schema

SMALL = FIXTURES / "ms_small.h5"
MS_DB = FIXTURES / "ms_tune_db"
BERT = FIXTURES / "ansor" / "2080ti-bert-B1-head128.json"
PLATFORM = "llvm-x86_64-2c"
SHARD = "000000000-000000080.jsonl.gz"  # the one shard of the packed fixture (80 records)


@pytest.fixture
def ctx(trained, tmp_path):
    """A fresh copy of the dataset (so that a case that wrote to it could not hide from the next one), the
    model's run directory and checkpoint, and a scratch folder."""
    shutil.copy(trained / "d.h5", tmp_path / "d.h5")
    return dict(data=tmp_path / "d.h5", run=trained / "run", ckpt=trained / "run" / "checkpoints" / "last.ckpt",
                tmp=tmp_path)


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_error(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("costlab: error:")]
    assert len(lines) == 1, err
    return lines[0]


# -- files each row makes (in the scratch folder) ----------------------------------------------------------

def _file(c, name, content: bytes):
    path = c["tmp"] / name
    path.write_bytes(content)
    return path


def _truncated_ckpt(c):
    return _file(c, "cut.ckpt", c["ckpt"].read_bytes()[:1000])


def _edited_ckpt(c, edit):
    ckpt = torch.load(c["ckpt"], map_location="cpu", weights_only=True)
    edit(ckpt)
    path = c["tmp"] / "edited.ckpt"
    torch.save(ckpt, path)
    return path


def _nan_ckpt(c):
    def edit(ckpt):
        name = next(k for k, v in ckpt["state_dict"].items() if k.startswith("net.") and v.is_floating_point())
        ckpt["state_dict"][name] = torch.full_like(ckpt["state_dict"][name], float("nan"))
    return _edited_ckpt(c, edit)


def _misfit_ckpt(c):
    def edit(ckpt):
        ckpt["hyper_parameters"]["net_config"] = dict(ckpt["hyper_parameters"]["net_config"], d_model=32)
    return _edited_ckpt(c, edit)


def _ckpt_of_featurizer(c, **changes):
    def edit(ckpt):
        ckpt["hyper_parameters"]["featurizer"] = dict(ckpt["hyper_parameters"]["featurizer"], **changes)
    return _edited_ckpt(c, edit)


def _ckpt_of_attention_heads(c, heads: int):
    def edit(ckpt):
        ckpt["hyper_parameters"]["net_config"] = dict(ckpt["hyper_parameters"]["net_config"], attention_heads=heads)
    return _edited_ckpt(c, edit)


def _run_with_empty_report(c):
    """A copy of the trained run whose evaluation report (report/metrics.json) a full disk left empty (its
    summary.json is not read: the model records its training)."""
    run = c["tmp"] / "run"
    shutil.copytree(c["run"], run)
    (run / "report").mkdir()
    (run / "report" / "metrics.json").write_text("")
    return run


def _set_attr(c, edit):
    """The dataset with one attribute damaged (``edit(h5 file)``)."""
    with h5py.File(c["data"], "a") as f:
        edit(f)
    return c["data"]


def _lock_blocked(c):
    """The dataset, with a folder where its writers' lock file goes (what a read-only folder does for a
    user who is not root)."""
    (c["data"].parent / f".{c['data'].name}.lock").mkdir()
    return c["data"]


def _target_attr(f, text):
    f["platforms"][PLATFORM].attrs["target"] = text


def _empty_ms_db(c):
    (c["tmp"] / "db").mkdir()
    for name in ("database_workload.json", "database_tuning_record.json"):
        (c["tmp"] / "db" / name).write_bytes(b"")
    return c["tmp"] / "db"


def _bad_ms_db(c):
    (c["tmp"] / "db").mkdir()
    for name in ("database_workload.json", "database_tuning_record.json"):
        (c["tmp"] / "db" / name).write_bytes(b"not json\n[1, 2, 3]\n")
    return c["tmp"] / "db"


def _packed(c, meta=None, records=None):
    """The dataset packed into the scratch folder, its meta file edited by ``meta(dict)`` and the records of
    its (only) shard by ``records(list) -> list``."""
    import gzip

    folder = c["tmp"] / "p"
    assert main(["dataset", "pack", str(c["data"]), "-o", str(folder)]) == 0
    if meta is not None:
        m = orjson.loads(gzip.decompress((folder / "dataset.json.gz").read_bytes()))
        meta(m)
        (folder / "dataset.json.gz").write_bytes(gzip.compress(orjson.dumps(m)))
    if records is not None:
        (shard,) = (folder / "records" / PLATFORM).iterdir()
        recs = records([orjson.loads(ln) for ln in gzip.decompress(shard.read_bytes()).splitlines()])
        shard.write_bytes(gzip.compress(b"".join(orjson.dumps(r) + b"\n" for r in recs)))
    return folder


def _unpack(c, **edits):
    return ["dataset", "unpack", _packed(c, **edits), "-o", c["tmp"] / "new.h5"]


def _edit_record(i, field, value):
    def edit(recs):
        recs[i][field] = value
        return recs
    return edit


def _other_pack(c):
    """Another dataset's pack in the scratch folder."""
    assert main(["dataset", "import-ansor", str(BERT), "-o", str(c["tmp"] / "other.h5")]) == 0
    assert main(["dataset", "pack", str(c["tmp"] / "other.h5"), "-o", str(c["tmp"] / "p")]) == 0
    return c["tmp"] / "p"


def _train(c, *extra):
    return ["train", "--data", c["data"], "--out", c["tmp"] / "run", "--no-progress", *extra]


def _evaluate(c, model, *extra):
    return ["evaluate", "--model", model, "--data", c["data"], *extra]


def _damaged_chunk(c, column="costs/values"):
    """The dataset with bytes in the middle of a records column's compressed chunk (its raw costs') overwritten (a
    bit flip, a bad copy): the file opens, the chunk does not decompress."""
    name = f"records/{PLATFORM}/{column}"
    with h5py.File(c["data"], "r") as f:
        info = f[name].id.get_chunk_info(0)
    with open(c["data"], "r+b") as f:
        f.seek(info.byte_offset + info.size // 2)
        f.write(b"\xff" * min(32, info.size // 2))
    return c["data"]


# name: (argv of the case, given the context; words the one error line must hold)
CASES = {
    # models: checkpoints and artifacts that cannot be scored with
    "evaluate damaged ckpt": (lambda c: _evaluate(c, _truncated_ckpt(c)),
                              "not a readable training checkpoint (truncated or damaged"),
    "evaluate foreign ckpt": (lambda c: _evaluate(c, _file(c, "x.ckpt", b"not a checkpoint")),
                              "not a readable training checkpoint"),
    "evaluate missing ckpt": (lambda c: _evaluate(c, c["tmp"] / "none.ckpt"), "none.ckpt: no such checkpoint"),
    "evaluate ckpt with NaN weights": (lambda c: _evaluate(c, _nan_ckpt(c)), "holds non-finite values"),
    "evaluate ckpt whose config misfits": (lambda c: _evaluate(c, _misfit_ckpt(c)),
                                           "the net config does not fit the weights"),
    "evaluate ckpt of another featurizer version": (lambda c: _evaluate(c, _ckpt_of_featurizer(c, version=99)),
                                                    "version 99 does not match this costlab's version"),
    "evaluate ckpt whose featurizer version is text": (lambda c: _evaluate(c, _ckpt_of_featurizer(c, version="1")),
                                                       "version '1' is not an integer"),
    "evaluate ckpt whose attention heads split no width": (lambda c: _evaluate(c, _ckpt_of_attention_heads(c, 3)),
                                                           "net config is not valid"),
    "finetune from damaged ckpt": (lambda c: ["finetune", "--from", _truncated_ckpt(c), "--data", c["data"],
                                              "--platform", PLATFORM, "--out", c["tmp"] / "ft"],
                                   "not a readable training checkpoint"),
    "finetune from NaN ckpt": (lambda c: ["finetune", "--from", _nan_ckpt(c), "--data", c["data"], "--platform",
                                          PLATFORM, "--out", c["tmp"] / "ft", "--epochs", "1", *TINY[-2:]],
                               "holds non-finite values"),
    "export damaged ckpt": (lambda c: ["export", _truncated_ckpt(c), "-o", c["tmp"] / "m"],
                            "a training checkpoint, not a model"),
    "export missing ckpt": (lambda c: ["export", c["tmp"] / "none.ckpt", "-o", c["tmp"] / "m"], "no such model"),
    "export a run whose report is empty": (lambda c: ["export", _run_with_empty_report(c), "-o", c["tmp"] / "m"],
                                           "metrics.json: is not readable JSON"),
    "evaluate --model is a dataset": (lambda c: _evaluate(c, c["data"]), "d.h5: not a costlab model"),
    "finetune --from is a dataset": (lambda c: ["finetune", "--from", c["data"], "--data", c["data"],
                                                "--platform", PLATFORM, "--out", c["tmp"] / "ft"],
                                     "d.h5: not a costlab model"),
    # options out of range or of the wrong type
    "featurize --chunk 0": (lambda c: ["featurize", c["data"], "--featurizer", "tlp", "--chunk", "0"],
                            "--chunk must be a positive integer (1 or more), not 0"),
    "featurize --chunk -3": (lambda c: ["featurize", c["data"], "--featurizer", "tlp", "--chunk", "-3"],
                             "--chunk must be a positive integer (1 or more), not -3"),
    "featurize --chunk x": (lambda c: ["featurize", c["data"], "--featurizer", "tlp", "--chunk", "x"],
                            "--chunk must be a positive integer, not 'x'"),
    "featurize --config bad JSON": (lambda c: ["featurize", c["data"], "--featurizer", "tlp", "--config", "{bad"],
                                    "--config:1: featurizer config is not JSON"),
    "train --epochs 0": (lambda c: _train(c, "--epochs", "0"), "--epochs must be a positive integer"),
    "train --epochs -1": (lambda c: _train(c, "--epochs", "-1"), "--epochs must be a positive integer"),
    "finetune --epochs 0": (lambda c: ["finetune", "--from", c["run"], "--data", c["data"], "--platform", PLATFORM,
                                       "--out", c["tmp"] / "ft", "--epochs", "0"],
                            "--epochs must be a positive integer"),
    "train --set max_epochs=-1": (lambda c: _train(c, "--set", "trainer.max_epochs=-1"),
                                  "trainer.max_epochs must be a positive integer, not -1"),
    "train --set max_epochs=x": (lambda c: _train(c, "--set", "trainer.max_epochs=x"),
                                 "trainer.max_epochs must be a positive integer, not 'x'"),
    "train --set lr=abc": (lambda c: _train(c, "--set", "lr=abc"), "lr must be a positive number, not 'abc'"),
    "train --set lr=nan": (lambda c: _train(c, "--set", "lr=.nan"), "lr must be a positive number"),
    "train --set loss=x": (lambda c: _train(c, "--set", "loss=hinge"), "loss must be one of lambdarank, mse"),
    "train --set net.d_model=abc": (lambda c: _train(c, "--set", "net.d_model=abc"),
                                    "net.d_model must be an integer, not 'abc'"),
    "train --set net.unknown": (lambda c: _train(c, "--set", "net.width=3"), "unknown net option net.width"),
    "train --set data_options.list_size=0": (lambda c: _train(c, "--set", "data_options.list_size=0"),
                                             "data_options.list_size must be an integer >= 2"),
    "finetune --seed -3": (lambda c: ["finetune", "--from", c["run"], "--data", c["data"], "--platform", PLATFORM,
                                      "--out", c["tmp"] / "ft", "--seed", "-3"],
                           "--seed must be an integer from 0 to 2,147,483,646"),
    "train --set trainer.unknown": (lambda c: _train(c, "--epochs", "1", "--set", "trainer.speed=3"),
                                    "trainer options: Trainer.__init__() got an unexpected keyword argument"),
    "train --set value not YAML": (lambda c: _train(c, "--set", "lr=[1,"), "--set lr=[1,: the value is not valid YAML"),
    "train --config bad YAML": (lambda c: _train(c, "--config", _file(c, "c.yaml", b"model: [tlp\n  x: : y\n")),
                                "c.yaml:2: training config is not valid YAML"),
    "train --config not a mapping": (lambda c: _train(c, "--config", _file(c, "c.yaml", b"- a\n- b\n")),
                                     "c.yaml: a training config must be a YAML mapping, not a list"),
    "train --config binary": (lambda c: _train(c, "--config", _file(c, "c.yaml", b"\xff\xfe\x00")),
                              "c.yaml: not a YAML training config (not UTF-8 text)"),
    "train --config missing": (lambda c: _train(c, "--config", c["tmp"] / "none.yaml"),
                               "none.yaml: no such training config"),
    "train --config max_epochs 0": (lambda c: _train(c, "--config", _file(c, "c.yaml", b"trainer: {max_epochs: 0}\n")),
                                    "trainer.max_epochs must be a positive integer, not 0"),
    "train --out is a file": (lambda c: ["train", "--data", c["data"], "--out", _file(c, "f", b"x")],
                              "--out", "exists and is not a directory"),
    "finetune --out is a file": (lambda c: ["finetune", "--from", c["run"], "--data", c["data"], "--platform",
                                            PLATFORM, "--out", _file(c, "f", b"x")], "exists and is not a directory"),
    "evaluate --report is a file": (lambda c: _evaluate(c, c["run"], "--report", _file(c, "f", b"x")),
                                    "--report", "exists and is not a directory"),
    "pack -o is a file": (lambda c: ["dataset", "pack", c["data"], "-o", _file(c, "f", b"x")],
                          "exists and is not a directory"),
    # pack / unpack: one folder holds one dataset's pack; a pack is read only as its names and meta file say
    "pack into another dataset's pack": (lambda c: ["dataset", "pack", c["data"], "-o", _other_pack(c)],
                                         "p: holds the pack of another dataset"),
    "unpack shard shorter than its name": (lambda c: _unpack(c, records=lambda r: r[:40]),
                                           f"{SHARD}: holds 40 records, its name says 80 (rows 0-80)"),
    "unpack platform the meta does not list": (lambda c: _unpack(c, meta=lambda m: (m["platforms"].clear(),
                                                                                    m["records"].clear())),
                                               f"{PLATFORM}/{SHARD}: records of platform '{PLATFORM}', which "
                                               "dataset.json.gz does not list"),
    "unpack count unlike the meta's": (lambda c: _unpack(c, meta=lambda m: m["records"][PLATFORM].update(count=81)),
                                       f"holds 80 records of platform '{PLATFORM}', dataset.json.gz lists 81"),
    "unpack records unlike those packed": (lambda c: _unpack(c, records=lambda r: r[::-1]),
                                           "than were packed (their digest differs"),
    "unpack meta without tasks": (lambda c: _unpack(c, meta=lambda m: m.pop("tasks")),
                                  "dataset.json.gz: missing key 'tasks'"),
    "unpack task without dialect": (lambda c: _unpack(c, meta=lambda m: m["tasks"][0].pop("dialect")),
                                    "dataset.json.gz: task 0: missing key 'dialect'"),
    "unpack platform without target": (lambda c: _unpack(c, meta=lambda m: m["platforms"][PLATFORM].pop("target")),
                                       f"dataset.json.gz: platform '{PLATFORM}': missing key 'target'"),
    "unpack bad costs": (lambda c: _unpack(c, records=_edit_record(2, 4, "fast")),
                         f'{SHARD}:3: costs "fast" are not a list of numbers'),
    "unpack cost not a number": (lambda c: _unpack(c, records=_edit_record(0, 4, [1e-3, None])),
                                 f"{SHARD}:1: costs [0.001,null] are not a list of numbers"),
    "unpack record task out of range": (lambda c: _unpack(c, records=_edit_record(4, 0, 99)),
                                        f"{SHARD}:5: task index 99 out of range (the pack has 4 tasks)"),
    "unpack record task negative": (lambda c: _unpack(c, records=_edit_record(0, 0, -1)),
                                    f"{SHARD}:1: task index -1 out of range"),
    "unpack repeated program id": (lambda c: _unpack(c, records=lambda r: r[:1] + r[:79]),
                                   f"{SHARD}:2: program id", "repeats an earlier record's"),
    "unpack damaged record line": (lambda c: _unpack(c, records=lambda r: r[:5] + [[1, 2]] + r[6:]),
                                   f"{SHARD}:6: damaged record line"),
    "unpack network task out of range": (lambda c: _unpack(c, meta=lambda m: m["networks"].update(n=[[7, 1.0]])),
                                         "dataset.json.gz: network 'n': task index 7 out of range"),
    "unpack split task out of range": (lambda c: _unpack(c, meta=lambda m: m["splits"].update(x=dict(
        meta=dict(by="task", seed=0, test_fraction=0.2), test_tasks=[9], test_programs=None))),
                                       "dataset.json.gz: split 'x': task index 9 out of range (the pack has 4 tasks)"),
    "split --test-fraction 0": (lambda c: ["dataset", "split", c["data"], "--test-fraction", "0"],
                                "test fraction must be between 0 and 1"),
    "split --test-fraction 1": (lambda c: ["dataset", "split", c["data"], "--test-fraction", "1"],
                                "test fraction must be between 0 and 1"),
    "split --test-fraction -0.2": (lambda c: ["dataset", "split", c["data"], "--test-fraction=-0.2"],
                                   "test fraction must be between 0 and 1"),
    "split --test-fraction nan": (lambda c: ["dataset", "split", c["data"], "--test-fraction", "nan"],
                                  "test fraction must be between 0 and 1"),
    # rename-platform
    "rename-platform bad new id": (lambda c: ["dataset", "rename-platform", c["data"], PLATFORM, "a/b"],
                                   "bad platform id 'a/b'"),
    "rename-platform to -mcpu=native": (lambda c: ["dataset", "rename-platform", c["data"], PLATFORM, "new",
                                                   "--target", "llvm -mcpu=native -num-cores=2"],
                                        "-mcpu=native names this machine's CPU, not the platform's"),
    "rename-platform unknown old id": (lambda c: ["dataset", "rename-platform", c["data"], "nope", "new"],
                                       "no platform 'nope'"),
    "rename-platform target of unknown kind": (lambda c: ["dataset", "rename-platform", c["data"], PLATFORM, "new",
                                                          "--target", '{"kind": "bogus"}'],
                                               'not a TVM target: Target kind "bogus" is not defined'),
    "rename-platform target with a bad option": (lambda c: ["dataset", "rename-platform", c["data"], PLATFORM, "new",
                                                            "--target", "llvm -num-cores=x"],
                                                 "not a TVM target: Option 'num-cores'"),
    "rename-platform target not JSON": (lambda c: ["dataset", "rename-platform", c["data"], PLATFORM, "new",
                                                   "--target", "{bad json"], "target JSON is not valid"),
    # datasets damaged inside
    "costlab_format a string": (lambda c: ["dataset", "info", _set_attr(c, lambda f: f.attrs.__setitem__(
        schema.FORMAT_ATTR, "one"))], "damaged dataset: 'costlab_format' must be a positive integer, not 'one'"),
    "costlab_format an array": (lambda c: ["dataset", "info", _set_attr(c, lambda f: f.attrs.__setitem__(
        schema.FORMAT_ATTR, [1, 2]))], "'costlab_format' must be a positive integer, not [1, 2]"),
    "costlab_format a fraction": (lambda c: ["dataset", "info", _set_attr(c, lambda f: f.attrs.__setitem__(
        schema.FORMAT_ATTR, 1.5))], "'costlab_format' must be a positive integer, not 1.5"),
    "costlab_format newer": (lambda c: ["dataset", "info", _set_attr(c, lambda f: f.attrs.__setitem__(
        schema.FORMAT_ATTR, schema.FORMAT_VERSION + 1))], "written by a newer costlab"),
    "platform target not JSON": (lambda c: ["dataset", "info", _set_attr(c, lambda f: _target_attr(f, "{not json"))],
                                 f"damaged dataset: platform '{PLATFORM}': target is not valid JSON"),
    "platform target not an object": (lambda c: ["dataset", "info", _set_attr(c, lambda f: _target_attr(f, "[1]"))],
                                      f"platform '{PLATFORM}': target must be a JSON object"),
    "task extra not JSON": (lambda c: ["dataset", "info", _set_attr(c, lambda f: f["tasks"]["extra"].__setitem__(
        0, "{bad"))], "damaged dataset: task 0's extra is not valid JSON ('{bad')"),
    "task table without a column": (lambda c: ["dataset", "info", _set_attr(c, lambda f: f["tasks"].__delitem__(
        "flops"))], "damaged dataset: the task table has no column flops"),
    "measure with another target into a platform": (lambda c: ["dataset", "measure", c["data"], "--platform",
                                                              PLATFORM, "--target", "llvm -num-cores=1"],
                                                     f"platform '{PLATFORM}' holds records of target"),
    "lock file beside the dataset cannot be made": (lambda c: ["dataset", "split", _lock_blocked(c), "--by", "task",
                                                               "--name", "s"], "cannot write (Is a directory)"),
    "import into a damaged dataset": (lambda c: ["dataset", "import-ansor", BERT, "-o", _set_attr(
        c, lambda f: _target_attr(f, "{not json"))], "target is not valid JSON"),
    "evaluate on a damaged dataset": (lambda c: (_set_attr(c, lambda f: f.attrs.__setitem__(schema.FORMAT_ATTR, "x")),
                                                 _evaluate(c, c["run"]))[1], "damaged dataset"),
    "dataset info of a damaged chunk": (lambda c: ["dataset", "info", _damaged_chunk(c)],
                                        "d.h5: is damaged: HDF5 could not read its data"),
    "import into a damaged chunk": (lambda c: ["dataset", "import-ms", MS_DB, "-o", _damaged_chunk(c, "program_id"),
                                               "--platform", PLATFORM], "d.h5: is damaged: HDF5 could not read its data"),
    "export --archive to a compressed name": (lambda c: ["export", c["run"], "-o", c["tmp"] / "m.tar.gz", "--archive"],
                                              "--archive writes an uncompressed tar"),
    "export to a checkpoint's name": (lambda c: ["export", c["run"], "-o", c["tmp"] / "m.ckpt"],
                                      "a .ckpt name is a training checkpoint's"),
    "featurize with a config file that is not text": (
        lambda c: ["featurize", c["data"], "--featurizer", "tlp", "--config",
                   f"@{_file(c, 'bin.json', bytes([0x89, 0x50, 0xff, 0x00]))}"],
        "bin.json: featurizer config is not UTF-8 text"),
    "set-machine with a GPU spec for a CPU platform": (
        lambda c: ["dataset", "set-machine", c["data"], "--platform", PLATFORM, "--spec",
                   _file(c, "gpu.json", b'{"kind": "gpu"}')], "is a gpu spec", "give a cpu spec"),
    "import-ms with a remote run's run record as the host": (
        lambda c: ["dataset", "import-ms", FIXTURES / "ms_tune_db", "-o", c["tmp"] / "new.h5", "--host",
                   _file(c, "costlab_run.json", json.dumps(dict(rpc_key="board", host=dict(
                       cpu_model="AMD EPYC", caches={"L1d": 49152}))).encode())],
        "costlab_run.json: is the run record of a run measured on a remote device (--rpc-key board)"),
    # import-ms with nothing usable (the output must not be created)
    "import-ms of empty files": (lambda c: ["dataset", "import-ms", _empty_ms_db(c), "-o", c["tmp"] / "new.h5"],
                                 "db: empty MetaSchedule database"),
    "import-ms of bad lines only": (lambda c: ["dataset", "import-ms", _bad_ms_db(c), "-o", c["tmp"] / "new.h5"],
                                    "database_workload.json:1: not JSON", "no usable records (4 bad lines in 2 file(s))"),
    "import-ms into the dataset, nothing usable": (lambda c: ["dataset", "import-ms", _bad_ms_db(c), "-o", c["data"]],
                                                   "no usable records"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line(ctx, capsys, case):
    make, *words = CASES[case]
    argv = [str(a) for a in make(ctx)]
    before = _digest(ctx["data"])  # after the case damaged it on purpose, before the command ran
    code = main(argv)
    line = _one_error(capsys.readouterr().err)
    assert code == 2
    for w in words:
        assert w in line, line
    assert _digest(ctx["data"]) == before
    assert not (ctx["tmp"] / "new.h5").exists()
    leftovers = [p.name for p in ctx["tmp"].iterdir() if ".tmp-" in p.name]
    assert not leftovers


# -- net and data options that would fail only once training ran -------------------------------------------

@pytest.mark.parametrize("option, words", [
    ("net.d_model=100", "do not build a tlp net: embed_dim must be divisible by num_heads"),
    ("net.d_model=-4", "net.d_model must be a positive integer, not -4"),
    ("net.layers=0", "net.layers must be a positive integer, not 0"),
    ("net.max_len=2", "the net has 2 positions"),
    ("net.heads=3", "net.heads is not an option"),
    (f"data_options.keep_fraction={{{PLATFORM}: abc}}", "keep_fraction must map platform ids to numbers above 0"),
    (f"data_options.keep_fraction={{{PLATFORM}: 0}}", "keep_fraction must map platform ids to numbers above 0"),
    ("data_options.keep_fraction={nosuch: 0.5}", "keep_fraction names platform(s) 'nosuch'"),
    (f"data_options.keep_fraction={{{PLATFORM}: 0.01}}", "no training batches"),
    ("data_options.list_size=1", "data_options.list_size must be an integer >= 2"),
])
def test_net_and_data_options_are_refused_before_training(ctx, capsys, option, words):
    """Net sizes that torch refuses (or that fail on the first batch), net.heads (set from the platforms), and
    keep_fraction values or list sizes that leave no training batch: one line each, before anything is written to
    the run directory (no config.yaml, no checkpoint, no model of an untrained net)."""
    out = ctx["tmp"] / "run"
    assert main(["train", "--data", str(ctx["data"]), "--out", str(out), "--epochs", "1", "--no-progress",
                 "--set", option]) == 2
    line = _one_error(capsys.readouterr().err)
    assert words in line, line
    assert not any(p.exists() for p in (out / "config.yaml", out / "checkpoints", out / "model"))


# -- a diverged training run ------------------------------------------------------------------------------

def test_diverged_training_stops_without_a_model(ctx, capsys):
    out = ctx["tmp"] / "run"
    code = main(["train", "--data", str(ctx["data"]), "--out", str(out), "--epochs", "3", "--no-progress",
                 "--set", "lr=1e12", "--set", "trainer.gradient_clip_val=null", *TINY])
    line = _one_error(capsys.readouterr().err)
    assert code == 2 and "training diverged: the loss is nan" in line and "no model was written" in line
    assert not (out / "model").exists() and not (out / "summary.json").exists()


# -- JSON costlab writes: never a bare NaN -------------------------------------------------------------------

def _strict(text: str):
    def refuse(name):
        raise AssertionError(f"bare {name} in JSON")
    return json.loads(text, parse_constant=refuse)


def test_json_text_writes_null_for_non_finite_numbers():
    import numpy as np

    value = {"top1": float("nan"), "n": np.float32(0.5), "inf": np.float64("inf"), "list": [1.0, float("-inf")],
             "arr": np.array([np.nan, 2.0])}
    assert _strict(jsontext.dumps(value)) == {"top1": None, "n": 0.5, "inf": None, "list": [1.0, None],
                                             "arr": [None, 2.0]}


def test_written_json_files_are_strict_json(ctx, trained, capsys):
    assert main(["evaluate", "--model", str(trained / "run"), "--data", str(ctx["data"]), "--report",
                 str(ctx["tmp"] / "rep"), "--json"]) == 0
    _strict(capsys.readouterr().out)
    for path in [ctx["tmp"] / "rep" / "metrics.json", trained / "run" / "summary.json",
                 trained / "run" / "model" / "config.json"]:
        _strict(path.read_text())


# -- import-ms: an invalid base64 workload is named, skipped and counted ----------------------------------------

def test_import_ms_skips_a_workload_that_is_not_base64(tmp_path, capsys):
    db = tmp_path / "db"
    shutil.copytree(MS_DB, db)
    wl = db / "database_workload.json"
    lines = wl.read_bytes().splitlines()
    shash, _ = orjson.loads(lines[1])
    lines[1] = orjson.dumps([shash, "!!not base64"])
    wl.write_bytes(b"\n".join(lines) + b"\n")
    records = [orjson.loads(ln) for ln in (db / "database_tuning_record.json").read_bytes().splitlines() if ln.strip()]
    of_second = sum(1 for r in records if r[0] == 1)
    assert of_second and of_second < len(records)
    code = main(["dataset", "import-ms", str(db), "-o", str(tmp_path / "d.h5")])
    err = capsys.readouterr().err
    assert code == 0
    assert f"skipped {wl}:2: workload IR is not valid base64" in err
    assert f"{1 + of_second} bad line(s)/record(s) skipped" in err
    with open_dataset(tmp_path / "d.h5") as ds:
        assert all(t.workload_hash != shash for t in ds.tasks)  # not stored
        assert len(ds.records(PLATFORM)) == len(records) - of_second


# -- evaluate on records of another dialect and target kind ------------------------------------------------------

def test_evaluate_warns_on_another_dialect_and_target_kind(trained, tmp_path, capsys):
    data = tmp_path / "ansor.h5"
    assert main(["dataset", "import-ansor", str(BERT), "-o", str(data)]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--model", str(trained / "run"), "--data", str(data)]) == 0
    err = capsys.readouterr().err
    assert "costlab: warning: the model was trained on MetaSchedule schedules" in err and "holds Ansor" in err
    assert "costlab: warning: the model was trained for llvm targets; platform '2080ti'" in err
    assert "is a cuda target" in err
    capsys.readouterr()
    assert main(["evaluate", "--model", str(trained / "run"), "--data", str(trained / "d.h5")]) == 0
    assert "warning" not in capsys.readouterr().err  # same dialect and kind: nothing to say


# -- help texts --------------------------------------------------------------------------------------------------

def _help(capsys, *argv) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_help_texts(capsys):
    from costlab.datasets.ansor_log import KNOWN_VERSIONS

    text = _help(capsys, "dataset", "import-ansor")
    versions = sorted(KNOWN_VERSIONS)
    assert f"log versions {versions[0]} to {versions[-1]}" in text
    assert "also record the imported tasks as one network called NAME, each task with weight 1" in _help(
        capsys, "dataset", "import-ms")
    for cmd in ("train", "finetune"):
        assert "--epochs N train for N passes over the training records (N >= 1" in _help(capsys, cmd)


def test_output_cut_short_by_its_reader_is_no_error_and_leaks_no_file():
    """`costlab ... | head`: the reader stops early and the command's writes meet a broken pipe; it ends with exit
    0 and its later output goes nowhere. Done again in one process (main called by a script or a notebook), it
    left one more open file each time."""
    import subprocess
    import sys

    code = """
import os, sys
from costlab import cli

def cut_short(args):  # a command whose output's reader stopped early
    raise BrokenPipeError
class Parser:
    def parse_args(self, argv):
        import argparse
        return argparse.Namespace(func=cut_short)
cli.build_parser = Parser
codes = [cli.main(["dataset", "info", "x.h5"]) for _ in range(2)]
before = len(os.listdir("/proc/self/fd"))
codes += [cli.main(["dataset", "info", "x.h5"]) for _ in range(3)]
print(codes, len(os.listdir("/proc/self/fd")) - before, file=sys.stderr)
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0 and res.stderr.strip().splitlines()[-1] == "[0, 0, 0, 0, 0] 0", res.stderr
