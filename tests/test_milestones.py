"""Milestones, run as users run them: `tito milestone run NAME` in the repository."""

from __future__ import annotations

import json
import re

import pytest

from conftest import run_tito
from tito.core.registry import MILESTONES, MILESTONES_DIR, written_modules

pytestmark = pytest.mark.slow
WRITTEN = {m.number for m in written_modules()}


def ready(name):
    ms = next(m for m in MILESTONES if m.name == name)
    return (MILESTONES_DIR / ms.script).is_file() and set(ms.requires) <= WRITTEN


def needs(name):
    return pytest.mark.skipif(not ready(name), reason=f"modules for {name} not written yet")


@needs("perceptron")
def test_perceptron_separates_the_data(repo):
    done = run_tito("milestone", "run", "perceptron", cwd=repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "accuracy: 100.0%" in done.stdout


@needs("xor")
def test_xor_one_layer_fails_two_layers_succeed(repo):
    done = run_tito("milestone", "run", "xor", cwd=repo)
    assert done.returncode == 0, done.stdout + done.stderr
    one = re.search(r"one layer : accuracy (\d+)%", done.stdout)
    two = re.findall(r"two layers: accuracy (\d+)%", done.stdout)
    assert one and int(one.group(1)) <= 75
    assert two and int(two[-1]) == 100


@needs("mlp_digits")
def test_mlp_digits_reaches_95_percent_and_plots(repo, tmp_path):
    png = tmp_path / "curve.png"
    done = run_tito("milestone", "run", "mlp_digits", "--plot", str(png), cwd=repo)
    assert done.returncode == 0, done.stdout + done.stderr
    accuracy = float(re.search(r"test accuracy ([\d.]+)%", done.stdout).group(1))
    assert accuracy >= 95.0
    assert "training curve" in done.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs("cnn_digits")
def test_cnn_digits_quick_run_learns_and_draws_filters_and_confusion(repo, tmp_path):
    """--quick: 2 epochs (the 98% target is the full run's, quoted in the README)."""
    png = tmp_path / "cnn.png"
    done = run_tito("milestone", "run", "cnn_digits", "--quick", "--plot", str(png), cwd=repo)
    assert done.returncode == 0, done.stdout + done.stderr
    accuracy = float(re.search(r"test accuracy ([\d.]+)%", done.stdout).group(1))
    assert accuracy >= 60.0  # 2 epochs: far above chance (10%), far from trained
    assert "CNN: 13,706 parameters" in done.stdout and "17,226 parameters" in done.stdout
    assert "confusion matrix" in done.stdout and "training curve" in done.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_milestone_list_and_bad_names(repo):
    rows = json.loads(run_tito("milestone", "list", "--json", cwd=repo).stdout)
    assert [r["name"] for r in rows] == [m.name for m in MILESTONES]
    done = run_tito("milestone", "run", "nope", cwd=repo)
    assert done.returncode == 2 and "perceptron" in done.stderr
