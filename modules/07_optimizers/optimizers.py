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
# # Module 07: Optimizers
#
# ## Overview
#
# After module 06, `loss.backward()` leaves a gradient in `param.grad` for every parameter:
# the direction in which the loss grows fastest. Learning means taking a small step the
# other way, again and again. The rule that turns gradients into steps is the
# **optimizer**, and the choice of rule decides whether a network trains in minutes, in
# days, or not at all.
#
# In this module you write the three optimizers that train almost every network today:
# stochastic gradient descent (SGD) with momentum, Adam, and AdamW. They differ in what
# they remember between steps (their **state**), and that state costs memory: for Adam,
# twice the memory of the model itself. You will also write gradient clipping, the guard
# rail that stops one bad batch from throwing a model's weights across the room.
#
# **In numbers.** Adam keeps two float32 numbers per parameter, the moments $m$ and $v$: for
# the 163M parameters of a GPT-2-sized model, 1.3 GB of optimizer state beside 652 MB of
# weights and 652 MB of gradients.
#
# ## Learning objectives
#
# - Separate the optimizer's bookkeeping (which parameters, which have gradients, how many
#   steps) from its update rule, written on plain NumPy arrays.
# - Implement SGD with momentum and Nesterov momentum, and explain what momentum remembers.
# - Implement Adam with bias correction, and compute by hand why the first step is about
#   `lr` in size whatever the gradient's scale.
# - Tell L2 regularization (Adam's `weight_decay`) from decoupled weight decay (AdamW), and
#   show with numbers that they are different algorithms.
# - Save and restore optimizer state as plain arrays, so training can stop and resume.
# - Clip gradients by their global norm, and measure the memory and time each optimizer costs.
#
# ## What you build
#
# - `Optimizer`: the base class. It collects the parameters (each once), keeps a learning
#   rate `lr` that schedules may change, `zero_grad()`, `step()`, a step counter, and
#   `state_dict()` / `load_state_dict()`.
# - `SGD(params, lr, momentum=0.0, weight_decay=0.0, nesterov=False)`.
# - `Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)`.
# - `AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)`.
# - `clip_grad_norm_(params, max_norm)`, which returns the norm before clipping.
#
# All of them follow PyTorch's `torch.optim` formulas exactly, so the same hyperparameters
# mean the same thing in both frameworks.
#
# ## What you are not building yet
#
# - **Learning-rate schedules** (warm-up, cosine decay) and the training loop: module 08.
# - **Parameter groups** (a different learning rate or weight decay per group of
#   parameters). Every parameter here shares one set of hyperparameters.
# - **Other optimizers** (RMSprop, Adagrad, AMSGrad, Lion, LAMB) and fused or multi-tensor
#   kernels. Once you have written Adam they are a few lines each.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| default_exp core.optimizers
#| export
import math

import numpy as np

from tinytorch.core.tensor import Tensor

# %% [markdown]
# The lesson's tests are tables of short optimization runs: start from a weight, feed a few
# gradients, compare the weight after every step with the value worked out by hand. The
# helper that runs one row is given (with module 01's `expect_close` and `expect_error`).

# %% nbgrader={"grade": false, "grade_id": "test-helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
from tinytorch.core.tensor import expect_close, expect_error  # module 01's test helpers


def check_steps(what, make, start, grads, wants, fix, dtype=np.float32, atol=1e-6):
    """Run `make([w])` on w = Tensor(start, dtype); before each step set w.grad to the next of
    `grads`, after it compare w with the next of `wants`. Returns (w, optimizer)."""
    w = Tensor(start, dtype=dtype)
    opt = make([w])
    for t, (g, want) in enumerate(zip(grads, wants), start=1):
        w.grad = Tensor(g, dtype=dtype)
        opt.step()
        expect_close(f"{what}: w after step {t}", w.data, want, fix, rtol=1e-6, atol=atol)
        assert w.dtype == dtype, (
            f"{what}: w became {w.dtype}, expected {np.dtype(dtype)}: update in place "
            "(param -= ...) and avoid float64 constants"
        )
    return w, opt


# %% [markdown]
# ## Part 1: what every optimizer does
#
# Every optimizer has the same skeleton; only the update rule changes:
#
# ```
# opt = SGD(model.parameters(), lr=0.1)   # remember the parameters, each once
# for batch in data:
#     opt.zero_grad()                     # forget last step's gradients
#     loss = loss_fn(model(x), y)
#     loss.backward()                     # fill p.grad for every parameter
#     opt.step()                          # p.data <- p.data - (update from p.grad)
# ```
#
# The base class `Optimizer` does the bookkeeping, once, for all optimizers:
#
# - **Collect the parameters, each once.** `model.parameters()` may be a generator (so
#   turn it into a list) and the same tensor may appear twice (tied weights: a language
#   model often shares its embedding and output matrices). Stepping a tensor twice would
#   apply the update twice, so keep the first occurrence of each, compared by identity
#   (`id(p)`), not by value: two different parameters may hold equal numbers.
# - **`zero_grad()`** sets every `p.grad` to `None`. Backward *adds* into gradients (a
#   tensor used twice receives two contributions), so without it each step would also
#   apply every earlier gradient. `None` rather than zeros: it costs no memory, and `step()`
#   can tell a parameter that took no part in this loss from one whose gradient is 0.
# - **`step()`** counts the step, then, for every parameter whose `grad` is not `None`,
#   calls `self.update(param_array, grad_array, state)`. Parameters without a gradient are
#   skipped: neither they nor their state change. Walk them with the given
#   `self._each_param()`, which yields `(param, state)` pairs group by group (parameter
#   groups, below) so that `update` sees each group's own `lr` and `weight_decay`.
#
# `update` is where each optimizer's maths lives, on plain NumPy arrays, just as an
# operation's `forward` did in module 01. It must change the parameter **in place**
# (`param -= ...`, not `param = param - ...`): the array belongs to the model, and
# rebinding a local name would update nothing. In place also means no new array per step
# and that float32 parameters stay float32.
#
# Each parameter has a `state` dict, empty until its first update. Optimizers with memory
# (momentum, Adam's averages) create their buffers there on first use, with the
# parameter's shape and dtype. An optimizer only pays for state it uses.
#
# **Saving state.** To stop training and resume it later, the optimizer's state must be
# saved with the weights (Part 5 shows what goes wrong otherwise). `state_dict()` returns
# a flat dict of plain values, with copies of the arrays, because `update` changes the
# buffers in place and a saved state must not change after it was saved:
#
# ```
# {"steps": 3, "lr": 0.001, "num_params": 2,
#  "param.0.step": 3, "param.0.exp_avg": array(...), "param.0.exp_avg_sq": array(...), ...}
# ```
#
# Only numbers and arrays, so module 08 can store it in a NumPy `.npz` file without pickle.
# An `.npz` file gives every number back as a 0-d array, so a per-parameter entry is read
# back as a counter when it holds an integer and as a buffer when it holds floats (a
# scalar parameter has 0-d buffers).
# `load_state_dict()` checks everything before changing anything, and names every
# mismatch: a wrong number of parameters, a buffer of the wrong shape, or keys from a
# different optimizer. These two methods are given; read them.
#
# Write `__init__` (collecting the parameters), `zero_grad` and `step`.

