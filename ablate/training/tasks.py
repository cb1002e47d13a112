"""Tasks: how a batch becomes a loss and how a split is scored (classify images, MIL bags).

A task is registered (`ablate.registry.TASKS`) under the name `config.task` takes; datasets and
backbones declare which task they serve, and validation checks the three agree. Validation imports this module,
so torch is imported by the methods that run in a trial, never at import.
"""

from __future__ import annotations

from collections.abc import Sized
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np

from ablate.registry import register_task

if TYPE_CHECKING:
    import torch
    from torch import Tensor
    from torch.utils.data import DataLoader

    from ablate.config import TrialConfig
    from ablate.data import Splits
    from ablate.training.parallel import Step


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels, scores)) if len(np.unique(labels)) == 2 else float("nan")


class Task:
    """How a batch becomes a loss and how a split is scored; one registered subclass per `config.task`."""

    name: ClassVar[str]
    headline: ClassVar[str]
    """The score (higher is better) that chooses the best epoch on validation data (`train.select: best`)."""
    scores: ClassVar[tuple[str, ...]] = ()
    """The names `score` returns (what a `tune:` block may choose on, as val.<name>); empty: not declared, and
    any validation metric is taken."""

    @classmethod
    def default_metric(cls) -> str:
        """A sweep's metric when its file names none (plans and reports alike): the headline on the test split."""
        return f"test.{cls.headline}"

    @classmethod
    def results(cls) -> tuple[str, ...]:
        """The final results a trial records (`trial.run_trial`: the test split's scores), what a sweep's
        `metric:` may name; read at plan time, without torch. Empty: not declared, and any metric is taken."""
        return tuple(f"test.{name}" for name in cls.scores)

    def __init__(self, cfg: TrialConfig, data: Splits, device: torch.device) -> None:
        self.cfg, self.data, self.device = cfg, data, device

    def inputs(self, batch: Any) -> tuple[tuple[Tensor, ...], Tensor]:
        raise NotImplementedError

    def mix(self, x: tuple[Tensor, ...], y: Tensor) -> tuple[tuple[Tensor, ...], Tensor]:
        """Training-time batch augmentation (none by default)."""
        return x, y

    def loss(self, out: Tensor, target: Tensor) -> Tensor:
        raise NotImplementedError

    def score(self, outs: Tensor, targets: Tensor) -> dict[str, float]:
        raise NotImplementedError

    def example(self) -> tuple[Tensor, ...]:
        """One example (batch of 1) for FLOP counting."""
        batch = next(iter(self.loader(self.data.test, batch_size=1)))
        return self.inputs(batch)[0]

    def loader(self, ds: Any, batch_size: int | None = None) -> DataLoader[Any]:
        """Evaluation batches of `ds`, in order."""
        from torch.utils.data import DataLoader

        return DataLoader(
            ds,
            batch_size=batch_size or self.cfg.train.eval_batch_size,
            shuffle=False,
            generator=self._seeded(0),  # no draw from torch's global RNG
            collate_fn=self.data.collate,
            num_workers=self.cfg.data.workers,
            pin_memory=self.device.type == "cuda",
        )

    def train_steps(self, epoch: int, rank: int = 0) -> list[Step]:
        """The optimizer steps of a training epoch for worker `rank` (see `ablate.training.parallel`). The order depends
        only on (seed, epoch), so a resumed trial, and every worker, sees the same global batches."""
        import torch

        from ablate.training.parallel import steps

        n = len(cast(Sized, self.data.train))
        order = torch.randperm(n, generator=self._generator(epoch))
        if self.cfg.train.repeated_aug > 1:  # each example k times in a row, the epoch as long as before
            order = order.repeat_interleave(self.cfg.train.repeated_aug)[:n]
        return steps(n, self.cfg.batch_split(), rank, order.tolist())

    def micro_batches(self, plan: list[Step], epoch: int) -> DataLoader[Any]:
        """The non-empty micro-batches of `plan`, loaded in order."""
        from torch.utils.data import DataLoader

        return DataLoader(
            self.data.train,
            batch_sampler=[m for step in plan for m in step.micro if m],
            generator=self._seeded(epoch),  # loader workers' seeds
            collate_fn=self.data.collate,
            num_workers=self.cfg.data.workers,
            pin_memory=self.device.type == "cuda",  # page-locked batches: copies overlap the GPU's work
        )

    def _generator(self, epoch: int) -> torch.Generator:
        """The epoch's shuffle generator, after the draw a DataLoader makes for its workers' base seed first
        (so the order equals that of a shuffling DataLoader with this generator, as trials ran before)."""
        import torch

        gen = self._seeded(epoch)
        torch.empty((), dtype=torch.int64).random_(generator=gen)
        return gen

    def _seeded(self, epoch: int) -> torch.Generator:
        """A generator that depends only on (seed, epoch); taken modulo 2^64, what a generator's seed may be, so
        every seed a config allows (below 2^63) has one."""
        import torch

        return torch.Generator().manual_seed((self.cfg.seed * 100_003 + epoch) % 2**64)


