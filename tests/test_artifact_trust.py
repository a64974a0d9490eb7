"""A model artifact is trusted only as far as it is checked: both files hashed (a missing hash is refused unless
the user says to trust it), config.json checked against the weights' shapes before a net is built from it,
archives read within a model's sizes and only from regular entries (``./`` names accepted), FIFOs and devices
never read; and ``costlab models`` as a table.

Every row is answered by ``load`` with an InputError holding the expected words and by ``costlab export`` with
exit code 2 and one ``costlab: error:`` line, writing nothing. Cases that would hang or eat the machine's memory
if their check were missing run in a child process under a memory limit and a timeout."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile

import pytest
import torch

from conftest import error_line as _error
from costlab.cli import main
from costlab.common.errors import InputError
from costlab.costmodels.artifact import (CONFIG_MAX, WEIGHTS_MAX, config_digest, read_artifact, read_config,
                                         save_artifact, seal_config)
from costlab.costmodels.predictors import load
from costlab.costmodels.shipped import shipped_path, versioned_names

SHIPPED = shipped_path("x86-cpu")


# -- models to damage ---------------------------------------------------------------------------------------

@pytest.fixture
def pacm(tmp_path):
    """A copy of the shipped PaCM model (as exported: both hashes recorded)."""
    dst = tmp_path / "m"
    shutil.copytree(SHIPPED, dst)
    return dst


def _tlp(directory, vocab: int = 12):
    """A small TLP model, saved as every writer saves one."""
    from costlab.costmodels.nets import build_net
    from costlab.featurizers import create

    feat = create("tlp")
    feat.config.update(vocabulary=["<pad>", "<unk>"] + [f"Prim{i}" for i in range(vocab - 2)], seq_len=8)
    net_config = dict(vocab_size=vocab, num_slots=int(feat.config["num_slots"]), max_len=8, d_model=16,
                      attention_heads=2)
    torch.manual_seed(0)
    net = build_net("tlp", net_config)
    return save_artifact(directory, net.state_dict(), dict(kind="tlp", net=net_config, featurizer=feat.to_json(),
                                                           platforms=["llvm-x86_64-2c"]))


@pytest.fixture
def tlp(tmp_path):
    return _tlp(tmp_path / "tlp")


def _config(m) -> dict:
    return json.loads((m / "config.json").read_text())


def _write_config(m, config: dict, seal: bool) -> None:
    (m / "config.json").write_text(json.dumps(seal_config(config) if seal else config))


def _edit(m, seal: bool = False, **changes) -> None:
    """Change config.json; ``seal`` records the edited config's config_sha256 (a careful editor)."""
    c = _config(m)
    for k, v in changes.items():
        if v is KeyError:
            c.pop(k, None)
        else:
            c[k] = v
    _write_config(m, c, seal)


def _flip_last_byte(m) -> None:
    raw = bytearray((m / "model.safetensors").read_bytes())
    raw[-1] ^= 0x01
    (m / "model.safetensors").write_bytes(bytes(raw))


def _refused(m, message, capsys, tmp_path, file=None):
    """``load`` refuses ``m`` saying ``message`` (naming ``file`` when given), and so does ``costlab export``."""
    with pytest.raises(InputError, match=re.escape(message)) as info:
        load(str(m))
    if file is not None:
        assert info.value.path == str(file), info.value
    out = tmp_path / "exported"
    assert main(["export", str(m), "-o", str(out)]) == 2
    line = _error(capsys)
    assert message in line and str(file or m) in line, line
    assert not out.exists()


# -- 1. a missing or empty hash is an error, naming the file ------------------------------------------------------

