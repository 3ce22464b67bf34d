"""Module 19 (Benchmarking): its figures, each with its caption and alt text."""

from __future__ import annotations

from .drawing import ACCENT, BLUE, INK, MUTED, Figure, panels


def draw_benchmark_pairs(fig):
    """Two functions timed in paired rounds on a machine that drifts and hiccups (a fake
    clock: the figures are computed, not measured), their medians, and the ratio's interval
    from your bootstrap, paired and unpaired."""
    import numpy as np

    from tinytorch.perf.benchmarking import Benchmark, Comparison

    rng = np.random.default_rng(3)
    rounds = 16
    machine = 1 + 0.015 * np.arange(2 * rounds) + rng.lognormal(0, 0.12, 2 * rounds) - 1
    machine = np.repeat(machine[::2], 2)  # each round's slowness is shared by its pair
    state = {"t": 0.0, "i": 0}

    def work(cost):
        def fn():
            state["t"] += cost * machine[state["i"] % machine.size] * rng.lognormal(0, 0.01)
            state["i"] += 1

        return fn

    c = Benchmark(warmup=0, repeats=rounds, clock=lambda: state["t"]).compare(
        work(0.010), work(0.009), names=("A", "B")
    )
    unpaired = Comparison.from_samples(c.baseline.samples, c.candidate.samples)
    ax, ax2 = panels(fig, [[0.08, 0.16, 0.58, 0.72], [0.76, 0.16, 0.22, 0.72]])
    x = np.arange(rounds)
    for m, dx, colour, label in (
        (c.baseline, -0.12, BLUE, "A (baseline)"),
        (c.candidate, 0.12, ACCENT, "B (candidate)"),
    ):
        ms = np.asarray(m.samples) * 1e3
        ax.plot(x + dx, ms, "o", color=colour, ms=4.5, label=f"{label}: {m}")
        ax.axhline(m.median * 1e3, color=colour, linestyle="--", linewidth=1)
    for r in x:
        ax.plot(
            [r - 0.12, r + 0.12],
            [c.baseline.samples[r] * 1e3, c.candidate.samples[r] * 1e3],
            color=MUTED,
            linewidth=0.7,
        )
    ax.set_xlabel("round (A B, B A, A B, ...)")
    ax.set_ylabel("ms per call")
    ax.set_title("paired rounds on a machine that slows down and hiccups")
    ax.legend(frameon=False, fontsize=8, loc="upper left")
    for i, cmp in enumerate((c, unpaired)):  # paired, then unpaired
        ax2.errorbar(
            [i],
            [cmp.ratio],
            yerr=[[cmp.ratio - cmp.ci[0]], [cmp.ci[1] - cmp.ratio]],
            fmt="o",
            color=INK,
            capsize=6,
        )
        ax2.text(
            i,
            cmp.ci[1] + 0.01,
            cmp.verdict.replace(" (", "\n("),
            ha="center",
            va="bottom",
            fontsize=7.5,
            color=MUTED,
        )
    ax2.axhline(1.0, color=MUTED, linewidth=1)
    ax2.set_xticks([0, 1], ["paired", "unpaired"])
    ax2.set_xlim(-0.6, 1.6)
    ax2.set_ylim(min(unpaired.ci[0], c.ci[0]) - 0.05, max(1.0, unpaired.ci[1]) + 0.12)
    ax2.set_ylabel("B / A time, 95% interval")


FIGURES = [
    Figure(
        "benchmarking",
        "paired-rounds",
        "Sixteen paired rounds of two functions on a drifting machine (a fake clock, so "
        "the figure is the same every time), and the interval your `bootstrap_ratio_ci` "
        "puts on their ratio, paired and unpaired.",
        "Left, two rows of dots between about 8 and 17 ms that wander up across 16 "
        "rounds, each pair joined by a short line, the candidate's dot always below its "
        "baseline's; dashed lines at each median. Right, two error bars of the ratio "
        "near 0.9: the paired one narrow and wholly below 1 (faster), the unpaired one "
        "wide and crossing 1 (no difference).",
        draw_benchmark_pairs,
        size=(9.6, 3.6),
        narrow=(4.2, 7.4),
    ),
]
