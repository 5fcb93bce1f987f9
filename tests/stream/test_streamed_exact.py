"""Streaming must not change what the model computes: streamed logits == resident logits.

For every family, quantized and not, with a budget of ~30% of the expert slots (so many steps
miss), a 16-token prefill and 32 single-token decode steps give the same logits as mlx-lm's
resident model (bit for bit, or within the stated tolerance where a CPU-tuned BLAS computes float
experts: see tests/helpers.py), and greedy generation gives the same tokens as mlx_lm.generate.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load as mlx_load
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache

from specdec.decode.loop import DecodeConfig
from specdec.decode.run import generate
from specdec.stream.loader import load
from tests.helpers import (
    FAMILIES,
    assert_greedy_match,
    assert_logits_match,
    fast_cases,
    random_checkpoint,
    resident_logits,
)


@pytest.fixture(scope="module")
def ckpt_root(tmp_path_factory):
    return tmp_path_factory.mktemp("ckpts")


@pytest.mark.parametrize("bits", fast_cases([None, 4], 4))
@pytest.mark.parametrize("family", fast_cases(FAMILIES))
def test_streamed_logits_equal_resident(ckpt_root, tmp_path, monkeypatch, family, bits):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    src = random_checkpoint(ckpt_root, family, bits)
    ref_model, _ = mlx_load(str(src))
    sm = load(src, budget="30%", policy="lru", io="buffered", with_mtp=False)
    try:
        rng = np.random.default_rng(1)
        vocab = ref_model.args.vocab_size
        prompt = rng.integers(0, vocab, 16).tolist()
        ref_cache, st_cache = make_prompt_cache(ref_model), make_prompt_cache(sm.model)
        ref = resident_logits(ref_model, prompt, ref_cache)
        got = resident_logits(sm.model, prompt, st_cache)
        worst = float(np.abs(ref - got).max())
        tok = int(ref[-1].argmax())
        for _ in range(32):
            ref = resident_logits(ref_model, [tok], ref_cache)
            got = resident_logits(sm.model, [tok], st_cache)
            worst = max(worst, float(np.abs(ref - got).max()))
            tok = int(ref[-1].argmax())
        cache = sm.streamer.cache
        assert_logits_match(worst, bits, f"{family} bits={bits}")
        assert cache.misses > cache.n_slots, "the budget should force evictions and re-reads"
        assert cache.hits > 0
    finally:
        sm.close()


@pytest.mark.parametrize(
    "family,bits", fast_cases([("deepseek_v3", 4), ("mixtral", 4)] + [(f, None) for f in FAMILIES])
)
def test_greedy_tokens_equal_mlx_lm_generate(ckpt_root, tmp_path, monkeypatch, family, bits):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    src = random_checkpoint(ckpt_root, family, bits)
    ref_model, ref_tok = mlx_load(str(src))
    prompt = ref_tok.encode("def add(a, b):\n    return")
    steps = list(generate_step(mx.array(prompt), ref_model, max_tokens=40))
    ref_tokens = [int(t) for t, _ in steps]
    sm = load(src, budget="30%", io="buffered", with_mtp=False)
    try:
        res = generate(sm, prompt, "none", DecodeConfig(max_tokens=40), stop_at_eos=False)
    finally:
        sm.close()
    ref_logprobs = [np.array(lp.astype(mx.float32)) for _, lp in steps]
    assert_greedy_match(res.tokens, ref_tokens, ref_logprobs, bits, f"{family} bits={bits}")
