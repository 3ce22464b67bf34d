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
# # Module 03: Layers
#
# ## Overview
#
# A neural network is a function with millions of numbers inside it, the **parameters**,
# that training adjusts. Your `Tensor` can already do the arithmetic of a network; what it
# cannot do yet is keep track of which tensors are parameters, of which layer, under which
# name. In this module you build that bookkeeping, the `Module`, and the first layers made
# with it.
#
# `Module` is the most reused class of the course. The optimizer of module 07 asks a model
# for `model.parameters()`; the training loop of module 08 saves `model.state_dict()` and
# switches `model.train()` / `model.eval()`; the GPT of module 13 is a `Module` made of
# `Module`s, and loads weights by name. All of that rests on one idea: when you write
# `self.fc = Linear(4, 8)` inside a module, the module *notices* and records `fc` as a child.
#
# **In numbers.** One `Linear(768, 3072)`, the first layer of a GPT-2 MLP, holds
# $768 \cdot 3072 + 3072 = 2\,362\,368$ parameters, 9.4 MB in float32; a GPT-2-sized model
# has 24 layers of that size among its 163M parameters.
#
# ## Learning objectives
#
# - Explain what a parameter is and why it is a special kind of `Tensor`.
# - Build a registry with `__setattr__`, and walk a tree of modules to find every parameter
#   exactly once, even when two layers share (tie) a weight.
# - Give every parameter a dotted name (`"encoder.fc.weight"`), and save and load a model's
#   weights by those names, with errors that say everything that is wrong at once.
# - Implement `Linear` as `x @ W.T + b`, and measure why its initial weights are scaled by
#   `1 / sqrt(in_features)`.
# - Implement dropout, and explain why kept units are scaled by `1 / (1 - p)`.
# - Count a model's parameters and bytes, and measure how batch size changes throughput.
#
# ## What you build
#
# - `Parameter`: a `Tensor` that always requires gradients.
# - `Module`: the registry (`parameters()`, `named_parameters()`, `children()`,
#   `modules()`), `train()` / `eval()`, `zero_grad()`, `state_dict()` /
#   `load_state_dict()`, and a readable `repr`.
# - `Linear`, `Dropout` and `Sequential`.
#
# ## What you are not building yet
#
# - **Gradients.** A `Parameter` requires grad, and `Linear` is built from `Tensor`
#   operations so that module 06 can differentiate it without changing a line here. Nothing
#   in this module calls `backward()`.
# - **Training.** Losses are module 04, optimizers module 07, the training loop module 08.
# - **Buffers** (non-trainable state saved with a model, such as a running mean). None of
#   this course's layers needs one.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| default_exp core.layers
#| export
import math
from collections import namedtuple

import numpy as np

from tinytorch.core.tensor import ShapeError, Tensor, default_generator

# %% [markdown]
# The lesson itself (tests and measurements, not the package) also uses the seed function of
# module 01 and the course's test helpers, given there:

# %% nbgrader={"grade": false, "grade_id": "lesson-imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
from tinytorch.core.tensor import expect_close, expect_error, manual_seed, short_repr


def expect_names(what, got, want, fix):
    """Assert that the names (or values) `got` are the list `want`, in order."""
    got = list(got)
    assert got == list(want), f"{what} gave {got}, expected {list(want)}: {fix}"

# %% [markdown]
# ## Part 1: parameters
#
# A model holds two kinds of tensors: **parameters**, which training changes (weights,
# biases), and everything else (inputs, intermediate activations, constants). The difference
# matters to three pieces of the framework:
#
# - autograd (module 06) must compute a gradient for every parameter, so a parameter always
#   has `requires_grad=True`;
# - the optimizer (module 07) updates exactly the parameters, so it needs to find them all;
# - a checkpoint saves exactly the parameters.
#
# PyTorch marks parameters with a subclass of `Tensor`, `nn.Parameter`, and so do we. Being a
# subclass, a `Parameter` works in every operation a `Tensor` works in (`x @ w`, `w.T`, ...),
# and the results of those operations are ordinary `Tensor`s: only the leaf is special.
#
# A parameter is float32 unless asked otherwise (`Tensor`'s rule) and, like `Tensor`, it does
# not copy a float32 array it is given.

# %% nbgrader={"grade": false, "grade_id": "parameter", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class Parameter(Tensor):
    """A Tensor that a Module owns and training updates: it always requires grad.

    >>> w = Parameter(np.ones((2, 2)))
    >>> w.requires_grad, w.dtype
    (True, dtype('float32'))
    >>> type(w * 2).__name__  # results of ops on it are plain Tensors
    'Tensor'
    """

    def __init__(self, data, dtype=None):
        ### BEGIN SOLUTION
        super().__init__(data, dtype=dtype, requires_grad=True)
        ### END SOLUTION

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


# %% nbgrader={"grade": true, "grade_id": "test_unit_parameter", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
def test_unit_parameter():
    """Parameters are float32 Tensors that require grad; ops on them record a graph."""
    fix = "call Tensor.__init__: super().__init__(data, dtype=dtype, requires_grad=True)"

    def check_parameter(data, dtype, want):
        p = Parameter(data, dtype=dtype)
        what = f"Parameter({short_repr(data)}, dtype={dtype and dtype.__name__})"
        assert isinstance(p, Tensor), f"{what} is not a Tensor: Parameter must subclass Tensor"
        assert p.requires_grad, f"{what}.requires_grad is False: {fix}"
        assert p.dtype == want and p.shape == np.shape(data), (
            f"{what} is {p.dtype} {p.shape}, expected {np.dtype(want)} {np.shape(data)}: let "
            "Tensor.__init__ do the conversion, and pass dtype through"
        )

    a = np.ones(3, dtype=np.float32)
    cases = [  # (data, dtype, expected dtype)
        (np.arange(6).reshape(2, 3), None, np.float32),
        (a, None, np.float32),
        ([1.0], np.float64, np.float64),
    ]
    for data, dtype, want in cases:
        check_parameter(data, dtype, want)
    assert np.shares_memory(Parameter(a).data, a), (
        "Parameter(float32_array) copied the array: Tensor.__init__ already avoids the copy, "
        "call it instead of building the array yourself"
    )
    y = Parameter(a) * 2
    assert type(y) is Tensor and y.requires_grad and y._ctx is not None, (
        "p * 2 should be an ordinary Tensor that requires grad and records its parent"
    )
    assert "Parameter" in repr(Parameter(a)), "repr(Parameter) should say Parameter"
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_parameter, {
        "a three-axis float64 array": (np.zeros((2, 1, 4)), None, np.float32),
        "a Python number": (2.5, None, np.float32),
        "float16 asked for": (np.ones(5), np.float16, np.float16),
        "a nested list of integers": ([[1, 2], [3, 4], [5, 6]], None, np.float32),
    })
    ### END HIDDEN TESTS


test_unit_parameter()


