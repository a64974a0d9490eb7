"""Feature caches inside a dataset: ``/features/<name>@<version>/<platform>/``.

Rows are computed in record order and the cache remembers how many are done (``n_done``), so building
resumes where it stopped and picks up records appended later. A cache made under another config (its
``fingerprint`` differs: another config, or for a hardware-dependent featurizer another resolved hardware spec)
is dropped and rebuilt. Each output array is a dataset whose first axis is the
record; a ragged output (a list of per-record arrays) is a group of ``values`` + ``offsets``. The optional
``valid`` output marks records the featurizer could not handle (e.g. a trace that fails to replay).

A featurizer with learned keys (TLP's vocabulary) is fitted once per dataset, on all its platforms, and the
fitted config is stored with each cache; later runs reuse it (``fitted_featurizer``), so records added since
are featurized with the same vocabulary and appended instead of refitting and rebuilding everything.
"""

from __future__ import annotations

import json
import time

import numpy as np

from costlab.common.errors import InputError
from costlab.common.files import signals_deferred
from costlab.datasets import DatasetWriter, open_dataset, schema
from costlab.featurizers.base import Featurizer, create


def group_name(featurizer: Featurizer, platform: str) -> str:
    return f"features/{featurizer.key}/{platform}"


class FeatureCache:
    """Read access to one featurizer's cached features on one platform."""

    def __init__(self, group):
        self._g = group
        self.n_done = int(group.attrs["n_done"])
        self.config = json.loads(group.attrs["config"])

    def close(self) -> None:
        """Close the file this cache reads: a side cache's own (``side_cache``); a dataset's cache closes with it."""
        self._g.file.close()

    def nbytes(self) -> int:
        """The bytes of its features in memory (uncompressed; a ragged output's values and offsets)."""
        sizes = []
        self._g.visititems(lambda _, obj: sizes.append(obj.size * obj.dtype.itemsize) if hasattr(obj, "dtype")
                           else None)
        return int(sum(sizes))

    def names(self) -> list[str]:
        return [n for n in self._g.keys()]

    def get(self, rows=None, names=None) -> dict:
        """The features of ``rows`` (all by default), in their order; a row asked for twice (a tail list beside
        the task's own lists in one batch) is read once. ``names``: only those outputs (all by default)."""
        rows = np.arange(self.n_done) if rows is None else np.asarray(rows, np.int64)
        if rows.size and (rows.max() >= self.n_done or rows.min() < 0):
            bad = int(rows.max()) if rows.max() >= self.n_done else int(rows.min())
            raise IndexError(f"feature cache has {self.n_done} rows, asked for row {bad}")
        uniq, inverse = np.unique(rows, return_inverse=True)
        if uniq.size < rows.size:  # h5py refuses an index twice
            once = self.get(uniq, names)
            return {k: [v[i] for i in inverse] if isinstance(v, list) else v[inverse] for k, v in once.items()}
        out = {}
        for name, obj in self._g.items():
            if names is not None and name not in names:
                continue
            if "offsets" in getattr(obj, "keys", lambda: ())():
                values, offsets = schema.read_ragged(obj, rows)
                out[name] = [values[int(offsets[i]) : int(offsets[i + 1])] for i in range(len(rows))]
            else:
                out[name] = _read_rows(obj, rows)
        return out


def _read_rows(ds, rows: np.ndarray) -> np.ndarray:
    """Rows of a dataset (distinct indices), in their order. The rows that lie in one chunk are read as one slice,
    then picked in memory: each chunk touched is read (and decompressed) once, and h5py builds no selection of one
    hyperslab per row (a fancy index of a training batch's 512 scattered rows cost half as much again)."""
    if rows.size and np.all(np.diff(rows) == 1):
        return ds[int(rows[0]) : int(rows[-1]) + 1]
    out = np.empty((rows.size,) + ds.shape[1:], ds.dtype)
    if not rows.size:
        return out
    order = np.argsort(rows, kind="stable")
    srt = rows[order]
    if ds.chunks is None:  # contiguous storage: h5py reads fancy indices in increasing order only
        out[order] = ds[srt]
        return out
    block = srt // ds.chunks[0]
    starts = np.flatnonzero(np.r_[True, block[1:] != block[:-1]])
    for a, b in zip(starts.tolist(), np.r_[starts[1:], srt.size].tolist()):
        lo = int(srt[a])
        out[order[a:b]] = ds[lo : int(srt[b - 1]) + 1][srt[a:b] - lo]
    return out


