"""The course's data sets and the helpers that milestones, tests and benchmarks share.

Tiny Shakespeare (the `tinygpt` milestone, the GPT benchmarks) and the 8x8 digits (the
`mlp_digits` and `cnn_digits` milestones, the convolution benchmark) ship with the
milestones in `milestones/data` (see its README.md); in a student build (`tito dist
student`) that folder travels inside tito, and `MILESTONES_DIR` finds it either way.

    from tito.course.datasets import load_text, encode_splits, get_batch, tiled_windows, split_loss

Everything here is NumPy only: the student's `tinytorch` is passed in where it is needed
(`split_loss(model, tt, ...)`), so this module imports no framework and works before the
student has written one.
"""

from __future__ import annotations

import numpy as np

from .registry import DATA_DIR

DATA = DATA_DIR
SHAKESPEARE = DATA / "tinyshakespeare.txt"
DIGITS = DATA / "digits.npz"


# ---- Tiny Shakespeare ---------------------------------------------------------------------
def load_text() -> str:
    """The 1.1 million characters of Tiny Shakespeare."""
    return SHAKESPEARE.read_text(encoding="utf-8")


def char_ids(text: str):
    """(ids int64, chars): each character's index in the sorted vocabulary, the ids module 10's
    CharTokenizer.train(text) gives, computed without a tokenizer (for PyTorch-only code)."""
    chars = sorted(set(text))
    lookup = np.zeros(max(map(ord, chars)) + 1, dtype=np.int64)
    lookup[[ord(c) for c in chars]] = np.arange(len(chars))
    return lookup[np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)], chars


def encode_splits(text: str, tokenizer, train_fraction: float = 0.9):
    """(train ids, validation ids): the first 90% of the encoded text trains, the rest
    validates (nanoGPT's split of shakespeare_char)."""
    data = np.asarray(tokenizer.encode(text), dtype=np.int64)
    n = int(train_fraction * len(data))
    return data[:n], data[n:]


def get_batch(data, batch_size: int, block_size: int, rng):
    """(x, y) of shape (batch_size, block_size): random windows and the same shifted by one."""
    ix = rng.integers(0, len(data) - block_size, size=batch_size)
    window = data[ix[:, None] + np.arange(block_size + 1)]  # (B, T + 1)
    return window[:, :-1], window[:, 1:]


def tiled_windows(data, block_size: int, count: int | None = None):
    """(x, y) for `count` windows of block_size spread evenly over `data` (default: tile it all).

    With count=None the windows tile the split end to end, so every character but the
    last is predicted exactly once: the split's loss with no sampling noise at all.
    """
    fits = (len(data) - 1) // block_size
    if count is None or count >= fits:
        starts = np.arange(fits) * block_size
    else:
        starts = np.linspace(0, len(data) - block_size - 1, count).astype(np.int64)
    window = data[starts[:, None] + np.arange(block_size + 1)]  # (N, T + 1)
    return window[:, :-1], window[:, 1:]


def split_loss(model, tt, x, y, batch_size: int = 64) -> float:
    """Mean loss per character of `model` over the windows (x, y), in eval mode, no graph.

    `model(x, y)` returns (logits, loss) as module 13's GPT does; `tt` is the tinytorch
    package the model was built with (for its no_grad)."""
    model.eval()
    total = 0.0
    with tt.no_grad():
        for i in range(0, len(x), batch_size):
            xb, yb = x[i:i + batch_size], y[i:i + batch_size]
            total += model(xb, yb)[1].item() * len(xb)
    model.train()
    return total / len(x)


# ---- the 8x8 digits -----------------------------------------------------------------------
def load_digits(seed: int, test_fraction: float = 0.2):
    """(x_train, y_train, x_test, y_test): the 8x8 digits as rows of 64 features in [0, 1]
    (float32) and int64 labels, split at random (seeded) into training and held-out sets."""
    with np.load(DIGITS, allow_pickle=False) as data:
        images, labels = data["images"], data["labels"]
    x = (images.reshape(len(images), -1) / 16.0).astype(np.float32)
    y = labels.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(round(len(x) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]