# %% [markdown]
# ## Part 2: Module, a registry of parameters and sub-modules
#
# A model is a tree. A `Sequential` holds `Linear`s; a GPT holds blocks that hold attention
# layers that hold `Linear`s. Each node of the tree is a `Module`: it owns some parameters
# directly and some child modules, and it has a `forward`.
#
# ```
# Net                          named_parameters()
# ├── scale   (Parameter)      scale
# ├── encoder (Encoder)
# │   └── fc  (Linear)         encoder.fc.weight, encoder.fc.bias
# └── head    (Linear)         head.weight, head.bias
# ```
#
# ### The registry: `__setattr__`
#
# How does `Net` learn that it has a child called `encoder`? Python calls
# `self.__setattr__(name, value)` for every `self.name = value`. `Module` overrides it:
#
# - a `Parameter` is recorded in `self._parameters[name]` (and dropped from `_modules`);
# - a `Module` is recorded in `self._modules[name]` (and dropped from `_parameters`);
# - anything else (a number, `None`, a plain `Tensor`) is an ordinary attribute, and **also
#   removes** `name` from both registries, so that `self.bias = None` really drops a bias.
#
# Re-assigning a name replaces its entry: `self.head = Linear(8, 3)` swaps the old head for
# the new one, which keeps the old one's place in the order (a Python `dict` keeps a key's
# position when its value changes; PyTorch behaves the same way).
#
# In every case the value is also stored as a normal attribute (with
# `object.__setattr__(self, name, value)`), so `self.fc` reads it back as usual.
#
# Why a registry, and not a scan of `self.__dict__` for parameters? A scan finds whatever
# happens to be lying around (a tensor kept for debugging, a list of layers that is not meant
# to be trained), its order depends on how attributes were created, and every call to
# `parameters()` pays for it. A registry records exactly what was assigned, in the order it
# was assigned, once. (A plain Python `list` of layers is **not** registered: use
# `Sequential`, or assign each layer to its own attribute.)
#
# The registries must exist before the first assignment, which is why every subclass starts
# its `__init__` with `super().__init__()`. Forgetting that line is the most common mistake
# with modules, so `__setattr__` checks for it and says so.
#
# ### Walking the tree: each parameter once
#
# `named_modules()` walks the tree depth-first, the module itself first, with dotted
# prefixes: `("", net)`, `("encoder", ...)`, `("encoder.fc", ...)`, `("head", ...)`.
# `named_parameters()` visits each of those modules and yields its own parameters,
# prefixed: `"encoder.fc.weight"`. This is PyTorch's order, so names and order match its
# checkpoints.
#
# Both walks skip what they have already seen, **by identity** (`id(obj)`), not by name and
# not by value. Two layers may share one weight: a language model often uses the same matrix
# to embed tokens and to score the next token ("tied weights"). That matrix is one
# `Parameter` reachable under two names. If `parameters()` yielded it twice, the optimizer
# would apply every update twice, and the parameter count would be wrong. The same goes for
# one module used twice (`Sequential(block, block)`).
#
# ### Modes and gradients
#
# Some layers behave differently in training and evaluation (dropout, Part 4). Every module
# has a `training` flag; `train(mode=True)` sets it on the module **and all its
# descendants**, and returns the module so you can write `model = Net().eval()`.
# `zero_grad()` sets every parameter's `.grad` to `None`. In module 06 gradients
# **accumulate**: each `backward()` adds to `.grad`, so a training loop clears them before
# every step. Setting `None` is cheaper than filling zeros, and makes "no gradient yet"
# visible.
#
# ### Saving and loading: state dicts
#
# `state_dict()` maps every parameter name to a **copy** of its array: a snapshot that later
# training cannot change. Unlike `named_parameters()`, it lists a tied parameter under each
# of its names (PyTorch does the same, so checkpoints have the names the model has).
#
# `load_state_dict(state)` writes values **into the existing arrays** (`p.data[...] =
# value`). It does not replace the `Parameter` objects: the optimizer holds references to
# them, and would go on updating the old ones. Writing into a float32 array also keeps the
# model float32 when the checkpoint holds float64.
#
# A load either succeeds completely or changes nothing. It first compares the keys and
# shapes, collects **every** problem (missing keys, unexpected keys, shape mismatches, each
# with both shapes), and raises one error listing them all. Fixing a checkpoint one error at
# a time, each found after a new run, is a miserable afternoon. With `strict=False`, missing
# and unexpected keys are allowed (and returned); a wrong shape is always an error. The error
# type, `StateDictError`, is both a `KeyError` and a `ValueError`, so code written for either
# convention catches it.
#
# ### repr
#
# `print(model)` shows the tree, in PyTorch's format. A layer describes its own settings in
# `extra_repr()` (for `Linear`: `in_features=4, out_features=8, bias=True`).
#
# Read the whole class first; the methods you write are marked.

# %% nbgrader={"grade": false, "grade_id": "module", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class StateDictError(KeyError, ValueError):
    """A state dict whose keys or shapes do not fit the model; the message lists them all.

    >>> try:
    ...     Linear(2, 3).load_state_dict({"weight": np.zeros((3, 3))})
    ... except StateDictError as error:
    ...     for line in str(error).splitlines()[:3]:
    ...         print(line)
    load_state_dict for Linear failed, nothing was loaded:
      missing keys (in the model, not in the state dict): 'bias'
      shape mismatches: 'weight': state dict has shape (3, 3), model has (3, 2)
    """

    def __str__(self):  # KeyError would print the message in quotes, on one line
        return str(self.args[0]) if self.args else ""


_IncompatibleKeys = namedtuple("_IncompatibleKeys", ["missing_keys", "unexpected_keys"])
_call_observers = []  # objects with enter(module) and exit(module); module 14's profiler


class Module:
    """Base class of every layer and model: a registry of parameters and sub-modules.

    >>> class TwoLayer(Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.hidden = Linear(4, 8)
    ...         self.out = Linear(8, 2)
    ...     def forward(self, x):
    ...         return self.out(self.hidden(x))
    >>> model = TwoLayer()
    >>> [name for name, _ in model.named_parameters()]
    ['hidden.weight', 'hidden.bias', 'out.weight', 'out.bias']
    >>> model.num_parameters(), model(Tensor(np.ones((3, 4)))).shape
    (58, (3, 2))
    >>> model.eval().training, model.hidden.training
    (False, False)
    >>> other = TwoLayer()
    >>> other.load_state_dict(model.state_dict())
    _IncompatibleKeys(missing_keys=[], unexpected_keys=[])
    >>> bool((other.out.weight.data == model.out.weight.data).all())
    True
    """

    def __init__(self):
        # object.__setattr__ skips our own __setattr__, which needs these to exist.
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)

    # ---- the registry -------------------------------------------------------------------
    def __setattr__(self, name, value):
        """Record Parameters in _parameters and Modules in _modules, then store the value."""
        ### BEGIN SOLUTION
        registries = self.__dict__.get("_parameters"), self.__dict__.get("_modules")
        if registries[0] is None or registries[1] is None:
            if isinstance(value, (Parameter, Module)):
                raise AttributeError(
                    f"cannot assign {type(value).__name__} '{name}' before Module.__init__() "
                    f"ran: call super().__init__() at the top of {type(self).__name__}.__init__"
                )
            object.__setattr__(self, name, value)
            return
        parameters, modules = registries
        if isinstance(value, Parameter):
            modules.pop(name, None)
            parameters[name] = value  # a re-assigned name keeps its place in the order
        elif isinstance(value, Module):
            parameters.pop(name, None)
            modules[name] = value
        else:
            parameters.pop(name, None)
            modules.pop(name, None)
        ### END SOLUTION
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        self.__dict__.get("_parameters", {}).pop(name, None)
        self.__dict__.get("_modules", {}).pop(name, None)
        object.__delattr__(self, name)

    def named_modules(self, prefix="", remove_duplicate=True):
        """Yield (dotted name, module) for this module and every descendant, depth-first."""
        ### BEGIN SOLUTION
        seen = set()
        stack = [(prefix, self)]
        while stack:
            name, module = stack.pop()
            if remove_duplicate:
                if id(module) in seen:
                    continue
                seen.add(id(module))
            yield name, module
            children = [
                (f"{name}.{child_name}" if name else child_name, child)
                for child_name, child in module._modules.items()
            ]
            stack.extend(reversed(children))  # reversed: pop them in assignment order
        ### END SOLUTION

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """Yield (dotted name, Parameter): each module's own parameters, module by module."""
        ### BEGIN SOLUTION
        if recurse:
            modules = self.named_modules(prefix, remove_duplicate=remove_duplicate)
        else:
            modules = [(prefix, self)]
        seen = set()
        for module_name, module in modules:
            for name, parameter in module._parameters.items():
                if remove_duplicate:
                    if id(parameter) in seen:
                        continue
                    seen.add(id(parameter))
                yield (f"{module_name}.{name}" if module_name else name), parameter
        ### END SOLUTION

    def parameters(self, recurse=True):
        """Every parameter, once each (tied parameters once)."""
        for _, parameter in self.named_parameters(recurse=recurse):
            yield parameter

    def named_children(self):
        """Yield (name, module) for the direct sub-modules, each module once."""
        seen = set()
        for name, module in self._modules.items():
            if id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self):
        for _, module in self.named_children():
            yield module

    def modules(self):
        """This module and every descendant, once each."""
        for _, module in self.named_modules():
            yield module

    def num_parameters(self):
        """How many numbers training adjusts (tied parameters counted once)."""
        return sum(p.size for p in self.parameters())

    # ---- modes and gradients ------------------------------------------------------------
    def train(self, mode=True):
        """Set training mode on this module and all its descendants; return self."""
        if not isinstance(mode, bool):
            raise TypeError(f"train(mode) takes True or False, got {mode!r}")
        ### BEGIN SOLUTION
        for module in self.modules():
            module.training = mode
        return self
        ### END SOLUTION

    def eval(self):
        """Evaluation mode (dropout off); the same as train(False)."""
        return self.train(False)

    def zero_grad(self):
        """Forget the gradients of every parameter: .grad = None."""
        ### BEGIN SOLUTION
        for parameter in self.parameters():
            parameter.grad = None
        ### END SOLUTION

    # ---- saving and loading -------------------------------------------------------------
    def state_dict(self):
        """{name: copy of the parameter's array}, every name of every parameter."""
        ### BEGIN SOLUTION
        state, copies = {}, {}
        for name, parameter in self.named_parameters(remove_duplicate=False):
            if id(parameter) not in copies:  # a tied parameter: one copy, several names
                copies[id(parameter)] = parameter.data.copy()
            state[name] = copies[id(parameter)]
        return state
        ### END SOLUTION

    def load_state_dict(self, state, strict=True):
        """Copy values into the parameters, in place; all problems are reported at once."""
        ### BEGIN SOLUTION
        expected = dict(self.named_parameters(remove_duplicate=False))
        missing = [name for name in expected if name not in state]
        unexpected = [name for name in state if name not in expected]
        mismatched, values = [], {}
        for name, parameter in expected.items():
            if name not in state:
                continue
            value = state[name]
            value = value.data if isinstance(value, Tensor) else np.asarray(value)
            if value.shape != parameter.shape:
                mismatched.append(
                    f"{name!r}: state dict has shape {value.shape}, model has {parameter.shape}"
                )
            else:
                values[name] = value
        problems = []
        if strict and missing:
            problems.append("missing keys (in the model, not in the state dict): "
                            + ", ".join(map(repr, missing)))
        if strict and unexpected:
            problems.append("unexpected keys (in the state dict, not in the model): "
                            + ", ".join(map(repr, unexpected)))
        if mismatched:
            problems.append("shape mismatches: " + "; ".join(mismatched))
        if problems:
            raise StateDictError(
                f"load_state_dict for {type(self).__name__} failed, nothing was loaded:\n  "
                + "\n  ".join(problems)
                + "\nWas the model built with the same sizes and layer names as the one that "
                "saved the state dict? To load only the keys that match, pass strict=False "
                "(shapes must still match)."
            )
        for name, value in values.items():
            expected[name].data[...] = value  # in place, converted to the parameter's dtype
        return _IncompatibleKeys(missing, unexpected)
        ### END SOLUTION

    # ---- calling ------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        raise NotImplementedError(
            f"{type(self).__name__} has no forward(): define `def forward(self, x):` in the "
            "class. Calling model(x) runs model.forward(x)."
        )

    def __call__(self, *args, **kwargs):
        if not _call_observers:  # empty unless a profiler is listening (module 14)
            return self.forward(*args, **kwargs)
        for observer in _call_observers:
            observer.enter(self)
        try:
            return self.forward(*args, **kwargs)
        finally:
            for observer in reversed(_call_observers):
                observer.exit(self)

    # ---- printing -----------------------------------------------------------------------
    def extra_repr(self):
        """This layer's own settings, shown inside its repr; override in layers."""
        return ""

    def _repr_children(self):
        return list(self._modules.items())

    def __repr__(self):
        extra = self.extra_repr()
        children = self._repr_children()
        if not children:
            return f"{type(self).__name__}({extra})"
        lines = [f"{type(self).__name__}("]
        if extra:
            lines.append(f"  {extra}")
        for name, child in children:
            lines.append(f"  ({name}): " + repr(child).replace("\n", "\n  "))
        lines.append(")")
        return "\n".join(lines)


