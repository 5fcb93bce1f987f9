"""An arena past the gather kernels' reach computes on copies of the call's experts, exactly.

MLX's CUDA quantized gather kernels address a slot's weights with a 32-bit product, so an arena
whose weight region passes 2^32 elements computes on the experts it names copied out
(specdec/stream/streamed.py `SlotCopy`). CI has no GPU: here the reach is lowered to one
element, so every arena takes that path on the CPU, and the streamed model must still equal
mlx-lm's resident one bit for bit (quantized experts; float ones within the BLAS contract) on
the synced path (30%: reads every step; prefill rows past FEW_ROWS take the distinct-slot copy),
the device-table path (100% --warm) and speculative verify passes (whose decode form copies a
call's experts once for all its positions).
"""

from __future__ import annotations

import contextlib

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load as mlx_load
from mlx_lm.models.cache import make_prompt_cache

from specdec.decode.loop import DecodeConfig
from specdec.decode.run import generate
from specdec.stream import streamed
from specdec.stream.loader import load
from tests.helpers import assert_logits_match, random_checkpoint, resident_logits


@pytest.fixture(scope="module")
def ckpt_root(tmp_path_factory):
    return tmp_path_factory.mktemp("ckpts")


def _copies(sm) -> list[bool]:
    """Each streamed projection's choice (the switch modules sit outside the parameter tree)."""
    switches = [
        m._h.switch
        for _, m in sm.model.named_modules()
        if isinstance(m, streamed.StreamedSwitchGLU)
    ]
    return [
        p._h.copies is not None
        for s in switches
        for p in s.values()
        if isinstance(p, streamed.ArenaLinear)
    ]


def test_reach_is_cuda_only_and_counts_packed_elements(monkeypatch):
    packed = mx.zeros((4, 8, 2), dtype=mx.uint32)  # 4 slots of 8 x 16 4-bit weights
    floats = packed.astype(mx.bfloat16)  # 4 slots of 8 x 2
    assert streamed.gather_reach() is None  # the CPU's kernels offset in 64 bits
    assert not streamed._past_reach(packed, 4)
    monkeypatch.setattr(streamed, "on_cuda", lambda: True)
    assert streamed.gather_reach() == streamed.CUDA_REACH
    assert streamed._elements(packed, 4) == 4 * 8 * 16
    assert streamed._elements(floats, None) == 4 * 8 * 2
    for elements, float_slots, packed_past, floats_past in (
        (4 * 8 * 16, 4, False, False),  # the region ends at the reach: every slot starts below
        (4 * 8 * 16 - 1, 4, True, False),
        (4 * 8 * 2 - 1, 4, True, True),
        (10**6, 3, False, True),  # a float arena past the sorted gather's expert count
    ):
        reach = streamed.GatherReach(elements, float_slots)
        monkeypatch.setattr(streamed, "gather_reach", lambda r=reach: r)
        assert streamed._past_reach(packed, 4) is packed_past
        assert streamed._past_reach(floats, None) is floats_past


@pytest.mark.parametrize("budget,warm", [("30%", False), ("100%", True)])
@pytest.mark.parametrize("bits", [4, None])
def test_copied_experts_give_the_resident_logits(
    ckpt_root, tmp_path, monkeypatch, bits, budget, warm
):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(streamed, "gather_reach", lambda: streamed.GatherReach(1, 1))
    src = random_checkpoint(ckpt_root, "qwen3_moe", bits)
    ref_model, _ = mlx_load(str(src))
    sm = load(src, budget=budget, io="buffered", warm=warm, with_mtp=False)
    try:
        assert _copies(sm) and all(_copies(sm)), "every projection should compute on copies"
        prompt = np.random.default_rng(3).integers(0, ref_model.args.vocab_size, 16).tolist()
        ref_cache, st_cache = make_prompt_cache(ref_model), make_prompt_cache(sm.model)
        ref = resident_logits(ref_model, prompt, ref_cache)  # 16 x top-k rows: distinct slots
        got = resident_logits(sm.model, prompt, st_cache)
        worst = float(np.abs(ref - got).max())
        tok = int(ref[-1].argmax())
        for _ in range(12):  # one row per expert: each row's expert copied
            ref = resident_logits(ref_model, [tok], ref_cache)
            got = resident_logits(sm.model, [tok], st_cache)
            worst = max(worst, float(np.abs(ref - got).max()))
            tok = int(ref[-1].argmax())
        assert_logits_match(worst, bits, f"copied experts, bits={bits}, {budget}")
        if not warm:
            assert sm.streamer.cache.misses > sm.streamer.cache.n_slots  # slots were refilled
    finally:
        sm.close()


