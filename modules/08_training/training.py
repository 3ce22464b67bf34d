# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Module 08: Training
#
# ## Overview
#
# You now have every piece of learning: a model (module 03), a loss (04), batches of data
# (05), gradients (06) and an optimizer (07). This module puts them in a loop, and then
# does the things that separate a training run you can trust from one that merely
# happened to work: a learning rate that changes as training goes, evaluation on data the
# model never trained on, checkpoints that are safe to open and survive a crash in the
# middle of saving, a run that stops at the first `nan` and says which step, and a
# stopped run that resumes **exactly** where it was, down to the last bit of every loss.
#
# The loop itself is short. Most of this module is about state: what a training run is
# made of, so that it can be saved, restored and reproduced. That is the difference
# between "it trained once on my laptop" and a run that survives a shared machine.
#
# **In numbers.** A checkpoint that can resume a run holds more than the weights: with Adam,
# the weights and both moments ($3\times$ the model's size), plus the step, the schedule's
# position, the loader's epoch and the random generators' states, a few hundred bytes that
# decide whether the resumed losses match bit for bit.
#
# ## Learning objectives
#
# - Write warm-up + cosine and step-decay learning-rate schedules as functions of the step,
#   and explain why both ends of training want a small learning rate.
# - Save a checkpoint without pickle, as one `.npz` file written atomically, and load it
#   with errors that say what is wrong instead of a zip-file traceback.
# - List everything a run's state contains (weights, optimizer buffers, step, position in
#   the data, random-generator state) and show that restoring all of it reproduces an
#   uninterrupted run bit for bit.
# - Evaluate under `no_grad` in evaluation mode, and put the model back in training mode.
# - Detect a diverging run at the step where it happens.
# - Measure where the time of a training step goes: forward, backward, optimizer.
# - Read and write safetensors from its specification, memory-mapped, refusing every
#   corrupt file before it reads a byte out of bounds.
#
# ## What you build
#
# - Schedules: `CosineWarmup(max_lr, min_lr, warmup_steps, total_steps)` and
#   `StepDecay(lr, step_size, gamma)`, called as `schedule(step) -> lr`; `set_lr`.
# - Checkpoints: `save_checkpoint(path, model, optimizer=None, step=0, extra=None)`,
#   `load_checkpoint(path, model, optimizer=None) -> (step, extra)`, `CheckpointError`.
# - Evaluation: `accuracy(logits, targets)`, `evaluate(model, loss_fn, loader, metric=None)`.
# - Training: `train_step`, `batches_from`, `TrainingError`, and
#   `train(model, loss_fn, optimizer, train_loader, steps=... or epochs=..., ...)`, which
#   returns a `History` and shows a progress bar.
# - Safetensors, the format open models are shared in: `save_safetensors(path, tensors,
#   metadata=None)`, `read_safetensors_header(path)`, `load_safetensors(path)` (memory-mapped,
#   read-only views), `load_safetensors_folder(path)` (sharded checkpoints), `SafetensorsError`.
#
# ## What you are not building yet
#
# - **Mixed precision, gradient accumulation, distributed data parallel.** One process,
#   float32, one batch per step.
# - **Early stopping and hyperparameter search.** The history you return is what they read.
# - **Experiment tracking.** `train(..., log=fn)` hands every record to a function of
#   yours; sending it to a dashboard is one line there.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| default_exp core.training
#| export
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

from tinytorch.core.autograd import no_grad
from tinytorch.core.optimizers import clip_grad_norm_
from tinytorch.core.tensor import Tensor, default_generator

# %% nbgrader={"grade": false, "grade_id": "lesson-imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
# For this lesson's tests and examples only (not exported): the pieces of modules 01-07.
from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Dropout, Linear, Module, Parameter, Sequential
from tinytorch.core.losses import cross_entropy, mse_loss
from tinytorch.core.optimizers import SGD, Adam, AdamW
from tinytorch.core.tensor import expect_error, manual_seed  # expect_error: module 01 gives it
from tinytorch.data.loader import DataLoader, TensorDataset

# %% [markdown]
# ## Part 1: learning-rate schedules
#
# A fixed learning rate is a compromise between two phases of training that want opposite
# things.
#
# - **At the start**, the weights are random and the gradients large and erratic. Adam's
#   estimate `v` of the gradient's scale comes from only a few steps; one unlucky batch
#   can throw the weights far enough that training never recovers. So start small and
#   **warm up**: increase the learning rate linearly over the first few hundred steps.
# - **In the middle**, a large learning rate makes fast progress.
# - **At the end**, the noise of mini-batches keeps a large-step optimizer bouncing around
#   the bottom of the valley. Decaying the learning rate lets it settle, and the loss
#   usually drops visibly as it does.
#
# A **schedule** is a function from the step number (0, 1, 2, ...) to a learning rate.
# Because it depends on nothing but the step, a resumed run recomputes exactly the same
# learning rates: the schedule has no state to save.
#
# **Warm-up then cosine** (the schedule of GPT-2, LLaMA and nanoGPT). We follow nanoGPT's
# `get_lr` exactly, so its hyperparameters carry over unchanged:
#
# $$\text{lr}(s) = \begin{cases}
# \text{max\_lr} \cdot \dfrac{s + 1}{w + 1} & s < w \quad\text{(warm-up)}\\[1ex]
# \text{min\_lr} + \tfrac12 \left(1 + \cos\!\left(\pi \dfrac{s - w}{T - w}\right)\right)
# (\text{max\_lr} - \text{min\_lr}) & w \le s \le T\\[1ex]
# \text{min\_lr} & s > T
# \end{cases}$$
#
# with `w = warmup_steps`, `T = total_steps`. Two details of the convention: the warm-up
# rises from almost 0, not from 0 (step 0 uses `max_lr / (w + 1)`, so the first step does
# something), and it reaches `max_lr` exactly at step `w`, where the cosine starts. The
# cosine reaches `min_lr` at step `T` and stays there.
#
# With nanoGPT's Shakespeare settings (`max_lr = 1e-3`, `min_lr = 1e-4`, `w = 100`,
# `T = 2000`):
#
# | step | 0 | 50 | 99 | 100 | 1050 | 2000 | 5000 |
# |------|---|----|----|-----|------|------|------|
# | lr | 9.90e-6 | 5.05e-4 | 9.90e-4 | 1.00e-3 | 5.50e-4 | 1.00e-4 | 1.00e-4 |
#
# **Step decay** is the older schedule of image classifiers (ResNet: divide by 10 at
# epochs 30, 60 and 90): `lr(s) = lr * gamma ** (s // step_size)`.
#
# The training loop applies a schedule by setting `optimizer.lr` before every step
# (`set_lr`, given).

# %% nbgrader={"grade": false, "grade_id": "schedules", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class CosineWarmup:
    """Linear warm-up to max_lr over warmup_steps, cosine decay to min_lr at total_steps.

    The same convention as nanoGPT's get_lr: lr(s) = max_lr * (s + 1) / (warmup_steps + 1)
    for s < warmup_steps; min_lr for s > total_steps.

    >>> schedule = CosineWarmup(max_lr=1.0, min_lr=0.1, warmup_steps=4, total_steps=14)
    >>> [round(schedule(s), 3) for s in (0, 3, 4, 9, 14, 20)]
    [0.2, 0.8, 1.0, 0.55, 0.1, 0.1]
    """

    def __init__(self, max_lr, min_lr, warmup_steps, total_steps):
        if not 0 <= min_lr <= max_lr:
            raise ValueError(f"need 0 <= min_lr <= max_lr, got min_lr={min_lr}, max_lr={max_lr}")
        if not 0 <= warmup_steps < total_steps:
            raise ValueError(
                f"need 0 <= warmup_steps < total_steps, got warmup_steps={warmup_steps}, "
                f"total_steps={total_steps}"
            )
        self.max_lr, self.min_lr = float(max_lr), float(min_lr)
        self.warmup_steps, self.total_steps = int(warmup_steps), int(total_steps)

    def __call__(self, step):
        ### BEGIN SOLUTION
        if step < self.warmup_steps:
            return self.max_lr * (step + 1) / (self.warmup_steps + 1)
        if step > self.total_steps:
            return self.min_lr
        progress = (step - self.warmup_steps) / (self.total_steps - self.warmup_steps)
        weight = 0.5 * (1.0 + math.cos(math.pi * progress))  # 1 at the start, 0 at the end
        return self.min_lr + weight * (self.max_lr - self.min_lr)
        ### END SOLUTION

    def __repr__(self):
        return (f"CosineWarmup(max_lr={self.max_lr}, min_lr={self.min_lr}, "
                f"warmup_steps={self.warmup_steps}, total_steps={self.total_steps})")


