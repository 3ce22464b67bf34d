"""ModelFeatures: module 15's quantized weights on load, module 17's kernels around the forward,
and the engine built from modules 11-13's classes (no second implementation of a layer)."""

import inspect
import json
import sys

import numpy as np
import pytest

from tinytorch import nn
from tinytorch.core.layers import Linear
from tinytorch.core.training import save_safetensors
from tinytorch.models import (
    Config,
    ModelFeatures,
    ModelForCausalLM,
    generate,
    kernel_choice,
    llm,
    load_model,
    quantized,
    random_weights,
)
from tinytorch.perf.quantization import QuantizedLinear

VALUES = dict(model_type="qwen2", vocab_size=61, hidden_size=32, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
              rms_norm_eps=1e-6, max_position_embeddings=64, tie_word_embeddings=True)


def model_of(features=None, **changes):
    config = Config.from_dict(dict(VALUES, **changes))
    return ModelForCausalLM(config, random_weights(config, seed=3), features)


def linears(model):
    return [(name, m) for name, m in model.named_modules() if isinstance(m, Linear)]


def test_features_are_validated_with_clear_errors():
    """Each field refuses values it does not know, naming the field and the choices."""
    assert ModelFeatures() == ModelFeatures("plain", "float32", 128, "plain")
    for bad, match in ((dict(kernels="numba"), "kernels must be one of 'plain', 'fast'"),
                       (dict(weights="int2"), "weights must be one of 'float32', 'int8', 'int4'"),
                       (dict(attention="flash"), "attention must be one of"),
                       (dict(group_size=3), "group size must be a positive even integer")):
        with pytest.raises(ValueError, match=match):
            ModelFeatures(**bad)
    with pytest.raises(TypeError, match="ModelFeatures or None"):
        model_of(features={"weights": "int8"})


@pytest.mark.parametrize("weights, group_size, tolerance", [("int8", 128, 0.03),
                                                             ("int4", 16, 0.25)])
def test_quantized_weights_on_load(weights, group_size, tolerance):
    """int8/int4 turn every Linear of the blocks and the (tied) head into module 15's
    QuantizedLinear; the logits stay close to float32's and the bytes shrink."""
    plain = model_of()
    q = model_of(ModelFeatures(weights=weights, group_size=group_size))
    assert linears(q) == [], f"float32 Linear layers left: {[n for n, _ in linears(q)]}"
    quant = [m for _, m in q.named_modules() if isinstance(m, QuantizedLinear)]
    assert len(quant) == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer + the head
    assert all(m.bits == (8 if weights == "int8" else 4) for m in quant)
    assert isinstance(q.w_lm_head, QuantizedLinear)  # a tied head: its own quantized copy
    assert q.embedding.weight.data is plain.embedding.weight.data or np.array_equal(
        q.embedding.weight.data, plain.embedding.weight.data)  # the lookup stays float32
    assert q.layers[0].self_attn.q_proj.bias is not None  # Qwen2's biases survive
    ids = np.random.default_rng(4).integers(0, 61, size=(2, 9))
    want, got = plain(ids), q(ids)
    assert got.dtype == np.float32
    rel = np.abs(got - want).max() / np.abs(want).max()
    assert 0 < rel < tolerance, f"{weights}: logits differ from float32 by {rel:.3%}"
    assert q.nbytes() < plain.nbytes()
    cache = q.create_kv_cache("paged", page_size=4)
    steps = [q(ids[:, :5], cache=cache)] + [q(ids[:, t:t + 1], offset=t, cache=cache)
                                             for t in range(5, 9)]
    np.testing.assert_allclose(np.concatenate(steps, 1), got, atol=1e-4)


def test_moe_router_stays_float32_and_experts_are_quantized():
    """In a mixture of experts every expert's Linear is quantized; the router is not."""
    q = model_of(ModelFeatures(weights="int8"), model_type="qwen2_moe", num_experts=4,
                 num_experts_per_tok=2, moe_intermediate_size=16,
                 shared_expert_intermediate_size=24)
    moe = q.layers[0].mlp
    assert isinstance(moe.gate, Linear) and isinstance(moe.shared_expert_gate, Linear)
    assert all(isinstance(e.gate_proj, QuantizedLinear) for e in moe.experts)
    assert [n for n, _ in linears(q)] == ["layers.0.mlp.gate", "layers.0.mlp.shared_expert_gate",
                                          "layers.1.mlp.gate", "layers.1.mlp.shared_expert_gate"]