# %% [markdown]
# ### Tests: the registry
#
# Before `Linear` exists, the tests build small modules out of `Parameter`s directly.

# %% nbgrader={"grade": true, "grade_id": "test_unit_module_registry", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_module_registry():
    """Assignments register Parameters and Modules; reassigning replaces, None removes."""

    class Scale(Module):
        def __init__(self, n):
            super().__init__()
            self.w = Parameter(np.ones(n))
            self.note = "not a parameter"

        def forward(self, x):
            return x * self.w

    class Pair(Module):
        def __init__(self):
            super().__init__()
            self.first = Scale(2)
            self.second = Scale(2)
            self.bias = Parameter(np.zeros(2))

        def forward(self, x):
            return self.second(self.first(x)) + self.bias

    def check_registry(build, modules, parameters):
        m = build()
        assert list(m._modules) == modules, (
            f"_modules should hold the children {modules} in assignment order, got "
            f"{list(m._modules)}: in __setattr__, record Module values in self._modules[name]"
        )
        assert list(m._parameters) == parameters, (
            f"_parameters should hold only {parameters}, got {list(m._parameters)}: record "
            "Parameter values in self._parameters[name] (children's parameters stay in the "
            "children)"
        )
        for name in modules + parameters:
            registry = m._modules if name in modules else m._parameters
            assert getattr(m, name) is registry[name], (
                f"self.{name} must read back what was assigned: also store it with "
                "object.__setattr__(self, name, value)"
            )

    check_registry(Pair, ["first", "second"], ["bias"])
    m = Pair()
    assert "note" not in m.first._parameters and m.first.note == "not a parameter", (
        "a plain attribute must be stored normally and not registered"
    )
    m.second = Scale(3)
    assert m._modules["second"] is m.second and m.second.w.shape == (3,), (
        "re-assigning self.second should replace the registered child"
    )
    m.bias = None
    assert "bias" not in m._parameters and m.bias is None, (
        f"after self.bias = None, _parameters still has {list(m._parameters)}: assigning a value "
        "that is not a Parameter must remove the name from both registries"
    )
    m.first = "gone"
    assert "first" not in m._modules, "assigning a non-Module must remove the name from _modules"
    del m.second
    assert "second" not in m._modules, "del self.second must remove it from _modules"
    assert np.allclose(Scale(2)(Tensor([1.0, 2.0])).data, [1.0, 2.0]), "module(x) calls forward(x)"

    class Forgot(Module):
        def __init__(self):
            self.w = Parameter([1.0])  # no super().__init__()

    expect_error("assigning a Parameter before super().__init__()", Forgot, AttributeError,
                 ["super().__init__()"], "raise it in __setattr__ when the registries are "
                 "missing, instead of failing later with a confusing message")
    expect_error("Module()(x)", lambda: Module()(Tensor([1.0])), NotImplementedError,
                 ["forward"], "the base class's forward raises it")
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    class Interleaved(Module):
        def __init__(self):
            super().__init__()
            self.a = Parameter(np.ones(1))
            self.inner = Scale(3)
            self.b = Parameter(np.ones(2))
            self.count = 3
            self.last = Scale(1)

    class Switched(Module):
        def __init__(self):
            super().__init__()
            self.x = Parameter(np.ones(2))
            self.y = Scale(1)
            self.x = Scale(2)  # was a Parameter, now a Module
            self.y = Parameter(np.zeros(1))  # was a Module, now a Parameter

    class Emptied(Module):
        def __init__(self):
            super().__init__()
            self.keep = Scale(2)
            self.drop = Scale(2)
            self.w = Parameter(np.ones(3))
            self.drop = None
            del self.w

    hidden_cases(check_registry, {
        "parameters and modules interleaved": (Interleaved, ["inner", "last"], ["a", "b"]),
        "names that change kind": (Switched, ["x"], ["y"]),
        "names set to None or deleted": (Emptied, ["keep"], []),
        "a module without children": (lambda: Scale(4), [], ["w"]),
    })
    ### END HIDDEN TESTS


test_unit_module_registry()


