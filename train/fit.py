"""Training and fine-tuning entry points: a config in, a run directory out.

    RUN_DIR/config.yaml          the resolved configuration
    RUN_DIR/checkpoints/         Lightning checkpoints: best-epoch=N.ckpt (best by validation top-1) and last.ckpt
                                 (the latest epoch, rewritten every epoch: what --resume continues from)
    RUN_DIR/logs/, RUN_DIR/tb/   CSV and TensorBoard logs
    RUN_DIR/model/               the best net as config.json + model.safetensors (no pickle)
    RUN_DIR/summary.json         best validation metrics, records/s, wall time
    RUN_DIR/features/            while the run trains: the features of a platform whose dataset cache is of another
                                 fit than the model's (fine-tuning a model with its own vocabulary), one file a
                                 platform (``featurizers.side_cache``); removed when the model is written
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import sys
import time
import warnings
from pathlib import Path

import lightning as L
import numpy as np
import torch
import yaml

from costlab.common import jsontext
from costlab.common.checks import check_fields
from costlab.common.errors import UsageError
from costlab.common.files import write_atomically
from costlab.costmodels.artifact import load_state, read_artifact, read_config, save_artifact
from costlab.featurizers.base import same_features
from costlab.train.baselines import train_baseline
from costlab.train.config import DEFAULTS
from costlab.train.data import CostDataModule, DataConfig
from costlab.train.evaluate import checkpoint_lineage, lineage_of
from costlab.train.module import CostModelModule
from costlab.train.predict import read_checkpoint
from costlab.train.run_dir import check_fresh_start, old_checkpoints, run_dir, run_lock
from costlab.costmodels import kinds
from costlab.datasets import open_dataset
from costlab.costmodels.nets import check_featurizer_fits, net_config_for
from costlab.costmodels.predictors import resolve
from costlab.featurizers import hardware_vector


class _DropAdverts(logging.Filter):
    """Lightning prints an advert for a cloud logger on every run; it says nothing about this run."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Tip:" not in str(record.msg)


def _quiet_lightning() -> None:
    log = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _DropAdverts) for f in log.filters):
        log.addFilter(_DropAdverts())
    # Lightning 2.6 calls a torch pytree API that torch 2.13 deprecates; not actionable here
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
    # a resumed run writes into its own checkpoints; a fresh one into another run's is refused before (train)
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")


class _Throughput(L.Callback):
    """Counts training records and time, for records/s, and the fit's wall seconds. Kept in every checkpoint, so
    a resumed run counts the epochs before its interruption too (up to the checkpoint it continues from)."""

    def __init__(self):
        self.records, self.seconds = 0, 0.0
        self.wall_before = 0.0  # the fit's wall seconds up to the checkpoint a resumed run continues from
        self._fit_start = time.perf_counter()

    def start(self) -> None:
        """The fit starts now (Lightning's set-up and sanity checks count, as in a run never interrupted)."""
        self._fit_start = time.perf_counter()

    def wall(self) -> float:
        return self.wall_before + time.perf_counter() - self._fit_start

    def state_dict(self) -> dict:
        return dict(records=self.records, seconds=self.seconds, wall=self.wall())

    def load_state_dict(self, state: dict) -> None:
        self.records, self.seconds = int(state.get("records", 0)), float(state.get("seconds", 0.0))
        self.wall_before = float(state.get("wall", 0.0))
        self.restored = self.records  # a resumed run trained nothing more when its count is still this

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self._t = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.records += len(batch["row"])
        self.seconds += time.perf_counter() - self._t


class _MomentumRounds(L.Callback):
    """MoA offline: at the start of every round of ``momentum_every`` epochs (after the first) the online
    net restarts from the momentum copy; at the end of each round the momentum copy moves by EMA."""

    def on_train_epoch_start(self, trainer, module):
        if trainer.current_epoch and trainer.current_epoch % module.hparams.momentum_every == 0:
            module.net.reset_online()

    def on_train_epoch_end(self, trainer, module):
        if (trainer.current_epoch + 1) % module.hparams.momentum_every == 0:
            module.net.ema()


class TrainingDiverged(UsageError):
    """The training loss became NaN or infinite: the run stops, and no model is written from it."""


class _StopOnDivergence(L.Callback):
    """Stops the run at the first training step whose loss is not finite. Every later step would train on
    NaN gradients, and the model written at the end would score every program NaN."""

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is not None and not bool(torch.isfinite(loss.detach()).all()):
            raise TrainingDiverged(
                f"training diverged: the loss is {float(loss.detach())} at epoch {trainer.current_epoch}, step "
                f"{trainer.global_step}; no model was written (lower lr, now {module.hparams.lr:g}, or keep "
                "trainer.gradient_clip_val)")


def load_weights(module: CostModelModule, source) -> None:
    """Initialise a module's net from a Lightning checkpoint or a pretrained model directory."""
    source = Path(source)
    if source.suffix != ".ckpt":
        state = read_artifact(source).tensors
    else:
        state = read_checkpoint(source)["state"]
    training = module.core.training
    load_state(module.core, state, source)  # checks that the weights fit the net (and puts it in eval mode)
    module.core.train(training)  # Lightning trains modules in the mode they are in at fit start
    if hasattr(module.net, "momentum_net"):
        module.net.momentum_net.load_state_dict(state)


