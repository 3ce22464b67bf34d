"""Module 18's Engine: continuous batching over the paged KV cache, on small random models.

Every request's tokens must equal generating it alone; pages come back and are reused; a full
pool queues, and a request that can never fit is refused. (Against transformers: see
test_kv_caching.py.)"""

import numpy as np
import pytest

from tinytorch.models import Config, Engine, ModelForCausalLM, generate, random_weights


def model_of(model_type="qwen2", seed=0, **changes):
    values = dict(model_type=model_type, vocab_size=73, hidden_size=32, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, intermediate_size=48,
                  rms_norm_eps=1e-6, max_position_embeddings=256)
    if model_type == "gpt2":
        values = dict(model_type="gpt2", vocab_size=73, n_embd=32, n_layer=2, n_head=4,
                      n_positions=256)
    if model_type.endswith("moe"):
        values.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                      shared_expert_intermediate_size=24)
    config = Config.from_dict(dict(values, **changes))
    return ModelForCausalLM(config, random_weights(config, seed=seed))


def prompts_and_lengths(count, seed=1):
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, 73, size=int(rng.integers(1, 40))).tolist() for _ in range(count)]
    news = [int(rng.integers(1, 12)) for _ in range(count)]
    return prompts, news


@pytest.mark.parametrize("model_type", ["qwen2", "llama", "gpt2", "qwen2_moe"])
def test_batched_greedy_tokens_equal_each_request_alone(model_type):
    """More requests than max_batch, unequal prompts and lengths: each equals generate alone."""
    model = model_of(model_type)
    prompts, news = prompts_and_lengths(11)
    engine = Engine(model, max_batch=4, page_size=8, prefill_chunk=16)
    rids = [engine.add_request(p, max_new_tokens=n, stop_ids=()) for p, n in zip(prompts, news)]
    active = []
    while engine.waiting or engine.active:
        engine.step()
        active.append(len(engine.active))
        assert len(engine.active) <= 4
    out = engine.results
    for rid, p, n in zip(rids, prompts, news):
        alone = generate(model, p, n, temperature=0, stop_ids=())[len(p):].tolist()
        assert out[rid] == alone, f"request {rid}: batched {out[rid]} != alone {alone}"
    assert max(active) == 4  # the batch was full while requests waited


def test_stop_ids_end_a_request_and_the_others_go_on():
    """A request ends at its stop id (kept, as generate keeps it); the rest are unaffected."""
    model = model_of()
    prompts, _ = prompts_and_lengths(5, seed=2)
    full = [generate(model, p, 10, stop_ids=())[len(p):].tolist() for p in prompts]
    engine = Engine(model, max_batch=3, page_size=4)
    stops = [full[0][3], None, full[2][0], None, full[4][6]]
    rids = [engine.add_request(p, max_new_tokens=10, stop_ids=() if s is None else [s])
            for p, s in zip(prompts, stops)]
    out = engine.run()
    for rid, tokens, stop, p in zip(rids, full, stops, prompts):
        want = tokens if stop is None else tokens[:tokens.index(stop) + 1]
        assert out[rid] == want
        assert out[rid] == generate(model, p, 10, stop_ids=() if stop is None else [stop])[
            len(p):].tolist()


def test_stop_ids_default_to_the_models_eos():
    """stop_ids=None: the end-of-sequence ids of the model's config."""
    model = model_of()
    tokens = generate(model, [1, 2, 3], 8, stop_ids=())[3:].tolist()
    model.config.eos_token_id = (tokens[2],)
    engine = Engine(model)
    rid = engine.add_request([1, 2, 3], max_new_tokens=8)
    assert engine.run()[rid] == tokens[:tokens.index(tokens[2]) + 1]
    assert generate(model, [1, 2, 3], 8)[3:].tolist() == engine.results[rid]


def test_pages_come_back_and_are_reused():
    """Finished requests return their pages; the next requests reuse them, not new ones."""
    model = model_of()
    prompts, news = prompts_and_lengths(6, seed=3)
    engine = Engine(model, max_batch=3, page_size=4)
    for p, n in zip(prompts, news):
        engine.add_request(p, max_new_tokens=n, stop_ids=())
    engine.run()
    made = [len(pool.pages) for pool in engine.pools]
    assert all(pool.pages_in_use == 0 for pool in engine.pools)
    assert engine.pages_reserved == 0
    for p, n in zip(prompts, news):
        engine.add_request(p, max_new_tokens=n, stop_ids=())
    engine.run()
    assert [len(pool.pages) for pool in engine.pools] == made
    assert all(pool.pages_in_use == 0 for pool in engine.pools)