# %% nbgrader={"grade": true, "grade_id": "test_unit_named_parameters", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_named_parameters():
    """Dotted names, PyTorch's order: a module's own parameters, then each child's."""

    class Leaf(Module):
        def __init__(self, n):
            super().__init__()
            self.weight = Parameter(np.ones((n, n)))
            self.bias = Parameter(np.zeros(n))

    class Encoder(Module):
        def __init__(self):
            super().__init__()
            self.fc = Leaf(4)

    class Net(Module):
        def __init__(self):
            super().__init__()
            self.encoder = Encoder()
            self.scale = Parameter(np.ones(4))
            self.head = Leaf(2)

    walk = ("walk named_modules() (the module itself first, then children depth-first in "
            "assignment order) and yield each module's own _parameters with its dotted prefix")

    def check_walk(build, parameters, modules):
        """named_parameters() and named_modules() of build() against the expected names."""
        net = build()
        expect_names("named_parameters()", [n for n, _ in net.named_parameters()], parameters,
                     walk)
        expect_names("named_modules()", [n for n, _ in net.named_modules()], modules,
                     "the module itself is '', then its descendants")
        sizes = [p.size for _, p in net.named_parameters()]
        expect_names("num_parameters()", [net.num_parameters()], [sum(sizes)],
                     "the sum of p.size over parameters()")

    check_walk(Net, ["scale", "encoder.fc.weight", "encoder.fc.bias", "head.weight", "head.bias"],
               ["", "encoder", "encoder.fc", "head"])
    net = Net()
    cases = [  # (what, got, expected, fix)
        ("shapes of parameters()", [p.shape for p in net.parameters()],
         [(4,), (4, 4), (4,), (2, 2), (2,)], "the same parameters in the same order as "
         "named_parameters()"),
        ("named_children()", [n for n, _ in net.named_children()], ["encoder", "head"],
         "only the direct sub-modules"),
        ("modules()", [type(m).__name__ for m in net.modules()],
         ["Net", "Encoder", "Leaf", "Leaf"], "the module itself and its 3 descendants"),
        ("num_parameters()", [net.num_parameters()], [4 + 16 + 4 + 4 + 2],
         "the sum of p.size over parameters()"),
    ]
    for what, got, want, fix in cases:
        expect_names(what, got, want, fix)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    class Deep(Module):
        def __init__(self, depth):
            super().__init__()
            self.gain = Parameter(np.ones(depth + 1))
            if depth:
                self.inner = Deep(depth - 1)
                self.side = Leaf(1)

    class LateOwn(Module):
        def __init__(self):
            super().__init__()
            self.first = Leaf(3)
            self.second = Encoder()
            self.own = Parameter(np.zeros(7))

    hidden_cases(check_walk, {
        "three levels of nesting": (lambda: Deep(2), [
            "gain", "inner.gain", "inner.inner.gain", "inner.side.weight", "inner.side.bias",
            "side.weight", "side.bias"], ["", "inner", "inner.inner", "inner.side", "side"]),
        "own parameters assigned after the children": (LateOwn, [
            "own", "first.weight", "first.bias", "second.fc.weight", "second.fc.bias"],
            ["", "first", "second", "second.fc"]),
        "a module without parameters": (Module, [], [""]),
    })
    ### END HIDDEN TESTS


test_unit_named_parameters()


