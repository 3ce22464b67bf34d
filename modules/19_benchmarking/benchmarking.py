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
# # Module 19: Benchmarking
#
# ## Overview
#
# Modules 14-18 made claims: this layer is the bottleneck, this kernel is faster, int8 costs
# nothing, the cache buys a factor of ten. Every such claim rests on a comparison of two
# timings, and a single timing on a real computer is a poor witness. Run the same function
# ten times and you get ten different figures; run it on a machine shared with other
# programs and some of those figures are twice the others. A 4% difference between two
# versions of a training step may be the code, or it may be the machine breathing.
#
# This module builds the instrument that tells the two apart: a **benchmark harness**. It
# warms the code up before timing it, repeats the measurement, summarizes the repeats with
# the median and the interquartile range (which one slow run cannot move), runs the two
# versions **interleaved** (A B B A A B ...) so that a noisy neighbour slows both alike, and
# puts a **bootstrap confidence interval** on the ratio of the two medians. Its verdict says
# "faster" or "slower" only when the whole interval is on one side of 1; otherwise it says
# "no difference (within noise)", and means it.
#
# The capstone (module 20) proves every gain with this harness, and the course's own
# benchmark scripts (`benchmarks/`) use it to compare your framework with PyTorch.
#
# ## Learning objectives
#
# - Explain why one timing lies: warm-up, caches, CPU frequency, and other programs.
# - Summarize repeated timings with the median and the quartiles, and say why they beat the
#   mean and the standard deviation on timing data.
# - Interleave two measurements in pairs (A B B A) so that drift and noise cancel in their
#   ratio, and see a sequential comparison get it wrong.
# - Compute a bootstrap confidence interval for a ratio of medians, paired or not.
# - Give a verdict that refuses to call a difference inside the noise, and test it on
#   synthetic samples whose truth you know.
#
# ## What you build
#
# - `quartiles(samples)` -> `(q1, median, q3)`, and the `Measurement` that uses it (`.median`,
#   `.q1`, `.q3`, `.iqr`, `.min`, `.n`; `str()` like `12.3 ms ± 0.4 (IQR, n=10)`).
# - `Benchmark(warmup, repeats, clock).run(fn, *args)`: warm-up calls, then timed repeats.
# - `interleaved_order(rounds)` and `Benchmark.compare(baseline_fn, candidate_fn)`: paired
#   runs in the order A B B A A B B A ...
# - `bootstrap_ratio_ci(baseline, candidate, paired=...)` and `verdict(ci)`.
# - Given: `Comparison` (`.ratio`, `.speedup`, `.ci`, `.verdict`, `Comparison.from_samples`
#   for samples measured elsewhere), `environment()` (CPU, cores, NumPy, BLAS, threads,
#   versions), a rich comparison `table(...)` and a matplotlib `plot(...)` of the samples.
#
# ## What you are not building yet
#
# - **Hardware counters** (cycles, cache misses, `perf stat`): the harness measures time with
#   a clock you choose, nothing finer.
# - **Statistical tests with p-values.** A confidence interval of the ratio answers the
#   question a benchmark asks ("how much faster, give or take?") more directly than a test
#   of "is it different at all?".
# - **Making anything faster.** Module 20 combines modules 15-18 and uses this harness to
#   prove what they bought.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| default_exp perf.benchmarking
#| export
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# %% [markdown]
# The lesson itself (tests and measurements, not the package) also uses:

# %% nbgrader={"grade": false, "grade_id": "lesson-imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
from tinytorch.core.autograd import no_grad
from tinytorch.core.tensor import manual_seed
from tinytorch.models.transformer import GPT, GPTConfig