@register_task
class Classify(Task):
    name = "classify"
    headline = "top1"
    scores = ("loss", "top1", "top5")

    def __init__(self, cfg: TrialConfig, data: Splits, device: torch.device) -> None:
        super().__init__(cfg, data, device)
        t = cfg.train
        self.mixup = None
        if t.mixup > 0 or t.cutmix > 0:
            from timm.data import Mixup

            self.mixup = Mixup(
                mixup_alpha=t.mixup,
                cutmix_alpha=t.cutmix,
                label_smoothing=t.label_smoothing,
                num_classes=data.num_classes,
            )

    def inputs(self, batch: Any) -> tuple[tuple[Tensor, ...], Tensor]:
        import torch

        x, y = batch
        x = x.to(self.device, non_blocking=True)
        if self.device.type == "cuda" and self.cfg.train.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return (x,), y.to(self.device, non_blocking=True)

    def mix(self, x: tuple[Tensor, ...], y: Tensor) -> tuple[tuple[Tensor, ...], Tensor]:
        """Training-time batch augmentation: random shift, then mixup/cutmix."""
        images = shift_images(x[0], self.cfg.train.shift) if self.cfg.train.shift else x[0]
        if self.mixup is None or len(y) % 2:  # timm's mixup needs an even batch
            return (images,), y
        mixed, target = self.mixup(images, y)
        return (mixed,), target

    def loss(self, out: Tensor, target: Tensor) -> Tensor:
        import torch
        import torch.nn.functional as F

        if target.ndim == 2:  # soft targets from mixup/cutmix (label smoothing folded in)
            return torch.sum(-target * F.log_softmax(out, dim=-1), dim=-1).mean()
        return F.cross_entropy(out, target, label_smoothing=self.cfg.train.label_smoothing)

    def score(self, outs: Tensor, targets: Tensor) -> dict[str, float]:
        import torch.nn.functional as F

        k = min(5, outs.shape[1])
        topk = outs.topk(k, dim=1).indices
        hit = topk == targets[:, None]
        return {
            "loss": F.cross_entropy(outs, targets).item(),
            "top1": hit[:, 0].float().mean().item() * 100,
            "top5": hit.any(1).float().mean().item() * 100,
        }


def shift_images(x: Tensor, shift: int) -> Tensor:
    """Translate each image by its own random offset in [-shift, shift]^2, filling with zeros.

    One gather over a zero-padded batch: cheap enough to run on the batch in the loop, so in-memory
    datasets (mnist5k, digits) get augmentation without a per-item transform.
    """
    import torch
    import torch.nn.functional as F

    b, _, h, w = x.shape
    padded = F.pad(x, (shift, shift, shift, shift))
    dy, dx = torch.randint(0, 2 * shift + 1, (2, b), device=x.device)
    rows = (dy[:, None] + torch.arange(h, device=x.device))[:, None, :, None]
    cols = (dx[:, None] + torch.arange(w, device=x.device))[:, None, None, :]
    idx = torch.arange(b, device=x.device)[:, None, None, None]
    chan = torch.arange(x.shape[1], device=x.device)[None, :, None, None]
    return padded[idx, chan, rows, cols]


@register_task
class MIL(Task):
    name = "mil"
    headline = "auc"
    scores = ("loss", "auc", "acc")

    def inputs(self, batch: Any) -> tuple[tuple[Tensor, ...], Tensor]:
        x, mask, y = batch
        return (x.to(self.device), mask.to(self.device)), y.to(self.device).float()

    def loss(self, out: Tensor, target: Tensor) -> Tensor:
        import torch.nn.functional as F

        return F.binary_cross_entropy_with_logits(out.reshape(-1), target)

    def score(self, outs: Tensor, targets: Tensor) -> dict[str, float]:
        import torch.nn.functional as F

        outs = outs.reshape(-1)
        return {
            "loss": F.binary_cross_entropy_with_logits(outs, targets).item(),
            "auc": auc(outs.numpy(), targets.numpy()),
            "acc": ((outs > 0).float() == targets).float().mean().item() * 100,
        }