def test_speculation_on_copied_experts_is_lossless_and_copies_once_a_call(
    ckpt_root, tmp_path, monkeypatch
):
    """Verify passes past the reach equal plain greedy; in the decode form each position is a
    call of its own, and those calls share one copy of the whole call's experts (each
    projection takes its tensors once a call, not once a position)."""
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    src = random_checkpoint(ckpt_root, "qwen3_moe", 4)
    sm = load(src, budget="30%", io="buffered", with_mtp=False)
    try:
        prompt = sm.encode("def add(a, b):\n    return")
        plain = generate(sm, prompt, "none", DecodeConfig(1, 24), stop_at_eos=False).tokens
    finally:
        sm.close()
    monkeypatch.setattr(streamed, "gather_reach", lambda: streamed.GatherReach(1, 1))
    calls, whole = [], streamed.SlotCopy.whole_call

    def watched(self, slots):
        with whole(self, slots):
            yield
            calls.append((len(slots.reshape(-1, slots.shape[-1])), len(self._call[2])))

    monkeypatch.setattr(streamed.SlotCopy, "whole_call", contextlib.contextmanager(watched))
    sm = load(src, budget="30%", io="buffered", with_mtp=False)
    try:
        projections = len(streamed._arena_linears(next(
            m._h.switch for _, m in sm.model.named_modules()
            if isinstance(m, streamed.StreamedSwitchGLU)
        )))  # fmt: skip
        for drafter in ("oracle:0.8", "self", "oracle:1.0"):
            sm.reset_cache()
            res = generate(sm, prompt, drafter, DecodeConfig(4, 24), stop_at_eos=False)
            assert res.tokens == plain, drafter
    finally:
        sm.close()
    # verify calls of up to 4 positions (fewer at the run's end, or a chunk of a wide union)
    assert calls and all(2 <= n <= 4 for n, _ in calls) and any(n == 4 for n, _ in calls)
    assert all(taken == projections for _, taken in calls)  # each projection's copy taken once


def test_one_slot_map_per_switch_call(ckpt_root, tmp_path, monkeypatch):
    """The projections of one switch call share its slot map: made once per MoE call (the host
    read of a long call's slots included), not once per projection."""
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(streamed, "gather_reach", lambda: streamed.GatherReach(1, 1))
    made, make = [], streamed.SlotCopy._make
    monkeypatch.setattr(
        streamed.SlotCopy, "_make", staticmethod(lambda i: made.append(i.size) or make(i))
    )
    src = random_checkpoint(ckpt_root, "qwen3_moe", 4)
    sm = load(src, budget="100%", io="buffered", warm=True, with_mtp=False)
    try:
        calls = []
        for m in (m for _, m in sm.model.named_modules()):
            if isinstance(m, streamed.StreamedSwitchGLU):
                monkeypatch.setattr(m, "_launch", lambda y, f=m._launch: calls.append(1) or f(y))
        tokens = np.arange(16).tolist()  # 16 positions x top-k rows: past FEW_ROWS
        resident_logits(sm.model, tokens, make_prompt_cache(sm.model))
        assert calls and len(made) == len(calls), (len(made), len(calls))
        assert all(n > streamed.FEW_ROWS for n in made)
    finally:
        sm.close()
