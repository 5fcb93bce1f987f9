"""Speculation on Qwen3-Next, whose gated delta-net state cannot be trimmed: rolled back.

The verify pass folds every drafted position into the linear-attention layers' recurrent state;
on a rejection the loop restores the state kept before the pass and feeds the accepted prefix
again (specdec/decode/rollback.py). Checked on a random qwen3_next checkpoint (mlx-lm's own
class, 4-bit, with a random Qwen3-Next-layout MTP layer), streamed with a budget that misses:
the mark/restore is exact on mlx-lm's caches, greedy speculation at γ 2 and 4 (mtp, self,
oracle) equals mlx-lm's plain greedy, and the records count the re-fed positions.
"""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm import load as mlx_load
from mlx_lm.models.cache import make_prompt_cache

from specdec.checkpoint.mtp.qwen3_next import Qwen3NextMTP
from specdec.decode.loop import DecodeConfig
from specdec.decode.rollback import CacheMark, can_roll_back
from specdec.decode.run import generate
from specdec.stream.loader import load
from tests.helpers import fast_cases, mlx_lm_greedy, random_checkpoint, streamed_target

N_TOKENS = 40


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    yield from streamed_target(tmp_path_factory.mktemp("rollback"), "qwen3_next", 4, N_TOKENS)


def test_mark_and_restore_are_exact(target):
    _, _, model, prompt, _ = target
    cache = make_prompt_cache(model)
    assert can_roll_back(cache) and CacheMark.before(cache) is not None
    model(mx.array([prompt]), cache=cache)
    mark = CacheMark.before(cache)
    model(mx.array([[5, 6, 7]]), cache=cache)  # three positions to forget
    mark.restore(cache, 3)
    after = model(mx.array([[9]]), cache=cache)[0, -1]
    plain = make_prompt_cache(model)
    model(mx.array([prompt]), cache=plain)
    want = model(mx.array([[9]]), cache=plain)[0, -1]
    assert mx.array_equal(after, want).item()


@pytest.mark.parametrize(
    "drafter,gamma", fast_cases([("mtp", 2), ("mtp", 4), ("self", 3), ("oracle:0.6", 4)])
)
def test_speculation_rolls_back_losslessly(target, drafter, gamma):
    sm, _, _, prompt, ref = target
    if drafter == "mtp":
        assert isinstance(sm.mtp, Qwen3NextMTP)
    sm.reset_cache()
    res = generate(sm, prompt, drafter, DecodeConfig(gamma=gamma, max_tokens=N_TOKENS))
    assert res.tokens == ref, f"{drafter} γ={gamma} diverged from plain greedy"
    rejected = [r for r in res.records if r.accepted < r.drafted]
    assert rejected, "some pass must reject a draft for the rollback to be exercised"
    for r in res.records:  # re-fed: the accepted prefix, exactly when a draft was rejected
        assert r.refed == (r.accepted + 1 if r.accepted < r.drafted else 0)
    assert res.summary["misses"] > 0
    total = sum(r.draft_bytes_read + r.verify_bytes_read + r.refeed_bytes_read for r in res.records)
    assert total == sum(r.bytes_read for r in res.records)


def test_rollback_with_speculation_aware_caching(target):
    """+demote/+protect hear each verdict after the re-feed; greedy still equals plain."""
    _, src, _, prompt, ref = target
    sm = load(src, budget="30%", io="buffered", policy="lru+demote+protect")
    try:
        res = generate(sm, prompt, "oracle:0.6", DecodeConfig(gamma=4, max_tokens=N_TOKENS))
        assert res.tokens == ref
        assert any(r.refed for r in res.records)
    finally:
        sm.close()


