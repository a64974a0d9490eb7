"""Training and fine-tuning entry points: a config in, a run directory out.

    RUN_DIR/config.yaml          the resolved configuration
    RUN_DIR/checkpoints/         Lightning checkpoints (best by validation top-1, and last.ckpt to resume)
    RUN_DIR/logs/, RUN_DIR/tb/   CSV and TensorBoard logs
    RUN_DIR/model/               the best net as config.json + model.safetensors (no pickle)
    RUN_DIR/summary.json         best validation metrics, records/s, wall time
"""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path

import lightning as L
import torch
import yaml

from costlab.common import jsontext
from costlab.common.checks import check_fields
from costlab.common.errors import UsageError
from costlab.common.files import write_atomically
from costlab.costmodels.artifact import load_state, read_artifact, read_config, save_artifact
from costlab.train.baselines import train_baseline
from costlab.train.data import CostDataModule, DataConfig
from costlab.train.evaluate import lineage_of
from costlab.train.module import CostModelModule
from costlab.train.predict import read_checkpoint
from costlab.train.run_dir import run_dir
from costlab.costmodels import kinds
from costlab.costmodels.nets import net_config_for
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


class _Throughput(L.Callback):
    """Counts training records and time, for records/s."""

    def __init__(self):
        self.records, self.seconds = 0, 0.0

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


def source_meta(source) -> dict:
    """kind, net config and featurizer of a trained model (run dir, model dir or archive, checkpoint, or a
    shipped model's name: the names ``costlab models`` lists, resolved as every other command resolves them)."""
    source = resolve(source)
    if source.is_dir() or source.suffix != ".ckpt":
        c = read_config(source)  # refuses anything that is not a model directory or archive, in one line
        return dict(path=source, kind=c["kind"], net=c["net"], featurizer=c["featurizer"], lineage=lineage_of(c))
    ckpt = read_checkpoint(source)
    return dict(path=source, kind=ckpt["kind"], net=ckpt["net_config"], featurizer=ckpt["featurizer"], lineage=[])


def train(cfg: dict, progress: bool = True, resume: bool = False) -> dict:
    kind = cfg["model"]
    model = kinds.create(kind)
    if not model.learned:
        return train_baseline(cfg)
    out = run_dir(cfg["out"])
    L.seed_everything(int(cfg["seed"]), workers=True, verbose=False)
    try:
        dopts = check_fields(DataConfig, dict(cfg["data_options"]), "data_options",
                             reserved=("data", "featurizer", "platforms", "split", "seed", "hardware"))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    source = source_meta(cfg["init_from"]) if cfg.get("init_from") else None
    hardware_dim = (source["net"] if source else cfg["net"]).get("hardware_dim") or 0
    if hardware_dim not in (0, hardware_vector.DIM):
        raise UsageError(f"net.hardware_dim must be 0 (no hardware input) or {hardware_vector.DIM} (the hardware "
                         f"vector: {', '.join(hardware_vector.FIELDS)}), not {hardware_dim!r}")
    dm = CostDataModule(DataConfig(data=str(cfg["data"]), featurizer=model.featurizer,
                                   platforms=list(cfg["platforms"]), split=cfg["split"], seed=int(cfg["seed"]),
                                   hardware=bool(hardware_dim), **dopts), featurizer=source and source["featurizer"])
    dm.setup()
    cfg["platforms"] = list(dm.config.platforms)
    if model.multi_head and len(cfg["platforms"]) < 2:
        raise UsageError(f"model {kind!r} needs at least two platforms (platforms: [target, other, ...])")
    heads = len(cfg["platforms"]) if model.multi_head else 1
    if not model.multi_head:
        dm.labels.score = dm.labels.score[:, :1]
        dm.labels.latency = dm.labels.latency[:, :1]
    # fine-tuning keeps the source's net (and featurizer, vocabulary included) exactly
    net_config = dict(source["net"]) if source else net_config_for(kind, dm.featurizer, heads, **cfg["net"])
    try:
        module = CostModelModule(kind, net_config, dm.featurizer.to_json(), cfg["platforms"], loss=cfg["loss"],
                                 lr=float(cfg["lr"]), weight_decay=float(cfg["weight_decay"]),
                                 momentum=cfg["momentum"], momentum_every=int(cfg["momentum_every"]),
                                 lr_schedule=cfg["lr_schedule"], gain_scale=float(cfg["gain_scale"]))
    except (TypeError, ValueError) as exc:  # net options of the wrong name, type or size
        raise UsageError(f"net options: {exc}") from None
    if source:
        load_weights(module, source["path"])
    write_atomically(out / "config.yaml", yaml.safe_dump(cfg, sort_keys=False).encode())

    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    has_val = len(dm.val_rows) > 0
    ckpt = ModelCheckpoint(dirpath=out / "checkpoints", filename="best-{epoch}",
                           monitor="val_top1" if has_val else None, mode="max", save_last=True)
    speed = _Throughput()
    callbacks = [_StopOnDivergence(), ckpt, speed] + ([_MomentumRounds()] if cfg["momentum"] is not None else [])
    tcfg = dict(cfg["trainer"])
    if not has_val:
        tcfg["limit_val_batches"] = 0
    _quiet_lightning()
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    try:
        trainer = L.Trainer(default_root_dir=out, logger=[CSVLogger(out, name="logs"), TensorBoardLogger(out, name="tb")],
                            callbacks=callbacks, enable_progress_bar=progress, enable_model_summary=progress,
                            use_distributed_sampler=False, **tcfg)
    except (TypeError, ValueError, MisconfigurationException) as exc:  # trainer options Lightning refuses
        raise UsageError(f"trainer options: {str(exc).strip().splitlines()[0]}") from None
    last = out / "checkpoints" / "last.ckpt"
    t0 = time.perf_counter()
    trainer.fit(module, datamodule=dm, ckpt_path=str(last) if resume and last.exists() else None)
    wall = time.perf_counter() - t0

    best = ckpt.best_model_path or ckpt.last_model_path
    if best and has_val:
        load_weights(module, best)
    val = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val_")}
    summary = dict(model=kind, platforms=cfg["platforms"], row_platforms=dm.rows_of, train_records=len(dm.train_rows),
                   val_records=len(dm.val_rows), test_records=len(dm.test_rows), best_checkpoint=str(best),
                   best_val_top1=float(ckpt.best_model_score) if ckpt.best_model_score is not None else None,
                   last_val=val, records_seen=speed.records,
                   train_records_per_s=speed.records / speed.seconds if speed.seconds else None,
                   wall_seconds=wall, epochs=trainer.current_epoch)
    if not trainer.is_global_zero:
        return summary  # under DDP the first process alone writes the model and the summary
    save_artifact(out / "model", module.core.state_dict(),
                  dict(kind=kind, net=net_config, featurizer=dm.featurizer.to_json(), platforms=cfg["platforms"],
                       training=summary, split=cfg["split"], split_digest=dm.split and dm.split.digest,
                       dataset=str(cfg["data"]), dialects=dm.dialects, targets=dm.targets,
                       **({"hardware": hardware_vector.describe()} if hardware_dim else {}),
                       **({"lineage": source["lineage"]} if source and source["lineage"] else {})))
    write_atomically(out / "summary.json", jsontext.dumps(summary, indent=2).encode())
    return summary