# %% nbgrader={"grade": true, "grade_id": "test_unit_tied_parameters", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_tied_parameters():
    """A parameter (or module) reachable twice is yielded once, under its first name."""

    class Leaf(Module):
        def __init__(self):
            super().__init__()
            self.weight = Parameter(np.ones((3, 3)))
            self.bias = Parameter(np.zeros(3))

    class Tied(Module):
        def __init__(self):
            super().__init__()
            self.embed = Leaf()
            self.head = Leaf()
            self.head.weight = self.embed.weight  # one matrix, two names

    class Twice(Module):
        def __init__(self):
            super().__init__()
            self.block = Leaf()
            self.again = self.block  # the same module under two names

    tie = "yield each Parameter once, by identity (keep a set of id(p) already yielded)"
    once = "named_modules skips modules seen before, by identity"

    def check_once(build, parameters, modules):
        """Names of a model with shared parts: each Parameter and Module once, first name."""
        model = build()
        expect_names(f"named_parameters() of {type(model).__name__}",
                     [n for n, _ in model.named_parameters()], parameters, tie)
        expect_names(f"named_modules() of {type(model).__name__}",
                     [n for n, _ in model.named_modules()], modules, once)
        size = sum(p.size for _, p in model.named_parameters())
        expect_names(f"num_parameters() of {type(model).__name__}", [model.num_parameters()],
                     [size], "a tied weight must be counted once: otherwise the optimizer "
                     "updates it twice")

    check_once(Tied, ["embed.weight", "embed.bias", "head.bias"], ["", "embed", "head"])
    expect_names("num_parameters() of the tied model", [Tied().num_parameters()], [9 + 3 + 3],
                 "a tied weight must be counted once: otherwise the optimizer updates it twice")
    check_once(Twice, ["block.weight", "block.bias"], ["", "block"])
    expect_names("modules() of a module reachable twice",
                 [type(m).__name__ for m in Twice().modules()], ["Twice", "Leaf"], once)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    class ThreeWays(Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = Leaf(), Leaf(), Leaf()
            self.b.bias = self.a.bias
            self.c.bias = self.a.bias

    class AcrossLevels(Module):
        def __init__(self):
            super().__init__()
            self.outer = Twice()
            self.shared = Parameter(np.ones(2))
            self.outer.block.weight = self.shared

    class SharedDeep(Module):
        def __init__(self):
            super().__init__()
            self.left = Twice()
            self.right = self.left.block

    hidden_cases(check_once, {
        "one bias tied three ways": (ThreeWays, [
            "a.weight", "a.bias", "b.weight", "c.weight"], ["", "a", "b", "c"]),
        "a weight tied across levels": (AcrossLevels, ["shared", "outer.block.bias"],
                                        ["", "outer", "outer.block"]),
        "a module shared at two depths": (SharedDeep, ["left.block.weight", "left.block.bias"],
                                          ["", "left", "left.block"]),
    })
    ### END HIDDEN TESTS


test_unit_tied_parameters()


# %% nbgrader={"grade": true, "grade_id": "test_unit_train_eval", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
def test_unit_train_eval():
    """train()/eval() reach every descendant and return the module; zero_grad clears grads."""

    class Inner(Module):
        def __init__(self):
            super().__init__()
            self.w = Parameter(np.ones(2))

    class Outer(Module):
        def __init__(self):
            super().__init__()
            self.a = Inner()
            self.b = Module()
            self.b.deep = Inner()

    def check_modes(build):
        """eval(), train(), train(False) and zero_grad() over every module of build()."""
        model = build()
        assert all(m.training for m in model.modules()), "a new module is in training mode"
        returned = model.eval()
        assert returned is model, (
            "eval() (and train()) must return self, so `m = Net().eval()` works"
        )
        flags = {name: m.training for name, m in model.named_modules()}
        assert not any(flags.values()), (
            f"after eval(), training flags are {flags}: set .training on every module in "
            "self.modules(), not only on self"
        )
        model.train()
        assert all(m.training for m in model.modules()), "train() must switch every descendant back"
        model.train(False)
        assert not any(m.training for m in model.modules()), "train(False) is the same as eval()"
        for p in model.parameters():
            p.grad = Tensor(np.ones(p.shape))
        model.zero_grad()
        assert all(p.grad is None for p in model.parameters()), (
            "zero_grad() must set .grad = None on every parameter, including those of sub-modules"
        )

    check_modes(Outer)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    class Chain(Module):
        def __init__(self, depth):
            super().__init__()
            self.w = Parameter(np.zeros(depth + 1))
            self.next = Chain(depth - 1) if depth else Inner()

    class Shared(Module):
        def __init__(self):
            super().__init__()
            self.left = Outer()
            self.right = self.left.b

    hidden_cases(check_modes, {
        "a chain of nested modules": lambda: Chain(4),
        "a module shared by two parents": Shared,
        "a module without children": Inner,
    })
    ### END HIDDEN TESTS


test_unit_train_eval()


# %% nbgrader={"grade": true, "grade_id": "test_unit_state_dict", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_state_dict():
    """state_dict copies; load_state_dict writes in place, float32, and round-trips."""

    class Leaf(Module):
        def __init__(self, fill):
            super().__init__()
            self.weight = Parameter(np.full((2, 3), fill))
            self.bias = Parameter(np.full(2, fill))

    class Net(Module):
        def __init__(self, fill):
            super().__init__()
            self.fc = Leaf(fill)
            self.out = Leaf(fill + 1)

    def check_round_trip(build, keys):
        """build(fill)'s state_dict has `keys`, and loads into another build(fill) in place."""
        a, b = build(1.0), build(5.0)
        state = a.state_dict()
        assert list(state) == keys, (
            f"state_dict keys are {list(state)}, expected {keys}: use the names of "
            "named_parameters(remove_duplicate=False), a tied parameter under every name"
        )
        assert all(isinstance(v, np.ndarray) for v in state.values()), (
            "state_dict values are ndarrays"
        )
        before = [(p, p.data) for p in b.parameters()]
        result = b.load_state_dict(state)
        assert all(p.data is array for p, array in before), (
            "load_state_dict replaced a Parameter's array: write into it in place "
            "(p.data[...] = value) so that an optimizer holding the Parameter still sees it"
        )
        for (name, mine), theirs in zip(b.named_parameters(), a.parameters()):
            assert np.array_equal(mine.data, theirs.data), (
                f"loaded {name} differs from the saved one"
            )
        assert list(result.missing_keys) == [] and list(result.unexpected_keys) == [], (
            "a complete load returns empty missing_keys and unexpected_keys"
        )

    check_round_trip(Net, ["fc.weight", "fc.bias", "out.weight", "out.bias"])
    a, b = Net(1.0), Net(5.0)
    state = a.state_dict()
    state["fc.weight"][0, 0] = 99.0
    assert a.fc.weight.data[0, 0] == 1.0, (
        "changing a state_dict value changed the model: state_dict must hold copies "
        "(p.data.copy()), a snapshot that training cannot change"
    )
    state = a.state_dict()
    b.load_state_dict({k: v.astype(np.float64) * 2 for k, v in state.items()})
    assert b.fc.weight.dtype == np.float32 and b.fc.weight.data[0, 0] == 2.0, (
        f"loading float64 values made the parameter {b.fc.weight.dtype}: copy into the existing "
        "float32 array so the model stays float32"
    )
    b.load_state_dict({k: Tensor(v) for k, v in state.items()})
    assert b.fc.weight.data[0, 0] == 1.0, "load_state_dict should also accept Tensor values"

    class Tied(Module):
        def __init__(self, fill=1.0):
            super().__init__()
            self.fc = Leaf(fill)
            self.out = Leaf(fill + 1)
            self.out.weight = self.fc.weight

    check_round_trip(Tied, ["fc.weight", "fc.bias", "out.weight", "out.bias"])
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    class Deeper(Module):
        def __init__(self, fill):
            super().__init__()
            self.scale = Parameter(np.full(4, fill))
            self.body = Net(fill * 2)
            self.tail = Leaf(-fill)

    class Empty(Module):
        def __init__(self, fill):
            super().__init__()
            self.fill = fill

    hidden_cases(check_round_trip, {
        "nested modules with own parameters": (Deeper, [
            "scale", "body.fc.weight", "body.fc.bias", "body.out.weight", "body.out.bias",
            "tail.weight", "tail.bias"]),
        "a module without parameters": (Empty, []),
    })
    ### END HIDDEN TESTS


test_unit_state_dict()


# %% nbgrader={"grade": true, "grade_id": "test_unit_load_state_dict_errors", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_load_state_dict_errors():
    """One error lists every missing key, unexpected key and mis-shaped key; nothing loads."""

    class Leaf(Module):
        def __init__(self, n):
            super().__init__()
            self.weight = Parameter(np.zeros((n, 3)))
            self.bias = Parameter(np.zeros(n))

    class Net(Module):
        def __init__(self):
            super().__init__()
            self.fc = Leaf(4)
            self.out = Leaf(2)

    def check_refused(build, bad, named, fine):
        """load_state_dict(bad) raises one error naming `named` (not `fine`); nothing loads."""
        net = build()
        before = {name: p.data.copy() for name, p in net.named_parameters()}
        caught = expect_error(
            "load_state_dict with missing, unexpected and mis-shaped keys",
            lambda: net.load_state_dict(bad), KeyError, named,
            "collect all missing, unexpected and mis-shaped keys (with both shapes) first, then "
            "raise once",
        )
        for name in fine:
            assert name not in str(caught), f"{name} is fine and should not be listed:\n{caught}"
        assert isinstance(caught, ValueError), (
            "raise StateDictError (a KeyError and a ValueError), so either except clause catches it"
        )
        for name, p in net.named_parameters():
            assert np.array_equal(p.data, before[name]), (
                f"a failed load changed {name}: check everything first, then copy, so a failed "
                "load leaves the model untouched"
            )

    bad = {
        "fc.weight": np.ones((5, 3)),  # wrong shape
        "fc.bias": np.ones(4),  # fine
        "head.weight": np.ones((2, 3)),  # unexpected
        "extra": np.ones(1),  # unexpected
        # out.weight and out.bias are missing
    }
    check_refused(Net, bad, ["out.weight", "out.bias", "head.weight", "extra", "fc.weight",
                             "(5, 3)", "(4, 3)"], ["fc.bias"])
    net = Net()
    result = net.load_state_dict({"fc.bias": np.ones(4), "extra": np.ones(1)}, strict=False)
    assert net.fc.bias.data[0] == 1.0, "with strict=False the matching keys are loaded"
    assert sorted(result.missing_keys) == ["fc.weight", "out.bias", "out.weight"], (
        f"strict=False should return the missing keys, got {result.missing_keys}"
    )
    assert list(result.unexpected_keys) == ["extra"], (
        f"strict=False should return the unexpected keys, got {result.unexpected_keys}"
    )
    expect_error("load_state_dict({'fc.bias': (7,)}, strict=False)",
                 lambda: net.load_state_dict({"fc.bias": np.ones(7)}, strict=False), ValueError,
                 ["(7,)", "(4,)"], "a wrong shape is an error even with strict=False")
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    class Wide(Module):
        def __init__(self):
            super().__init__()
            self.gain = Parameter(np.ones(6))
            self.body = Net()

    whole = {"gain": np.ones(6), "body.fc.weight": np.ones((4, 3)), "body.fc.bias": np.ones(4),
             "body.out.weight": np.ones((2, 3)), "body.out.bias": np.ones(2)}
    hidden_cases(check_refused, {
        "only unexpected keys": (Wide, {**whole, "body.fc.scale": np.ones(4), "gain2": np.ones(6)},
                                 ["body.fc.scale", "gain2"], ["body.out.bias"]),
        "only one mis-shaped key": (Wide, {**whole, "gain": np.ones((6, 1))},
                                    ["gain", "(6, 1)", "(6,)"], ["body.fc.weight"]),
        "only missing nested keys": (Wide, {"gain": np.ones(6)},
                                     ["body.fc.weight", "body.out.bias"], []),
    })
    ### END HIDDEN TESTS


test_unit_load_state_dict_errors()


# %% [markdown]
# ## Part 3: Linear
#
# `Linear(in_features, out_features)` computes `y = x @ W.T + b`:
#
# ```
# x  (batch, in_features)
# W  (out_features, in_features)      W.T  (in_features, out_features)
# b  (out_features,)                  broadcast over the batch
# y  (batch, out_features)
# ```
#
# Row `j` of `W` holds the weights of output unit `j`, which is PyTorch's layout: you can
# load a PyTorch `Linear`'s weights without transposing them. Because `@` broadcasts over
# leading axes, the same layer works on `(batch, seq, in_features)` as a transformer needs.
# The work is `2 * batch * in * out` floating-point operations, and the weights take
# `(in + 1) * out * 4` bytes.
#
# Build `forward` from `Tensor` operations (`@`, `.T`, `+`), not from NumPy on `.data`:
# `Function.apply` then records the graph, and module 06 differentiates `Linear` without a
# line of new code. Check the input's last axis yourself and raise `ShapeError` naming the
# input shape and the layer's `in_features`: the matmul error would talk about "the
# second-to-last axis of the second operand", which is the transposed weight the user never
# wrote.
#
# ### Why the initial weights are scaled
#
# Each output is a sum of `in_features` products. If the weights have variance `v` and the
# inputs variance 1, the output has variance about `in_features * v`. With `v = 1`, a
# 512-wide layer multiplies the spread of its input by `sqrt(512) ~ 23`; ten such layers
# turn 1 into `1e13`, and 1e13 squared overflows float32. To make the output independent of
# the width, `v` must be proportional to `1 / in_features`.
#
# PyTorch draws both `W` and `b` from the uniform distribution `U(-k, k)` with
# `k = 1 / sqrt(in_features)`, whose variance is `k**2 / 3 = 1 / (3 * in_features)`. Use
# the shared generator of module 01, `default_generator()`, and call it when the layer is
# built (not once at import: `manual_seed` replaces the generator), so that
# `manual_seed(0)` makes every model reproducible. The measurement after the tests shows
# what that scale does through a deep stack, and where it falls short.

# %% nbgrader={"grade": false, "grade_id": "linear", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class Linear(Module):
    """y = x @ W.T + b, with W of shape (out_features, in_features).

    >>> layer = Linear(3, 2)
    >>> layer
    Linear(in_features=3, out_features=2, bias=True)
    >>> layer.weight.shape, layer.bias.shape
    ((2, 3), (2,))
    >>> layer(Tensor(np.ones((5, 3)))).shape
    (5, 2)
    """

    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        for label, value in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"Linear: {label} must be a positive integer, got {value!r}")
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        ### BEGIN SOLUTION
        bound = 1.0 / math.sqrt(self.in_features)
        generator = default_generator()
        shape = (self.out_features, self.in_features)
        self.weight = Parameter(generator.uniform(-bound, bound, shape).astype(np.float32))
        if bias:
            bias_values = generator.uniform(-bound, bound, self.out_features)
            self.bias = Parameter(bias_values.astype(np.float32))
        else:
            self.bias = None
        ### END SOLUTION

    def forward(self, x):
        if not isinstance(x, Tensor):
            x = Tensor(x)
        ### BEGIN SOLUTION
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            raise ShapeError(
                f"Linear(in_features={self.in_features}, out_features={self.out_features}) got "
                f"an input of shape {x.shape}: its last axis must be {self.in_features}. Check "
                "the previous layer's out_features, or flatten the input to (batch, features)."
            )
        y = x @ self.weight.T
        if self.bias is not None:
            y = y + self.bias
        return y
        ### END SOLUTION

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