class StepDecay:
    """lr * gamma ** (step // step_size): multiply by gamma every step_size steps.

    >>> decay = StepDecay(lr=1.0, step_size=2, gamma=0.5)
    >>> [decay(s) for s in range(6)]
    [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]
    """

    def __init__(self, lr, step_size, gamma=0.1):
        if step_size < 1 or lr < 0 or gamma < 0:
            raise ValueError(
                f"need lr >= 0, step_size >= 1, gamma >= 0; got {lr}, {step_size}, {gamma}"
            )
        self.lr, self.step_size, self.gamma = float(lr), int(step_size), float(gamma)

    def __call__(self, step):
        ### BEGIN SOLUTION
        return self.lr * self.gamma ** (step // self.step_size)
        ### END SOLUTION

    def __repr__(self):
        return f"StepDecay(lr={self.lr}, step_size={self.step_size}, gamma={self.gamma})"


def set_lr(optimizer, lr):
    """Set the learning rate the optimizer's next step() will use.

    >>> from tinytorch.optim import SGD
    >>> opt = SGD([Tensor([1.0], requires_grad=True)], lr=0.1)
    >>> set_lr(opt, 0.05)
    >>> opt.lr
    0.05
    """
    optimizer.lr = float(lr)


# %% [markdown]
# ### Test: schedule values

# %% nbgrader={"grade": true, "grade_id": "test_unit_schedules", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_schedules():
    """CosineWarmup follows nanoGPT's get_lr at every step; StepDecay multiplies by gamma."""
    sched = CosineWarmup(max_lr=1e-3, min_lr=1e-4, warmup_steps=100, total_steps=2000)
    table = {0: 9.90099e-6, 50: 5.04950e-4, 99: 9.90099e-4, 100: 1e-3, 1050: 5.5e-4,
             2000: 1e-4, 5000: 1e-4}
    for step, want in table.items():
        got = sched(step)
        hint = ""
        if step < 100 and abs(got - 1e-3 * step / 100) < 1e-12:
            hint = " Use (step + 1) / (warmup_steps + 1): step 0 must not have lr 0."
        elif step == 100 and abs(got - 1e-3) > 1e-9:
            hint = (" The decay starts at max_lr when warm-up ends: progress = (step - "
                    "warmup_steps) / (total_steps - warmup_steps), 0 at step warmup_steps.")
        elif step == 1050 and abs(got - 5.5e-4) > 1e-6:
            hint = " Halfway through the decay the cosine weight is 0.5: lr = (max + min) / 2."
        assert abs(got - want) <= 1e-9 + 1e-6 * want, (
            f"CosineWarmup(1e-3, 1e-4, 100, 2000)({step}) = {got:.6g}, expected {want:.6g}.{hint}"
        )
    lrs = [sched(s) for s in range(2100)]
    up = [s for s in range(100) if not lrs[s] < lrs[s + 1]]
    assert not up, (
        f"warm-up must increase every step, but lr({up[0]}) = {lrs[up[0]]:.6g} >= "
        f"lr({up[0] + 1}) = {lrs[up[0] + 1]:.6g}"
    )
    rises = [s for s in range(100, 2000) if lrs[s] < lrs[s + 1]]
    assert not rises, (
        f"after warm-up the learning rate must never increase, but lr({rises[0]}) = "
        f"{lrs[rises[0]]:.6g} < lr({rises[0] + 1}) = {lrs[rises[0] + 1]:.6g}: "
        "cos(pi * progress) goes 1 -> -1 as progress goes 0 -> 1"
    )
    no_warmup = CosineWarmup(max_lr=0.5, min_lr=0.0, warmup_steps=0, total_steps=10)
    assert abs(no_warmup(0) - 0.5) < 1e-12 and abs(no_warmup(10)) < 1e-12, (
        "with warmup_steps=0 the schedule starts at max_lr and reaches min_lr at total_steps: "
        f"CosineWarmup(0.5, 0.0, 0, 10) gave lr(0) = {no_warmup(0):.6g} (expected 0.5) and "
        f"lr(10) = {no_warmup(10):.6g} (expected 0)"
    )

    def check_rates(schedule, table):
        """schedule(step) for each `step: expected` of table, within 1e-9 + 1e-6 * expected."""
        for step, want in table.items():
            got = schedule(step)
            assert abs(got - want) <= 1e-9 + 1e-6 * abs(want), (
                f"{type(schedule).__name__}({step}) = {got:.6g}, expected {want:.6g}: warm-up "
                "is max_lr * (step + 1) / (warmup_steps + 1), the decay min_lr + (max_lr - "
                "min_lr) * (1 + cos(pi * progress)) / 2, StepDecay lr * gamma ** (step // "
                "step_size), with integer division"
            )

    check_rates(StepDecay(lr=0.1, step_size=30, gamma=0.1),
                {0: 0.1, 29: 0.1, 30: 0.01, 59: 0.01, 60: 0.001, 95: 1e-4})
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    def get_lr(it, max_lr, min_lr, warmup, total):  # nanoGPT's get_lr
        if it < warmup:
            return max_lr * (it + 1) / (warmup + 1)
        if it > total:
            return min_lr
        ratio = (it - warmup) / (total - warmup)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (max_lr - min_lr)

    def cosine(max_lr, min_lr, warmup, total, steps):
        return (CosineWarmup(max_lr=max_lr, min_lr=min_lr, warmup_steps=warmup, total_steps=total),
                {s: get_lr(s, max_lr, min_lr, warmup, total) for s in steps})

    hidden_cases(check_rates, {
        "a short warm-up": cosine(6e-4, 6e-5, 3, 50, [0, 1, 2, 3, 4, 26, 49, 50, 51, 500]),
        "a long warm-up": cosine(0.1, 0.0, 400, 500, [0, 199, 399, 400, 450, 499, 500]),
        "equal maximum and minimum": cosine(1e-3, 1e-3, 10, 20, [0, 9, 10, 15, 20, 30]),
        "a step decay by a half": (StepDecay(lr=2.0, step_size=7, gamma=0.5),
                                   {0: 2.0, 6: 2.0, 7: 1.0, 13: 1.0, 14: 0.5, 70: 2.0 / 1024}),
        "a step decay every step": (StepDecay(lr=0.3, step_size=1, gamma=0.9),
                                    {s: 0.3 * 0.9**s for s in (0, 1, 2, 17)}),
    })
    ### END HIDDEN TESTS


test_unit_schedules()


# %% [markdown]
# ### PyTorch-style schedulers (given)
#
# PyTorch code drives the learning rate with scheduler *objects* from
# `torch.optim.lr_scheduler`: built around the optimizer, they set every parameter
# group's `lr` when built (the lr of step 0) and again at each `.step()`, called once
# after each `optimizer.step()`. The classes below give the same interface on top of the
# schedules you wrote, as `tinytorch.optim.lr_scheduler`:
#
# ```
# sched = lr_scheduler.CosineWarmupLR(opt, warmup_steps=100, total_steps=2000, min_lr=1e-4)
# for batch in data:
#     ...; opt.step(); sched.step()
# ```
#
# Each group's own starting `lr` is its base: `LambdaLR` multiplies it by `lr_lambda(s)`,
# `StepLR` by `gamma ** (s // step_size)`, `CosineWarmupLR` runs `CosineWarmup` from it,
# and `ScheduleLR` sets the value of a schedule function `schedule(s)` as it is. A
# scheduler's `state_dict()` holds its step count and base rates; save it with the
# optimizer's to resume.

# %% nbgrader={"grade": false, "grade_id": "lr-scheduler", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
class LRScheduler:
    """Base of the PyTorch-style schedulers: sets each group's lr from lr_at(base_lr, step).

    >>> from tinytorch.optim import SGD
    >>> class Halving(LRScheduler):
    ...     def lr_at(self, base_lr, step):
    ...         return base_lr / 2 ** step
    >>> opt = SGD([Tensor([1.0], requires_grad=True)], lr=0.1)
    >>> scheduler = Halving(opt)  # sets the lr of step 0
    >>> scheduler.get_last_lr()
    [0.1]
    >>> scheduler.step()  # once after each opt.step()
    >>> scheduler.step()
    >>> scheduler.get_last_lr(), scheduler.state_dict()
    ([0.025], {'last_epoch': 2, 'base_lrs': [0.1]})
    """

    def __init__(self, optimizer, last_epoch=-1):
        if not hasattr(optimizer, "param_groups"):
            raise TypeError(
                f"a scheduler needs an optimizer (module 07), got {type(optimizer).__name__}"
            )
        self.optimizer = optimizer
        self.base_lrs = [float(group["lr"]) for group in optimizer.param_groups]
        self.last_epoch = int(last_epoch)  # PyTorch's name for the step count
        self.step()  # set the lr of step last_epoch + 1 (step 0 for a new run)

    def lr_at(self, base_lr, step):
        raise NotImplementedError(f"{type(self).__name__} must define lr_at()")

    def step(self):
        """Move to the next step and set every group's lr for it."""
        self.last_epoch += 1
        for group, base_lr in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = float(self.lr_at(base_lr, self.last_epoch))

    def get_last_lr(self):
        """The lr of each group set by the last step() (a list, as PyTorch)."""
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self):
        return {"last_epoch": self.last_epoch, "base_lrs": list(self.base_lrs)}

    def load_state_dict(self, state_dict):
        base_lrs = [float(v) for v in np.asarray(state_dict["base_lrs"]).reshape(-1)]
        if len(base_lrs) != len(self.base_lrs):
            raise ValueError(
                f"the scheduler state has {len(base_lrs)} base lrs but the optimizer has "
                f"{len(self.base_lrs)} parameter groups: was it built the same way?"
            )
        self.last_epoch = int(state_dict["last_epoch"])
        self.base_lrs = base_lrs


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(step), as torch.optim.lr_scheduler.LambdaLR.

    >>> from tinytorch.optim import SGD
    >>> opt = SGD([Tensor([1.0], requires_grad=True)], lr=0.5)
    >>> scheduler = LambdaLR(opt, lambda step: 1 / (step + 1))
    >>> for _ in range(3):
    ...     print(opt.lr)
    ...     scheduler.step()
    0.5
    0.25
    0.16666666666666666
    """

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        self.lr_lambda = lr_lambda
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, step):
        return base_lr * self.lr_lambda(step)


class StepLR(LRScheduler):
    """lr = base_lr * gamma ** (step // step_size), as torch.optim.lr_scheduler.StepLR.

    >>> from tinytorch.optim import SGD
    >>> opt = SGD([Tensor([1.0], requires_grad=True)], lr=1.0)
    >>> scheduler = StepLR(opt, step_size=2, gamma=0.5)
    >>> lrs = []
    >>> for _ in range(5):
    ...     lrs.append(opt.lr)
    ...     scheduler.step()
    >>> lrs
    [1.0, 1.0, 0.5, 0.5, 0.25]
    """

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        self.decay = StepDecay(1.0, step_size, gamma)  # checks the arguments
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, step):
        return base_lr * self.decay(step)


class CosineWarmupLR(LRScheduler):
    """CosineWarmup from each group's base lr down to min_lr (nanoGPT's get_lr).

    >>> from tinytorch.optim import SGD
    >>> opt = SGD([Tensor([1.0], requires_grad=True)], lr=0.1)
    >>> scheduler = CosineWarmupLR(opt, warmup_steps=1, total_steps=3)
    >>> lrs = []
    >>> for _ in range(4):
    ...     lrs.append(round(opt.lr, 4))
    ...     scheduler.step()
    >>> lrs
    [0.05, 0.1, 0.05, 0.0]
    """

    def __init__(self, optimizer, warmup_steps, total_steps, min_lr=0.0, last_epoch=-1):
        self.warmup_steps, self.total_steps, self.min_lr = warmup_steps, total_steps, min_lr
        for group in optimizer.param_groups:  # checks the arguments against every group
            CosineWarmup(group["lr"], min_lr, warmup_steps, total_steps)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, step):
        curve = CosineWarmup(base_lr, self.min_lr, self.warmup_steps, self.total_steps)
        return curve(step)


class ScheduleLR(LRScheduler):
    """Every group's lr = schedule(step), for a schedule function such as CosineWarmup.

    >>> from tinytorch.optim import SGD
    >>> opt = SGD([Tensor([1.0], requires_grad=True)], lr=123.0)  # the schedule decides
    >>> scheduler = ScheduleLR(opt, StepDecay(lr=0.1, step_size=1, gamma=0.5))
    >>> scheduler.step()
    >>> scheduler.get_last_lr()
    [0.05]
    """

    def __init__(self, optimizer, schedule, last_epoch=-1):
        self.schedule = schedule
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, step):
        return self.schedule(step)

# %% [markdown]
# ## Part 2: checkpoints that are safe to load
#
# A checkpoint is everything needed to continue a run, written to one file. Three
# properties matter, and each one has burned real projects.
#
# **1. Loading must not run code.** Python's `pickle` (and so `torch.save`/`torch.load`
# before PyTorch 2.6 made `weights_only=True` the default) can store *any* object, which
# means a file can tell the loader to call any function: opening a checkpoint from the
# internet could run a program. That is why models are now shared as `safetensors`. We
# use NumPy's `.npz`: a zip archive of `.npy` files, each one a header (dtype, shape) and
# raw bytes. Loading with `np.load(path, allow_pickle=False)` reads arrays and nothing
# else; a file that would need pickle is refused.
#
# The layout of one checkpoint file:
#
# ```
# model/0.weight      the model's state_dict(), one array per name
# model/0.bias
# optim/steps         the optimizer's state_dict() (module 07): numbers become 0-d arrays
# optim/param.0.exp_avg
# meta                one JSON string, stored as a NumPy unicode array:
#                     {"format": "tinytorch.checkpoint", "version": 1, "step": 500,
#                      "optimizer": "AdamW", "extra": {...}, "generator": {...}}
# ```
#
# `generator` is `default_generator().bit_generator.state`, the exact position of the
# random generator that dropout draws its masks from. Without it a resumed run would draw
# different masks and drift from the original. `extra` is yours: any JSON data (a config,
# the best validation loss so far).
#
# **2. A crash while saving must not destroy the last good checkpoint.** Writing over
# `run.npz` in place and being killed halfway leaves half a file, and the previous
# checkpoint is gone too. Instead write a temporary file in the same folder, flush it to
# disk, then `os.replace` it over the old name: on POSIX and Windows a rename within one
# file system is atomic, so `run.npz` is always either the old checkpoint or the new one.
#
# **3. A bad file must say so.** A truncated or corrupted file makes `np.load` fail deep in
# the `zipfile` module (`BadZipFile: File is not a zip file`, `Bad CRC-32`). Those errors
# do not tell a user what to do. Every failure to read becomes a `CheckpointError` that
# names the file and the likely cause. A checkpoint that reads fine but does not fit the
# model (other layer sizes or names) shows `load_state_dict`'s listing of the keys.
#
# The file-level work (atomic writing, reading with clear errors) is given below as two
# helpers; read them. You write what goes into a checkpoint and how it is put back.
# Restore everything or nothing: if the optimizer's state does not fit, put the model's
# old weights back before raising.

# %% nbgrader={"grade": false, "grade_id": "checkpoint-io", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
CHECKPOINT_FORMAT = "tinytorch.checkpoint"
CHECKPOINT_VERSION = 1


class CheckpointError(Exception):
    """A checkpoint that cannot be read, or that does not fit the model or optimizer.

    >>> try:
    ...     read_checkpoint_meta("no/such/run.npz")
    ... except CheckpointError as error:
    ...     print(error)
    there is no checkpoint file at 'no/such/run.npz'
    """


def _write_npz_atomically(path, arrays):
    """np.savez to a temporary file beside `path`, then rename it over `path`."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **arrays)
            handle.flush()
            os.fsync(handle.fileno())  # the bytes are on disk before the rename
        os.replace(tmp, path)  # atomic: readers see the old file or the new, never half
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _read_npz(path):
    """Every array of an .npz file, read without pickle; CheckpointError if unreadable."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CheckpointError(f"there is no checkpoint file at {path!r}")
    try:
        loaded = np.load(path, allow_pickle=False)
        if not hasattr(loaded, "files"):  # a single .npy array, not an archive
            raise CheckpointError(
                f"{path!r} holds one NumPy array, not a checkpoint: save_checkpoint writes "
                "an .npz archive"
            )
        with loaded:
            return {name: loaded[name] for name in loaded.files}
    except CheckpointError:
        raise
    except Exception as error:  # BadZipFile, Bad CRC-32, EOFError, pickled data, ...
        raise CheckpointError(
            f"cannot read {path!r} as a checkpoint: the file is truncated, corrupted, or not "
            f"an .npz archive ({type(error).__name__}: {error}). Resume from an earlier "
            "checkpoint, or save this one again."
        ) from None


def _read_meta(arrays, path):
    """The JSON metadata of a checkpoint, checked for format and version."""
    if "meta" not in arrays or arrays["meta"].dtype.kind != "U":
        raise CheckpointError(
            f"{os.fspath(path)!r} is an .npz file but not a TinyTorch checkpoint (no 'meta' "
            f"entry; it holds {sorted(arrays)[:5]})"
        )
    try:
        meta = json.loads(str(arrays["meta"]))
    except ValueError as error:
        raise CheckpointError(
            f"the metadata of {os.fspath(path)!r} is not valid JSON: {error}"
        ) from None
    if meta.get("format") != CHECKPOINT_FORMAT or meta.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(
            f"{os.fspath(path)!r} has format {meta.get('format')!r} version "
            f"{meta.get('version')!r}; this TinyTorch reads {CHECKPOINT_FORMAT!r} version "
            f"{CHECKPOINT_VERSION}"
        )
    return meta


def read_checkpoint_meta(path):
    """A checkpoint's metadata (step, optimizer, your `extra`, ...), without loading weights.

    >>> from tinytorch.nn import Linear
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "run.npz")
    >>> save_checkpoint(path, Linear(3, 2), step=500, extra={"best_loss": 1.91})
    >>> meta = read_checkpoint_meta(path)
    >>> meta["format"], meta["step"], meta["optimizer"], meta["extra"]
    ('tinytorch.checkpoint', 500, None, {'best_loss': 1.91})
    >>> folder.cleanup()
    """
    return _read_meta(_read_npz(path), path)


# %% nbgrader={"grade": false, "grade_id": "checkpoint", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def save_checkpoint(path, model, optimizer=None, step=0, extra=None):
    """Write the model's weights, the optimizer's state, the step, `extra` (JSON data)
    and the random generator's state to one .npz file, atomically.

    >>> from tinytorch.nn import Linear
    >>> from tinytorch.optim import AdamW
    >>> model = Linear(3, 2)
    >>> opt = AdamW(model.parameters(), lr=0.01)
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "run.npz")
    >>> save_checkpoint(path, model, opt, step=500, extra={"best_loss": 1.91})
    >>> os.listdir(folder.name)  # one file, no temporary left behind
    ['run.npz']
    >>> folder.cleanup()
    """
    try:
        json.dumps(extra)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"extra must be JSON data (dicts, lists, strings, numbers, booleans, None): {error}"
        ) from None
    ### BEGIN SOLUTION
    arrays = {f"model/{name}": np.asarray(value) for name, value in model.state_dict().items()}
    if optimizer is not None:
        for key, value in optimizer.state_dict().items():
            arrays[f"optim/{key}"] = np.asarray(value)
    meta = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "step": int(step),
        "optimizer": type(optimizer).__name__ if optimizer is not None else None,
        "extra": extra,
        "generator": default_generator().bit_generator.state,
    }
    arrays["meta"] = np.array(json.dumps(meta))
    _write_npz_atomically(path, arrays)
    ### END SOLUTION


def load_checkpoint(path, model, optimizer=None):
    """Restore weights (and the optimizer's state, if given) and the random generator.

    Returns (step, extra). Raises CheckpointError, and changes nothing, if the file cannot
    be read or does not fit.

    >>> from tinytorch.nn import Linear
    >>> from tinytorch.optim import AdamW
    >>> model, other = Linear(3, 2), Linear(3, 2)
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "run.npz")
    >>> save_checkpoint(path, model, AdamW(model.parameters()), step=5, extra={"a": 1})
    >>> load_checkpoint(path, other, AdamW(other.parameters()))
    (5, {'a': 1})
    >>> bool((other.weight.data == model.weight.data).all())
    True
    >>> try:
    ...     load_checkpoint(path, Linear(4, 2))
    ... except CheckpointError as error:
    ...     print(str(error).splitlines()[0].replace(folder.name, "..."))
    the weights in '.../run.npz' do not fit this model:
    >>> folder.cleanup()
    """
    arrays = _read_npz(path)
    meta = _read_meta(arrays, path)
    ### BEGIN SOLUTION
    weights = {k[len("model/"):]: v for k, v in arrays.items() if k.startswith("model/")}
    optim = {k[len("optim/"):]: v for k, v in arrays.items() if k.startswith("optim/")}
    if optimizer is not None and not optim:
        raise CheckpointError(
            f"{os.fspath(path)!r} holds no optimizer state (it was saved without an "
            "optimizer): pass optimizer=None to load only the weights"
        )
    previous = model.state_dict()
    try:
        model.load_state_dict(weights)
    except (KeyError, ValueError) as error:
        raise CheckpointError(
            f"the weights in {os.fspath(path)!r} do not fit this model:\n{error}"
        ) from None
    if optimizer is not None:
        try:
            optimizer.load_state_dict(optim)
        except ValueError as error:
            model.load_state_dict(previous)  # all or nothing
            raise CheckpointError(
                f"the optimizer state in {os.fspath(path)!r} (saved by "
                f"{meta.get('optimizer')}) does not fit {type(optimizer).__name__}:\n{error}"
            ) from None
    default_generator().bit_generator.state = meta["generator"]
    return meta["step"], meta["extra"]
    ### END SOLUTION


# %% [markdown]
# ### Test: a checkpoint round trip, and bad files

# %% nbgrader={"grade": true, "grade_id": "test_unit_checkpoint", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_checkpoint():
    """Weights, optimizer state, step, extra and generator state come back bit for bit."""
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "run.npz")
    manual_seed(0)
    model = Sequential(Linear(3, 4), ReLU(), Linear(4, 2))
    opt = AdamW(model.parameters(), lr=0.01)
    for p in model.parameters():
        p.grad = Tensor(np.ones(p.shape, dtype=np.float32))
    opt.step()
    save_checkpoint(path, model, opt, step=7, extra={"note": "hi", "best": 0.5})
    draw_after_save = default_generator().random()
    files = sorted(os.listdir(folder))
    assert files == ["run.npz"], (
        f"the folder holds {files}: write one file, and do not leave temporary files behind"
    )
    with np.load(path, allow_pickle=False) as f:
        names = set(f.files)
    assert {"model/0.weight", "model/2.bias", "optim/steps", "meta"} <= names, (
        f"the checkpoint holds {sorted(names)}: expected model/<name> for each weight, "
        "optim/<key> for the optimizer's state and one 'meta' entry"
    )

    manual_seed(123)  # a different model, optimizer and generator position
    other = Sequential(Linear(3, 4), ReLU(), Linear(4, 2))
    other_opt = AdamW(other.parameters(), lr=0.5)
    step, extra = load_checkpoint(path, other, other_opt)
    assert step == 7 and extra == {"note": "hi", "best": 0.5}, (
        f"load_checkpoint returned ({step}, {extra}), expected (7, {{'note': 'hi', 'best': 0.5}})"
    )
    for (name, a), b in zip(model.state_dict().items(), other.state_dict().values()):
        assert np.array_equal(a, b) and a.dtype == b.dtype, (
            f"weight {name} did not come back exactly"
        )
    assert other_opt.steps == 1 and other_opt.lr == 0.01, (
        "the optimizer's step counter and lr should come back from the checkpoint"
    )
    assert np.array_equal(other_opt.state[0]["exp_avg"], opt.state[0]["exp_avg"]), (
        "the optimizer's buffers should come back from the checkpoint"
    )
    assert default_generator().random() == draw_after_save, (
        "after loading, the shared generator must continue exactly where it was when the "
        "checkpoint was saved: store default_generator().bit_generator.state in the metadata "
        "and assign it back on load"
    )
    weights_only = Sequential(Linear(3, 4), ReLU(), Linear(4, 2))
    assert load_checkpoint(path, weights_only)[0] == 7, "optimizer=None loads only the weights"

    def check_restored(build, make_opt, step, extra):
        """save_checkpoint then load_checkpoint into a fresh build(): everything comes back."""
        path = os.path.join(tempfile.mkdtemp(), "ckpt.npz")
        manual_seed(0)
        model, opt = build(), None
        if make_opt is not None:
            opt = make_opt(model.parameters())
            for p in model.parameters():
                p.grad = Tensor(np.full(p.shape, 0.5, dtype=np.float32))
            opt.step()
        save_checkpoint(path, model, opt, step=step, extra=extra)
        draw = default_generator().random()
        manual_seed(321)
        other = build()
        other_opt = None if make_opt is None else make_opt(other.parameters())
        got_step, got_extra = load_checkpoint(path, other, other_opt)
        assert got_step == step and got_extra == extra, (
            f"load_checkpoint returned ({got_step}, {got_extra}), expected ({step}, {extra})"
        )
        for (name, a), b in zip(model.state_dict().items(), other.state_dict().values()):
            assert np.array_equal(a, b) and a.dtype == b.dtype, f"weight {name} did not come back"
        if opt is not None:
            assert other_opt.steps == opt.steps and other_opt.lr == opt.lr, (
                "the optimizer's step counter and lr should come back from the checkpoint"
            )
            for mine, theirs in zip(other_opt.state, opt.state):
                for key, value in theirs.items():
                    assert np.array_equal(mine[key], value), f"optimizer state {key} differs"
        assert default_generator().random() == draw, (
            "after loading, the shared generator must continue where it was when saved"
        )

    check_restored(lambda: Sequential(Linear(3, 4), ReLU(), Linear(4, 2)),
                   lambda ps: AdamW(ps, lr=0.01), 7, {"note": "hi", "best": 0.5})
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_restored, {
        "momentum SGD and a deeper model": (
            lambda: Sequential(Linear(5, 3), ReLU(), Linear(3, 3), ReLU(), Linear(3, 1)),
            lambda ps: SGD(ps, lr=0.3, momentum=0.9), 12345, {"epochs": [1, 2], "tag": "x"}),
        "weights only, no extra": (lambda: Linear(6, 2), None, 0, None),
        "a model without biases": (lambda: Sequential(Linear(2, 2, bias=False)),
                                   lambda ps: Adam(ps, lr=0.5, weight_decay=0.1), 1, {}),
    })
    ### END HIDDEN TESTS


test_unit_checkpoint()


# %% nbgrader={"grade": true, "grade_id": "test_unit_checkpoint_errors", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_checkpoint_errors():
    """Truncated files and models that do not fit raise CheckpointError and change nothing."""
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "run.npz")
    model = Sequential(Linear(3, 4), ReLU(), Linear(4, 2))
    save_checkpoint(path, model, step=1)
    data = open(path, "rb").read()
    broken = os.path.join(folder, "broken.npz")
    with open(broken, "wb") as handle:
        handle.write(data[: len(data) // 2])
    wider = Sequential(Linear(3, 5), ReLU(), Linear(5, 2))
    before = wider.state_dict()
    cases = [  # (what, load, words the CheckpointError must hold, fix)
        ("a truncated checkpoint", lambda: load_checkpoint(broken, model), ["broken.npz"],
         "catch the reader's error and raise CheckpointError naming the file"),
        ("weights of shape (4, 3) loaded into Linear(3, 5)", lambda: load_checkpoint(path, wider),
         ["0.weight"], "raise CheckpointError with load_state_dict's listing of keys"),
        ("optimizer state asked of a weights-only checkpoint",
         lambda: load_checkpoint(path, model, AdamW(model.parameters())), ["optimizer"],
         "say that the checkpoint has no optimizer state"),
    ]
    for what, load, words, fix in cases:
        expect_error(what, load, CheckpointError, words, fix)
    assert all(np.array_equal(before[k], v) for k, v in wider.state_dict().items()), (
        "a failed load must leave the model unchanged"
    )
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    junk = os.path.join(folder, "junk.npz")
    with open(junk, "wb") as handle:
        handle.write(b"PK\x03\x04 but not an archive")
    tiny = os.path.join(folder, "tiny.npz")
    with open(tiny, "wb") as handle:
        handle.write(data[:10])
    deeper = Sequential(Linear(3, 4), ReLU(), Linear(4, 2), ReLU(), Linear(2, 2))
    hidden_cases(expect_error, {
        "a file that only starts like an archive": (
            "load", lambda: load_checkpoint(junk, model), CheckpointError, ["junk.npz"], ""),
        "the first bytes of a checkpoint": (
            "load", lambda: load_checkpoint(tiny, model), CheckpointError, ["tiny.npz"], ""),
        "a model with a layer the checkpoint lacks": (
            "load", lambda: load_checkpoint(path, deeper), CheckpointError, ["4.weight"], ""),
    })
    ### END HIDDEN TESTS


test_unit_checkpoint_errors()


# %% [markdown]
# ## Part 3: evaluation
#
# The training loss tells you how well the model fits the batches it learns from. Whether
# it learned anything general, you only know on data it never trained on: the
# **validation** set. Evaluating is a forward pass with three differences:
#
# 1. **No graph.** Under `no_grad()` (module 06) operations record nothing, so no
#    intermediate arrays are kept for a backward pass that will never come: less memory,
#    less time.
# 2. **Evaluation mode.** `model.eval()` turns dropout off (module 03): evaluation must be
#    deterministic. Afterwards put the model back in the mode it was in, even if
#    evaluation raised (`try`/`finally`), or training silently continues without dropout.
# 3. **Averages over samples, not batches.** The last batch is often smaller; weight each
#    batch's mean loss by its number of samples, so the result is the mean over the
#    data set.
#
# `accuracy(logits, targets)` is the fraction of rows whose largest logit is at the target
# class. Targets are class indices, or one-hot rows (then compare with their argmax).
# `evaluate` returns a dict: `{"loss": ...}`, plus `{metric.__name__: ...}` when given a
# metric such as `accuracy`.

# %% nbgrader={"grade": false, "grade_id": "evaluate", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def _array(x):
    return x.data if isinstance(x, Tensor) else np.asarray(x)


def _num_samples(x):
    return int(x.shape[0]) if getattr(x, "shape", ()) != () else 1


def accuracy(logits, targets):
    """Fraction of rows whose largest logit is at the target class (indices or one-hot).

    >>> logits = Tensor([[2.0, 0.1], [0.3, 0.9], [1.5, 1.0]])
    >>> accuracy(logits, [0, 1, 1])
    0.6666666666666666
    >>> accuracy(logits, [[1, 0], [0, 1], [1, 0]])  # one-hot targets
    1.0
    """
    ### BEGIN SOLUTION
    logits, targets = _array(logits), _array(targets)
    if targets.shape == logits.shape:  # one-hot (or probability) targets
        targets = targets.argmax(axis=-1)
    predictions = logits.argmax(axis=-1)
    if predictions.shape != targets.shape:
        raise ValueError(
            f"accuracy: logits of shape {logits.shape} give predictions of shape "
            f"{predictions.shape}, but targets have shape {targets.shape}"
        )
    return float(np.mean(predictions == targets))
    ### END SOLUTION


def evaluate(model, loss_fn, loader, metric=None):
    """Mean loss (and metric) over a loader, in eval mode under no_grad.

    >>> from tinytorch.data import DataLoader, TensorDataset
    >>> from tinytorch.nn import Linear, cross_entropy
    >>> model = Linear(2, 2)
    >>> model.weight.data[...] = [[1.0, 0.0], [0.0, 1.0]]
    >>> model.bias.data[...] = 0.0
    >>> x, y = np.array([[2.0, 0.0], [0.0, 3.0], [1.0, 2.0]]), np.array([0, 1, 0])
    >>> loader = DataLoader(TensorDataset(x, y), batch_size=2)
    >>> results = evaluate(model, cross_entropy, loader, metric=accuracy)
    >>> {name: round(value, 4) for name, value in results.items()}
    {'loss': 0.4963, 'accuracy': 0.6667}
    """
    ### BEGIN SOLUTION
    was_training = model.training
    model.eval()
    total_loss = total_metric = 0.0
    count = 0
    try:
        with no_grad():
            for inputs, targets in loader:
                outputs = model(inputs)
                n = _num_samples(targets)
                total_loss += loss_fn(outputs, targets).item() * n
                if metric is not None:
                    total_metric += float(metric(outputs, targets)) * n
                count += n
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError("evaluate: the loader yielded no batches")
    results = {"loss": total_loss / count}
    if metric is not None:
        results[getattr(metric, "__name__", "metric")] = total_metric / count
    return results
    ### END SOLUTION


# %% [markdown]
# ### Test: evaluation

# %% nbgrader={"grade": true, "grade_id": "test_unit_evaluate", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_evaluate():
    """accuracy counts argmax hits; evaluate averages per sample, in eval mode, without a graph."""
    logits = Tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [1.0, 0.0, 5.0], [9.0, 0.0, 0.0]])
    assert accuracy(logits, Tensor(np.array([0, 1, 0, 2]), dtype=np.int64)) == 0.5, (
        "2 of 4 rows have their largest logit at the target: accuracy 0.5 (argmax over the "
        "last axis, compared with the target indices)"
    )
    one_hot = np.eye(3, dtype=np.float32)[[0, 1, 2, 0]]
    assert accuracy(logits, one_hot) == 1.0, "one-hot targets: compare with their argmax"

    seen = {}

    class Probe(Module):
        """Returns its input; records the mode and whether the output has a graph."""

        def __init__(self):
            super().__init__()
            self.w = Parameter(np.ones(1, dtype=np.float32))

        def forward(self, x):
            seen["training"] = self.training
            out = x * self.w
            seen["recorded"] = out.requires_grad
            return out

    def mean_value(outputs, targets):  # a "loss": the mean of the outputs
        return outputs.mean()

    x = np.array([[1.0], [1.0], [1.0], [4.0]], dtype=np.float32)
    loader = [(Tensor(x[:3]), Tensor(x[:3])), (Tensor(x[3:]), Tensor(x[3:]))]
    model = Probe()
    results = evaluate(model, mean_value, loader)
    assert abs(results["loss"] - 1.75) < 1e-6, (
        f"batches of 3 samples (mean 1.0) and 1 sample (mean 4.0) average to 1.75 per sample, "
        f"got {results['loss']}"
        + (": weight each batch's loss by its number of samples, not 1 per batch"
           if abs(results["loss"] - 2.5) < 1e-6 else "")
        + (": the batch means were summed and divided by the number of samples; multiply "
           "each batch's mean loss by its number of samples before adding it up"
           if abs(results["loss"] - 1.25) < 1e-6 else "")
    )
    assert seen["training"] is False, "evaluate must run the model in eval mode (model.eval())"
    assert seen["recorded"] is False, (
        "evaluate must run under no_grad(): nothing should be recorded"
    )
    assert model.training is True, (
        "after evaluate the model must be back in training mode, got model.training = "
        f"{model.training}: remember model.training before model.eval() and restore it with "
        "model.train(was_training) in a finally block"
    )
    model.eval()
    evaluate(model, mean_value, loader)
    assert model.training is False, (
        "a model that was in eval mode stays in eval mode, got model.training = True: restore "
        "the mode it had before, model.train(was_training), not model.train()"
    )
    results = evaluate(Probe(), mean_value, loader, metric=lambda o, t: 1.0)
    assert set(results) == {"loss", "<lambda>"}, (
        "with a metric, evaluate returns loss and the metric under its __name__, got "
        f"{set(results)}"
    )

    def check_per_sample(sizes, values):
        """Batches of the given sizes whose samples all hold values[i]: the per-sample mean."""
        loader = [(Tensor(np.full((n, 1), v, np.float32)), Tensor(np.full((n, 1), v, np.float32)))
                  for n, v in zip(sizes, values)]
        want = sum(n * v for n, v in zip(sizes, values)) / sum(sizes)
        got = evaluate(Probe(), mean_value, loader)["loss"]
        assert abs(got - want) < 1e-5 * max(1.0, abs(want)), (
            f"batches of {sizes} samples holding {values} average to {want:.6g} per sample, "
            f"got {got}: weight each batch's loss by its number of samples"
        )

    def check_accuracy(logits, targets, want):
        got = accuracy(Tensor(logits), targets)
        assert abs(got - want) < 1e-9, (
            f"accuracy of logits {np.shape(logits)} gave {got}, expected {want}: argmax over the "
            "last axis, compared with the target indices (or the one-hot targets' argmax)"
        )

    check_per_sample([3, 1], [1.0, 4.0])
    check_accuracy([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0]], np.array([0, 2]), 0.5)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_per_sample, {
        "three batches of other sizes": ([5, 2, 7], [2.0, -1.0, 0.5]),
        "one batch": ([6], [3.0]),
        "a last batch of one": ([4, 4, 1], [0.0, 1.0, 10.0]),
    })
    seq = np.zeros((2, 3, 4), np.float32)
    seq[0, :, 1] = seq[1, :2, 3] = 1.0
    hidden_cases(check_accuracy, {
        "logits over a sequence": (seq, np.array([[1, 1, 0], [3, 3, 0]]), 5 / 6),
        "one row, a miss": ([[0.1, 0.7, 0.2]], np.array([2]), 0.0),
        "one-hot targets with misses": (np.eye(4, dtype=np.float32),
                                        np.eye(4, dtype=np.float32)[[0, 2, 2, 3]], 0.75),
    })
    ### END HIDDEN TESTS


test_unit_evaluate()


# %% [markdown]
# ## Part 4: one training step, and stopping at the first `nan`
#
# One step is the five lines you saw in module 07: forget old gradients, forward, loss,
# backward, step. `train_step` adds two things.
#
# **Gradient clipping and the gradient norm.** Call `clip_grad_norm_` on the optimizer's
# parameters after backward and before the step. With `clip_norm=None` clip with an
# infinite limit, which scales nothing: you still get the global gradient norm, a number
# worth logging.
#
# **Divergence.** When the learning rate is too high, or a loss takes the log of 0, the
# loss becomes `inf` or `nan`. A `nan` spreads: its gradient is `nan`, the optimizer
# writes `nan` into every weight, and from then on every loss is `nan`. A loop that
# carries on wastes the rest of the run and overwrites good checkpoints with broken ones.
# So check the loss (`math.isfinite`) **before** backward and the gradient norm before
# the step, and raise `TrainingError` naming the step. The weights are then still those
# of the last good step.

# %% nbgrader={"grade": false, "grade_id": "train-step", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class TrainingError(RuntimeError):
    """Training cannot go on (the loss or the gradients are not finite); names the step.

    >>> from tinytorch.nn import Linear, mse_loss
    >>> from tinytorch.optim import SGD
    >>> model = Linear(1, 1)
    >>> opt = SGD(model.parameters(), lr=0.1)
    >>> bad_batch = (Tensor([[np.nan]]), Tensor([[0.0]]))
    >>> try:
    ...     train_step(model, mse_loss, opt, bad_batch, step=7)
    ... except TrainingError as error:
    ...     print(str(error).split(" Common causes")[0])
    step 7: the loss is nan. Training diverged; the weights are those of step 6.
    """


def _diverged(step, what, value, lr):
    return TrainingError(
        f"step {step}: the {what} is {value}. Training diverged; the weights are those of "
        f"step {step - 1}. Common causes: a learning rate too high (this step used "
        f"lr={lr:.3g}; try 3-10x lower or a warm-up), an exploding gradient (try "
        "clip_norm=1.0), a log or division by zero in the loss, or nan in the data."
    )


def train_step(model, loss_fn, optimizer, batch, step, clip_norm=None):
    """One optimizer step on one (inputs, targets) batch; returns (loss, grad_norm).

    >>> from tinytorch.nn import Linear, mse_loss
    >>> from tinytorch.optim import SGD
    >>> model = Linear(1, 1)
    >>> model.weight.data[...] = 0.5
    >>> model.bias.data[...] = 0.0
    >>> opt = SGD(model.parameters(), lr=0.1)
    >>> batch = (Tensor([[2.0]]), Tensor([[3.0]]))  # (inputs, targets)
    >>> loss, norm = train_step(model, mse_loss, opt, batch, step=0)
    >>> loss, round(norm, 4)  # the loss before the update, the gradient's global norm
    (4.0, 8.9443)
    >>> round(model.weight.item(), 4), round(model.bias.item(), 4)
    (1.3, 0.4)
    """
    inputs, targets = batch
    ### BEGIN SOLUTION
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    value = loss.item()
    if not math.isfinite(value):
        raise _diverged(step, "loss", value, optimizer.lr)
    loss.backward()
    norm = clip_grad_norm_(optimizer.params, math.inf if clip_norm is None else clip_norm)
    if not math.isfinite(norm):
        raise _diverged(step, "gradient norm", norm, optimizer.lr)
    optimizer.step()
    return value, norm
    ### END SOLUTION


# %% [markdown]
# ### Test: a step, and a step that diverges

# %% nbgrader={"grade": true, "grade_id": "test_unit_train_step", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_train_step():
    """train_step returns the loss before the update and the gradient norm; nan raises."""
    w = Parameter(np.array([[2.0]], dtype=np.float32))
    model = lambda x: x @ w  # noqa: E731 - a one-weight model
    x = Tensor([[1.0], [2.0]])
    y = Tensor([[1.0], [2.0]])
    opt = SGD([w], lr=0.1)
    # loss = mean((2x - x)^2) = mean(x^2) = 2.5; d/dw = mean(2 (w x - y) x) = mean(2 x^2) = 5
    w.grad = Tensor([[100.0]])  # a stale gradient that zero_grad must clear
    loss, norm = train_step(model, mse_loss, opt, (x, y), step=0)
    assert abs(loss - 2.5) < 1e-6, f"the loss before the step should be 2.5, got {loss}"
    assert abs(norm - 5.0) < 1e-5, (
        f"the gradient norm should be 5.0, got {norm}"
        + (": the stale gradient 100 was not cleared, call optimizer.zero_grad() first"
           if norm > 50 else "")
    )
    assert abs(w.data[0, 0] - 1.5) < 1e-6, (
        f"after the step w should be 2 - 0.1 * 5 = 1.5, got {w.data}"
    )
    loss, norm = train_step(model, mse_loss, opt, (x, y), step=1, clip_norm=1.0)
    assert abs(norm - 2.5) < 1e-5 and abs(w.data[0, 0] - 1.4) < 1e-5, (
        f"with clip_norm=1.0 a gradient of norm 2.5 is scaled to norm 1 before the step: "
        f"expected w = 1.5 - 0.1 * 1 = 1.4 and norm 2.5, got w = {w.data[0, 0]}, norm {norm}"
    )
    before = w.data.copy()
    expect_error("train_step on a nan loss",
                 lambda: train_step(model, mse_loss, opt, (Tensor([[np.nan], [1.0]]), y), step=42),
                 TrainingError, ["step 42"], "check the loss is finite and name the step")
    assert np.array_equal(w.data, before), (
        "after a nan loss the weights must not change: check the loss before backward and step"
    )

    def check_step(w0, xs, ys, lr, clip_norm):
        """One train_step of x @ w (w 1x1) under mse_loss: loss, norm and w by hand."""
        w = Parameter(np.array([[w0]], dtype=np.float32))
        x, y = np.array(xs, dtype=np.float64), np.array(ys, dtype=np.float64)
        loss, norm = train_step(lambda t: t @ w, mse_loss, SGD([w], lr=lr),
                                (Tensor(x[:, None]), Tensor(y[:, None])), step=3,
                                clip_norm=clip_norm)
        want_loss = np.mean((w0 * x - y) ** 2)
        grad = np.mean(2 * (w0 * x - y) * x)
        scale = min(1.0, clip_norm / (abs(grad) + 1e-6)) if clip_norm else 1.0
        assert abs(loss - want_loss) < 1e-5 * max(1.0, want_loss), (
            f"the loss before the step should be {want_loss:.6g}, got {loss}"
        )
        assert abs(norm - abs(grad)) < 1e-4 * max(1.0, abs(grad)), (
            f"the gradient norm should be {abs(grad):.6g} (before clipping), got {norm}"
        )
        want_w = w0 - lr * grad * scale
        assert abs(w.data[0, 0] - want_w) < 1e-4 * max(1.0, abs(want_w)), (
            f"after the step w should be {want_w:.6g}, got {w.data[0, 0]}"
        )

    check_step(2.0, [1.0, 2.0], [1.0, 2.0], 0.1, None)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_step, {
        "a weight below its target": (-0.5, [1.0, -3.0, 0.5], [2.0, -6.0, 1.0], 0.05, None),
        "clipping a large gradient": (4.0, [3.0, 1.0], [0.0, 0.0], 0.01, 0.5),
        "clipping that does not bite": (1.1, [1.0], [1.0], 0.2, 10.0),
    })
    ### END HIDDEN TESTS


test_unit_train_step()


# %% [markdown]
# ## Part 5: where in the data is step `s`?
#
# To resume a run at step `s` you must feed it the batch that step `s` would have seen.
# Module 05's `DataLoader` makes that possible: with `set_epoch(e)` the order of epoch `e`
# is a pure function of the loader's seed and `e`. With `B = len(loader)` batches per
# epoch, step `s` is batch `s % B` of epoch `s // B`.
#
# `batches_from(loader, step)` yields `(step, batch)` pairs forever, starting at `step`:
# it calls `set_epoch` for each epoch (when the loader has it), skips the first `s % B`
# batches of the first epoch, and goes on epoch after epoch. The loop stops taking
# batches when it is done. Skipping costs the time to assemble the skipped batches but no
# computation on them; a loader that can start at any batch would skip that too.
#
# Example, a loader of 4 batches: `batches_from(loader, 6)` yields steps 6, 7 from epoch 1
# (its batches 2 and 3), then steps 8, 9, 10, 11 from epoch 2, and so on.

# %% nbgrader={"grade": false, "grade_id": "batches-from", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def batches_from(loader, step=0):
    """Yield (step, batch) from global step `step` on, epoch after epoch, forever.

    >>> from tinytorch.data import DataLoader, TensorDataset
    >>> loader = DataLoader(TensorDataset(np.arange(6.0)), batch_size=2)  # 3 batches
    >>> stream = batches_from(loader, step=2)  # resume at step 2
    >>> for _ in range(3):
    ...     step, (x,) = next(stream)
    ...     print(step, x.data.tolist())
    2 [4.0, 5.0]
    3 [0.0, 1.0]
    4 [2.0, 3.0]
    """
    per_epoch = len(loader)
    if per_epoch == 0:
        raise ValueError("the training loader has no batches (an empty data set, or "
                         "drop_last=True with fewer samples than batch_size?)")
    ### BEGIN SOLUTION
    epoch, skip = divmod(step, per_epoch)
    while True:
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        for index, batch in enumerate(loader):
            if index < skip:
                continue
            yield step, batch
            step += 1
        epoch, skip = epoch + 1, 0
    ### END SOLUTION


# %% [markdown]
# ### Test: positions in the data

# %% nbgrader={"grade": true, "grade_id": "test_unit_batches_from", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_batches_from():
    """Step s is batch s % B of epoch s // B, with set_epoch called for every epoch."""

    class Recorder:
        """A loader of n batches that says which epoch and batch each one came from."""

        def __init__(self, n=4):
            self.n, self.epoch, self.epochs_set = n, 0, []

        def set_epoch(self, epoch):
            self.epoch = epoch
            self.epochs_set.append(epoch)

        def __len__(self):
            return self.n

        def __iter__(self):
            return iter([(self.epoch, i) for i in range(self.n)])

    def check_position(n_batches, start, count):
        """batches_from(a loader of n_batches, start): `count` steps, epochs set as it goes."""
        loader = Recorder(n_batches)
        taken = []
        for step, batch in batches_from(loader, start):
            taken.append((step, batch))
            if len(taken) == count:
                break
        want = [(s, (s // n_batches, s % n_batches)) for s in range(start, start + count)]
        assert taken == want, (
            f"batches_from(loader of {n_batches} batches, {start}) yielded {taken}, expected "
            f"{want} as (step, (epoch, batch)): start in epoch {start} // {n_batches} at batch "
            f"{start} % {n_batches}, then go on to the next epoch from its first batch"
        )
        epochs = sorted({e for _, (e, _) in want})
        assert loader.epochs_set == epochs, (
            f"set_epoch should be called with {epochs}, got {loader.epochs_set}: call it "
            "before iterating each epoch, so the shuffled order depends only on (seed, epoch)"
        )

    check_position(4, 6, 6)
    steps = [s for s, _ in zip(range(3), batches_from([("a",), ("b",)], 0))]
    assert steps == [0, 1, 2], "a plain list of batches works too (no set_epoch)"
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_position, {
        "the very first step": (3, 0, 7),
        "a start on an epoch boundary": (5, 10, 6),
        "one batch per epoch": (1, 4, 3),
        "a start late in a long epoch": (9, 35, 4),
    })
    ### END HIDDEN TESTS


test_unit_batches_from()


# %% [markdown]
# ## Part 6: the training loop
#
# `train` puts the parts together. Its arguments are the run's whole description:
#
# ```python
# history = train(model, loss_fn, optimizer, train_loader,
#                 steps=2000,                      # or epochs=10
#                 schedule=CosineWarmup(1e-3, 1e-4, 100, 2000),
#                 clip_norm=1.0,
#                 eval_loader=val_loader, eval_every=250, metric=accuracy,
#                 checkpoint="run.npz", checkpoint_every=500,
#                 resume_from="run.npz")           # continue where that run stopped
# ```
#
# The beginning of `train` is given: it checks the arguments, computes `total` (the
# number of steps), loads `resume_from` to find the `start` step, and creates the
# `History` and the progress `reporter`. You write the loop. For each `(step, batch)` from
# `batches_from(train_loader, start)`:
#
# 1. set the learning rate, `set_lr(optimizer, schedule(step))`, if there is a schedule;
# 2. run `train_step` and `history.record(step, loss, lr, grad_norm, samples, seconds)`;
#    `samples` is the batch size, `_num_samples(inputs)`, and `seconds` the time
#    (`time.perf_counter()`) since the previous step ended, so that assembling the batch
#    counts as part of the step: data loading that cannot keep up is a real bottleneck;
# 3. report it: `reporter.step(step, loss, lr, grad_norm, samples_per_s)`, with the
#    throughput so far, `history.samples / history.seconds`;
# 4. after every `eval_every` steps, `evaluate`, append `{"step": step + 1, **results}` to
#    `history.eval` and call `reporter.evaluation(step, results)`;
# 5. after every `checkpoint_every` steps, `save_checkpoint(checkpoint, model, optimizer,
#    step=step + 1)`: the step stored is the number of steps *done*, the first one a
#    resumed run will do;
# 6. stop after step `total - 1`.
#
# Call `reporter.close()` when the loop ends, even by an exception (`try`/`finally`), so a
# progress bar never leaves the terminal in a strange state. Then evaluate once more
# (unless the last step just did) and save a final checkpoint, each only when asked for.
# With `resume_from`, `start` comes from the checkpoint: `batches_from` finds the batch,
# the optimizer has its state, the generator its position, and the schedule needs
# nothing but the step. (A run resumed after it finished returns at once, before the loop.)
#
# **Progress** (given, `_Reporter`). On a terminal, `train` shows a `rich` progress bar:
# step, loss, samples per second and time left. Where output is not a terminal (a
# notebook, a log file, a test runner) a bar would print hundreds of escape codes, so it
# prints ten plain lines instead. `progress=False` prints nothing; `progress=console`
# draws on a `rich.console.Console` of your choice. The `log` function, if given,
# receives every step's and every evaluation's record as a dict.

# %% nbgrader={"grade": false, "grade_id": "history", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
@dataclass
class History:
    """What a run did: per step (loss, lr, gradient norm) and per evaluation.

    >>> history = History()
    >>> history.record(step=0, loss=2.5, lr=0.1, grad_norm=1.0, samples=32, seconds=0.5)
    >>> history.record(step=1, loss=2.0, lr=0.1, grad_norm=0.8, samples=32, seconds=0.5)
    >>> history
    History(steps 0..1, loss 2.5000 -> 2.0000, 64 samples/s)
    """

    step: list = field(default_factory=list)
    loss: list = field(default_factory=list)
    lr: list = field(default_factory=list)
    grad_norm: list = field(default_factory=list)
    eval: list = field(default_factory=list)  # dicts {"step": s, "loss": ..., metric: ...}
    samples: int = 0
    seconds: float = 0.0  # time spent in training steps, loading their batches included

    def record(self, step, loss, lr, grad_norm, samples, seconds):
        self.step.append(step)
        self.loss.append(loss)
        self.lr.append(lr)
        self.grad_norm.append(grad_norm)
        self.samples += samples
        self.seconds += seconds

    def __repr__(self):
        if not self.step:
            return "History(no steps)"
        text = (f"History(steps {self.step[0]}..{self.step[-1]}, loss {self.loss[0]:.4f} -> "
                f"{self.loss[-1]:.4f}, {self.samples / max(self.seconds, 1e-9):.0f} samples/s")
        if self.eval:
            last = self.eval[-1]
            text += f", eval at step {last['step']}: " + ", ".join(
                f"{k} {v:.4f}" for k, v in last.items() if k != "step")
        return text + ")"


class _Reporter:
    """Progress: a rich bar on a terminal, ten plain lines elsewhere, nothing if disabled.

    `progress` is True, False, or a rich Console to draw on.
    """

    def __init__(self, progress, total, start, log=None):
        self.log, self.bar, self.console, self.every = log, None, None, 0
        self.total = total
        if progress is False or progress is None:
            return
        from rich.console import Console

        self.console = progress if isinstance(progress, Console) else Console()
        if self.console.is_terminal:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeRemainingColumn)

            self.bar = Progress(
                TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[rate]} samples/s"),
                TimeRemainingColumn(), console=self.console,
            )
            self.task = self.bar.add_task("train", total=total, completed=start, loss="-", rate="-")
            self.bar.start()
        else:
            self.every = max(1, (total - start) // 10)

    def step(self, step, loss, lr, grad_norm, samples_per_s):
        if self.log is not None:
            self.log({"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm,
                      "samples_per_s": samples_per_s})
        if self.bar is not None:
            self.bar.update(self.task, completed=step + 1, loss=f"{loss:.4f}",
                            rate=f"{samples_per_s:,.0f}")
        elif self.console is not None and ((step + 1) % self.every == 0 or step + 1 == self.total):
            self.console.print(f"step {step + 1}/{self.total}  loss {loss:.4f}  lr {lr:.3g}  "
                               f"{samples_per_s:,.0f} samples/s")

    def evaluation(self, step, results):
        if self.log is not None:
            self.log({"step": step, **{f"eval_{k}": v for k, v in results.items()}})
        if self.console is not None:
            text = "  ".join(f"{k} {v:.4f}" for k, v in results.items())
            self.console.print(f"eval after step {step + 1}: {text}")

    def close(self):
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


# %% nbgrader={"grade": false, "grade_id": "train", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def train(model, loss_fn, optimizer, train_loader, *, steps=None, epochs=None, schedule=None,
          clip_norm=None, eval_loader=None, eval_every=None, metric=None, checkpoint=None,
          checkpoint_every=None, resume_from=None, progress=True, log=None):
    """Train for `steps` optimizer steps (or `epochs` passes over train_loader).

    Returns a History. Evaluates on eval_loader every eval_every steps and at the end,
    saves to `checkpoint` every checkpoint_every steps and at the end, and continues the
    run saved in `resume_from` if given. Raises TrainingError at the first non-finite loss.

    >>> from tinytorch.data import DataLoader, TensorDataset
    >>> from tinytorch.nn import Linear, mse_loss
    >>> from tinytorch.optim import SGD
    >>> x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(-1, 1)
    >>> data = TensorDataset(x, 3 * x + 1)
    >>> loader = DataLoader(data, batch_size=8, shuffle=True, seed=0)
    >>> model = Linear(1, 1)
    >>> opt = SGD(model.parameters(), lr=0.3)
    >>> history = train(model, mse_loss, opt, loader, epochs=20, progress=False)
    >>> len(history.loss), round(model.weight.item(), 2), round(model.bias.item(), 2)
    (80, 3.0, 1.0)
    """
    if (steps is None) == (epochs is None):
        raise ValueError("pass exactly one of steps= or epochs=")
    total = int(steps) if steps is not None else int(epochs) * len(train_loader)
    start = 0
    if resume_from is not None:
        start, _ = load_checkpoint(resume_from, model, optimizer)
    history = History()
    if start >= total:  # resumed from a run that had already finished
        return history
    reporter = _Reporter(progress, total, start, log)
    model.train()
    ### BEGIN SOLUTION
    last_eval = None
    try:
        tick = time.perf_counter()
        for step, batch in batches_from(train_loader, start):
            lr = schedule(step) if schedule is not None else optimizer.lr
            set_lr(optimizer, lr)
            loss, norm = train_step(model, loss_fn, optimizer, batch, step, clip_norm)
            seconds = time.perf_counter() - tick  # since the last step: loading the batch too
            history.record(step, loss, lr, norm, _num_samples(batch[0]), seconds)
            reporter.step(step, loss, lr, norm, history.samples / max(history.seconds, 1e-9))
            done = step + 1
            if eval_loader is not None and eval_every and done % eval_every == 0:
                results = evaluate(model, loss_fn, eval_loader, metric)
                history.eval.append({"step": done, **results})
                reporter.evaluation(step, results)
                last_eval = done
            if checkpoint is not None and checkpoint_every and done % checkpoint_every == 0:
                save_checkpoint(checkpoint, model, optimizer, step=done)
            if done == total:
                break
            tick = time.perf_counter()  # evaluation and saving do not count as step time
    finally:
        reporter.close()
    if eval_loader is not None and last_eval != total:
        results = evaluate(model, loss_fn, eval_loader, metric)
        history.eval.append({"step": total, **results})
        reporter.evaluation(total - 1, results)
    if checkpoint is not None:
        save_checkpoint(checkpoint, model, optimizer, step=total)
    ### END SOLUTION
    return history


