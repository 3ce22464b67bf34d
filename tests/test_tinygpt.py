"""The tinygpt milestone end to end, as users run it: `tito milestone run tinygpt ...`."""

from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import run_tito
from tito.core.registry import MILESTONES, MILESTONES_DIR, written_modules

MILESTONE = next(m for m in MILESTONES if m.name == "tinygpt")
READY = (MILESTONES_DIR / MILESTONE.script).is_file() and set(MILESTONE.requires) <= {
    m.number for m in written_modules()
}
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not READY, reason="modules for tinygpt not written yet")]


@pytest.fixture(scope="module")
def quick_run(repo, tmp_path_factory):
    """One `--quick` training run; its folder (with the checkpoint) and its output."""
    folder = tmp_path_factory.mktemp("tinygpt")
    done = run_tito("milestone", "run", "tinygpt", "--quick", "--out", str(folder / "run"),
                    cwd=folder, timeout=300)
    return folder, done


def sample(folder, *args):
    return run_tito("milestone", "run", "tinygpt", "--sample-only", "--checkpoint",
                    str(folder / "run" / "tinygpt.npz"), "--samples", "1", "--tokens", "20",
                    *args, cwd=folder, timeout=120)


def test_quick_run_trains_evaluates_saves_and_samples(quick_run):
    folder, done = quick_run
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "vocabulary 65" in out
    losses = [float(v) for v in re.findall(r"val loss (\d+\.\d+)", out)]
    assert len(losses) >= 2 and losses[-1] < 4.2, out  # log(65) = 4.17 at the start
    assert "ms/step" in out and "tokens/s" in out
    assert (folder / "run" / "tinygpt.npz").is_file()
    assert "saved the model, its config and its vocabulary" in out
    assert "sample 1" in out and "sample 2" in out


def test_sample_only_from_the_checkpoint(quick_run):
    folder, _ = quick_run
    done = sample(folder, "--prompt", "ROMEO:")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "loaded" in done.stdout and "step 10" in done.stdout
    assert "sample 1" in done.stdout and "ROMEO:" in done.stdout
    assert "train" not in done.stdout.lower().split("loaded")[1].split("sample")[0]


def test_prompt_outside_the_vocabulary_is_named(quick_run):
    folder, _ = quick_run
    done = sample(folder, "--prompt", "Hello 42 ∑")
    assert done.returncode == 2
    assert "not in the model's vocabulary" in done.stdout
    assert all(repr(c) in done.stdout for c in "42∑")
    # Checked before any training starts, too.
    done = run_tito("milestone", "run", "tinygpt", "--quick", "--prompt", "7 ships", "--out",
                    str(folder / "other"), cwd=folder, timeout=120)
    assert done.returncode == 2 and "'7'" in done.stdout and "step 1" not in done.stdout
    assert not (folder / "other" / "tinygpt.npz").exists()


def test_prompt_longer_than_the_context_is_cropped(quick_run):
    folder, _ = quick_run
    prompt = "To be, or not to be, that is the question: whether 'tis nobler in the mind"
    assert len(prompt) > 64
    done = sample(folder, "--prompt", prompt)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sees only the last 64" in done.stdout.replace("\n", " ")
    assert prompt[:20] in done.stdout.replace("\n", "")


def test_checkpoint_config_mismatch_lists_every_difference(quick_run):
    folder, _ = quick_run
    done = sample(folder, "--n-layer", "2", "--n-embd", "64", "--n-head", "4")
    assert done.returncode == 2
    text = done.stdout.replace("\n", " ")
    assert "different model configuration" in text
    assert "n_layer: checkpoint 4, requested 2" in text
    assert "n_embd: checkpoint 128, requested 64" in text
    assert "n_head" not in text.split("different model configuration")[1]


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    done = run_tito("milestone", "run", "tinygpt", "--sample-only", "--checkpoint",
                    str(tmp_path / "nope.npz"), cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and "no checkpoint file" in done.stdout


# ---- the final evaluation and the verdict (the milestone's own functions) ------------------
@pytest.fixture(scope="module")
def milestone():
    import importlib.util
    import sys

    sys.path.insert(0, str(MILESTONES_DIR))  # the script imports _common beside it
    try:
        spec = importlib.util.spec_from_file_location("tinygpt_milestone",
                                                      MILESTONES_DIR / MILESTONE.script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(MILESTONES_DIR))
    return module


def test_whole_split_windows_predict_every_character_once(milestone):
    data = np.arange(1000) % 65
    x, y = milestone.tiled_windows(data, 64)
    assert x.shape == y.shape == (15, 64)  # (1000 - 1) // 64 windows fit
    assert np.array_equal(x.ravel(), data[:960]) and np.array_equal(y.ravel(), data[1:961])
    # Fewer windows: spread from the start to the very end, each still a true (x, y) pair.
    x, y = milestone.tiled_windows(data, 64, count=4)
    assert x.shape == (4, 64) and x[0, 0] == data[0] and y[-1, -1] == data[-1]
    assert np.array_equal(x[:, 1:], y[:, :-1])


def test_verdict_is_measured_against_pytorch(milestone):
    mean, sd, bar = milestone.pytorch_reference()
    runs = milestone.PYTORCH_RUNS
    assert len(runs) >= 5 and min(runs) <= mean <= max(runs) and sd > 0
    assert max(runs) <= bar < 2.0  # every PyTorch run passes; a loss of 2 never does
    ok, message = milestone.verdict(mean)
    assert ok and f"{mean:.3f}" in message
    ok, message = milestone.verdict(bar + 0.01)
    assert not ok and "PyTorch" in message and "tito module test" in message