def test_a_full_pool_queues_and_a_request_that_can_never_fit_is_refused():
    """With room for one request's pages, requests run one at a time; too big is refused."""
    model = model_of()
    engine = Engine(model, max_batch=8, page_size=4, max_pages=6)
    prompts = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16, 17, 18, 19], [20, 21]]
    rids = [engine.add_request(p, max_new_tokens=10, stop_ids=()) for p in prompts]
    seen = []
    while engine.waiting or engine.active:
        engine.step()
        seen.append(len(engine.active))
        assert engine.pages_reserved <= 6
        assert sum(pool.pages_in_use for pool in engine.pools[:1]) <= 6
    assert max(seen[:-1]) >= 1 and 3 not in seen  # never all three at once: 5 + 5 + 3 pages
    for rid, p in zip(rids, prompts):
        assert engine.results[rid] == generate(model, p, 10, stop_ids=())[len(p):].tolist()
    with pytest.raises(ValueError, match=r"needs 7 pages of 4 tokens per layer.*holds 6"):
        engine.add_request(list(range(20)), max_new_tokens=8)


def test_long_prompts_are_prefilled_in_chunks_while_others_decode():
    """A prompt longer than prefill_chunk takes several steps; the others advance meanwhile."""
    model = model_of()
    engine = Engine(model, max_batch=2, page_size=8, prefill_chunk=8)
    short = engine.add_request([1, 2, 3], max_new_tokens=6, stop_ids=())
    long_prompt = list(np.random.default_rng(4).integers(0, 73, size=30))
    long = engine.add_request(long_prompt, max_new_tokens=3, stop_ids=())
    first_long = None
    for step in range(20):
        for rid, _ in engine.step():
            if rid == long and first_long is None:
                first_long = step
        if not (engine.waiting or engine.active):
            break
    assert first_long == 3  # 30 tokens in chunks of 8: steps 0, 1, 2, 3
    assert len(engine.results[short]) == 6
    assert engine.results[long] == generate(model, long_prompt, 3, stop_ids=())[30:].tolist()


def test_sampled_requests_follow_their_own_seeds():
    """A seeded, sampled request draws the same tokens in a batch as generate(seed=) alone."""
    model = model_of()
    prompts, _ = prompts_and_lengths(4, seed=5)
    engine = Engine(model, max_batch=4)
    rids = [engine.add_request(p, max_new_tokens=8, temperature=0.9, top_k=20, top_p=0.95,
                               seed=10 + i, stop_ids=()) for i, p in enumerate(prompts)]
    out = engine.run()
    for i, (rid, p) in enumerate(zip(rids, prompts)):
        alone = generate(model, p, 8, temperature=0.9, top_k=20, top_p=0.95, seed=10 + i,
                         stop_ids=())
        assert out[rid] == alone[len(p):].tolist()


def test_bad_requests_and_settings_are_refused_clearly():
    """Empty or out-of-vocabulary prompts, bad lengths and settings name the problem."""
    model = model_of()
    engine = Engine(model)
    with pytest.raises(ValueError, match=r"at least one token id in \[0, 73\)"):
        engine.add_request([], max_new_tokens=3)
    with pytest.raises(ValueError, match=r"\[0, 73\)"):
        engine.add_request([5, 80], max_new_tokens=3)
    with pytest.raises(ValueError, match="max_new_tokens must be a positive integer"):
        engine.add_request([5], max_new_tokens=0)
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        engine.add_request([5], max_new_tokens=2, temperature=-1)
    with pytest.raises(ValueError, match="max_batch must be a positive integer"):
        Engine(model, max_batch=0)
    gpt2 = Engine(model_of("gpt2", n_positions=16))
    with pytest.raises(ValueError, match="needs 20 positions; the model has 16"):
        gpt2.add_request(list(range(10)), max_new_tokens=11)
    assert engine.run() == {}