def test_deepseek_v41_window_cache_restores_exactly():
    """deepseek_v41's LayerCache drops window rows (untrimmable): the mark restores it exactly."""
    from mlx_lm.models import deepseek_v41

    from specdec.checkpoint.random_models import _randomize

    args = deepseek_v41.ModelArgs.from_dict(
        {
            "model_type": "deepseek_v41",
            "vocab_size": 512,
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "moe_intermediate_size": 64,
            "n_routed_experts": 16,
            "num_experts_per_tok": 4,
            "head_dim": 64,
            "q_lora_rank": 64,
            "qk_rope_head_dim": 16,
            "o_groups": 2,
            "o_lora_rank": 64,
            "sliding_window": 8,
            "hc_mult": 2,
            "hc_sinkhorn_iters": 3,
            "rms_norm_eps": 1e-6,
        }
    )
    model = deepseek_v41.Model(args)
    _randomize(model, mx.random.key(0))
    prompt = mx.array([list(range(1, 13))])  # 12 positions: past the 8-row window
    cache = model.make_cache()
    assert can_roll_back(cache) and not cache[0].is_trimmable()
    model(prompt, cache=cache)
    mark = CacheMark.before(cache)
    model(mx.array([[5, 6, 7]]), cache=cache)
    mark.restore(cache, 3)
    after = model(mx.array([[9]]), cache=cache)[0, -1]
    plain = model.make_cache()
    model(prompt, cache=plain)
    assert mx.array_equal(after, model(mx.array([[9]]), cache=plain)[0, -1]).item()


def test_a_wrapped_sliding_window_restores_exactly():
    """A RotatingKVCache that has wrapped around no longer trims, and writes into its arrays
    one position at a time: the mark keeps its own handles, so the restore is exact."""
    from mlx_lm.models.cache import RotatingKVCache

    def fed(n: int, start: int) -> mx.array:  # [B, heads, n, D], distinct rows
        return mx.arange(start, start + n, dtype=mx.float32).reshape(1, 1, n, 1) * mx.ones(
            (1, 2, 1, 8)
        )

    marked, plain = RotatingKVCache(max_size=4), RotatingKVCache(max_size=4)
    for c in (marked, plain):
        c.update_and_fetch(fed(6, 0), fed(6, 0))  # past the 4-row window
        for t in (6, 7):  # one row at a time: the window's array now written in place
            c.update_and_fetch(fed(1, t), fed(1, t))
    assert not marked.is_trimmable() and can_roll_back([marked])
    mark = CacheMark.before([marked])
    for t in (100, 101):  # into the same array, over rows the window still needs
        marked.update_and_fetch(fed(1, t), fed(1, t))
    mark.restore([marked], 2)
    got, _ = marked.update_and_fetch(fed(1, 8), fed(1, 8))
    want, _ = plain.update_and_fetch(fed(1, 8), fed(1, 8))
    assert mx.array_equal(got, want).item()


def test_a_cache_holding_other_caches_is_refused():
    from mlx_lm.models.cache import ArraysCache, CacheList, KVCache

    from specdec.core.errors import SpecdecError

    cache = [CacheList(ArraysCache(size=1), KVCache())]
    assert not can_roll_back(cache)
    with pytest.raises(SpecdecError, match="neither trimmed nor restored"):
        CacheMark.before(cache)


@pytest.mark.slow
@pytest.mark.parametrize("drafter,gamma", [("self", 3), ("oracle:0.6", 4)])
def test_speculation_past_a_sliding_window_is_lossless(tmp_path, monkeypatch, drafter, gamma):
    """gpt-oss's sliding-window layers (16 positions here) wrap around within the prompt: from
    then on they are restored, not trimmed, and greedy speculation still equals plain greedy."""
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    src = random_checkpoint(tmp_path, "gpt_oss", 4)
    ref_model, tok = mlx_load(str(src))
    prompt = tok.encode("import os\nimport sys\n\ndef main(argv):\n    return sorted(set(argv))\n")
    assert len(prompt) > 16
    ref = mlx_lm_greedy(ref_model, prompt, 24)
    sm = load(src, budget="40%", io="buffered")
    try:
        res = generate(sm, prompt, drafter, DecodeConfig(gamma=gamma, max_tokens=24))
        assert res.tokens == ref
        assert any(r.refed for r in res.records) or drafter == "self"
    finally:
        sm.close()