# %% nbgrader={"grade": true, "grade_id": "test_unit_linear", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_linear():
    """Linear's parameters, output shapes and values match x @ W.T + b in NumPy."""
    layer = Linear(5, 3)
    no_bias = Linear(5, 3, bias=False)
    expect_names("Linear(5, 3)'s parameters",
                 [(n, p.shape, p.dtype) for n, p in layer.named_parameters()],
                 [("weight", (3, 5), np.float32), ("bias", (3,), np.float32)],
                 "weight is (out_features, in_features), PyTorch's layout; bias (out_features,); "
                 "both float32 (NumPy's uniform() returns float64: .astype(np.float32))")
    expect_names("Linear(5, 3, bias=False)'s parameters",
                 [n for n, _ in no_bias.named_parameters()], ["weight"],
                 "with bias=False set self.bias = None")
    rng = np.random.default_rng(0)

    def check_linear(lin, shape, fix):
        x = rng.standard_normal(shape).astype(np.float32)
        what = f"{lin!r} on {shape}"
        y = lin(Tensor(x))
        want = x @ lin.weight.data.T + (0 if lin.bias is None else lin.bias.data)
        assert y.dtype == np.float32, f"{what} gave {y.dtype}, expected float32"
        expect_close(what, y.data, want, fix, rtol=1e-5, atol=1e-5)

    def check_refused(lin, shape):
        expect_error(f"{lin!r} on {shape}", lambda: lin(Tensor(np.ones(shape, np.float32))),
                     ShapeError, [str(shape), str(lin.in_features)],
                     "name the input shape and in_features")

    cases = [  # (layer, input shape, fix)
        (layer, (4, 5), "y = x @ W.T + b: did you use W instead of W.T, or forget the bias?"),
        (layer, (2, 6, 5), "the same map at every position: @ broadcasts over leading axes"),
        (layer, (5,), "one sample of 5 features gives 3 outputs"),
        (no_bias, (4, 5), "without a bias, y = x @ W.T"),
    ]
    for lin, shape, fix in cases:
        check_linear(lin, shape, fix)
    y = layer(Tensor(np.ones((4, 5), dtype=np.float32), requires_grad=True))
    assert y.requires_grad and y._ctx is not None, (
        "Linear's output does not record a graph: build forward from Tensor operations "
        "(x @ self.weight.T + self.bias), not NumPy on .data, so autograd can reach the weights"
    )
    check_refused(layer, (4, 6))
    assert "in_features=5, out_features=3, bias=True" in repr(layer), (
        f"repr(Linear(5, 3)) is {repr(layer)!r}"
    )
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_linear, {
        "one input feature": (Linear(1, 7), (3, 1), ""),
        "one output feature, no bias": (Linear(6, 1, bias=False), (2, 6), ""),
        "a four-axis input": (Linear(4, 2), (2, 3, 1, 4), ""),
        "a batch of one": (Linear(8, 8), (1, 8), ""),
    })
    hidden_cases(check_refused, {
        "a vector of the wrong length": (Linear(5, 3), (3,)),
        "features on the wrong axis": (Linear(2, 4), (2, 3)),
    })
    ### END HIDDEN TESTS


test_unit_linear()


# %% nbgrader={"grade": true, "grade_id": "test_unit_linear_init", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
def test_unit_linear_init():
    """Weights and biases are U(-k, k), k = 1/sqrt(in_features), from the shared generator."""

    def check_init(n_in, n_out):
        """Linear(n_in, n_out)'s weights and biases: range, spread and centre of U(-k, k)."""
        manual_seed(0)
        layer = Linear(n_in, n_out)
        k = 1 / math.sqrt(n_in)
        w, b = layer.weight.data, layer.bias.data
        assert np.abs(w).max() <= k, (
            f"a weight of {np.abs(w).max():.4f} lies outside [-{k}, {k}]: draw from "
            "uniform(-1/sqrt(in_features), 1/sqrt(in_features))"
        )
        assert np.abs(w).max() > 0.95 * k and w.min() < -0.95 * k, (
            f"the weights only reach {np.abs(w).max():.4f}, expected close to {k}: use the "
            "whole range"
        )
        assert abs(w.std() - k / math.sqrt(3)) < 0.05 * k, (
            f"weight std is {w.std():.4f}, expected {k / math.sqrt(3):.4f} for U(-k, k): "
            "is the distribution uniform, with k = 1/sqrt(in_features) (not out_features)?"
        )
        assert abs(w.mean()) < 0.01 * k, (
            f"the weights should be centred on 0, mean is {w.mean():.5f}"
        )
        assert np.abs(b).max() <= k and np.abs(b).max() > 0.5 * k, (
            f"bias values reach {np.abs(b).max():.4f}: draw the bias from the same U(-k, k) "
            "(not zeros)"
        )
        return w, b

    w, b = check_init(400, 300)
    manual_seed(0)
    again = Linear(400, 300)
    assert np.array_equal(again.weight.data, w) and np.array_equal(again.bias.data, b), (
        "after manual_seed(0) two Linear(400, 300) differ: draw from default_generator(), "
        "called when the layer is built, not from np.random"
    )
    other = Linear(400, 300)
    assert not np.array_equal(other.weight.data, w), "two layers built in a row must differ"
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_init, {
        "many more inputs than outputs": (1000, 120),
        "many more outputs than inputs": (50, 3000),
        "a square layer": (360, 360),
    })
    ### END HIDDEN TESTS


test_unit_linear_init()


# %% [markdown]
# ### Measured: activation scale through a deep stack
#
# Push a batch of unit-variance inputs through twelve `Linear(256, 256)` layers, each
# followed by ReLU (module 02; here `np.maximum` on the raw array, so the measurement stands
# alone), with three initializations, and print the standard deviation of the activations:
#
# - `N(0, 1)`: no scaling;
# - PyTorch's default, the one you just wrote: `U(-k, k)`, variance `1 / (3 * in)`;
# - He (Kaiming) initialization, `N(0, 2 / in)`: variance 2/in makes up for ReLU zeroing
#   half of the units.

# %% nbgrader={"grade": false, "grade_id": "demo-init-scale", "locked": false, "schema_version": 3, "solution": false, "task": false}
def init_scale_report(depth=12, width=256, batch=512):
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((batch, width)).astype(np.float32))
    schemes = {
        "N(0, 1)": lambda shape: rng.standard_normal(shape),
        "U(+-1/sqrt(in)) (default)": None,
        "He N(0, 2/in)": lambda shape: rng.standard_normal(shape) * math.sqrt(2 / width),
    }
    print(f"std of activations after each Linear({width}, {width}) + ReLU, input std 1.0")
    print(f"{'init':>27} " + " ".join(f"{i:>8}" for i in (1, 2, 4, 8, depth)))
    manual_seed(0)
    for label, draw in schemes.items():
        h, stds = x, []
        for _ in range(depth):
            layer = Linear(width, width)
            if draw is not None:
                layer.weight.data[...] = draw(layer.weight.shape)
                layer.bias.data[...] = 0.0
            h = Tensor(np.maximum(layer(h).data, 0))
            stds.append(float(h.data.std()))
        print(f"{label:>27} " + " ".join(f"{stds[i - 1]:8.2g}" for i in (1, 2, 4, 8, depth)))