def open_cache(ds, featurizer: Featurizer, platform: str) -> FeatureCache | None:
    """The cache of this featurizer (same version and config) on a platform of an open dataset, or None."""
    name = group_name(featurizer, platform)
    if name not in ds.h5:
        return None
    g = ds.h5[name]
    if g.attrs.get("fingerprint") != featurizer.platform_fingerprint(ds, platform):
        return None
    return FeatureCache(g)


def features_of(ds, featurizer, platform: str, rows: np.ndarray, chunk: int = 2048) -> dict:
    """Features of records: from the dataset's cache when it was made with this exact featurizer config,
    otherwise computed now (e.g. a model evaluated on another dataset than it was trained on)."""
    cache = open_cache(ds, featurizer, platform)
    if cache is not None and (rows.size == 0 or rows.max() < cache.n_done):
        return cache.get(rows)
    if not len(rows):  # no record: the featurizer's own empty arrays, so a model scores none (shape (0, heads))
        return featurizer.featurize_records(ds, platform, rows[:0])
    # each chunk's features go straight into arrays of all the rows (a list of the chunks' arrays and their
    # concatenation held every feature twice: 2.4x the features at the peak, 2.9 GB for 289k TLP records)
    out: dict = {}
    for a in range(0, len(rows), chunk):
        part = featurizer.featurize_records(ds, platform, rows[a : a + chunk])
        for k, v in part.items():
            if isinstance(v, list):
                out.setdefault(k, []).extend(v)
                continue
            v = np.asarray(v)
            if k not in out:
                out[k] = np.empty((len(rows),) + v.shape[1:], v.dtype)
            elif np.result_type(out[k], v) != out[k].dtype:  # a chunk of a wider type: all of it in that type
                out[k] = out[k].astype(np.result_type(out[k], v))
            out[k][a : a + len(v)] = v
    return out


def _settings(featurizer: Featurizer, config: dict) -> str:
    """The config without its learned keys, as canonical JSON."""
    plain = {k: v for k, v in featurizer.canonical(config).items() if k not in featurizer.learned_keys}
    return json.dumps(plain, sort_keys=True, default=str)


def _fit(featurizer: Featurizer, config: dict) -> str:
    """The config's learned keys (its fit), as canonical JSON."""
    return json.dumps({k: config.get(k) for k in featurizer.learned_keys}, sort_keys=True, default=str)


def cached_fits(ds, featurizer: Featurizer) -> dict:
    """The fit (canonical JSON of the learned keys) of each platform's cache of this featurizer's settings."""
    group = ds.h5.get(f"features/{featurizer.key}")
    if group is None or not featurizer.learned_keys:
        return {}
    want, fits = _settings(featurizer, featurizer.config), {}
    for pid in sorted(group.keys()):
        config = json.loads(group[pid].attrs.get("config", "{}"))
        if _settings(featurizer, config) == want:
            fits[pid] = _fit(featurizer, config)
    return fits


def caches_of_other_fits(ds, featurizer: Featurizer) -> list[str]:
    """The platforms with a cache of this fitted featurizer's settings but of another fit (after a refit: caches
    still on the old vocabulary). ``fitted_featurizer`` takes its fit from any cache of these settings, so one left
    on another fit would bring that fit back on the next run; ``costlab featurize --refit`` rebuilds these too."""
    fit = _fit(featurizer, featurizer.config)
    return [pid for pid, other in cached_fits(ds, featurizer).items() if other != fit]