def test_int4_group_size_that_does_not_divide_names_the_layer():
    """A group size that does not divide a layer's inputs is refused, naming the layer."""
    with pytest.raises(ValueError, match=r"model.layers.0.self_attn.q_proj: group_size 128"):
        model_of(ModelFeatures(weights="int4", group_size=128))


def test_large_weights_are_quantized_in_row_blocks_exactly():
    """Quantizing a block of rows at a time gives the same integers and scales as at once."""
    rng = np.random.default_rng(5)
    layer = llm.linear_layer(rng.standard_normal((50, 32)).astype(np.float32),
                             rng.standard_normal(50).astype(np.float32))
    for bits, group in ((8, 128), (4, 16)):
        features = ModelFeatures(weights=f"int{bits}", group_size=group)
        whole = QuantizedLinear.from_linear(layer, bits=bits, group_size=group)
        blocks = quantized(layer, features, "test", rows_per_block=16)
        assert np.array_equal(blocks.qweight, whole.qweight)
        assert np.array_equal(blocks.scale, whole.scale)
        assert np.array_equal(blocks.bias.data, layer.bias.data)
        x = rng.standard_normal((3, 32)).astype(np.float32)
        np.testing.assert_allclose(blocks(x).data, whole(x).data, rtol=1e-6)


def _resident_bytes_of(path):
    """Resident bytes of this process's mappings of `path` (Linux /proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 5 and "-" in fields[0] and ":" in fields[3]:  # a mapping's header
                inside = len(fields) >= 6 and fields[5] == str(path)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_quantizing_a_mapped_checkpoint_lets_its_float32_pages_go(tmp_path):
    """After int8 loading, the float32 pages read from the mapped file are not resident; a
    float32 model's pages are (it reads the file in place)."""
    big = dict(VALUES, hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
               vocab_size=4096)
    store = random_weights(Config.from_dict(big), seed=1)
    path = tmp_path / "model.safetensors"
    save_safetensors(path, store.tensors)
    (tmp_path / "config.json").write_text(json.dumps(big))
    del store
    size = path.stat().st_size  # about 19 MB
    ids = np.array([[1, 2, 3]])
    model = load_model(tmp_path, ModelFeatures(weights="int8"))
    model(ids)
    held = _resident_bytes_of(path)
    assert held < 0.15 * size, (  # small tensors (norms, biases) stay, with their neighbours
        f"{held / 2**20:.1f} MiB of the {size / 2**20:.1f} MiB file stay resident after int8 "
        "loading: the quantized weights' float32 pages should have been let go")
    plain = load_model(tmp_path)
    plain(ids)
    assert _resident_bytes_of(path) > 0.5 * size  # the float32 model reads the mapping


def test_fast_kernels_are_switched_on_around_the_forward_only():
    """kernels="fast" switches module 17's kernel set (its compiled kernels) on inside the
    forward (attention kept plain unless attention="fast"), and restores the table afterwards."""
    from tinytorch.perf.acceleration import COMPILED_KERNELS, active_kernels, kernel_set

    attention = {n for n, _, key, _ in kernel_set() if llm._is_attention_kernel(key)}
    others = {n for n, *_ in kernel_set()} - attention
    assert attention and others
    assert {n for n, *_ in COMPILED_KERNELS} <= attention | others  # the compiled ones run
    before = active_kernels()
    for features, expected in ((ModelFeatures(kernels="fast"), others),
                               (ModelFeatures(attention="fast"), attention),
                               (ModelFeatures(kernels="fast", attention="fast"),
                                attention | others),
                               (ModelFeatures(), set(before))):
        with kernel_choice(features):
            assert set(active_kernels()) == expected
        assert active_kernels() == before
    seen = []
    plain, fast = model_of(), model_of(ModelFeatures(kernels="fast", attention="fast"))
    block = fast.layers[0]
    original = block.forward

    def spy(*args, **kwargs):
        seen.append(set(active_kernels()))
        return original(*args, **kwargs)

    block.forward = spy
    ids = np.array([[5, 6, 7, 8]])
    np.testing.assert_allclose(fast(ids), plain(ids), atol=1e-4)
    assert seen == [attention | others] and active_kernels() == before
    assert generate(fast, [1, 2, 3], 5, stop_ids=()).tolist() == \
        generate(plain, [1, 2, 3], 5, stop_ids=()).tolist()


@pytest.mark.parametrize("features, module", [(ModelFeatures(weights="int8"), 15),
                                              (ModelFeatures(kernels="fast"), 17)])