# %% [markdown]
# ### Test: a model that learns, and a run that diverges
#
# The test trains a small classifier on two interleaved half-moons, a problem no straight
# line separates, and checks that the loss falls and the accuracy rises. A second run
# with an absurd learning rate must stop with a `TrainingError` that names its step.

# %% nbgrader={"grade": false, "grade_id": "toy-data", "locked": true, "schema_version": 3, "solution": false, "task": false}
def two_moons(n=256, noise=0.1, seed=0):
    """Two interleaved half circles, labels 0 and 1: a classic non-linear toy problem."""
    rng = np.random.default_rng(seed)
    angle = rng.uniform(0, np.pi, n)
    label = rng.integers(0, 2, n)
    x = np.where(label == 0, np.cos(angle), 1 - np.cos(angle))
    y = np.where(label == 0, np.sin(angle), 0.5 - np.sin(angle))
    points = np.stack([x, y], axis=1) + rng.normal(0, noise, (n, 2))
    return points.astype(np.float32), label.astype(np.int64)


def moons_loaders(batch_size=32, seed=0):
    points, labels = two_moons(seed=seed)
    train_set = TensorDataset(Tensor(points[:192]), Tensor(labels[:192], dtype=np.int64))
    val_set = TensorDataset(Tensor(points[192:]), Tensor(labels[192:], dtype=np.int64))
    return (DataLoader(train_set, batch_size=batch_size, shuffle=True, seed=seed),
            DataLoader(val_set, batch_size=64))