CONFIG_ROWS = {
    # the hole this closes: delete the weights hash and change the weights -- they loaded and tuned silently
    "weights hash deleted, weights changed": (lambda m: (_edit(m, weights_sha256=KeyError), _flip_last_byte(m)),
                                              "does not match the config_sha256 it records"),
    "weights hash emptied, weights changed": (lambda m: (_edit(m, weights_sha256=""), _flip_last_byte(m)),
                                              "does not match the config_sha256 it records"),
    "weights hash deleted, config resealed": (lambda m: _edit(m, seal=True, weights_sha256=KeyError),
                                              "records no weights_sha256: the model cannot be checked"),
    "weights hash emptied, config resealed": (lambda m: _edit(m, seal=True, weights_sha256=""),
                                              "records no weights_sha256: the model cannot be checked"),
    "config hash deleted": (lambda m: _edit(m, config_sha256=KeyError),
                            "records no config_sha256: the model cannot be checked"),
    "config hash emptied": (lambda m: _edit(m, config_sha256=""),
                            "records no config_sha256: the model cannot be checked"),
    "both hashes deleted": (lambda m: _edit(m, config_sha256=KeyError, weights_sha256=KeyError),
                            "COSTLAB_TRUST_UNHASHED=1"),
    "hash not a digest": (lambda m: _edit(m, seal=True, weights_sha256="abc"),
                          "weights_sha256 is not a SHA-256 hex digest"),
    # -- 2. config.json itself is covered: edits that used to score silently or allocate before failing
    "platforms edited": (lambda m: _edit(m, platforms=["llvm-other-2c"]), "config.json was edited or damaged"),
    "d_model edited": (lambda m: _edit(m, net=dict(_config(m)["net"], d_model=256)),
                       "does not match the config_sha256 it records"),
    "net config does not fit, sealed": (lambda m: _edit(m, seal=True, net=dict(_config(m)["net"], d_model=64)),
                                        "the net config does not fit the weights (stmt_mlp"),
    "net config absurd, sealed": (lambda m: _edit(m, seal=True, net=dict(_config(m)["net"], heads=10 ** 9)),
                                  "the net config does not fit the weights (heads=1000000000"),
    # torch asserts a width its attention heads split evenly: an assertion, not a costlab error, before
    "attention heads split no width, sealed": (lambda m: _edit(m, seal=True, net=dict(_config(m)["net"],
                                                                                        attention_heads=3)),
                                               "net config is not valid for a pacm net"),
    # -- 3. what scoring and tuning read of the metadata is of its JSON type: not an AttributeError while tuning
    "targets a list, sealed": (lambda m: _edit(m, seal=True, targets=[{"kind": "llvm"}]),
                               "model config's 'targets' must be a JSON object, not list"),
    "dialects a number, sealed": (lambda m: _edit(m, seal=True, dialects=5),
                                  "model config's 'dialects' must be a JSON list, not int"),
    "dialects of numbers, sealed": (lambda m: _edit(m, seal=True, dialects=[1]),
                                    "model config's 'dialects' must be a list of strings"),
    "platforms of numbers, sealed": (lambda m: _edit(m, seal=True, platforms=[1]),
                                     "model config's 'platforms' must be a list of platform names"),
    "hardware a string, sealed": (lambda m: _edit(m, seal=True, hardware="v1"),
                                  "model config's 'hardware' must be a JSON object, not str"),
    "config nested too deep": (lambda m: (m / "config.json").write_text('{"a": ' + "[" * 200000 + "]" * 200000 + "}"),
                               "model config is not valid JSON"),
}


# rows whose refusal names the model directory (the weights do not fit the config), not config.json
OF_THE_MODEL = ("net config does not fit, sealed", "net config absurd, sealed",
                "attention heads split no width, sealed")


@pytest.mark.parametrize("case", sorted(CONFIG_ROWS))
def test_config_row_is_refused_naming_the_config(pacm, capsys, tmp_path, case):
    damage, message = CONFIG_ROWS[case]
    damage(pacm)
    _refused(pacm, message, capsys, tmp_path, file=pacm if case in OF_THE_MODEL else pacm / "config.json")


def test_cut_vocabulary_is_refused(tlp, capsys, tmp_path):
    """A TLP vocabulary cut short maps tokens to other embeddings: it scored silently."""
    feat = _config(tlp)["featurizer"]
    cut = dict(feat, config=dict(feat["config"], vocabulary=feat["config"]["vocabulary"][:-3]))
    _edit(tlp, featurizer=cut)
    _refused(tlp, "config.json was edited or damaged", capsys, tmp_path, file=tlp / "config.json")
    _edit(tlp, seal=True, featurizer=cut)  # an editor who knows to reseal: still refused, by the shapes
    _refused(tlp, "the featurizer does not fit the net (its vocabulary has 9 entries, the net's embedding 12)",
             capsys, tmp_path, file=tlp)