# %% nbgrader={"grade": false, "grade_id": "optimizer", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class Optimizer:
    """Base class: holds the parameters, the learning rate and per-parameter state.

    Subclasses write `update`; here SGD shows what every optimizer shares:

    >>> w = Tensor([1.0, -2.0], requires_grad=True)
    >>> opt = SGD([w], lr=0.1)
    >>> w.grad = Tensor([0.5, 0.5])
    >>> opt.step()
    >>> opt.steps, w
    (1, Tensor([ 0.95, -2.05], requires_grad=True))
    >>> opt.zero_grad()
    >>> w.grad is None
    True

    Parameter groups, as in PyTorch: a group's own settings override the keyword ones.

    >>> a, b = Tensor([1.0], requires_grad=True), Tensor([1.0], requires_grad=True)
    >>> opt = SGD([{"params": [a]}, {"params": [b], "lr": 0.0}], lr=0.5)
    >>> a.grad, b.grad = Tensor([1.0]), Tensor([1.0])
    >>> opt.step()
    >>> a.item(), b.item(), [group["lr"] for group in opt.param_groups]
    (0.5, 1.0, [0.5, 0.0])
    """

    # Names of the per-parameter state entries this optimizer keeps (for load_state_dict).
    state_names = ()

    def __init__(self, params, lr):
        if isinstance(params, Tensor):
            raise TypeError(
                "the optimizer needs an iterable of parameters, got a single Tensor: "
                "wrap it in a list, e.g. SGD([w], lr=0.1)"
            )
        if callable(params):
            raise TypeError(
                "the optimizer got a method instead of parameters: call it, "
                "e.g. SGD(model.parameters(), lr=0.1), with the parentheses"
            )
        if lr < 0:
            raise ValueError(f"the learning rate must be >= 0, got lr={lr}")
        # Parameter groups (given): [{"params": [...], "weight_decay": 0.0}, ...] becomes one
        # flat list of parameters here; the groups' own settings are kept for later.
        params, group_specs = _split_param_groups(params)
        ### BEGIN SOLUTION
        self.params = []
        seen = set()
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(
                    f"optimizers update Tensors (parameters), got {type(p).__name__}"
                )
            if id(p) not in seen:
                seen.add(id(p))
                self.params.append(p)
        ### END SOLUTION
        if not self.params:
            raise ValueError(
                "the optimizer got no parameters: the model has none, or a generator such as "
                "model.parameters() was already used up (call it again)"
            )
        self.lr = float(lr)  # a schedule may change it between steps (module 08)
        self.steps = 0  # how many times step() has been called
        self.state = [{} for _ in self.params]  # one dict per parameter, filled lazily
        self._group_specs = group_specs
        self._groups = None  # built from the specs on first use (see param_groups)
        self._current = None  # the group being stepped

    def zero_grad(self):
        """Forget the gradients of the last step: every p.grad becomes None."""
        ### BEGIN SOLUTION
        for p in self.params:
            p.grad = None
        ### END SOLUTION

    def step(self):
        """Update every parameter that has a gradient; the others stay as they are."""
        ### BEGIN SOLUTION
        self.steps += 1
        for p, state in self._each_param():
            if p.grad is None:
                continue
            self.update(p.data, _grad_array(p), state)
        ### END SOLUTION

    def update(self, param, grad, state):
        """Change the array `param` in place, given its gradient array and its state dict."""
        raise NotImplementedError(f"{type(self).__name__} must define update()")

    # ---- parameter groups (given) ------------------------------------------------------
    # PyTorch's `param_groups`: a list of dicts, one per group, each holding "params" and
    # every hyperparameter (lr, weight_decay, ...), so `group["lr"] = 0.01` changes that
    # group only. A group given without a setting takes the optimizer's (the keyword
    # argument). `update` keeps reading `self.lr`, `self.weight_decay`, ...: while a
    # group is stepped, these attributes read that group's values; setting `opt.lr = x`
    # sets it in every group (what module 08's schedule loop does).
    @property
    def param_groups(self):
        if self._groups is None:
            defaults = self._hyperparameters()
            groups = []
            for ids, settings in self._group_specs:
                unknown = sorted(set(settings) - set(defaults))
                if unknown:
                    raise TypeError(
                        f"parameter group settings {unknown} are not {type(self).__name__} "
                        f"hyperparameters; the known ones are {sorted(defaults)}"
                    )
                members = [p for p in self.params if id(p) in ids]
                groups.append({"params": members, **defaults, **settings})
            for name in defaults:  # from now on the groups hold the values
                self.__dict__.pop(name, None)
            self._groups = groups
        return self._groups

    def _each_param(self):
        """(parameter, state) pairs, group by group, with that group's hyperparameters."""
        index = {id(p): i for i, p in enumerate(self.params)}
        groups = self.param_groups
        try:
            for group in groups:
                self._current = group
                # plain attributes while the group is stepped: update() reads them fast
                self.__dict__.update((k, v) for k, v in group.items() if k != "params")
                for p in group["params"]:
                    yield p, self.state[index[id(p)]]
        finally:
            self._current = None
            for name in groups[0]:
                self.__dict__.pop(name if name != "params" else "", None)

    def __getattr__(self, name):
        # Only called when normal lookup fails: a hyperparameter that the groups now hold.
        groups = self.__dict__.get("_groups")
        if groups is not None and name in groups[0] and name != "params":
            current = self.__dict__.get("_current")
            return (current or groups[0])[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name, value):
        specs = self.__dict__.get("_group_specs", ())
        if (self.__dict__.get("_groups") is None and name in self.__dict__
                and any(name in settings for _, settings in specs)):
            _ = self.param_groups  # a second assignment (opt.lr = x): build the groups first
        groups = self.__dict__.get("_groups")
        if groups is not None and name in groups[0] and name != "params":
            for group in groups:
                group[name] = value
        else:
            object.__setattr__(self, name, value)

    # ---- saving and restoring (given) ------------------------------------------------
    def state_dict(self):
        """A flat dict of numbers and array copies: everything needed to resume."""
        out = {"steps": self.steps, "lr": self.lr, "num_params": len(self.params)}
        for i, state in enumerate(self.state):
            for name, value in state.items():
                out[f"param.{i}.{name}"] = value.copy() if isinstance(value, np.ndarray) else value
        for g, group in enumerate(self.param_groups):
            for name, value in group.items():
                if name != "params":
                    value = np.asarray(value) if isinstance(value, tuple) else value
                    out[f"group.{g}.{name}"] = value
        return out

    def load_state_dict(self, state_dict):
        """Restore what state_dict() returned; checks everything before changing anything."""
        problems = [
            f"missing key {k!r}" for k in ("steps", "lr", "num_params") if k not in state_dict
        ]
        if not problems and int(state_dict["num_params"]) != len(self.params):
            problems.append(
                f"the state was saved for {int(state_dict['num_params'])} parameters, this "
                f"optimizer has {len(self.params)}: was it built from the same model?"
            )
        new_state = [{} for _ in self.params]
        groups = self.param_groups
        new_settings = [{} for _ in groups]
        unexpected = []
        for key, value in state_dict.items():
            if key in ("steps", "lr", "num_params"):
                continue
            parts = key.split(".")
            if len(parts) == 3 and parts[0] == "group" and parts[1].isdigit():
                g, name = int(parts[1]), parts[2]
                if g >= len(groups):
                    problems.append(
                        f"{key!r} refers to parameter group {g}, but this optimizer has "
                        f"{len(groups)} group(s): build it with the same groups"
                    )
                elif name not in groups[g] or name == "params":
                    unexpected.append(key)
                else:
                    old = groups[g][name]
                    value = np.asarray(value)
                    if isinstance(old, tuple):
                        new_settings[g][name] = tuple(float(v) for v in value.reshape(-1))
                    else:
                        new_settings[g][name] = type(old)(value.item())
                continue
            if (len(parts) != 3 or parts[0] != "param" or not parts[1].isdigit()
                    or parts[2] not in self.state_names):
                unexpected.append(key)
                continue
            i, name = int(parts[1]), parts[2]
            if i >= len(self.params):
                problems.append(
                    f"{key!r} refers to parameter {i}, but there are {len(self.params)}"
                )
                continue
            value = np.asarray(value)
            if value.ndim == 0 and np.issubdtype(value.dtype, np.integer):  # a step count
                new_state[i][name] = int(value)
            elif value.shape != self.params[i].shape:
                problems.append(
                    f"{key!r} has shape {value.shape} but parameter {i} has shape "
                    f"{self.params[i].shape}"
                )
            else:
                new_state[i][name] = np.array(value, dtype=self.params[i].data.dtype)
        if unexpected:
            problems.append(
                f"unexpected keys {sorted(unexpected)}: {type(self).__name__} keeps "
                f"{list(self.state_names) or 'no per-parameter state'} (was this state saved "
                "by a different optimizer?)"
            )
        if problems:
            raise ValueError(
                f"cannot load this state into {type(self).__name__}:\n  - "
                + "\n  - ".join(problems)
            )
        self.steps = int(state_dict["steps"])
        self.lr = float(state_dict["lr"])  # a state saved without groups: lr for all
        for group, settings in zip(groups, new_settings):
            group.update(settings)
        self.state = new_state

    def __repr__(self):
        hyper = ", ".join(f"{k}={v}" for k, v in self._hyperparameters().items())
        return f"{type(self).__name__}({hyper}, {len(self.params)} parameters)"

    def _hyperparameters(self):
        return {"lr": self.lr}


