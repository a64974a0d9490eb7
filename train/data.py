"""The Lightning DataModule over a costlab dataset and its feature cache.

Batches are built as per-task ranking lists: each list holds up to ``list_size`` records of one task, each
batch ``lists_per_batch`` lists. Features are read lazily from the HDF5 cache, one read per batch; labels
come from ``labels.build_label_table`` (one column per platform). With ``row_platforms`` the rows are the
records of several platforms (several CPUs), each labelled on its own platform, and each list holds one task
of one platform. A model of one head per platform (``multi_head``) learns, by default (``mtl_rows: union``),
from every program any of its platforms measured: one row per program, the record of the first platform (the
base, then ``platforms``' order) that has it, labelled on every platform that measured it (NaN elsewhere: the
loss masks it); ``mtl_rows: base`` takes the base platform's records alone. With ``hardware`` every row carries
its platform's hardware vector (``featurizers/hardware_vector.py``), jittered per training list by
``hardware_jitter``. Splits are the
dataset's stored ones: test = the split's test part, validation = a seeded fraction of the training tasks
(or programs, for a within-task split), training = the rest.
"""

from __future__ import annotations

import hashlib
import json
import sys
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import lightning as L
import numpy as np
import torch

from costlab.common.errors import InputError, UsageError
from costlab.datasets import DatasetWriter, open_dataset
from costlab.datasets.summary import dataset_tasks
from costlab.featurizers import create, from_json
from costlab.costmodels.tensors import concat_features, take_rows, to_tensors
from costlab.featurizers.cache import (build_cache, features_of, fitted_featurizer, group_name, length_warning,
                                       open_cache, vocabulary_warning)
from costlab.featurizers.hardware_vector import JITTERED, platform_vector
from costlab.featurizers.side_cache import open_side_cache, side_cache
from costlab.train.labels import LabelTable, build_label_table, label_rows


def _writable(path) -> bool:
    """Whether a transaction could write the dataset (its folder writable: the copy and the lock go beside it)."""
    try:
        DatasetWriter(path).check()
    except InputError:
        return False
    return True


@dataclass
class DataConfig:
    data: str
    featurizer: str = "tlp"
    platforms: list = field(default_factory=list)  # label columns; the first is the default target
    base_platform: str | None = None  # whose records (and feature cache) are the rows; default: first
    # a multi-head model's rows: "union", every program any of the platforms measured (the base platform's records,
    # then each other platform's of programs not yet a row), or "base", the base platform's records alone
    mtl_rows: str = "union"
    multi_head: bool = False  # set by the training run for a model of one head per platform
    # several platforms' records as rows, each labelled on its own platform (one label column; the first of
    # ``platforms`` must be one of them): one model learns from several CPUs
    row_platforms: list = field(default_factory=list)
    hardware: bool = False  # each row carries its platform's hardware vector (set for a net with a hardware input)
    # spec perturbation: per training list, uniform noise of up to this many log2 units (0.5: sizes x0.71-1.41)
    # on the vector's cache sizes and clock, so that a changed cache size does not throw the ranking
    hardware_jitter: float = 0.0
    split: str | None = None
    list_size: int = 32
    lists_per_batch: int = 16
    # lists that teach the tail: per task and epoch, this many more lists drawn from its best ``tail_fraction``
    # of programs (by the target platform's score), where a search decides between near-best programs
    tail_lists: int = 0
    tail_fraction: float = 0.25
    val_fraction: float = 0.1
    keep_fraction: dict = field(default_factory=dict)  # {platform: fraction of labels kept}
    seed: int = 0
    num_workers: int = 0
    # features read from a cache file (the dataset's, or the run's own) are loaded whole into memory while all the
    # row platforms' fit in this many MB (uncompressed), and read batch by batch from the file above it
    features_in_memory_mb: float = 1024.0

    def to_dict(self) -> dict:
        return asdict(self)