def test_unhashed_model_loads_only_when_trusted(pacm, tmp_path, capsys, monkeypatch):
    _edit(pacm, config_sha256=KeyError, weights_sha256=KeyError)  # a model made by hand
    with pytest.raises(InputError, match="records no weights_sha256"):
        read_config(pacm)
    assert load(str(pacm), trust_unhashed=True).kind == "pacm"
    assert read_artifact(pacm, trust_unhashed=True).tensors
    monkeypatch.setenv("COSTLAB_TRUST_UNHASHED", "1")
    assert load(str(pacm)).kind == "pacm"
    # trusted, it exports with both hashes, and the export loads untrusted
    assert main(["export", str(pacm), "-o", str(tmp_path / "sealed")]) == 0
    monkeypatch.delenv("COSTLAB_TRUST_UNHASHED")
    sealed = _config(tmp_path / "sealed")
    weights = (tmp_path / "sealed" / "model.safetensors").read_bytes()
    assert sealed["weights_sha256"] == hashlib.sha256(weights).hexdigest()
    assert sealed["config_sha256"] == config_digest(sealed)
    assert load(str(tmp_path / "sealed")).kind == "pacm"


def test_trust_accepts_missing_hashes_only(pacm):
    _edit(pacm, config_sha256=KeyError)
    _flip_last_byte(pacm)  # the weights hash is still recorded: checked, trusted or not
    with pytest.raises(InputError, match="does not match the hash recorded"):
        load(str(pacm), trust_unhashed=True)
    _edit(pacm, seal=True, net=dict(_config(pacm)["net"], d_model=64))
    with pytest.raises(InputError, match="the net config does not fit the weights"):
        load(str(pacm), trust_unhashed=True)


def test_edited_d_model_never_allocates(pacm, tmp_path):
    """d_model 20000 (resealed) used to build a 8.5 GB net before load_state said it did not fit: now the
    safetensors header refuses it. Under a 1.5 GiB allowance a missing check fails on memory, not the machine."""
    _edit(pacm, seal=True, net=dict(_config(pacm)["net"], d_model=20000))
    res = _load_in_child(pacm, tmp_path)
    assert res.startswith("REFUSED") and "the net config does not fit the weights" in res, res


def test_saved_configs_record_their_hash_and_replace_stale_ones(tlp, tmp_path):
    c = _config(tlp)
    assert c["config_sha256"] == config_digest(c) and len(c["weights_sha256"]) == 64
    art = read_artifact(tlp)
    again = save_artifact(tmp_path / "again", art.tensors, dict(art.config, config_sha256="0" * 64,
                                                                weights_sha256="1" * 64, note="edited"))
    assert _config(again)["note"] == "edited" and load(str(again)).kind == "tlp"


def test_shipped_model_records_both_hashes_and_loads_untrusted(monkeypatch):
    monkeypatch.delenv("COSTLAB_TRUST_UNHASHED", raising=False)
    c = _config(SHIPPED)
    assert c["config_sha256"] == config_digest(c)
    assert c["weights_sha256"] == hashlib.sha256((SHIPPED / "model.safetensors").read_bytes()).hexdigest()
    assert load("x86-cpu").kind == "pacm"


# -- 3. archives and files that are not regular files -------------------------------------------------------------

def _tar(path, entries, mode="w"):
    """A tar of ``(name, bytes)`` entries, or ``(TarInfo, bytes or None)`` for a crafted one."""
    with tarfile.open(path, mode) as tar:
        for name, data in entries:
            info = name if isinstance(name, tarfile.TarInfo) else tarfile.TarInfo(name)
            if data is not None and not isinstance(name, tarfile.TarInfo):
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _model_entries(m, prefix=""):
    return [(prefix + n, (m / n).read_bytes()) for n in ("config.json", "model.safetensors")]