# %% nbgrader={"grade": true, "grade_id": "test_unit_train", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_train():
    """A small MLP learns two moons; a huge learning rate raises TrainingError with the step."""
    manual_seed(0)
    train_loader, val_loader = moons_loaders()
    model = Sequential(Linear(2, 32), ReLU(), Linear(32, 32), ReLU(), Linear(32, 2))
    optimizer = Adam(model.parameters(), lr=0.02)
    history = train(model, cross_entropy, optimizer, train_loader, steps=150,
                    eval_loader=val_loader, eval_every=50, metric=accuracy, progress=False)
    assert isinstance(history, History) and len(history.loss) == 150, (
        f"train(steps=150) should record 150 losses, got {len(history.loss)}"
    )
    assert history.step == list(range(150)), "history.step should be 0, 1, ..., 149"
    first, last = np.mean(history.loss[:10]), np.mean(history.loss[-10:])
    assert last < 0.3 * first, (
        f"the training loss went from {first:.3f} to {last:.3f}: it should fall by more than "
        "70%. Is the optimizer stepping (zero_grad, backward, step in that order)?"
    )
    assert [e["step"] for e in history.eval] == [50, 100, 150], (
        f"with eval_every=50 over 150 steps, evaluate after steps 50, 100, 150; got "
        f"{[e['step'] for e in history.eval]}"
    )
    assert history.eval[-1]["accuracy"] > 0.9, (
        f"validation accuracy is {history.eval[-1]['accuracy']:.2f}, expected > 0.9"
    )
    assert model.training, "after train the model must be in training mode"

    schedule = CosineWarmup(0.01, 0.001, 10, 40)
    history = train(model, cross_entropy, Adam(model.parameters()), train_loader, steps=20,
                    schedule=schedule, progress=False)
    wanted = [schedule(s) for s in range(20)]
    off = [s for s, (a, b) in enumerate(zip(history.lr, wanted)) if a != b]
    assert history.lr == wanted, (
        "with a schedule, step s must use lr = schedule(s): set optimizer.lr before each step"
        + (f"; step {off[0]} used lr {history.lr[off[0]]:.6g}, expected schedule({off[0]}) = "
           f"{wanted[off[0]]:.6g}" if off else f"; recorded {len(history.lr)} rates, expected 20")
    )
    assert len(train(model, cross_entropy, SGD(model.parameters(), lr=0.01), train_loader,
                     epochs=2, progress=False).loss) == 2 * len(train_loader), (
        "epochs=2 means 2 * len(train_loader) steps"
    )

    manual_seed(0)
    model = Sequential(Linear(2, 32), ReLU(), Linear(32, 2))
    with np.errstate(over="ignore", invalid="ignore"):  # the divergence is the point here
        expect_error("train with SGD(lr=1e6), which diverges",
                     lambda: train(model, cross_entropy, SGD(model.parameters(), lr=1e6),
                                   train_loader, steps=50, progress=False),
                     TrainingError, ["step "],
                     "train_step raises it naming the step; let it through")

    def check_counts(n, batch_size, eval_every, steps=None, epochs=None):
        """What train records on a tiny problem: one loss per step, the evaluations' steps."""
        x = np.random.default_rng(n).standard_normal((n, 2)).astype(np.float32)
        loader = DataLoader(TensorDataset(x, (x[:, 0] > 0).astype(np.int64)),
                            batch_size=batch_size)
        manual_seed(0)
        tiny = Sequential(Linear(2, 2))
        history = train(tiny, cross_entropy, SGD(tiny.parameters(), lr=0.1), loader,
                        steps=steps, epochs=epochs, eval_loader=loader, eval_every=eval_every,
                        progress=False)
        total = steps if steps is not None else epochs * len(loader)
        assert history.step == list(range(total)) and len(history.loss) == total, (
            f"train over {total} steps should record steps 0..{total - 1} and one loss each, "
            f"got {len(history.loss)} losses and steps {history.step[:3]}..."
        )
        want = sorted(set(range(eval_every, total + 1, eval_every)) | {total})
        got = [e["step"] for e in history.eval]
        assert got == want, (
            f"with eval_every={eval_every} over {total} steps, evaluate after steps {want} (a "
            f"multiple of eval_every, and once at the end), got {got}"
        )

    check_counts(20, 4, 2, steps=6)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_counts, {
        "steps that are not a multiple of the evaluation period": (20, 4, 3, 7),
        "epochs of uneven batches": (10, 4, 2, None, 3),
        "more steps than one epoch": (8, 8, 5, 11),
    })
    ### END HIDDEN TESTS


