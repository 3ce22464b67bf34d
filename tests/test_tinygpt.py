"""The tinygpt milestone end to end, as users run it: `tito milestone run tinygpt ...`."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import run_tito
from tito.course.checkpoints import (
    CheckpointFolderError,
    char_tokenizer_json,
    load_optimizer,
    load_pretrained,
    save_pretrained,
)
from tito.course.datasets import char_ids, encode_splits, get_batch, load_text, tiled_windows
from tito.course.registry import MILESTONES, MILESTONES_DIR, written_modules

MILESTONE = next(m for m in MILESTONES if m.name == "tinygpt")
READY = (MILESTONES_DIR / MILESTONE.script).is_file() and set(MILESTONE.requires) <= {
    m.number for m in written_modules()
}
pytestmark = pytest.mark.skipif(not READY, reason="modules for tinygpt not written yet")
slow = pytest.mark.slow  # the tests that run the milestone itself


@pytest.fixture(scope="module")
def quick_run(tinygpt_quick_run):
    """One `--quick` training run (shared with test_milestones' llm test: conftest)."""
    return tinygpt_quick_run


def sample(folder, *args):
    return run_tito("milestone", "run", "tinygpt", "--sample-only", "--checkpoint",
                    str(folder / "run"), "--samples", "1", "--tokens", "20",
                    *args, cwd=folder, timeout=120)


@slow
def test_quick_run_trains_evaluates_saves_and_samples(quick_run):
    folder, done = quick_run
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "vocabulary 65" in out
    losses = [float(v) for v in re.findall(r"val loss (\d+\.\d+)", out)]
    assert len(losses) >= 2 and losses[-1] < 4.2, out  # log(65) = 4.17 at the start
    assert "ms/step" in out and "tokens/s" in out
    assert (folder / "run" / "config.json").is_file()
    assert (folder / "run" / "model.safetensors").is_file()
    assert (folder / "run" / "tokenizer.json").is_file()
    assert "saved the model, its config and its vocabulary" in out
    assert "sample 1" in out and "sample 2" in out


@slow
def test_quick_run_uses_module_17_and_saves_the_optimizer_state(quick_run, milestone):
    """Module 17's kernels are named; optimizer.npz holds one AdamW's state over the model's
    two parameter groups and loads into module 07's AdamW and module 17's optimizers."""
    from tinytorch.core.optimizers import AdamW
    from tinytorch.perf.acceleration import CompiledAdamW, FusedAdamW

    folder, done = quick_run
    said = " ".join(done.stdout.split())  # the console wraps long lines
    assert "module 17 (acceleration): kernels add_backward_bias_blas, layer_norm_compiled" in said
    assert "CompiledAdamW" in said
    assert re.search(r"on numba's (tbb|workqueue|omp) pool \(\d+ threads?\)", said), said
    model, _ = load_pretrained(folder / "run")
    decay = [p for p in model.parameters() if p.ndim >= 2]
    other = [p for p in model.parameters() if p.ndim < 2]
    with np.load(folder / "run" / "optimizer.npz", allow_pickle=False) as saved:
        assert int(saved["steps"]) == 10 and float(saved["group.0.weight_decay"]) == 0.1
        assert float(saved["group.1.weight_decay"]) == 0.0
    for cls in (AdamW, FusedAdamW, CompiledAdamW):
        opt = cls([{"params": decay}, {"params": other, "weight_decay": 0.0}], lr=1.0)
        load_optimizer(folder / "run", opt)
        assert opt.steps == 10 and opt.state[0]["step"] == 10
        assert opt.state[0]["exp_avg"].shape == decay[0].shape
        assert opt.param_groups[0]["weight_decay"] == 0.1
    wrong = AdamW([{"params": decay[:1]}], lr=1.0)
    with pytest.raises(CheckpointFolderError, match="optimizer.npz"):
        load_optimizer(folder / "run", wrong)


@slow
def test_plain_run_says_it_is_plain(tmp_path):
    done = run_tito("milestone", "run", "tinygpt", "--quick", "--plain", "--out",
                    str(tmp_path / "run"), "--tokens", "10", cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "plain framework (--plain)" in done.stdout
    assert "gelu_backward_inplace" not in done.stdout


@slow
def test_sample_only_from_the_checkpoint(quick_run):
    folder, _ = quick_run
    done = sample(folder, "--prompt", "ROMEO:")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "loaded" in done.stdout and "step 10" in done.stdout
    assert "sample 1" in done.stdout and "ROMEO:" in done.stdout
    assert "train" not in done.stdout.lower().split("loaded")[1].split("sample")[0]


@slow
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
    assert not (folder / "other" / "config.json").exists()


@slow
def test_prompt_longer_than_the_context_is_cropped(quick_run):
    folder, _ = quick_run
    prompt = "To be, or not to be, that is the question: whether 'tis nobler in the mind"
    assert len(prompt) > 64
    done = sample(folder, "--prompt", prompt)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sees only the last 64" in done.stdout.replace("\n", " ")
    assert prompt[:20] in done.stdout.replace("\n", "")


@slow
def test_checkpoint_config_mismatch_lists_every_difference(quick_run):
    folder, _ = quick_run
    done = sample(folder, "--n-layer", "2", "--n-embd", "64", "--n-head", "4")
    assert done.returncode == 2
    text = done.stdout.replace("\n", " ")
    assert "different model configuration" in text
    assert "n_layer: checkpoint 4, requested 2" in text
    assert "n_embd: checkpoint 128, requested 64" in text
    assert "n_head" not in text.split("different model configuration")[1]


@slow
def test_missing_checkpoint_is_a_clear_error(tmp_path):
    done = run_tito("milestone", "run", "tinygpt", "--sample-only", "--checkpoint",
                    str(tmp_path / "nope"), cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and "no checkpoint in" in done.stdout
    assert "tito milestone run tinygpt" in done.stdout  # says how to make one
    done = run_tito("milestone", "run", "tinygpt", "--sample-only", "--checkpoint",
                    str(tmp_path / "nope.npz"), cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and "no checkpoint file" in done.stdout


@slow
def test_quick_run_checkpoint_loads_in_transformers(quick_run, milestone):
    """The milestone's own folder: transformers gives the logits TinyTorch gives."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    folder, _ = quick_run
    config = json.loads((folder / "run" / "config.json").read_text())
    assert config["model_type"] == "gpt2" and config["n_positions"] == 64
    assert config["tinytorch"]["step"] == 10 and len(config["tinytorch"]["chars"]) == 65
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder / "run", dtype=torch.float32)
    hf.eval()
    ours, _ = load_pretrained(folder / "run")
    idx = np.random.default_rng(0).integers(0, 65, (2, 64))
    with torch.no_grad():
        theirs = hf(torch.tensor(idx)).logits.numpy()
    assert np.abs(ours(idx)[0].data - theirs).max() < 1e-4


# ---- the final evaluation and the verdict -------------------------------------------------
@pytest.fixture(scope="module")
def milestone():
    """The milestone script as a module, to test its own functions (verdict, checkpoint
    folder). Its data helpers are importable on their own: tito.course.datasets."""
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


def test_whole_split_windows_predict_every_character_once():
    data = np.arange(1000) % 65
    x, y = tiled_windows(data, 64)
    assert x.shape == y.shape == (15, 64)  # (1000 - 1) // 64 windows fit
    assert np.array_equal(x.ravel(), data[:960]) and np.array_equal(y.ravel(), data[1:961])
    # Fewer windows: spread from the start to the very end, each still a true (x, y) pair.
    x, y = tiled_windows(data, 64, count=4)
    assert x.shape == (4, 64) and x[0, 0] == data[0] and y[-1, -1] == data[-1]
    assert np.array_equal(x[:, 1:], y[:, :-1])


def test_shakespeare_splits_and_batches():
    """The data helpers the milestone and the benchmarks share (tito.course.datasets)."""
    from tinytorch.text.tokenization import CharTokenizer

    text = load_text()
    tokenizer = CharTokenizer.train(text)
    ids, chars = char_ids(text)
    assert chars == tokenizer.chars and len(chars) == 65 and ids.dtype == np.int64
    train, val = encode_splits(text, tokenizer)
    assert len(train) == int(0.9 * len(text)) and len(train) + len(val) == len(text)
    np.testing.assert_array_equal(np.concatenate([train, val]), ids)
    x, y = get_batch(train, 12, 64, np.random.default_rng(0))
    assert x.shape == y.shape == (12, 64) and np.array_equal(x[:, 1:], y[:, :-1])


def test_milestone_sizes_are_gpt_configs_defaults(milestone):
    """benchmarks/tinygpt_loss.py builds PyTorch's model from GPTConfig's defaults."""
    from tinytorch.models.transformer import GPTConfig

    defaults = GPTConfig().to_dict()
    assert {k: defaults[k] for k in milestone.DEFAULTS} == milestone.DEFAULTS


def test_verdict_is_measured_against_pytorch(milestone):
    mean, sd, bar = milestone.pytorch_reference()
    runs = milestone.PYTORCH_RUNS
    assert len(runs) >= 5 and min(runs) <= mean <= max(runs) and sd > 0
    assert max(runs) <= bar < 2.0  # every PyTorch run passes; a loss of 2 never does
    ok, message = milestone.verdict(mean)
    assert ok and f"{mean:.3f}" in message
    ok, message = milestone.verdict(bar + 0.01)
    assert not ok and "PyTorch" in message and "tito module test" in message


# ---- the checkpoint in Hugging Face's GPT-2 layout ----------------------------------------
def random_gpt(seed=0, **sizes):
    """A small GPT with every weight random, norms and biases included (Hugging Face starts
    biases at 0 and norms at 1, which would hide a missing or misplaced one)."""
    import tinytorch
    from tinytorch.models.transformer import GPT, GPTConfig

    tinytorch.manual_seed(seed)
    model = GPT(GPTConfig(**dict(dict(vocab_size=11, block_size=8, n_layer=2, n_head=2,
                                      n_embd=16), **sizes)))
    rng = np.random.default_rng(seed)
    for _, p in model.named_parameters():
        p.data[...] = rng.standard_normal(p.shape).astype(np.float32) * 0.3
    return model


@pytest.mark.parametrize("sizes", [{}, {"bias": True, "tie_weights": False},
                                   {"n_layer": 1, "n_head": 4, "block_size": 5}])
def test_checkpoint_gives_transformers_the_same_logits(milestone, tmp_path, sizes):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = random_gpt(**sizes)
    chars = list("abcdefghijk")
    save_pretrained(tmp_path, model, {"chars": chars, "step": 5, "val_loss": 2.0})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors",
                                                         "tokenizer.json"]
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    hf.eval()
    assert type(hf).__name__ == "GPT2LMHeadModel"
    config = model.config
    idx = np.random.default_rng(1).integers(0, config.vocab_size, (3, config.block_size))
    ours = model(idx)[0].data
    with torch.no_grad():
        theirs = hf(torch.tensor(idx)).logits.numpy()
    assert ours.shape == theirs.shape
    assert np.abs(ours - theirs).max() < 1e-5 * max(1.0, np.abs(ours).max())

    back, info = load_pretrained(tmp_path)
    assert back.config == config and info["chars"] == chars and info["step"] == 5
    assert np.array_equal(back(idx)[0].data, ours)


def test_checkpoint_without_biases_has_zero_biases(milestone, tmp_path):
    from tinytorch.core.training import load_safetensors, save_safetensors

    model = random_gpt()  # bias=False, tied: nanoGPT's and the milestone's
    save_pretrained(tmp_path, model, {"chars": list("abcdefghijk")})
    tensors = load_safetensors(tmp_path / "model.safetensors")
    assert "lm_head.weight" not in tensors  # tied to wte, as GPT-2 is
    biases = [name for name in tensors if name.endswith(".bias")]
    assert len(biases) == 2 * 6 + 1 and not any(np.any(tensors[b]) for b in biases)
    assert tensors["transformer.h.0.attn.c_attn.weight"].shape == (16, 48)  # Conv1D: (in, out)
    tensors = {k: np.array(v) for k, v in tensors.items()}
    tensors["transformer.h.1.mlp.c_fc.bias"][0] = 1.0
    save_safetensors(tmp_path / "model.safetensors", tensors)
    with pytest.raises(CheckpointFolderError, match="c_fc.bias.*not zero"):
        load_pretrained(tmp_path)
    del tensors["transformer.h.1.mlp.c_fc.bias"]
    save_safetensors(tmp_path / "model.safetensors", tensors)
    with pytest.raises(CheckpointFolderError, match="lacks 1 tensor"):
        load_pretrained(tmp_path)


def test_checkpoint_errors_are_failures(milestone, tmp_path):
    with pytest.raises(CheckpointFolderError, match="no config.json"):
        load_pretrained(tmp_path)
    model = random_gpt()
    save_pretrained(tmp_path, model, {"chars": list("abcdefghijk")})
    with pytest.raises(CheckpointFolderError, match="n_layer: checkpoint 2, requested 3"):
        load_pretrained(tmp_path, {"n_layer": 3})
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 4)
    with pytest.raises(CheckpointFolderError, match="model.safetensors.*truncated"):
        load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(CheckpointFolderError, match="not written by this milestone"):
        load_pretrained(tmp_path)


def test_old_npz_checkpoint_still_samples(milestone, tmp_path):
    from tinytorch.models.transformer import save_gpt

    model = random_gpt()
    save_gpt(tmp_path / "tinygpt.npz", model, step=4, extra={"chars": list("abcdefghijk")})
    args = SimpleNamespace(n_layer=None, n_head=None, n_embd=None, block_size=None)
    back, step, extra = milestone.load_npz(tmp_path / "tinygpt.npz", args)
    idx = np.array([[1, 2, 3]])
    assert step == 4 and np.array_equal(back(idx)[0].data, model(idx)[0].data)


def test_char_vocabulary_as_tokenizer_json(milestone, tmp_path):
    """tokenizer.json encodes one id per character, as the CharTokenizer, in module 10's loader
    and in the tokenizers package; a vocabulary beyond ASCII gets no tokenizer.json."""
    from tinytorch.text.tokenization import CharTokenizer, load_hf_tokenizer

    text = "First Citizen:\nBefore we proceed any further, hear me speak!  $&';-?\n"
    chars = CharTokenizer.train(text + "xyzQZ3").chars
    model = random_gpt(vocab_size=len(chars))
    save_pretrained(tmp_path, model, {"chars": chars})
    want = CharTokenizer(chars).encode(text)
    ours = load_hf_tokenizer(tmp_path)
    assert ours.encode(text) == want and ours.decode(want) == text
    tokenizers = pytest.importorskip("tokenizers")
    theirs = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert theirs.encode(text).ids == want and theirs.decode(want) == text
    assert char_tokenizer_json(["a", "é"]) is None
