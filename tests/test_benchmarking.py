"""Module 19's harness (tinytorch.perf.benchmarking): statistics, order, verdicts, errors.

Nothing here times real work: fake clocks and synthetic samples whose truth is known, so the
assertions are exact and the tests do not depend on how loaded the machine is.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tinytorch.perf.benchmarking import (
    NO_DIFFERENCE,
    Benchmark,
    Comparison,
    Measurement,
    bootstrap_ratio_ci,
    environment,
    interleaved_order,
    plot,
    quartiles,
    table,
    verdict,
)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_zero_repeats_and_negative_warmup_are_errors_naming_the_value():
    with pytest.raises(ValueError, match=r"repeats must be at least 1, got 0"):
        Benchmark(repeats=0)
    with pytest.raises(ValueError, match=r"warmup must be at least 0, got -1"):
        Benchmark(warmup=-1)
    with pytest.raises(ValueError, match=r"rounds must be at least 1, got 0"):
        Benchmark().compare(lambda: None, lambda: None, rounds=0)
    with pytest.raises(TypeError, match="repeats must be an integer"):
        Benchmark(repeats=2.5)
    with pytest.raises(TypeError, match="clock must be a function"):
        Benchmark(clock=3)


def test_bad_samples_are_errors_naming_the_problem():
    with pytest.raises(ValueError, match="no samples"):
        Measurement(())
    with pytest.raises(ValueError, match="finite, non-negative"):
        Comparison.from_samples([0.01, -0.02], [0.01, 0.01])
    with pytest.raises(ValueError, match="2 baseline and 3 candidate"):
        Comparison.from_samples([0.01, 0.02], [0.01, 0.01, 0.03], paired=True)
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ratio_ci([0.01], [0.01], confidence=95)


@pytest.mark.parametrize("n", [1, 2, 5, 10, 33])
def test_measurement_statistics_match_numpy(n):
    x = np.random.default_rng(n).lognormal(-5, 0.4, n)
    m = Measurement(tuple(x))
    q1, med, q3 = np.percentile(x, [25, 50, 75])
    assert quartiles(x) == pytest.approx((q1, med, q3), rel=1e-12)
    assert (m.q1, m.median, m.q3) == pytest.approx((q1, med, q3), rel=1e-12)
    assert m.iqr == pytest.approx(q3 - q1, rel=1e-9, abs=1e-15)
    assert m.min == x.min() and m.n == n and m.samples == tuple(float(v) for v in x)


def test_measurement_string_names_median_iqr_and_n():
    assert str(Measurement((0.0121, 0.0123, 0.0125, 0.0128))) == "12.4 ms ± 0.3 (IQR, n=4)"
    assert str(Measurement((2.5e-6,) * 3)) == "2.50 µs ± 0.00 (IQR, n=3)"
    assert str(Measurement((1.5,))) == "1.50 s ± 0.00 (IQR, n=1)"


def test_run_warms_up_then_times_each_repeat_on_the_given_clock():
    clock = FakeClock()
    costs = iter([1.0, 1.0, 0.1, 0.2, 0.3])

    def fn(a, b):
        assert (a, b) == (1, 2)
        clock.now += next(costs)

    m = Benchmark(warmup=2, repeats=3, clock=clock).run(fn, 1, 2)
    assert m.samples == pytest.approx((0.1, 0.2, 0.3))


def test_compare_runs_the_pairs_in_alternating_order():
    clock = FakeClock()
    log = []

    def side(name, cost):
        def fn():
            log.append(name)
            clock.now += cost
        return fn

    c = Benchmark(warmup=1, repeats=4, clock=clock).compare(side("A", 0.01), side("B", 0.02))
    assert log == ["A", "B"] + ["A", "B", "B", "A", "A", "B", "B", "A"]
    assert interleaved_order(3) == [0, 1, 1, 0, 0, 1]
    assert c.baseline.samples == pytest.approx((0.01,) * 4)
    assert c.candidate.samples == pytest.approx((0.02,) * 4)
    assert c.ratio == pytest.approx(2.0) and c.speedup == pytest.approx(0.5)
    assert c.paired and c.verdict == "slower"


def test_interleaving_cancels_a_drift_that_fools_a_sequential_comparison():
    """The machine slows by 1% a call. Interleaved: equal code is 'no difference'.
    Sequential (all A then all B) calls the same code slower."""
    clock = FakeClock()
    calls = [0]

    def fn():
        clock.now += 0.01 * (1 + 0.01 * calls[0])
        calls[0] += 1

    bench = Benchmark(warmup=0, repeats=20, clock=clock)
    interleaved = bench.compare(fn, fn)
    assert interleaved.ratio == pytest.approx(1.0, abs=0.005)
    assert interleaved.verdict == NO_DIFFERENCE
    a, b = bench.run(fn), bench.run(fn)
    sequential = Comparison.from_samples(a.samples, b.samples)
    assert sequential.ratio > 1.1 and sequential.verdict == "slower"  # the drift, blamed on B


def test_verdict_is_no_difference_on_samples_of_one_distribution():
    rng = np.random.default_rng(0)
    calls = [Comparison.from_samples(0.02 * rng.lognormal(0, 0.15, 12),
                                     0.02 * rng.lognormal(0, 0.15, 12), seed=s).verdict
             for s in range(40)]
    # a 95% interval misses the truth (ratio 1) in about 5% of experiments: 0-5 of 40
    assert calls.count(NO_DIFFERENCE) >= 35, calls


def test_verdict_calls_clearly_separated_samples():
    rng = np.random.default_rng(1)
    base = 0.02 * rng.lognormal(0, 0.1, 10)
    fast = 0.015 * rng.lognormal(0, 0.1, 10)
    assert Comparison.from_samples(base, fast).verdict == "faster"
    assert Comparison.from_samples(fast, base).verdict == "slower"
    assert verdict((0.5, 0.999)) == "faster" and verdict((1.001, 2)) == "slower"
    assert verdict((0.99, 1.01)) == verdict((1.0, 1.0)) == NO_DIFFERENCE


def test_bootstrap_interval_contains_the_true_ratio():
    rng = np.random.default_rng(2)
    base = 0.010 * rng.lognormal(0, 0.05, 50)
    cand = 0.008 * rng.lognormal(0, 0.05, 50)
    low, high = bootstrap_ratio_ci(base, cand)
    assert low < 0.8 < high and high - low < 0.05
    assert bootstrap_ratio_ci(base, cand) == (low, high)  # seeded: reproducible


def test_bootstrap_interval_covers_the_truth_about_95_percent_of_the_time():
    """Coverage over 60 synthetic experiments, true ratio 1.3 (median of a lognormal is
    its scale): a correct 95% interval misses it about 3 times, rarely more than 8."""
    rng = np.random.default_rng(3)
    missed = 0
    for s in range(60):
        base = 0.01 * rng.lognormal(0, 0.2, 25)
        cand = 0.013 * rng.lognormal(0, 0.2, 25)
        low, high = bootstrap_ratio_ci(base, cand, resamples=1000, seed=s)
        missed += not (low < 1.3 < high)
    assert missed <= 8, f"the 95% interval missed the true ratio in {missed} of 60"


def test_paired_resampling_removes_noise_shared_by_each_round():
    rng = np.random.default_rng(4)
    shared = rng.lognormal(0, 0.3, 30)
    a = 0.01 * shared * rng.lognormal(0, 0.01, 30)
    b = 0.011 * shared * rng.lognormal(0, 0.01, 30)
    paired = bootstrap_ratio_ci(a, b, paired=True)
    unpaired = bootstrap_ratio_ci(a, b, paired=False)
    assert paired[0] < 1.1 < paired[1]
    assert paired[1] - paired[0] < (unpaired[1] - unpaired[0]) / 3
    assert Comparison.from_samples(a, b, paired=True).verdict == "slower"
    assert Comparison.from_samples(a, b, paired=False).verdict == NO_DIFFERENCE


def test_from_samples_gives_the_statistics_of_compare():
    clock = FakeClock()
    costs = iter([0.010, 0.020, 0.021, 0.011, 0.012, 0.019])

    def fn():
        clock.now += next(costs)

    c = Benchmark(warmup=0, repeats=3, clock=clock).compare(fn, fn)
    again = Comparison.from_samples(c.baseline.samples, c.candidate.samples, paired=True)
    assert c.baseline.samples == pytest.approx((0.010, 0.011, 0.012))
    assert (again.ratio, again.ci, again.verdict) == (c.ratio, c.ci, c.verdict)
    record = json.loads(json.dumps(c.to_dict()))
    assert record["ratio"] == pytest.approx(c.ratio) and record["verdict"] == c.verdict


def test_environment_is_json_and_names_the_machine():
    env = environment()
    assert json.loads(json.dumps(env)) == env
    for key in ("cpu", "cores", "usable_cores", "platform", "python", "numpy", "blas",
                "thread_env", "tinytorch"):
        assert key in env, key
    assert env["numpy"] == np.__version__ and env["cores"] >= 1


def test_table_and_plot(tmp_path):
    from rich.console import Console

    rng = np.random.default_rng(5)
    rows = {"forward": Comparison.from_samples(0.01 * rng.lognormal(0, 0.1, 8),
                                               0.02 * rng.lognormal(0, 0.1, 8),
                                               names=("pytorch", "tinytorch"))}
    console = Console(record=True, width=160)
    console.print(table(rows, title="suite"))
    text = console.export_text()
    assert "forward" in text and "slower" in text and "tinytorch / pytorch" in text
    path = plot(rows, tmp_path / "samples.png")
    assert path.stat().st_size > 5000
