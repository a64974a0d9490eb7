"""TLP featurizer: a schedule as a sentence of primitive tokens (MetaSchedule traces and Ansor step lists).

Each kept primitive becomes one token (``tlp_tokens`` says how traces and step lists are read). Outputs, for
``n`` records, sequence length ``L = config["seq_len"]`` and ``S = config["num_slots"]`` numeric slots:

- ``kind``    int32 (n, L): vocabulary index of the token, 0 = padding, 1 = unknown primitive or key;
- ``numeric`` float32 (n, L, S): the token's numbers, ``sign(x) * log1p(|x|)``, cut to S slots, zero-padded;
- ``mask``    bool (n, L): True where a token is (False on padding);
- ``length``  int32 (n,): the record's token count before cutting to L;
- ``valid``   bool (n,): False where the schedule could not be read (its row is all padding).

Sequences longer than L keep their first L tokens. ``fit`` learns the vocabulary (every key seen, at all its
levels of detail: ``Annotate:meta_schedule.tiling_structure=SSRSRS``, ``Annotate:meta_schedule.tiling_structure``,
``Annotate``) and L (the ``seq_len_percentile`` of token counts) from a dataset; an unseen key maps to its
most specific known level, or to the unknown token, never to an error.

Which MetaSchedule primitives are kept was measured (``scripts/tlp_primitive_stats.py``, numbers in
``docs/featurizers.md``): on 5,200 CPU and 1,922 GPU traces sampled over 26 benchmark tasks, GetLoops varies
between programs of the same task in every task, GetChildBlocks and Unannotate in all CPU tasks, GetSBlock
and GetProducers/GetConsumers in a few, EnterPostproc never; but every one of them is implied by the kept
tokens (conditional entropy 0 bits given the rest, in every task), and the kept tokens alone tell apart
every distinct trace (4,910 of 4,910 on CPU, 1,815 of 1,815 on GPU). Their loop and block outputs still
count in the ordinals, so a loop found by a dropped GetLoops keeps its place. The Sample* instructions are
dropped once their decisions are folded into the primitives that consume them. ``config["ms_drop"]``
overrides the list.
"""

from __future__ import annotations

import math

import numpy as np
import orjson

from costlab.featurizers.base import ConfigError, Featurizer, register
from costlab.featurizers.tlp_tokens import DEFAULT_MS_DROP, ansor_tokens, ms_tokens
from costlab.metaschedule.traces import trace_json

PAD, UNK = 0, 1
SPECIAL = ("<pad>", "<unk>")


def tokens_of(schedule, dialect: str, ms_drop=frozenset(DEFAULT_MS_DROP)) -> list:
    """Tokens of one schedule (JSON text or parsed) of a dialect ("ms" or "ansor"); raises ValueError when the
    schedule cannot be read."""
    value = orjson.loads(schedule) if isinstance(schedule, (str, bytes)) else schedule
    try:
        if dialect == "ms":
            return ms_tokens(value, ms_drop)
        if dialect == "ansor":
            return ansor_tokens(value)
    except (IndexError, TypeError, KeyError, AttributeError, ValueError) as exc:
        raise ValueError(f"unreadable {dialect} schedule ({type(exc).__name__}: {exc})") from None
    raise ValueError(f"unknown schedule dialect {dialect!r}")