class FakeClock:
    """A clock the tests control: `now` only moves when a fake workload advances it."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def work(self, seconds):
        """A function that 'takes' `seconds` (a number, or a callable returning one)."""
        def fn(*args):
            self.now += seconds() if callable(seconds) else seconds
        return fn


# %% [markdown]
# ## Part 1: one timing lies; the median and the quartiles do not
#
# Time a 192 x 192 matrix product once, then forty-nine more times. The first call is often
# the slowest by far: NumPy asks the operating system for fresh memory (page faults),
# OpenBLAS starts its threads, the instructions and the data are not yet in the caches, and
# the CPU may still be climbing to its full clock frequency. None of that happens in a
# training loop's thousandth step, so a benchmark must **warm up**: run the code a few times
# untimed before it starts the clock.
#
# After warm-up the timings still scatter. On a shared machine every run is the true cost
# plus interference from other programs, and interference is never negative: the scatter has
# a floor and a long tail to the right (a run that lost its core for 5 ms takes 5 ms
# longer). Summaries that fit that shape:
#
# - The **median** (the middle of the sorted runs). One run hit by a 50 ms hiccup moves the
#   mean of ten 10 ms runs to 15 ms; it does not move the median at all.
# - The **quartiles** $q_1$ and $q_3$ (a quarter and three quarters of the way up the sorted
#   runs) and the **interquartile range** $\mathrm{IQR} = q_3 - q_1$, the width of the middle
#   half of the runs. The standard deviation squares the distance of every run from the
#   mean, so the tail dominates it; the IQR ignores the tail.
# - The **minimum**, the run with the least interference: a good estimate of what the code
#   costs on an idle machine, but one figure, from one lucky run, with no measure of spread.
#
# **Computing a quartile.** Sort the $n$ samples into $x_0 \le \dots \le x_{n-1}$. The
# $p$-quantile sits at the fractional position $h = p\,(n - 1)$; between the two samples on
# either side of it, interpolate linearly:
#
# $$Q(p) = x_{\lfloor h \rfloor} + (h - \lfloor h \rfloor)\,(x_{\lfloor h \rfloor + 1} -
#   x_{\lfloor h \rfloor}).$$
#
# The median is $Q(1/2)$, the quartiles $Q(1/4)$ and $Q(3/4)$. This is NumPy's default
# (`np.percentile(x, 25)`, method `"linear"`). A worked example: the samples
# `[4, 1, 3, 2]` sort to `[1, 2, 3, 4]`; for $q_1$, $h = 0.25 \times 3 = 0.75$, so
# $q_1 = 1 + 0.75\,(2 - 1) = 1.75$; the median is at $h = 1.5$: $2.5$; $q_3 = 3.25$.
# With a single sample all three are that sample.

# %% nbgrader={"grade": false, "grade_id": "one-timing-demo", "locked": false, "schema_version": 3, "solution": false, "task": false}
def one_timing_demo():
    a = np.random.default_rng(0).standard_normal((192, 192)).astype(np.float32)
    runs = []
    for _ in range(50):
        start = time.perf_counter()
        a @ a.T
        runs.append(time.perf_counter() - start)
    runs = np.asarray(runs) * 1e6
    print(f"192x192 matmul: first call {runs[0]:.0f} us; of the next 49: min {runs[1:].min():.0f}"
          f", median {np.median(runs[1:]):.0f}, mean {runs[1:].mean():.0f}, max "
          f"{runs[1:].max():.0f} us")


one_timing_demo()

# %% nbgrader={"grade": false, "grade_id": "measurement", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def quartiles(samples):
    """(q1, median, q3) of the samples, linear interpolation between order statistics.

    >>> quartiles([4, 1, 3, 2, 5]), quartiles([1.0, 2.0])
    ((2.0, 3.0, 4.0), (1.25, 1.5, 1.75))
    """
    x = np.sort(np.asarray(samples, dtype=np.float64))
    if x.size == 0:
        raise ValueError("quartiles of no samples: measure at least once (repeats >= 1)")
    ### BEGIN SOLUTION
    out = []
    for p in (0.25, 0.5, 0.75):
        h = p * (x.size - 1)
        lo = int(math.floor(h))
        hi = min(lo + 1, x.size - 1)
        out.append(float(x[lo] + (h - lo) * (x[hi] - x[lo])))
    return tuple(out)
    ### END SOLUTION


_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))


def format_seconds(seconds, spread=None):
    """'12.3 ms' (or '12.3 ms ± 0.4' with a spread in the same unit), three figures.

    >>> format_seconds(0.0123), format_seconds(0.0123, spread=0.0004)
    ('12.3 ms', '12.3 ms ± 0.4')
    >>> format_seconds(2.5), format_seconds(0.150), format_seconds(3.2e-6)
    ('2.50 s', '150 ms', '3.20 µs')
    """
    unit, scale = next(((u, s) for u, s in _UNITS if abs(seconds) >= s), _UNITS[-1])
    value = seconds / scale
    decimals = 0 if value >= 100 else 1 if value >= 10 else 2
    text = f"{value:.{decimals}f} {unit}"
    if spread is not None:
        text += f" ± {spread / scale:.{decimals}f}"
    return text


def _check_samples(samples, what):
    values = tuple(float(s) for s in samples)
    if not values:
        raise ValueError(f"{what}: no samples. A benchmark needs at least one timed run "
                         "(repeats >= 1)")
    bad = [v for v in values if not math.isfinite(v) or v < 0]
    if bad:
        raise ValueError(f"{what}: samples must be finite, non-negative seconds, got "
                         f"{bad[:3]}: did the clock go backwards (use time.perf_counter)?")
    return values


@dataclass(frozen=True)
class Measurement:
    """Timed samples of one function, in seconds, and their robust summary.

    >>> m = Measurement((0.010, 0.012, 0.011, 0.030, 0.011))  # one slow outlier
    >>> print(m)  # the median and the interquartile range shrug it off
    11.0 ms ± 1.0 (IQR, n=5)
    >>> m.median, m.min, m.n
    (0.011, 0.01, 5)
    """

    samples: tuple

    def __post_init__(self):
        object.__setattr__(self, "samples", _check_samples(self.samples, "Measurement"))

    @property
    def n(self):
        return len(self.samples)

    @property
    def q1(self):
        return quartiles(self.samples)[0]

    @property
    def median(self):
        return quartiles(self.samples)[1]

    @property
    def q3(self):
        return quartiles(self.samples)[2]

    @property
    def iqr(self):
        q1, _, q3 = quartiles(self.samples)
        return q3 - q1

    @property
    def min(self):
        return min(self.samples)

    def __str__(self):
        return f"{format_seconds(self.median, self.iqr)} (IQR, n={self.n})"


# %% [markdown]
# ### Test: quartiles and the measurement

# %% nbgrader={"grade": true, "grade_id": "test_unit_quartiles", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_quartiles():
    """The worked example, one sample, NumPy's percentiles, and a tail the median ignores."""
    got = quartiles([4, 1, 3, 2])
    assert np.allclose(got, (1.75, 2.5, 3.25)), (
        f"quartiles([4, 1, 3, 2]) gave {got}, expected (1.75, 2.5, 3.25): sort first, then "
        "interpolate at h = p * (n - 1) between x[floor(h)] and x[floor(h) + 1]")
    assert quartiles([7.0]) == (7.0, 7.0, 7.0), (
        f"one sample gave {quartiles([7.0])}, expected (7.0, 7.0, 7.0): with n = 1, h = 0 "
        "and there is no x[1] to interpolate towards (clamp the upper index to n - 1)")
    rng = np.random.default_rng(0)

    def check_like_numpy(x):
        want = np.percentile(x, [25, 50, 75])
        assert np.allclose(quartiles(x), want, rtol=1e-12), (
            f"n={len(x)}: quartiles gave {quartiles(x)}, np.percentile {tuple(want)}: the "
            "position is p * (n - 1) (not p * n), and the weight of the upper sample is "
            "h - floor(h)")

    for n in (2, 3, 10, 11, 57):
        check_like_numpy(rng.lognormal(-4, 0.3, n))
    m = Measurement((0.010, 0.011, 0.012, 0.010, 0.013, 0.011, 0.010, 0.012, 0.011, 0.060))
    assert abs(m.median - 0.011) < 1e-12 and m.min == 0.010 and m.n == 10, (
        f"median {m.median}, min {m.min}, n {m.n}: expected 0.011, 0.010, 10")
    assert abs(m.iqr - 0.00175) < 1e-12, (
        f"IQR {m.iqr}, expected q3 - q1 = 0.01200 - 0.01025 = 0.00175 s: the 60 ms run must "
        "not widen the middle half")
    text = str(m)
    assert text.startswith("11.0 ms ± 1.") and text.endswith("(IQR, n=10)"), (
        f"str(Measurement) gave {text!r}, expected '11.0 ms ± 1.7 (IQR, n=10)' or so: the "
        "median and the IQR, in the median's unit")
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_like_numpy, {
        "a large sample": (rng.lognormal(-2, 1.0, 1001),),
        "equal samples": ([0.5] * 6,),
        "integers in reverse order": (list(range(20, 0, -1)),),
        "two far-apart samples": ([1e-6, 3.0],),
        "a sample of four with a tie": ([2.0, 2.0, 1.0, 9.0],),
    })
    ### END HIDDEN TESTS