test_unit_train()


# %% [markdown]
# ## Part 7: resuming exactly
#
# Stop a run after 32 steps, in the middle of an epoch, and resume it: every later loss
# should be *identical*, bit for bit, to the run that never stopped. Not close: identical.
# Anything less means some state was lost, and lost state shows up later as a loss curve
# that jumps at every restart or a result nobody can reproduce. The state of a run, and
# where each piece is kept:
#
# | state | kept in | restored by |
# |-------|---------|-------------|
# | weights | `model/...` | `model.load_state_dict` |
# | optimizer buffers, step counts, lr | `optim/...` | `optimizer.load_state_dict` |
# | step number | `meta["step"]` | `load_checkpoint`'s return value |
# | learning rate to come | nothing: `schedule(step)` | the step |
# | position in the data | nothing: `(seed, epoch, batch)` | `batches_from(loader, step)` |
# | dropout's random numbers | `meta["generator"]` | `bit_generator.state = ...` |
#
# The test below checks it with dropout on, a shuffled loader, a schedule and AdamW: a
# 60-step run, against a 32-step run that saves a checkpoint, then a *new* model and
# optimizer (with other random initial weights) resumed from it for the remaining 28 steps.
# The loader has 5 batches per epoch, so step 32 is batch 2 of epoch 6.

