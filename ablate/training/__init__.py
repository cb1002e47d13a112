"""One trial: the training loop, data parallelism, the messages it sends, checkpoints and where they are stored,
tasks."""