class ListSampler(torch.utils.data.Sampler):
    """Yields batches as lists of base-row indices (one task per list), drawn afresh each epoch from the
    seed; Lightning calls ``set_epoch``. It shards itself under DDP (the Trainer is told not to wrap it)."""

    def __init__(self, task: np.ndarray, rows: np.ndarray, list_size: int, lists_per_batch: int,
                 shuffle: bool, seed: int, score: np.ndarray | None = None, tail_lists: int = 0,
                 tail_fraction: float = 0.25):
        t = task[rows]
        order = np.argsort(t, kind="stable")
        bounds = np.flatnonzero(np.diff(t[order])) + 1
        self.groups = [rows[g] for g in np.split(order, bounds) if g.size]
        # each task's best programs by score (NaN: unlabelled, never in a tail list), for the tail lists
        self.tails = []
        if tail_lists > 0 and shuffle and score is not None:
            for g in self.groups:
                s = np.nan_to_num(score[g], nan=-np.inf)
                n = max(2, int(np.ceil(tail_fraction * np.isfinite(s).sum())))
                best = g[np.argsort(-s, kind="stable")[:n]]
                if np.isfinite(s).sum() >= 4 and best.size >= 2:
                    self.tails.append(best)
        self.tail_lists = tail_lists
        self.list_size, self.lists_per_batch = list_size, lists_per_batch
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        self._planned: tuple = (None, [])

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _plan(self) -> list:
        """This epoch's batches, drawn once per epoch (``len`` and ``iter`` both ask for them)."""
        if self._planned[0] != self.epoch:
            self._planned = (self.epoch, self._draw())
        return self._planned[1]

    def _draw(self) -> list:
        rng = np.random.default_rng(self.seed + 7919 * self.epoch)
        lists = []
        for g in self.groups:
            g = rng.permutation(g) if self.shuffle else g
            for a in range(0, len(g), self.list_size):
                part = g[a : a + self.list_size]
                if len(part) >= 2 or not self.shuffle:  # a list of one record teaches no ranking
                    lists.append(part)
        for best in self.tails:
            for _ in range(self.tail_lists):
                lists.append(rng.permutation(best)[: self.list_size])
        if self.shuffle:
            lists = [lists[i] for i in rng.permutation(len(lists))]
        n = self.lists_per_batch
        return [tuple(lists[i : i + n]) for i in range(0, len(lists), n)]

    def _mine(self) -> list:
        """Under distributed training each process takes every world-th training batch (the same number on
        every process, so none waits for another at the end of the epoch); evaluation batches are not
        split, so every process sees whole tasks."""
        plan = self._plan()
        dist = torch.distributed
        if not self.shuffle or not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return plan
        world, rank = dist.get_world_size(), dist.get_rank()
        return plan[rank : len(plan) - len(plan) % world : world]

    def __iter__(self):
        return iter(self._mine())

    def __len__(self) -> int:
        return len(self._mine())


class BatchReader(torch.utils.data.Dataset):
    """Reads one batch (a tuple of row lists) from the feature cache and the label table; with hardware
    vectors, each list's jittered by one draw (``jitter``: training batches only). The draws of a batch come from
    the seed and the batch's rows: the sampler's lists differ from epoch to epoch, and a batch is jittered alike
    in whichever loader worker reads it and after a resume (a generator of the reader's own would start over in
    every worker and every epoch)."""

    def __init__(self, dm: "CostDataModule", jitter: float = 0.0):
        self.dm, self.jitter = dm, jitter

    def __getitem__(self, lists) -> dict:
        rows = np.concatenate(lists)
        labels = self.dm.labels
        sizes = [len(x) for x in lists]
        batch = to_tensors(self.dm.read_features(rows))
        batch["score"] = torch.from_numpy(labels.score[rows].astype(np.float32))
        batch["latency"] = torch.from_numpy(labels.latency[rows])
        batch["list_id"] = torch.from_numpy(np.repeat(np.arange(len(lists)), sizes))
        batch["task"] = torch.from_numpy(self.dm.groups[rows])
        batch["row"] = torch.from_numpy(rows)
        if self.dm.vectors is not None:
            hardware = self.dm.vectors[self.dm.row_platform[rows]].copy()
            if self.jitter > 0:
                rng = np.random.default_rng([self.dm.config.seed, zlib.crc32(rows.astype(np.int64).tobytes())])
                noise = rng.uniform(-self.jitter, self.jitter, (len(lists), len(JITTERED))).astype(np.float32)
                hardware[:, JITTERED] += np.repeat(noise, sizes, axis=0)
            batch["hardware"] = torch.from_numpy(hardware)
        return batch