test_unit_quartiles()


# %% [markdown]
# ## Part 2: the harness, warm-up then repeats
#
# `Benchmark(warmup=2, repeats=10, clock=time.perf_counter, number=1)` holds the recipe;
# `run(fn, *args)` follows it:
#
# 1. call `fn(*args)` `warmup` times, untimed;
# 2. `repeats` times: read the clock, call `fn(*args)` `number` times, read the clock
#    again, and keep `(end - start) / number`, seconds per call;
# 3. return `Measurement(tuple(samples))`.
#
# `number` exists for functions not much slower than reading the clock. On Linux
# `time.perf_counter` counts nanoseconds, but reading it from a Python loop costs about
# 300 of them on a shared 2-core machine: a 1 µs function timed one call at a time
# measures the harness along with the function. Time `number` calls together and divide.
#
# **The clock.** `time.perf_counter` is wall time with the best resolution, the default.
# `time.process_time` counts only the CPU time of this process: steadier on a busy machine
# (time the process spent waiting for a core is not counted), but it adds up the time of
# *every* thread, so with two BLAS threads it reports about twice the wall time. The clock is
# a parameter, so tests can pass a fake clock that moves only when a fake workload says so:
# the harness is then tested exactly, never by timing something real.
#
# **Bad input.** Zero repeats would return a measurement of nothing, whose median is
# undefined; negative warm-up is a typo. Both raise `ValueError` at construction, naming the
# value and the fix.

# %% nbgrader={"grade": false, "grade_id": "benchmark", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def _check_count(name, value, least):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < least:
        fix = ("a benchmark needs at least one timed run; 5-10 is typical, more on a "
               "noisy machine") if least == 1 else "use 0 for no warm-up"
        raise ValueError(f"{name} must be at least {least}, got {value}: {fix}")
    return int(value)


class Benchmark:
    """Warm-up calls, then `repeats` timed samples of `number` calls each, on `clock`.

    A pretend clock makes the example exact: each function moves it on by its cost.

    >>> now = [0.0]
    >>> def clock():
    ...     return now[0]
    >>> def slow():
    ...     now[0] += 0.002
    >>> def fast():
    ...     now[0] += 0.001
    >>> bench = Benchmark(warmup=1, repeats=6, clock=clock)
    >>> print(bench.run(slow))
    2.00 ms ± 0.00 (IQR, n=6)
    >>> comparison = bench.compare(slow, fast, names=("numpy", "fused"))
    >>> round(comparison.speedup, 3), comparison.verdict
    (2.0, 'faster')
    """

    def __init__(self, warmup=2, repeats=10, clock=time.perf_counter, number=1):
        self.warmup = _check_count("warmup", warmup, 0)
        self.repeats = _check_count("repeats", repeats, 1)
        self.number = _check_count("number", number, 1)
        if not callable(clock):
            raise TypeError(f"clock must be a function returning seconds (time.perf_counter), "
                            f"got {clock!r}")
        self.clock = clock

    def __repr__(self):
        return (f"Benchmark(warmup={self.warmup}, repeats={self.repeats}, "
                f"number={self.number}, clock={getattr(self.clock, '__name__', self.clock)})")

    def _sample(self, fn, args):
        """Seconds per call of fn(*args), over `number` calls."""
        ### BEGIN SOLUTION
        start = self.clock()
        for _ in range(self.number):
            fn(*args)
        return (self.clock() - start) / self.number
        ### END SOLUTION

    def run(self, fn, *args):
        """Measurement of fn(*args): `warmup` untimed calls, then `repeats` samples."""
        ### BEGIN SOLUTION
        for _ in range(self.warmup):
            fn(*args)
        return Measurement(tuple(self._sample(fn, args) for _ in range(self.repeats)))
        ### END SOLUTION

    def compare(self, baseline_fn, candidate_fn, *args, rounds=None,
                names=("baseline", "candidate")):
        """Comparison of two functions, timed in pairs A B B A ... (see Part 4)."""
        rounds = self.repeats if rounds is None else _check_count("rounds", rounds, 1)
        ### BEGIN SOLUTION
        fns = (baseline_fn, candidate_fn)
        for _ in range(self.warmup):
            for fn in fns:
                fn(*args)
        samples = ([], [])
        for side in interleaved_order(rounds):
            samples[side].append(self._sample(fns[side], args))
        return Comparison.from_samples(samples[0], samples[1], paired=True, names=names)
        ### END SOLUTION


# %% [markdown]
# ### Test: warm-up, repeats and the clock

# %% nbgrader={"grade": true, "grade_id": "test_unit_benchmark_run", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_benchmark_run():
    """A fake clock and a workload whose first calls are slow: warm-up drops them."""
    clock = FakeClock()
    costs = iter([0.5, 0.3] + [0.01, 0.012, 0.011, 0.013, 0.01] * 4)
    calls = []

    def work(x):
        calls.append(x)
        clock.now += next(costs)

    m = Benchmark(warmup=2, repeats=5, clock=clock).run(work, "arg")
    assert isinstance(m, Measurement), f"run should return a Measurement, got {type(m)}"
    assert calls == ["arg"] * 7, (
        f"fn was called {len(calls)} times with {set(calls)}, expected 7 calls with 'arg': "
        "warmup (2) untimed calls, then repeats (5) timed ones, passing *args through")
    assert np.allclose(m.samples, (0.01, 0.012, 0.011, 0.013, 0.01)), (
        f"samples {m.samples}, expected (0.01, 0.012, 0.011, 0.013, 0.01): the two slow "
        "first calls are warm-up and must not be timed; read the clock just before and just "
        "after each timed call")

    def check_per_call(warmup, repeats, number, cost):
        """Every sample is seconds per call: `number` calls of `cost` timed together."""
        fake = FakeClock()
        m = Benchmark(warmup=warmup, repeats=repeats, clock=fake, number=number).run(
            fake.work(cost))
        assert m.n == repeats and np.allclose(m.samples, cost), (
            f"number={number} gave samples {m.samples}, expected {repeats} of {cost} s: time "
            "`number` calls together and divide by `number` (seconds per call)")
        calls = (warmup + repeats * number)
        assert abs(fake.now - calls * cost) < 1e-9, (
            f"the fake clock advanced {fake.now} s, expected {calls} calls x {cost}: warm-up "
            "calls run once each, untimed")

    check_per_call(0, 3, 4, 0.002)
    clock2 = FakeClock()
    m2 = Benchmark(warmup=0, repeats=3, clock=clock2, number=4).run(clock2.work(0.002))
    assert m2.n == 3 and np.allclose(m2.samples, 0.002), (
        f"number=4 gave samples {m2.samples}, expected three of 0.002 s: time `number` calls "
        "together and divide by `number` (seconds per call)")
    assert abs(clock2.now - 0.024) < 1e-12, (
        f"the fake clock advanced {clock2.now} s, expected 12 calls x 0.002 = 0.024")
    for kwargs, word in (({"repeats": 0}, "repeats"), ({"warmup": -1}, "warmup")):
        try:
            Benchmark(**kwargs)
        except ValueError as error:
            assert word in str(error) and str(list(kwargs.values())[0]) in str(error), (
                f"the error should name {word} and the value: {error}")
        else:
            raise AssertionError(f"Benchmark({kwargs}) must raise ValueError")
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_per_call, {
        "one call per sample": (3, 5, 1, 0.25),
        "many calls per sample": (1, 2, 50, 1e-4),
        "a single timed sample": (0, 1, 1, 0.03),
    })
    ### END HIDDEN TESTS


