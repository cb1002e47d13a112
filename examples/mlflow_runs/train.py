"""A plain training script that logs to MLflow the way people do, nothing of ablate in it: parameters once, a metric
per epoch, the seed as a parameter. `ablate import` then reads its experiment (docs/tutorials/existing-runs.md).

    export MLFLOW_TRACKING_URI=sqlite:///mlflow.db
    python examples/mlflow_runs/train.py --lr 0.003 --depth 2 --seed 0
    ablate import mlflow.db --experiment digits --seed seed --metric val_acc --ignore epochs
    ablate report digits
"""

from __future__ import annotations

import argparse

import mlflow
import torch
from sklearn.datasets import load_digits

try:
    import timm
except RuntimeError:  # this repository's CPU-only torch beside a CUDA torchvision (ablate/_tv_compat.py says why)
    import ablate._tv_compat  # noqa: F401

    import timm


def train(lr: float, depth: int, seed: int, epochs: int = 10, experiment: str = "digits") -> float:
    """Train a tiny timm ViT on scikit-learn's 8x8 digits and log it to MLflow; the last validation accuracy."""
    torch.manual_seed(seed)
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32).view(-1, 1, 8, 8) / 16
    y = torch.tensor(y)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    train_idx, val_idx = order[:1400], order[1400:]
    model = timm.create_model("vit_tiny_patch16_224", img_size=8, patch_size=2, in_chans=1, num_classes=10,
                              depth=depth, embed_dim=32, num_heads=2)  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    mlflow.set_experiment(experiment)
    with mlflow.start_run():
        mlflow.log_params({"lr": lr, "depth": depth, "seed": seed, "epochs": epochs})
        for epoch in range(1, epochs + 1):
            model.train()
            for batch in train_idx.split(32):
                loss = torch.nn.functional.cross_entropy(model(x[batch]), y[batch])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            model.eval()
            with torch.no_grad():
                accuracy = (model(x[val_idx]).argmax(1) == y[val_idx]).float().mean().item()
            mlflow.log_metric("train_loss", loss.item(), step=epoch)
            mlflow.log_metric("val_acc", accuracy, step=epoch)
    return accuracy


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    print(train(args.lr, args.depth, args.seed, args.epochs))
