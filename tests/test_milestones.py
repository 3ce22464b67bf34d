"""Milestones, run as users run them: `tito milestone run NAME` in the repository; and what
every milestone shares (milestones/_common.py), in process."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from conftest import run_tito
from tito.course.registry import MILESTONES, MILESTONES_DIR, written_modules

WRITTEN = {m.number for m in written_modules()}


def ready(name):
    ms = next(m for m in MILESTONES if m.name == name)
    return (MILESTONES_DIR / ms.script).is_file() and set(ms.requires) <= WRITTEN


def needs(name):
    """The milestone runs (seconds each, the slow tier) once its modules are written."""
    skip = pytest.mark.skipif(not ready(name), reason=f"modules for {name} not written yet")
    return lambda test: pytest.mark.milestone(skip(test))


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


@pytest.mark.journey
def test_milestone_list_and_bad_names(repo):
    rows = json.loads(run_tito("milestone", "list", "--json", cwd=repo).stdout)
    assert [r["name"] for r in rows] == [m.name for m in MILESTONES]
    done = run_tito("milestone", "run", "nope", cwd=repo)
    assert done.returncode == 2 and "perceptron" in done.stderr


def _tiny_checkpoint(folder, config, seed=0):
    """A random checkpoint folder written with module 08's safetensors writer (no torch)."""
    import numpy as np

    from tinytorch.core.training import save_safetensors

    rng = np.random.default_rng(seed)
    C, V, L = 32, config["vocab_size"], 2
    if config["model_type"] == "gpt2":
        positions = config.get("n_positions", 64)
        shapes = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (positions, C),
                  "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)}
        for i in range(L):
            p = f"transformer.h.{i}."
            shapes.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
                           p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
                           p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
                           p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
                           p + "mlp.c_fc.weight": (C, 4 * C), p + "mlp.c_fc.bias": (4 * C,),
                           p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,)})
    else:
        shapes = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
        for i in range(L):
            p = f"model.layers.{i}."
            shapes.update({p + "input_layernorm.weight": (C,),
                           p + "post_attention_layernorm.weight": (C,),
                           p + "self_attn.q_proj.weight": (C, C), p + "self_attn.q_proj.bias": (C,),
                           p + "self_attn.k_proj.weight": (16, C),
                           p + "self_attn.k_proj.bias": (16,),
                           p + "self_attn.v_proj.weight": (16, C),
                           p + "self_attn.v_proj.bias": (16,),
                           p + "self_attn.o_proj.weight": (C, C),
                           p + "mlp.gate_proj.weight": (48, C), p + "mlp.up_proj.weight": (48, C),
                           p + "mlp.down_proj.weight": (C, 48)})
    tensors = {n: (0.3 * rng.standard_normal(s)).astype(np.float32) for n, s in shapes.items()}
    folder.mkdir(parents=True)
    save_safetensors(folder / "model.safetensors", tensors)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@needs("llm")