# %% nbgrader={"grade": true, "grade_id": "test_unit_resume", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_resume():
    """32 steps + save + new model + load + 28 steps gives the same 60 losses as 60 steps."""
    def make_run(seed):
        manual_seed(seed)
        model = Sequential(Linear(2, 32), ReLU(), Dropout(0.2), Linear(32, 2))
        return model, AdamW(model.parameters(), lr=0.01)

    def check_resume(batch_size, total, split, schedule):
        """`total` steps straight, or `split` steps + checkpoint + a new model + the rest."""
        train_loader, _ = moons_loaders(batch_size=batch_size)
        model, opt = make_run(0)
        straight = train(model, cross_entropy, opt, train_loader, steps=total, schedule=schedule,
                         progress=False)
        path = os.path.join(tempfile.mkdtemp(), "run.npz")
        model, opt = make_run(0)
        first = train(model, cross_entropy, opt, train_loader, steps=split, schedule=schedule,
                      checkpoint=path, progress=False)
        assert os.path.isfile(path), "train(checkpoint=path) should save a checkpoint at the end"
        model, opt = make_run(99)  # different initial weights: everything must come from the file
        second = train(model, cross_entropy, opt, train_loader, steps=total, schedule=schedule,
                       resume_from=path, progress=False)
        assert second.step == list(range(split, total)), (
            f"the resumed run should do steps {split}..{total - 1}, did {second.step[:3]}...: the "
            f"checkpoint saved at the end of a {split}-step run holds step {split} (the number "
            "of steps done), and train(resume_from=...) starts at the step stored in it"
        )
        resumed = first.loss + second.loss
        differ = [s for s, (a, b) in enumerate(zip(straight.loss, resumed)) if a != b]
        assert not differ or differ[0] >= split, (
            f"the first {split} steps, before any checkpoint, already differ from the "
            f"uninterrupted run at step {differ[0]} ({straight.loss[differ[0]]:.6f} vs "
            f"{resumed[differ[0]]:.6f}), with the same seed: the data order depends on what the "
            "loader did before. batches_from must call loader.set_epoch(epoch) before each epoch"
            " so that the order depends on the step only"
        )
        assert not differ, (
            f"the resumed losses differ from the uninterrupted run from step {differ[0]} on "
            f"({straight.loss[differ[0]]:.6f} vs {resumed[differ[0]]:.6f}). Is every piece of "
            "state restored: weights, optimizer state, the step, the data position "
            "(batches_from with set_epoch) and the generator state (for dropout)?"
        )

    # 192 samples in batches of 40: 5 batches per epoch
    check_resume(40, 60, 32, CosineWarmup(0.02, 0.002, 10, 60))
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_resume, {
        "a split inside the warm-up": (64, 20, 3, CosineWarmup(0.05, 0.005, 6, 20)),
        "a split on an epoch boundary": (48, 12, 4, None),
    })
    ### END HIDDEN TESTS


test_unit_resume()


# %% [markdown]
# ## Part 8: safetensors, the format open models are shared in
#
# The `.npz` checkpoint of Part 2 is ours: only TinyTorch reads it. Open-weights models
# (GPT-2, Llama, Qwen) are shared as **safetensors** files, a format Hugging Face designed
# for two reasons. Loading one never runs code, like our `.npz`; and it can be
# **memory-mapped**, which `.npz` (a zip archive) cannot. The whole format fits in a
# paragraph, so you can write both the reader and the writer yourself.
#
# ```
# bytes 0..7          N, the header's length: an unsigned 64-bit integer, little-endian
# bytes 8..8+N-1      the header: UTF-8 JSON, padded with spaces to a multiple of 8 bytes
# bytes 8+N..end      the data: every tensor's raw bytes, little-endian, C order, back to back
# ```
#
# The header maps each tensor's name to its dtype, shape and byte range, and may carry one
# extra entry, `__metadata__`, a dictionary of strings to strings (a format tag, a commit):
#
# ```json
# {"__metadata__": {"format": "np"},
#  "wte.weight": {"dtype": "F32", "shape": [65, 64], "data_offsets": [0, 16640]},
#  "ln_f.bias":  {"dtype": "F32", "shape": [64],     "data_offsets": [16640, 16896]}}
# ```
#
# `data_offsets` are `[begin, end)` **relative to the first byte after the header**, so
# tensor `t` lives in bytes `8 + N + begin` to `8 + N + end` of the file, and
# `end - begin` must equal `prod(shape) * itemsize` (65 x 64 x 4 = 16,640 above). The
# dtype names are `F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL` (and FP8 kinds we
# do not read). Padding the JSON to a multiple of 8 makes the data start at a multiple of
# 8; writers that also put wide dtypes first (the reference writer orders by dtype, widest
# first, then by name) keep every tensor aligned to its item size.
#
# **Memory-mapping.** `np.memmap(path, mode="r")` asks the operating system to map the
# file into the address space without reading it. A tensor is then a *view*: an array
# whose bytes are the file's bytes, read from disk only when touched and shared with the
# page cache. Loading a 2 GB checkpoint this way costs almost no memory and no time; the
# `np.load` way reads all 2 GB into a second copy. (`mode="r"` makes the views read-only:
# an accidental `w += 1` raises instead of writing into the file.)
#
# **BF16.** `bfloat16` is float32 with the low 16 bits of the mantissa cut off: the same
# sign and 8-bit exponent, 7 mantissa bits. NumPy has no such dtype, but the conversion
# is exact and one line: read the bits as `uint16`, widen to `uint32`, shift left by 16
# and view the result as `float32`. (This one dtype needs a new array; it cannot be a view.)
#
# **A file is untrusted input.** A reader that believes the header can be made to read
# outside the file (an offset past the end), to give two tensors the same bytes, or to
# allocate a 10 GB header. So check everything before touching the data, and fail with a
# `SafetensorsError` that names the file and the tensor:
#
# | check | what it catches |
# |-------|-----------------|
# | at least 8 bytes; `8 + N` within the file | a truncated file, a header length past the end |
# | the header is UTF-8 JSON, an object, at most 100 MB | a file that is not safetensors |
# | every dtype is known; every shape a list of integers >= 0 | a corrupted or newer file |
# | `0 <= begin <= end`, `end - begin == prod(shape) * itemsize` | offsets that lie about the size |
# | sorted by `begin`, each starts where the last ended, and ends the file | overlaps, holes |
#
# The last check is the spec's own: the data must be covered exactly, without holes, so that
# no file can hide a second payload between its tensors.
#
# Given below: the error class, the dtype table and atomic writing (Part 2's idea, for any
# file). You write the writer, the header reader, the loader and the folder loader.

# %% nbgrader={"grade": false, "grade_id": "safetensors-given", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
class SafetensorsError(ValueError):
    """A safetensors file (or index) that breaks the format; names the file and the tensor.

    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "model.safetensors")
    >>> with open(path, "wb") as handle:
    ...     _ = handle.write(b"\\x05\\x00")  # two bytes: not even a header length
    >>> try:
    ...     read_safetensors_header(path)
    ... except SafetensorsError as error:
    ...     print(str(error).split(": ")[1])
    the file is 2 bytes, shorter than the 8-byte header length
    >>> folder.cleanup()
    """


# safetensors name -> NumPy dtype of the stored bytes (little-endian), in the order in which
# the reference writer lays tensors out: widest first (then, within one dtype, by name).
SAFETENSORS_DTYPES = {
    "U64": np.dtype("<u8"), "I64": np.dtype("<i8"), "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"), "U32": np.dtype("<u4"), "I32": np.dtype("<i4"),
    "BF16": np.dtype("<u2"),  # bfloat16 bits; load_safetensors widens them to float32
    "F16": np.dtype("<f2"), "U16": np.dtype("<u2"), "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"), "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}
SAFETENSORS_MAX_HEADER = 100 * 2**20  # bytes; the reference implementation's limit too


def _safetensors_dtype_name(array, name, path):
    """The safetensors dtype name of a NumPy array ("F32", ...), or SafetensorsError."""
    for dtype_name, dtype in SAFETENSORS_DTYPES.items():
        if dtype_name != "BF16" and array.dtype.kind == dtype.kind \
                and array.dtype.itemsize == dtype.itemsize:
            return dtype_name
    raise SafetensorsError(
        f"cannot write tensor {name!r} to {os.fspath(path)!r}: dtype {array.dtype} has no "
        f"safetensors name (supported: float16/32/64, int8-64, uint8-64, bool); convert it "
        "with .astype(np.float32) first"
    )