def test_a_feature_whose_module_is_not_completed_names_it(monkeypatch, features, module):
    """Without module 15 (or 17) in the package, the feature is refused, naming the module."""
    name = {15: "tinytorch.perf.quantization", 17: "tinytorch.perf.acceleration"}[module]
    monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    with pytest.raises(RuntimeError, match=f"needs module {module} .*tito module complete "
                                           f"{module}"):
        model_of(features)


def test_the_engine_is_made_of_the_students_classes():
    """Every layer class of tinytorch.models is a module 11-13 class or a thin subclass that
    only loads weights (and adapts attention's call); none has a second forward."""
    thin = {"RMSNorm": nn.RMSNorm, "LayerNorm": nn.LayerNorm, "Embedding": nn.Embedding,
            "Attention": nn.GroupedQueryAttention, "GPT2Attention": nn.MultiHeadAttention,
            "MLP": nn.SwiGLU, "GPT2MLP": nn.MLP}
    for name, parent in thin.items():
        cls = getattr(llm, name)
        assert issubclass(cls, parent), f"{name} should subclass module 11-13's {parent}"
        if "forward" in vars(cls):  # only the attention adapters, which call the parent's
            assert "super().forward(" in inspect.getsource(cls.forward), name
            assert name in ("Attention", "GPT2Attention")
    modules = {n for n, v in vars(llm).items() if isinstance(v, type)
               and issubclass(v, nn.Module) and v.__module__ == llm.__name__}
    assert modules == set(thin) | {"TransformerBlock", "Moe", "ModelForCausalLM"}
    gqa = nn.GroupedQueryAttention(16, 4, 2, bias=True)
    built = nn.GroupedQueryAttention.from_linears(gqa.q_proj, gqa.k_proj, gqa.v_proj,
                                                  gqa.o_proj, 4, 2)
    assert set(vars(built)) == set(vars(gqa))
    for cls, made, args in ((nn.SwiGLU, nn.SwiGLU(8, 12), ("gate_proj", "up_proj", "down_proj")),
                            (nn.MLP, nn.MLP(8), ("fc", "proj")),
                            (nn.MultiHeadAttention, nn.MultiHeadAttention(8, 2), ("qkv", "proj"))):
        extra = (2,) if cls is nn.MultiHeadAttention else ()
        built = cls.from_linears(*(getattr(made, a) for a in args), *extra)
        assert set(vars(built)) == set(vars(made)), cls.__name__


# ---- module 17's compiled kernels in the engine -----------------------------------------------
FAMILIES = {
    "qwen2": {},
    "llama_untied": dict(model_type="llama", tie_word_embeddings=False),
    "qwen3": dict(model_type="qwen3", head_dim=8),
    "qwen2_moe": dict(model_type="qwen2_moe", num_experts=4, num_experts_per_tok=2,
                      moe_intermediate_size=16, shared_expert_intermediate_size=32),
    "gpt2": "gpt2",
}


def family_config(family):
    changes = FAMILIES[family]
    if changes == "gpt2":
        return Config.from_dict(dict(model_type="gpt2", vocab_size=61, n_embd=32, n_layer=2,
                                     n_head=4, n_positions=64))
    return Config.from_dict(dict(VALUES, **changes))


@pytest.fixture
def compiled_calls(monkeypatch):
    """Counts the calls of module 17's compiled kernels (the engine looks them up by name)."""
    from tinytorch.perf import acceleration as acc

    counts = {}
    names = ("int8_matmul_rows", "int4_matmul_rows", "dequantize_rows", "rms_norm_rows",
             "rotary_rows", "softmax_rows", "silu_rows", "layer_norm_rows", "gelu_tanh_rows")
    for name in names:
        kernel = getattr(acc, name)

        def counted(*args, _kernel=kernel, _name=name):
            counts[_name] = counts.get(_name, 0) + 1
            return _kernel(*args)

        monkeypatch.setattr(acc, name, counted)
    return counts


