"""MTP beyond DeepSeek-V3: GLM-4.5's, Qwen3-Next's and DeepSeek-V4's MTP layers streamed,
lossless, recorded.

A random glm4_moe / qwen3_next / deepseek_v41 checkpoint (mlx-lm's own classes, 4-bit) carries a
random MTP layer of the family's layout (mtp.safetensors; deepseek_v41: ds4's V4 layout, which
starts from the main model's HC streams, `main_hidden`); Qwen3-Next's and deepseek_v41's
rejected drafts are rolled back (decode/rollback.py). Loaded with a budget that forces reads: its streamed MTP logits equal
the resident module's, greedy speculation with the MTP drafter at γ 2 and 4 equals mlx-lm's
plain greedy, the drafts equal a full recomputation, and the MTP layer's expert reads land in
the records' draft phase.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from specdec.checkpoint.mtp import load_mtp, mtp_class, target_io
from specdec.decode.loop import DecodeConfig
from specdec.decode.run import generate
from specdec.stream.steplog import Call
from tests.helpers import (
    PLAIN_BETWEEN,
    assert_logits_match,
    fast_cases,
    force_gamma_schedule,
    streamed_target,
)

N_TOKENS = 48
BITS = 4


# the fast loop streams glm4_moe's MTP layer; qwen3_next's and deepseek_v41's (rolled back) run
# in the full suite
@pytest.fixture(
    scope="module",
    params=[
        "glm4_moe",
        pytest.param("qwen3_next", marks=pytest.mark.slow),
        pytest.param("deepseek_v41", marks=pytest.mark.slow),
    ],
)
def target(request, tmp_path_factory):
    yield from streamed_target(
        tmp_path_factory.mktemp(f"mtp-{request.param}"), request.param, BITS, N_TOKENS
    )


def _run(sm, prompt, drafter, gamma, max_tokens=N_TOKENS):
    sm.reset_cache()
    return generate(
        sm, prompt, drafter, DecodeConfig(gamma=gamma, max_tokens=max_tokens), stop_at_eos=False
    )


def test_streamed_mtp_equals_the_resident_module(target):
    sm, src, ref_model, prompt, _ = target
    assert type(sm.mtp) is mtp_class(sm.config["model_type"])
    resident = load_mtp(src, ref_model)
    hidden, _ = resident.main_hidden(ref_model, mx.array([prompt]), None)  # [1, P, (hc,) H]
    tokens = mx.array([prompt[1:] + [7]])
    want, _ = resident(hidden, tokens, None, *target_io(ref_model))
    with sm.streamer.serving(Call("check")):
        got, _ = sm.mtp(hidden, tokens, None, *target_io(sm.model))
    worst = float(mx.abs(got - want).max())
    assert_logits_match(worst, BITS, "streamed vs resident MTP")


def test_a_catch_up_runs_the_moe_on_its_last_position_only(target):
    """`last=True` (the drafter's catch-up): the last position's logits as the full call gives
    them, the same KV cache, and a cold cache reads at most one position's experts."""
    sm, src, ref_model, prompt, _ = target
    resident = load_mtp(src, ref_model)
    hidden, _ = resident.main_hidden(ref_model, mx.array([prompt]), None)  # [1, P, (hc,) H]
    tokens = mx.array([prompt[1:] + [7]])
    caches = [resident.make_cache(), resident.make_cache()]
    full, _ = resident(hidden, tokens, caches[0], *target_io(ref_model))
    last, h = resident(hidden, tokens, caches[1], *target_io(ref_model), last=True)
    assert last.shape[1] == 1 and h.shape[1] == 1
    assert_logits_match(float(mx.abs(last[:, 0] - full[:, -1]).max()), BITS, "last vs full")
    for want, got in zip(caches[0].state, caches[1].state, strict=True):
        assert mx.array_equal(want, got), "the KV cache must hold every position either way"
    reads = []
    for only_last in (False, True):
        sm.reset_cache()
        misses = sm.streamer.cache.misses
        with sm.streamer.serving(Call("check")):
            out = sm.mtp(hidden, tokens, sm.mtp.make_cache(), *target_io(sm.model), last=only_last)
            mx.eval(out)
        reads.append(sm.streamer.cache.misses - misses)
    top_k = sm.config["num_experts_per_tok"]
    assert reads[1] <= top_k < reads[0], f"experts read, all positions / last: {reads}"


@pytest.mark.parametrize("gamma", fast_cases([2, 4]))
def test_mtp_speculation_is_lossless_and_recorded(target, gamma):
    sm, _, _, prompt, ref = target
    res = _run(sm, prompt, "mtp", gamma)
    assert res.tokens == ref, f"mtp γ={gamma} diverged from plain greedy"
    mtp_layer = str(len(sm.model.layers))
    assert all(set(r.draft_union) == {mtp_layer} for r in res.records if r.drafted)
    assert res.summary["misses"] > 0, "the budget must force reads"
    assert sum(r.draft_bytes_read for r in res.records) > 0, "MTP experts stream in the draft phase"
    assert res.records[0].drafted == gamma - 1


# γ per pass: fixed, or `--gamma auto` made to run plain passes between drafting ones (the
# module must still catch up on a plain pass's positions before the next draft)
SCHEDULES = {"fixed 3": None, "auto, plain between": PLAIN_BETWEEN}


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_mtp_drafts_equal_a_full_recomputation(target, schedule, monkeypatch):
    """The drafter's incremental state (catch-up, chaining, trims) matches one fresh pass."""
    from specdec.decode.drafters.mtp import MTPDrafter

    sm, _, _, prompt, _ = target
    proposed, original = [], MTPDrafter.propose

    def spy(self, st, n):
        out = original(self, st, n)
        if out[0]:
            proposed.append((len(st.tokens), out[0][0]))
        return out

    monkeypatch.setattr(MTPDrafter, "propose", spy)
    gammas = SCHEDULES[schedule]
    if gammas is not None:
        force_gamma_schedule(monkeypatch, gammas)
    res = _run(sm, prompt, "mtp", 3 if gammas is None else "auto", max_tokens=24)
    if gammas is not None:
        assert {r.gamma for r in res.records} >= {1, 2}, "plain passes between drafting ones"
    tokens = prompt + res.tokens
    with sm.streamer.serving(Call("check")):
        hidden, _ = sm.mtp.main_hidden(sm.model, mx.array([tokens]), None)  # fresh cache
        logits, _ = sm.mtp(hidden[:, :-1], mx.array([tokens[1:]]), None, *target_io(sm.model))
    full = np.array(logits[0].argmax(-1))  # full[i] predicts tokens[i + 2]
    assert proposed
    for length, draft in proposed:
        assert draft == int(full[length - 2])