def _split_param_groups(params):
    """Parameters, or PyTorch-style groups [{"params": [...], "lr": ...}, ...], as
    (flat list of parameters, [(ids of the group's parameters, its settings), ...])."""
    params = list(params)
    if not params or not all(isinstance(g, dict) for g in params):
        return params, [(set(map(id, params)), {})]
    flat, specs, seen = [], [], set()
    for n, group in enumerate(params):
        if "params" not in group:
            raise ValueError(f"parameter group {n} has no 'params' entry: {sorted(group)}")
        members = group["params"]
        members = [members] if isinstance(members, Tensor) else list(members)
        for p in members:
            if id(p) in seen:
                raise ValueError(
                    f"a parameter of shape {getattr(p, 'shape', '?')} is in more than one "
                    "parameter group: put each parameter in exactly one group"
                )
        seen.update(map(id, members))
        flat += members
        specs.append((set(map(id, members)), {k: v for k, v in group.items() if k != "params"}))
    return flat, specs


def _grad_array(p):
    """p.grad as a NumPy array, checked against the parameter's shape."""
    grad = p.grad.data if isinstance(p.grad, Tensor) else np.asarray(p.grad)
    if grad.shape != p.data.shape:
        raise ValueError(
            f"a parameter of shape {p.data.shape} has a gradient of shape {grad.shape}: "
            "gradients must have their parameter's shape (a broadcast that backward did "
            "not sum away?)"
        )
    return grad


# %% [markdown]
# ### Test: the optimizer's bookkeeping
#
# The test defines the simplest optimizer of all, plain gradient descent
# (`param -= lr * grad`), to check your bookkeeping before any real update rule exists.

# %% nbgrader={"grade": true, "grade_id": "test_unit_optimizer_base", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_optimizer_base():
    """Parameters are kept once each; zero_grad clears; step skips missing grads and counts."""

    class PlainGD(Optimizer):
        def update(self, param, grad, state):
            param -= self.lr * grad

    def check_kept(tensors, order):
        """PlainGD over `tensors` keeps tensors[i] for i in `order`, once each, in that order."""
        opt = PlainGD((p for p in tensors), lr=0.1)
        assert len(opt.params) == len(order), (
            f"{len(tensors)} tensors with {len(order)} distinct ones should give {len(order)} "
            f"parameters, got {len(opt.params)}: keep each tensor once, comparing by identity "
            "(id(p)), so a tied weight is not stepped twice"
        )
        assert all(p is tensors[i] for p, i in zip(opt.params, order)), (
            "keep the parameters in their first order"
        )
        return opt

    w = Tensor([1.0, 2.0])
    b = Tensor([0.5])
    opt = check_kept([w, b, w], [0, 1])
    assert len(PlainGD([Tensor([1.0]), Tensor([1.0])], lr=0.1).params) == 2, (
        "two different tensors holding equal values are two parameters: compare with id(p), "
        "not with == or by value"
    )
    expect_error("PlainGD([], lr=0.1)", lambda: PlainGD([], lr=0.1), ValueError,
                 fix="an optimizer with no parameters is a mistake in the caller")
    w.grad = Tensor([1.0, -1.0])
    b.grad = None  # b took no part in this loss
    data_before = w.data
    opt.step()
    assert np.allclose(w.data, [0.9, 2.1]), f"after one step w is {w.data}, expected [0.9, 2.1]"
    assert w.data is data_before, (
        "step() replaced w.data with a new array: update it in place, so the model keeps "
        "the same array (pass p.data itself to update)"
    )
    assert np.allclose(b.data, [0.5]), (
        f"b has grad None and must not change, but became {b.data}: skip parameters "
        "whose grad is None"
    )
    assert opt.steps == 1, f"opt.steps is {opt.steps} after one step(), expected 1"
    opt.zero_grad()
    assert w.grad is None and b.grad is None, (
        "zero_grad() should set every parameter's grad to None"
    )
    opt.step()  # nothing has a gradient: nothing changes
    assert np.allclose(w.data, [0.9, 2.1]) and opt.steps == 2, (
        "step() with no gradients must change nothing (but still counts the step)"
    )
    w.grad = Tensor([1.0, 2.0, 3.0])
    expect_error("step() with a (3,) gradient for a (2,) parameter", opt.step, ValueError,
                 ["(2,)", "(3,)"], "check the shapes and name both")
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    u, v, x = Tensor([1.0]), Tensor(np.zeros((2, 2))), Tensor([1.0])
    hidden_cases(check_kept, {
        "a repeat at the end": ([u, v, x, u], [0, 1, 2]),
        "one tensor many times": ([v, v, v, v], [0]),
        "equal values, different tensors": ([u, x, u, x], [0, 1]),
        "no repeats": ([x, v, u], [0, 1, 2]),
    })
    ### END HIDDEN TESTS


test_unit_optimizer_base()


# %% [markdown]
# ## Part 2: stochastic gradient descent
#
# The simplest rule steps against the gradient, scaled by the learning rate:
#
# $$\theta \leftarrow \theta - \text{lr} \cdot g$$
#
# "Stochastic" because `g` comes from a mini-batch, a noisy estimate of the gradient over
# all the data. The noise is not all bad (it helps escape sharp minima), but it makes the
# path zig-zag.
#
# **Weight decay** pulls every weight a little towards 0 on each step, which discourages
# large weights (a form of regularization). SGD implements it by adding
# `weight_decay * theta` to the gradient: this is the gradient of the L2 penalty
# `weight_decay / 2 * ||theta||^2`. Do not modify `p.grad` itself: build a new array.
#
# **Momentum** keeps a running velocity `v` (a buffer with the parameter's shape) and
# steps along it instead of along the raw gradient:
#
# $$v \leftarrow \mu v + g, \qquad \theta \leftarrow \theta - \text{lr} \cdot v$$
#
# On the first step `v` is the gradient itself (PyTorch's convention: the buffer starts as
# a copy of `g`, not as zeros, so the first step is the same as without momentum). With a
# constant gradient `g` the velocity grows `g, 1.9g, 2.71g, ...` towards `g / (1 - mu)`,
# ten times `g` for `mu = 0.9`: momentum speeds up travel along directions where
# gradients agree, and the alternating components of a zig-zag cancel out.
#
# **Nesterov momentum** looks one step ahead: it steps along `g + mu * v` (with `v` already
# updated) instead of `v`. It needs `momentum > 0`.
#
# Worked example, `lr = 0.1`, `mu = 0.9`, `theta = 1`, constant `g = 1`:
#
# | step | v (plain) | theta (plain) | step along (Nesterov) | theta (Nesterov) |
# |------|-----------|---------------|-----------------------|------------------|
# | 1    | 1.0       | 0.9           | 1 + 0.9 * 1.0 = 1.9   | 0.81             |
# | 2    | 1.9       | 0.71          | 1 + 0.9 * 1.9 = 2.71  | 0.539            |
#
# **Memory:** plain SGD keeps no state; momentum keeps one buffer per parameter: as much
# memory again as the model.

