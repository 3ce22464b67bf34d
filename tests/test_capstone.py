"""Module 20 (capstone): the submission validator, a submission round trip, the olympics run."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import run_tito
from tinytorch.capstone import (
    MAX_LOSS_INCREASE,
    QuantizedWeight,
    SubmissionError,
    make_submission,
    quantize_weights,
    run_olympics,
    val_loss,
    validate_submission,
    weight_nbytes,
    write_submission,
)
from tinytorch.core.tensor import manual_seed
from tinytorch.models.llm import Config, ModelForCausalLM, WeightStore
from tinytorch.perf.benchmarking import Benchmark
from tito.course.registry import COURSE_ROOT, get_milestone, written_modules


class Ci:
    ci = (0.45, 0.55)  # of optimized / baseline


def figures(median, nbytes, loss, new_tokens=20):
    return {"latency": {"median": median, "q1": median * 0.95, "q3": median * 1.05,
                        "iqr": median * 0.1, "n": 10, "unit": "s"},
            "tokens_per_s": new_tokens / median, "weight_bytes": nbytes, "val_loss": loss}


@pytest.fixture
def submission():
    return make_submission(
        {"baseline": figures(0.30, 3_216_384, 1.9095), "optimized": figures(0.15, 875_520, 1.9101)},
        Ci(), [{"name": "quantization", "settings": {"bits": 8}},
               {"name": "kv_cache", "settings": {"mode": "dense"}}],
        {"checkpoint": "runs/tinygpt", "parameters": 804_096},
        {"prompt_tokens": 6, "new_tokens": 20, "val_windows": 1742, "val_tokens": 111_488},
        {"python": "3.11", "numpy": "2.x"})


def problems(s):
    with pytest.raises(SubmissionError) as caught:
        validate_submission(s)
    return str(caught.value)


def test_a_consistent_submission_passes(submission):
    assert validate_submission(submission) is submission
    assert submission["derived"]["speedup"] == pytest.approx(2.0)
    assert submission["derived"]["speedup_ci"] == pytest.approx([1 / 0.55, 1 / 0.45])
    assert submission["rule"] == {"max_loss_increase": MAX_LOSS_INCREASE, "qualified": True}


@pytest.mark.parametrize("where, field", [
    (("optimized",), "val_loss"), (("baseline", "latency"), "median"), ((), "environment"),
    (("derived",), "speedup"), (("rule",), "qualified"), ((), "techniques")])
def test_a_missing_field_is_named(submission, where, field):
    parent = submission
    for key in where:
        parent = parent[key]
    del parent[field]
    name = ".".join(where + (field,))
    assert f"submission.json: {name}: missing (a required field)" in problems(submission)


@pytest.mark.parametrize("where, value, says", [
    (("optimized", "val_loss"), "abc", "optimized.val_loss: 'abc' is not of type 'number'"),
    (("baseline", "weight_bytes"), 1.5, "baseline.weight_bytes: 1.5 is not of type 'integer'"),
    (("baseline", "latency", "n"), 0, "baseline.latency.n: 0 is less than the minimum of 1"),
    (("rule", "qualified"), "yes", "rule.qualified: 'yes' is not of type 'boolean'"),
    (("rule", "max_loss_increase"), 0.5, "rule.max_loss_increase: 0.05 was expected"),
    (("techniques", 0, "name"), "overclocking", "techniques.0.name: 'overclocking' is not one of"),
    (("schema_version",), 2, "schema_version: 1 was expected"),
])
def test_a_wrong_type_or_value_is_named(submission, where, value, says):
    parent = submission
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = value
    assert says in problems(submission)


def test_an_unknown_field_is_refused(submission):
    submission["optimized"]["accuracy"] = 0.99
    assert "optimized: Additional properties are not allowed ('accuracy'" in problems(submission)


def test_a_speedup_that_contradicts_the_latencies(submission):
    submission["derived"]["speedup"] = 3.0
    assert ("derived.speedup is 3.0 but baseline.latency.median / optimized.latency.median = 2"
            in problems(submission))


def test_a_size_ratio_that_contradicts_the_bytes(submission):
    submission["derived"]["size_ratio"] = 10.0
    assert ("derived.size_ratio is 10.0 but baseline.weight_bytes / optimized.weight_bytes = "
            "3.67" in problems(submission))


def test_qualified_that_contradicts_the_loss_change(submission):
    submission["optimized"]["val_loss"] = 2.0
    submission["derived"]["loss_change"] = 2.0 - 1.9095
    said = problems(submission)
    assert "rule.qualified is True but the loss change +0.0905 is above the allowed +0.05" in said
    submission["rule"]["qualified"] = False
    validate_submission(submission)  # disqualified, and saying so, is a valid submission


def test_other_contradictions_are_named(submission):
    s = copy.deepcopy(submission)
    s["derived"]["loss_change"] = 0.0
    assert "derived.loss_change is 0.0 but optimized.val_loss - baseline.val_loss" in problems(s)
    s = copy.deepcopy(submission)
    s["optimized"]["tokens_per_s"] = 1000.0
    assert ("optimized.tokens_per_s is 1000.0 but workload.new_tokens / "
            "optimized.latency.median = 133.333" in problems(s))
    s = copy.deepcopy(submission)
    s["baseline"]["latency"]["q1"] = 0.5
    assert "baseline.latency: q1 0.5 <= median 0.3 <= q3" in problems(s)
    s = copy.deepcopy(submission)
    s["optimized"]["val_loss"] = float("nan")
    assert "optimized.val_loss: nan is not a finite number" in problems(s)
    s = copy.deepcopy(submission)
    s["techniques"].append({"name": "kv_cache", "settings": {"mode": "paged"}})
    assert "techniques: ['kv_cache'] listed more than once" in problems(s)


def test_files_round_trip_and_bad_files_are_named(submission, tmp_path):
    path = write_submission(tmp_path / "a" / "submission.json", submission)
    assert json.loads(path.read_text()) == submission
    assert validate_submission(path) == submission
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema_version": 1,\n "environment": }')
    with pytest.raises(SubmissionError, match=r"broken.json: not valid JSON \(line 2"):
        validate_submission(broken)
    with pytest.raises(SubmissionError, match="no such file"):
        validate_submission(tmp_path / "missing.json")
    submission["derived"]["speedup"] = 1.0
    with pytest.raises(SubmissionError, match="derived.speedup"):
        write_submission(tmp_path / "refused.json", submission)
    assert not (tmp_path / "refused.json").exists()


def test_a_missing_jsonschema_names_the_install_command(submission, monkeypatch):
    monkeypatch.setitem(sys.modules, "jsonschema", None)  # `import jsonschema` fails
    with pytest.raises(ImportError, match="pip install jsonschema"):
        validate_submission(submission)


# ---- the pipeline on a random GPT-2-layout model -----------------------------------------
def random_model(seed=0, vocab=23, C=32, layers=2, positions=40):
    config = Config.from_dict(dict(model_type="gpt2", vocab_size=vocab, n_embd=C,
                                   n_layer=layers, n_head=4, n_positions=positions), "test")
    rng = np.random.default_rng(seed)
    t = {"transformer.wte.weight": (vocab, C), "transformer.wpe.weight": (positions, C),
         "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)}
    for i in range(layers):
        p = f"transformer.h.{i}"
        for n in ("ln_1", "ln_2"):
            t[f"{p}.{n}.weight"] = t[f"{p}.{n}.bias"] = (C,)
        for n, shape in (("attn.c_attn", (C, 3 * C)), ("attn.c_proj", (C, C)),
                         ("mlp.c_fc", (C, 4 * C)), ("mlp.c_proj", (4 * C, C))):
            t[f"{p}.{n}.weight"], t[f"{p}.{n}.bias"] = shape, shape[1:]
    tensors = {name: (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
               for name, shape in t.items()}
    return ModelForCausalLM(config, WeightStore(tensors, "random"))


def test_quantized_engine_matches_float_and_holds_fewer_bytes():
    x = np.random.default_rng(1).integers(0, 23, (3, 40))
    ref = random_model()
    full = weight_nbytes(ref)
    for bits, max_share, max_rel in ((8, 0.40, 0.02), (4, 0.30, 0.2)):
        m = random_model()
        quantize_weights(m, bits=bits, group_size=32)
        assert isinstance(m.layers[1].mlp.proj.weight, QuantizedWeight)
        rel = np.abs(m(x) - ref(x)).max() / np.abs(ref(x)).max()
        assert rel < max_rel, (bits, rel)
        assert weight_nbytes(m) < max_share * full, (bits, weight_nbytes(m), full)
    # the exact loss is the mean over every token, whatever the batch size
    y = np.roll(x, -1, axis=1)
    assert val_loss(ref, x, y, batch_size=1) == pytest.approx(val_loss(ref, x, y), abs=1e-6)


def test_run_olympics_writes_a_valid_submission(tmp_path):
    rng = np.random.default_rng(2)
    ids = rng.integers(0, 23, 5 * 20 + 1)
    x, y = ids[:-1].reshape(5, 20), ids[1:].reshape(5, 20)
    out = tmp_path / "submission.json"
    s, comparison = run_olympics(random_model, x, y, [1, 2, 3], 10, out, checkpoint="random",
                                 bits=4, group_size=32, prune=0.25, warmup=0, repeats=3)
    on_disk = validate_submission(out)
    assert on_disk == json.loads(json.dumps(s))
    assert [t["name"] for t in s["techniques"]] == ["pruning", "quantization", "kv_cache",
                                                    "fast_kernels"]
    assert s["techniques"][0]["settings"]["hidden"] == [128, 96]
    assert s["derived"]["speedup"] == pytest.approx(comparison.baseline.median
                                                    / comparison.candidate.median)
    assert s["workload"]["val_tokens"] == 100 and s["baseline"]["latency"]["n"] == 3


def test_zero_repeats_is_an_error():
    with pytest.raises(ValueError):
        Benchmark(warmup=0, repeats=0)


# ---- the milestone ------------------------------------------------------------------------
def test_olympics_quick_run_prints_the_scoreboard_and_writes_the_submission(tmp_path):
    """`tito milestone run olympics --quick` (the script itself until 17 and 19 are written)."""
    out = tmp_path / "sub" / "submission.json"
    args = ["--quick", "--out", str(out)]
    written = {m.number for m in written_modules()}
    if set(get_milestone("olympics").requires) <= written:
        done = run_tito("milestone", "run", "olympics", *args, cwd=tmp_path, timeout=300)
    else:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(COURSE_ROOT), str(COURSE_ROOT / "milestones")]))
        done = subprocess.run([sys.executable, str(COURSE_ROOT / "milestones" / "olympics.py"),
                               *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    assert "Olympics scoreboard" in text and "weight bytes" in text, text
    assert re.search(r"QUALIFIED: [\d.]+x faster \[[\d.]+, [\d.]+\], [\d.]+x smaller", text), text
    s = validate_submission(out)
    assert s["model"]["checkpoint"] == "untrained TinyGPT (--quick)"
    assert s["workload"]["val_windows"] == 32 and s["workload"]["new_tokens"] == 24
    assert s["derived"]["size_ratio"] > 3  # int8 blocks, float32 embeddings: 3.6x
    assert s["rule"]["qualified"] is True


def _briefly_trained_checkpoint(folder):
    """A 1-layer TinyGPT trained for 150 steps (about a second): pruning now costs loss."""
    from tinytorch.core.optimizers import AdamW
    from tinytorch.models.transformer import GPT, GPTConfig
    from tinytorch.text.tokenization import CharTokenizer
    from tito.course.checkpoints import save_pretrained
    from tito.course.datasets import encode_splits, load_text

    text = load_text()
    tokenizer = CharTokenizer.train(text)
    train, _ = encode_splits(text, tokenizer)
    manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=32, n_layer=1,
                          n_head=2, n_embd=32))
    opt = AdamW(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)
    for _ in range(150):
        ix = rng.integers(0, len(train) - 33, 16)
        window = train[ix[:, None] + np.arange(33)]
        _, loss = model(window[:, :-1], window[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 3.0  # learned something, or the pruning below costs nothing
    save_pretrained(folder, model, {"chars": tokenizer.chars, "step": 150})
    return folder


def test_a_disqualified_run_exits_3_and_still_writes_its_submission(tmp_path):
    folder = _briefly_trained_checkpoint(tmp_path / "ckpt")
    out = tmp_path / "submission.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(COURSE_ROOT), str(COURSE_ROOT / "milestones")]))
    done = subprocess.run(
        [sys.executable, str(COURSE_ROOT / "milestones" / "olympics.py"), "--checkpoint",
         str(folder), "--prune", "0.9", "--windows", "16", "--new-tokens", "4", "--repeats", "3",
         "--threads", "1", "--out", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    text = done.stdout + done.stderr
    assert done.returncode == 3, text
    assert "DISQUALIFIED" in text and "do not count" in text, text
    s = validate_submission(out)
    assert s["rule"]["qualified"] is False and s["derived"]["loss_change"] > MAX_LOSS_INCREASE


def test_olympics_without_a_checkpoint_names_the_command(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(COURSE_ROOT), str(COURSE_ROOT / "milestones")]))
    done = subprocess.run([sys.executable, str(COURSE_ROOT / "milestones" / "olympics.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "tito milestone run tinygpt" in done.stdout, done.stdout + done.stderr
