"""Module 18's engine called exactly as the engine tutorial calls it (its sections 2, 3, 6, 7).

Each test runs the tutorial's calls, in its spelling, on a small random checkpoint folder
written here with module 08's safetensors writer (no download, no torch), and checks the
result against the engine's own forward. Comparisons with `transformers` through the same
calls are in test_kv_caching.py.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from tinytorch import nn
from tinytorch.core.training import save_safetensors
from tinytorch.models import (
    Attention,
    Config,
    Embedding,
    ModelFeatures,
    ModelForCausalLM,
    RMSNorm,
    TinyKvFullCache,
    TinyKvPagedCache,
    TinyKvPagedPool,
    TransformerBlock,
    WeightStore,
    linear,
    load_model,
    random_weights,
)

FAMILIES = {
    "qwen2_tied": dict(model_type="qwen2", tie_word_embeddings=True, rope_theta=1e6),
    "llama_untied": dict(model_type="llama", tie_word_embeddings=False),
    "qwen3_moe": dict(model_type="qwen3_moe", head_dim=12, num_experts=4, num_experts_per_tok=2,
                      moe_intermediate_size=16, norm_topk_prob=True, decoder_sparse_step=2),
}


def write_checkpoint(folder, values, seed=0):
    """config.json + model.safetensors of a random checkpoint of `values`."""
    values = dict(dict(vocab_size=61, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                       num_key_value_heads=2, intermediate_size=40, rms_norm_eps=1e-5,
                       max_position_embeddings=128), **values)
    folder.mkdir(parents=True)
    store = random_weights(Config.from_dict(values), seed=seed)
    save_safetensors(folder / "model.safetensors", store.tensors)
    (folder / "config.json").write_text(json.dumps(values))
    return folder


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def model_path(request, tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("tutorial") / request.param,
                            FAMILIES[request.param])


def test_section_7_loading(model_path):
    """Section 7: Config.from_json_file(model_path / "config.json"), WeightStore.from_path,
    ModelForCausalLM(config, store, features), load_model(model_path, features=None)."""
    model_path = Path(model_path)
    config_file = model_path / "config.json"
    config = Config.from_json_file(config_file)
    store = WeightStore.from_path(model_path)
    model = ModelForCausalLM(config, store, None)
    assert Config.from_json_file(model_path) == config  # the folder works as well
    for name in ("rms_norm_eps", "num_hidden_layers", "hidden_size", "vocab_size",
                 "tie_word_embeddings"):
        assert getattr(config, name) == json.loads(config_file.read_text()).get(name, False)
    ids = np.array([[3, 1, 4, 1, 5, 9]])
    assert np.array_equal(load_model(model_path, features=None)(ids), model(ids))
    assert np.array_equal(load_model(model_path)(ids), model(ids))
    assert model.features == ModelFeatures()  # features=None: the plain defaults


def test_section_2_the_block(model_path):
    """Section 2: TransformerBlock(layer_idx, config, weights, features), its four parts as the
    tutorial builds them (RMSNorm(..., eps=config.rms_norm_eps), Attention(prefix, config,
    weights, features), config.is_moe_layer), and block(x, offset, cache, mask=None)."""
    config = Config.from_json_file(model_path / "config.json")
    weights = WeightStore.from_path(model_path)
    features = ModelFeatures()
    x = np.random.default_rng(1).standard_normal((2, 5, config.hidden_size)).astype(np.float32)
    for layer_idx in range(config.num_hidden_layers):
        block = TransformerBlock(layer_idx, config, weights, features)
        prefix = f"model.layers.{layer_idx}"
        input_layernorm = RMSNorm(
            config.hidden_size,
            weights.tensor(f"{prefix}.input_layernorm.weight"),
            eps=config.rms_norm_eps,
        )
        post_attention_layernorm = RMSNorm(
            config.hidden_size,
            weights.tensor(f"{prefix}.post_attention_layernorm.weight"),
            eps=config.rms_norm_eps,
        )
        self_attn = Attention(prefix, config, weights, features)
        assert isinstance(block.input_layernorm, nn.RMSNorm)
        assert isinstance(block.post_attention_layernorm, nn.RMSNorm)
        assert isinstance(block.self_attn, nn.GroupedQueryAttention)
        assert isinstance(block.mlp, nn.Module)
        if config.is_moe_layer(layer_idx):
            assert type(block.mlp).__name__ == "Moe"
            assert all(isinstance(e, nn.SwiGLU) for e in block.mlp.experts)
        else:
            assert isinstance(block.mlp, nn.SwiGLU)
        for mask in ("causal", None, np.tril(np.ones((5, 5), dtype=bool))):
            offset, cache = 0, None
            r = self_attn(input_layernorm(x), offset, cache, mask)
            h = x + r
            r = block.mlp(post_attention_layernorm(h))
            want = h + r
            got = block(x, offset, cache, mask=mask)
            np.testing.assert_allclose(got.data, want.data, atol=1e-6)
        cache = TinyKvFullCache()  # one layer's cache, as cache[layer_idx] is
        steps = [block(x[:, :3], 0, cache, mask="causal")]
        steps += [block(x[:, t:t + 1], t, cache, mask=None) for t in (3, 4)]
        full = block(x, 0, None, mask="causal")
        np.testing.assert_allclose(np.concatenate([s.data for s in steps], 1), full.data,
                                   atol=1e-5)


class TutorialModel:
    """Section 3's ModelForCausalLM, assembled here with the tutorial's own calls."""

    def __init__(self, config, weights, features=None):
        self.config = config
        self.features = features or ModelFeatures()
        self.num_hidden_layers = config.num_hidden_layers
        self.hidden_size = config.hidden_size
        self.vocab_size = config.vocab_size
        embed_weight = weights.linear("model.embed_tokens")
        self.embedding = Embedding(
            vocab_size=config.vocab_size,
            embedding_dim=config.hidden_size,
            weight=embed_weight,
        )
        self.layers = [
            TransformerBlock(i, config, weights, self.features)
            for i in range(config.num_hidden_layers)
        ]
        self.norm = RMSNorm(
            config.hidden_size,
            weights.tensor("model.norm.weight"),
            eps=config.rms_norm_eps,
        )
        if not config.tie_word_embeddings and weights.has("lm_head.weight"):
            self.w_lm_head = weights.linear("lm_head")
        else:
            self.w_lm_head = None

    def __call__(self, inputs, offset=0, cache=None, logits_to_keep=None):
        if cache is None:
            cache = [TinyKvFullCache() for _ in range(self.num_hidden_layers)]
        h = self.embedding(inputs)
        mask = None if inputs.shape[1] == 1 else "causal"
        for layer_idx in range(self.num_hidden_layers):
            h = self.layers[layer_idx](h, offset, cache[layer_idx], mask=mask)
        if logits_to_keep is not None:
            h = h[:, -logits_to_keep:, :]
        h = self.norm(h)
        if self.w_lm_head is not None:
            return linear(h, self.w_lm_head)
        else:
            return self.embedding.as_linear(h)


def test_section_3_the_model(model_path):
    """Section 3: the tutorial's assembly (weights.linear("model.embed_tokens"), Embedding(
    vocab_size=, embedding_dim=, weight=), the blocks, the norm, linear(h, w_lm_head) or
    embedding.as_linear(h)) gives the engine's logits; model(inputs, offset=t, cache=cache)."""
    config = Config.from_json_file(model_path / "config.json")
    weights = WeightStore.from_path(model_path)
    ours = TutorialModel(config, weights)
    model = ModelForCausalLM(config, weights)
    ids = np.random.default_rng(2).integers(0, config.vocab_size, size=(2, 7))
    full = model(ids, offset=0, cache=None, logits_to_keep=None)
    np.testing.assert_allclose(ours(ids).data, full, atol=1e-5)
    np.testing.assert_allclose(ours(ids, logits_to_keep=1).data, full[:, -1:], atol=1e-5)
    assert (model.w_lm_head is None) == config.tie_word_embeddings
    for mode in ("dense", "paged"):  # Section 6's caches, decoded as the tutorial decodes
        cache = model.create_kv_cache(mode=mode, page_size=4)
        assert len(cache) == model.num_hidden_layers
        steps = [model(ids[:, :4], offset=0, cache=cache)]
        for t in range(4, 7):
            steps.append(model(ids[:, t:t + 1], offset=t, cache=cache))
        np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-4)
    cache = [TinyKvFullCache() for _ in range(ours.num_hidden_layers)]
    steps = [ours(ids[:, :4], 0, cache)] + [ours(ids[:, t:t + 1], t, cache) for t in (4, 5, 6)]
    np.testing.assert_allclose(np.concatenate([s.data for s in steps], 1), full, atol=1e-4)