# %% nbgrader={"grade": false, "grade_id": "sgd", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class SGD(Optimizer):
    """Stochastic gradient descent, with optional momentum, Nesterov momentum and L2 decay.

    >>> w = Tensor([1.0], requires_grad=True)
    >>> opt = SGD([w], lr=0.1, momentum=0.9)
    >>> opt
    SGD(lr=0.1, momentum=0.9, weight_decay=0.0, nesterov=False, 1 parameters)
    >>> for _ in range(3):  # the same gradient three times: the steps grow
    ...     w.grad = Tensor([1.0])
    ...     opt.step()
    ...     print(round(w.item(), 4))
    0.9
    0.71
    0.439
    """

    state_names = ("momentum_buffer",)

    def __init__(self, params, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        if momentum < 0 or weight_decay < 0:
            raise ValueError(
                f"momentum and weight_decay must be >= 0, got {momentum} and {weight_decay}"
            )
        if nesterov and momentum <= 0:
            raise ValueError("nesterov=True needs momentum > 0 (e.g. momentum=0.9)")
        super().__init__(params, lr)
        self.momentum = float(momentum)
        self.weight_decay = float(weight_decay)
        self.nesterov = bool(nesterov)

    def update(self, param, grad, state):
        ### BEGIN SOLUTION
        if self.weight_decay:
            grad = grad + self.weight_decay * param
        if self.momentum:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = np.array(grad, dtype=param.dtype)
            else:
                buf *= self.momentum
                buf += grad
            grad = grad + self.momentum * buf if self.nesterov else buf
        param -= self.lr * grad
        ### END SOLUTION

    def _hyperparameters(self):
        return {"lr": self.lr, "momentum": self.momentum, "weight_decay": self.weight_decay,
                "nesterov": self.nesterov}


# %% [markdown]
# ### Tests: SGD steps computed by hand

# %% nbgrader={"grade": true, "grade_id": "test_unit_sgd", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_sgd():
    """One plain SGD step, with and without weight decay, in float32."""
    cases = [  # (what, optimizer, gradients, expected weights, fix)
        ("SGD(lr=0.1) from w=[1, 2]", lambda p: SGD(p, lr=0.1), [[0.5, -1.0]], [[0.95, 2.1]],
         "w - lr * grad: step against the gradient"),
        ("SGD(lr=0.1, weight_decay=0.5) from w=[1, 2]",
         lambda p: SGD(p, lr=0.1, weight_decay=0.5), [[0.5, -1.0]], [[0.9, 2.0]],
         "add weight_decay * w to the gradient before stepping: [0.5 + 0.5, -1 + 1] = [1, 0]"),
    ]
    for what, make, grads, wants, fix in cases:
        w, _ = check_steps(what, make, [1.0, 2.0], grads, wants, fix)
    assert np.allclose(w.grad.data, [0.5, -1.0]), (
        f"p.grad changed to {w.grad.data}: weight decay must build a new array "
        "(grad = grad + wd * param), not modify the gradient in place"
    )
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    def by_hand(start, grads, lr, wd):  # plain SGD in float64, step by step
        w, path = np.array(start, dtype=np.float64), []
        for g in grads:
            w = w - lr * (np.asarray(g, dtype=np.float64) + wd * w)
            path.append(w.copy())
        return path

    rng = np.random.default_rng(7001)
    start = rng.standard_normal((2, 3))
    grads = [rng.standard_normal((2, 3)) for _ in range(3)]
    hidden_cases(check_steps, {
        "a matrix over three steps": ("SGD", lambda p: SGD(p, lr=0.05), start, grads,
                                      by_hand(start, grads, 0.05, 0.0), "", np.float32, 1e-5),
        "weight decay over three steps": (
            "SGD", lambda p: SGD(p, lr=0.2, weight_decay=0.1), start, grads,
            by_hand(start, grads, 0.2, 0.1), "", np.float32, 1e-5),
        "a float64 parameter": ("SGD", lambda p: SGD(p, lr=1.5, weight_decay=0.01), [3.0, -1.0],
                                [[0.25, 0.5]], by_hand([3.0, -1.0], [[0.25, 0.5]], 1.5, 0.01),
                                "", np.float64, 1e-12),
    })
    ### END HIDDEN TESTS


test_unit_sgd()


# %% nbgrader={"grade": true, "grade_id": "test_unit_sgd_momentum", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_sgd_momentum():
    """Momentum and Nesterov momentum follow the table above, step by step."""
    ones = [[1.0]] * 3
    _, opt = check_steps(
        "SGD(lr=0.1, momentum=0.9), grad 1 each step", lambda p: SGD(p, lr=0.1, momentum=0.9),
        [1.0], ones, [[0.9], [0.71], [0.439]],  # v = 1, 1.9, 2.71
        "the velocity starts as a copy of the first gradient (not zeros), then "
        "v = mu * v + g; step along v")
    buf = opt.state[0]["momentum_buffer"]
    assert buf.dtype == np.float32 and buf.shape == (1,), (
        "the momentum buffer should have the parameter's shape and dtype"
    )
    expect_close("the velocity after 3 steps", buf, [2.71], "v = mu * v + g, kept in the state")
    check_steps("SGD(lr=0.1, momentum=0.9, nesterov=True), grad 1 each step",
                lambda p: SGD(p, lr=0.1, momentum=0.9, nesterov=True), [1.0], ones[:2],
                [[0.81], [0.539]], "step along g + mu * v, with v already updated")
    _, opt = check_steps("SGD(lr=0.1)", lambda p: SGD(p, lr=0.1), [3.0], [[1.0]], [[2.9]],
                         "w - lr * grad")
    assert opt.state[0] == {}, (
        "SGD without momentum should keep no state (no buffer): memory matters"
    )
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    def by_hand(start, grads, lr, mu, nesterov=False, wd=0.0):  # momentum SGD in float64
        w, v, path = np.array(start, dtype=np.float64), None, []
        for g in grads:
            g = np.asarray(g, dtype=np.float64) + wd * w
            v = g.copy() if v is None else mu * v + g
            w = w - lr * (g + mu * v if nesterov else v)
            path.append(w.copy())
        return path

    rng = np.random.default_rng(7002)
    start = rng.standard_normal(4)
    grads = [rng.standard_normal(4) for _ in range(4)]
    hidden_cases(check_steps, {
        "changing gradients": ("SGD", lambda p: SGD(p, lr=0.1, momentum=0.8), start, grads,
                               by_hand(start, grads, 0.1, 0.8), "", np.float32, 1e-5),
        "changing gradients, Nesterov": (
            "SGD", lambda p: SGD(p, lr=0.1, momentum=0.5, nesterov=True), start, grads,
            by_hand(start, grads, 0.1, 0.5, True), "", np.float32, 1e-5),
        "momentum with weight decay": (
            "SGD", lambda p: SGD(p, lr=0.05, momentum=0.9, weight_decay=0.1), start, grads,
            by_hand(start, grads, 0.05, 0.9, False, 0.1), "", np.float32, 1e-5),
    })
    ### END HIDDEN TESTS


test_unit_sgd_momentum()


# %% [markdown]
# ## Part 3: Adam
#
# SGD uses one learning rate for every weight. But gradients differ in scale by orders of
# magnitude between layers (and between a frequent word's embedding and a rare one's), so
# a learning rate that suits one weight is too big or too small for another. **Adam**
# (Kingma and Ba, 2014) gives each weight its own step size by keeping two running
# averages per weight:
#
# $$m \leftarrow \beta_1 m + (1 - \beta_1) g \qquad\qquad
# v \leftarrow \beta_2 v + (1 - \beta_2) g^2$$
#
# `m` is a smoothed gradient (like momentum), `v` a smoothed squared gradient (its
# scale). The step divides one by the square root of the other, so it is about `lr` in
# size whatever the scale of `g`:
#
# $$\hat m = \frac{m}{1 - \beta_1^t}, \qquad \hat v = \frac{v}{1 - \beta_2^t}, \qquad
# \theta \leftarrow \theta - \text{lr} \cdot \frac{\hat m}{\sqrt{\hat v} + \epsilon}$$
#
# **Bias correction.** `m` and `v` start at zero, so early on they are too small: after
# one step `m = 0.1 g` and `v = 0.001 g^2`. Uncorrected, the first step would be
# `lr * 0.1 g / sqrt(0.001 g^2)`, about `3.16 lr`: three times too big, exactly when the
# model is most fragile. Dividing by `1 - beta^t` (with `t` the number of steps this
# parameter has taken, starting at 1) removes the bias: `m_hat = g`, `v_hat = g^2`, and
# the first step is `lr * g / (|g| + eps)`, about `lr` per weight in the direction
# `-sign(g)`. As `t` grows the corrections tend to 1.
#
# `t` is counted **per parameter**, in its state (as PyTorch does): a parameter that
# receives its first gradient late (an embedding row of a rare token) must still get its
# first bias correction right.
#
# **`eps`** (1e-8) keeps the division finite when `v` is 0. **`weight_decay`** in Adam is
# L2 regularization, added to the gradient exactly as in SGD, *before* the averages.
#
# Worked example, `lr = 0.1`, one weight `theta = 1`, gradients `g1 = 2`, then `g2 = -1`:
#
# | t | m | v | m_hat | v_hat | step | theta |
# |---|---|---|-------|-------|------|-------|
# | 1 | 0.2 | 0.004 | 2 | 4 | -0.1 * 2 / 2 = -0.1 | 0.9 |
# | 2 | 0.08 | 0.004996 | 0.42105 | 2.49925 | -0.026634 | 0.873366 |
#
# Step 2 in full: `m_hat = 0.08 / 0.19 = 0.42105`, `v_hat = 0.004996 / 0.001999 = 2.49925`,
# and the step is `-0.1 * 0.42105 / 1.58090 = -0.026634` (`1.58090` is `sqrt(v_hat)`).
#
# Look at step 2: the gradient turned negative, yet theta kept *decreasing*. `m` still
# remembers the first, larger positive gradient (`0.9 * 0.2 - 0.1 * 1 = 0.08 > 0`), and the
# step is smaller because `v` says gradients here have been large. That memory is what
# smooths the noise of mini-batches.
#
# **Memory:** two buffers per parameter, `m` and `v`: Adam's state is twice the model.
# For a 7-billion-parameter model in float32 that is 28 GB of weights and 56 GB of Adam
# state, before a single activation is stored.
#
# Write `update` with vectorized NumPy on the whole parameter at once; no Python loop over
# elements. Create the buffers on the first update, with the parameter's shape and dtype.

# %% nbgrader={"grade": false, "grade_id": "adam", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class Adam(Optimizer):
    """Adam: per-weight steps from running averages of the gradient and its square.

    >>> w = Tensor([1.0, 1.0], requires_grad=True)
    >>> opt = Adam([w], lr=0.1)
    >>> w.grad = Tensor([1000.0, 0.001])  # gradients a million times apart
    >>> opt.step()
    >>> w  # the first step moves every weight by about lr
    Tensor([0.9, 0.9], requires_grad=True)
    """

    state_names = ("step", "exp_avg", "exp_avg_sq")

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        beta1, beta2 = betas
        if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
            raise ValueError(f"betas must each be in [0, 1), got {betas}")
        if eps < 0 or weight_decay < 0:
            raise ValueError(f"eps and weight_decay must be >= 0, got {eps} and {weight_decay}")
        super().__init__(params, lr)
        self.betas = (float(beta1), float(beta2))
        self.eps = float(eps)
        self.weight_decay = float(weight_decay)

    def update(self, param, grad, state):
        ### BEGIN SOLUTION
        if self.weight_decay:
            grad = grad + self.weight_decay * param  # L2: part of the gradient
        self._adam_step(param, grad, state)
        ### END SOLUTION

    def _adam_step(self, param, grad, state):
        """The Adam update proper, shared with AdamW."""
        ### BEGIN SOLUTION
        beta1, beta2 = self.betas
        if not state:
            state["step"] = 0
            state["exp_avg"] = np.zeros_like(param)
            state["exp_avg_sq"] = np.zeros_like(param)
        state["step"] += 1
        t = state["step"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m *= beta1
        m += (1.0 - beta1) * grad
        v *= beta2
        v += (1.0 - beta2) * (grad * grad)
        bias1 = 1.0 - beta1**t
        bias2 = 1.0 - beta2**t
        denom = np.sqrt(v) / math.sqrt(bias2) + self.eps
        param -= (self.lr / bias1) * (m / denom)
        ### END SOLUTION

    def _hyperparameters(self):
        return {"lr": self.lr, "betas": self.betas, "eps": self.eps,
                "weight_decay": self.weight_decay}


# %% [markdown]
# ### Test: Adam, with and without bias correction in mind

# %% nbgrader={"grade": true, "grade_id": "test_unit_adam", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_adam():
    """Adam's first steps match the worked example; the first step is ~lr for any scale."""
    w = Tensor([1.0], dtype=np.float64)
    opt = Adam([w], lr=0.1)
    w.grad = Tensor([2.0], dtype=np.float64)
    opt.step()
    got = w.data[0]
    assert abs(got - 0.9) < 1e-7, (
        f"Adam's first step from 1.0 with grad 2 should reach 0.9 (a step of lr), got {got:.6f}. "
        + ("A step of ~3.16 lr means the bias correction is missing: divide m by "
           "1 - beta1**t and v by 1 - beta2**t, with t starting at 1."
           if abs(got - (1 - 0.316)) < 0.01 else
           "Check m = b1*m + (1-b1)*g, v = b2*v + (1-b2)*g*g, and "
           "theta -= lr * m_hat / (sqrt(v_hat) + eps).")
    )
    w.grad = Tensor([-1.0], dtype=np.float64)
    opt.step()
    expect_close("Adam's second step (grad -1)", w.data, [0.873366],
                 "keep m and v from the first step in the state (update them in place or store "
                 "them back) and count t per step, so the second bias correction uses t = 2",
                 atol=1e-5)
    state = opt.state[0]
    assert state["step"] == 2, f"the state's step count is {state['step']}, expected 2"
    expect_close("m, v after two steps", [state["exp_avg"][0], state["exp_avg_sq"][0]],
                 [0.08, 0.004996], "m = b1*m + (1-b1)*g, v = b2*v + (1-b2)*g*g", atol=1e-8)
    cases = [  # (what, optimizer, start, gradients, expected weights, fix)
        ("Adam(lr=0.01), first step for gradients [1e-4, -3, 5e3]",
         lambda p: Adam(p, lr=0.01), [0.0, 0.0, 0.0], [[1e-4, -3.0, 5e3]],
         [[-0.01, 0.01, -0.01]], "about -lr * sign(g): each weight's step is normalized by "
         "sqrt(v_hat), whatever the gradient's scale"),
        ("Adam(lr=0.1, weight_decay=0.01) at w=2 with a zero gradient",
         lambda p: Adam(p, lr=0.1, weight_decay=0.01), [2.0], [[0.0]], [[1.9]],
         "weight_decay is L2: add weight_decay * param to the gradient before updating m and "
         "v (the decay 0.02 becomes the gradient, and Adam normalizes it to a step of lr)"),
    ]
    for what, make, start, grads, wants, fix in cases:
        _, opt = check_steps(what, make, start, grads, wants, fix, atol=1e-5)
    assert opt.state[0]["exp_avg"].dtype == np.float32, (
        "float32 parameters must keep float32 buffers (np.zeros_like(param))"
    )
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    def by_hand(start, grads, lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0, decoupled=False):
        w = np.array(start, dtype=np.float64)
        m, v, path = np.zeros_like(w), np.zeros_like(w), []
        for t, g in enumerate(grads, start=1):
            g = np.asarray(g, dtype=np.float64)
            if decoupled:
                w = w * (1 - lr * wd)
            else:
                g = g + wd * w
            m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
            w = w - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
            path.append(w.copy())
        return path

    rng = np.random.default_rng(7003)
    start = rng.standard_normal((3, 2))
    grads = [rng.standard_normal((3, 2)) * 10.0**k for k in (-3, 0, 2, 1)]
    hidden_cases(check_steps, {
        "a matrix over four steps": ("Adam", lambda p: Adam(p, lr=0.01), start.copy(), grads,
                                     by_hand(start, grads, 0.01), "", np.float64, 1e-9),
        "other betas": ("Adam", lambda p: Adam(p, lr=0.02, betas=(0.8, 0.99)), start.copy(), grads,
                        by_hand(start, grads, 0.02, 0.8, 0.99), "", np.float64, 1e-9),
        "weight decay added to the gradient": (
            "Adam", lambda p: Adam(p, lr=0.01, weight_decay=0.1), start.copy(), grads,
                            by_hand(start, grads, 0.01, wd=0.1), "", np.float64, 1e-9),
        "a large eps": ("Adam", lambda p: Adam(p, lr=0.1, eps=1.0), start.copy(), grads,
                        by_hand(start, grads, 0.1, eps=1.0), "", np.float64, 1e-9),
        "float32 over four steps": ("Adam", lambda p: Adam(p, lr=0.01), start.copy(), grads,
                                    by_hand(start, grads, 0.01), "", np.float32, 1e-5),
    })
    ### END HIDDEN TESTS


test_unit_adam()


# %% [markdown]
# ## Part 4: AdamW, decoupled weight decay
#
# Adding `weight_decay * theta` to the gradient works for SGD, where it shrinks each weight
# by `lr * wd * theta` per step. In Adam it does not do what you want: the decay term is
# divided by `sqrt(v_hat)` like the rest of the gradient. Weights with large gradients
# (large `v`) are barely decayed, and weights with tiny gradients are decayed by about
# `lr` per step whatever their size (you saw it in the last test: a decay gradient of
# 0.02 moved the weight by 0.1).
#
# Loshchilov and Hutter (2017) **decouple** the decay from the gradient: shrink the weight
# directly, then take an ordinary Adam step with the raw gradient:
#
# $$\theta \leftarrow \theta \cdot (1 - \text{lr} \cdot \text{wd}), \qquad
# \text{then the Adam step with } g$$
#
# Now every weight shrinks by the same fraction per step, independent of its gradients.
# AdamW is what trains transformers (GPT-2, LLaMA, nanoGPT all use it); its default
# `weight_decay` is 0.01. With a zero gradient and `lr = 0.1`, `wd = 0.01`, `theta = 2`:
#
# - Adam with L2: the step is `lr * sign(0.02) = 0.1`, so `theta = 1.9`;
# - AdamW: `theta = 2 * (1 - 0.001) = 1.998`, and the Adam step on `g = 0` is 0.
#
# Write `AdamW.update` using the Adam step you already wrote (`self._adam_step`).

# %% nbgrader={"grade": false, "grade_id": "adamw", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class AdamW(Adam):
    """Adam with decoupled weight decay: shrink the weights, then take an Adam step.

    >>> w = Tensor([1.0, -3.0], requires_grad=True)
    >>> opt = AdamW([w], lr=0.1, weight_decay=0.2)
    >>> w.grad = Tensor([0.0, 0.0])  # no gradient: only the decay, times 1 - lr * wd
    >>> opt.step()
    >>> w
    Tensor([ 0.98, -2.94], requires_grad=True)
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, lr, betas, eps, weight_decay)

    def update(self, param, grad, state):
        ### BEGIN SOLUTION
        if self.weight_decay:
            param *= 1.0 - self.lr * self.weight_decay
        self._adam_step(param, grad, state)
        ### END SOLUTION


# %% [markdown]
# ### Test: decoupled decay is not L2

# %% nbgrader={"grade": true, "grade_id": "test_unit_adamw", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_adamw():
    """AdamW shrinks weights by (1 - lr * wd) and otherwise takes the plain Adam step."""
    w = Tensor([2.0, -4.0], dtype=np.float64)
    w.grad = Tensor([0.0, 0.0], dtype=np.float64)
    AdamW([w], lr=0.1, weight_decay=0.01).step()
    assert np.allclose(w.data, [1.998, -3.996], rtol=1e-9), (
        f"AdamW(lr=0.1, weight_decay=0.01) with zero gradients should shrink w=[2, -4] to "
        f"[1.998, -3.996] (times 1 - lr * wd), got {w.data}. "
        + ("[1.9, -3.9] means the decay was added to the gradient (that is Adam's L2): "
           "multiply param by 1 - lr * wd instead, before the Adam step."
           if np.allclose(w.data, [1.9, -3.9]) else "")
    )
    assert AdamW([Tensor([1.0])]).weight_decay == 0.01, "AdamW's default weight_decay is 0.01"

    def check_decoupled(lr, wd, grads):
        """AdamW must equal: shrink by (1 - lr * wd), then Adam's step with the raw gradient."""
        a = Tensor([1.0], dtype=np.float64)
        b = Tensor([1.0 * (1 - lr * wd)], dtype=np.float64)
        opt_w, opt_a = AdamW([a], lr=lr, weight_decay=wd), Adam([b], lr=lr)
        for i, g in enumerate(grads):
            a.grad = Tensor([g], dtype=np.float64)
            b.grad = Tensor([g], dtype=np.float64)
            opt_w.step()
            opt_a.step()
            if i + 1 < len(grads):
                b.data *= 1 - lr * wd
        assert np.allclose(a.data, b.data, rtol=1e-12), (
            f"AdamW should equal 'shrink by (1 - lr * wd), then Adam's step with the raw "
            f"gradient': got {a.data[0]:.6f}, expected {b.data[0]:.6f}. Do not add the decay to "
            "the gradient, and shrink before (not after) the Adam step"
        )
        return opt_w

    # With a gradient: decay first, then exactly Adam's step.
    opt_w = check_decoupled(0.1, 0.5, (2.0, -1.0, 0.5))
    assert isinstance(opt_w, Adam), "AdamW can subclass Adam: only update() differs"
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_decoupled, {
        "a small decay over many steps": (0.01, 0.05, (1.0, -2.0, 3.0, 0.5, -0.25, 4.0)),
        "a large learning rate": (0.5, 0.2, (-1.0, -1.0, 2.0)),
        "one step": (0.03, 1.0, (7.0,)),
    })
    ### END HIDDEN TESTS


test_unit_adamw()


# %% [markdown]
# ## Part 5: saving and resuming
#
# A long training run stops: the machine is shared, the job has a time limit, the power
# goes out. To resume, the weights are not enough. Adam's `m` and `v` hold the last
# thousands of gradients; restart them at zero and the bias correction starts over, the
# first steps are about `lr` per weight in whatever direction the current batch points,
# and the loss jumps. Resumed training must continue **exactly** as if it had never
# stopped, and that needs the optimizer state: the buffers, each parameter's step count,
# the learning rate and the step counter.
#
# `state_dict()` and `load_state_dict()` are written (Part 1). The test below checks the
# property that matters, bit for bit: three steps, save, a *new* optimizer on the same
# parameters, load, two more steps, gives exactly the same weights as five steps without
# stopping.

# %% nbgrader={"grade": true, "grade_id": "test_unit_optimizer_state", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_optimizer_state():
    """Adam state saved after 3 steps and loaded into a new optimizer resumes bit-identically."""
    rng = np.random.default_rng(7)

    def check_resumed(make, shape, total, saved_at):
        """`total` steps straight, or `saved_at` steps, state_dict, load, and the rest."""
        grads = [rng.standard_normal(shape).astype(np.float32) for _ in range(total)]
        start = rng.standard_normal(shape).astype(np.float32)
        straight = Tensor(start.copy())
        opt = make([straight])
        for g in grads:
            straight.grad = Tensor(g)
            opt.step()
        resumed = Tensor(start.copy())
        first = make([resumed])
        for g in grads[:saved_at]:
            resumed.grad = Tensor(g)
            first.step()
        saved = first.state_dict()
        assert saved["steps"] == saved_at, (
            f"the saved state should record {saved_at} steps, got {saved.get('steps')}"
        )
        for key, value in first.state[0].items():
            if isinstance(value, np.ndarray):
                assert not np.shares_memory(saved[f"param.0.{key}"], value), (
                    "state_dict() must copy the buffers: update() changes them in place"
                )
        second = make([resumed])
        second.load_state_dict(saved)
        for g in grads[saved_at:]:
            resumed.grad = Tensor(g)
            second.step()
        assert np.array_equal(resumed.data, straight.data), (
            f"resumed training differs from uninterrupted training by "
            f"{np.abs(resumed.data - straight.data).max():.3g}: the restored optimizer must "
            "continue with the saved m, v and per-parameter step count"
        )
        assert second.steps == total, (
            f"the step counter should continue from {saved_at} to {total}, got {second.steps}"
        )
        return saved

    saved = check_resumed(lambda p: AdamW(p, lr=0.05), (3, 2), 5, 3)
    assert saved["param.0.step"] == 3, (
        f"the saved state should record 3 steps per parameter, got {saved.get('param.0.step')}"
    )
    start = rng.standard_normal((3, 2)).astype(np.float32)
    grads = [rng.standard_normal((3, 2)).astype(np.float32)]
    momentum_state = SGD([Tensor(start.copy())], lr=0.1, momentum=0.9)
    momentum_state.params[0].grad = Tensor(grads[0])
    momentum_state.step()
    expect_error("loading SGD's state into AdamW",
                 lambda: AdamW([Tensor(start.copy())]).load_state_dict(
                     momentum_state.state_dict()), ValueError, ["momentum_buffer"],
                 "name the unexpected key")
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_resumed, {
        "Adam saved after one step": (lambda p: Adam(p, lr=0.01, weight_decay=0.1), (4,), 4, 1),
        "momentum SGD saved late": (lambda p: SGD(p, lr=0.1, momentum=0.9, nesterov=True),
                                    (2, 2, 2), 7, 5),
        "AdamW saved before any step": (lambda p: AdamW(p, lr=0.02), (5,), 3, 0),
    })
    ### END HIDDEN TESTS