@register
class TLPFeaturizer(Featurizer):
    name = "tlp"
    version = 1
    # 1: an Ansor pragma value that is no finite number ("$inf", "$nan") is 0 (it was inf / NaN in the numbers): caches
    # made before are rebuilt (the revision is part of their fingerprint), models still load
    revision = 1
    default_config = {
        "num_slots": 16,  # numbers kept per token
        "seq_len_percentile": 99.0,  # fit: sequence length = this percentile of token counts
        "max_seq_len": 256,  # fit: upper bound on the learned sequence length
        "min_count": 1,  # fit: a key seen fewer times maps to a more general one
        "fit_sample": 100_000,  # fit: at most this many records are read (evenly spread)
        "ms_drop": list(DEFAULT_MS_DROP),  # MetaSchedule primitive kinds left out
    }
    learned_keys = ("vocabulary", "seq_len")
    # every count at least 1 (a token of 0 slots, an empty sample), except min_count: 0 and 1 both keep every key
    config_bounds = {"num_slots": (1, None), "seq_len_percentile": (0, 100), "max_seq_len": (1, None),
                     "min_count": (0, None), "fit_sample": (1, None)}

    def check_config(self) -> None:
        """The defaults' types and bounds, and what ``fit`` learned when it is there (a model's or a cache's
        config): the vocabulary a list of strings, the sequence length a positive integer."""
        super().check_config()
        if "vocabulary" in self.config:
            self.check_value("vocabulary", self.config["vocabulary"], list(SPECIAL))
        if "seq_len" in self.config:
            self.check_value("seq_len", self.config["seq_len"], 1, (1, None))
        given = [k for k in self.learned_keys if k in self.config]
        if given and len(given) < len(self.learned_keys):  # fit() would replace it without a word
            missing = [k for k in self.learned_keys if k not in self.config]
            raise ConfigError(self.name, given[0], f"{given[0]} is learned by fit together with {', '.join(missing)}, "
                              "not set alone (max_seq_len and seq_len_percentile bound the sequence length, "
                              "min_count the vocabulary)")

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        self._drop = frozenset(self.config["ms_drop"])
        self._index = {k: i for i, k in enumerate(self.config.get("vocabulary", SPECIAL))}
        self._key_ids: dict = {}

    # -- vocabulary ---------------------------------------------------------------------------------
    def fit(self, ds, platforms=None) -> "TLPFeaturizer":
        """Vocabulary and sequence length from the records of ``platforms`` (all when None)."""
        platforms = list(platforms) if platforms else ds.record_platforms()
        counts: dict = {}
        lengths = []
        total = sum(ds.num_records(p) for p in platforms)
        budget = int(self.config["fit_sample"])
        for pid in platforms:
            n = ds.num_records(pid)
            if n == 0:
                continue
            take = n if total <= budget else max(1, round(budget * n / total))
            rows = np.unique(np.linspace(0, n - 1, take).round().astype(np.int64))
            table = ds.records(pid)
            dialects = self._dialects(ds, table.column("task", rows))
            for text, dialect in zip(table.schedules(rows), dialects):
                try:
                    toks = tokens_of(text, dialect, self._drop)
                except (ValueError, orjson.JSONDecodeError):
                    continue
                lengths.append(len(toks))
                for keys, _ in toks:
                    for k in keys:
                        counts[k] = counts.get(k, 0) + 1
        if not lengths:
            raise ValueError(f"featurizer tlp: no readable schedules to fit on in {ds.path} "
                             f"(platforms {', '.join(platforms) or 'none'})")
        keep = sorted(k for k, c in counts.items() if c >= int(self.config["min_count"]))
        seq_len = int(math.ceil(np.percentile(lengths, float(self.config["seq_len_percentile"]))))
        self.config["vocabulary"] = list(SPECIAL) + keep
        self.config["seq_len"] = max(1, min(seq_len, int(self.config["max_seq_len"])))
        self._index = {k: i for i, k in enumerate(self.config["vocabulary"])}
        self._key_ids = {}
        return self

    @property
    def vocabulary(self) -> list[str]:
        return list(self.config.get("vocabulary", SPECIAL))

    def token_id(self, keys: tuple) -> int:
        """Vocabulary index of a token's keys: the most specific known one, else ``UNK``."""
        tid = self._key_ids.get(keys)
        if tid is None:
            tid = next((self._index[k] for k in keys if k in self._index), UNK)
            self._key_ids[keys] = tid
        return tid

    # -- features -----------------------------------------------------------------------------------
    @staticmethod
    def _dialects(ds, task_idx) -> list[str]:
        by_task = [t.dialect for t in ds.tasks]
        return [by_task[int(t)] for t in task_idx]

    def featurize_records(self, ds, platform: str, rows) -> dict:
        rows = np.asarray(rows, np.int64)
        if rows.size > 1 and not np.all(np.diff(rows) > 0):  # HDF5 reads want increasing rows
            uniq, back = np.unique(rows, return_inverse=True)
            out = self.featurize_records(ds, platform, uniq)
            return {k: v[back] for k, v in out.items()}
        table = ds.records(platform)
        texts = table.schedules(rows)
        dialects = self._dialects(ds, table.column("task", rows)) if rows.size else []
        return self.featurize_schedules(texts, dialects)

    def featurize_schedules(self, schedules, dialects) -> dict:
        """Features of schedules (JSON text or parsed), each with its dialect ("ms" / "ansor", or one string
        for all)."""
        if not self.is_fitted:
            raise ValueError("featurizer tlp is not fitted: call fit(dataset) or load a config with a vocabulary")
        if isinstance(dialects, str):
            dialects = [dialects] * len(schedules)
        token_lists, valid = [], []
        for s, d in zip(schedules, dialects):
            try:
                token_lists.append(tokens_of(s, d, self._drop))
                valid.append(True)
            except (ValueError, orjson.JSONDecodeError):
                token_lists.append([])
                valid.append(False)
        out = self.encode(token_lists)
        out["valid"] = np.array(valid, dtype=bool)
        return out

    def encode(self, token_lists) -> dict:
        """Pack token lists into the padded arrays (see the module docstring)."""
        n, L, S = len(token_lists), int(self.config["seq_len"]), int(self.config["num_slots"])
        kind = np.zeros((n, L), np.int32)
        numeric = np.zeros((n, L, S), np.float32)
        length = np.fromiter((len(t) for t in token_lists), np.int32, n)
        used = np.minimum(length, L)
        total = int(used.sum())
        rec_idx = np.repeat(np.arange(n), used)
        pos = np.arange(total) - np.repeat(np.cumsum(used) - used, used)
        ids = np.empty(total, np.int32)
        rows = []  # one list of S numbers per kept token
        pad = [0] * S
        t = 0
        token_id = self.token_id
        for toks, u in zip(token_lists, used.tolist()):
            for keys, nums in toks[:u]:
                ids[t] = token_id(keys)
                rows.append(nums[:S] if len(nums) >= S else nums + pad[: S - len(nums)])
                t += 1
        kind[rec_idx, pos] = ids
        if total:
            x = np.array(rows, np.float64)
            numeric[rec_idx, pos] = (np.sign(x) * np.log1p(np.abs(x))).astype(np.float32)
        mask = np.arange(L)[None, :] < used[:, None]
        return {"kind": kind, "numeric": numeric, "mask": mask, "length": length}

    def cut_sequences(self, feats) -> tuple[int, int]:
        """(records whose tokens past ``seq_len`` were dropped, the longest record's token count) in some features."""
        length = np.asarray(feats["length"])
        return int(np.count_nonzero(length > int(self.config["seq_len"]))), int(length.max(initial=0))

    def unknown_tokens(self, feats) -> tuple[int, int]:
        """(tokens mapped to ``<unk>``, tokens) in some features: a primitive the vocabulary never saw."""
        kind, mask = np.asarray(feats["kind"]), np.asarray(feats["mask"], bool)
        return int(np.count_nonzero(kind[mask] == UNK)), int(np.count_nonzero(mask))

    def featurize_candidates(self, mod, target, schedules) -> dict:
        """Features of live candidates (``tvm.s_tir.Schedule``): their traces in the form a MetaSchedule JSON
        database stores them (``metaschedule.traces.trace_json``: postprocessing kept, booleans as 0/1), so
        a candidate and the same program read back from a dataset get equal features."""
        return self.featurize_schedules([trace_json(s.trace) for s in schedules], "ms")