init_scale_report()

# %% [markdown]
# Unscaled weights blow up by a factor of about `sqrt(256 / 2) ~ 11` per layer. The
# default keeps the scale independent of the width, which is what matters most, but its
# variance `1 / (3 * in)` is six times too small to make up for ReLU, so the signal
# shrinks (by about `sqrt(6) ~ 2.4` per layer) until the small random biases are all that is
# left. He initialization holds the scale steady. Deep networks therefore use He-style
# initialization, or normalization layers and residual connections (module 13), which
# re-scale the signal at every block whatever the initialization did. Gradients, which flow
# back through the same weights, shrink and grow the same way.
#
# ## Part 4: Dropout
#
# Dropout (Srivastava et al., 2014) fights overfitting: during training, each unit of its
# input is set to zero with probability `p`, a fresh random choice on every call, so the
# network cannot rely on any single unit. The kept units are multiplied by `1 / (1 - p)`,
# which keeps the **expected value** of every unit unchanged:
# `E[y] = (1 - p) * x / (1 - p) + p * 0 = x`. At evaluation time dropout is the identity, and
# because of that scaling the next layer sees inputs of the same size in both modes
# ("inverted dropout"; the original paper scaled the weights at test time instead).
#
# ```
# x     = [1.0, 2.0, 3.0, 4.0]          p = 0.5
# keep  = [  1,   0,   1,   1]          (random, each kept with probability 0.5)
# y     = [2.0, 0.0, 6.0, 8.0]          x * keep / (1 - p)
# ```
#
# Implementation notes:
#
# - draw the mask from `default_generator()` (so `manual_seed` makes it repeatable), fold the
#   scale into it, and multiply with a `Tensor` operation, `x * Tensor(mask, dtype=x.dtype)`.
#   Module 06 then differentiates dropout for free: the gradient is the same mask times the
#   incoming gradient. Make the mask in `x`'s dtype: a float64 mask would turn float32
#   activations into float64;
# - `generator.random(shape, dtype=np.float32)` draws uniform numbers in `[0, 1)` at half the
#   cost of float64; a unit is kept when its number is `>= p`, which happens with
#   probability `1 - p`;
# - return `x` itself in evaluation mode and when `p == 0`: no mask, no copy;
# - reject `p` outside `[0, 1)` with a `ValueError`: `p = 1` drops everything and would
#   divide by zero.
#
# Dropout costs one random number and one multiply per unit, and (in module 06) the mask is
# kept for backward: one more activation-sized array per dropout layer.

# %% nbgrader={"grade": false, "grade_id": "dropout", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class Dropout(Module):
    """In training, zero each unit with probability p and scale the rest by 1/(1-p).

    >>> drop = Dropout(p=0.5)
    >>> sorted(set(drop(Tensor(np.ones(1000))).data.tolist()))  # 0, or 1/(1-p)
    [0.0, 2.0]
    >>> drop.eval()(Tensor([1.0, 2.0]))  # off in evaluation mode
    Tensor([1., 2.])
    """

    def __init__(self, p=0.5):
        super().__init__()
        ### BEGIN SOLUTION
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
            raise ValueError(
                f"Dropout probability p must be a number in [0, 1), got {p!r}: p is the "
                "fraction of units set to zero (p = 1 would drop everything)"
            )
        ### END SOLUTION
        self.p = float(p)

    def forward(self, x):
        ### BEGIN SOLUTION
        if not self.training or self.p == 0.0:
            return x
        keep = default_generator().random(x.shape, dtype=np.float32) >= self.p
        mask = keep.astype(x.dtype) * x.dtype.type(1.0 / (1.0 - self.p))
        return x * Tensor(mask, dtype=x.dtype)
        ### END SOLUTION

    def extra_repr(self):
        return f"p={self.p}"


# %% nbgrader={"grade": true, "grade_id": "test_unit_dropout", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_dropout():
    """Dropout zeros a fraction p, scales the rest by 1/(1-p), and is off in eval."""

    def check_dropout(p, shape):
        """Dropout(p) on ones of `shape` (at least 100,000 of them): the zeroed share and scale."""
        x = Tensor(np.ones(shape, dtype=np.float32))
        manual_seed(0)
        y = Dropout(p)(x)
        assert isinstance(y, Tensor) and y.shape == x.shape, (
            f"Dropout changed the shape to {y.shape}"
        )
        assert y.dtype == np.float32, (
            f"Dropout on float32 gave {y.dtype}: build the mask in x's dtype"
        )
        zeros = float((y.data == 0).mean())
        assert abs(zeros - p) < 0.01, (
            f"Dropout({p}) zeroed {zeros:.3f} of the units, expected about {p}: keep a unit when "
            "its uniform draw is >= p (drop with probability p, not 1 - p)"
        )
        kept = y.data[y.data != 0]
        assert np.allclose(kept, 1 / (1 - p)), (
            f"kept units of an all-ones input are {kept[:3]}, expected 1/(1-p) = "
            f"{1 / (1 - p):.4f}: "
            "scale the kept units by 1/(1-p) so the expected value stays the same"
        )
        assert abs(float(y.data.mean()) - 1.0) < 0.03, (
            f"the mean after dropout is {y.data.mean():.3f}, expected about 1.0 (the input's mean)"
        )
        return x, y

    x, y = check_dropout(0.3, (200, 500))
    drop = Dropout(0.3)
    assert not np.array_equal(drop(x).data, y.data), "each call must draw a fresh mask"
    manual_seed(7)
    first = drop(x).data
    manual_seed(7)
    assert np.array_equal(drop(x).data, first), (
        "after manual_seed(7) two calls gave different masks: draw the mask from "
        "default_generator(), called inside forward (manual_seed replaces the generator)"
    )
    z = Tensor(np.ones(4, dtype=np.float32), requires_grad=True)
    assert drop(z)._ctx is not None, (
        "Dropout's output should record a graph: multiply with a Tensor op, x * Tensor(mask)"
    )
    x64 = Tensor(np.ones(10), dtype=np.float64)
    assert drop(x64).dtype == np.float64, "Dropout on float64 input should stay float64"
    drop.eval()
    assert np.array_equal(drop(x).data, x.data), (
        "in eval mode Dropout must return its input unchanged (no mask, no scaling)"
    )
    assert np.array_equal(Dropout(0.0)(x).data, x.data), "Dropout(0.0) must be the identity"
    for bad in (1.0, -0.1, 1.5):
        expect_error(f"Dropout({bad})", lambda: Dropout(bad), ValueError, [repr(bad)],
                     "p must be in [0, 1)")
    assert repr(Dropout(0.25)) == "Dropout(p=0.25)", f"repr is {repr(Dropout(0.25))!r}"
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_dropout, {
        "a small drop rate": (0.1, (400, 300)),
        "a large drop rate": (0.75, (1000, 200)),
        "a three-axis input": (0.5, (20, 50, 120)),
    })
    ### END HIDDEN TESTS


test_unit_dropout()


# %% [markdown]
# ## Part 5: Sequential
#
# Most models begin as a chain: `Sequential(Linear(784, 128), ReLU(), Linear(128, 10))`
# calls each layer on the output of the previous one. `Sequential` is a `Module` whose
# children are named by position, `"0"`, `"1"`, `"2"`, so the parameters above are called
# `"0.weight"`, `"0.bias"`, `"2.weight"`, `"2.bias"`, as in PyTorch.
#
# The activations of module 02 are plain callable objects, not `Module`s: they have no
# parameters and no training mode. `Sequential` accepts any callable: it registers the
# `Module`s (with `setattr(self, str(i), layer)`, so that your `__setattr__` records them),
# keeps **every** layer in a list in order, calls them all in `forward`, and shows them all in
# its `repr`. Anything that is not callable is a `TypeError`, raised when the model is
# built rather than halfway through the first forward pass.
#
# `model[0]` returns a layer, `model[1:]` a new `Sequential` of the same layer objects (their
# parameters are shared, not copied), `len(model)` counts the layers, and `for layer in
# model` iterates them.