def _check_source_kind(init_from, source_kind: str, kind: str) -> None:
    """Refuse a source whose weights cannot start a ``kind`` net: another net (a PaCM model for a TLP run), or a
    model of no net at all (a baseline). A multi-head model and its single-head kind share a net (mtl, tlp)."""
    found = kinds.find(source_kind)
    if found is None or not found.learned:
        raise UsageError(f"{init_from}: a {source_kind} model has no net to start from (fine-tune a "
                         f"{kinds.spoken(kinds.learned())} model)")
    if found.net != kinds.create(kind).net:
        raise UsageError(f"{init_from}: a {source_kind} model cannot start a {kind} net; give --model {source_kind} "
                         "(`costlab finetune --from` takes the kind from the model)")


def source_meta(source) -> dict:
    """kind, net config and featurizer of a trained model (run dir, model dir or archive, checkpoint, or a
    shipped model's name: the names ``costlab models`` lists, resolved as every other command resolves them)."""
    source = resolve(source)
    if source.is_dir() or source.suffix != ".ckpt":
        c = read_config(source)  # refuses anything that is not a model directory or archive, in one line
        return dict(path=source, kind=c["kind"], net=c["net"], featurizer=c["featurizer"], lineage=lineage_of(c),
                    platforms=list(c.get("platforms") or []))
    ckpt = read_checkpoint(source)
    return dict(path=source, kind=ckpt["kind"], net=ckpt["net_config"], featurizer=ckpt["featurizer"],
                lineage=checkpoint_lineage(source), platforms=list(ckpt["platforms"]))


class _NoteInterrupt(L.Callback):
    """Keeps the KeyboardInterrupt (Ctrl-C, or costlab's SIGTERM as ``Terminated``) that stopped training:
    Lightning catches it and calls ``sys.exit(1)``, and ``train`` raises it again in its place, so that the
    command ends as every costlab command does on an interruption (exit 130 or 143, one line).

    A signal whose exception Python swallowed (raised while a ``__del__`` ran: "Exception ignored in ...") would
    leave training running, for good with many epochs: each signal is also noted as it arrives (``listen``), and
    one noted but not yet seen as an exception is raised again at the next batch's end."""

    def __init__(self):
        self.interrupt: KeyboardInterrupt | None = None
        self.signals: list = []
        self._raisers: dict = {}  # signal -> the handler that raises it (costlab's, or Python's Ctrl-C)

    def on_exception(self, trainer, module, exception):
        if isinstance(exception, KeyboardInterrupt):
            self.interrupt = exception

    def listen(self) -> dict:
        """Notes each Ctrl-C and SIGTERM before the handler it would have met (which raises it) runs; returns those
        handlers, to be put back."""
        import signal
        import threading

        previous = {}
        if threading.current_thread() is not threading.main_thread():  # no handler can be set there (Lightning
            return previous  # sets none either): a run started from another thread of a program trains as before
        for sig in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(sig)
            if callable(handler):  # not a default or an ignored signal (a background job's Ctrl-C)

                def noting(signum, frame, handler=handler):
                    self.signals.append(signum)
                    handler(signum, frame)

                self._raisers[sig] = handler
                previous[sig] = signal.signal(sig, noting)
        return previous

    def _raise_swallowed(self):
        # the handler itself, not the signal again: a handler Lightning chained in front of it meanwhile (its
        # SIGTERM notifier, which talks to the other ranks under DDP) has run for this signal already
        if self.signals and self.interrupt is None:
            signum = self.signals[-1]
            self._raisers[signum](signum, None)

    def on_train_batch_end(self, *args, **kwargs):
        self._raise_swallowed()

    def on_validation_batch_end(self, *args, **kwargs):
        self._raise_swallowed()


def _differences(old: dict, new: dict) -> list:
    """``key old (now new)`` for every key whose value differs between two mappings."""
    return [f"{k} {old.get(k)!r} (now {new.get(k)!r})" for k in sorted(set(old) | set(new), key=str)
            if old.get(k) != new.get(k)]


def _with_defaults(kind: str, net_config: dict) -> dict:
    """A net config with every option it leaves out at its default: a run trained with the default d_model and
    one that names that value build the same net."""
    _, config_class = kinds.create(kind).net_classes()
    defaults = {f.name: f.default for f in dataclasses.fields(config_class) if f.default is not dataclasses.MISSING}
    return {**defaults, **net_config}


FEATURES = "features"  # the run's own copy of features no dataset cache holds (``featurizers.side_cache``)
ZERO_MEANS_DEFAULT = ("head_layers",)  # net options whose 0 is valid (head_layers <= 1: every layer shared)


def _check_net_sizes(kind: str, options: dict) -> None:
    """Net options that count something (d_model, layers, heads of attention) must be positive integers: a net of
    0 layers builds, and fails only on its first batch (options whose default is 0 may be 0; the net config
    class checks names and types)."""
    _, config_class = kinds.create(kind).net_classes()
    for f in dataclasses.fields(config_class):
        default, value = f.default, options.get(f.name)
        counts = (isinstance(default, int) and not isinstance(default, bool) and default >= 1
                  and f.name not in ZERO_MEANS_DEFAULT)
        if counts and f.name in options and isinstance(value, (int, float)) and not isinstance(value, bool) \
                and value < 1:
            raise UsageError(f"net.{f.name} must be a positive integer, not {value!r}")