test_unit_optimizer_state()


# %% [markdown]
# ## Part 6: gradient clipping
#
# Now and then a batch produces a huge gradient: a rare token, an outlier, a step that
# lands on a cliff of the loss surface. One such step can undo hours of training, and with
# SGD the step is proportional to the gradient. **Clipping by global norm** caps the
# length of the whole gradient vector (all parameters' gradients seen as one long vector):
#
# $$\text{total} = \sqrt{\textstyle\sum_p \lVert g_p \rVert^2}, \qquad
# \text{if total} > \text{max\_norm}: \;
# g_p \leftarrow g_p \cdot \frac{\text{max\_norm}}{\text{total} + 10^{-6}}$$
#
# Scaling every gradient by the same factor keeps the **direction** of the update and only
# shortens it. (Clipping each element to `[-c, c]` instead would change the direction.)
# The `1e-6` keeps the division safe, as in PyTorch. Scale the gradient arrays **in
# place**: the function's trailing underscore says so, PyTorch style.
#
# Return the total norm *before* clipping: it is the number to log. A training run whose
# gradient norm creeps up or spikes is telling you something before its loss does.
#
# Example: gradients `[3, 4]` and `[12]` have total norm `sqrt(9 + 16 + 144) = 13`. With
# `max_norm = 6.5` each is halved: `[1.5, 2]` and `[6]`, and the function returns 13.