test_unit_benchmark_run()


# %% [markdown]
# ## Part 3: how sure? The bootstrap interval of a ratio, and a verdict
#
# The ratio of medians, candidate over baseline, is the figure a benchmark reports: 0.80
# means the candidate takes 80% of the baseline's time (a speed-up of 1.25x). But the
# medians come from ten noisy samples each. Measured again, they would differ, and so would
# the ratio. By how much?
#
# **The bootstrap** (Efron, 1979) answers from the samples themselves. The samples stand in
# for the distribution they came from; draw a new set of $n$ from them *with replacement*
# (some samples twice, some not at all), compute the ratio of medians of the resampled
# sets, and repeat a few thousand times. The spread of those ratios is the spread the ratio
# would have over repeated experiments; the middle 95% of them,
# $[Q(0.025), Q(0.975)]$, is a **95% percentile bootstrap interval**. The standard error
# of a ratio of medians has no simple formula (the asymptotic one needs the density of the
# timings at their medians, which ten samples cannot estimate); the bootstrap needs none.
#
# **Paired or not.** Samples from `compare` (Part 4) come in pairs (round $r$'s A and B met
# the same machine): resample *rounds*, drawing the same indices for both sides, so a noisy round
# stays a noisy round on both sides and its noise cancels in the ratio. Samples measured
# separately (`from_samples` of two processes) are resampled each on its own.
#
# Make it reproducible: a seeded generator (`np.random.default_rng(seed)`), so the same
# samples always give the same interval. Vectorize: one `(resamples, n)` array of indices,
# `np.median(..., axis=1)` of each side, no Python loop over resamples.
#
# **The verdict** refuses to call a difference inside the noise:
#
# - `"faster"` if the whole interval is below 1 (`high < 1`),
# - `"slower"` if the whole interval is above 1 (`low > 1`),
# - `"no difference (within noise)"` otherwise, however far the ratio itself is from 1.
#
# A 0.96 ratio with interval (0.91, 1.02) is "no difference": measure more rounds, or on a
# quieter machine, before claiming 4%.

# %% nbgrader={"grade": false, "grade_id": "bootstrap", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
NO_DIFFERENCE = "no difference (within noise)"