def _check_resumable(ckpt: dict, kind: str, net_config: dict, featurizer: dict, platforms: list) -> None:
    """``--resume`` continues the run of ``ckpt`` (its last checkpoint) with the same net: another model kind, net
    option, feature config or platform list would not load its weights. Refused naming what differs, before
    anything in the run directory is written (its config.yaml still records the run's options)."""
    what = []
    if ckpt["kind"] != kind:
        what.append(f"model {ckpt['kind']!r} (now {kind!r})")
    if list(ckpt["platforms"]) != list(platforms):
        what.append(f"platforms {list(ckpt['platforms'])} (now {list(platforms)})")
    if net_config is not None and ckpt["kind"] == kind:
        what += [f"net.{d}" for d in _differences(_with_defaults(kind, ckpt["net_config"]),
                                                  _with_defaults(kind, net_config))]
    if featurizer is not None and same_features(ckpt["featurizer"]) != same_features(featurizer):
        config = lambda f: f.get("config", {}) if isinstance(f, dict) else {}  # noqa: E731
        keys = [d.split(" ", 1)[0] for d in _differences(config(ckpt["featurizer"]), config(featurizer))]
        what.append("the features of the dataset (featurizer " + (", ".join(keys) or "config") + ")")
    if what:
        raise UsageError(f"--resume: {ckpt['path']} was trained with other options: {'; '.join(what)}; give the "
                         f"options it was trained with ({Path(ckpt['path']).parents[1] / 'config.yaml'}), or "
                         "--overwrite without --resume to train afresh")


# options a resumed run may change: how long it trains and where it runs, never what it learns from or how (the
# model kind, net and platforms are _check_resumable's to compare, with the net's defaults filled in; the dataset
# file may have moved, and its features are compared there)
RESUME_MAY_CHANGE = ("out", "data", "model", "net", "platforms", "trainer.max_epochs", "trainer.max_steps",
                     "trainer.max_time", "trainer.accelerator",
                     "trainer.devices", "trainer.num_nodes", "trainer.strategy", "trainer.log_every_n_steps",
                     "data_options.num_workers", "data_options.features_in_memory_mb")


def _flat(cfg: dict, prefix: str = "") -> dict:
    """``{"trainer.max_epochs": 5, ...}`` of a config (``trainer`` and ``data_options`` options one by one)."""
    out = {}
    for k, v in cfg.items():
        if isinstance(v, dict) and k in ("trainer", "data_options") and not prefix:
            out.update(_flat(v, f"{k}."))
        else:
            out[prefix + str(k)] = v
    return out


def recorded_config(cfg: dict) -> dict:
    """``cfg`` as the run dir's config.yaml records it: the dataset, the run dir and a fine-tuned model given by a
    path, as absolute paths. A relative one is relative to the folder the command ran in, and config.yaml is
    given back from anywhere (``--config RUN_DIR/config.yaml --out RUN_DIR --resume``): read from another folder
    it named no file, or another dataset there."""
    out = dict(cfg)
    for key in ("data", "out", "init_from"):
        value = out.get(key)
        if isinstance(value, str) and value and (key != "init_from" or os.path.exists(value)):  # not a model's name
            out[key] = os.path.abspath(value)
    return out


def _same_path(a, b) -> bool:
    return a == b or (isinstance(a, str) and isinstance(b, str) and Path(a).resolve() == Path(b).resolve())


def _moved(was: dict, now: dict) -> bool:
    """The recorded ``init_from`` is a path (config.yaml records it absolute) that no longer exists, and another
    model is given: the folder holding the source and the run was moved."""
    old = was.get("init_from")
    return (isinstance(old, str) and os.path.isabs(old) and not os.path.exists(old)
            and isinstance(now.get("init_from"), str) and bool(now.get("init_from")))