@pytest.mark.parametrize("weights", ["float32", "int8", "int4"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_compiled_kernels_give_the_plain_engines_logits_and_tokens(family, weights,
                                                                   compiled_calls):
    """kernels="fast", attention="fast" (module 17's compiled kernels) give the plain engine's
    logits (prefill, and token by token through the cache) and greedy tokens, in every weight
    format, and the compiled kernels really ran (integer products for one token, tiles for a
    prefill)."""
    config = family_config(family)
    store = random_weights(config, seed=11)
    plain = ModelForCausalLM(config, store, ModelFeatures(weights=weights, group_size=16))
    fast = ModelForCausalLM(config, store, ModelFeatures("fast", weights, 16, "fast"))
    ids = np.random.default_rng(12).integers(0, config.vocab_size, size=(2, 11))
    want = plain(ids)
    scale = max(1.0, float(np.abs(want).max()))
    got = fast(ids)
    assert got.dtype == np.float32
    assert np.abs(got - want).max() <= 1e-4 * scale, (
        f"{family} {weights}: the compiled prefill differs by {np.abs(got - want).max():.3g}")
    cache = fast.create_kv_cache("dense")
    steps = [fast(ids[:, :4], cache=cache)] + [fast(ids[:, t:t + 1], cache=cache)
                                                for t in range(4, 11)]
    err = np.abs(np.concatenate(steps, 1) - want).max()
    assert err <= 1e-4 * scale, f"{family} {weights}: token by token differs by {err:.3g}"
    prompt = ids[0, :5].tolist()
    for mode in ("dense", "paged"):
        assert generate(fast, prompt, 12, cache=mode, page_size=4, stop_ids=()).tolist() == \
            generate(plain, prompt, 12, cache=mode, page_size=4, stop_ids=()).tolist(), mode
    ran = set(compiled_calls)
    expected = {"softmax_rows"}
    expected |= {"layer_norm_rows", "gelu_tanh_rows"} if family == "gpt2" else {
        "rms_norm_rows", "rotary_rows", "silu_rows"}
    if weights != "float32":
        expected |= {"int8_matmul_rows" if weights == "int8" else "int4_matmul_rows",
                     "dequantize_rows"}  # one token: integer products; a prefill: tiles
    assert expected <= ran, f"{family} {weights}: compiled kernels not run: {expected - ran}"
    if weights == "float32":  # a few float32 rows: int8_matmul_rows with float32 weights
        assert "int8_matmul_rows" in ran and "int4_matmul_rows" not in ran


@pytest.fixture(scope="module")
def hf_checkpoints(tmp_path_factory):
    """Small random transformers checkpoints (every parameter random), written once."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    common = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  rms_norm_eps=1e-5)
    configs = {"qwen2": transformers.Qwen2Config(**common, tie_word_embeddings=True),
               "qwen3": transformers.Qwen3Config(**common, head_dim=12,
                                                 tie_word_embeddings=False),
               "gpt2": transformers.GPT2Config(vocab_size=97, n_embd=32, n_layer=2, n_head=4,
                                               n_positions=128)}
    root = tmp_path_factory.mktemp("hf")
    folders = {}
    for i, (name, config) in enumerate(configs.items()):
        torch.manual_seed(i)
        model = transformers.AutoModelForCausalLM.from_config(config)
        g = torch.Generator().manual_seed(50 + i)
        with torch.no_grad():
            for pname, p in model.named_parameters():
                base = 1.0 if p.ndim == 1 and ("norm" in pname or "ln_" in pname) and \
                    pname.endswith("weight") else 0.0
                p.copy_(base + (0.3 if p.ndim == 1 else 0.2) * torch.randn(p.shape, generator=g))
        folders[name] = root / name
        model.save_pretrained(folders[name])
    return folders


@pytest.mark.parametrize("name", ["qwen2", "qwen3", "gpt2"])
def test_compiled_engine_matches_transformers(hf_checkpoints, name):
    """The float32 engine with module 17's compiled kernels gives transformers' logits
    (prefill and decode through the cache) and its 24 greedy tokens."""
    import torch
    import transformers

    folder = hf_checkpoints[name]
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager").eval()
    hf.generation_config.eos_token_id = None
    hf.generation_config.pad_token_id = 0
    model = load_model(folder, ModelFeatures(kernels="fast", attention="fast"))
    ids = np.random.default_rng(13).integers(0, 97, size=(2, 10))
    with torch.no_grad():
        want = hf(torch.as_tensor(ids)).logits.numpy()
    scale = max(1.0, float(np.abs(want).max()))
    cache = model.create_kv_cache("dense")
    got = np.concatenate([model(ids[:, :3], cache=cache)]
                         + [model(ids[:, t:t + 1], cache=cache) for t in range(3, 10)], 1)
    assert np.abs(model(ids) - want).max() <= 1e-4 * scale
    assert np.abs(got - want).max() <= 1e-4 * scale
    prompt = [3, 14, 15, 92, 65]
    with torch.no_grad():
        expected = hf.generate(torch.tensor([prompt]), max_new_tokens=24,
                               do_sample=False)[0].tolist()
    assert generate(model, prompt, 24, cache="dense", stop_ids=()).tolist() == expected