def test_archive_written_by_tar_of_a_directory_loads(pacm, tmp_path):
    """``tar -C DIR -cf m.tar .`` names its entries ``./config.json``: refused as 'no config.json' before."""
    if shutil.which("tar"):
        subprocess.run(["tar", "-C", str(pacm), "-cf", str(tmp_path / "m.tar"), "."], check=True)
        subprocess.run(["tar", "-C", str(pacm), "-czf", str(tmp_path / "m.tar.gz"), "."], check=True)
    else:
        _tar(tmp_path / "m.tar", _model_entries(pacm, "./"))
        _tar(tmp_path / "m.tar.gz", _model_entries(pacm, "./"), "w:gz")
    assert "./config.json" in tarfile.open(tmp_path / "m.tar").getnames()
    for name in ("m.tar", "m.tar.gz"):
        assert load(str(tmp_path / name)).kind == "pacm"
        assert read_config(tmp_path / name)["kind"] == "pacm"


def test_an_archive_written_by_tar_of_a_directory_is_replaced_by_export_force(pacm, tmp_path):
    """``tar -C DIR -cf m.tar .`` (entries ``./``, ``./config.json``) loads, so ``export --archive --force``
    replaces it as a model archive; it was refused as 'not a costlab model archive'."""
    _tar(tmp_path / "m.tar", [(_dir_info("."), None)] + _model_entries(pacm, "./"))
    assert load(str(tmp_path / "m.tar")).kind == "pacm"
    assert main(["export", str(pacm), "-o", str(tmp_path / "m.tar"), "--archive", "--force"]) == 0
    assert sorted(tarfile.open(tmp_path / "m.tar").getnames()) == ["config.json", "model.safetensors"]


def _dir_info(name):
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info


def test_a_head_count_written_as_text_scores_with_the_nets_own(pacm):
    """``net.heads`` written as ``"1"`` (the net's config reads it as 1): the head of a platform is the net's,
    not a comparison of a number with text."""
    from costlab.costmodels.predictors import head_of

    _edit(pacm, seal=True, net=dict(_config(pacm)["net"], heads="1"))
    assert head_of(load(str(pacm)), "llvm-other-2c") == 0


def _huge_entry(path, name, size, mode="w:gz"):
    """A small archive whose entry ``name`` declares ``size`` bytes (only its first MiB is there, all zeros):
    what a reader does with the header decides whether it reads gigabytes."""
    info = tarfile.TarInfo(name)
    info.size = size
    raw = info.tobuf(format=tarfile.GNU_FORMAT) + b"\0" * 2 ** 20
    path.write_bytes(gzip.compress(raw, 1) if mode == "w:gz" else raw)
    return path


ARCHIVE_ROWS = {
    "3 GiB weights entry": (lambda m, t: _huge_entry(t / "a.tar.gz", "model.safetensors", 3 * 2 ** 30),
                            "entry 'model.safetensors' is 3221225472 bytes, more than a model's model.safetensors can "
                            "be (at most 2 GiB)"),
    "config entry over 16 MiB": (lambda m, t: _huge_entry(t / "a.tar.gz", "./config.json", CONFIG_MAX + 1),
                                 "more than a model's config.json can be (at most 16 MiB)"),
    "3 GiB other entry": (lambda m, t: _huge_entry(t / "a.tar", "junk.bin", 3 * 2 ** 30, "w"),
                          "entry 'junk.bin' makes the archive hold more than a model can"),
    "truncated tar": (lambda m, t: _truncated(m, t / "a.tar", None), "model archive is damaged or cut short"),
    "truncated tar, in the config": (lambda m, t: _truncated(m, t / "a.tar", 700),
                                     "model archive is damaged or cut short"),
    "truncated tar.gz": (lambda m, t: _truncated(m, t / "a.tar.gz", None, "w:gz"),
                         "model archive is damaged or cut short"),
    "weights entry a symlink": (lambda m, t: _tar(t / "a.tar", _model_entries(m)[:1] + [(_link("model.safetensors",
                                                                                               "/dev/zero"), None)]),
                                "entry 'model.safetensors' is not a regular file"),
    "config entry a FIFO": (lambda m, t: _tar(t / "a.tar", [(_fifo_info("config.json"), None)] + _model_entries(m)[1:]),
                            "entry 'config.json' is not a regular file"),
    "two config entries": (lambda m, t: _tar(t / "a.tar", _model_entries(m) + _model_entries(m, "./")[:1]),
                           "two config.json entries ('config.json' and './config.json')"),
    "too many entries": (lambda m, t: _tar(t / "a.tar", [(f"f{i}", b"x") for i in range(100)] + _model_entries(m)),
                         "more than 64 entries: not a model archive"),
    "tar.gz cut in its first block": (lambda m, t: _truncated(m, t / "a.tar.gz", 20, "w:gz"),
                                      "model archive is damaged or cut short"),
    "weights of zeros": (lambda m, t: _tar(t / "a.tar.gz", _model_entries(m)[:1]
                                           + [("model.safetensors", b"\0" * 8 * 2 ** 20)], "w:gz"),
                         "model.safetensors is damaged (its header is not JSON)"),
}