class CostDataModule(L.LightningDataModule):
    """``featurizer``: the one a model was trained with (fine-tuning keeps it), else the dataset's cache of
    ``config.featurizer`` is used; ``feature_dir``: where the features of a platform whose dataset cache is of
    another fit go (``featurizers.side_cache``: a training run's folder), else they are held in memory."""

    def __init__(self, config: DataConfig, featurizer=None, feature_dir=None):
        super().__init__()
        self.config = config
        self._featurizer = featurizer
        self.feature_dir = feature_dir
        self._ds = None
        self._mem_feats: dict = {}  # row platform -> its features in memory (loaded within the budget, or computed)
        self._side: dict = {}  # row platform -> its side cache's path, where no cache fits
        self._read_only = False  # the dataset cannot be written: features no cache holds go to feature_dir
        self._caches: dict = {}
        self.vectors = None

    # -- set-up ------------------------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        if getattr(self, "labels", None) is not None:
            return
        cfg = self.config
        with open_dataset(cfg.data) as ds:
            if not cfg.platforms:
                cfg.platforms = list(cfg.row_platforms[:1]) or ds.record_platforms()[:1]
            self.base = cfg.base_platform or cfg.platforms[0]
            self.rows_of = list(cfg.row_platforms) or [self.base]
            self._union_parts = self._union_select(ds) if self._union() else None
            if self._union_parts is not None:  # the platforms that add rows alone are featurized and loaded
                self.rows_of = [p for p, _, _, _ in self._union_parts]
            if cfg.row_platforms:
                self._check_row_platforms(ds)
            missing = [p for p in self.rows_of if self._featurizer is None and self._cache_missing(ds, p)]
        # a dataset no transaction can write (a read-only folder or file system, shared by a team): the features no
        # cache holds go into the run's folder, as a fine-tune's own fit does (``_resolve_featurizer``)
        self._read_only = bool(missing) and self.feature_dir is not None and not _writable(cfg.data)
        for p in [] if self._read_only else missing:
            # featurize what training needs, cached in the dataset as `costlab featurize` would (resumable)
            print(f"{cfg.data}: featurizing the records of {p!r} with {cfg.featurizer} (cached in the "
                  f"dataset for the next run)", file=sys.stderr, flush=True)
            stats = build_cache(cfg.data, cfg.featurizer, p, progress=sys.stderr.isatty())
            for warning in (vocabulary_warning(stats), length_warning(stats)):
                if warning:
                    print(f"{cfg.data}: {warning}", file=sys.stderr)
        ds = open_dataset(cfg.data)
        try:
            self.featurizer = self._resolve_featurizer(ds)
            self.dataset_tasks = dataset_tasks(ds)  # which tasks a split's indices meant (a model records it)
            split = ds.split(cfg.split) if cfg.split else None
            # a training label's best is its task's best training program: never a held-out one's latency
            held_out = split.is_test if split is not None else None
            self._label(ds, held_out)
            within = split is not None and split.by == "within-task"
            drawn = np.zeros(0, self.labels.program_id.dtype)  # a within-task split's validation programs
            if within:
                # by program: one program's records (on several CPUs, or measured twice) are all in it or none;
                # drawn before the labels, so that their latencies set no training label's best (as the test
                # programs' do not)
                programs = np.unique(self.labels.program_id)
                drawn = programs[np.random.default_rng(cfg.seed).random(len(programs)) < cfg.val_fraction]
                if drawn.size:
                    unvalidated = self.labels  # what they are labelled as if they train after all (below)
                    self._label(ds, held_out, lambda task, pids: np.isin(pids, drawn))
            # the features are read from this same opening of the file (below), those loaded now too
            self._ds, self._caches = ds, {}
            self._load_within_budget()
            # ranking lists and per-task metrics stay within one task of one platform (of one label column: a
            # multi-head model's rows of several platforms are labelled alike, so a task's lists mix them)
            self.groups = (self.labels.task if self._union()
                           else self.labels.task * len(self.rows_of) + self.row_platform)
            if cfg.hardware:
                try:
                    self.vectors = np.stack([platform_vector(ds.platforms[p]) for p in self.rows_of])
                except ValueError as exc:
                    raise UsageError(f"{cfg.data}: {exc}") from None
            self.networks = dict(ds.networks)
            # the schedule dialects the model learns from (a model of Ansor steps cannot score MS traces)
            self.dialects = sorted({ds.tasks[t].dialect for t in np.unique(self.labels.task).tolist()})
            self.targets = {p: ds.platforms[p].target for p in dict.fromkeys(cfg.platforms + self.rows_of)
                            if p in ds.platforms}
            n = len(self.labels)
            test = split.is_test(self.labels.task, self.labels.program_id) if split is not None else np.zeros(n, bool)
            rng = np.random.default_rng(cfg.seed)
            if within:
                val = ~test & np.isin(self.labels.program_id, drawn)
            else:
                # validation tasks are drawn among those with something to rank (2+ labelled records, one of
                # them a program that ran): a single-program task held out would leave the best-checkpoint choice
                # to chance, and one whose programs all failed has no validation top-1
                labelled = np.isfinite(self.labels.score[:, 0]) & ~test
                t, c = np.unique(self.labels.task[labelled], return_counts=True)
                ran = np.unique(self.labels.task[labelled & np.isfinite(self.labels.latency[:, 0])])
                rankable = t[(c >= 2) & np.isin(t, ran)]
                n_val = int(round(cfg.val_fraction * len(rankable)))
                n_val = max(n_val, 1) if cfg.val_fraction > 0 and len(rankable) >= 3 else n_val
                val_tasks = rng.permutation(rankable)[:n_val] if len(rankable) > 1 else []
                val = np.isin(self.labels.task, val_tasks) & ~test
            has_label = np.isfinite(self.labels.score).any(1)
            if not self._rankable(val):
                # no task with two labelled programs, one of them valid, on one platform (a few records drawn by
                # program; validation tasks whose programs all failed): nothing to rank, so no validation part,
                # its rows train; a validation top-1 that is never a number would leave the best checkpoint at
                # the first epoch's, or unset
                val = np.zeros(n, bool)
                if drawn.size:  # they train: labelled as training programs again
                    self.labels = unvalidated
            self.train_rows = np.flatnonzero(~test & ~val & has_label)
            self.val_rows = np.flatnonzero(val & has_label)
            self.test_rows = np.flatnonzero(test & has_label)
            self.unread_rows = np.zeros(0, np.int64)  # training rows left out: the featurizer cannot read them
            self.split = split
        except BaseException:
            self.teardown()
            ds.close()
            raise
        # the features are read from this same opening of the file: a `costlab featurize` that replaces the cache
        # (another --config, --refit) or a write that adds records meanwhile renames a new file over it, and the
        # labels, the featurizer and the rows above are this one's

    def parts_digest(self, train_rows=None) -> str:
        """A SHA-256 of the records the training and validation parts hold (each row's platform and program id, and
        which of its label columns it has: a multi-head model's other platforms label rows they gained records of),
        so that a resumed run can tell that it would learn from, and validate on, other records than it began with.
        ``train_rows``: those of the training part, if not ``train_rows``."""
        h = hashlib.sha256()
        for rows in (self.train_rows if train_rows is None else train_rows, self.val_rows):
            pairs = np.stack([self.row_platform[rows].astype(np.uint64),
                              self.labels.program_id[rows].astype(np.uint64)])
            order = np.lexsort(pairs[::-1])
            h.update(pairs[:, order].tobytes())
            h.update(np.ascontiguousarray(np.isfinite(self.labels.score[rows][order])).tobytes())
            h.update(b"|")
        return h.hexdigest()

    def _label(self, ds, held_out, validation=None) -> None:
        """The label table of the rows (``labels``), with each row's platform and index among its records."""
        cfg = self.config
        if cfg.row_platforms:
            parts = [build_label_table(ds, [p], p, cfg.keep_fraction, cfg.seed, held_out, validation)
                     for p in self.rows_of]
            self.labels = LabelTable([cfg.platforms[0]], *(np.concatenate([getattr(t, k) for t in parts])
                                                           for k in ("task", "program_id", "score", "latency")))
            self.row_platform = np.repeat(np.arange(len(parts)), [len(t) for t in parts])
            self.record_index = np.concatenate([np.arange(len(t)) for t in parts])
        elif self._union():
            self.labels, self.row_platform, self.record_index = self._union_rows(ds, held_out, validation)
        else:
            self.labels = build_label_table(ds, cfg.platforms, self.base, cfg.keep_fraction, cfg.seed, held_out,
                                            validation)
            self.row_platform = np.zeros(len(self.labels), np.int64)
            self.record_index = np.arange(len(self.labels))

    def _union(self) -> bool:
        cfg = self.config
        return cfg.multi_head and cfg.mtl_rows == "union" and not cfg.row_platforms

    def _union_select(self, ds) -> list:
        """A multi-head model's row platforms and rows, read once: ``(platform, record indices, their tasks, their
        program ids)`` for the base platform's records, then each other platform's records of programs no earlier
        platform has (``platforms``' order); a platform of no such program adds none, and is neither featurized nor
        loaded."""
        cfg = self.config
        parts, seen = [], None
        for p in [self.base, *(p for p in dict.fromkeys(cfg.platforms) if p != self.base)]:
            if seen is not None and p not in ds.record_platforms():
                continue
            table = ds.records(p)
            ids = np.asarray(table.program_id)
            take = np.arange(len(ids)) if seen is None else np.flatnonzero(~np.isin(ids, seen))
            if seen is None or len(take):
                parts.append((p, take, table.checked_task().astype(np.int64)[take], ids[take]))
            seen = np.unique(ids) if seen is None else np.union1d(seen, ids)
        return parts

    def _union_rows(self, ds, held_out, validation=None) -> tuple:
        """The union rows (``_union_select``) labelled on every platform; with each row's platform and index among
        that platform's records."""
        cfg = self.config
        parts = self._union_parts
        labels = label_rows(ds, cfg.platforms, np.concatenate([t for _, _, t, _ in parts]),
                            np.concatenate([i for _, _, _, i in parts]), cfg.keep_fraction, cfg.seed, held_out,
                            validation)
        plats = np.concatenate([np.full(len(take), j, np.int64) for j, (_, take, _, _) in enumerate(parts)])
        return labels, plats, np.concatenate([take for _, take, _, _ in parts])

    def _rankable(self, rows: np.ndarray) -> bool:
        """Whether the rows (a mask) hold something the validation top-1 ranks: a ranking group (a task on one
        platform: ``groups``) with two labelled programs, one of which ran."""
        labelled = rows & np.isfinite(self.labels.score[:, 0])
        groups, counts = np.unique(self.groups[labelled], return_counts=True)
        ran = np.unique(self.groups[labelled & np.isfinite(self.labels.latency[:, 0])])
        return bool(np.isin(groups[counts >= 2], ran).any())

    def _check_row_platforms(self, ds) -> None:
        cfg = self.config
        unknown = [p for p in cfg.row_platforms if p not in ds.record_platforms()]
        if unknown:
            raise UsageError(f"{cfg.data}: row_platforms {unknown} have no records (platforms with records: "
                             f"{', '.join(ds.record_platforms())})")
        if len(cfg.platforms) != 1 or cfg.platforms[0] not in cfg.row_platforms:
            raise UsageError(f"row_platforms label each record on its own platform: give one platform, one of "
                             f"{cfg.row_platforms}, as the model's (platforms: {cfg.platforms})")

    def _stored_featurizer(self, ds, platform: str | None = None):
        """The configured featurizer with the config its cache on a platform (the base) was built with (fitted
        then), or None when the dataset has no such cache."""
        f = create(self.config.featurizer)
        group = ds.h5.get(group_name(f, platform or self.base))
        if group is None:
            return None
        return from_json({"name": f.name, "version": f.version, "config": json.loads(group.attrs["config"])})

    def _cache_missing(self, ds, platform: str) -> bool:
        """No complete cache of the configured featurizer on a platform."""
        f = self._stored_featurizer(ds, platform)
        cache = open_cache(ds, f, platform) if f is not None else None
        return cache is None or cache.n_done < ds.num_records(platform)

    def _resolve_featurizer(self, ds):
        f = self._featurizer
        if f is None:
            f = self._stored_featurizer(ds)
            if f is None and self._read_only:  # fitted as `costlab featurize` would fit it
                f = fitted_featurizer(ds, self.config.featurizer)
            if f is None:
                key = create(self.config.featurizer).key
                raise UsageError(
                    f"{self.config.data}: no {key} feature cache for platform {self.base!r}; run "
                    f"`costlab featurize {self.config.data} --featurizer {self.config.featurizer} --platform {self.base}`")
        elif isinstance(f, dict):
            f = from_json(f)
        for j, p in enumerate(self.rows_of):
            cache = open_cache(ds, f, p)
            if cache is None or cache.n_done < ds.num_records(p):
                # no cache made with exactly this featurizer config (e.g. fine-tuning a model whose vocabulary
                # came from another dataset): the records featurized now, into the run's folder or in memory
                if self.feature_dir is None:
                    self._mem_feats[j] = features_of(ds, f, p, np.arange(ds.num_records(p)))
                    continue
                why = ("the dataset cannot be written" if self._featurizer is None
                       else f"the model's {f.key}: its own fit, not the dataset's cache")
                print(f"{self.config.data}: featurizing the records of {p!r} into {self.feature_dir} ({why})",
                      file=sys.stderr, flush=True)
                self._side[j] = side_cache(ds, f, p, Path(self.feature_dir) / f"{p}.h5", progress=sys.stderr.isatty())
        return f

    def _load_within_budget(self) -> None:
        """The cache files' features loaded whole into memory while they fit in ``features_in_memory_mb`` (all row
        platforms together, first come first loaded): a training batch's 512 scattered rows read from a file
        decompress a chunk or more each (about 30 ms of a TLP batch, as long as the step itself on 2 cores), from
        memory under a millisecond. What does not fit is read batch by batch."""
        budget = self.config.features_in_memory_mb * 2**20
        for j in range(len(self.rows_of)):
            if j in self._mem_feats:
                continue
            size = self._cache(j).nbytes()
            if size <= budget:
                self._mem_feats[j] = self._cache(j).get()
                budget -= size

    def read_features(self, rows: np.ndarray) -> dict:
        """Features of rows (indices into the label table), in their order."""
        plat = self.row_platform[rows]
        if len(self.rows_of) == 1:
            return self._platform_features(0, self.record_index[rows])
        parts, where = [], []
        for j in np.unique(plat).tolist():
            sel = np.flatnonzero(plat == j)
            parts.append(self._platform_features(j, self.record_index[rows[sel]]))
            where.append(sel)
        return take_rows(concat_features(parts), np.argsort(np.concatenate(where)))

    def readable(self, rows: np.ndarray) -> np.ndarray:
        """Whether the featurizer could read each of ``rows`` (its ``valid`` output; True where it has none):
        only that output is read from the cache."""
        out = np.ones(len(rows), bool)
        for j in np.unique(self.row_platform[rows]).tolist():
            sel = np.flatnonzero(self.row_platform[rows] == j)
            local = self.record_index[rows[sel]]
            feats = (take_rows(self._mem_feats[j], local) if j in self._mem_feats
                     else self._cache(j).get(local, names=("valid",)))
            if "valid" in feats:
                out[sel] = np.asarray(feats["valid"], bool)
        return out

    def _cache(self, j: int):
        """The feature cache of the ``j``-th row platform, opened once (with the dataset) for every batch."""
        if self._ds is None:
            self._ds = open_dataset(self.config.data)
        if j not in self._caches:
            self._caches[j] = (open_side_cache(self._side[j]) if j in self._side
                               else open_cache(self._ds, self.featurizer, self.rows_of[j]))
        return self._caches[j]

    def _platform_features(self, j: int, rows: np.ndarray) -> dict:
        """Features of records of the ``j``-th row platform (indices into its record table)."""
        if j in self._mem_feats:
            return take_rows(self._mem_feats[j], rows)
        order = np.argsort(rows)
        feats = self._cache(j).get(rows[order])
        inv = np.empty_like(order)
        inv[order] = np.arange(len(order))
        return take_rows(feats, inv)

    def teardown(self, stage: str | None = None) -> None:
        for j in self._side:
            if j in self._caches:
                self._caches[j].close()
        if self._ds is not None:
            self._ds.close()
            self._ds = None
        self._caches = {}

    # -- loaders -----------------------------------------------------------------------------------
    def _loader(self, rows, shuffle: bool):
        cfg = self.config
        sampler = ListSampler(self.groups, rows, cfg.list_size, cfg.lists_per_batch, shuffle, cfg.seed,
                              score=self.labels.score[:, 0], tail_lists=cfg.tail_lists, tail_fraction=cfg.tail_fraction)
        reader = BatchReader(self, cfg.hardware_jitter if shuffle else 0.0)
        return torch.utils.data.DataLoader(reader, sampler=sampler, batch_size=None, num_workers=cfg.num_workers)

    def train_dataloader(self):
        loader = self._loader(self.train_rows, True)
        trainer = getattr(self, "trainer", None)
        if trainer is not None:
            # Lightning makes the loader's iterator before it calls set_epoch, and a resumed run's first epoch keeps
            # that iterator (its workers prefetch from it): draw the epoch the fit loop is about to run, not epoch 0
            loader.sampler.set_epoch(trainer.fit_loop.epoch_progress.current.processed)
        return loader

    def val_dataloader(self):
        return self._loader(self.val_rows, False)

    def test_dataloader(self):
        return self._loader(self.test_rows, False)