def _check_one_fit(path, ds, featurizer: Featurizer, fits_then: dict) -> None:
    """Refuses to cache features of a fit that is no longer the dataset's: a cache of these settings moved to
    another fit since the fit was taken (``fits_then``: ``cached_fits`` at that moment; a cache already on
    another fit then, as one a fitted config given by the user replaces, is no news)."""
    fit = _fit(featurizer, featurizer.config)
    moved = [p for p, other in cached_fits(ds, featurizer).items() if other != fit and fits_then.get(p) != other]
    if moved:
        raise InputError(path, f"the {featurizer.key} cache of {', '.join(moved)} moved to another fit of these "
                               "settings after this command took its fit (a `costlab featurize --refit` wrote it "
                               "meanwhile); nothing more of this one is cached: run it again once that refit is "
                               "done, so that every platform shares one fit")


def fitted_featurizer(ds, featurizer, platforms=None, refit: bool = False) -> Featurizer:
    """The featurizer ready for this dataset: as given when it is fitted (or learns nothing); else the
    fitted config stored with an existing cache of it made under the same settings (so added records extend
    that cache rather than refit and rebuild it), unless ``refit``; else fitted on the records of
    ``platforms`` (all the dataset's platforms when None, so that every platform shares one vocabulary)."""
    featurizer = create(featurizer)
    if featurizer.is_fitted or not featurizer.learned_keys:
        return featurizer
    if not refit:
        group = ds.h5.get(f"features/{featurizer.key}")
        want = _settings(featurizer, featurizer.config)
        for pid in sorted(group.keys()) if group is not None else ():
            config = json.loads(group[pid].attrs.get("config", "{}"))
            if _settings(featurizer, config) == want and all(k in config for k in featurizer.learned_keys):
                return type(featurizer)(config)
    return featurizer.fit(ds, list(platforms) if platforms else ds.record_platforms())


#: the bytes of a feature chunk: a chunk holds whole rows (a record's features are one chunk's, or a few records'),
#: so that reading a record decompresses one chunk, not every chunk its row crosses (h5py's own chunking cut TLP's
#: ``numeric`` into (128, 17, 4) chunks: a training batch's 512 scattered rows decompressed ~3,000 of them)
FEATURE_CHUNK_BYTES = 1 << 15