def test_llm_serves_a_checkpoint_folder(repo, tmp_path):
    chars = sorted(set("abcdefghijklmnopqrstuvwxyz ROMEO:\n"))
    gpt = _tiny_checkpoint(tmp_path / "gpt", {
        "model_type": "gpt2", "vocab_size": len(chars), "n_embd": 32, "n_layer": 2, "n_head": 4,
        "n_positions": 64, "tinytorch": {"chars": chars}})
    done = run_tito("milestone", "run", "llm", "--model", str(gpt), "--prompt", "ROMEO:",
                    "--quick", cwd=repo, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ROMEO:" in done.stdout and f"its {len(chars)}-character vocabulary" in done.stdout
    assert re.search(r"then 7 tokens at [\d.]+ tokens/s", done.stdout), done.stdout

    qwen = _tiny_checkpoint(tmp_path / "qwen", {
        "model_type": "qwen2", "vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
        "rms_norm_eps": 1e-6, "rope_theta": 1e6, "tie_word_embeddings": True})
    done = run_tito("milestone", "run", "llm", "--model", str(qwen), "--prompt-ids", "1,2,3",
                    "--temperature", "0", "--compare", "--quick", cwd=repo, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = re.findall(r"(dense|paged|none) *: +[\d.]+ tokens/s .*(same|different) tokens\)",
                      done.stdout)
    assert [r[0] for r in rows] == ["dense", "paged", "none"], done.stdout
    assert all(r[1] == "same" for r in rows), "greedy tokens must not depend on the cache"

    # GPT-2's positions are a table of n_positions rows: the default 100 new tokens do not fit
    # a context of 16, so the milestone generates what fits and says so.
    short = _tiny_checkpoint(tmp_path / "short", {
        "model_type": "gpt2", "vocab_size": len(chars), "n_embd": 32, "n_layer": 2, "n_head": 4,
        "n_positions": 16, "tinytorch": {"chars": chars}})
    done = run_tito("milestone", "run", "llm", "--model", str(short), "--prompt", "ROMEO:",
                    cwd=repo, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "so 11 new tokens after the prompt, not 100" in " ".join(done.stdout.split())
    assert re.search(r"then 10 tokens at [\d.]+ tokens/s", done.stdout), done.stdout

    done = run_tito("milestone", "run", "llm", "--model", str(tmp_path / "nothing"), cwd=repo)
    assert done.returncode == 2 and "tito milestone run tinygpt" in done.stdout


@needs("llm")
def test_llm_encodes_text_with_the_folders_tokenizer_json(repo, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["once upon a time there was a tiny model"] * 20, trainer)
    folder = _tiny_checkpoint(tmp_path / "qwen", {
        "model_type": "qwen2", "vocab_size": 320, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
        "rms_norm_eps": 1e-6, "rope_theta": 1e6, "tie_word_embeddings": True})
    tok.save(str(folder / "tokenizer.json"))
    done = run_tito("milestone", "run", "llm", "--model", str(folder), "--prompt",
                    "once upon a time", "--cache", "paged", "--quick", cwd=repo, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "its tokenizer.json (module 10)" in done.stdout
    assert "once upon a time" in done.stdout and "cache=paged" in done.stdout


@needs("llm")
@needs("tinygpt")
def test_llm_serves_your_own_tinygpt_by_default(tmp_path, tinygpt_quick_run):
    done = run_tito("milestone", "run", "llm", "--quick", cwd=tmp_path)
    assert done.returncode == 2 and "tito milestone run tinygpt" in done.stdout  # says how
    # what `tito milestone run tinygpt --quick` leaves in runs/tinygpt (the session's run)
    folder, trained = tinygpt_quick_run
    assert trained.returncode == 0, trained.stdout + trained.stderr
    shutil.copytree(folder / "run", tmp_path / "runs" / "tinygpt")
    done = run_tito("milestone", "run", "llm", "--quick", "--prompt", "ROMEO:", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "runs/tinygpt: gpt2" in done.stdout and "65-character vocabulary" in done.stdout
    assert re.search(r"then 7 tokens at [\d.]+ tokens/s", done.stdout)


@needs("llm")
def test_llm_serves_several_requests_at_once(repo, tmp_path):
    """--requests N: N prompts served together by the Engine, with the total throughput."""
    qwen = _tiny_checkpoint(tmp_path / "qwen", {
        "model_type": "qwen2", "vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
        "rms_norm_eps": 1e-6, "rope_theta": 1e6, "tie_word_embeddings": True})
    done = run_tito("milestone", "run", "llm", "--model", str(qwen), "--prompt-ids", "1,2,3",
                    "--requests", "3", "--max-new-tokens", "5", cwd=repo, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    text = " ".join(done.stdout.split())
    assert len(re.findall(r"request \d \(5 tokens\)", text)) == 3, done.stdout
    assert re.search(r"served 3 requests at once \(3 in the batch at most, \d+ engine steps\): "
                     r"15 new tokens in [\d.]+ s, [\d.]+ tokens/s in total", text), done.stdout
    assert "every page back in the pool: True" in text
    done = run_tito("milestone", "run", "llm", "--model", str(qwen), "--prompt-ids", "1,2,3",
                    "--weights", "int8", "--max-new-tokens", "3", cwd=repo, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "weights int8" in " ".join(done.stdout.split()), done.stdout  # rich wraps lines


# ---- milestones/_common.py: one verdict, one way to stop on what cannot run -------------------
@pytest.fixture
def common(monkeypatch):
    monkeypatch.syspath_prepend(str(MILESTONES_DIR))
    import _common

    return _common


def test_verdict_prints_one_line_and_gives_the_exit_status(common, capsys):
    """report_verdict: the reached line and status 0, or the missed line and status 1."""
    assert common.report_verdict(True, "made it", "missed it") == 0
    assert common.report_verdict(False, "made it", "missed it") == 1
    assert capsys.readouterr().out.splitlines() == ["made it", "missed it"]
    assert common.report_target(0.95, 0.95) == 0, "a score equal to the target reaches it"
    assert common.report_target(0.9499, 0.95) == 1
    out = capsys.readouterr().out
    assert out.splitlines() == ["Reached the 95% target.", "Below the 95% target."], (
        "the site quotes the line that starts with 'Reached' (milestones.yaml): keep it")


def test_needs_stops_with_status_2_and_the_import_error(common, capsys):
    """A module not completed: status 2, naming what the milestone needs and the import's error."""
    with pytest.raises(SystemExit) as stop:
        with common.needs("module 09 (convolutions)"):
            raise ImportError("cannot import name 'Conv2d' from 'tinytorch.nn'")
    assert stop.value.code == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "This milestone needs module 09 (convolutions): cannot import name 'Conv2d'" in out
    with pytest.raises(SystemExit) as stop:
        with common.needs():
            raise AttributeError("module 'tinytorch' has no attribute 'no_grad'")
    assert stop.value.code == 2 and "modules you have not completed" in capsys.readouterr().out


def test_needs_names_the_wrong_folder_and_keeps_a_missing_dependency(common, capsys):
    """No tinytorch at all is the wrong folder (said, status 2); a missing NumPy keeps its
    traceback, since it is no module of the course to complete."""
    with pytest.raises(SystemExit) as stop:
        with common.needs():
            raise ModuleNotFoundError("No module named 'tinytorch'", name="tinytorch")
    assert stop.value.code == 2
    assert "Run milestones inside your workspace" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(ModuleNotFoundError, match="numpy"):
        with common.needs():
            raise ModuleNotFoundError("No module named 'numpy'", name="numpy")
    with pytest.raises(SystemExit):
        with common.needs():
            raise ModuleNotFoundError("No module named 'tinytorch.models'", name="tinytorch.models")


def test_cannot_load_names_the_folder_and_lets_other_errors_through(common, capsys, tmp_path):
    """A checkpoint that does not load: status 2 with the folder and the reason; a bug in the
    script itself (a TypeError) is not dressed up as a bad checkpoint."""
    with pytest.raises(SystemExit) as stop:
        with common.cannot_load(tmp_path):
            raise KeyError("model.embed_tokens.weight")
    assert stop.value.code == 2
    out = " ".join(capsys.readouterr().out.split())
    assert f"Cannot load {tmp_path}:" in out and "model.embed_tokens.weight" in out
    with pytest.raises(TypeError):
        with common.cannot_load(tmp_path):
            raise TypeError("a bug in the script")


def test_every_milestone_takes_its_verdict_and_load_errors_from_common():
    """No milestone script words its own verdict or catches its own import or load errors:
    one implementation in _common.py, so a fix reaches every milestone."""
    scripts = sorted(p for p in MILESTONES_DIR.glob("*.py") if p.name != "_common.py")
    assert {p.stem for p in scripts} == {m.script[:-3] for m in MILESTONES}
    own = {"except (ImportError": "with needs(...)", "This milestone needs": "needs(what)",
           "Cannot load": "with cannot_load(folder)", "target.[/]": "report_target",
           "[green]": "report_verdict"}
    found = [f"{p.name}: {text!r} (use {use})" for p in scripts
             for text, use in own.items() if text in p.read_text(encoding="utf-8")]
    assert not found, "milestone scripts doing _common.py's job:\n  " + "\n  ".join(found)