def bootstrap_ratio_ci(baseline, candidate, confidence=0.95, resamples=2000, paired=False,
                       seed=0):
    """(low, high): percentile bootstrap interval of median(candidate) / median(baseline).

    >>> numpy_s = [1.0, 1.1, 0.9, 1.0, 1.05]  # seconds per call, measured elsewhere
    >>> fused_s = [0.5, 0.55, 0.45, 0.5, 0.52]
    >>> low, high = bootstrap_ratio_ci(numpy_s, fused_s)  # seeded: the same every run
    >>> round(low, 3), round(high, 3)  # about half the time, and surely below 1
    (0.45, 0.556)
    """
    b = np.asarray(_check_samples(baseline, "baseline"), dtype=np.float64)
    c = np.asarray(_check_samples(candidate, "candidate"), dtype=np.float64)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1 (0.95 for 95%), got {confidence}")
    if paired and b.size != c.size:
        raise ValueError(f"paired samples come in pairs: got {b.size} baseline and {c.size} "
                         "candidate samples. Pass paired=False for samples measured separately")
    if b.min() <= 0:
        raise ValueError("a baseline sample of 0 s has no ratio: time more calls per sample "
                         "(Benchmark(number=...)) so each sample exceeds the clock's resolution")
    ### BEGIN SOLUTION
    rng = np.random.default_rng(seed)
    ib = rng.integers(0, b.size, size=(resamples, b.size))
    ic = ib if paired else rng.integers(0, c.size, size=(resamples, c.size))
    ratios = np.median(c[ic], axis=1) / np.median(b[ib], axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(ratios, [tail, 1 - tail])
    return float(low), float(high)
    ### END SOLUTION


def verdict(ci):
    """'faster' | 'slower' | NO_DIFFERENCE, from the interval of candidate / baseline time.

    >>> verdict((0.45, 0.56)), verdict((1.2, 1.5))
    ('faster', 'slower')
    >>> verdict((0.9, 1.1))
    'no difference (within noise)'
    """
    low, high = ci
    ### BEGIN SOLUTION
    if high < 1.0:
        return "faster"
    if low > 1.0:
        return "slower"
    return NO_DIFFERENCE
    ### END SOLUTION


# %% [markdown]
# ### Given: the comparison, the environment, a table and a plot
#
# `Comparison` holds the two measurements and the interval, and derives the rest:
# `ratio` (candidate median / baseline median), `speedup` (its inverse), `verdict`.
# `Comparison.from_samples(baseline, candidate, paired=False)` builds one from samples timed
# anywhere (another process, another script, a file of last week's figures).
#
# A figure without its machine is half a figure: `environment()` records the CPU, the cores
# this process may use, the platform, Python, NumPy and the BLAS it was built against, the
# thread settings in the environment (`OMP_NUM_THREADS`, ...), the load average and the
# TinyTorch version, as a JSON-serializable dict to store beside the results.
#
# `table({"name": comparison, ...})` returns a rich table (print it with `rich.print`), and
# `plot(comparisons, path)` draws each comparison's samples, round by round, with their
# medians and the interval of the ratio. Both import their library when called, so the
# package itself needs only NumPy.

# %% nbgrader={"grade": false, "grade_id": "comparison", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
@dataclass(frozen=True)
class Comparison:
    """Baseline against candidate: medians, their ratio, its bootstrap interval, a verdict.

    >>> numpy_s = [1.0, 1.1, 0.9, 1.0, 1.05]  # seconds per call, measured elsewhere
    >>> fused_s = [0.5, 0.55, 0.45, 0.5, 0.52]
    >>> c = Comparison.from_samples(numpy_s, fused_s, names=("numpy", "fused"))
    >>> round(c.ratio, 3), round(c.speedup, 3), c.verdict
    (0.5, 2.0, 'faster')
    >>> print(str(c).split("; ")[0])  # then each side's median ± IQR
    fused / numpy: 0.500x time [0.450, 0.556] (95% CI, unpaired): faster
    >>> record = c.to_dict()  # JSON-ready, samples included
    >>> record["verdict"], record["baseline"]["samples"] == numpy_s
    ('faster', True)
    """

    baseline: Measurement
    candidate: Measurement
    ci: tuple
    paired: bool = False
    names: tuple = ("baseline", "candidate")
    confidence: float = 0.95

    @classmethod
    def from_samples(cls, baseline_samples, candidate_samples, paired=False,
                     names=("baseline", "candidate"), confidence=0.95, resamples=2000,
                     seed=0):
        """The same statistics as Benchmark.compare, from samples measured elsewhere."""
        baseline = Measurement(tuple(baseline_samples))
        candidate = Measurement(tuple(candidate_samples))
        ci = bootstrap_ratio_ci(baseline.samples, candidate.samples, confidence=confidence,
                                resamples=resamples, paired=paired, seed=seed)
        return cls(baseline, candidate, ci, paired, tuple(names), confidence)

    @property
    def ratio(self):
        """candidate median / baseline median: below 1, the candidate takes less time."""
        return self.candidate.median / self.baseline.median

    @property
    def speedup(self):
        """baseline median / candidate median: 2.0 means the candidate is twice as fast."""
        return self.baseline.median / self.candidate.median

    @property
    def verdict(self):
        return verdict(self.ci)

    def __str__(self):
        a, b = self.names
        return (f"{b} / {a}: {self.ratio:.3f}x time [{self.ci[0]:.3f}, {self.ci[1]:.3f}] "
                f"({self.confidence:.0%} CI, {'paired' if self.paired else 'unpaired'}): "
                f"{self.verdict}; {a} {self.baseline}, {b} {self.candidate}")

    def to_dict(self):
        """JSON-ready: samples, medians, IQRs, ratio, interval and verdict."""
        return {"names": list(self.names), "paired": self.paired,
                "baseline": _measurement_dict(self.baseline),
                "candidate": _measurement_dict(self.candidate),
                "ratio": self.ratio, "speedup": self.speedup, "ci": list(self.ci),
                "confidence": self.confidence, "verdict": self.verdict}

    def table(self, title=None):
        return table({"": self}, title=title)


def _measurement_dict(m):
    return {"samples": list(m.samples), "n": m.n, "median": m.median, "q1": m.q1, "q3": m.q3,
            "iqr": m.iqr, "min": m.min}


def _comparisons(comparisons):
    if isinstance(comparisons, Comparison):
        return {"": comparisons}
    return dict(comparisons)


def table(comparisons, title=None):
    """A rich Table: one row per named comparison (a dict, or one Comparison).

    >>> numpy_s = [1.0, 1.1, 0.9, 1.0, 1.05]  # seconds per call, measured elsewhere
    >>> fused_s = [0.5, 0.55, 0.45, 0.5, 0.52]
    >>> t = table({"matmul": Comparison.from_samples(numpy_s, fused_s)}, title="speed")
    >>> t.row_count, [column.header for column in t.columns][-3:]
    (1, ['95% CI', 'speed-up', 'verdict'])

    Print it with rich: `rich.print(t)`.
    """
    from rich.table import Table

    rows = _comparisons(comparisons)
    first = next(iter(rows.values()), None)
    a, b = first.names if first else ("baseline", "candidate")
    t = Table(title=title)
    for header, justify in (("benchmark", "left"), (f"{a} median ± IQR", "right"),
                            (f"{b} median ± IQR", "right"), ("n", "right"),
                            (f"{b} / {a}", "right"), ("95% CI", "right"),
                            ("speed-up", "right"), ("verdict", "left")):
        t.add_column(header, justify=justify)
    for name, c in rows.items():
        style = {"faster": "green", "slower": "red"}.get(c.verdict, "yellow")
        n = str(c.baseline.n) if c.baseline.n == c.candidate.n else \
            f"{c.baseline.n}/{c.candidate.n}"
        t.add_row(name, format_seconds(c.baseline.median, c.baseline.iqr),
                  format_seconds(c.candidate.median, c.candidate.iqr), n, f"{c.ratio:.3f}",
                  f"[{c.ci[0]:.3f}, {c.ci[1]:.3f}]", f"{c.speedup:.2f}x",
                  f"[{style}]{c.verdict}[/{style}]")
    return t


def plot(comparisons, path):
    """Samples of each comparison by round, medians dashed, and the ratio's interval.

    >>> import tempfile
    >>> numpy_s = [1.0, 1.1, 0.9, 1.0, 1.05]  # seconds per call, measured elsewhere
    >>> fused_s = [0.5, 0.55, 0.45, 0.5, 0.52]
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = plot({"matmul": Comparison.from_samples(numpy_s, fused_s)},
    ...             Path(folder.name) / "figures" / "matmul.png")
    >>> path.name, path.stat().st_size > 0  # folders made as needed
    ('matmul.png', True)
    >>> folder.cleanup()
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _comparisons(comparisons)
    if not rows:
        raise ValueError("plot needs at least one Comparison")
    fig, axes = plt.subplots(len(rows), 2, figsize=(9, 2.6 * len(rows)), squeeze=False,
                             gridspec_kw={"width_ratios": [3, 1]})
    for (name, c), (left, right) in zip(rows.items(), axes):
        for m, label, colour in ((c.baseline, c.names[0], "#0b5cad"),
                                 (c.candidate, c.names[1], "#c2410c")):
            ms = np.asarray(m.samples) * 1e3
            left.plot(np.arange(ms.size), ms, "o", color=colour, ms=4, label=f"{label}: {m}")
            left.axhline(m.median * 1e3, color=colour, ls="--", lw=1)
        left.set_xlabel("round" if c.paired else "sample")
        left.set_ylabel("ms per call")
        left.set_title(name or "samples", fontsize=10)
        left.legend(fontsize=7, loc="upper right")
        right.errorbar([0], [c.ratio], yerr=[[c.ratio - c.ci[0]], [c.ci[1] - c.ratio]],
                       fmt="o", color="#1f2328", capsize=6)
        right.axhline(1.0, color="#6b7280", lw=1)
        right.set_xticks([])
        right.set_title(f"{c.names[1]} / {c.names[0]}:\n{c.verdict}", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


# %% nbgrader={"grade": false, "grade_id": "environment", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def _blas():
    """The BLAS NumPy was built against, from np.show_config (NumPy >= 1.25)."""
    try:
        config = np.show_config(mode="dicts")
        blas = config["Build Dependencies"]["blas"]
        return {k: blas.get(k) for k in ("name", "version", "openblas configuration") if
                blas.get(k)}
    except Exception:  # older NumPy, or a build that does not say
        return {}


def _threadpools():
    """Live thread pools (threadpoolctl, only if it is installed already)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    return [{k: p.get(k) for k in ("user_api", "internal_api", "num_threads", "version")}
            for p in threadpool_info()]


def environment():
    """Where a figure was measured: CPU, cores, platform, versions, BLAS and threads.

    >>> env = environment()
    >>> sorted(env)[:6]
    ['blas', 'cores', 'cpu', 'load_average', 'numpy', 'platform']
    >>> env["numpy"] == np.__version__, json.loads(json.dumps(env)) == env  # JSON as it is
    (True, True)
    """
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count()
    try:
        load = list(os.getloadavg())
    except (AttributeError, OSError):
        load = None
    package = sys.modules.get("tinytorch")  # whichever tinytorch runs: yours or the course's
    tinytorch_version = getattr(package, "__version__", None)
    for dist in ("tinytorch", "tinytorch-course"):
        if tinytorch_version:
            break
        try:
            from importlib.metadata import version

            tinytorch_version = version(dist)
        except Exception:
            pass
    env = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "load_average": load,
        # not platform.platform(): it runs `uname -p` in a subprocess
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "blas": _blas(),
        "threadpools": _threadpools(),
        "thread_env": {k: os.environ[k] for k in THREAD_VARIABLES if k in os.environ},
        "tinytorch": tinytorch_version,
        "tinytorch_path": str(Path(package.__file__).parent) if getattr(
            package, "__file__", None) else None,
    }
    return json.loads(json.dumps(env, default=str))  # JSON-serializable by construction


