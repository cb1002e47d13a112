"""A plugin file for tests that assert on scores: the task `scripted` trains a real network on a tiny set of noise
images, but scores each split by the script below, so what a test asserts follows from the script, never from
how training went. Load it as a file plugin (`plugins: [<this path>]` in a sweep, or `Plugins.from_list`), never
by import: the suite's conftest then forgets its components after the test.

Epoch e's validation top1 is `VAL[e - 1]` and its test top1 `TEST[e - 1]`; loss is 100 minus top1, top5 is 100.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import TensorDataset

from ablate.components import Dataset
from ablate.config import TrialConfig
from ablate.data import Splits
from ablate.nn.backbones.vit import ViT
from ablate.registry import register_backbone, register_dataset, register_task
from ablate.training.tasks import Classify

#: Validation top1 by epoch: the best is epoch 2, tied with epoch 3 (the earliest wins), and neither is the last.
VAL = (30.0, 70.0, 70.0, 50.0)
#: Test top1 by epoch: rising, so the last epoch has the best test score and the best validation epoch does not.
TEST = (11.0, 22.0, 33.0, 44.0)
CLASSES = 10


class Noise(Dataset):
    """Seeded noise images, 8 x 8, one channel, labels cycling through the classes."""

    name = "noise"
    task = "scripted"

    def dims(self, cfg: TrialConfig) -> tuple[int, int]:
        return 1, CLASSES

    def build(self, cfg: TrialConfig) -> Splits:
        g = torch.Generator().manual_seed(cfg.data.split_seed)

        def part(n: int) -> TensorDataset:
            return TensorDataset(torch.randn(n, 1, 8, 8, generator=g), torch.arange(n) % CLASSES)

        return Splits(part(40), part(20), part(20), num_classes=CLASSES, in_chans=1)


class ScriptedViT(ViT):
    """The ViT, serving the scripted task."""

    name = "scripted-vit"
    task = "scripted"


@register_task
class Scripted(Classify):
    """Classify, scored by the script: the epoch is the one `micro_batches` last trained, the split the one
    `loader` last read."""

    name = "scripted"
    scores = ("loss", "top1", "top5")
    epoch = 0
    split = ""

    def micro_batches(self, plan: list[Any], epoch: int) -> Any:
        self.epoch = epoch + 1
        return super().micro_batches(plan, epoch)

    def loader(self, ds: Any, batch_size: int | None = None) -> Any:
        self.split = "val" if ds is self.data.val else "test"
        return super().loader(ds, batch_size)

    def score(self, outs: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        top1 = (VAL if self.split == "val" else TEST)[self.epoch - 1]
        return {"loss": 100.0 - top1, "top1": top1, "top5": 100.0}


register_dataset(Noise())
register_backbone(ScriptedViT())
