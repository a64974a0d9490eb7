"""``costlab featurize`` and the feature caches: build, resume, re-run only on change, refit, bad input."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys

import h5py
import numpy as np
import pytest

from conftest import FIXTURES
from costlab.cli import main
from costlab.datasets import open_dataset
from costlab.datasets.ansor_log import import_ansor
from costlab.featurizers import create
from costlab.common.errors import InputError
from costlab.featurizers.cache import build_cache, cached_fits, fitted_featurizer, open_cache
from costlab.featurizers.tlp import TLPFeaturizer

BERT = FIXTURES / "ansor" / "2080ti-bert-B1-head128.json"  # platform 2080ti (GPU steps)
MLP = FIXTURES / "ansor" / "platinum-8358-MLP1-B256-head128.json"  # platform platinum-8358 (CPU steps)
CPU = "platinum-8358"


def _run(capsys, *argv):
    code = main(["featurize", *map(str, argv)])
    return code, capsys.readouterr().err


def _half(tmp_path):
    """The first 64 lines of the CPU log."""
    part = tmp_path / "mlp-64.json"
    part.write_bytes(b"\n".join(MLP.read_bytes().splitlines()[:64]) + b"\n")
    return part


def _cache(path, platform):
    with h5py.File(path, "r") as f:
        g = f[f"features/tlp@1/{platform}"]
        return int(g.attrs["n_done"]), g.attrs["config"], {k: g[k][...] for k in g}


def test_build_resume_after_added_records_and_rerun(tmp_path, capsys):
    data = tmp_path / "d.h5"
    import_ansor([_half(tmp_path)], data, progress=False)
    code, err = _run(capsys, data, "--featurizer", "tlp", "--no-progress")
    assert code == 0, err
    assert "platinum-8358: 64 records, 0 cached before, 64 featurized" in err
    n, config, first = _cache(data, CPU)
    assert n == 64 and first["kind"].shape[0] == 64

    code, err = _run(capsys, data, "--featurizer", "tlp", "--no-progress")
    assert code == 0 and "platinum-8358: 64 records, cache up to date" in err

    import_ansor([MLP], data, progress=False)  # the other 64 records of the same log
    code, err = _run(capsys, data, "--featurizer", "tlp", "--no-progress")
    assert code == 0 and "platinum-8358: 128 records, 64 cached before, 64 featurized" in err
    n, config2, both = _cache(data, CPU)
    assert n == 128 and config2 == config  # the stored fit was reused, not refitted
    for k in first:
        np.testing.assert_array_equal(both[k][:64], first[k])
    # the appended rows are what the same featurizer gives from scratch
    f = create("tlp", json.loads(config))
    with open_dataset(data) as ds:
        fresh = f.featurize_records(ds, CPU, np.arange(128))
        cache = open_cache(ds, f, CPU)
        assert cache is not None and cache.n_done == 128
        got = cache.get(np.array([100, 3, 77]))
    for k in fresh:
        np.testing.assert_array_equal(both[k], fresh[k], err_msg=k)
        np.testing.assert_array_equal(got[k], fresh[k][[100, 3, 77]], err_msg=k)


def test_new_platform_refit_and_config_change(tmp_path, capsys):
    data = tmp_path / "d.h5"
    import_ansor([MLP], data, progress=False)
    assert _run(capsys, data, "--featurizer", "tlp", "--no-progress")[0] == 0
    _, cpu_config, _ = _cache(data, CPU)

    # a GPU platform added later is featurized with the vocabulary fitted before (CPU steps only) ...
    import_ansor([BERT], data, progress=False)
    code, err = _run(capsys, data, "--featurizer", "tlp", "--no-progress")
    assert code == 0, err
    assert "platinum-8358: 128 records, cache up to date" in err
    assert "2080ti: 128 records, 0 cached before, 128 featurized" in err
    assert _cache(data, "2080ti")[1] == cpu_config
    # ... which says how much of the new platform it does not know, and what to do
    assert "384 of 1664 tokens of '2080ti' (23.1%) are unknown to the vocabulary of tlp@1" in err
    assert "--refit" in err and err.count("are unknown") == 1
    # ... until --refit fits on both platforms: GPU keys join the vocabulary and both caches are rebuilt
    code, err = _run(capsys, data, "--featurizer", "tlp", "--refit", "--no-progress")
    assert code == 0, err
    assert "platinum-8358: 128 records, 0 cached before" in err and "2080ti: 128 records, 0 cached before" in err
    assert "are unknown" not in err
    voc = json.loads(_cache(data, "2080ti")[1])["vocabulary"]
    assert "AN:threadIdx.x" in voc and "AN:threadIdx.x" not in json.loads(cpu_config)["vocabulary"]
    assert _cache(data, "2080ti")[1] == _cache(data, CPU)[1]

    # other settings: a new fit and new caches; the same settings again (from a file): nothing to do
    code, err = _run(capsys, data, "--featurizer", "tlp", "--config", '{"num_slots": 8}', "--no-progress")
    assert code == 0 and "platinum-8358: 128 records, 0 cached before, 128 featurized" in err
    assert _cache(data, CPU)[2]["numeric"].shape[2] == 8
    cfg = tmp_path / "tlp.json"
    cfg.write_text('{"num_slots": 8}')
    code, err = _run(capsys, data, "--featurizer", "tlp", "--config", f"@{cfg}", "--no-progress")
    assert code == 0 and err.count("cache up to date") == 2
    # one platform only
    code, err = _run(capsys, data, "--featurizer", "tlp", "--platform", "2080ti", "--config", '{"num_slots": 4}',
                     "--no-progress")
    assert code == 0 and "2080ti: 128 records, 0 cached before" in err and "platinum" not in err
    assert _cache(data, CPU)[2]["numeric"].shape[2] == 8


def test_refit_of_one_platform_rebuilds_the_others_on_the_new_fit(tmp_path, capsys):
    """`--refit --platform X` fits on all platforms; it rebuilt only X's cache before, leaving two vocabularies of
    the same settings, and the next plain run took the old one from the first platform's cache and silently
    rebuilt X with it. Now every platform cached with the old fit is rebuilt too (and named), so one fit remains."""
    data = tmp_path / "d.h5"
    import_ansor([BERT], data, progress=False)
    assert _run(capsys, data, "--featurizer", "tlp", "--no-progress")[0] == 0
    import_ansor([MLP], data, progress=False)  # featurized with the GPU-only vocabulary: unknown tokens
    code, err = _run(capsys, data, "--featurizer", "tlp", "--no-progress")
    assert code == 0 and "are unknown" in err

    code, err = _run(capsys, data, "--featurizer", "tlp", "--refit", "--platform", CPU, "--no-progress")
    assert code == 0, err
    assert "--refit: also rebuilding tlp@1 on 2080ti (cached with the old fit" in err
    assert f"{CPU}: 128 records, 0 cached before" in err and "2080ti: 128 records, 0 cached before" in err
    refit = _cache(data, CPU)[1]
    assert _cache(data, "2080ti")[1] == refit  # one vocabulary in the dataset again

    code, err = _run(capsys, data, "--featurizer", "tlp", "--no-progress")  # keeps the refit: nothing to do
    assert code == 0 and err.count("cache up to date") == 2 and "are unknown" not in err, err
    assert _cache(data, CPU)[1] == _cache(data, "2080ti")[1] == refit
    # a refit that gives the same fit again rebuilds nothing
    code, err = _run(capsys, data, "--featurizer", "tlp", "--refit", "--platform", CPU, "--no-progress")
    assert code == 0 and "also rebuilding" not in err and f"{CPU}: 128 records, cache up to date" in err, err



def _old_fit_and_refit(tmp_path, capsys):
    """A dataset whose CPU records were featurized on a GPU-only vocabulary (the old fit), that fit, and the
    fit a refit gives (both platforms' keys)."""
    data = tmp_path / "d.h5"
    import_ansor([BERT], data, progress=False)
    assert _run(capsys, data, "--featurizer", "tlp", "--no-progress")[0] == 0
    import_ansor([MLP], data, progress=False)
    with open_dataset(data) as ds:
        old = fitted_featurizer(ds, "tlp")
        new = fitted_featurizer(ds, "tlp", refit=True)
    assert old.config["vocabulary"] != new.config["vocabulary"]
    return data, old, new


def test_a_featurize_that_took_the_old_fit_stops_once_a_refit_has_written(tmp_path, capsys):
    """A featurize that took its fit from the dataset, then waited for the dataset while a `--refit` rebuilt the
    caches, cached its platform on the old fit: the platforms then disagreed on their vocabulary. It stops now,
    before writing, and says why."""
    data, old, new = _old_fit_and_refit(tmp_path, capsys)
    with open_dataset(data) as ds:
        then = cached_fits(ds, old)  # when the waiting featurize took its fit
    code, err = _run(capsys, data, "--featurizer", "tlp", "--refit", "--platform", "2080ti", "--no-progress")
    assert code == 0, err
    with pytest.raises(InputError, match=r"cache of 2080ti moved to another fit .* `costlab featurize --refit` wrote"):
        build_cache(data, old, CPU, progress=False, fit=False, fits_then=then)
    with h5py.File(data, "r") as f:
        assert CPU not in f["features/tlp@1"]
    assert _cache(data, "2080ti")[1] == json.dumps(new.config, sort_keys=True)
    assert build_cache(data, new, CPU, progress=False, fit=False)["computed"] == 128  # on the dataset's fit



def test_a_fitted_config_given_replaces_the_cache_of_another_fit(tmp_path, capsys):
    """A fitted config given with --config (a model's, trained elsewhere) whose fit differs from the dataset's cache
    replaces that cache, as before: the cache was on another fit already when the command took its fit, so no
    refit ran meanwhile (the check against one refused it, blaming a refit)."""
    data = tmp_path / "d.h5"
    import_ansor([MLP], data, progress=False)
    assert _run(capsys, data, "--featurizer", "tlp", "--no-progress")[0] == 0
    fitted = json.loads(_cache(data, CPU)[1])
    fitted["seq_len"] += 3
    given = tmp_path / "fitted.json"
    given.write_text(json.dumps(fitted))
    code, err = _run(capsys, data, "--featurizer", "tlp", "--config", f"@{given}", "--no-progress")
    assert code == 0, err
    assert json.loads(_cache(data, CPU)[1])["seq_len"] == fitted["seq_len"]

def test_a_refit_also_rebuilds_a_platform_cached_on_the_old_fit_while_it_ran(tmp_path, capsys, monkeypatch):
    """A featurize of the CPU platform took the old fit and cached it before the refit of 2080ti wrote anything:
    the refit, which had found no CPU cache to rebuild when it began, rebuilds it on its own fit once it is done."""
    import costlab.commands.featurize as command

    data, old, new = _old_fit_and_refit(tmp_path, capsys)
    real, calls = command.build_cache, []

    def with_a_featurize_beside(path, featurizer, platform, **kw):
        if not calls:
            real(path, old, CPU, progress=False, fit=False)  # the other featurize, first to the dataset
        calls.append(platform)
        return real(path, featurizer, platform, **kw)

    monkeypatch.setattr(command, "build_cache", with_a_featurize_beside)
    code, err = _run(capsys, data, "--featurizer", "tlp", "--refit", "--platform", "2080ti", "--no-progress")
    assert code == 0, err
    assert calls == ["2080ti", CPU]
    assert f"--refit: also rebuilding tlp@1 on {CPU} (cached with the old fit" in err
    assert _cache(data, CPU)[1] == _cache(data, "2080ti")[1] == json.dumps(new.config, sort_keys=True)

def test_interrupted_build_resumes(tmp_path, monkeypatch):
    import costlab.featurizers.cache as cache_mod

    data = tmp_path / "d.h5"
    import_ansor([MLP], data, progress=False)
    monkeypatch.setattr(cache_mod, "COMMIT_EVERY", 0)  # a transaction a chunk, however long the file's copy takes
    calls = {"n": 0}
    real = TLPFeaturizer.featurize_records

    def flaky(self, ds, platform, rows):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("killed")
        return real(self, ds, platform, rows)

    monkeypatch.setattr(TLPFeaturizer, "featurize_records", flaky)
    with pytest.raises(RuntimeError, match="killed"):
        build_cache(data, "tlp", CPU, chunk=32, commit_seconds=0, progress=False)
    assert _cache(data, CPU)[0] == 64  # two chunks committed before the interruption
    monkeypatch.setattr(TLPFeaturizer, "featurize_records", real)
    stats = build_cache(data, "tlp", CPU, chunk=32, commit_seconds=0, progress=False)
    assert stats["cached_before"] == 64 and stats["computed"] == 64 and _cache(data, CPU)[0] == 128


# `costlab featurize` with TLP slowed down (0.2 s a chunk of 8 records), saying on stdout which chunk it starts
SLOW_FEATURIZE = """
import sys, time
from costlab.cli import main
from costlab.featurizers.tlp import TLPFeaturizer
real = TLPFeaturizer.featurize_records
def slow(self, ds, platform, rows):
    print("chunk", int(rows[0]), flush=True)
    time.sleep(0.2)
    return real(self, ds, platform, rows)
TLPFeaturizer.featurize_records = slow
sys.exit(main(["featurize", sys.argv[1], "--featurizer", "tlp", "--chunk", "8", "--no-progress"]))
"""


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_featurize_keeps_the_rows_done(tmp_path, capsys, sig, code):
    """Ctrl-C or SIGTERM long before the minute's save: the rows featurized so far are committed before the command
    ends (they were thrown away with the transaction before), and a rerun continues from them to the same features
    as a run never interrupted."""
    data, whole = tmp_path / "d.h5", tmp_path / "whole.h5"
    import_ansor([MLP], data, progress=False)
    shutil.copy(data, whole)
    # the child gets Ctrl-C's default disposition: a shell starts background jobs with SIGINT ignored
    proc = subprocess.Popen([sys.executable, "-c", SLOW_FEATURIZE, str(data)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for line in proc.stdout:  # chunks 0, 8 and 16 are appended once chunk 24 starts
            if line.split() == ["chunk", "24"]:
                break
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err
    assert "costlab: interrupted; data written before is kept" in err and "Traceback" not in err, err
    with h5py.File(data, "r") as f:
        assert f"features/tlp@1/{CPU}" in f, "the rows featurized before the interrupt were not saved"
    n_done, _, part = _cache(data, CPU)
    assert 24 <= n_done < 128 and f"tlp@1 {CPU}: {n_done} of 128 records cached; a rerun continues" in err
    assert part and all(v.shape[0] == n_done for v in part.values())  # every array has the rows counted
    assert not list(tmp_path.glob(".d.h5.tmp*"))  # the transaction's copy was renamed, none left

    got, err = _run(capsys, data, "--featurizer", "tlp", "--no-progress")
    assert got == 0 and f"{CPU}: 128 records, {n_done} cached before, {128 - n_done} featurized" in err, err
    assert _run(capsys, whole, "--featurizer", "tlp", "--no-progress")[0] == 0
    (n, config, resumed), (n_whole, config_whole, fresh) = _cache(data, CPU), _cache(whole, CPU)
    assert n == n_whole == 128 and config == config_whole and resumed.keys() == fresh.keys()
    for k in fresh:
        np.testing.assert_array_equal(resumed[k], fresh[k], err_msg=k)


def test_a_transaction_lasts_ten_times_the_seconds_of_the_last_ones_copy(tmp_path, monkeypatch):
    """Each transaction copies the whole dataset file: seconds, for a file of GBs. The rows of a build are then
    committed after ten times the last transaction's own seconds (its copy and commit, here made 0.5 s), not
    after every ``commit_seconds``: one commit a chunk below became two commits in all."""
    import time

    import costlab.featurizers.cache as cache_mod
    from costlab.datasets import DatasetWriter

    data = tmp_path / "d.h5"
    import_ansor([MLP], data, progress=False)
    transactions = []

    class SlowCopy(DatasetWriter):
        def _begin(self):
            transactions.append(self)
            time.sleep(0.5)
            return super()._begin()

    monkeypatch.setattr(cache_mod, "DatasetWriter", SlowCopy)
    build_cache(data, "tlp", CPU, chunk=32, commit_seconds=0, progress=False)
    assert _cache(data, CPU)[0] == 128 and len(transactions) == 2  # 4 chunks: the first, then the other three


def test_a_build_that_looked_before_another_finished_goes_on_from_the_files_count(tmp_path, monkeypatch):
    """Two builds of one cache (a second featurize, every rank of a multi-node training): the one that read the
    cache's count before the other committed continues from the file's count under the writer's lock, so no
    row is cached twice and every row stays its record's."""
    import costlab.featurizers.cache as cache_mod

    data = tmp_path / "d.h5"
    import_ansor([MLP], data, progress=False)
    build_cache(data, "tlp", CPU, chunk=32, commit_seconds=0, progress=False)
    n_done, _, done = _cache(data, CPU)
    monkeypatch.setattr(cache_mod, "open_cache", lambda ds, featurizer, platform: None)  # looked before: nothing
    build_cache(data, "tlp", CPU, chunk=32, commit_seconds=0, progress=False)
    again, _, now = _cache(data, CPU)
    assert again == n_done == 128 and now["kind"].shape == done["kind"].shape
    assert all(np.array_equal(now[k], done[k]) for k in done)


def test_bad_input(tmp_path, capsys):
    data = tmp_path / "d.h5"
    import_ansor([MLP], data, progress=False)
    code, err = _run(capsys, data, "--featurizer", "tlp", "--platform", "k80")
    assert code == 2 and "no records for platform 'k80'" in err and "platinum-8358" in err
    code, err = _run(capsys, data, "--featurizer", "tlp", "--config", "{num_slots: 8}")
    assert code == 2 and "featurizer config is not JSON" in err
    code, err = _run(capsys, data, "--featurizer", "tlp", "--config", f"@{tmp_path / 'none.json'}")
    assert code == 2 and "none.json" in err
    code, err = _run(capsys, tmp_path / "missing.h5", "--featurizer", "tlp")
    assert code == 2 and "missing.h5: no such file" in err
    with pytest.raises(SystemExit, match="unknown featurizer 'tlq'"):
        main(["featurize", str(data), "--featurizer", "tlq"])
    with pytest.raises(SystemExit, match="unknown config keys"):
        main(["featurize", str(data), "--featurizer", "tlp", "--config", '{"slots": 3}'])
    assert "features" not in h5py.File(data, "r")  # nothing was written


def _error(err: str) -> str:
    """The one error line of a command's stderr (and no traceback)."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("featurizer,config,message", [
    ("tlp", '{"num_slots": "x"}', "--config: num_slots must be a positive integer, not 'x'"),
    ("tlp", '{"num_slots": -1}', "--config: num_slots must be a positive integer, not -1"),
    ("tlp", '{"num_slots": 2.5}', "--config: num_slots must be a positive integer, not 2.5"),
    ("tlp", '{"ms_drop": 5}', "--config: ms_drop must be a list of strings, not 5"),
    ("tlp", '{"ms_drop": ["GetLoops", 3]}', "--config: ms_drop must be a list of strings"),
    ("tlp", '{"seq_len_percentile": 101}', "--config: seq_len_percentile must be a number from 0 to 100, not 101"),
    ("tlp", '{"min_count": -1}', "--config: min_count must be a non-negative integer, not -1"),
    ("tlp", '{"fit_sample": true}', "--config: fit_sample must be a positive integer, not True"),
    ("tlp", '{"seq_len": 0}', "--config: seq_len must be a positive integer, not 0"),
    ("tlp", '{"vocabulary": "abc"}', "--config: vocabulary must be a list of strings, not 'abc'"),
    # a learned key alone: checked, then replaced by the fit without a word (the model trained with another one)
    ("tlp", '{"seq_len": 12}', "--config: seq_len is learned by fit together with vocabulary, not set alone"),
    ("psa", '{"spec": 3}', "--config: spec must be a JSON object of hardware spec fields"),
    ("psa", '{"spec": {"cores": "x"}}', "--config: spec: field 'cores' must be a number, got 'x'"),
    ("psa", '{"spec": {"corez": 8}}', "--config: spec has no hardware spec field 'corez'"),
    # NaN gave valid rows of NaN estimates, 0 made every record unreadable, infinity an OverflowError traceback
    # (an int field) or a bandwidth that costs nothing (a float one), a fraction of a count was truncated, true was 1
    ("psa", '{"spec": {"freq_ghz": NaN}}', "--config: spec: field 'freq_ghz' must be a finite number, got nan"),
    ("psa", '{"spec": {"l2_bytes": Infinity}}', "--config: spec: field 'l2_bytes' must be a finite number, got inf"),
    ("pacm", '{"spec": {"llc_bytes": 1e400}}', "--config: spec: field 'llc_bytes' must be a finite number, got inf"),
    ("psa", '{"spec": {"freq_ghz": 0}}', "--config: spec: field 'freq_ghz' must be above 0, got 0"),
    ("psa", '{"spec": {"vector_registers": 0}}', "--config: spec: field 'vector_registers' must be above 0, got 0"),
    ("psa", '{"spec": {"cores": 2.9}}', "--config: spec: field 'cores' must be a whole number, got 2.9"),
    ("psa", '{"spec": {"cores": true}}', "--config: spec: field 'cores' must be a number, got True"),
    ("psa", '{"spec": {"dram_gbs": Infinity}}', "--config: spec: field 'dram_gbs' must be a finite number, got inf"),
    ("psa", '{"spec": {"kind": "tpu"}}', "--config: spec kind must be \"cpu\" or \"gpu\", not 'tpu'"),
    ("psa", '{"mode": 3}', "--config: mode must be a string, not 3"),
    ("psa", '{"mode": "fast"}', "--config: mode must be 'trace' or 'tir', not 'fast'"),
    ("pacm", '{"num_threads": 0}', "--config: num_threads must be a positive integer, not 0"),
    ("pacm", '{"spec": [1]}', "--config: spec must be a JSON object"),
])
def test_bad_config_value_is_one_line(tmp_path, capsys, featurizer, config, message):
    """A config value of the wrong type or out of range is refused when the featurizer is made, in one line naming
    the option and what is wrong (a traceback from deep inside featurizing before), and nothing is written."""
    data = tmp_path / "d.h5"
    import_ansor([MLP], data, progress=False)
    code, err = _run(capsys, data, "--featurizer", featurizer, "--config", config, "--no-progress")
    assert code == 2 and message in _error(err)
    cfg = tmp_path / "bad.json"  # from a file, the file is named
    cfg.write_text(config)
    code, err = _run(capsys, data, "--featurizer", featurizer, "--config", f"@{cfg}", "--no-progress")
    assert code == 2 and f"{cfg}: " in _error(err) and message.split(": ", 1)[1] in err
    assert "features" not in h5py.File(data, "r")


def test_spec_fields_of_the_other_kind_name_the_platform(tmp_path, capsys):
    """CPU spec fields are a valid PSA config, but not for a GPU platform: that platform's featurizing is refused
    in one line (a traceback before)."""
    data = tmp_path / "d.h5"
    import_ansor([BERT], data, progress=False)
    code, err = _run(capsys, data, "--featurizer", "psa", "--config", '{"spec": {"cores": 8}}', "--no-progress")
    line = _error(err)
    assert code == 2 and line.startswith("costlab: error: --config: spec: unknown gpu spec field 'cores'")
    assert "(for platform 2080ti)" in line


def test_a_whole_spec_of_the_other_kind_is_refused_naming_the_platform(tmp_path, capsys):
    """A whole GPU spec for a CPU platform (or the reverse) passed every field check and put the platform's programs
    through the other formula: every record read as valid, their estimates meaningless."""
    data = tmp_path / "d.h5"
    shutil.copy(FIXTURES / "ms_small.h5", data)
    code, err = _run(capsys, data, "--featurizer", "psa", "--config", '{"spec": {"kind": "gpu"}}', "--no-progress")
    assert code == 2 and _error(err) == ("costlab: error: --config: spec kind 'gpu' does not match the cpu of "
                                         "platform llvm-x86_64-2c")
    assert "features" not in h5py.File(data, "r")


def test_valid_configs_load_unchanged():
    """Configs that worked before still load and serialise as given (they travel inside models): whole numbers
    written with a fraction of zero, ints where a number is asked for, a whole spec or spec fields, null."""
    from costlab.featurizers import from_json

    for name, config in [("tlp", {"num_slots": 8.0, "seq_len_percentile": 95, "min_count": 0, "ms_drop": [],
                                  "vocabulary": ["<pad>", "<unk>", "SP"], "seq_len": 12}),
                         ("psa", {"mode": "tir", "spec": {"cores": 4}}),
                         ("psa", {"spec": {"kind": "gpu", "sms": 80, "tc_gflops": 0}}),  # 0: not known
                         ("psa", {"spec": {"cores": 16.0, "freq_ghz": 3}}),  # a whole float, an int clock
                         ("pacm", {"spec": {"sms": 80, "l2_bytes": 1 << 20}, "num_threads": 2}),
                         ("pacm", {"spec": None}), ("null", {})]:
        f = create(name, config)
        assert {k: f.config[k] for k in config} == config
        again = from_json(json.loads(json.dumps(f.to_json())))
        assert again.to_json() == f.to_json() and again.fingerprint == f.fingerprint
    with pytest.raises(ValueError, match="featurizer tlp: seq_len must be a positive integer, not -3"):
        from_json({"name": "tlp", "version": 1, "config": {"vocabulary": ["<pad>", "<unk>"], "seq_len": -3}})


def test_a_whole_number_written_as_a_float_makes_the_same_cache(tmp_path):
    """`num_slots: 8` and `num_slots: 8.0` are the same config (equal values, which JSON does not tell apart): one
    fingerprint, and a cache made under one is used under the other, not rebuilt; the config still serialises as
    given."""
    data = tmp_path / "d.h5"
    import_ansor([MLP], data, progress=False)
    as_int, as_float = create("tlp", {"num_slots": 8}), create("tlp", {"num_slots": 8.0})
    assert isinstance(as_float.config["num_slots"], float) and as_float.to_json()["config"]["num_slots"] == 8.0
    assert as_int.fingerprint == as_float.fingerprint != create("tlp", {"num_slots": 9}).fingerprint
    with open_dataset(data) as ds:
        as_int.fit(ds, [CPU])
        as_float.fit(ds, [CPU])
    assert build_cache(data, as_int, CPU, progress=False)["computed"] > 0
    assert build_cache(data, as_float, CPU, progress=False)["computed"] == 0


def test_unreadable_schedule_counted_not_fatal(tmp_path, capsys):
    from costlab.datasets import DatasetWriter, RecordBatch

    data = tmp_path / "d.h5"
    import_ansor([MLP], data, progress=False)
    with DatasetWriter(data) as w:
        batch = RecordBatch()
        batch.append(0, '[["SP", 2, 0', [1e-3], 0, 0.0, 12345)  # a cut-off step list
        w.add_records(CPU, batch)
    code, err = _run(capsys, data, "--featurizer", "tlp", "--no-progress")
    assert code == 0 and "129 records, 0 cached before, 129 featurized" in err and "(1 unreadable)" in err
    valid = _cache(data, CPU)[2]["valid"]
    assert valid[:128].all() and not valid[128]


def test_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["featurize", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--featurizer" in out and "--platform" in out and "resumes" in out


@contextlib.contextmanager
def _tlp_cache(tmp_path):
    """The TLP feature cache of the MLP log's records, open."""
    data = tmp_path / "d.h5"
    import_ansor(MLP, data, progress=False)
    build_cache(data, "tlp", CPU, progress=False)
    with open_dataset(data) as ds:
        feats = create("tlp")
        feats.fit(ds, [CPU])
        yield open_cache(ds, feats, CPU)


def test_a_cache_gives_a_row_asked_for_twice(tmp_path):
    """A batch may ask for one record twice (a task's tail list beside its own lists): the cache reads it once and
    gives it in every place it was asked for (h5py refuses a repeated index)."""
    with _tlp_cache(tmp_path) as cache:
        whole = cache.get()
        rows = np.array([5, 1, 5, 9, 1])
        twice = cache.get(rows)
    assert twice.keys() == whole.keys()
    for k, v in whole.items():
        got = twice[k]
        want = [v[i] for i in rows] if isinstance(v, list) else v[rows]
        assert all(np.array_equal(a, b) for a, b in zip(got, want)) and len(got) == len(rows)


def test_records_longer_than_the_sequence_length_are_said(tmp_path, capsys):
    """Tokens past the sequence length are dropped (for a MetaSchedule trace its unroll and postprocessing
    decisions, at its end): a fit that cuts more than a few of a platform's records says how many, and the
    longest; the default fit (the 99th percentile) says nothing."""
    data = tmp_path / "d.h5"
    import_ansor([MLP], data, progress=False)
    code, err = _run(capsys, data, "--featurizer", "tlp", "--no-progress")
    assert code == 0 and "tokens past it are dropped" not in err
    code, err = _run(capsys, data, "--featurizer", "tlp", "--config", '{"max_seq_len": 4}', "--no-progress", "--refit")
    assert code == 0
    (line,) = [ln for ln in err.splitlines() if "tokens past it are dropped" in ln]
    assert "records of 'platinum-8358' have more tokens (up to " in line and "sequence length 4 of tlp@1" in line


def test_a_platform_featurized_with_the_generic_cpu_says_so(tmp_path, capsys):
    """No host record and an -mcpu PSA's table lacks (tigerlake, or none): the generic CPU's caches and clock are
    assumed, which featurize said nowhere; it names the platform and how to state the machine. A platform whose
    -mcpu is in the table says nothing."""
    from conftest import FIXTURES as fixtures

    data = tmp_path / "d.h5"
    shutil.copy(fixtures / "ms_small.h5", data)
    code, err = _run(capsys, data, "--featurizer", "psa", "--no-progress")
    assert code == 0
    (line,) = [ln for ln in err.splitlines() if "generic CPU" in ln]
    assert "platform 'llvm-x86_64-2c'" in line and "costlab dataset set-machine" in line
    zen5 = tmp_path / "z.h5"
    assert main(["dataset", "import-ms", str(fixtures / "zen5_small"), "-o", str(zen5)]) == 0
    capsys.readouterr()
    code, err = _run(capsys, zen5, "--featurizer", "psa", "--no-progress")
    assert code == 0 and "generic CPU" not in err


def test_a_cache_refuses_a_row_it_does_not_have(tmp_path):
    """A negative row gave no features at all (``get([-1, 0])`` gave none where two were asked for), so features
    came back misaligned with their records: a row outside the cache is an IndexError naming it."""
    with _tlp_cache(tmp_path) as cache:
        for rows, bad in (([-1, 0], -1), ([cache.n_done], cache.n_done)):
            with pytest.raises(IndexError, match=rf"feature cache has {cache.n_done} rows, asked for row {bad}$"):
                cache.get(np.array(rows))


def test_create_never_drops_a_config_and_names_a_bad_one():
    """``create(obj, config)`` returned the object and dropped the config silently (the user featurized with
    other settings than they gave); a config that is not a JSON object, or a name that is not a string, is one
    clear error."""
    tlp = create("tlp")
    with pytest.raises(ValueError, match="a config is given with a featurizer object"):
        create(tlp, {"num_slots": 4})
    assert create(tlp) is tlp
    with pytest.raises(ValueError, match="its config is a JSON object of options, not 'x'"):
        create("tlp", "x")
    with pytest.raises(ValueError, match=r"unknown featurizer \['tlp'\]"):
        create(["tlp"])


def test_a_new_cache_chunks_whole_rows_and_any_rows_read_are_the_rows_written(tmp_path):
    """A feature cache's arrays are chunked by whole rows (h5py's own chunking cut TLP's ``numeric`` across 16
    chunks a row, so a training batch decompressed thousands); rows are read a chunk at a time and picked in
    memory. Any rows, in any order, twice, from this layout or h5py's own (an older cache), are those written."""
    from costlab.featurizers.cache import _read_rows

    data = tmp_path / "d.h5"
    import_ansor([MLP], data, progress=False)
    build_cache(data, "tlp", CPU, progress=False, chunk=16)
    with open_dataset(data) as ds:
        cache = open_cache(ds, fitted_featurizer(ds, "tlp"), CPU)
        whole = cache.get()
        for name in ("numeric", "kind"):
            arr = ds.h5[f"features/tlp@1/{CPU}/{name}"]
            assert arr.chunks[1:] == arr.shape[1:], (name, arr.chunks)  # a row is never cut
        rng = np.random.default_rng(0)
        for rows in ([127], [3, 2, 1], rng.permutation(128)[:40], [5, 90, 5, 64, 0], np.arange(10, 60)):
            got = cache.get(np.asarray(rows))
            for k in whole:
                np.testing.assert_array_equal(got[k], whole[k][np.asarray(rows)], err_msg=k)
    with h5py.File(tmp_path / "old.h5", "w") as f:  # h5py's own chunking, as an older cache has it
        values = np.arange(128 * 68 * 16, dtype=np.float32).reshape(128, 68, 16)
        old = f.create_dataset("numeric", data=values, chunks=(16, 17, 4), compression="gzip")
        rows = rng.permutation(128)[:50]
        np.testing.assert_array_equal(_read_rows(old, rows), values[rows])
        np.testing.assert_array_equal(_read_rows(old, np.sort(rows)), values[np.sort(rows)])


def test_features_computed_in_chunks_are_those_of_one_call(tmp_path):
    """Without a cache of the featurizer, ``features_of`` featurizes a chunk at a time into arrays of all the
    rows (the chunks' arrays and their concatenation held every feature twice): the same arrays and lists, of the
    same dtypes, as one call over every row, for fixed-shape (TLP) and ragged (PaCM) outputs."""
    from costlab.featurizers.cache import features_of

    data = tmp_path / "d.h5"
    import_ansor([MLP], data, progress=False)
    with open_dataset(data) as ds:
        tlp = fitted_featurizer(ds, "tlp")
        rows = np.arange(127, -1, -3)
        one = tlp.featurize_records(ds, CPU, rows)
        parts = features_of(ds, tlp, CPU, rows, chunk=7)
        assert set(parts) == set(one)
        for k in one:
            assert parts[k].dtype == one[k].dtype
            np.testing.assert_array_equal(parts[k], one[k], err_msg=k)
    ms = tmp_path / "ms.h5"
    shutil.copy(FIXTURES / "ms_small.h5", ms)
    with open_dataset(ms) as ds:
        platform, pacm = ds.record_platforms()[0], create("pacm")
        rows = np.arange(79, -1, -2)
        one = pacm.featurize_records(ds, platform, rows)
        parts = features_of(ds, pacm, platform, rows, chunk=6)
        for k in one:
            if isinstance(one[k], list):
                assert len(parts[k]) == len(one[k])
                for a, b in zip(parts[k], one[k]):
                    np.testing.assert_array_equal(a, b, err_msg=k)
            else:
                np.testing.assert_array_equal(parts[k], one[k], err_msg=k)