def _row_chunks(value: np.ndarray):
    if 0 in value.shape[1:]:  # no bytes in a row: h5py's own
        return True
    row = int(np.prod(value.shape[1:], dtype=np.int64)) * value.dtype.itemsize
    return (max(1, FEATURE_CHUNK_BYTES // row),) + value.shape[1:]


def append_output(ensure_space, g, name: str, value) -> None:
    """One featurizer output's rows appended to its array in the cache group ``g`` (made at the first rows: a
    ragged output as ``values`` + ``offsets``); ``ensure_space(nbytes)`` refuses a write the disk has no room for."""
    if isinstance(value, list):
        arrs = [np.asarray(v) for v in value]
        ensure_space(sum(a.nbytes for a in arrs))
        tail = arrs[0].shape[1:] if arrs else ()
        if name not in g:
            sub = g.create_group(name)
            sub.create_dataset("values", shape=(0,) + tail, maxshape=(None,) + tail,
                               dtype=arrs[0].dtype if arrs else np.float32, chunks=True, **schema.COMPRESSION)
            schema.append_column(schema.create_column(sub, "offsets", np.uint64), np.zeros(1, np.uint64))
        sub = g[name]
        flat = np.concatenate(arrs, axis=0) if arrs else np.zeros((0,) + tail)
        vals = sub["values"]
        n = vals.shape[0]
        vals.resize((n + flat.shape[0],) + vals.shape[1:])
        vals[n:] = flat
        off = sub["offsets"]
        ends = int(off[-1]) + np.cumsum([a.shape[0] for a in arrs], dtype=np.int64)
        schema.append_column(off, ends.astype(np.uint64))
        return
    value = np.asarray(value)
    ensure_space(value.nbytes)
    if name not in g:
        g.create_dataset(name, shape=(0,) + value.shape[1:], maxshape=(None,) + value.shape[1:],
                         dtype=value.dtype, chunks=_row_chunks(value), **schema.COMPRESSION)
    ds = g[name]
    n = ds.shape[0]
    ds.resize((n + value.shape[0],) + ds.shape[1:])
    ds[n:] = value


#: the share of a platform's tokens outside the vocabulary above which featurizing it warns
UNKNOWN_WARN = 0.01


def vocabulary_warning(stats: dict) -> str | None:
    """A line for ``build_cache``'s counts when many of the tokens it featurized were unknown to the vocabulary
    (one fitted before the platform had records, reused for it); None otherwise."""
    if not stats.get("tokens") or stats["unknown_tokens"] <= UNKNOWN_WARN * stats["tokens"]:
        return None
    return (f"warning: {stats['unknown_tokens']} of {stats['tokens']} tokens of {stats['platform']!r} "
            f"({stats['unknown_tokens'] / stats['tokens']:.1%}) are unknown to the vocabulary of {stats['featurizer']} "
            f"(fitted before these records were there); `costlab featurize --refit` fits one on every platform "
            f"(models trained on the old vocabulary need retraining)")


#: the share of a platform's records longer than the sequence length above which featurizing it warns (a fit at
#: the 99th percentile cuts about 1 % of the records it was fitted on)
CUT_WARN = 0.02


def length_warning(stats: dict) -> str | None:
    """A line for ``build_cache``'s counts when many records were longer than the featurizer's sequence length (their
    last tokens, for a MetaSchedule trace the unroll and postprocessing decisions, were dropped); None otherwise."""
    if not stats.get("computed") or stats.get("cut", 0) <= CUT_WARN * stats["computed"]:
        return None
    return (f"warning: {stats['cut']} of {stats['computed']} records of {stats['platform']!r} have more tokens "
            f"(up to {stats['longest']}) than the sequence length {stats['seq_len']} of {stats['featurizer']}: "
            f"their tokens past it are dropped (`costlab featurize --refit`, or a larger max_seq_len, fits a longer "
            f"one)")


COMMIT_EVERY = 10  # a transaction of build_cache lasts at least this many times the last one's own seconds


def build_cache(path, featurizer, platform: str, chunk: int = 256, commit_seconds: float = 60.0,
                progress: bool = True, fit: bool = True, refit: bool = False, fits_then: dict | None = None) -> dict:
    """Featurize every record of a platform not yet cached; returns counts. Resumable and re-runnable.

    A featurizer with learned keys that is not fitted yet is fitted first (``fitted_featurizer``: the config
    of an existing cache of it, or fitted on all the dataset's platforms). Every platform of a dataset shares
    one fit: unless this build writes a new one (``refit``), it stops, before writing, when a cache of these
    settings moved to another fit since the fit was taken (a ``featurize --refit`` wrote it while this build
    waited for the dataset): ``fits_then``, the caches' fits (``cached_fits``) when the caller took a fit it gives
    (``fit=False``); by default, when this build takes or is given its fit.

    Rows are saved (the transaction committed) every ``commit_seconds`` and when Ctrl-C or SIGTERM interrupts the
    build: the rows done by then are committed before the interrupt is raised again, so a rerun continues there.
    A transaction copies the whole dataset file: where that costs more than a tenth of ``commit_seconds`` (a file
    of GBs), a transaction lasts ``COMMIT_EVERY`` times the last one's own seconds instead.
    """
    featurizer = create(featurizer)
    with open_dataset(path) as ds:
        if fit:
            featurizer = fitted_featurizer(ds, featurizer)
        if fits_then is None:
            fits_then = cached_fits(ds, featurizer)
        total = ds.num_records(platform)
        cache = open_cache(ds, featurizer, platform)
        start = cache.n_done if cache else 0
        fingerprint = featurizer.platform_fingerprint(ds, platform)
    stats = dict(featurizer=featurizer.key, platform=platform, total=total, cached_before=start, computed=0,
                 invalid=0, seconds=0.0, unknown_tokens=0, tokens=0, cut=0, longest=0,
                 seq_len=featurizer.config.get("seq_len"))
    if start >= total:
        return stats
    from tqdm import tqdm

    bar = tqdm(total=total, initial=start, unit="rec", desc=f"featurize {featurizer.key} {platform}",
               disable=not progress)
    t0 = time.perf_counter()
    row = start
    interval = commit_seconds
    try:
        while row < total:
            interrupted = None
            began, worked = time.perf_counter(), 0.0
            with DatasetWriter(path) as w, open_dataset(path) as ds:
                if not refit:
                    _check_one_fit(path, ds, featurizer, fits_then)
                name = group_name(featurizer, platform)
                if name in w.h5 and w.h5[name].attrs.get("fingerprint") != fingerprint:
                    del w.h5[name]
                g = w.h5.require_group(name)
                if "n_done" not in g.attrs:
                    g.attrs["n_done"] = 0
                    g.attrs["config"] = json.dumps(featurizer.config, sort_keys=True, default=str)
                    g.attrs["fingerprint"] = fingerprint
                # the file's own count, read under the writer's lock: another process (a second featurize, every
                # rank of a multi-node training) may have cached rows since this one looked
                row = int(g.attrs["n_done"])
                if row >= total:
                    break
                start_tx = row
                t_commit = time.perf_counter()
                appending = False
                try:
                    # at least one chunk per transaction; commit (rename the copy over the file) every
                    # commit_seconds
                    while row < total and (row == start_tx or time.perf_counter() - t_commit < interval):
                        rows = np.arange(row, min(row + chunk, total))
                        feats = featurizer.featurize_records(ds, platform, rows)
                        # a chunk is appended whole or not at all: Ctrl-C or SIGTERM is held back until every
                        # array has the chunk's rows and n_done counts them, so the rows up to n_done are always
                        # complete when an interrupt is caught below
                        with signals_deferred():
                            appending = True
                            for key, value in feats.items():
                                append_output(w.ensure_space, g, key, value)
                            row = int(rows[-1]) + 1
                            g.attrs["n_done"] = row
                            stats["computed"] += len(rows)
                            appending = False
                        if "valid" in feats:
                            stats["invalid"] += int(np.count_nonzero(~np.asarray(feats["valid"], bool)))
                        cut = featurizer.cut_sequences(feats)
                        if cut is not None:
                            stats["cut"] += cut[0]
                            stats["longest"] = max(stats["longest"], cut[1])
                        unknown = featurizer.unknown_tokens(feats)
                        if unknown is not None:
                            stats["unknown_tokens"] += unknown[0]
                            stats["tokens"] += unknown[1]
                        bar.update(len(rows))
                except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (costlab's Terminated)
                    # nothing done in this transaction, or a chunk half appended (an append failed, e.g. on a full
                    # disk, and the signal held back meanwhile replaced its error): the transaction is undone
                    if row == start_tx or appending:
                        raise
                    # leaving the block normally commits the rows done so far (the writer holds back a second
                    # signal until the copy is renamed over the file); the interrupt is raised again after that
                    interrupted = exc
                worked = time.perf_counter() - t_commit
            if interrupted is not None:
                raise interrupted
            # the transaction's own seconds (the file's copy and its commit), a wait for another writer apart
            interval = max(commit_seconds, COMMIT_EVERY * (time.perf_counter() - began - worked - w.waited))
    finally:
        bar.close()
    stats["seconds"] = time.perf_counter() - t0
    return stats