def _write_atomically(path, write):
    """Call write(handle) on a temporary file beside `path`, then rename it over `path`."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".tmp-{os.urandom(6).hex()}-{os.path.basename(path)}")
    # O_EXCL: never reuse a file that exists; mode 0o666 minus the umask, as open() gives
    # (mkstemp's files are private, 0o600, and would stay so after the rename).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)  # atomic: readers see the old file or the new, never half
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


# %% [markdown]
# ### Writing
#
# Lay the tensors out one after the other in the order of `SAFETENSORS_DTYPES` (widest
# first), and by name within one dtype: that is the `safetensors` package's order, so your
# files come out byte for byte the same as its files. Write the header compactly
# (`json.dumps(..., separators=(",", ":"), ensure_ascii=False)`), pad it with spaces to a
# multiple of 8, and write length, header and data in one atomic file. The given code has
# already made every array little-endian and C-ordered (`astype(dtype.newbyteorder("<"),
# order="C", copy=False)`, a no-op for the arrays of every common machine).

# %% nbgrader={"grade": false, "grade_id": "save-safetensors", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def save_safetensors(path, tensors, metadata=None):
    """Write {name: array} (and optional {str: str} metadata) as one safetensors file.

    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "model.safetensors")
    >>> save_safetensors(path, {"w": np.ones((2, 3), np.float32)}, metadata={"a": "b"})
    >>> os.path.getsize(path)  # 8 bytes of length, the JSON header, 24 bytes of data
    120
    >>> folder.cleanup()
    """
    arrays, dtypes = {}, {}
    for name, value in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise SafetensorsError(f"tensor names must be strings other than '__metadata__', "
                                   f"got {name!r} for {os.fspath(path)!r}")
        array = np.asarray(value)
        dtypes[name] = _safetensors_dtype_name(array, name, path)
        arrays[name] = array.astype(array.dtype.newbyteorder("<"), order="C", copy=False)
    if metadata is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in dict(metadata).items()):
        raise TypeError(f"safetensors metadata must map strings to strings, got {metadata!r}")
    ### BEGIN SOLUTION
    rank = {dtype_name: i for i, dtype_name in enumerate(SAFETENSORS_DTYPES)}
    order = sorted(arrays, key=lambda n: (rank[dtypes[n]], n))
    header = {}
    if metadata is not None:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name in order:
        size = arrays[name].nbytes
        header[name] = {"dtype": dtypes[name], "shape": list(arrays[name].shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data then starts at a multiple of 8

    def write(handle):
        handle.write(len(text).to_bytes(8, "little"))
        handle.write(text)
        for name in order:
            handle.write(arrays[name].reshape(-1).view(np.uint8).data)

    _write_atomically(path, write)
    ### END SOLUTION


# %% [markdown]
# ### Test: the bytes on disk follow the spec

# %% nbgrader={"grade": true, "grade_id": "test_unit_save_safetensors", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_save_safetensors():
    """Length, padded JSON header, offsets relative to the data, raw little-endian bytes."""
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "model.safetensors")
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    ids = np.array([7, -1], dtype=np.int64)
    save_safetensors(path, {"w": w, "ids": ids}, metadata={"format": "np"})
    assert sorted(os.listdir(folder)) == ["model.safetensors"], (
        f"the folder holds {sorted(os.listdir(folder))}: write one file, atomically, and "
        "leave no temporary file behind"
    )
    data = open(path, "rb").read()
    n = int.from_bytes(data[:8], "little")
    assert 8 + n <= len(data), (
        f"the first 8 bytes say the header is {n} bytes, but the file has {len(data)}: write "
        "len(header).to_bytes(8, 'little') first, then the header"
    )
    assert n % 8 == 0, (
        f"the header is {n} bytes, expected a multiple of 8 ({n + (-n % 8)}): pad the JSON "
        "with spaces to a multiple of 8"
    )
    header = json.loads(data[8:8 + n])
    assert header.get("__metadata__") == {"format": "np"}, (
        f"__metadata__ is {header.get('__metadata__')!r}, expected {{'format': 'np'}}"
    )
    assert header.get("w", {}).get("dtype") == "F32" and header["w"]["shape"] == [2, 3], (
        f"the entry for 'w' is {header.get('w')}: expected dtype 'F32' and shape [2, 3]"
    )
    assert header.get("ids", {}).get("dtype") == "I64", (
        f"the entry for 'ids' is {header.get('ids')}: an int64 array is 'I64'"
    )
    for name, array in (("w", w), ("ids", ids)):
        begin, end = header[name]["data_offsets"]
        stored = data[8 + n + begin:8 + n + end]
        assert stored == array.astype(array.dtype.newbyteorder("<")).tobytes(), (
            f"bytes {begin}..{end} after the header should be {name!r}'s raw little-endian "
            f"bytes: data_offsets are relative to the first byte after the header, and the "
            f"data of every tensor is written in the same order as the offsets count"
        )
    assert len(data) == 8 + n + w.nbytes + ids.nbytes, (
        f"the file is {len(data)} bytes, expected 8 + {n} + {w.nbytes + ids.nbytes}: nothing "
        "may follow the last tensor"
    )

    codes = {"float64": "F64", "float32": "F32", "float16": "F16", "int64": "I64",
             "int32": "I32", "int16": "I16", "int8": "I8", "uint64": "U64", "uint32": "U32",
             "uint16": "U16", "uint8": "U8", "bool": "BOOL"}

    def check_layout(tensors, metadata):
        """The file save_safetensors writes for `tensors`: header, dtypes, shapes, bytes."""
        path = os.path.join(tempfile.mkdtemp(), "t.safetensors")
        save_safetensors(path, tensors, metadata=metadata)
        data = open(path, "rb").read()
        n = int.from_bytes(data[:8], "little")
        assert n % 8 == 0 and 8 + n <= len(data), (
            f"a header of {n} bytes in a file of {len(data)}: write its length in 8 bytes, "
            "then the JSON padded with spaces to a multiple of 8"
        )
        header = json.loads(data[8:8 + n])
        if metadata is not None:
            assert header.get("__metadata__") == metadata, (
                f"__metadata__ is {header.get('__metadata__')!r}, expected {metadata!r}"
            )
        for name, array in tensors.items():
            array = np.asarray(array)
            entry = header.get(name, {})
            assert entry.get("dtype") == codes[array.dtype.name], (
                f"the entry for {name!r} is {entry}: a {array.dtype} array is "
                f"{codes[array.dtype.name]!r}"
            )
            assert entry["shape"] == list(array.shape), (
                f"the entry for {name!r} has shape {entry['shape']}, expected {list(array.shape)}"
            )
            begin, end = entry["data_offsets"]
            assert data[8 + n + begin:8 + n + end] == array.astype(
                array.dtype.newbyteorder("<")).tobytes(), (
                f"bytes {begin}..{end} after the header should be {name!r}'s raw little-endian "
                "bytes: data_offsets are relative to the first byte after the header"
            )
        assert len(data) == 8 + n + sum(np.asarray(a).nbytes for a in tensors.values()), (
            "nothing may follow the last tensor, and no tensor may be written twice"
        )

    check_layout({"w": w, "ids": ids}, {"format": "np"})
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    rng = np.random.default_rng(8001)
    hidden_cases(check_layout, {
        "half precision, flags and bytes": ({
            "half": rng.standard_normal((2, 1, 3)).astype(np.float16),
            "mask": np.array([[True, False], [False, True]]),
            "raw": np.arange(250, 256, dtype=np.uint8)}, {"a": "b", "c": "d"}),
        "a scalar and an empty array, no metadata": ({
            "scalar": np.float64(-1.25), "empty": np.zeros((0, 3), dtype=np.int32)}, None),
        "one tensor of many elements": ({"big": rng.standard_normal(3000).astype(np.float32)},
                                        {}),
    })
    ### END HIDDEN TESTS


test_unit_save_safetensors()


# %% [markdown]
# ### Reading the header, trusting nothing
#
# Read the 8-byte length, check it against the file's size *before* reading that many
# bytes, decode the JSON, then check every entry and the layout as the table above says.
# Return the tensor entries (without `__metadata__`) and the file offset where the data
# starts, `8 + N`. Only then is it safe to map the data.

# %% nbgrader={"grade": false, "grade_id": "read-safetensors-header", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def read_safetensors_header(path):
    """(header, data_start): the checked entries {name: {dtype, shape, data_offsets}},
    without "__metadata__" (see read_safetensors_metadata), and the byte offset of the data.
    Raises SafetensorsError, naming the file and the tensor, on any breach of the format.

    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "model.safetensors")
    >>> save_safetensors(path, {"w": np.ones((2, 3), np.float32), "step": np.array(7)})
    >>> header, data_start = read_safetensors_header(path)
    >>> header["step"]
    {'dtype': 'I64', 'shape': [], 'data_offsets': [0, 8]}
    >>> header["w"], data_start
    ({'dtype': 'F32', 'shape': [2, 3], 'data_offsets': [8, 32]}, 120)
    >>> folder.cleanup()
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise SafetensorsError(f"there is no safetensors file at {path!r}")
    size = os.path.getsize(path)

    def bad(problem, tensor=None):
        where = f"tensor {tensor!r} in {path!r}" if tensor is not None else repr(path)
        return SafetensorsError(f"{where}: {problem}")

    ### BEGIN SOLUTION
    if size < 8:
        raise bad(f"the file is {size} bytes, shorter than the 8-byte header length: it is "
                  "truncated or not a safetensors file")
    with open(path, "rb") as handle:
        n = int.from_bytes(handle.read(8), "little")
        if n > size - 8:
            raise bad(f"the header length says {n} bytes, but only {size - 8} follow: the file "
                      "is truncated or not a safetensors file")
        if n > SAFETENSORS_MAX_HEADER:
            raise bad(f"the header length is {n} bytes, over the {SAFETENSORS_MAX_HEADER} "
                      "byte limit: not a safetensors file")
        text = handle.read(n)
    try:
        header = json.loads(text.decode("utf-8"))
    except ValueError as error:  # UnicodeDecodeError is a ValueError too
        raise bad(f"the header is not UTF-8 JSON ({error}): not a safetensors file, or "
                  "corrupted") from None
    if not isinstance(header, dict):
        raise bad(f"the header is JSON {type(header).__name__}, not an object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise bad(f"__metadata__ must map strings to strings, got {metadata!r}")

    data_size = size - 8 - n
    for name, entry in header.items():
        if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
            raise bad(f"the entry {entry!r} needs 'dtype', 'shape' and 'data_offsets'", name)
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in SAFETENSORS_DTYPES:
            raise bad(f"unknown dtype {dtype!r}; this reader knows {sorted(SAFETENSORS_DTYPES)}",
                      name)
        if not isinstance(shape, list) or not all(
                type(d) is int and d >= 0 for d in shape):
            raise bad(f"the shape {shape!r} is not a list of integers >= 0", name)
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(
                type(o) is int for o in offsets):
            raise bad(f"data_offsets {offsets!r} is not a pair of integers [begin, end]", name)
        begin, end = offsets
        if not 0 <= begin <= end:
            raise bad(f"data_offsets [{begin}, {end}] are negative or reversed: need "
                      "0 <= begin <= end", name)
        expected = math.prod(shape) * SAFETENSORS_DTYPES[dtype].itemsize
        if end - begin != expected:
            raise bad(f"data_offsets [{begin}, {end}] hold {end - begin} bytes, but shape "
                      f"{shape} of {dtype} needs {expected}", name)
        if end > data_size:
            raise bad(f"data_offsets [{begin}, {end}] run past the end of the data "
                      f"({data_size} bytes): the file is truncated", name)

    covered, previous = 0, None
    for name in sorted(header, key=lambda k: tuple(header[k]["data_offsets"])):
        begin, end = header[name]["data_offsets"]
        if begin < covered:
            raise bad(f"data_offsets [{begin}, {end}] overlap tensor {previous!r}, which ends "
                      f"at {covered}", name)
        if begin > covered:
            raise bad(f"the data has a hole: bytes {covered}..{begin} belong to no tensor "
                      "(the spec forbids holes)", name)
        covered, previous = end, name
    if covered != data_size:
        raise bad(f"{data_size - covered} bytes after the last tensor belong to no tensor "
                  "(the spec forbids trailing data)")
    return header, 8 + n
    ### END SOLUTION


def read_safetensors_metadata(path):
    """The file's "__metadata__" ({str: str}; {} when it has none), after checking the file.

    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "model.safetensors")
    >>> save_safetensors(path, {"w": np.zeros(2, np.float32)}, metadata={"step": "500"})
    >>> read_safetensors_metadata(path)
    {'step': '500'}
    >>> folder.cleanup()
    """
    _, data_start = read_safetensors_header(path)
    with open(os.fspath(path), "rb") as handle:
        handle.seek(8)
        return json.loads(handle.read(data_start - 8).decode("utf-8")).get("__metadata__", {})


# %% [markdown]
# ### Test: every kind of corrupt file is refused, by name

# %% nbgrader={"grade": true, "grade_id": "test_unit_read_safetensors_header", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def _safetensors_bytes(header, data=b""):
    """A file's bytes from a header dict (written as given, however wrong) and data bytes."""
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + data


def test_unit_read_safetensors_header():
    """A good header comes back checked; each breach raises SafetensorsError naming the file."""
    folder = tempfile.mkdtemp()

    def write(name, content):
        path = os.path.join(folder, name)
        with open(path, "wb") as handle:
            handle.write(content)
        return path

    good = {"__metadata__": {"k": "v"},
            "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "U8", "shape": [3], "data_offsets": [8, 11]}}
    path = write("good.safetensors", _safetensors_bytes(good, bytes(11)))
    header, start = read_safetensors_header(path)
    assert set(header) == {"a", "b"}, (
        f"the header came back with entries {sorted(header)}: return the tensors' entries, "
        "without '__metadata__'"
    )
    n = int.from_bytes(open(path, "rb").read(8), "little")
    assert start == 8 + n, (
        f"data_start is {start}, expected 8 + {n}: the data begins after the 8-byte length "
        "and the header"
    )
    assert read_safetensors_metadata(path) == {"k": "v"}, "the metadata should come back"

    def entry(begin, end, dtype="F32", shape=(2,)):
        return {"dtype": dtype, "shape": list(shape), "data_offsets": [begin, end]}

    whole = _safetensors_bytes(good, bytes(11))
    cases = [  # (what, file bytes, a word the message must contain)
        ("a 5-byte file", b"\x01\x02\x03\x04\x05", None),
        ("a header length past the end", (10**6).to_bytes(8, "little") + b"{}", None),
        ("a header that is not JSON", (8).to_bytes(8, "little") + b"not json", None),
        ("a truncated data section", whole[:-3], "b"),
        ("an unknown dtype", _safetensors_bytes({"w": entry(0, 8, dtype="F12")}, bytes(8)), "w"),
        ("offsets that do not match shape x itemsize",
         _safetensors_bytes({"w": entry(0, 4)}, bytes(4)), "w"),
        ("negative offsets", _safetensors_bytes({"w": entry(-8, 0)}, bytes(8)), "w"),
        ("reversed offsets", _safetensors_bytes({"w": entry(8, 0)}, bytes(8)), "w"),
        ("offsets past the data", _safetensors_bytes({"w": entry(8, 16)}, bytes(8)), "w"),
        ("overlapping tensors",
         _safetensors_bytes({"w": entry(0, 8), "v": entry(4, 12)}, bytes(12)), "v"),
        ("a hole between tensors",
         _safetensors_bytes({"w": entry(0, 8), "v": entry(12, 20)}, bytes(20)), "v"),
        ("a shape that is not a list of integers",
         _safetensors_bytes({"w": entry(0, 8, shape=("2",))}, bytes(8)), "w"),
    ]

    def check_refused(what, content, tensor):
        """read_safetensors_header refuses `content` with a SafetensorsError naming the file
        and (when not None) the tensor."""
        path = write("broken.safetensors", content)
        try:
            read_safetensors_header(path)
        except SafetensorsError as error:
            assert "broken.safetensors" in str(error), (
                f"for {what}, the error should name the file: {error}"
            )
            assert tensor is None or repr(tensor) in str(error), (
                f"for {what}, the error should name the tensor {tensor!r}: {error}"
            )
        except Exception as error:
            raise AssertionError(
                f"{what} raised {type(error).__name__}: {error}; check it first and raise "
                "SafetensorsError(f'{path!r} ...') instead"
            ) from None
        else:
            length = int.from_bytes(content[:8], "little")
            shown = content[8:8 + min(length, 160)].decode("utf-8", "replace").strip()
            raise AssertionError(
                f"{what} must raise SafetensorsError, but it was accepted (file of "
                f"{len(content)} bytes, header {shown}): add the check from the table above"
            )

    for what, content, tensor in cases:
        check_refused(what, content, tensor)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    pair = {"dtype": "F32", "shape": [2]}
    hidden_cases(check_refused, {
        "a header that is a list": ("", _safetensors_bytes([1, 2]), None),
        "a negative dimension": ("", _safetensors_bytes({"x": entry(0, 8, shape=(-2,))}, bytes(8)),
                                 "x"),
        "a hole before the first tensor": ("", _safetensors_bytes({"x": entry(4, 12)}, bytes(12)),
                                           "x"),
        "an entry without offsets": ("", _safetensors_bytes({"x": pair}, bytes(8)), "x"),
        "a dtype in lower case": ("", _safetensors_bytes({"x": entry(0, 8, dtype="f32")},
                                                         bytes(8)), "x"),
        "bytes after the last tensor": ("", _safetensors_bytes({"x": entry(0, 8)}, bytes(12)),
                                        None),
        "two tensors on the same bytes": (
            "", _safetensors_bytes({"x": entry(0, 8), "y": entry(0, 8)}, bytes(8)), "y"),
        "offsets written as floats": (
            "", _safetensors_bytes({"x": {**pair, "data_offsets": [0.0, 8.0]}}, bytes(8)), "x"),
        "metadata with a number": (
            "", _safetensors_bytes({"__metadata__": {"k": 1}, "x": entry(0, 8)}, bytes(8)), None),
        "an entry that is a number": ("", _safetensors_bytes({"x": 5}, bytes(8)), "x"),
        "three offsets": (
            "", _safetensors_bytes({"x": {**pair, "data_offsets": [0, 4, 8]}}, bytes(8)), "x"),
    })
    ### END HIDDEN TESTS


test_unit_read_safetensors_header()


# %% [markdown]
# ### Loading: views into the file
#
# Map the whole file once, `np.memmap(path, dtype=np.uint8, mode="r")`, and cut each tensor
# out of it: slice its bytes (`data_start + begin` to `data_start + end`), `.view` them as
# its dtype and `.reshape` them to its shape. Slicing, viewing and reshaping never copy, so
# every tensor is a read-only window onto the file. BF16 is the exception that needs a new
# float32 array.

# %% nbgrader={"grade": false, "grade_id": "load-safetensors", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def load_safetensors(path):
    """{name: array}: read-only np.memmap views into the file (BF16 widened to float32).

    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "model.safetensors")
    >>> save_safetensors(path, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
    >>> w = load_safetensors(path)["w"]
    >>> w.tolist(), w.dtype, w.flags.writeable
    ([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], dtype('float32'), False)
    >>> folder.cleanup()
    """
    header, data_start = read_safetensors_header(path)
    if not header:
        return {}
    ### BEGIN SOLUTION
    raw = np.memmap(os.fspath(path), dtype=np.uint8, mode="r")  # maps the file; reads nothing
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        stored = raw[data_start + begin:data_start + end].view(SAFETENSORS_DTYPES[entry["dtype"]])
        if entry["dtype"] == "BF16":  # the top 16 bits of a float32
            stored = (stored.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = stored.reshape(entry["shape"])
    return tensors
    ### END SOLUTION


# %% [markdown]
# ### Checkpoints in several files
#
# A model of a few billion weights is saved in **shards** (files of a few GB each) plus
# `model.safetensors.index.json`, whose `weight_map` says which file holds each tensor:
#
# ```json
# {"metadata": {"total_size": 2471645184},
#  "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
#                 "lm_head.weight": "model-00002-of-00002.safetensors"}}
# ```
#
# `load_safetensors_folder` takes a folder (with an index, or with one `model.safetensors`)
# or a file, and returns every tensor of the checkpoint in one dictionary. Check the index
# as carefully as a header: a tensor listed in the map must be in the shard it names.

# %% nbgrader={"grade": false, "grade_id": "load-safetensors-folder", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
SAFETENSORS_INDEX = "model.safetensors.index.json"


def load_safetensors_folder(path):
    """Every tensor of a checkpoint: a folder with model.safetensors.index.json (shards), a
    folder with one model.safetensors (or one *.safetensors file), or a file path.

    >>> folder = tempfile.TemporaryDirectory()
    >>> save_safetensors(f"{folder.name}/a.safetensors", {"w": np.ones(2, np.float32)})
    >>> save_safetensors(f"{folder.name}/b.safetensors", {"b": np.zeros(1, np.float32)})
    >>> index = {"weight_map": {"w": "a.safetensors", "b": "b.safetensors"}}
    >>> with open(os.path.join(folder.name, SAFETENSORS_INDEX), "w") as handle:
    ...     _ = handle.write(json.dumps(index))
    >>> tensors = load_safetensors_folder(folder.name)
    >>> {name: array.tolist() for name, array in sorted(tensors.items())}
    {'b': [0.0], 'w': [1.0, 1.0]}
    >>> folder.cleanup()
    """
    path = os.fspath(path)
    if os.path.isfile(path):
        return load_safetensors(path)
    if not os.path.isdir(path):
        raise SafetensorsError(f"there is no checkpoint file or folder at {path!r}")
    index_path = os.path.join(path, SAFETENSORS_INDEX)
    if not os.path.isfile(index_path):
        single = os.path.join(path, "model.safetensors")
        found = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
        if os.path.isfile(single) or len(found) == 1:
            return load_safetensors(
                single if os.path.isfile(single) else os.path.join(path, found[0]))
        raise SafetensorsError(
            f"{path!r} has no {SAFETENSORS_INDEX} and {len(found)} .safetensors files "
            f"({found[:4]}): expected an index, or a single model.safetensors"
        )
    try:
        with open(index_path, encoding="utf-8") as handle:
            weight_map = json.load(handle)["weight_map"]
    except (ValueError, KeyError, TypeError) as error:
        raise SafetensorsError(f"{index_path!r} is not an index with a 'weight_map' "
                               f"({type(error).__name__}: {error})") from None
    ### BEGIN SOLUTION
    shards, tensors = {}, {}
    for name, shard in weight_map.items():
        if shard not in shards:
            shard_path = os.path.join(path, shard)
            if not os.path.isfile(shard_path):
                raise SafetensorsError(f"{index_path!r} puts tensor {name!r} in {shard!r}, "
                                       "but that file is missing")
            shards[shard] = load_safetensors(shard_path)
        if name not in shards[shard]:
            raise SafetensorsError(f"{index_path!r} puts tensor {name!r} in {shard!r}, but "
                                   f"{os.path.join(path, shard)!r} has no such tensor")
        tensors[name] = shards[shard][name]
    return tensors
    ### END SOLUTION


# %% [markdown]
# ### Test: every dtype comes back, as a view; shards come back as one checkpoint

# %% nbgrader={"grade": true, "grade_id": "test_unit_load_safetensors", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_load_safetensors():
    """Round trips of every dtype, memory-mapped read-only views, BF16 widened exactly."""
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "all.safetensors")
    rng = np.random.default_rng(0)
    tensors = {
        "f64": rng.standard_normal((2, 3)),
        "f32": rng.standard_normal((4, 1, 2)).astype(np.float32),
        "f16": rng.standard_normal(5).astype(np.float16), "i64": np.array([-2**62, 3]),
        "i32": np.array([[-7, 8]], dtype=np.int32), "i16": np.array([-300], dtype=np.int16),
        "i8": np.array([-128, 127], dtype=np.int8), "u64": np.array([2**63], dtype=np.uint64),
        "u32": np.array([4_000_000_000], dtype=np.uint32), "u16": np.array([65535], np.uint16),
        "u8": np.arange(7, dtype=np.uint8), "bool": np.array([True, False, True]),
        "scalar": np.float32(2.5), "empty": np.zeros((0, 3), dtype=np.float32),
    }
    save_safetensors(path, tensors)
    loaded = load_safetensors(path)
    assert set(loaded) == set(tensors), f"loaded {sorted(loaded)}, expected {sorted(tensors)}"
    for name, array in tensors.items():
        got = loaded[name]
        assert got.dtype == np.asarray(array).dtype and got.shape == np.shape(array), (
            f"{name!r} came back as {got.dtype} {got.shape}, expected "
            f"{np.asarray(array).dtype} {np.shape(array)}: view the bytes as the header's "
            "dtype and reshape to its shape"
        )
        assert np.array_equal(got, array), f"{name!r} came back with other values"
    w = loaded["f32"]
    assert isinstance(w, np.memmap) and not w.flags.owndata, (
        f"the arrays should be views into np.memmap(path, mode='r'), got a "
        f"{type(w).__name__} that owns its data: a copy doubles the memory of a large model"
    )
    assert not w.flags.writeable, "open the memmap with mode='r', so the views are read-only"

    values = np.array([1.0, -2.5, 3.140625, 0.0, -np.inf], dtype=np.float32)  # exact in bf16
    bits = (values.view(np.uint32) >> 16).astype("<u2")
    bf16 = os.path.join(folder, "bf16.safetensors")
    with open(bf16, "wb") as handle:
        handle.write(_safetensors_bytes(
            {"h": {"dtype": "BF16", "shape": [5], "data_offsets": [0, 10]}}, bits.tobytes()))
    got = load_safetensors(bf16)["h"]
    assert got.dtype == np.float32 and np.array_equal(got, values), (
        f"BF16 bits {bits.tolist()} should load as float32 {values.tolist()}, got "
        f"{got.dtype} {np.asarray(got).tolist()}: widen to uint32, shift left by 16, view as "
        "float32"
    )

    shards = os.path.join(folder, "sharded")
    os.makedirs(shards)
    save_safetensors(os.path.join(shards, "part-1.safetensors"), {"a": tensors["f32"]})
    save_safetensors(os.path.join(shards, "part-2.safetensors"), {"b": tensors["i64"]})
    with open(os.path.join(shards, SAFETENSORS_INDEX), "w") as handle:
        json.dump({"metadata": {}, "weight_map": {"a": "part-1.safetensors",
                                                  "b": "part-2.safetensors"}}, handle)
    both = load_safetensors_folder(shards)
    assert sorted(both) == ["a", "b"] and np.array_equal(both["b"], tensors["i64"]), (
        f"the sharded folder gave {sorted(both)}: follow weight_map to each tensor's file"
    )
    with open(os.path.join(shards, SAFETENSORS_INDEX), "w") as handle:
        json.dump({"weight_map": {"a": "part-1.safetensors", "c": "part-2.safetensors"}}, handle)
    try:
        load_safetensors_folder(shards)
    except SafetensorsError as error:
        assert "'c'" in str(error), f"the error should name the missing tensor 'c': {error}"
    else:
        raise AssertionError("an index naming a tensor its shard lacks must raise SafetensorsError")
    single = os.path.join(folder, "single")
    os.makedirs(single)
    save_safetensors(os.path.join(single, "model.safetensors"), {"a": tensors["u8"]})
    assert np.array_equal(load_safetensors_folder(single)["a"], tensors["u8"]), (
        "a folder with one model.safetensors should load that file"
    )

    def check_round_trip(arrays):
        """save then load: every array back with its dtype, shape and values, read-only."""
        where = os.path.join(tempfile.mkdtemp(), "r.safetensors")
        save_safetensors(where, arrays)
        back = load_safetensors(where)
        assert set(back) == set(arrays), f"loaded {sorted(back)}, expected {sorted(arrays)}"
        for name, array in arrays.items():
            got = back[name]
            assert got.dtype == np.asarray(array).dtype and got.shape == np.shape(array), (
                f"{name!r} came back as {got.dtype} {got.shape}, expected "
                f"{np.asarray(array).dtype} {np.shape(array)}"
            )
            assert np.array_equal(got, array), f"{name!r} came back with other values"
            assert not got.flags.writeable, f"{name!r} should be a read-only view of the file"

    def check_bf16(values):
        """float32 values exact in bfloat16, stored as their top 16 bits, load as float32."""
        values = np.asarray(values, dtype=np.float32)
        bits = (values.view(np.uint32) >> 16).astype("<u2")
        where = os.path.join(tempfile.mkdtemp(), "h.safetensors")
        with open(where, "wb") as handle:
            handle.write(_safetensors_bytes({"h": {"dtype": "BF16", "shape": list(values.shape),
                                                   "data_offsets": [0, bits.nbytes]}},
                                            bits.tobytes()))
        got = load_safetensors(where)["h"]
        assert got.dtype == np.float32 and np.array_equal(got, values), (
            f"BF16 bits should load as float32 {values.tolist()}, got {np.asarray(got).tolist()}"
            ": widen to uint32, shift left by 16, view as float32"
        )

    check_round_trip({"a": tensors["f32"], "b": tensors["u8"]})
    check_bf16([1.0, -2.5, 3.140625, 0.0, -np.inf])
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_round_trip, {
        "three-axis half precision and a flag matrix": {
            "h": rng.standard_normal((2, 3, 2)).astype(np.float16),
            "m": rng.standard_normal((4, 4)) > 0},
        "extreme integers": {"lo": np.array([-2**63, 2**63 - 1]),
                             "u": np.array([0, 2**32 - 1], dtype=np.uint32)},
        "a scalar alone": {"s": np.int16(-7)},
    })
    hidden_cases(check_bf16, {
        "a matrix of values exact in bfloat16": [[0.5, -65280.0], [2.0**-100, np.inf]],
        "negative zero and a small power of two": [-0.0, 2.0**-126, 384.0],
    })
    ### END HIDDEN TESTS


test_unit_load_safetensors()


# %% [markdown]
# ## Systems analysis: where the time of a training step goes
#
# A training step has three phases: the forward pass computes the loss, the backward pass
# its gradients, and the optimizer step the update. Count the arithmetic first: for each
# weight and each sample the forward pass does one multiply-add (2 FLOPs), the backward
# pass two (the gradient of the input and of the weight), and the optimizer a fixed
# handful per weight, **independent of the batch size**. The cell below times each phase
# for a small MLP at two batch sizes (the median step of several, as other programs share
# your machine), then measures what a checkpoint costs on disk and in time.

# %% nbgrader={"grade": false, "grade_id": "analysis", "locked": false, "schema_version": 3, "solution": false, "task": false}
def step_time_report(batches=(32, 512), width=256, steps=15):
    manual_seed(0)
    rng = np.random.default_rng(0)
    model = Sequential(Linear(64, width), ReLU(), Linear(width, width), ReLU(), Linear(width, 10))
    optimizer = AdamW(model.parameters(), lr=1e-3)
    params = sum(p.size for p in model.parameters())
    print(f"MLP 64-{width}-{width}-10, {params:,} weights, AdamW")
    for batch in batches:
        x = Tensor(rng.standard_normal((batch, 64)).astype(np.float32))
        y = Tensor(rng.integers(0, 10, batch), dtype=np.int64)
        times = {"forward": [], "backward": [], "optimizer": []}
        for i in range(steps + 2):
            t0 = time.perf_counter()
            optimizer.zero_grad()
            loss = cross_entropy(model(x), y)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            optimizer.step()
            t3 = time.perf_counter()
            if i >= 2:  # the first steps allocate buffers and warm caches
                times["forward"].append(t1 - t0)
                times["backward"].append(t2 - t1)
                times["optimizer"].append(t3 - t2)
        median = {phase: float(np.median(ts)) for phase, ts in times.items()}
        total = sum(median.values())
        flops = 6 * batch * params  # 2 per weight per sample forward, 4 backward
        print(f"batch {batch:4d}: {total * 1e3:6.2f} ms per step, {batch / total:9,.0f} samples/s, "
              f"{flops / total / 1e9:5.1f} GFLOP/s")
        for phase, seconds in median.items():
            print(f"  {phase:9s} {seconds * 1e3:6.2f} ms  {seconds / total:5.1%}")
    path = os.path.join(tempfile.mkdtemp(), "mlp.npz")
    t0 = time.perf_counter()
    save_checkpoint(path, model, optimizer, step=steps)
    saved = time.perf_counter() - t0
    t0 = time.perf_counter()
    load_checkpoint(path, model, optimizer)
    loaded = time.perf_counter() - t0
    weights = sum(p.data.nbytes for p in model.parameters())
    size = os.path.getsize(path)
    print(f"checkpoint: {size / 2**10:.0f} KiB for {weights / 2**10:.0f} KiB of weights "
          f"({size / weights:.1f}x: AdamW keeps two buffers per weight), "
          f"saved in {saved * 1e3:.1f} ms, loaded in {loaded * 1e3:.1f} ms")


step_time_report()

# %% [markdown]
# Read your figures against the count above. With small batches the optimizer step is a
# large share of the time: it costs the same per step whatever the batch, while forward
# and backward shrink with it. With large batches forward and backward dominate. Backward
# does twice the forward's arithmetic, but the measured ratio is usually lower: part of
# each pass is a fixed cost per operation (tens of microseconds for each of dozens of
# NumPy calls), the same in both directions, so at these sizes you are far from your
# processor's arithmetic limit. Module 17 measures and removes that overhead. Larger
# batches use the machine better, one reason training uses the largest batch that fits
# in memory. (If your figures jump between runs, other programs are using the processor:
# run the cell again.)
#
# A checkpoint with AdamW's state is three times the size of the weights. A 124M-parameter
# GPT-2 in float32 writes 1.5 GB per checkpoint: saving costs disk space and seconds of
# write time, which is why long runs save every few minutes, not every step, and keep
# only the latest few files.

# %% [markdown]
# ### Reading a checkpoint versus mapping it
#
# The cell below writes one 16 MB float32 tensor both ways, as `.npz` and as safetensors,
# then loads each and measures the time and the memory the process holds afterwards
# (resident memory, read from `/proc/self/status` where the system has it), then the time
# of a first full pass over the data.

# %% nbgrader={"grade": false, "grade_id": "analysis-safetensors", "locked": false, "schema_version": 3, "solution": false, "task": false}
def resident_bytes():
    """This process's resident memory (Linux's VmRSS), or None elsewhere."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None


def load_time_report(megabytes=16):
    folder = tempfile.mkdtemp()
    weights = np.ones((megabytes * 2**20 // 4 // 1024, 1024), dtype=np.float32)
    np.savez(os.path.join(folder, "w.npz"), w=weights)
    save_safetensors(os.path.join(folder, "w.safetensors"), {"w": weights})
    del weights
    for label, load in (
            ("safetensors, np.memmap", lambda: load_safetensors(
                os.path.join(folder, "w.safetensors"))["w"]),
            (".npz, np.load", lambda: np.load(os.path.join(folder, "w.npz"))["w"])):
        before = resident_bytes()
        t0 = time.perf_counter()
        w = load()
        loaded = time.perf_counter() - t0
        held = resident_bytes()
        t0 = time.perf_counter()
        total = float(w.sum(dtype=np.float64))  # touches every byte
        touched = time.perf_counter() - t0
        memory = (f", {(held - before) / 2**20:5.1f} MB more resident after loading"
                  if before is not None else "")
        print(f"{label:23s}: loaded in {loaded * 1e3:7.2f} ms{memory}; first pass over the "
              f"data {touched * 1e3:6.1f} ms (sum {total:,.0f})")
        del w


load_time_report()

# %% [markdown]
# Mapping costs almost nothing up front: the loader reads a header of a few hundred bytes
# and the operating system sets up the mapping. The `.npz` loader reads and copies all
# 16 MB before it returns. The work of reading the file has not disappeared: the first
# pass over the mapped data pays it, page by page, from the operating system's file cache
# (from the disk, if the file is not cached). What disappears is the **copy**: the mapped
# bytes belong to the file cache, shared with every process that maps the same file and
# dropped under memory pressure, not to your process. A 2 GB model loads in a millisecond
# and costs no extra 2 GB; only the pages a computation touches are ever read. Module 18
# serves such files.
#
# ## What comes next
#
# - **Milestone 1986 (MLP on digits)** is now runnable: `tito milestone run mlp_digits`
#   trains your own MLP with your own loop on handwritten digits.
# - **Module 09 (convolutions)** adds the layers that see images; `train` trains them
#   unchanged.
# - **Module 13 (transformers)** builds a GPT, and this loop, with `CosineWarmup`, AdamW,
#   clipping and checkpoints, trains it on Tiny Shakespeare.
