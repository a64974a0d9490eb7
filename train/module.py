"""The LightningModule of costlab's learned cost models: net, loss and metrics in one place.

One module serves every net kind: ``nets.build_net`` makes the net from the featurizer it is fed by, and
``nets.net_inputs`` picks its inputs from a batch. Several platforms give several heads (MTL-TLP); each
head's loss only sees the records labelled on its platform, and the losses add up. With
``momentum`` set, the net is wrapped in the Siamese momentum copy (MoA) for fine-tuning.
"""

from __future__ import annotations

import lightning as L
import numpy as np
import torch

from costlab.costmodels import metrics
from costlab.costmodels.losses import group_lists, lambdarank_loss, mse_loss
from costlab.costmodels.momentum import MomentumTransfer
from costlab.costmodels.nets import build_net, net_inputs


def net_state_from_checkpoint(ckpt: dict) -> dict:
    """The weights of the plain net in a CostModelModule checkpoint: those under ``net.``, and of a net
    trained with momentum transfer its online copy (the one that predicts)."""
    state = {k[len("net."):]: v for k, v in ckpt["state_dict"].items() if k.startswith("net.")}
    if any(k.startswith("online.") for k in state):
        state = {k[len("online."):]: v for k, v in state.items() if k.startswith("online.")}
    return state


class CostModelModule(L.LightningModule):
    def __init__(self, kind: str, net_config: dict, featurizer: dict, platforms: list, loss: str = "lambdarank",
                 lr: float = 7e-4, weight_decay: float = 1e-6, momentum: float | None = None,
                 momentum_every: int = 1, lr_schedule: str = "constant", gain_scale: float = 1.0,
                 split_digest: str | None = None, parts_digest: str | None = None):
        super().__init__()
        self.save_hyperparameters()
        net = build_net(kind, net_config)
        self.net = MomentumTransfer(net, momentum, momentum_every) if momentum is not None else net
        self._val: list = []

    @property
    def core(self) -> torch.nn.Module:
        return self.net.online if isinstance(self.net, MomentumTransfer) else self.net

    def forward(self, batch: dict) -> torch.Tensor:
        out = self.net(*net_inputs(self.hparams.kind, batch))
        return out[:, None] if out.dim() == 1 else out

    def _loss(self, pred: torch.Tensor, batch: dict) -> torch.Tensor:
        score, lists = batch["score"], batch["list_id"]
        # a batch where no head has two labelled records still gives a loss of the graph (0): a constant would stop
        # the run at backward ("does not require grad")
        total = (pred * 0).sum()
        for h in range(min(pred.shape[1], score.shape[1])):
            has = torch.isfinite(score[:, h])
            if int(has.sum()) < 2:
                continue
            if self.hparams.loss == "mse":
                total = total + mse_loss(pred[has, h], score[has, h])
            else:
                p, y, m = group_lists(pred[has, h], score[has, h], lists[has])
                total = total + lambdarank_loss(p, y, m, gain_scale=self.hparams.get("gain_scale", 1.0))
        return total

    def training_step(self, batch, batch_idx):
        loss = self._loss(self(batch), batch)
        self.log("train_loss", loss, prog_bar=True, batch_size=len(batch["row"]))
        return loss

    def validation_step(self, batch, batch_idx):
        pred = self(batch)
        self.log("val_loss", self._loss(pred, batch), prog_bar=True, batch_size=len(batch["row"]))
        self._val.append((batch["task"].cpu().numpy(), pred[:, 0].detach().cpu().numpy(),
                          batch["latency"][:, 0].cpu().numpy(), batch["score"][:, 0].cpu().numpy()))

    def on_validation_epoch_end(self):
        if not self._val:
            return
        task, pred, lat, score = (np.concatenate(x) for x in zip(*self._val))
        self._val.clear()
        has = np.isfinite(score)
        if has.sum() < 2:
            return
        s = metrics.summary(task[has], pred[has], lat[has], score[has])
        self.log_dict({"val_top1": s["top1"], "val_top5": s["top5"], "val_pairwise": s["pairwise"]}, prog_bar=True)

    def configure_optimizers(self):
        params = [p for p in self.parameters() if p.requires_grad]
        opt = torch.optim.Adam(params, lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        if self.hparams.get("lr_schedule", "constant") == "constant":
            return opt
        # cosine decay to 1% of lr over the run, stepped per epoch
        epochs = max(1, int(self.trainer.max_epochs or 1))
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs, eta_min=0.01 * self.hparams.lr)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}