# %% [markdown]
# ### Test: the interval covers the truth, and the verdict respects the noise

# %% nbgrader={"grade": true, "grade_id": "test_unit_bootstrap", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_bootstrap():
    """A synthetic case whose true ratio is 1.25; seeded; paired narrower than unpaired."""
    rng = np.random.default_rng(1)
    base = 0.010 * rng.lognormal(0, 0.05, 40)
    cand = 0.0125 * rng.lognormal(0, 0.05, 40)  # true ratio of medians: 1.25
    low, high = bootstrap_ratio_ci(base, cand)
    assert low < 1.25 < high, (
        f"the 95% interval ({low:.4f}, {high:.4f}) misses the true ratio 1.25: the ratio is "
        "median(candidate) / median(baseline) of each resample")
    assert high - low < 0.1, f"interval ({low:.3f}, {high:.3f}) is far too wide for n=40"
    assert bootstrap_ratio_ci(base, cand) == (low, high), (
        "the same samples gave a different interval: seed the generator "
        "(np.random.default_rng(seed)) so the interval is reproducible")
    low90, high90 = bootstrap_ratio_ci(base, cand, confidence=0.9)
    assert low <= low90 and high90 <= high and (low, high) != (low90, high90), (
        f"90% interval ({low90:.4f}, {high90:.4f}) should sit inside the 95% one ({low:.4f}, "
        f"{high:.4f}): take the quantiles (1 - confidence) / 2 and 1 - (1 - confidence) / 2")
    noise = rng.lognormal(0, 0.3, 30)  # a noisy machine: each round's noise hits both sides
    a, b = 0.01 * noise * rng.lognormal(0, 0.01, 30), 0.009 * noise * rng.lognormal(0, 0.01, 30)
    paired = bootstrap_ratio_ci(a, b, paired=True)
    unpaired = bootstrap_ratio_ci(a, b, paired=False)
    assert paired[0] < 0.9 < paired[1] and paired[1] - paired[0] < 0.05, (
        f"paired interval {paired}, expected a narrow one around 0.9: with paired=True draw "
        "ONE set of indices and use it for both sides, so each round stays a pair")
    assert unpaired[1] - unpaired[0] > 3 * (paired[1] - paired[0]), (
        f"unpaired interval {unpaired} should be much wider than paired {paired}: without "
        "pairing, draw the two sides' indices independently")

    def check_interval(baseline, candidate):
        """The interval holds the observed ratio of medians, repeats, and nests 90% in 95%."""
        low, high = bootstrap_ratio_ci(baseline, candidate)
        ratio = np.median(candidate) / np.median(baseline)
        assert low <= ratio <= high, (
            f"the 95% interval ({low:.4f}, {high:.4f}) misses the observed ratio {ratio:.4f}: "
            "the ratio is median(candidate) / median(baseline) of each resample")
        assert bootstrap_ratio_ci(baseline, candidate) == (low, high), (
            "the same samples gave a different interval: seed the generator")
        low90, high90 = bootstrap_ratio_ci(baseline, candidate, confidence=0.9)
        assert low <= low90 and high90 <= high, (
            f"the 90% interval ({low90:.4f}, {high90:.4f}) should sit inside the 95% one")

    check_interval(base, cand)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_interval, {
        "a candidate twice as fast": (0.02 * rng.lognormal(0, 0.1, 100),
                                      0.01 * rng.lognormal(0, 0.1, 100)),
        "a candidate twice as slow, few samples": (0.001 * rng.lognormal(0, 0.05, 12),
                                                   0.002 * rng.lognormal(0, 0.05, 12)),
        "samples of unequal length": (0.5 * rng.lognormal(0, 0.2, 25),
                                      0.5 * rng.lognormal(0, 0.2, 40)),
    })
    ### END HIDDEN TESTS


test_unit_bootstrap()


