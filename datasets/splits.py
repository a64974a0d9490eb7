"""Train/test splits stored in the dataset: by task, by network (whole networks held out), or within task.

Every split is reproducible from its seed (a split of networks named by ``--held-out``: from those names) and is
stored under ``/splits/<name>``, so training and evaluation read the same one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from dataclasses import dataclass, field

import h5py
import numpy as np

from costlab.common.errors import CostlabError, InputError, UsageError
from costlab.datasets.names import check_name

SPLIT_KINDS = ("task", "network", "within-task")


@dataclass
class Split:
    name: str
    by: str
    seed: int | None  # None, with test_fraction, for networks named by --held-out: neither chose them
    test_fraction: float | None
    test_tasks: np.ndarray  # task indices held out (by task / by network)
    test_programs: np.ndarray | None = None  # program ids held out (within task), sorted
    held_out_networks: list = field(default_factory=list)

    def is_test(self, task: np.ndarray, program_id: np.ndarray | None = None) -> np.ndarray:
        """Boolean mask over records (given their task and program id columns): True = test."""
        if self.by == "within-task":
            return np.isin(np.asarray(program_id, np.uint64), self.test_programs)
        return np.isin(np.asarray(task), self.test_tasks)

    @property
    def meta(self) -> dict:
        return dict(by=self.by, seed=self.seed, test_fraction=self.test_fraction,
                    held_out_networks=self.held_out_networks)

    def same_as(self, other: "Split") -> bool:
        """Whether two splits are the same: they hold out the same records and were made with the same options.
        The seed and test fraction are no part of it where either split holds out networks named by --held-out
        (they chose nothing there; a split stored before they were left out holds the values given then)."""
        if self.digest != other.digest:
            return False
        mine, theirs = self.meta, other.meta
        if self.seed is None or other.seed is None:
            for m in (mine, theirs):
                del m["seed"], m["test_fraction"]
        return mine == theirs

    @property
    def digest(self) -> str:
        """A fingerprint of what the split holds out (kind and held-out tasks or programs): a model records
        the digest of the split it trained on, so evaluation can tell when the stored split changed since."""
        h = hashlib.sha256(self.by.encode())
        h.update(np.asarray(self.test_tasks, np.int64).tobytes())
        if self.test_programs is not None:
            h.update(np.asarray(self.test_programs, np.uint64).tobytes())
        return h.hexdigest()[:16]

    def describe(self) -> str:
        unit = f"{len(self.test_programs)} test programs" if self.by == "within-task" else \
            f"{len(self.test_tasks)} test tasks"
        if self.seed is None:  # networks named by --held-out: no seed or fraction chose them
            nets = self.held_out_networks
            more = f" and {len(nets) - 3} more" if len(nets) > 3 else ""
            return f"by {self.by}, held out {', '.join(nets[:3])}{more}, {unit}"
        return f"by {self.by}, seed {self.seed}, test fraction {self.test_fraction:g}, {unit}"

    def widened(self, networks: dict) -> "Split":
        """The split as it holds out now, by the dataset's ``networks``: a split by network holds out every task its
        networks have, so a held-out network whose task list was replaced since (extracted again at another batch
        size) has its new tasks held out too, beside those it had, never trained on as the tasks of no held-out
        network."""
        now = [t for n in self.held_out_networks for t, _ in networks.get(n, ())]
        if self.by != "network" or np.isin(now, self.test_tasks).all():
            return self
        return dataclasses.replace(self, test_tasks=np.union1d(self.test_tasks, np.asarray(now, np.int64)))

    def write(self, splits_group, replace: bool = False, networks: dict | None = None) -> bool:
        """Store the split; False when an identical split of that name is stored already (as it holds out now,
        by the dataset's ``networks``: ``widened``).

        A stored split that differs is never replaced silently (models trained on it would then be evaluated
        on their own training tasks): without ``replace`` it is refused with a ``UsageError``."""
        check_name(self.name, "split name", "task-s0")
        if self.name in splits_group:
            try:
                old = Split.read(splits_group[self.name], self.name)
                old = old if networks is None else old.widened(networks)
            except ValueError as exc:  # a damaged stored split: never the same, replaced only with --replace
                if not replace:
                    raise UsageError(f"the split named {self.name!r} stored already is damaged ({exc}): pass "
                                     "--replace to store this one in its place") from None
                old = None
            if old is not None and old.same_as(self):
                return False
            if old is not None and not replace:
                raise UsageError(
                    f"a different split named {self.name!r} is stored already ({old.describe()}; this one: "
                    f"{self.describe()}): give this one another --name, or pass --replace (models trained on "
                    f"the old split will then refuse to evaluate on it)")
            del splits_group[self.name]
        g = splits_group.create_group(self.name)
        g.attrs["meta"] = json.dumps(self.meta, sort_keys=True)
        g.create_dataset("test_tasks", data=np.asarray(self.test_tasks, np.int64))
        if self.test_programs is not None:
            g.create_dataset("test_programs", data=np.asarray(self.test_programs, np.uint64))
        return True

    @classmethod
    def read(cls, g, name: str) -> "Split":
        """The split stored in group ``g``; ValueError saying what is missing or malformed (a damaged file)."""
        try:
            meta = json.loads(g.attrs.get("meta", ""))
        except (json.JSONDecodeError, TypeError):
            raise ValueError("has no valid JSON meta attribute") from None
        if not isinstance(meta, dict) or meta.get("by") not in SPLIT_KINDS:
            raise ValueError(f"meta is not a split's (by one of {', '.join(SPLIT_KINDS)})")
        for column in ("test_tasks",) + (("test_programs",) if meta["by"] == "within-task" else ()):
            if not isinstance(g.get(column), h5py.Dataset):
                raise ValueError(f"has no column {column!r}")
        progs = g["test_programs"][...] if "test_programs" in g else None
        seed, fraction = meta.get("seed"), meta.get("test_fraction")  # None: networks named by --held-out
        return cls(name, meta["by"], None if seed is None else int(seed), None if fraction is None else float(fraction),
                   g["test_tasks"][...], progs, list(meta.get("held_out_networks", [])))


def _name_part(text: str) -> str:
    """``text`` as a part of a split's name: what a name may not hold (letters, digits and . _ + -) as ``_``."""
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", text)


def default_split_name(by: str, seed: int, test_fraction: float = 0.2, held_out=None) -> str:
    """The name a split gets from its options: ``task-s0`` (20% held out), ``task30-s0`` (30%),
    ``network-bert+gpt2`` (networks named). Splits that differ in any option get different names."""
    if held_out:
        # in name order, as the split stores them: the same networks held out in another order are the same split
        return "network-" + _name_part("+".join(sorted(set(held_out))))[:180]
    pct = "" if abs(test_fraction - 0.2) < 1e-12 else f"{test_fraction * 100:.4g}"
    return f"{by}{pct}-s{seed}"


def _stored_network_split(ds, held_out) -> str | None:
    """The name of a stored split that holds out exactly the networks ``held_out`` under the name ``--held-out``
    gave it in another order (an earlier costlab's), or None. A split of another name that holds out the same
    networks (drawn by a seed, or named by --name) is not it: the split is stored under its documented name."""
    want = sorted(set(held_out))
    parts = sorted(_name_part(n) for n in want)
    for name in ds.split_names():
        if not name.startswith("network-") or sorted(name[len("network-"):].split("+")) != parts:
            continue
        try:
            stored = ds.split(name)
        except (ValueError, CostlabError):  # a damaged split: never the same one
            continue
        if stored.by == "network" and sorted(stored.held_out_networks or []) == want:
            return name
    return None


def make_split(ds, by: str, seed: int = 0, test_fraction: float = 0.2, held_out=None, name: str | None = None) -> Split:
    """Compute a split of an open ``Dataset`` (does not write it; see ``Split.write``)."""
    if by not in SPLIT_KINDS:
        raise ValueError(f"split kind must be one of {', '.join(SPLIT_KINDS)}, not {by!r}")
    if isinstance(held_out, str):  # one network by its name, not its letters
        held_out = [held_out]
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise UsageError(f"split seed must be an integer, not {seed!r}")
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float, np.floating)):
        raise UsageError(f"test fraction must be a number between 0 and 1, not {test_fraction!r}")
    if held_out and by != "network":  # named networks are held out whole: that is a split by network, nothing else
        raise UsageError(f"--held-out holds out whole networks, a split by network: it cannot be one by {by} (leave "
                         "out --by, or give --by network)")
    if not 0 < test_fraction < 1:  # also refuses NaN
        raise UsageError(f"test fraction must be between 0 and 1 (exclusive), not {test_fraction}")
    rng = np.random.default_rng(seed)
    if name is None and held_out:  # the same networks held out again: the split stored already (whatever name
        name = _stored_network_split(ds, held_out)  # order an earlier costlab gave it), else a new one
    name = default_split_name(by, seed, test_fraction, held_out) if name is None else name
    check_name(name, "split name", "task-s0")
    counts: dict[int, int] = {}
    ran: set[int] = set()  # tasks with a program that ran (a finite latency) on some platform
    for p in ds.record_platforms():
        # checked: a record of a task the task table lacks (a damaged file) is one error, never a task to split
        table = ds.records(p)
        task = table.checked_task()
        t, c = np.unique(task, return_counts=True)
        for ti, ci in zip(t.tolist(), c.tolist()):
            counts[ti] = max(counts.get(ti, 0), ci)
        if by in ("task", "network"):
            ran.update(np.unique(task[np.isfinite(table.latency())]).tolist())
    with_records = sorted(counts)
    if by == "task":
        # a task with a single program, or none that ran (every build or run failed), has nothing to rank: it is
        # never held out (a test part of such tasks scores nan on every metric)
        tasks = np.array([t for t in with_records if counts[t] >= 2 and t in ran], np.int64)
        if len(tasks) < 2:
            raise InputError(ds.path, "a split by task needs at least 2 tasks with 2 or more records, one of which "
                                      f"ran, found {len(tasks)}")
        # rounded first: 0.28 * 25 is 7.000000000000001 in floating point, and its ceiling would hold out 8 tasks
        n_test = min(len(tasks) - 1, max(1, math.ceil(round(test_fraction * len(tasks), 9))))
        test = np.sort(rng.permutation(tasks)[:n_test])
        return Split(name, by, seed, test_fraction, test)
    if by == "network":
        nets, recorded = sorted(ds.networks), set(with_records)
        if held_out:
            missing = [n for n in held_out if n not in ds.networks]
            if missing:
                raise InputError(ds.path, f"no network named {', '.join(missing)} (networks: {', '.join(nets) or 'none'})")
            chosen = list(held_out)
        else:
            # a network none of whose tasks has a record (TenSet's network info lists every target's networks)
            # would hold out nothing, and one none of whose programs ran would hold out nothing to rank: only
            # networks with a task where a program ran are drawn
            nets = [n for n in nets if any(t in ran for t, _ in ds.networks[n])]
            if len(nets) < 2:
                raise InputError(ds.path, "a split by network needs at least 2 networks with records, one of which "
                                          f"ran, found {len(nets)}")
            chosen, covered = [], set()
            for n in rng.permutation(nets).tolist():
                if len(chosen) == len(nets) - 1 or len(covered) >= test_fraction * len(with_records):
                    break
                more = covered | ({t for t, _ in ds.networks[n]} & recorded)
                if more == recorded:  # it would leave nothing to train on (networks share tasks): the next one
                    continue
                chosen.append(n)
                covered = more
            if not chosen:
                raise InputError(ds.path, "every network with records holds every task with records: holding any "
                                          "out leaves nothing to train on; split by task")
        test = np.array(sorted({t for n in chosen for t, _ in ds.networks[n]}), np.int64)
        held = set(test.tolist()) & recorded
        if not held or held == recorded:
            which = "no task with records" if not held else "every task with records"
            raise InputError(ds.path, f"holding out {', '.join(sorted(chosen))} leaves {which} in the test part: "
                                      "hold out other networks, or split by task")
        # networks named by --held-out are the split whatever the seed and fraction: neither is stored with it
        return Split(name, by, None if held_out else seed, None if held_out else test_fraction, test,
                     held_out_networks=sorted(chosen))
    # within task: a fraction of each task's programs, chosen over the union of all platforms
    test_ids = []
    by_task: dict[int, set] = {}
    for p in ds.record_platforms():
        table = ds.records(p)
        for t, pid in zip(table.checked_task().tolist(), table.program_id.tolist()):
            by_task.setdefault(t, set()).add(pid)
    for t in sorted(by_task):
        ids = np.array(sorted(by_task[t]), np.uint64)
        n_test = int(round(test_fraction * len(ids)))
        if len(ids) >= 2:  # a task keeps a program to train on (round(0.75 * 2) held out both)
            n_test = min(n_test, len(ids) - 1)
        test_ids.append(rng.permutation(ids)[:n_test])
    progs = np.sort(np.concatenate(test_ids)) if test_ids else np.zeros(0, np.uint64)
    if not progs.size:  # a split whose test part is empty would be stored, and trained and evaluated on, as if real
        _refuse_empty_within_task(ds, test_fraction, max((len(v) for v in by_task.values()), default=0))
    if progs.size == sum(len(v) for v in by_task.values()):  # nothing left to train on: every task of one program
        raise InputError(ds.path, f"a split within task at test fraction {test_fraction} holds out every program "
                                  "(its tasks have one program each): split by task, or give a smaller fraction")
    return Split(name, by, seed, test_fraction, np.zeros(0, np.int64), progs)


def _refuse_empty_within_task(ds, test_fraction: float, most: int) -> None:
    """The error for a split within task that holds out no program: each task holds out ``round(fraction * n)``
    of its n programs, 0 for every task when the fraction is small; ``most`` is the largest task's n."""
    if most == 0:
        raise InputError(ds.path, "has no records: a split within task needs records to hold out")
    if most == 1:
        raise InputError(ds.path, "no task has 2 or more programs: a split within task has nothing to hold out "
                                  "(split by task or by network)")
    # the smallest fraction in hundredths that holds out a program of the largest task, rounded as above
    enough = next(k / 100 for k in range(1, 100) if round(k / 100 * most) >= 1)
    raise UsageError(f"--test-fraction {test_fraction:g} holds out no program (the largest task has {most} "
                     f"programs, and {test_fraction:g} of each task rounds to 0): give --test-fraction {enough:g} "
                     "or more")
