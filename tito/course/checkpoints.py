"""The TinyGPT checkpoint: a Hugging Face GPT-2 folder written from the student's own GPT.

`tito milestone run tinygpt` saves its model here and the benchmarks, the `olympics` milestone
and the tests read it back; `transformers.AutoModelForCausalLM.from_pretrained(folder)` loads
the same folder (config.json, model.safetensors, tokenizer.json), and module 18's engine serves
it. The optimizer's state sits beside it in optimizer.npz, so a run can resume exactly.

The student's `tinytorch` is imported inside the functions that need it (module 08's safetensors
reader and writer, module 13's GPT, module 10's byte table), so importing this module needs no
framework. Every problem is a `CheckpointFolderError` that names the file and the fix.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import TitoError
from ..files import atomic_write


class CheckpointFolderError(TitoError):
    """A checkpoint folder that cannot be written or read back; the message says why."""


GPT2_CONFIG = "config.json"
GPT2_WEIGHTS = "model.safetensors"


def gpt2_names(config):
    """(our name, Hugging Face GPT-2 name, transposed?, width) for every tensor of the layout.

    GPT-2's Conv1D layers store their weight as (in, out), the transpose of our Linear's
    (out, in); c_attn holds q, k and v side by side, as our qkv does. GPT-2 has no switch for
    biases, so a model without biases (nanoGPT's, this milestone's) is written with zero
    biases: the same function. A tied LM head is not written (GPT-2 ties it to wte).
    """
    c = config
    names = [("wte.weight", "transformer.wte.weight", False, None),
             ("wpe.weight", "transformer.wpe.weight", False, None)]
    for i in range(c.n_layer):
        src, dst = f"blocks.{i}.", f"transformer.h.{i}."
        for ours, hf in (("ln1", "ln_1"), ("ln2", "ln_2")):
            names.append((src + ours + ".weight", dst + hf + ".weight", False, None))
            names.append((src + ours + ".bias", dst + hf + ".bias", False, c.n_embd))
        for ours, hf, width in (("attn.qkv", "attn.c_attn", 3 * c.n_embd),
                                ("attn.proj", "attn.c_proj", c.n_embd),
                                ("mlp.fc", "mlp.c_fc", 4 * c.n_embd),
                                ("mlp.proj", "mlp.c_proj", c.n_embd)):
            names.append((src + ours + ".weight", dst + hf + ".weight", True, None))
            names.append((src + ours + ".bias", dst + hf + ".bias", False, width))
    names.append(("ln_f.weight", "transformer.ln_f.weight", False, None))
    names.append(("ln_f.bias", "transformer.ln_f.bias", False, c.n_embd))
    if not c.tie_weights:
        names.append(("lm_head.weight", "lm_head.weight", False, None))
    return names


def check_gpt2_compatible(config):
    if config.norm != "layernorm" or config.mlp != "gelu" or config.gelu_approximate != "tanh":
        raise CheckpointFolderError(
            f"GPT-2's layout has LayerNorm and tanh-GELU MLPs only; this model has "
            f"norm={config.norm!r}, mlp={config.mlp!r}, "
            f"gelu_approximate={config.gelu_approximate!r}")


def gpt2_tensors(model):
    """{Hugging Face GPT-2 name: array} for a TinyTorch GPT (zeros for the biases it lacks)."""
    check_gpt2_compatible(model.config)
    ours = {name: p.data for name, p in model.named_parameters()}
    out = {}
    for name, hf_name, transposed, width in gpt2_names(model.config):
        if name in ours:
            out[hf_name] = ours[name].T if transposed else ours[name]
        else:  # a bias the model does not have
            out[hf_name] = np.zeros(width, dtype=np.float32)
    return out


def gpt2_config(config, info):
    """config.json for transformers' GPT2LMHeadModel, plus our own fields under "tinytorch"."""
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": config.vocab_size,
        "n_positions": config.block_size,
        "n_embd": config.n_embd,
        "n_layer": config.n_layer,
        "n_head": config.n_head,
        "n_inner": 4 * config.n_embd,
        "activation_function": "gelu_new",  # GPT-2's tanh approximation of GELU, as ours
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": config.dropout, "embd_pdrop": config.dropout,
        "attn_pdrop": config.dropout,
        "tie_word_embeddings": config.tie_weights,
        "bos_token_id": None, "eos_token_id": None,  # characters: no special tokens
        "dtype": "float32",
        "tinytorch": dict(info, gpt_config=config.to_dict()),
    }