def _recorded_rows(out: Path) -> str:
    """The rows (``data_options.mtl_rows``) the multi-head run in ``out`` was trained on: its config.yaml's, and
    ``base`` where that has none (written before the option, when a multi-head model's rows were the base
    platform's records alone), so that the run continues on the rows it began on."""
    try:
        old = yaml.safe_load((out / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return "union"
    options = old.get("data_options") if isinstance(old, dict) else None
    if not isinstance(options, dict):
        return "union"
    return options.get("mtl_rows", "base")


def _check_resumed_options(out: Path, cfg: dict) -> None:
    """``--resume`` continues a run with the options it was trained with (its ``config.yaml``): another split,
    seed, loss, learning rate or data option would train the rest of it on other records or by other rules
    while the model and config.yaml said one run (a changed split would even score records it trained on as held
    out). Refused naming what differs, before anything is written; how long it trains and where it runs may
    change (``RESUME_MAY_CHANGE``). A run dir of no config.yaml (written by an older costlab) is not checked."""
    path = out / "config.yaml"
    try:
        old = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return
    if not isinstance(old, dict):
        return
    # an option either config leaves out is at its default (an older costlab's run lacks newer options; data
    # options such as row_platforms and hardware_jitter, and trainer options Lightning takes, are in a config only
    # where given): one given on one side alone is a change, never left out of the comparison
    defaults = {**_flat(DEFAULTS), **{f"data_options.{f.name}": f.default if f.default is not dataclasses.MISSING
                                      else f.default_factory() for f in dataclasses.fields(DataConfig)
                                      if f.default is not dataclasses.MISSING
                                      or f.default_factory is not dataclasses.MISSING}}
    was, now = {**defaults, **_flat(old)}, {**defaults, **_flat(cfg)}
    if kinds.create(cfg["model"]).multi_head:  # one recorded before the option trained on base rows
        was["data_options.mtl_rows"] = _recorded_rows(out)
    else:  # a model of one head has no mtl rows: what either config says of them changes nothing it learns
        was.pop("data_options.mtl_rows", None)
        now.pop("data_options.mtl_rows", None)
    compared = [k for k in set(was) | set(now) if k not in RESUME_MAY_CHANGE]
    if "init_from" in compared and (_same_path(was.get("init_from"), now.get("init_from")) or _moved(was, now)):
        compared.remove("init_from")  # the same source, spelled another way (or moved: its net and featurizer are
        # compared with the checkpoint's by _check_resumable)
    what = _differences({k: was.get(k) for k in compared}, {k: now.get(k) for k in compared})
    if now.get("lr_schedule") == "cosine" and was.get("trainer.max_epochs") != now.get("trainer.max_epochs"):
        # the scheduler resumes with the T_max of the first run (its state is in the checkpoint): past it the
        # learning rate would rise again, unlike a run of the new length trained at once
        what.append(f"trainer.max_epochs {was.get('trainer.max_epochs')!r} (now {now.get('trainer.max_epochs')!r}): "
                    "lr_schedule cosine decays over the run's max_epochs, which a resumed run cannot change")
    if what:
        raise UsageError(f"--resume: the run in {out} was trained with other options: {'; '.join(what)}; give the "
                         f"options it was trained with (--config {path} --out {out} --resume [--epochs N] gives "
                         "them all), or --overwrite without --resume to train afresh")


def _finished_summary(out: Path, epochs: int) -> dict | None:
    """The summary.json of a run that finished ``epochs`` epochs and wrote its model, else None."""
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) and summary.get("epochs") == epochs and (out / "model").is_dir() \
        else None


def _check_readable(data, dm: CostDataModule) -> None:
    """A run whose training records the featurizer could read none of (Ansor steps for PaCM, which replays
    MetaSchedule traces) would fit a net on empty features and write it as a model: refused; a part unread is
    left out of training (empty features teach the net nothing true of a program, and a tuning run scores such a
    candidate last without asking the net), said with its count, as ``costlab featurize`` says it."""
    ok = dm.readable(dm.train_rows)
    if len(ok) and not ok.any():
        raise UsageError(f"{data}: the {dm.featurizer.name} featurizer could read none of the {len(ok)} training "
                         f"records (`costlab featurize` counts them as unreadable); train a model whose featurizer "
                         f"reads them")
    if not ok.all():
        print(f"costlab: note: {len(ok) - int(ok.sum())} of the {len(ok)} training records have no "
              f"{dm.featurizer.name} features (unreadable by the featurizer); they are left out of training",
              file=sys.stderr)
        dm.train_rows, dm.unread_rows = dm.train_rows[ok], dm.train_rows[~ok]


def _check_heads(data, dm: CostDataModule) -> None:
    """A model of one head per platform learns from rows labelled on every platform that measured the same program
    (by program id): by default every program any of its platforms measured, with ``data_options.mtl_rows: base``
    the records of one platform (the first's, or ``data_options.base_platform``'s). A head with fewer than two
    labelled training records would be written untrained, and is refused; with base rows, records of another
    platform whose program the rows' platform has no record of train no head, which is said with their count."""
    union = dm.config.mtl_rows == "union"
    ids = {}
    if not union:
        with open_dataset(data) as ds:
            ids = {p: ds.records(p).program_id for p in dm.config.platforms
                   if p != dm.base and p in ds.record_platforms()}
    for j, p in enumerate(dm.config.platforms):
        labelled = int(np.isfinite(dm.labels.score[dm.train_rows, j]).sum())
        if labelled < 2:
            rows = ("the records of every platform" if union else f"the records of one platform ({dm.base!r}: "
                    "data_options.base_platform; data_options.mtl_rows: union takes every platform's)")
            why = ("measured too few programs outside the held-out part" if union
                   else "measured too few of the same programs (by program id)")
            raise UsageError(f"{data}: the head of platform {p!r} has {labelled} labelled training record(s): this "
                             f"multi-platform model learns from {rows}, and {p!r} {why}"
                             f"{' (or keep_fraction hid them)' if dm.config.keep_fraction else ''}")
        unused = int(np.count_nonzero(~np.isin(ids[p], dm.labels.program_id))) if p in ids else 0
        if unused:
            print(f"costlab: note: {unused} of the {len(ids[p])} records of {p!r} train no head: the rows' "
                  f"platform {dm.base!r} has no record of their programs (data_options.mtl_rows: base; union takes "
                  "every platform's programs)", file=sys.stderr)


def _check_keep_fraction(keep: dict, platforms: list) -> None:
    """``data_options.keep_fraction`` names platforms the run labels or trains on: another id would be ignored."""
    unknown = sorted(set(keep) - set(platforms))
    if unknown:
        raise UsageError(f"data_options.keep_fraction names platform(s) {', '.join(map(repr, unknown))} this run "
                         f"does not label (its platforms: {', '.join(platforms)})")


def _fit(trainer, noted: _NoteInterrupt, module, dm, ckpt_path) -> None:
    """``trainer.fit``, with an interruption raised as the KeyboardInterrupt it was (see ``_NoteInterrupt``) and
    the Ctrl-C handler Lightning sets aside while it shuts down put back."""
    import signal

    previous = noted.listen()
    handler = signal.getsignal(signal.SIGINT)
    try:
        trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
        noted._raise_swallowed()  # one swallowed after the last batch: the run was interrupted all the same
    except SystemExit:
        if noted.interrupt is None:
            raise
        signal.signal(signal.SIGINT, handler)
        raise noted.interrupt from None
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _check_source_heads(source: dict, model, platforms: list) -> None:
    """A run started from a trained model (``init_from``) keeps its net, and with it its heads: head ``i`` scores
    the model's ``i``-th platform. A model of several heads starts a multi-head run of the same platforms in the
    same order (another order trains each head on another platform's labels; a platform past its heads would never
    be trained, and be scored by the first head), or a one-head run of its first platform (trained and scored
    through the first head); a one-head model starts no run of several heads."""
    if not platforms:
        return
    heads = int((source.get("net") or {}).get("heads") or 1)
    own = list(source.get("platforms") or [])
    if model.multi_head and (heads != len(platforms) or (heads > 1 and own[:heads] != list(platforms))):
        advice = ("a one-head model starts no model of several heads: train the mtl model afresh, or start a "
                  "one-head run from it" if heads == 1 else "give --platform for each of its platforms, in its order")
        raise UsageError(f"{source['path']}: a model of {heads} head(s) ({', '.join(own) or 'no platforms'}) cannot "
                         f"start a {model.name} model of platforms {', '.join(platforms)}: its heads are trained as "
                         f"they are; {advice}")
    if not model.multi_head and heads > 1 and own and platforms[0] != own[0]:
        raise UsageError(f"{source['path']}: a model of several heads ({', '.join(own)}) starts a one-head run through "
                         f"its first head ({own[0]!r}), not {platforms[0]!r}'s own; give --platform {own[0]} first, or "
                         "fine-tune it with `costlab finetune` (its recipes start from the platform's own head)")


def train(cfg: dict, progress: bool = True, resume: bool = False, overwrite: bool = False) -> dict:
    """Train (or, with ``init_from``, fine-tune) by ``cfg`` into the run directory ``cfg["out"]``. ``resume``:
    continue from its checkpoints/last.ckpt; ``overwrite``: a fresh run may delete an earlier run's checkpoints.
    One run at a time per directory (``run_lock``)."""
    with run_lock(cfg["out"]):
        return _train(cfg, progress, resume, overwrite)


def _train(cfg: dict, progress: bool, resume: bool, overwrite: bool) -> dict:
    kind = cfg["model"]
    model = kinds.create(kind)
    if not model.learned:
        if cfg.get("init_from") or cfg.get("momentum") is not None:  # it would train afresh, not fine-tune
            raise UsageError(f"{cfg.get('init_from') or kind}: a {kind} model has no net to fine-tune (fine-tune a "
                             f"{kinds.spoken(kinds.learned())} model)")
        if resume:  # it would replace the model of the run it was to continue
            raise UsageError(f"--resume: a {kind} model trains in one step and has no checkpoints to continue; give "
                             "another --out, or --overwrite without --resume to train it afresh into this one")
        out = run_dir(cfg["out"])
        # an earlier net run's checkpoints (and config.yaml) beside the baseline's model would be resumed over it
        check_fresh_start(out, overwrite, resumable=False, resume=False)
        summary = train_baseline(cfg)
        for old in old_checkpoints(out):  # --overwrite (checked above): the earlier run's, not to be resumed
            old.unlink(missing_ok=True)
        write_atomically(out / "config.yaml", yaml.safe_dump(recorded_config(cfg), sort_keys=False).encode())
        return summary
    if cfg.get("momentum") is not None and not cfg.get("init_from"):
        # the online net would restart every round from a momentum copy of the random initial weights, which moves
        # 1 - momentum of the way a round: the run never gets far from its start
        raise UsageError(f"momentum {cfg['momentum']}: the Siamese momentum rule fine-tunes a trained model; give "
                         "init_from (or `costlab finetune --from MODEL --momentum`), or leave momentum out to train "
                         "afresh")
    out = run_dir(cfg["out"])
    if model.multi_head and "mtl_rows" not in cfg["data_options"]:  # recorded in config.yaml, as a resume needs it
        cfg["data_options"]["mtl_rows"] = _recorded_rows(out) if resume else "union"
    last = out / "checkpoints" / "last.ckpt"
    resumed = read_checkpoint(last) if resume and last.exists() else None
    if resumed is not None:  # another kind is refused before its (maybe slow) featurizing
        _check_resumable(resumed, kind, None, None, resumed["platforms"])
        _check_resumed_options(out, cfg)
        done, epochs = resumed.get("epochs"), int(cfg["trainer"]["max_epochs"])
        if done is not None and epochs < done:  # Lightning's own refusal is a traceback, after config.yaml is rewritten
            raise UsageError(f"--resume: {last} has trained {done} epochs already; give --epochs {done + 1} or more "
                             f"to train on (trainer.max_epochs is {epochs})")
        finished = _finished_summary(out, done) if done is not None and epochs == done else None
        if finished is not None:
            # the run is finished: training on would be no step, and would replace its summary with one of none
            print(f"costlab: note: {out} has trained its {done} epochs already; nothing to do (--epochs N to train "
                  "more)", file=sys.stderr)
            return finished
    else:
        check_fresh_start(out, overwrite, resumable=not cfg.get("init_from"), resume=resume)
    L.seed_everything(int(cfg["seed"]), workers=True, verbose=False)
    try:
        dopts = check_fields(DataConfig, dict(cfg["data_options"]), "data_options",
                             reserved=("data", "featurizer", "platforms", "split", "seed", "hardware", "multi_head"))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    keep = dopts.get("keep_fraction") or {}
    if cfg["platforms"]:  # checked before featurizing where the platforms are known already
        _check_keep_fraction(keep, list(dict.fromkeys([*cfg["platforms"], *(dopts.get("row_platforms") or [])])))
    if model.multi_head and len(set(cfg["platforms"])) < len(cfg["platforms"]):  # a second head of a platform is
        raise UsageError(f"platforms {cfg['platforms']}: each platform once (one head each)")  # never scored
    source = source_meta(cfg["init_from"]) if cfg.get("init_from") else None
    if source:  # before featurizing: a net the source's weights cannot fill (a PaCM model, the default tlp), heads
        _check_source_kind(cfg["init_from"], source["kind"], kind)  # of other platforms (where they are given)
        _check_source_heads(source, model, list(cfg["platforms"]))
    if not source:  # before featurizing; fine-tuning keeps the source's net
        _check_net_sizes(kind, cfg["net"])
    elif cfg["net"]:  # they would be recorded in config.yaml and never used
        pretrained = _with_defaults(kind, source["net"])
        changed = [f"net.{k}={v!r} (the model's: {pretrained.get(k)!r})" for k, v in cfg["net"].items()
                   if pretrained.get(k) != v]
        if changed:
            raise UsageError(f"{cfg['init_from']}: fine-tuning keeps the pretrained model's net, so "
                             f"{', '.join(changed)} cannot apply; leave the net options out")
    hardware_dim = (source["net"] if source else cfg["net"]).get("hardware_dim") or 0
    if hardware_dim and model.multi_head:
        # its rows are the first platform's records, each carrying that platform's vector whichever head it labels:
        # every other head would learn with the first platform's vector and be scored with its own
        raise UsageError(f"net.hardware_dim: a {kind} model has a head per platform, and its training feeds every head "
                         "the first platform's hardware vector; train a tlp model on several CPUs' records "
                         "(data_options.row_platforms) for a hardware input")
    if hardware_dim not in (0, hardware_vector.DIM):
        raise UsageError(f"net.hardware_dim must be 0 (no hardware input) or {hardware_vector.DIM} (the hardware "
                         f"vector: {', '.join(hardware_vector.FIELDS)}), not {hardware_dim!r}")
    dm = CostDataModule(DataConfig(data=str(cfg["data"]), featurizer=model.featurizer,
                                   platforms=list(cfg["platforms"]), split=cfg["split"], seed=int(cfg["seed"]),
                                   hardware=bool(hardware_dim), multi_head=model.multi_head, **dopts),
                        featurizer=source and source["featurizer"],
                        feature_dir=out / FEATURES)
    dm.setup()
    cfg["platforms"] = list(dm.config.platforms)
    if source:
        _check_source_heads(source, model, cfg["platforms"])
    _check_keep_fraction(keep, list(dict.fromkeys(cfg["platforms"] + list(dm.rows_of))))
    _check_readable(cfg["data"], dm)
    if model.multi_head and len(cfg["platforms"]) < 2:
        raise UsageError(f"model {kind!r} needs at least two platforms (platforms: [target, other, ...])")
    if model.multi_head:
        _check_heads(cfg["data"], dm)
    heads = len(cfg["platforms"]) if model.multi_head else 1
    if not model.multi_head:
        dm.labels.score = dm.labels.score[:, :1]
        dm.labels.latency = dm.labels.latency[:, :1]
    # fine-tuning keeps the source's net (and featurizer, vocabulary included) exactly
    net_config = dict(source["net"]) if source else net_config_for(kind, dm.featurizer, heads, **cfg["net"])
    if resumed is not None:
        _check_resumable(resumed, kind, net_config, dm.featurizer.to_json(), cfg["platforms"])
        digest = dm.split.digest if dm.split is not None else None
        if resumed.get("split_digest") is not None and resumed["split_digest"] != digest:
            # the same name, other records held out: the rest of the run would train on tasks (programs) the first
            # part held out, and the model would record the new split as the one it never saw the test part of
            raise UsageError(f"--resume: split {cfg['split']!r} of {cfg['data']} was replaced since {last} trained on "
                             f"it (it now holds out other records: {dm.split.describe() if dm.split else 'none'}); "
                             "train afresh with --overwrite (without --resume), or on the split it trained on")
        recorded_parts = resumed.get("parts_digest")
        if recorded_parts is not None and len(dm.unread_rows) and \
                recorded_parts == dm.parts_digest(np.union1d(dm.train_rows, dm.unread_rows)):
            # a run that trained on the records its featurizer cannot read (an earlier costlab's) goes on without them
            print(f"costlab: note: --resume: {last} trained on the {len(dm.unread_rows)} records without "
                  f"{dm.featurizer.name} features too; it goes on without them", file=sys.stderr)
        elif recorded_parts is not None and recorded_parts != dm.parts_digest():
            # records or tasks added to the dataset since: the validation part is drawn again among other tasks, so
            # the rest of the run would train on what validated its first part, and pick its best checkpoint by
            # scores of different validation sets
            raise UsageError(f"--resume: the records of {cfg['data']} that {last} trained and validated on changed "
                             "since (records or tasks added or removed); start a new run from it (--set init_from="
                             f"{last} --out NEW_DIR), or train afresh with --overwrite (without --resume)")
    if not source:  # a net shorter than the dataset's sequences fails only once a long one is trained on
        unfit = check_featurizer_fits(kind, net_config, dm.featurizer.to_json())
        if unfit:
            raise UsageError(f"net options: the dataset's features do not fit the net: {unfit}")
    try:
        module = CostModelModule(kind, net_config, dm.featurizer.to_json(), cfg["platforms"], loss=cfg["loss"],
                                 lr=float(cfg["lr"]), weight_decay=float(cfg["weight_decay"]),
                                 momentum=cfg["momentum"], momentum_every=int(cfg["momentum_every"]),
                                 lr_schedule=cfg["lr_schedule"], gain_scale=float(cfg["gain_scale"]),
                                 split_digest=dm.split.digest if dm.split is not None else None,
                                 parts_digest=dm.parts_digest())
    except (TypeError, ValueError, AssertionError, RuntimeError, IndexError) as exc:
        # net options of the wrong name, type or size: torch asserts (d_model not divisible by attention_heads),
        # refuses negative sizes, and a net of no layers fails on its first one
        given = " ".join(f"net.{k}={v!r}" for k, v in cfg["net"].items()) or "(the defaults)"
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UsageError(f"net options {given} do not build a {kind} net: {why}") from None
    if source:
        load_weights(module, source["path"])
    if len(dm.train_dataloader()) == 0:  # a run of no training step would write an untrained net as a model
        raise UsageError(f"no training batches: {len(dm.train_rows)} labelled training records make no ranking "
                         f"list of two or more programs of one task (data_options.list_size "
                         f"{dm.config.list_size}, keep_fraction {keep or '{}'}); give more records or labels")
    # lists whose programs all failed (all labelled 0) have no pair to rank: LambdaRank's gradient is zero, and a
    # run of them alone wrote a net its weight decay alone had moved, as a model, and said nothing
    rows = dm.train_rows
    groups, counts = np.unique(dm.groups[rows], return_counts=True)
    ran = np.unique(dm.groups[rows][np.isfinite(dm.labels.latency[rows]).any(1)])
    if not np.isin(groups[counts >= 2], ran).any():
        raise UsageError(f"{cfg['data']}: nothing to learn: of its {len(rows)} labelled training records, none is of a "
                         "task with two or more labelled programs one of which ran (every program of the rest "
                         "failed: `costlab dataset info` counts the failures); measure again")

    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    has_val = len(dm.val_rows) > 0
    # two checkpoints: the best by validation top-1, and last.ckpt, rewritten at the end of every epoch (a
    # ModelCheckpoint's save_last rewrites it only when the monitored value improves, so --resume would go back
    # to the best epoch). No version counter: a file of the same name is this run's to replace, never a
    # "last-v1.ckpt" beside an earlier run's (a fresh run deletes those first, and only with --overwrite).
    ckpt = ModelCheckpoint(dirpath=out / "checkpoints", filename="best-{epoch}",
                           monitor="val_top1" if has_val else None, mode="max", enable_version_counter=False)
    latest = ModelCheckpoint(dirpath=out / "checkpoints", filename="last", monitor=None, save_top_k=1,
                             every_n_epochs=1, enable_version_counter=False)
    speed, interrupted = _Throughput(), _NoteInterrupt()
    # latest after ckpt: last.ckpt then records the best checkpoint's choice of this epoch too
    callbacks = [_StopOnDivergence(), ckpt, latest, speed, interrupted] + (
        [_MomentumRounds()] if cfg["momentum"] is not None else [])
    tcfg = dict(cfg["trainer"])
    if not has_val:
        tcfg["limit_val_batches"] = 0
    _quiet_lightning()
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    try:
        trainer = L.Trainer(default_root_dir=out, logger=[CSVLogger(out, name="logs"), TensorBoardLogger(out, name="tb")],
                            callbacks=callbacks, enable_progress_bar=progress, enable_model_summary=progress,
                            use_distributed_sampler=False, **tcfg)
    except (TypeError, ValueError, MisconfigurationException, ImportError) as exc:  # trainer options Lightning
        # refuses (an accelerator whose package is not installed among them)
        raise UsageError(f"trainer options: {str(exc).strip().splitlines()[0]}") from None
    batches = len(dm.train_dataloader())
    limit = trainer.limit_train_batches
    if isinstance(limit, float) and 0 < limit and int(batches * limit) == 0:  # Lightning's own refusal, a traceback
        # raised in the fit, after config.yaml was replaced and an --overwrite deleted the earlier run's checkpoints
        raise UsageError(f"trainer.limit_train_batches={limit} takes no batch of the {batches}: give at least "
                         f"{1 / batches:.3g} (or a number of batches); no model written")
    from lightning.pytorch.callbacks import Timer

    timers = [c for c in trainer.callbacks if isinstance(c, Timer)]
    if resumed is None and (trainer.max_steps == 0 or limit == 0 or trainer.max_epochs == 0
                            or any(t._duration is not None and t._duration <= 0 for t in timers)):
        # trainer options that train no step: refused before config.yaml is replaced and an --overwrite deletes the
        # earlier run's checkpoints (the check after the fit stays for what only the fit finds out)
        raise UsageError(f"no training step would run (trainer options {dict(cfg['trainer'])}); no model written")
    if batches < trainer.world_size:  # each process takes every world-th batch: some would take none
        raise UsageError(f"no training batches for {trainer.world_size - batches} of {trainer.world_size} processes: "
                         f"{len(dm.train_rows)} training records make {batches} batch(es) of "
                         f"{dm.config.lists_per_batch} ranking lists; give fewer devices or smaller batches "
                         "(data_options.lists_per_batch)")
    recorded = out / "config.yaml"
    # a resume whose budget turns out spent in the fit leaves the run as it was, its config.yaml too
    earlier_config = recorded.read_bytes() if resumed is not None and recorded.is_file() else None
    if trainer.is_global_zero:  # every check passed: the run's options (a refused run leaves the old ones)
        write_atomically(recorded, yaml.safe_dump(recorded_config(cfg), sort_keys=False).encode())
    if resumed is None and trainer.is_global_zero:
        for old in old_checkpoints(out):  # --overwrite (checked above): the earlier run's, not to be resumed
            old.unlink(missing_ok=True)
    speed.start()
    _fit(trainer, interrupted, module, dm, str(last) if resumed is not None else None)
    wall = speed.wall()  # with a resumed run's seconds before its checkpoint
    if resumed is None and speed.records == 0:  # trainer options that train no step would save an untrained net
        raise UsageError(f"no training step ran (trainer options {dict(cfg['trainer'])}); no model written")
    if resumed is not None and speed.records == getattr(speed, "restored", None):
        # a budget the run had spent already (trainer.max_steps, max_time): no step ran, and the model, summary and
        # config.yaml of the run stay as they were (rewritten, they counted one epoch fewer, or more epochs than ran)
        if earlier_config is not None and trainer.is_global_zero:
            write_atomically(recorded, earlier_config)
        earlier = _finished_summary(out, resumed["epochs"]) if (out / "summary.json").exists() else None
        limits = {k: v for k, v in cfg["trainer"].items() if k in ("max_steps", "max_time") and v not in (None, -1)}
        print(f"costlab: note: {out} trained no step more: its {limits or 'trainer limits'} are spent (--set "
              "trainer.max_steps=N / trainer.max_time=... to train on)", file=sys.stderr)
        if earlier is not None:
            return earlier

    best = ckpt.best_model_path or latest.best_model_path
    if best and has_val:
        load_weights(module, best)
    val = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val_")}
    summary = dict(model=kind, platforms=cfg["platforms"], row_platforms=dm.rows_of, train_records=len(dm.train_rows),
                   val_records=len(dm.val_rows), test_records=len(dm.test_rows), best_checkpoint=str(best),
                   best_val_top1=float(ckpt.best_model_score) if ckpt.best_model_score is not None else None,
                   last_val=val, records_seen=speed.records,
                   train_records_per_s=speed.records / speed.seconds if speed.seconds else None,
                   wall_seconds=wall, epochs=trainer.current_epoch)
    if resumed is not None and not resumed.get("counted", True):
        # a checkpoint of an older costlab keeps no counts of the epochs before it: the resumed part's alone would
        # read as the whole run's
        summary.update(records_seen=None, train_records_per_s=None, wall_seconds=None)
    if not trainer.is_global_zero:
        return summary  # under DDP the first process alone writes the model and the summary
    save_artifact(out / "model", module.core.state_dict(),
                  dict(kind=kind, net=net_config, featurizer=dm.featurizer.to_json(), platforms=cfg["platforms"],
                       training=summary, split=cfg["split"], split_digest=dm.split and dm.split.digest,
                       dataset=os.path.abspath(cfg["data"]), dataset_tasks=dm.dataset_tasks, dialects=dm.dialects,
                       targets=dm.targets,
                       **({"hardware": hardware_vector.describe()} if hardware_dim else {}),
                       **({"lineage": source["lineage"]} if source and source["lineage"] else {})))
    write_atomically(out / "summary.json", jsontext.dumps(summary, indent=2).encode())
    shutil.rmtree(out / FEATURES, ignore_errors=True)  # the training's own copy: as large as the features
    return summary
