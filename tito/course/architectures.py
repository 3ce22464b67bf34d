"""The milestones' digit models, built from a namespace with PyTorch's layer names.

`lenet(tinytorch.nn)` is the `cnn_digits` milestone's CNN and `lenet(torch.nn)` the same
network in PyTorch, so the convolution benchmark and the tests train exactly the milestone's
model in both frameworks; `digits_mlp` is the `mlp_digits` milestone's network, which
`cnn_digits` counts parameters and FLOPs against. Nothing here imports a framework.
"""

from __future__ import annotations


def lenet(nn, dropout=0.3):
    """The milestone's CNN from a namespace with PyTorch's layer names: tinytorch.nn or torch.nn."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),   # (N, 16, 4, 4)
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # (N, 32, 2, 2)
        nn.Flatten(), nn.Dropout(dropout),                            # (N, 128)
        nn.Linear(32 * 2 * 2, 64), nn.ReLU(), nn.Linear(64, 10),
    )


def digits_mlp(nn):
    """The MLP of `mlp_digits` (64 -> 128 -> 64 -> 10), for the parameter and FLOP counts."""
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                         nn.Linear(64, 10))