# %% nbgrader={"grade": false, "grade_id": "clip", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def clip_grad_norm_(params, max_norm):
    """Scale all gradients in place so their global L2 norm is at most max_norm.

    Returns the global norm before clipping, as a float. Parameters whose grad is None
    are ignored.

    >>> a, b = Tensor([3.0], requires_grad=True), Tensor([4.0], requires_grad=True)
    >>> a.grad, b.grad = Tensor([3.0]), Tensor([4.0])
    >>> clip_grad_norm_([a, b], max_norm=1.0)
    5.0
    >>> a.grad, b.grad
    (Tensor([0.6]), Tensor([0.8]))
    """
    if isinstance(params, Tensor):
        params = [params]
    ### BEGIN SOLUTION
    grads, seen = [], set()
    for p in params:
        if p.grad is not None and id(p) not in seen:
            seen.add(id(p))
            grads.append(_grad_array(p))
    if not grads:
        return 0.0
    total = math.sqrt(sum(float(np.vdot(g, g)) for g in grads))
    scale = max_norm / (total + 1e-6)
    if scale < 1.0:
        for g in grads:
            g *= g.dtype.type(scale)
    return total
    ### END SOLUTION


# %% [markdown]
# ### Test: clipping

# %% nbgrader={"grade": true, "grade_id": "test_unit_clip_grad_norm", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_clip_grad_norm():
    """The global norm is returned; gradients are scaled together, in place, only if too long."""
    a, b, c = Tensor([0.0, 0.0]), Tensor([0.0]), Tensor([0.0])
    a.grad, b.grad = Tensor([3.0, 4.0]), Tensor([12.0])
    a_grad = a.grad.data
    total = clip_grad_norm_([a, b, c], max_norm=6.5)
    assert isinstance(total, float) and abs(total - 13.0) < 1e-5, (
        f"the global norm of gradients [3, 4] and [12] is sqrt(9 + 16 + 144) = 13, got {total}. "
        + ("17 is the sum of the per-parameter norms 5 + 12: square them, add, then take the "
           "square root" if isinstance(total, float) and abs(total - 17) < 1e-4 else
           "Return the norm before clipping, as a float")
    )
    assert (np.allclose(a.grad.data, [1.5, 2.0], rtol=1e-5)
            and np.allclose(b.grad.data, [6.0], rtol=1e-5)), (
        f"with max_norm 6.5 every gradient is halved: expected [1.5, 2] and [6], got "
        f"{a.grad.data} and {b.grad.data}. Scale all of them by max_norm / (total + 1e-6)"
    )
    assert a.grad.data is a_grad, (
        "clip_grad_norm_ must scale the gradient arrays in place (g *= scale), not replace them"
    )
    assert a.grad.dtype == np.float32, f"clipping turned a float32 gradient into {a.grad.dtype}"
    assert c.grad is None, "a parameter without a gradient is skipped and keeps grad None"

    small = Tensor([0.0, 0.0])
    small.grad = Tensor([0.3, 0.4])
    total = clip_grad_norm_([small], max_norm=1.0)
    assert abs(total - 0.5) < 1e-6 and np.allclose(small.grad.data, [0.3, 0.4]), (
        f"a gradient of norm 0.5 under max_norm 1.0 must not change, got {small.grad.data}: "
        "only scale when the norm is larger than max_norm"
    )
    assert clip_grad_norm_([Tensor([1.0])], max_norm=1.0) == 0.0, (
        "with no gradients at all the norm is 0.0"
    )
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    def check_clipped(grads, max_norm):
        params = [Tensor(np.zeros(np.shape(g) if g is not None else 1)) for g in grads]
        for p, g in zip(params, grads):
            p.grad = None if g is None else Tensor(g)
        arrays = [p.grad.data for p in params if p.grad is not None]
        total = float(np.sqrt(sum(float(np.sum(np.square(a, dtype=np.float64))) for a in arrays)))
        scale = max_norm / (total + 1e-6) if total > max_norm else 1.0
        want = [None if g is None else np.asarray(g, dtype=np.float64) * scale for g in grads]
        got = clip_grad_norm_(params, max_norm=max_norm)
        expect_close("the returned norm", got, total, "", rtol=1e-5)
        for p, w, a in zip((p for p in params if p.grad is not None),
                           (w for w in want if w is not None), arrays):
            expect_close("a clipped gradient", p.grad.data, w, "", rtol=1e-5, atol=1e-7)
            expect_close("the same array", float(p.grad.data is a), 1.0, "")

    rng = np.random.default_rng(7004)
    hidden_cases(check_clipped, {
        "matrices far over the limit": ([rng.standard_normal((3, 4)) * 50, rng.standard_normal(5)],
                                        1.0),
        "one gradient among missing ones": ([None, np.array([0.0, -9.0, 12.0]), None], 3.0),
        "just under the limit": ([np.array([0.6, 0.8])], 1.0001),
        "a limit below one": ([np.full((2, 2), 0.5), np.full(3, -0.5)], 0.25),
    })
    ### END HIDDEN TESTS


