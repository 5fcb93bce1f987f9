"""Greedy decoding picks as mlx-lm's `generate_step` picks: the argmax of each decode's
log-probabilities in the logits' dtype (specdec/decode/state.py `log_probs`), not of float32
logits. In bfloat16, logits - logsumexp rounds near-equal logits to one value and the lowest
index wins; a float32 argmax then picks another token, and plain greedy would part from mlx-lm's.

The end-to-end case is real 4-bit bfloat16 checkpoints of four families (random weights: flat
distributions, where the rounding step is widest), on held-out prompts, against mlx-lm's own
greedy decode.

Run: `pytest tests/decode/test_greedy_rule.py`.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load as mlx_load
from mlx_lm.models.cache import make_prompt_cache

from specdec.checkpoint.random_models import make_random
from specdec.decode import state as state_module
from specdec.decode.loop import DecodeConfig
from specdec.decode.run import generate
from specdec.decode.sampling import NonFiniteLogits, judge, judge_greedy
from specdec.decode.state import greedy_picks, log_probs
from specdec.stream.loader import load
from specdec.trace.prompts import load_prompts
from tests.helpers import fast_cases, mlx_lm_greedy

N_TOKENS = 32
N_PROMPTS = 8


def mlx_lm_rule(row: mx.array) -> int:
    """mlx-lm's greedy pick of one decode's logits [1, V] (generate_step's `_step`)."""
    return int(mx.argmax(row - mx.logsumexp(row, keepdims=True), axis=-1).item())


def test_log_probs_rows_are_each_decodes_own_and_pick_as_mlx_lm():
    rng = np.random.default_rng(0)
    logits = mx.array(rng.normal(size=(1, 5, 4096)).astype(np.float32)).astype(mx.bfloat16)
    lp = log_probs(logits)  # [5, V]
    assert lp.shape == (5, 4096) and lp.dtype == mx.bfloat16
    for i in range(5):  # each row as a one-position call computes it
        row = logits[:, i, :]
        assert mx.array_equal(lp[i], (row - mx.logsumexp(row, keepdims=True))[0])
    # two logits a bfloat16 step apart round to one log-probability: the lower index wins
    tie = mx.array([[[1.0, 1.0078125] + [0.0] * 50000]], dtype=mx.bfloat16)  # [1, 1, V]
    assert int(mx.argmax(tie.astype(mx.float32))) == 1
    assert mlx_lm_rule(tie[:, 0, :]) == 0
    host = np.array(log_probs(tie).astype(mx.float32))
    assert judge([], None, host, 0.0, np.random.default_rng(0)).tokens == [0]


def test_verify_picks_where_the_logits_are_as_the_host_judge_picks():
    # a greedy verify takes each position's argmax and its log-probability on the device
    # (state.forward_greedy: log_probs, then greedy_picks) instead of bringing [γ, V] to the
    # host. Each row's top two logits are a bfloat16 step apart, the higher at the higher index:
    # log_probs rounds some to one value (the first test's case), where mlx-lm's rule takes the
    # lower index and a float32 argmax the higher. The picks are mlx-lm's, row by row, the
    # host judge's verdict follows for drafts matching up to each place, and a non-finite
    # logit is refused alike
    rng, rounded = np.random.default_rng(1), 0
    for trial in range(20):
        raw = (0.5 * rng.normal(size=(1, 6, 8192)) - 6.0).astype(np.float32)  # below the top
        low, high = np.sort(rng.choice(8192, 2, replace=False))
        raw[0, :, low], raw[0, :, high] = 1.0, 1.0078125  # one bfloat16 step at 1
        logits = mx.array(raw).astype(mx.bfloat16)  # [1, 6, V]
        lp = log_probs(logits)  # [6, V]
        target, chosen = greedy_picks(lp)
        assert target.tolist() == [mlx_lm_rule(logits[:, i, :]) for i in range(6)], trial
        rounded += int((target == low).sum())
        host = np.array(lp.astype(mx.float32))  # what judge read before
        assert np.array_equal(chosen, host[np.arange(6), target])
        for n in range(6):  # drafts matching the first n picks, then one that does not
            drafts = (target[:n].tolist() + [int(target[n]) + 1])[:5]
            want = judge(drafts, None, host, 0.0, np.random.default_rng(0))
            assert judge_greedy(drafts, target, chosen) == want, (trial, n)
    assert rounded > 60, "the rounding decided most picks: a float32 argmax differs there"
    raw[0, 3, 7] = np.nan  # one NaN logit: its row's log-probabilities are all NaN
    target, chosen = greedy_picks(log_probs(mx.array(raw).astype(mx.bfloat16)))
    with pytest.raises(NonFiniteLogits):
        judge_greedy([], target, chosen)


def test_a_greedy_verify_brings_only_its_picks_to_the_host(monkeypatch):
    # each verify pass reads its γ picks and their log-probabilities through to_host's small
    # read (a managed allocation and a copy per np.array on CUDA: specdec/core/accelerator.py),
    # two reads a pass, never a row of the vocabulary; so does the prefill's pick of the token
    # after the prompt (judged as a one-position verify: loop.py `_first_judged`)
    reads, inner = [], state_module.to_host

    def to_host(a):
        reads.append(a.size)
        return inner(a)

    monkeypatch.setattr(state_module, "to_host", to_host)
    sm = load("tiny", budget="25%")
    try:
        res = generate(sm, sm.encode("def f(x):"), "oracle:0.7", DecodeConfig(4, 24),
                       stop_at_eos=False)  # fmt: skip
    finally:
        sm.close()
    widths = [1] + [r.drafted + 1 for r in res.records]  # the prefill's pick first
    assert reads == [w for w in widths for _ in range(2)], (reads, widths)


# the families whose float32 argmax parts from mlx-lm's greedy on these prompts (8 held-out,
# 32 tokens; 4-bit, bfloat16, seed 0): qwen3_moe 2, mixtral 2, qwen2_moe 1, gpt_oss 2 (deepseek_v3,
# minimax and glm4_moe 0: where the rules agree the other tests already check equality)
FAMILIES = fast_cases(["qwen3_moe", "mixtral", "qwen2_moe", "gpt_oss"])


@pytest.fixture(scope="module", params=FAMILIES)
def bf16_model(request, tmp_path_factory):
    family = request.param
    root = tmp_path_factory.mktemp("greedy_rule")
    mp = pytest.MonkeyPatch()
    mp.setenv("SPECDEC_CACHE", str(root / "cache"))
    src = make_random(family, root / f"{family}-4-bf16", bits=4, dtype="bfloat16")
    ref_model, tok = mlx_load(str(src))
    assert ref_model(mx.array([[1]])).dtype == mx.bfloat16, "its logits are bfloat16"
    prompts = [tok.encode(t[:200]) for t in load_prompts("heldout", limit=N_PROMPTS)]
    sm = load(src, budget="30%", io="buffered")
    yield sm, ref_model, prompts
    sm.close()
    mp.undo()


def float32_argmax_greedy(model, prompt: list[int], n: int) -> list[int]:
    """Greedy decoding as this harness did before: the argmax of float32 logits, fed as
    generate_step feeds the prompt (all but the last token, then the last alone)."""
    cache = make_prompt_cache(model)
    model(mx.array([prompt[:-1]]), cache=cache)
    y, out = prompt[-1], []
    for _ in range(n):
        y = int(mx.argmax(model(mx.array([[y]]), cache=cache)[0, -1].astype(mx.float32)))
        out.append(y)
    return out


def test_greedy_equals_mlx_lm_where_bfloat16_rounding_decides(bf16_model):
    """Plain greedy (streamed, reads on every token) equals mlx-lm's greedy on every prompt,
    including those where the float32 argmax parts from it; speculative decoding there too."""
    sm, ref_model, prompts = bf16_model
    parted = []
    for i, prompt in enumerate(prompts):
        ref = mlx_lm_greedy(ref_model, prompt, N_TOKENS)
        sm.reset_cache()
        got = generate(sm, prompt, "none", DecodeConfig(1, N_TOKENS), stop_at_eos=False).tokens
        assert got == ref, f"prompt {i}: plain greedy parts from mlx-lm's"
        if float32_argmax_greedy(ref_model, prompt, N_TOKENS) != ref:
            parted.append((prompt, ref))
    # the case is met (2 of 8 here): otherwise this test would check nothing the others do not
    assert parted, "no prompt where the float32 argmax parts from mlx-lm's greedy"
    for prompt, ref in parted:
        for drafter in ("self", "lookup", "oracle:0.9"):
            sm.reset_cache()
            spec = generate(
                sm, prompt, drafter, DecodeConfig(4, N_TOKENS), stop_at_eos=False, reference=ref
            )
            assert spec.tokens == ref, f"{drafter} at γ = 4 parts from plain greedy"
