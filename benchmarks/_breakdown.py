"""Where a training step's milliseconds go, in the same categories for TinyTorch and PyTorch.

`gpt_step.py --breakdown` runs one process per framework with these timers on. TinyTorch's
side times every Function's forward and every derivative rule (perf_counter around each
call: 0.9 us of overhead a call on the AMD EPYC VM, and ~210 calls a step at the
milestone's size, about 0.2 ms); PyTorch's side asks
`torch.profiler` for the self time of every ATen operation. Each operation goes to a
category by its name (CATEGORIES); what the phases took beyond their operations is the
framework's own work: Python and autograd bookkeeping on TinyTorch's side, the dispatcher,
autograd engine and Python on PyTorch's. The optimizer (gradient clipping and AdamW) is
timed as a whole on both sides.

The timers slow their process (PyTorch's profiler more than TinyTorch's wrappers), and one
process differs from the next by as much on a noisy machine; the script prints each side's
instrumented step beside the median of its timed rounds.
"""

from __future__ import annotations

import contextlib
import time

# (category, words that put an operation in it): TinyTorch's Function class names and
# PyTorch's ATen names, lower-cased, without "aten::" and underscores. First match wins; a
# word of three letters or fewer must be the whole name ("mm" is not in "mean"), a longer
# one may be part of it ("matmul" in "matmulrows"). What matches nothing is OTHER.
CATEGORIES = (
    ("matrix products (Linear, LM head)", ("matmul", "addmm", "mm", "bmm", "linear")),
    ("attention (scores, mask, softmax, x V)", ("attention", "scaleddotproduct")),
    ("GELU", ("gelu",)),
    ("layer norm", ("layernorm",)),
    ("cross-entropy", ("crossentropy", "logsoftmax", "nllloss")),
    ("embedding", ("embedding",)),
)
OTHER = "other operations (add, reshape, slice, copy)"
FRAMEWORK = "framework's own work (Python, autograd, dispatch)"
OPTIMIZER = "optimizer (clip + AdamW)"
OPERATION_ROWS = tuple(name for name, _ in CATEGORIES) + (OTHER,)
ROWS = OPERATION_ROWS + (FRAMEWORK, OPTIMIZER)


def category(op_name):
    """The category of a TinyTorch Function class name or a PyTorch ATen operation name.

    >>> category("MatMulRowsCompiled"), category("aten::addmm"), category("aten::add_")
    ('matrix products (Linear, LM head)', 'matrix products (Linear, LM head)', \
'other operations (add, reshape, slice, copy)')
    >>> category("aten::_scaled_dot_product_flash_attention_for_cpu_backward")
    'attention (scores, mask, softmax, x V)'
    """
    key = op_name.lower().removeprefix("aten::").replace("_", "")
    key = key.removesuffix("backward").removesuffix("compiled").removesuffix("function")
    for name, words in CATEGORIES:
        if any(key == w or (len(w) > 3 and w in key) for w in words):
            return name
    return OTHER


def _per_step(op_seconds, phase_seconds, steps):
    """ms a step per row: operations by category, the framework's rest, the optimizer."""
    ms = dict.fromkeys(ROWS, 0.0)
    for op, seconds in op_seconds.items():
        ms[category(op)] += seconds * 1e3 / steps
    forward_backward = sum(f + b for f, b, _ in phase_seconds) * 1e3 / steps
    ms[FRAMEWORK] = forward_backward - sum(ms[name] for name in OPERATION_ROWS)
    ms[OPTIMIZER] = sum(o for _, _, o in phase_seconds) * 1e3 / steps
    return ms


def tinytorch_breakdown(step, data):
    """Run `step(x, y, phases, around)` over `data`, every Function's forward and derivative
    rule timed inside `around` (the forward and backward phases); ms a step per row."""
    from tinytorch.core import autograd, tensor

    seconds = {}
    depth = [0]  # a forward that calls another Function's forward counts once, as the outer

    def timed(name, fn):
        def run(*args, **kwargs):
            if depth[0]:
                return fn(*args, **kwargs)
            depth[0] += 1
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - started
                depth[0] -= 1
        return run

    classes, todo = [], [tensor.Function]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if isinstance(cls.__dict__.get("forward"), staticmethod):
            classes.append(cls)
    plain_forward = {cls: cls.__dict__["forward"] for cls in classes}
    plain_rules = dict(autograd.DERIVATIVES)
    timed_forward = {cls: staticmethod(timed(cls.__name__, f.__func__))
                     for cls, f in plain_forward.items()}
    timed_rules = {cls: timed(cls.__name__ + "Backward", rule)
                   for cls, rule in plain_rules.items()}

    @contextlib.contextmanager
    def around():
        for cls, forward in timed_forward.items():
            cls.forward = forward
        autograd.DERIVATIVES.update(timed_rules)
        try:
            yield
        finally:
            for cls, forward in plain_forward.items():
                cls.forward = forward
            autograd.DERIVATIVES.update(plain_rules)

    phases = []
    for x, y in data:
        step(x, y, phases, around=around)
    return _per_step(seconds, phases, len(data)), phases


def torch_breakdown(step, data):
    """Run `step(x, y, phases, around)` over `data`, torch.profiler on inside `around` (the
    forward and backward phases); ms a step per row, from each ATen operation's self time."""
    from torch.profiler import ProfilerActivity, profile

    seconds, phases, profiles = {}, [], []

    @contextlib.contextmanager
    def around():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            yield
        profiles.append(prof)

    for x, y in data:
        step(x, y, phases, around=around)
    for prof in profiles:
        for event in prof.key_averages():
            if event.key.startswith("aten::"):
                seconds[event.key] = seconds.get(event.key, 0.0) + event.self_cpu_time_total / 1e6
    return _per_step(seconds, phases, len(data)), phases
