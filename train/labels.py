"""Labels for training: records of one (base) platform, or any rows of programs (``label_rows``), with each
program's score on every platform.

Multi-platform data lines up by program id: row ``i`` of the base platform's records gets, for each platform
``p``, the score of the same program measured on ``p`` (``best / latency`` within its task on ``p``, failed
0), or NaN where ``p`` has no measurement — or where it was hidden to simulate scarce target labels
(``keep_fraction``), in which case the best of the task is taken over the kept labels only. With a split
(``held_out``: its ``is_test``), a training row's best is taken over the task's training programs only: a
within-task split's held-out programs never set the training labels (a test program's label keeps the
whole task's best), and neither do its validation programs (``validation``: their labels' best is taken over the
task's training and validation programs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costlab.datasets.records import scores


@dataclass
class LabelTable:
    platforms: list[str]
    task: np.ndarray  # (n,) task index of each base row
    program_id: np.ndarray  # (n,)
    score: np.ndarray  # (n, P) float64, NaN = no label
    latency: np.ndarray  # (n, P) float64, inf = failed, NaN = no label

    def __len__(self) -> int:
        return len(self.task)


def build_label_table(ds, platforms: list[str], base: str | None = None, keep_fraction=None,
                      seed: int = 0, held_out=None, validation=None) -> LabelTable:
    """``keep_fraction``: optional {platform: fraction of its programs whose labels are kept}; ``held_out``:
    optional ``(task, program_id) -> bool mask`` of the test records; ``validation``: the same of the validation
    records (with ``held_out``)."""
    base = base or platforms[0]
    table = ds.records(base)
    task, pids = table.checked_task().astype(np.int64), table.program_id  # a damaged file: one error
    return label_rows(ds, platforms, task, pids, keep_fraction, seed, held_out, validation)


def label_rows(ds, platforms: list[str], task: np.ndarray, pids: np.ndarray, keep_fraction=None, seed: int = 0,
               held_out=None, validation=None) -> LabelTable:
    """The labels of rows given by their task and program id (records of several platforms, say), as
    ``build_label_table`` labels a platform's records: the same draws of ``keep_fraction``, whatever the rows."""
    n, rng = len(task), np.random.default_rng(seed)
    score = np.full((n, len(platforms)), np.nan)
    latency = np.full((n, len(platforms)), np.nan)
    for j, p in enumerate(platforms):
        t = ds.records(p)
        p_task, p_ids, p_lat = t.checked_task().astype(np.int64), t.program_id, t.latency()
        frac = (keep_fraction or {}).get(p, 1.0)
        if frac < 1.0:
            keep = rng.random(len(p_ids)) < frac
            p_task, p_ids, p_lat = p_task[keep], p_ids[keep], p_lat[keep]
        p_score = scores(p_task, p_lat)
        if held_out is not None:
            test = held_out(p_task, p_ids)
            if test.any():
                p_score[~test] = scores(p_task[~test], p_lat[~test])
            val = validation(p_task, p_ids) & ~test if validation is not None else np.zeros(len(p_ids), bool)
            if val.any():  # a training label's best is never a validation program's latency either
                fit = ~test & ~val
                p_score[fit] = scores(p_task[fit], p_lat[fit])
        order = np.argsort(p_ids)
        pos = np.searchsorted(p_ids[order], pids).clip(0, max(len(order) - 1, 0))
        found = (p_ids[order][pos] == pids) if len(order) else np.zeros(n, bool)
        src = order[pos[found]]
        score[found, j] = p_score[src]
        latency[found, j] = p_lat[src]
    return LabelTable(list(platforms), task, pids, score, latency)