# %% nbgrader={"grade": true, "grade_id": "test_unit_verdict", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_verdict():
    """Same distribution: no difference. Clearly separated: faster or slower."""
    assert verdict((0.8, 0.9)) == "faster" and verdict((1.1, 1.3)) == "slower", (
        f"verdict((0.8, 0.9)) = {verdict((0.8, 0.9))!r}, verdict((1.1, 1.3)) = "
        f"{verdict((1.1, 1.3))!r}: an interval wholly below 1 is 'faster', above 1 'slower'")
    assert verdict((0.91, 1.02)) == NO_DIFFERENCE, (
        f"verdict((0.91, 1.02)) = {verdict((0.91, 1.02))!r}: the interval contains 1, so the "
        f"answer is {NO_DIFFERENCE!r}, not a call on which side the ratio fell")
    rng = np.random.default_rng(2)
    for seed in range(5):
        same = [0.01 * rng.lognormal(0, 0.2, 15) for _ in range(2)]
        c = Comparison.from_samples(*same, seed=seed)
        assert c.verdict == NO_DIFFERENCE, (
            f"two samples of the SAME distribution gave ratio {c.ratio:.3f}, interval "
            f"({c.ci[0]:.3f}, {c.ci[1]:.3f}) and verdict {c.verdict!r}: expected "
            f"{NO_DIFFERENCE!r}")
    fast = Comparison.from_samples(0.01 * rng.lognormal(0, 0.2, 15),
                                   0.006 * rng.lognormal(0, 0.2, 15))
    assert fast.verdict == "faster" and abs(fast.speedup - 1 / fast.ratio) < 1e-12, (
        f"a candidate at 60% of the time gave {fast.verdict!r} (ratio {fast.ratio:.3f}, "
        f"speedup {fast.speedup:.3f}): the ratio is candidate / baseline, the speedup its "
        "inverse")
    slow = Comparison.from_samples(fast.candidate.samples, fast.baseline.samples)
    assert slow.verdict == "slower", f"swapped sides should be 'slower', got {slow.verdict!r}"

    def check_verdict(interval, want):
        assert verdict(interval) == want, (
            f"verdict({interval}) = {verdict(interval)!r}, expected {want!r}: wholly below 1 is "
            f"'faster', wholly above 1 'slower', otherwise {NO_DIFFERENCE!r}")

    check_verdict((0.5, 0.7), "faster")
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_verdict, {
        "just below one": ((0.5, 0.999), "faster"),
        "just above one": ((1.001, 3.0), "slower"),
        "a wide interval around one": ((0.1, 10.0), NO_DIFFERENCE),
        "a narrow interval around one": ((0.9999, 1.0001), NO_DIFFERENCE),
    })
    ### END HIDDEN TESTS


test_unit_verdict()


# %% [markdown]
# ## Part 4: paired, interleaved runs
#
# To compare A (the baseline) with B (the candidate), the obvious recipe is to time A ten
# times, then B ten times. On a machine whose speed changes during the measurement (another
# job starts, the CPU heats up and slows its clock, the laptop unplugs) that recipe measures
# the machine: every B runs later than every A, and whatever changed in between is blamed on
# B.
#
# **Interleave** instead, in pairs whose order alternates:
#
# ```
# round:  0     1     2     3     ...
# order:  A B   B A   A B   B A   ...      interleaved_order(4) -> [0, 1, 1, 0, 0, 1, 1, 0]
# ```
#
# Each round times A and B back to back, so a slowdown that lasts longer than a round slows
# both sides of that round alike; alternating which goes first cancels what the first of
# a pair pays (a cache the other one just filled, a CPU that just woke up). A linear drift
# then moves the two medians by the same amount. Each round is a **pair**: its two samples
# met the same machine, and the paired bootstrap of Part 3 keeps them together.
#
# The course's GPT benchmark goes one step further: each side runs in its own process
# (A, B, B, A processes), because OpenBLAS's and PyTorch's thread pools keep spinning after
# a call and steal the cores from whatever runs next in the same process. The harness takes
# such samples too: `Comparison.from_samples(a, b)`.
#
# `compare(baseline_fn, candidate_fn, *args, rounds=None)` warms both up (`warmup` calls
# each), times `rounds` pairs (default: `repeats`) in `interleaved_order(rounds)`, and hands
# the two lists of samples to `Comparison.from_samples(..., paired=True)` (Part 3).

# %% nbgrader={"grade": false, "grade_id": "interleave", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def interleaved_order(rounds):
    """[0, 1, 1, 0, 0, 1, ...]: baseline (0) and candidate (1), the first of each pair
    alternating, `rounds` pairs.

    >>> interleaved_order(3)  # A B, B A, A B: neither side always runs first
    [0, 1, 1, 0, 0, 1]
    """
    rounds = _check_count("rounds", rounds, 1)
    ### BEGIN SOLUTION
    order = []
    for r in range(rounds):
        order += [0, 1] if r % 2 == 0 else [1, 0]
    return order
    ### END SOLUTION


# %% [markdown]
# ### Test: the order, and a drifting machine

# %% nbgrader={"grade": true, "grade_id": "test_unit_interleaved", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_interleaved():
    """A machine slowing down by 2% a call: interleaving sees equal code as equal."""
    order = interleaved_order(4)
    assert order == [0, 1, 1, 0, 0, 1, 1, 0], (
        f"interleaved_order(4) gave {order}, expected [0, 1, 1, 0, 0, 1, 1, 0]: A B in even "
        "rounds, B A in odd rounds")
    assert interleaved_order(1) == [0, 1], f"one round is [0, 1], got {interleaved_order(1)}"
    clock = FakeClock()
    calls = {"n": 0}

    def slowing(cost):  # the machine gets 2% slower with every call, whoever makes it
        def fn():
            clock.now += cost * (1 + 0.02 * calls["n"])
            calls["n"] += 1
        return fn

    c = Benchmark(warmup=1, repeats=10, clock=clock).compare(slowing(0.01), slowing(0.01))
    assert calls["n"] == 22, (
        f"compare made {calls['n']} calls, expected 22: 1 warm-up call of each side, then "
        "10 rounds of one call each")
    assert c.baseline.n == 10 and c.candidate.n == 10, (
        f"{c.baseline.n} and {c.candidate.n} samples, expected 10 each: one per round")
    assert abs(c.ratio - 1) < 0.01 and c.verdict.startswith("no difference"), (
        f"the same code on a drifting machine gave ratio {c.ratio:.3f} ({c.verdict}), "
        "expected ~1.00 and 'no difference': did you time all of A, then all of B? Follow "
        "interleaved_order, so each round's pair meets the same machine")
    clock.now, calls["n"] = 0.0, 0
    c = Benchmark(warmup=0, repeats=8, clock=clock).compare(slowing(0.01), slowing(0.008))
    assert abs(c.ratio - 0.8) < 0.02 and c.verdict == "faster", (
        f"a candidate 20% cheaper gave ratio {c.ratio:.3f} ({c.verdict}); expected ~0.80, "
        "'faster': samples[0] are the baseline's, samples[1] the candidate's")

    def check_rounds(n):
        want = [i for r in range(n) for i in ((0, 1) if r % 2 == 0 else (1, 0))]
        assert interleaved_order(n) == want, (
            f"interleaved_order({n}) gave {interleaved_order(n)}, expected {want}: A B in even "
            "rounds, B A in odd rounds")

    def check_drifting(cost_a, cost_b, repeats, warmup):
        """Two workloads on a machine that slows by 2% a call: the ratio is cost_b / cost_a."""
        fake, count = FakeClock(), {"n": 0}

        def drifting(cost):
            def fn():
                fake.now += cost * (1 + 0.02 * count["n"])
                count["n"] += 1
            return fn

        c = Benchmark(warmup=warmup, repeats=repeats, clock=fake).compare(
            drifting(cost_a), drifting(cost_b))
        assert count["n"] == 2 * (warmup + repeats), (
            f"compare made {count['n']} calls, expected {2 * (warmup + repeats)}")
        assert abs(c.ratio - cost_b / cost_a) < 0.02 * cost_b / cost_a, (
            f"ratio {c.ratio:.3f}, expected {cost_b / cost_a:.3f}: follow interleaved_order so "
            "each round's pair meets the same machine")

    check_rounds(2)
    check_drifting(0.01, 0.01, 10, 1)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_rounds, {"three rounds": 3, "six rounds": 6})
    hidden_cases(check_drifting, {
        "a candidate half as costly": (0.02, 0.01, 12, 2),
        "a candidate a little costlier": (0.005, 0.0055, 16, 0),
    })
    ### END HIDDEN TESTS