def test_section_6_create_kv_cache(model_path):
    """Section 6: create_kv_cache(mode="dense") is one TinyKvFullCache per layer; "paged" is one
    TinyKvPagedCache(pool=pool) per layer on TinyKvPagedPool(page_size=...) pools shared by
    every cache the model creates."""
    model = load_model(model_path)
    dense = model.create_kv_cache(mode="dense")
    assert [type(c) for c in dense] == [TinyKvFullCache] * model.num_hidden_layers
    paged = model.create_kv_cache(mode="paged", page_size=128)
    again = model.create_kv_cache(mode="paged", page_size=128)
    assert [type(c) for c in paged] == [TinyKvPagedCache] * model.num_hidden_layers
    assert all(isinstance(c.pool, TinyKvPagedPool) and c.pool.page_size == 128 for c in paged)
    assert [c.pool for c in paged] == [c.pool for c in again]  # shared pools
    assert len({id(c.pool) for c in paged}) == model.num_hidden_layers  # one per layer
    pool = TinyKvPagedPool(page_size=8)
    cache = TinyKvPagedCache(pool=pool)
    kv = np.zeros((1, 2, 3, 4), np.float32)
    k, _ = cache.update(kv, kv)
    assert k.shape == (1, 2, 3, 4) and pool.pages_in_use == 1
    with pytest.raises(ValueError, match="'dense' or 'paged'"):
        model.create_kv_cache(mode="sparse")
