"""What `conv_step.py` and `gpt_step.py` share: each framework trains in its own child process
(its own BLAS and thread pools, its own peak memory), started and read the same way.

A child is the benchmark script itself with `--child NAME`; it prints one line
`CHILD {json}` with its results, and `run_child` returns that dictionary. This module
imports no NumPy: the thread settings must be made before NumPy loads.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMBA_NUM_THREADS")
CHILD_TIMEOUT_S = 1800


def set_threads(threads):
    """BLAS, OpenMP and numba threads of this process (and its children); before NumPy."""
    if threads:
        for name in THREAD_VARIABLES:
            os.environ[name] = str(threads)


def cpu_description():
    """The CPU's model name and its widest vector instructions (from /proc/cpuinfo), e.g.
    "AMD EPYC, avx2": figures move with both, so every benchmark prints them."""
    name, flags = None, set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and name is None:
                    name = value.strip()
                elif key.strip() in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    widest = next((v for v in ("avx512f", "avx2", "avx", "sve", "asimd") if v in flags), None)
    vnni = " with VNNI" if {"avx512_vnni", "avx_vnni"} & flags else ""
    return ", ".join(filter(None, (name or platform.machine() or "unknown CPU",
                                   widest and widest + vnni)))


def child_env(**extra):
    """This process's environment with the repository on PYTHONPATH (and `extra` set)."""
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return dict(os.environ, PYTHONPATH=path, **extra)


def run_child(script, framework, args, env=None):
    """Run `script --child framework *args` and return the dictionary of its CHILD line.

    A child that fails, or prints no CHILD line, raises RuntimeError with its output."""
    cmd = [sys.executable, str(script), "--child", framework, *map(str, args)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env or child_env(),
                          timeout=CHILD_TIMEOUT_S)
    lines = [line for line in done.stdout.splitlines() if line.startswith("CHILD ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the {framework} subprocess failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(lines[-1][len("CHILD "):])


def report(result):
    """The child's side of run_child: print its results as the CHILD line."""
    print("CHILD " + json.dumps(result))


def summary(times):
    """Median step time and median forward / backward / optimizer times, in ms (module 19),
    from the (forward, backward, optimizer) seconds of each step."""
    from tinytorch.perf.benchmarking import Measurement

    return (Measurement(tuple(sum(t) for t in times)).median * 1e3,
            [Measurement(tuple(t[i] for t in times)).median * 1e3 for i in range(3)])


def step_arguments(description, steps, rounds, warmup, quick, malloc_help):
    """The options conv_step.py and gpt_step.py share: how many timed steps in how many
    alternating processes, the threads, glibc's malloc setting and the clock. ``quick`` is
    (steps, warmup) for --quick's one round; the script adds its own options."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=steps, help="timed steps per process")
    p.add_argument("--rounds", type=int, default=rounds,
                   help=f"processes per framework, alternating (default {rounds})")
    p.add_argument("--warmup", type=int, default=warmup, help="untimed steps first")
    p.add_argument("--quick", action="store_true",
                   help=f"1 round of {quick[0]} timed steps, {quick[1]} warm-up")
    p.set_defaults(quick_sizes=quick)
    p.add_argument("--threads", type=int, default=None,
                   help="BLAS / intra-op threads for both frameworks (default: the library "
                        "defaults, all cores)")
    p.add_argument("--malloc", choices=("keep", "default"), default="keep", help=malloc_help)
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall: elapsed time (the real measure); cpu: this process's CPU time, "
                        "steadier on a busy machine, meaningful with --threads 1 only")
    return p


def parse_step_arguments(parser, argv):
    """Parsed options; --quick sets one round of its few steps."""
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.warmup = args.quick_sizes
        args.rounds = 1
    return args


def check_float32(loss, model):
    """After an untimed step: the loss, every parameter and every gradient still float32
    (a float64 drift would make the timed steps measure the wrong thing)."""
    import numpy as np  # here, not at the top: the thread settings come before NumPy

    assert loss.dtype == np.float32, f"TinyTorch's loss is {loss.dtype}"
    for name, p in model.named_parameters():
        assert p.dtype == np.float32 and p.grad.dtype == np.float32, (
            f"{name}: parameter {p.dtype}, gradient {p.grad.dtype}")