test_unit_clip_grad_norm()


# %% [markdown]
# ## Optimizers at work
#
# The Rosenbrock function `f(x, y) = (1 - x)^2 + 100 (y - x^2)^2` has its minimum at
# `(1, 1)`, at the bottom of a long, narrow, curved valley: steep walls, a nearly flat
# floor. It is a small picture of what makes training hard. Its gradient is simple enough
# to write by hand, so the cell below runs each optimizer for 1,000 steps from `(-1.5, 2)`
# and prints how far from the minimum each one ends up.

# %% nbgrader={"grade": false, "grade_id": "demo-rosenbrock", "locked": false, "schema_version": 3, "solution": false, "task": false}
def rosenbrock_race(steps=1000):
    def grad(x, y):
        return np.array([-2 * (1 - x) - 400 * x * (y - x * x), 200 * (y - x * x)])

    runs = {
        "SGD lr=1e-3": lambda p: SGD([p], lr=1e-3),
        "SGD lr=2e-3": lambda p: SGD([p], lr=2e-3),
        "SGD lr=2.1e-3": lambda p: SGD([p], lr=2.1e-3),
        "SGD lr=1e-3 momentum=0.9": lambda p: SGD([p], lr=1e-3, momentum=0.9),
        "Adam lr=0.1": lambda p: Adam([p], lr=0.1),
    }
    for name, make in runs.items():
        p = Tensor([-1.5, 2.0], dtype=np.float64)
        opt = make(p)
        with np.errstate(all="ignore"):  # one of these runs overflows, on purpose
            for _ in range(steps):
                p.grad = Tensor(grad(*p.data), dtype=np.float64)
                opt.step()
        x, y = p.data
        print(f"{name:26s} -> ({x:+.4f}, {y:+.4f})   "
              f"distance to (1, 1) = {np.hypot(x - 1, y - 1):.4f}")


