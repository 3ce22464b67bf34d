"""Module 18 against Hugging Face transformers, on small random checkpoints made here.

Each family's checkpoint is written with ``save_pretrained`` (one sharded, one bfloat16) and
read back by both sides from the same folder: ``transformers`` in float32 with eager
attention, TinyTorch through ``load_model`` (module 08's safetensors reader, memory-mapped).
"""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tinytorch.models import (  # noqa: E402
    Config,
    ConfigError,
    TinyKvPagedCache,
    TinyKvPagedPool,
    WeightError,
    WeightStore,
    generate,
    load_model,
)

VOCAB = 97
COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
              rms_norm_eps=1e-5)
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)


def _configs():
    t = transformers
    return {
        "llama": t.LlamaConfig(**COMMON, tie_word_embeddings=False,
                               rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        "llama3_tied": t.LlamaConfig(**COMMON, tie_word_embeddings=True, rope_parameters={
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16}),
        "qwen2": t.Qwen2Config(**COMMON, tie_word_embeddings=True,
                               rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
        "qwen3": t.Qwen3Config(**COMMON, head_dim=12, tie_word_embeddings=False),
        "qwen2_moe": t.Qwen2MoeConfig(**COMMON, **MOE, shared_expert_intermediate_size=24,
                                      norm_topk_prob=False, mlp_only_layers=[1]),
        "qwen3_moe": t.Qwen3MoeConfig(**COMMON, **MOE, head_dim=8, norm_topk_prob=True,
                                      decoder_sparse_step=2),
        "gpt2": t.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=3, n_head=4, n_positions=128),
    }


def _randomize(model, seed):
    """Every parameter random: HF's zero biases, unit norms and zero routers hide bugs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                base = 1.0 if ("norm" in name or "ln_" in name) and name.endswith("weight") else 0.0
                p.copy_(base + 0.3 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name or "wte" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """family -> folder, plus a sharded and a bfloat16 variant."""
    root = tmp_path_factory.mktemp("ckpt")
    folders = {}
    for i, (name, config) in enumerate(_configs().items()):
        torch.manual_seed(i)
        model = transformers.AutoModelForCausalLM.from_config(config)
        _randomize(model, seed=100 + i)
        folders[name] = root / name
        model.save_pretrained(folders[name])
        if name == "qwen2":
            folders["qwen2_sharded"] = root / "qwen2_sharded"
            model.save_pretrained(folders["qwen2_sharded"], max_shard_size="40KB")
        if name == "llama":
            folders["llama_bf16"] = root / "llama_bf16"
            model.to(torch.bfloat16).save_pretrained(folders["llama_bf16"])
    return folders


_HF = {}


def _hf(folder):
    if folder not in _HF:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.float32, attn_implementation="eager").eval()
        model.generation_config.eos_token_id = None  # generate all the tokens asked for
        model.generation_config.pad_token_id = 0
        _HF[folder] = model
    return _HF[folder]


def _hf_logits(folder, ids):
    with torch.no_grad():
        return _hf(folder)(torch.as_tensor(ids)).logits.numpy()


def _close(got, want, what):
    scale = max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got - want).max())
    assert err <= 1e-4 * scale, f"{what}: max abs diff {err:.3g} for logits of scale {scale:.3g}"


IDS = np.random.default_rng(0).integers(0, VOCAB, size=(2, 13))
ALL = ["llama", "llama3_tied", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "gpt2",
       "qwen2_sharded", "llama_bf16"]


@pytest.mark.parametrize("name", ALL)
def test_prefill_logits_match_transformers(checkpoints, name):
    model = load_model(checkpoints[name])
    got = model(IDS)
    assert got.shape == (2, 13, VOCAB) and got.dtype == np.float32
    _close(got, _hf_logits(checkpoints[name], IDS), f"{name} prefill")
    last = model(IDS, logits_to_keep=1)
    assert last.shape == (2, 1, VOCAB)
    np.testing.assert_allclose(last[:, 0], got[:, -1], atol=1e-5)


def test_config_reads_the_families(checkpoints):
    c = Config.from_json_file(checkpoints["llama3_tied"])
    assert c.rope_scaling["rope_type"] == "llama3" and c.rope_theta == 500000.0
    assert c.tie_word_embeddings
    q = Config.from_json_file(checkpoints["qwen2_moe"])
    assert [q.is_moe_layer(i) for i in range(3)] == [True, False, True]
    q3 = Config.from_json_file(checkpoints["qwen3_moe"])
    assert [q3.is_moe_layer(i) for i in range(3)] == [False, True, False]
    assert Config.from_json_file(checkpoints["qwen3"]).head_dim == 12
    hub_style = {"model_type": "qwen2", "vocab_size": 10, "hidden_size": 8,
                 "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
                 "intermediate_size": 16, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                 "sliding_window": 4096, "use_sliding_window": False,
                 "torch_dtype": "bfloat16"}
    c = Config.from_dict(hub_style)
    assert c.rope_theta == 1e6 and c.dtype == "bfloat16" and c.qkv_bias and c.head_dim == 4


@pytest.mark.parametrize("name", ["llama", "qwen3", "qwen2_moe", "gpt2"])
@pytest.mark.parametrize("mode", ["dense", "paged"])
def test_decode_with_cache_equals_full_forward(checkpoints, name, mode):
    """The tutorial's decode loop, model(tok, offset=t, cache=cache), matches transformers."""
    model = load_model(checkpoints[name])
    full = _hf_logits(checkpoints[name], IDS)
    cache = model.create_kv_cache(mode, page_size=4)
    assert len(cache) == model.config.num_hidden_layers
    steps = [model(IDS[:, :3], offset=0, cache=cache)]
    steps += [model(IDS[:, t:t + 1], offset=t, cache=cache) for t in range(3, IDS.shape[1])]
    _close(np.concatenate(steps, axis=1), full, f"{name}, {mode} cache, token by token")
    if mode == "paged":
        # 13 tokens in pages of 4, two sequences: 8 pages in every layer's pool
        assert [c.pool.pages_in_use for c in cache] == [8] * len(cache)
        for layer_cache in cache:
            layer_cache.release()
        assert all(c.pool.pages_in_use == 0 for c in cache)


@pytest.mark.parametrize("name", ["llama3_tied", "qwen2", "qwen3_moe", "gpt2"])
def test_greedy_32_tokens_match_transformers_generate(checkpoints, name):
    model = load_model(checkpoints[name])
    prompt = [3, 14, 15, 92, 65]
    want = _hf(checkpoints[name]).generate(torch.tensor([prompt]), max_new_tokens=32,
                                           do_sample=False)[0].tolist()
    for mode in ("dense", "paged"):
        got = generate(model, prompt, 32, temperature=0, cache=mode, page_size=8, stop_ids=())
        assert got.tolist() == want, f"{name}, cache={mode}: {got.tolist()} != {want}"


def test_batch_of_unequal_prompts(checkpoints):
    folder = checkpoints["qwen2"]
    model = load_model(folder)
    prompts = [[5, 6, 7, 8, 9, 10, 11], [42], [1, 2, 3]]
    wants = [_hf(folder).generate(torch.tensor([p]), max_new_tokens=12,
                                  do_sample=False)[0].tolist() for p in prompts]
    for mode in ("dense", "paged"):
        outs = generate(model, prompts, 12, temperature=0, cache=mode, page_size=4,
                        stop_ids=())
        assert isinstance(outs, list) and len(outs) == 3
        for p, o, want in zip(prompts, outs, wants):
            assert o.tolist() == want, f"cache={mode}, prompt {p}: {o.tolist()} != {want}"


def test_uncached_and_sampled_generation(checkpoints):
    model = load_model(checkpoints["llama"])
    prompt = np.array([4, 8, 15, 16])
    greedy = generate(model, prompt, 6, temperature=0, cache="dense", stop_ids=())
    assert generate(model, prompt, 6, temperature=0, cache=None,
                    stop_ids=()).tolist() == greedy.tolist()
    a = generate(model, prompt, 10, temperature=0.8, top_k=10, top_p=0.9, seed=1, stop_ids=())
    b = generate(model, prompt, 10, temperature=0.8, top_k=10, top_p=0.9, seed=1, cache="paged",
                 stop_ids=())
    assert a.tolist() == b.tolist() and a[:4].tolist() == prompt.tolist()


def test_weights_are_memory_mapped_not_copied(checkpoints):
    """The layers hold views of the mapped file; a tied head is the embedding table itself."""
    model = load_model(checkpoints["qwen2"])
    q = model.layers[0].self_attn.q_proj.weight.data
    assert not q.flags.owndata, "weights should be views of the memory-mapped file"
    assert model.w_lm_head is None  # tied: embedding.as_linear, no second table
    gpt2 = load_model(checkpoints["gpt2"])
    qkv = gpt2.layers[0].self_attn.qkv.weight.data  # c_attn (in, out) read as (out, in)
    assert not qkv.flags.owndata and qkv.shape == (96, 32)


def test_paged_pool_exhaustion_is_an_error():
    """A pool limited to max_pages raises MemoryError naming the fix; released pages serve again."""
    pool = TinyKvPagedPool(page_size=4, max_pages=2)
    kv = np.zeros((2, 1, 1, 8, 2), np.float32)
    cache = TinyKvPagedCache(pool)
    cache.update(kv[0], kv[1])
    with pytest.raises(MemoryError, match="max_pages"):
        TinyKvPagedCache(pool).update(kv[0][:, :, :1], kv[1][:, :, :1])
    cache.release()
    TinyKvPagedCache(pool).update(kv[0][:, :, :5], kv[1][:, :, :5])  # the released pages
    assert len(pool.pages) == 2


def test_bad_configs_name_the_problem(tmp_path):
    with pytest.raises(ConfigError, match="'mamba'"):
        Config.from_dict({"model_type": "mamba"})
    with pytest.raises(ConfigError, match="'intermediate_size'"):
        Config.from_dict({"model_type": "llama", "vocab_size": 10, "hidden_size": 8,
                          "num_hidden_layers": 1, "num_attention_heads": 2,
                          "rms_norm_eps": 1e-6})
    with pytest.raises(ConfigError, match="'num_experts'"):
        Config.from_dict({"model_type": "qwen3_moe", "vocab_size": 10, "hidden_size": 8,
                          "num_hidden_layers": 1, "num_attention_heads": 2,
                          "intermediate_size": 8, "rms_norm_eps": 1e-6})
    with pytest.raises(ConfigError, match="config.json"):
        Config.from_json_file(tmp_path)


def test_missing_and_misshapen_tensors_name_them(checkpoints, tmp_path):
    config = Config.from_json_file(checkpoints["llama"])
    store = WeightStore.from_path(checkpoints["llama"])
    from tinytorch.models import ModelForCausalLM

    name = "model.layers.1.self_attn.k_proj.weight"
    tensors = dict(store.tensors)
    del tensors[name]
    with pytest.raises(WeightError, match=r"k_proj.weight.*missing.*\(16, 32\)"):
        ModelForCausalLM(config, WeightStore(tensors))
    tensors[name] = np.zeros((16, 31), np.float32)
    with pytest.raises(WeightError, match=r"k_proj.weight.*\(16, 31\).*\(16, 32\)"):
        ModelForCausalLM(config, WeightStore(tensors))
    del tensors["lm_head.weight"]
    tensors[name] = store.tensors[name]
    with pytest.raises(WeightError, match="lm_head.weight"):
        ModelForCausalLM(config, WeightStore(tensors))
    with open(checkpoints["llama"] / "config.json") as f:
        assert json.load(f)["model_type"] == "llama"


def test_generate_past_gpt2s_learned_positions_is_a_clear_error(checkpoints):
    """GPT-2 has n_positions rows of positions: asking for more tokens than fit names the limit."""
    model = load_model(checkpoints["gpt2"])
    n = model.config.max_position_embeddings
    fits = generate(model, [1, 2, 3], n - 2, temperature=0.0)  # positions 0 .. n - 1
    assert len(fits) == 3 + n - 2
    with pytest.raises(ValueError, match=f"n_positions = {n}.*at most {n - 2} new tokens"):
        generate(model, [1, 2, 3], n - 1, temperature=0.0)


def test_an_offset_that_disagrees_with_the_cache_is_refused(checkpoints):
    """With a cache, offset must be what the cache holds; the error names both numbers."""
    model = load_model(checkpoints["llama"])
    cache = model.create_kv_cache("dense")
    with pytest.raises(ValueError, match=r"offset=3 but the cache holds 0 positions"):
        model(IDS[:, :2], offset=3, cache=cache)
    assert cache[0].lengths is None  # refused before anything was stored
    model(IDS[:, :2], offset=0, cache=cache)
    model(IDS[:, 2:3], cache=cache)  # leaving offset out continues from the cache
    with pytest.raises(ValueError, match=r"offset=2 but the cache holds 3 positions.*offset=3"):
        model(IDS[:, 3:4], offset=2, cache=cache)
    assert cache[0].lengths.tolist() == [3, 3]
    with pytest.raises(TypeError, match="one cache per layer"):
        model(IDS[:, 3:4], cache=cache[0])


@pytest.mark.parametrize("name", ["llama3_tied", "qwen2", "qwen3_moe", "gpt2"])
def test_engine_serves_requests_as_transformers_generates_them(checkpoints, name):
    """Continuous batching (more requests than max_batch, unequal prompts and lengths, a
    chunked prefill) gives each request transformers' greedy tokens."""
    from tinytorch.models import Engine

    model = load_model(checkpoints[name])
    rng = np.random.default_rng(7)
    prompts = [rng.integers(0, VOCAB, size=n).tolist() for n in (6, 1, 11, 3, 8)]
    news = [9, 4, 6, 12, 2]
    engine = Engine(model, max_batch=3, page_size=4, prefill_chunk=5)
    rids = [engine.add_request(p, max_new_tokens=n, stop_ids=()) for p, n in zip(prompts, news)]
    out = engine.run()
    for rid, p, n in zip(rids, prompts, news):
        ids = torch.tensor([p])  # the mask says so: id 0 is a token here, not padding
        want = _hf(checkpoints[name]).generate(ids, attention_mask=torch.ones_like(ids),
                                               max_new_tokens=n, do_sample=False)[0].tolist()
        assert p + out[rid] == want, f"{name}, request {rid}: {p + out[rid]} != {want}"


def test_generation_stops_at_the_eos_of_generation_config_as_transformers_does(checkpoints,
                                                                            tmp_path):
    """generation_config.json's eos_token_id ends generate and the engine where transformers'
    generate ends; stop_ids=() overrides it."""
    import shutil

    from tinytorch.models import Engine

    folder = tmp_path / "with_eos"
    shutil.copytree(checkpoints["qwen2"], folder)
    prompt = [3, 14, 15, 92, 65]
    free = generate(load_model(folder), prompt, 20, temperature=0, stop_ids=()).tolist()
    eos = free[len(prompt) + 4]  # the fifth new token
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [eos, 96]}))
    model = load_model(folder)
    assert set(model.config.eos_token_id) == {eos, 96}
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager").eval()
    want = hf.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False,
                       pad_token_id=0)[0].tolist()
    assert want[-1] == eos and len(want) < len(free)
    for mode in ("dense", "paged", None):
        assert generate(model, prompt, 20, temperature=0, cache=mode).tolist() == want
    engine = Engine(model)
    rid = engine.add_request(prompt, max_new_tokens=20)
    assert prompt + engine.run()[rid] == want
    assert generate(model, prompt, 20, temperature=0, stop_ids=()).tolist() == free