# %% nbgrader={"grade": false, "grade_id": "sequential", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class Sequential(Module):
    """Calls its layers in order; Module layers are registered as children "0", "1", ...

    >>> model = Sequential(Linear(4, 8), Dropout(0.1), Linear(8, 2))
    >>> model
    Sequential(
      (0): Linear(in_features=4, out_features=8, bias=True)
      (1): Dropout(p=0.1)
      (2): Linear(in_features=8, out_features=2, bias=True)
    )
    >>> [name for name, _ in model.named_parameters()]
    ['0.weight', '0.bias', '2.weight', '2.bias']
    >>> len(model), model(Tensor(np.ones((5, 4)))).shape
    (3, (5, 2))
    """

    def __init__(self, *layers):
        super().__init__()
        ### BEGIN SOLUTION
        for i, layer in enumerate(layers):
            if not callable(layer):
                raise TypeError(
                    f"Sequential: layer {i} is a {type(layer).__name__}, which cannot be called. "
                    "Pass layer objects such as Linear(4, 8) or callables such as ReLU(); "
                    "unpack a list of layers with Sequential(*layers)."
                )
            if isinstance(layer, Module):
                setattr(self, str(i), layer)
        self._layers = list(layers)
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        for layer in self._layers:
            x = layer(x)
        return x
        ### END SOLUTION

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Sequential(*self._layers[index])
        return self._layers[index]

    def __len__(self):
        return len(self._layers)

    def __iter__(self):
        return iter(self._layers)

    def _repr_children(self):
        return [(str(i), layer) for i, layer in enumerate(self._layers)]


# %% nbgrader={"grade": true, "grade_id": "test_unit_sequential", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_sequential():
    """Sequential registers Modules as "0", "1", ...; keeps and calls every callable."""

    class Double:  # a plain callable, like module 02's activations
        def __call__(self, x):
            return x * 2

        def __repr__(self):
            return "Double()"

    def check_chain(layers, names):
        """Sequential(*layers): parameter names, length, indexing and the output in order."""
        model = Sequential(*layers)
        got = [name for name, _ in model.named_parameters()]
        assert got == names, (
            f"Sequential's parameter names are {got}, expected {names}: register each Module "
            "layer with setattr(self, str(i), layer), numbering every layer (callables too)"
        )
        assert len(model) == len(layers), (
            f"len(model) is {len(model)}, expected {len(layers)}: keep every layer, plain "
            "callables included"
        )
        assert all(model[i] is layer for i, layer in enumerate(layers)), (
            "model[i] should return the i-th layer as given"
        )
        model.eval()
        x = Tensor(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32))
        want = x
        for layer in layers:
            want = layer(want)
        assert np.allclose(model(x).data, want.data, atol=1e-6), (
            "Sequential's output differs from calling the layers in order: call every layer, "
            "plain callables included, each on the previous output"
        )
        return model

    manual_seed(0)
    first, second = Linear(4, 8), Linear(8, 2)
    model = check_chain([first, Double(), second, Dropout(0.5)],
                        ["0.weight", "0.bias", "2.weight", "2.bias"])
    assert [type(layer).__name__ for layer in model] == ["Linear", "Double", "Linear", "Dropout"], (
        "iterating a Sequential yields its layers in order"
    )
    assert model(Tensor(np.ones((3, 4), np.float32))).shape == (3, 2), "the output is (3, 2)"
    assert not model[3].training, "model.eval() should reach the Dropout inside the Sequential"
    tail = model[2:]
    assert isinstance(tail, Sequential) and len(tail) == 2 and tail[0] is second, (
        "model[2:] should be a new Sequential holding the same layer objects"
    )
    text = repr(model)
    for part in ("(0): Linear(in_features=4", "(1): Double()", "(3): Dropout(p=0.5)"):
        assert part in text, f"repr(model) should contain {part!r}; it is:\n{text}"
    expect_error("Sequential(Linear(2, 2), [Linear(2, 2)])",
                 lambda: Sequential(Linear(2, 2), [Linear(2, 2)]), TypeError, ["layer 1"],
                 "a list is not callable; say which layer is wrong")
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    manual_seed(1)
    hidden_cases(check_chain, {
        "one layer": ([Linear(4, 4)], ["0.weight", "0.bias"]),
        "a Sequential inside a Sequential": (
            [Double(), Sequential(Linear(4, 3), Double()), Linear(3, 1, bias=False)],
            ["1.0.weight", "1.0.bias", "2.weight"]),
        "plain callables only": ([Double(), Double(), Double()], []),
        "the same layer twice": ([Linear(4, 4), Double()] * 2, ["0.weight", "0.bias"]),
    })
    ### END HIDDEN TESTS


test_unit_sequential()


# %% [markdown]
# ## Systems analysis: parameters, memory and throughput, measured on your machine
#
# **Parameters and memory.** A `Linear(in, out)` has `(in + 1) * out` parameters, 4 bytes
# each in float32. Training needs more than the weights: one gradient per parameter (module
# 06) and, with Adam (module 07), two more running averages. The cell below builds a
# classic MLP for 28x28 images and counts.

# %% nbgrader={"grade": false, "grade_id": "analysis-memory", "locked": false, "schema_version": 3, "solution": false, "task": false}
def parameter_report():
    manual_seed(0)
    # The activations of module 02 would sit between the layers; they have no parameters.
    mlp = Sequential(Linear(784, 256), Dropout(0.2), Linear(256, 128), Dropout(0.2),
                     Linear(128, 10))
    print(mlp)
    for name, p in mlp.named_parameters():
        print(f"  {name:9} {str(p.shape):11} {p.size:>8,} parameters")
    count = mlp.num_parameters()
    mib = sum(p.data.nbytes for p in mlp.parameters()) / 2**20
    print(f"total {count:,} parameters = {mib:.2f} MiB of float32 weights; with gradients "
          f"{2 * mib:.2f} MiB, with gradients and Adam's two moments {4 * mib:.2f} MiB")
    first = mlp[0].weight.size / count
    print(f"the first layer holds {first:.0%} of the parameters: wide inputs are expensive")


parameter_report()

# %% [markdown]
# **Throughput against batch size.** A `Linear(512, 512)` reads its whole 1 MiB weight
# matrix on every call, whatever the batch size. With one example per call that matrix is
# used for only `2 * 512 * 512` operations, and the fixed cost of the call (Python, the
# `Tensor` bookkeeping, NumPy's dispatch) weighs heavily; with a batch of 256 the same weights
# serve 256 examples. Measure examples per second and GFLOP/s as the batch grows.
#
# Each time is the **best of five** repeats. On a shared machine other programs can only make
# a run slower, never faster, so the minimum is the most repeatable estimate of what the code
# itself costs.

# %% nbgrader={"grade": false, "grade_id": "analysis-throughput", "locked": false, "schema_version": 3, "solution": false, "task": false}
from tinytorch.core.tensor import best_time  # the course's timing helper, given in module 01


def throughput_report(width=512, batches=(1, 8, 64, 256, 1024)):
    manual_seed(0)
    layer = Linear(width, width)
    rng = np.random.default_rng(0)
    print(f"Linear({width}, {width}) forward, best of 5")
    print(f"{'batch':>6} {'time/call':>11} {'examples/s':>12} {'GFLOP/s':>8}")
    for batch in batches:
        x = Tensor(rng.standard_normal((batch, width)).astype(np.float32))
        seconds = best_time(lambda: layer(x), min_time=0.004)  # runs of about 4 ms
        flops = 2 * batch * width * width
        print(f"{batch:>6} {seconds * 1e6:>9.1f}us {batch / seconds:>12,.0f} "
              f"{flops / seconds / 1e9:>8.1f}")


throughput_report()

# %% [markdown]
# Examples per second grow several-fold from batch 1 to a few hundred, then level off: once
# the weights are reused across enough examples, the arithmetic itself is the bottleneck
# and GFLOP/s approach what NumPy's matrix multiply can do on your machine. (At the largest
# batches they may dip again: inputs and outputs of several MiB no longer fit in the
# processor's caches.) That is why training feeds examples in batches (module 05) and why
# generating text one token at a time (modules 13 and 18) is slow per token.
#
# ## What comes next
#
# - **Module 04 (losses)** measures how wrong a model's outputs are.
# - **Module 05 (dataloader)** feeds a model shuffled mini-batches.
# - **Module 06 (autograd)** computes the gradient of a loss with respect to every
#   `Parameter` you registered here; `Linear` and `Dropout` need no changes for it.
# - **Module 07 (optimizers)** updates `model.parameters()` from those gradients: each tied
#   weight once, thanks to the identity check you wrote.