rosenbrock_race()

# %% [markdown]
# Plain SGD creeps along the flat valley floor. Doubling its learning rate helps, but 5%
# more and it diverges to `nan`: across the valley the curvature is about 1,000, and
# gradient descent is only stable for `lr < 2 / curvature`. The steepest direction sets
# the speed limit for all the others. Momentum builds up speed along the floor, where
# successive gradients agree, while the zig-zags across the walls cancel. Adam runs with a
# learning rate fifty times larger than SGD can bear, and that is the point: its step is
# about `lr` per weight whatever the gradient's scale, so its `lr` is measured in units of
# the parameters, not of the gradients. (Try `Adam` with `lr=0.01`: still far away after
# 1,000 steps. Every optimizer needs its learning rate tuned.)
#
# ## Systems analysis: what an optimizer costs, measured on your machine
#
# **Memory.** The cell below builds a parameter set shaped like a small GPT (4 layers,
# 128 wide, a 65-character vocabulary: the model of the last milestone), gives every
# parameter a gradient, takes one step with each optimizer (which allocates its buffers)
# and measures the state it keeps, as a multiple of the model's own size.
#
# **Time.** An optimizer step does a handful of element-wise operations per weight: no
# matrix products, so it is bound by memory bandwidth, not arithmetic. Adam reads the
# parameter, gradient, `m` and `v` and writes three of them back: about 7 arrays' worth of
# memory traffic per step, plus temporaries. The cell times the step and converts it to
# an effective bandwidth.

# %% nbgrader={"grade": false, "grade_id": "analysis", "locked": false, "schema_version": 3, "solution": false, "task": false}
import time


def gpt_like_parameters(layers=4, width=128, vocab=65, context=64, seed=0):
    rng = np.random.default_rng(seed)
    shapes = [(vocab, width), (context, width)]
    for _ in range(layers):
        shapes += [(width,), (width,), (3 * width, width), (3 * width,), (width, width),
                   (width,), (width,), (width,), (4 * width, width), (4 * width,),
                   (width, 4 * width), (width,)]
    shapes += [(width,), (width,)]
    params = [Tensor(rng.standard_normal(s).astype(np.float32) * 0.02) for s in shapes]
    for p in params:
        p.grad = Tensor(rng.standard_normal(p.shape).astype(np.float32) * 0.01)
    return params


def optimizer_cost_report(repeats=5):
    params = gpt_like_parameters()
    count = sum(p.size for p in params)
    param_bytes = sum(p.data.nbytes for p in params)
    print(f"parameters: {len(params)} tensors, {count:,} weights, "
          f"{param_bytes / 2**20:.2f} MiB (float32)")
    for name, make in [
        ("SGD", lambda ps: SGD(ps, lr=0.01)),
        ("SGD momentum", lambda ps: SGD(ps, lr=0.01, momentum=0.9)),
        ("Adam", lambda ps: Adam(ps, lr=1e-3)),
        ("AdamW", lambda ps: AdamW(ps, lr=1e-3)),
    ]:
        opt = make(params)
        opt.step()  # allocates the state
        state_bytes = sum(
            v.nbytes for s in opt.state for v in s.values() if isinstance(v, np.ndarray)
        )
        start = time.perf_counter()
        for _ in range(repeats):
            opt.step()
        seconds = (time.perf_counter() - start) / repeats
        print(f"{name:13s} state {state_bytes / 2**20:5.2f} MiB = {state_bytes / param_bytes:.0f}x "
              f"the model   step {seconds * 1e3:6.2f} ms   "
              f"{count / seconds / 1e6:7.1f} M weights/s")
    # What bandwidth does Adam reach? About 7 arrays of float32 move per step.
    moved = 7 * param_bytes
    print(f"Adam moves ~{moved / 2**20:.1f} MiB per step: "
          f"~{moved / seconds / 1e9:.1f} GB/s effective")


optimizer_cost_report()

# %% [markdown]
# Read the figures: SGD keeps nothing, momentum one copy of the model, Adam and AdamW two.
# Training with Adam therefore needs at least four times the model's memory (weights,
# gradients, `m`, `v`) before activations; this is why large models shard optimizer
# state across machines (ZeRO) or keep it in lower precision. The step itself takes
# milliseconds for a model that takes tens of milliseconds per forward and backward pass
# (module 08 measures that split): the optimizer is rarely the bottleneck in time, but
# often in memory. The effective bandwidth is well below your memory's peak, because each
# NumPy expression makes a temporary array and walks memory again; a fused kernel that
# does the whole update in one pass (what `torch.optim.Adam(fused=True)` does) is the fix.
#
# ## What comes next
#
# - **Module 08 (training)** puts `backward()` and `step()` in a loop, with learning-rate
#   schedules that change `opt.lr` as training goes, checkpoints that save
#   `state_dict()` next to the weights, and runs that resume exactly where they stopped.
# - **Milestones** 1957 (perceptron) and 1969 (XOR) become runnable: your own optimizer
#   trains your own layers on your own autograd.