test_unit_interleaved()


# %% [markdown]
# ## Systems analysis: an A/A test, a real difference, and the price of a sequential run
#
# Three measurements of your GPT's forward pass (2 layers, 64 wide, a batch of 2, no
# gradients), about sixty calls in all:
#
# 1. **A/A**: the same model against itself. Any verdict other than "no difference" would be
#    a false alarm; the interval's width is the noise floor of this machine right now.
# 2. **A/B**: context 32 against context 64 (about twice the work): a real difference, which
#    the verdict must call.
# 3. The A/A test measured **sequentially** (all of A, then all of B) against interleaved: on
#    a quiet machine both say "no difference"; when the machine changes in the middle, only
#    the interleaved one keeps saying it (the drifting fake clock of Part 4's test shows it
#    exactly; here it depends on what else your machine is doing).

# %% nbgrader={"grade": false, "grade_id": "analysis", "locked": false, "schema_version": 3, "solution": false, "task": false}
def analysis(repeats=8):
    manual_seed(0)
    config = GPTConfig(vocab_size=65, block_size=64, n_layer=2, n_head=4, n_embd=64)
    model = GPT(config)
    idx = {T: np.random.default_rng(0).integers(0, 65, (2, T)) for T in (32, 64)}

    def forward(T):
        def fn():
            with no_grad():
                model(idx[T])
        return fn

    bench = Benchmark(warmup=2, repeats=repeats)
    same = bench.compare(forward(64), forward(64), names=("A", "A again"))
    longer = bench.compare(forward(32), forward(64), names=("T=32", "T=64"))
    a, b = bench.run(forward(64)), bench.run(forward(64))
    sequential = Comparison.from_samples(a.samples, b.samples)
    for label, c in (("A/A interleaved", same), ("T=32 vs T=64", longer),
                     ("A/A sequential", sequential)):
        width = c.ci[1] - c.ci[0]
        print(f"{label:16s} ratio {c.ratio:.3f} [{c.ci[0]:.3f}, {c.ci[1]:.3f}] "
              f"(width {width:.3f}): {c.verdict}")
    env = environment()
    print(f"on {env['cpu']}, {env['usable_cores']} usable cores, numpy {env['numpy']}, BLAS "
          f"{env['blas'].get('name', '?')} {env['blas'].get('version', '')}, load "
          f"{env['load_average'][0] if env['load_average'] else '?'}")


analysis()

# %% [markdown]
# What to read in these lines:
#
# - The A/A interval is this machine's noise floor for this workload: a claimed gain smaller
#   than its half-width is not a gain you measured. The quieter the machine, the narrower it
#   is; on the course's two shared cores at load average 3, one run (12 rounds, batch 4)
#   gave [0.36, 2.50], so nothing short of a factor of two could have been called there.
#   More rounds narrow it roughly as $1/\sqrt{n}$. At load average 7, with OpenBLAS's two
#   threads each waiting for a time slice at every product, single calls took from 1x to
#   100x their idle time and the A/A ratio itself came out at 10 ([0.01, 44]): the verdict
#   still said "no difference", which is the one thing such a run can honestly say.
# - Context 64 against 32 doubles the tokens; attention's part of the work grows faster
#   (its score table is $T \times T$), the fixed cost of each op (Python, NumPy dispatch) not
#   at all, so the ratio lands near 2 (2.26, interval [1.20, 5.70], in that same loaded run:
#   "slower", even there).
# - The sequential A/A comparison has an interval too, resampled without pairs. Its width
#   can look as good as the interleaved one's (in a run at load average 8 it was narrower,
#   [0.51, 0.99], and called the same code "faster"), but it rests on an assumption nothing
#   checked:
#   that the machine was the same machine for the second half as for the first. When the
#   noise is shared by the two calls of a round (another job for a few seconds), pairing
#   removes it from the ratio; when it is not (very short hiccups), pairing costs nothing.
#
# The course's benchmark suite uses this harness on your models against PyTorch (needs the
# `dev` extra):
#
# ```
# .venv/bin/python benchmarks/suite.py            # MLP on digits, TinyGPT forward, step, decode
# .venv/bin/python benchmarks/suite.py --quick    # tiny sizes, 3 repeats: a smoke test
# ```
#
# It prints the environment, then one row per benchmark: each framework's median and IQR,
# the ratio TinyTorch / PyTorch with its 95% interval, and the verdict.
#
# ## What comes next
#
# - **Module 20 (capstone)**: make your TinyGPT fast and small, and prove each gain with this
#   harness: latency and throughput as `Comparison`s of the baseline and the optimized model,
#   with the environment in the submission.
# - Back to **module 17** with the harness: which of its fused kernels is a real gain on
#   your machine, and which is inside the noise?