def _truncated(m, path, keep, mode="w"):
    """An archive of the model cut after ``keep`` bytes (None: half way, inside the weights)."""
    _tar(path, _model_entries(m), mode)
    raw = path.read_bytes()
    path.write_bytes(raw[:len(raw) // 2 if keep is None else keep])
    return path


def _link(name, target):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info


def _fifo_info(name):
    info = tarfile.TarInfo(name)
    info.type = tarfile.FIFOTYPE
    return info


@pytest.mark.parametrize("case", sorted(ARCHIVE_ROWS))
def test_bad_archive_is_refused_in_one_line(pacm, tmp_path, capsys, case):
    make, message = ARCHIVE_ROWS[case]
    archive = make(pacm, tmp_path)
    assert os.path.getsize(archive) < 12 * 2 ** 20
    _refused(archive, message, capsys, tmp_path, file=archive)


def test_archive_members_are_never_read_past_their_size(tmp_path):
    """A 3 GiB entry in a 3 MB .tar.gz took 3.5 GB: under a 1.5 GiB allowance it is refused from its header.
    (Gzip members concatenated are one stream: 48 copies of 64 MiB of zeros compressed once.)"""
    info = tarfile.TarInfo("model.safetensors")
    info.size = 3 * 2 ** 30
    zeros = gzip.compress(b"\0" * 2 ** 26, 9)
    with open(tmp_path / "bomb.tar.gz", "wb") as f:
        f.write(gzip.compress(info.tobuf(format=tarfile.GNU_FORMAT)))
        for _ in range(info.size // 2 ** 26):
            f.write(zeros)
        f.write(gzip.compress(b"\0" * 10240))
    assert os.path.getsize(tmp_path / "bomb.tar.gz") < 8 * 2 ** 20
    res = _load_in_child(tmp_path / "bomb.tar.gz", tmp_path)
    assert res.startswith("REFUSED") and "more than a model's model.safetensors can be" in res, res


def _load_in_child(path, tmp_path, allowance_gib: float = 1.5, timeout: float = 90) -> str:
    """``load(path)`` in a child process allowed ``allowance_gib`` more address space than it has once costlab
    is imported: 'REFUSED <message>' for an InputError, else what went wrong (a MemoryError, a timeout)."""
    code = f"""
import resource, sys
from costlab.common.errors import InputError
from costlab.costmodels.predictors import load
vm = next(int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('VmSize:'))
resource.setrlimit(resource.RLIMIT_AS, (vm + int({allowance_gib} * 2 ** 30), resource.RLIM_INFINITY))
try:
    load({str(path)!r})
    print('LOADED')
except InputError as exc:
    print('REFUSED', exc)
"""
    try:
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                             cwd=tmp_path)
    except subprocess.TimeoutExpired:
        return f"TIMEOUT after {timeout} s"
    return res.stdout.strip() or res.stderr[-1500:]


NOT_REGULAR = {
    "config a FIFO": (lambda m: _mkfifo(m / "config.json"), "config.json", "not a regular file (a named pipe)"),
    "weights a FIFO": (lambda m: _mkfifo(m / "model.safetensors"), "model.safetensors",
                       "not a regular file (a named pipe)"),
    "weights a link to /dev/zero": (lambda m: _symlink(m / "model.safetensors", "/dev/zero"), "model.safetensors",
                                    "not a regular file (a character device)"),
    "config a link to /dev/zero": (lambda m: _symlink(m / "config.json", "/dev/zero"), "config.json",
                                   "not a regular file (a character device)"),
}


def _mkfifo(path):
    path.unlink()
    os.mkfifo(path)


def _symlink(path, target):
    path.unlink()
    path.symlink_to(target)


@pytest.mark.skipif(not os.path.exists("/dev/zero") or not hasattr(os, "mkfifo"), reason="needs POSIX files")
@pytest.mark.parametrize("case", sorted(NOT_REGULAR))
def test_only_regular_files_are_read(pacm, tmp_path, capsys, case):
    """A FIFO hung the loader; /dev/zero read until memory ran out. Checked in a child first (with a timeout and
    a memory allowance, so that a missing check fails the test, not the machine), then in one line."""
    make, name, message = NOT_REGULAR[case]
    make(pacm)
    res = _load_in_child(pacm, tmp_path, timeout=60)
    assert res.startswith("REFUSED") and message in res, res
    _refused(pacm, message, capsys, tmp_path, file=pacm / name)


def test_archive_that_is_a_fifo_or_a_device(tmp_path, capsys):
    os.mkfifo(tmp_path / "m.tar")
    res = _load_in_child(tmp_path / "m.tar", tmp_path, timeout=60)
    assert res.startswith("REFUSED") and "not a regular file (a named pipe)" in res, res
    (tmp_path / "z.tar").symlink_to("/dev/zero")
    res = _load_in_child(tmp_path / "z.tar", tmp_path, timeout=60)
    assert res.startswith("REFUSED") and "not a regular file (a character device)" in res, res


def test_config_that_is_a_directory(pacm, tmp_path, capsys):
    (pacm / "config.json").unlink()
    (pacm / "config.json").mkdir()
    _refused(pacm, "not a regular file (a directory)", capsys, tmp_path, file=pacm / "config.json")


def test_weights_file_over_the_limit_is_refused_from_its_size(pacm, tmp_path, capsys):
    with open(pacm / "model.safetensors", "r+b") as f:  # sparse: no disk or memory spent
        f.truncate(WEIGHTS_MAX + 1)
    _refused(pacm, "more than a model.safetensors can be (at most 2 GiB)", capsys, tmp_path,
             file=pacm / "model.safetensors")


def test_weights_header_checked_before_the_data(pacm, tmp_path, capsys):
    """A header claiming more than the file holds, or tensors that overlap, is damage found from the header."""
    raw = (pacm / "model.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    name = next(k for k in header if k != "__metadata__")
    header[name]["data_offsets"][1] += 4
    text = json.dumps(header).encode()
    blob = len(text).to_bytes(8, "little") + text + raw[8 + n:]
    (pacm / "model.safetensors").write_bytes(blob)
    _edit(pacm, seal=True, weights_sha256=hashlib.sha256(blob).hexdigest())
    _refused(pacm, "model.safetensors is damaged (tensor", capsys, tmp_path, file=pacm)


# -- 4. costlab models: a table, --json for the raw record ---------------------------------------------------------

def test_models_prints_a_table(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["NAME", "KIND", "TARGET", "TRAINED", "ON", "HELD-OUT", "TOP-1", "XGBOOST", "TOP-1"]
    c = _config(shipped_path("x86-cpu-v1"))  # the version whose config carries held-out figures
    row = next(ln for ln in out if ln.startswith("x86-cpu-v1 "))
    target = c["targets"][c["platforms"][0]]
    assert f"{target['kind']} -mcpu={target['mcpu']} -num-cores={target['num-cores']}" in row
    assert f"{c['corpus']['tasks']:,} tasks / {c['corpus']['records']:,} records" in row
    mean = c["held_out"]["mean"]
    assert row.split()[-2:] == [f"{mean['pacm']['top1']:.3f}", f"{mean['xgb']['top1']:.3f}"]
    assert row.index("pacm") == out[0].index("KIND")  # columns aligned under their titles
    assert any(f"mean over {len(c['held_out']['splits'])} splits" in ln for ln in out)
    for name in versioned_names():  # every version says what its held-out figure is, scored on one set or several
        config = _config(shipped_path(name))
        held = config["held_out"]
        row = next(ln for ln in out if ln.startswith(name + " "))
        assert f"{held['mean'][config['kind']]['top1']:.3f}" in row.split()
        assert any(ln.startswith(f"{name}: held-out top-1 is ") and held["held_out"] in ln for ln in out)
    assert main(["models", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["x86-cpu-v1"]["held_out"] == c["held_out"] and rows["x86-cpu-v1"]["kind"] == "pacm"


def test_a_model_says_which_revision_of_its_features_it_learned(capsys):
    """A featurizer's revision (a fix that changes some programs' features, not what they are) is recorded in
    every model trained since, kept on load (``trained_revision``), and `costlab models` says of a shipped model
    that learned an older one which it learned; a model from before revisions were recorded still loads, and a
    revision that is no whole number is refused."""
    from costlab.featurizers import base
    from costlab.featurizers.pacm import PaCM

    made = base.create("pacm")
    assert made.to_json()["revision"] == PaCM.revision and made.trained_revision is None
    assert base.from_json(made.to_json()).trained_revision == PaCM.revision
    assert base.from_json({"name": "pacm", "version": PaCM.version, "config": {}}).trained_revision is None
    for bad in ("4", -1, 2.0, True):
        with pytest.raises(ValueError, match=f"featurizer pacm revision {bad!r} is not a whole number"):
            base.from_json({"name": "pacm", "version": PaCM.version, "revision": bad, "config": {}})
    assert main(["models"]) == 0
    out = capsys.readouterr().out.splitlines()
    for name in versioned_names():
        learned = _config(shipped_path(name))["featurizer"]["revision"]
        says = [ln for ln in out if ln.startswith(f"{name}: learned pacm features of revision {learned}; "
                                                  f"this costlab computes revision {PaCM.revision}")]
        assert len(says) == (learned != PaCM.revision)


def test_models_table_without_figures():
    from costlab.costmodels.listing import models_table

    text = models_table([dict(name="m", kind="tlp", platforms=["p"], targets=None, corpus=None,
                              data=dict(tasks=3, records={"p": 1200}), held_out=None)])
    assert text.splitlines()[1].split() == ["m", "tlp", "?", "3", "tasks", "/", "1,200", "records", "-", "-"]
    assert models_table([]) == "no shipped models"


def test_a_lone_surrogate_in_a_config_is_hashed_and_the_digests_of_text_stay(pacm, tmp_path):
    # JSON's "\udcff" is a lone surrogate once read: sealing, saving and loading such a config works ...
    _edit(pacm, seal=True, note="caf\udcff")
    assert _config(pacm)["note"] == "caf\udcff" and load(str(pacm)).kind == "pacm"
    # ... and every config of valid text keeps the digest it had: the UTF-8 of its canonical JSON
    c = dict(_config(pacm), note="café ✓")
    body = json.dumps({k: v for k, v in c.items() if k != "config_sha256"}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)
    assert config_digest(c) == hashlib.sha256(body.encode("utf-8")).hexdigest()


# -- a config whose featurizer, baseline or heads cannot serve: refused when loaded, in one line ---------------------

FEATURIZER_EDITS = {
    "version as text": (dict(version="3"), "is not an integer"),
    "version fractional": (dict(version=3.9), "is not an integer"),
    "version null": (dict(version=None), "is not an integer"),
    "name a list": (dict(name=["pacm"]), "unknown featurizer ['pacm']"),
    "config a number": (dict(config=5), "config is not a JSON object"),
}


@pytest.mark.parametrize("case", sorted(FEATURIZER_EDITS))
def test_featurizer_of_the_wrong_type_is_refused(pacm, case):
    changes, message = FEATURIZER_EDITS[case]
    _edit(pacm, seal=True, featurizer=dict(_config(pacm)["featurizer"], **changes))
    with pytest.raises(InputError, match=re.escape(message)) as info:
        load(str(pacm))
    assert info.value.path == str(pacm)


def _xgb(directory, features: int, featurizer: dict):
    """An xgb baseline artifact whose booster reads ``features`` numbers, fed by ``featurizer``."""
    import numpy as np
    import xgboost as xgb

    from costlab.costmodels.baselines import booster_tensors

    rng = np.random.default_rng(0)
    booster = xgb.train({"max_depth": 2}, xgb.DMatrix(rng.random((40, features)), rng.random(40)), 2)
    return save_artifact(directory, booster_tensors(booster), dict(kind="xgb", net={}, featurizer=featurizer,
                                                                   platforms=["llvm-x86_64-2c"]))


def test_baseline_that_cannot_score_its_features_is_refused(tmp_path):
    """An xgb booster of another feature count, or an xgb model fed by TLP tokens, loaded and failed on its first
    batch (an XGBoost error, a KeyError); each is refused when loaded, naming the model."""
    pacm = _config(SHIPPED)["featurizer"]
    assert load(str(_xgb(tmp_path / "ok", 164, pacm))).kind == "xgb"
    with pytest.raises(InputError, match="the XGBoost booster reads 10 features, not the 164"):
        load(str(_xgb(tmp_path / "ten", 10, pacm)))
    tlp = json.loads(json.dumps(_config(_tlp(tmp_path / "tlp"))["featurizer"]))
    with pytest.raises(InputError, match="a model of kind xgb is fed by the pacm featurizer, not tlp") as info:
        load(str(_xgb(tmp_path / "fed_tlp", 164, tlp)))
    assert info.value.path == str(tmp_path / "fed_tlp")


def test_config_too_large_to_load_is_never_written(tlp, tmp_path):
    """``save_artifact`` refuses a config no reader would take (``CONFIG_MAX``), before writing anything."""
    from costlab.common.errors import UsageError

    art = read_artifact(tlp)
    with pytest.raises(UsageError, match="more than a model's"):
        save_artifact(tmp_path / "big", art.tensors, dict(art.config, evaluation="x" * CONFIG_MAX))
    assert not (tmp_path / "big").exists()


def test_one_head_model_of_two_platforms_scores_both_with_its_head(tmp_path):
    """A one-head model trained with two platforms (labelled by the first) scores the second with its one head."""
    from costlab.costmodels.predictors import head_of

    m = _tlp(tmp_path / "m")
    _edit(m, seal=True, platforms=["llvm-x86_64-2c", "llvm-other-2c"])
    predictor = load(str(m))
    assert [head_of(predictor, p) for p in ("llvm-x86_64-2c", "llvm-other-2c", None)] == [0, 0, 0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX files")
def test_export_force_never_reads_a_fifo_it_is_asked_to_replace(tmp_path):
    """``export --force`` asks whether the path it would replace is a model; a FIFO there (or as a model directory's
    config) is no model, and opening it waited for a writer forever. Asked in a child with a timeout, so that a
    missing check fails the test rather than hanging it."""
    os.mkfifo(tmp_path / "out.tar")
    (tmp_path / "model").mkdir()
    os.mkfifo(tmp_path / "model" / "config.json")
    code = ("import sys; from costlab.costmodels.artifact import replaceable; "
            "print([replaceable(p) for p in sys.argv[1:]])")
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out.tar"), str(tmp_path / "model")],
                         capture_output=True, text=True, timeout=60)
    assert res.stdout.strip() == "[False, False]", res.stdout + res.stderr[-1500:]


def test_weights_of_integers_are_refused_not_cast(tlp):
    """Tensors of the right names and shapes but integer dtype (a hand-made or foreign file): load_state_dict casts
    them silently and the net scores garbage; they are refused, naming the tensor."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(tlp / "model.safetensors")
    save_file({k: t.to(torch.int64) if t.dtype.is_floating_point else t for k, t in tensors.items()},
              tlp / "model.safetensors")
    c = _config(tlp)
    c["weights_sha256"] = hashlib.sha256((tlp / "model.safetensors").read_bytes()).hexdigest()
    _write_config(tlp, c, seal=True)
    with pytest.raises(InputError, match="the weights are torch.int64"):
        load(str(tlp))