def char_tokenizer_json(chars):
    """A tokenizer.json that encodes one id per character, as CharTokenizer(chars) does, for
    an ASCII vocabulary: a byte-level BPE with no merges, whose tokens are the characters'
    bytes (module 10's bytes_to_unicode names them). None if a character is not ASCII."""
    from tinytorch.text.tokenization import bytes_to_unicode

    if not all(len(ch) == 1 and ord(ch) < 128 for ch in chars):
        return None
    table = bytes_to_unicode()
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None,
            "decoder": byte_level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": {table[ord(ch)]: i for i, ch in enumerate(chars)},
                      "merges": []}}


def save_pretrained(folder, model, info):
    """Write `folder`/config.json and model.safetensors (module 08's writer, atomically), and
    tokenizer.json for the character vocabulary `info["chars"]` when it is ASCII."""
    import json

    from tinytorch.core.training import save_safetensors

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_safetensors(folder / GPT2_WEIGHTS, gpt2_tensors(model), metadata={"format": "pt"})
    tokenizer = char_tokenizer_json(info.get("chars", []))
    if tokenizer is not None:
        atomic_write(folder / "tokenizer.json", json.dumps(tokenizer, ensure_ascii=False))
    atomic_write(folder / GPT2_CONFIG,
                          json.dumps(gpt2_config(model.config, info), indent=2) + "\n")


OPTIMIZER_STATE = "optimizer.npz"


def save_optimizer(folder, optimizer):
    """The optimizer's state_dict() (module 07: steps, moments, groups) as folder/optimizer.npz.

    Beside the Hugging Face files, which stay untouched; AdamW and FusedAdamW read it back
    with load_optimizer. Written atomically (tito.files.atomic_write)."""
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **{key: np.asarray(value) for key, value in optimizer.state_dict().items()})
    atomic_write(Path(folder) / OPTIMIZER_STATE, buffer.getvalue())


def load_optimizer(folder, optimizer):
    """Load folder/optimizer.npz into `optimizer` (built over the same model and groups)."""
    path = Path(folder) / OPTIMIZER_STATE
    if not path.is_file():
        raise CheckpointFolderError(f"{path} does not exist: the folder holds no optimizer state")
    with np.load(path, allow_pickle=False) as saved:
        try:
            optimizer.load_state_dict({key: saved[key] for key in saved.files})
        except ValueError as error:
            raise CheckpointFolderError(f"{path}: {error}") from None


def load_pretrained(folder, requested=None):
    """(model, info) from a folder that save_pretrained wrote; CheckpointFolderError on anything
    amiss."""
    import json

    from tinytorch.core.training import SafetensorsError, load_safetensors_folder
    from tinytorch.models.transformer import GPT, GPTConfig, config_mismatches

    folder = Path(folder)
    config_path = folder / GPT2_CONFIG
    if not config_path.is_file():
        raise CheckpointFolderError(
            f"there is no checkpoint in {folder}: no {GPT2_CONFIG} (train one with "
            "`tito milestone run tinygpt`)")
    try:
        hf = json.loads(config_path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise CheckpointFolderError(f"{config_path} is not JSON: {error}") from None
    info = hf.get("tinytorch")
    if hf.get("model_type") != "gpt2" or not isinstance(info, dict) or "gpt_config" not in info:
        raise CheckpointFolderError(
            f"{config_path} was not written by this milestone (it needs model_type "
            "'gpt2' and a 'tinytorch' section with the model's config)")
    saved = GPTConfig.from_dict(info["gpt_config"])
    problems = config_mismatches(saved, requested or {})
    if problems:
        raise CheckpointFolderError(f"{folder} was saved with a different model configuration:\n  "
                      + "\n  ".join(problems)
                      + "\nLeave out the sizes to use the checkpoint's, or train a new model.")
    try:
        tensors = load_safetensors_folder(folder)
    except SafetensorsError as error:
        raise CheckpointFolderError(f"cannot read the weights in {folder}: {error}") from None
    check_gpt2_compatible(saved)
    model = GPT(saved)
    ours = dict(model.named_parameters())
    names = gpt2_names(saved)
    missing = [hf_name for _, hf_name, _, _ in names if hf_name not in tensors]
    if missing:
        raise CheckpointFolderError(
            f"{folder / GPT2_WEIGHTS} lacks {len(missing)} tensor(s) of GPT-2's "
            f"layout, e.g. {missing[:3]}")
    state = {}
    for name, hf_name, transposed, _ in names:
        value = tensors[hf_name]
        if name in ours:
            state[name] = value.T if transposed else value
        elif np.any(value):
            raise CheckpointFolderError(
                f"{hf_name} in {folder / GPT2_WEIGHTS} is not zero, but the model "
                "has no biases (bias=False in its config)")
    if saved.tie_weights:
        state["lm_head.weight"] = state["wte.weight"]  # one matrix, two names
    try:
        model.load_state_dict(state)
    except ValueError as error:
        raise CheckpointFolderError(
            f"the weights in {folder} do not fit the model:\n{error}") from None
    return model, info
