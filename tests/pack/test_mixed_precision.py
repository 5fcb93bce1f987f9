"""Hot/cold mixed precision: `specdec pack --cold-bits 2 --hotlist FILE`, two slot pools, exact.

Run: `pytest tests/pack/test_mixed_precision.py`. The pack keeps the hotlist's blocks byte for byte
and holds every other expert as `mx.quantize(W, 64, 2)` of its float weights (dequantized
first when quantized); the index records each block's precision and size; streamed decode over
the two pools equals mlx-lm's model carrying the same mixed weights (`resident_mixed`), logits
and greedy tokens, with reads in both pools, at full budget through device slot tables, with
lookahead prefetches, and speculative decoding with the MTP drafter stays lossless.
"""

from __future__ import annotations

import zlib

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache

from specdec.checkpoint.bundled import resolve_model
from specdec.core.errors import StoreError
from specdec.decode.loop import DecodeConfig
from specdec.decode.run import generate
from specdec.pack.pack import pack, plan
from specdec.pack.requantize import cold_layout
from specdec.pack.verify import verify
from specdec.store.layout import EXPERTS_BIN, ExpertIndex, LayerLayout, TensorSpec
from specdec.store.pools import plan_pools, pool_index
from specdec.store.safetensors import read_safetensors_header
from specdec.stream.loader import load
from specdec.stream.mixed import resident_mixed
from tests.helpers import (
    assert_greedy_match,
    assert_logits_match,
    fast_cases,
    random_checkpoint,
    resident_logits,
)


def hot_pairs(model_dir) -> list[tuple[int, int]]:
    """Every third expert of every MoE layer, and expert 1 (so no layer is all one kind)."""
    _, layers = plan(model_dir)
    return [(lid, e) for lid, (ly, _) in layers.items() for e in range(ly.n_experts) if e % 3 == 1]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("mixed")


def mixed_pack(root, family: str, bits: int | None):
    src = random_checkpoint(root, family, bits)
    out = root / f"{src.name}-mixed"
    if not out.exists():
        pack(src, out, cold_bits=2, hotlist=hot_pairs(src))
    return src, out


@pytest.mark.parametrize("bits", [None, 4])
def test_pack_requantizes_exactly_the_cold_experts(root, bits):
    src, out = mixed_pack(root, "qwen3_moe", bits)
    index, hot = ExpertIndex.load(out), set(hot_pairs(src))
    weights = {}
    for f in sorted(src.glob("model*.safetensors")):
        weights.update(mx.load(str(f)))
    blocks = np.fromfile(out / EXPERTS_BIN, dtype=np.uint8)
    assert verify(out).blocks == index.n_blocks
    for lid, ly in index.layers.items():
        assert ly.cold is not None and ly.cold.block_bytes <= ly.block_bytes
        if bits is None:  # 4-bit toy blocks (64 x 64) round up to the same 8 KiB either way
            assert ly.cold.block_bytes < ly.block_bytes
        assert [(lid, e) not in hot for e in range(ly.n_experts)] == ly.is_cold.tolist()
        assert {q.bits for q in ly.cold.quant.values()} == {2}
        ends = ly.offsets + ly.sizes()
        assert (ly.offsets[1:] == ends[:-1]).all(), "blocks back to back, each its own size"
        for e in (0, 1):  # expert 0 is cold, expert 1 hot
            start = int(ly.offsets[e])
            block = blocks[start : start + ly.block_size(e)]
            assert zlib.crc32(block) == ly.crc32[e]
            w = weights[f"{ly.prefix}.gate_proj.weight"][e]
            if bits is not None:
                q = {k: weights[f"{ly.prefix}.gate_proj.{k}"][e] for k in ("scales", "biases")}
                w_float = mx.dequantize(w, q["scales"], q["biases"], group_size=64, bits=bits)
            else:
                w_float = w
            spec = (ly.cold if ly.is_cold[e] else ly).tensor("gate_proj.weight")
            got = block[spec.offset : spec.offset + spec.nbytes]
            want = mx.quantize(w_float, group_size=64, bits=2)[0] if ly.is_cold[e] else w
            assert got.tobytes() == np.array(want).tobytes()
    assert (out / EXPERTS_BIN).stat().st_size == index.file_bytes
    read_safetensors_header(out / "model.safetensors")  # resident weights packed as usual


@pytest.mark.parametrize(
    "family,bits", fast_cases([("deepseek_v3", 4), ("qwen3_moe", None), ("mixtral", 4)])
)
def test_streamed_equals_resident_mixed(root, family, bits):
    _, out = mixed_pack(root, family, bits)
    ref = resident_mixed(out)
    sm = load(out, budget="30%", policy="lru", io="buffered", with_mtp=False)
    try:
        rng = np.random.default_rng(1)
        prompt = rng.integers(0, ref.args.vocab_size, 16).tolist()
        ref_cache, st_cache = make_prompt_cache(ref), make_prompt_cache(sm.model)
        want = resident_logits(ref, prompt, ref_cache)
        got = resident_logits(sm.model, prompt, st_cache)
        worst = float(np.abs(want - got).max())
        tok = int(want[-1].argmax())
        for _ in range(24):
            want = resident_logits(ref, [tok], ref_cache)
            got = resident_logits(sm.model, [tok], st_cache)
            worst = max(worst, float(np.abs(want - got).max()))
            tok = int(want[-1].argmax())
        assert_logits_match(worst, bits, f"mixed {family} bits={bits}")
        cache = sm.streamer.cache
        for pool in (cache.hot, cache.cold):  # both pools evicted and re-read
            assert pool.evictions > 0 and pool.hits > 0
        log_bytes = sum(s.bytes_read for s in sm.streamer.drain())
        assert log_bytes == sm.streamer.reader.stats.bytes_read
        index = sm.streamer.index
        sizes = [pool_index(index, cold).slot_bytes for cold in (False, True)]
        assert log_bytes == cache.hot.misses * sizes[0] + cache.cold.misses * sizes[1]
    finally:
        sm.close()


@pytest.mark.parametrize(
    "budget,warm,lookahead", fast_cases([("30%", False, 0), ("100%", True, 0), ("40%", False, 1)])
)
def test_greedy_equals_resident_mixed(root, budget, warm, lookahead):
    _, out = mixed_pack(root, "deepseek_v3", 4)
    ref = resident_mixed(out)
    prompt = np.random.default_rng(2).integers(0, ref.args.vocab_size, 12).tolist()
    steps = list(generate_step(mx.array(prompt), ref, max_tokens=24))
    sm = load(out, budget=budget, warm=warm, lookahead=lookahead, io="buffered", with_mtp=False)
    try:
        res = generate(sm, prompt, "none", DecodeConfig(max_tokens=24), stop_at_eos=False)
        if warm:
            assert sm.plan.holds_all and not sm.streamer.reader.stats.reads - sm.plan.n_slots
            with sm.streamer.counted(True) as counts:  # its pools count hits by key: replayed
                assert not counts
    finally:
        sm.close()
    ref_logprobs = [np.array(lp.astype(mx.float32)) for _, lp in steps]
    assert_greedy_match(res.tokens, [int(t) for t, _ in steps], ref_logprobs, 4, "mixed greedy")


def test_budget_splits_bytes_over_the_pools(root):
    _, out = mixed_pack(root, "qwen3_moe", None)  # float hot blocks: cold ones are smaller
    index = ExpertIndex.load(out)
    hot_n = sum(int((~ly.is_cold).sum()) for ly in index.layers.values())
    cold_n = index.n_blocks - hot_n
    full = plan_pools("100%", index, top_k=4)
    assert full.holds_all and (full.hot.n_slots, full.cold.n_slots) == (hot_n, cold_n)
    budget = full.stats()["cache_bytes"] * 2 // 5  # 40% of every block's bytes, as bytes
    part = plan_pools(f"{budget}B", index, top_k=4)
    cached = part.stats()["cache_bytes"]
    assert budget - part.hot.slot_bytes - part.cold.slot_bytes < cached <= budget
    # each pool holds about the same share of its own experts
    assert abs(part.hot.n_slots / hot_n - 0.4) < 0.1 and abs(part.cold.n_slots / cold_n - 0.4) < 0.1
    assert part.n_slots > budget // part.hot.slot_bytes, "smaller cold blocks buy more slots"


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["lru", "lru+demote+protect"])
def test_mtp_drafter_lossless_on_mixed_tiny(tmp_path, policy):
    src = resolve_model("tiny")
    _, layers = plan(src)
    hot = [(lid, e) for lid, (ly, _) in layers.items() for e in range(0, ly.n_experts, 4)]
    out = pack(src, tmp_path / "tiny-mixed", cold_bits=2, hotlist=hot)
    sm = load(out, budget="25%", policy=policy, io="buffered")
    try:
        prompt = sm.encode("def fibonacci(n):")
        plain = generate(sm, prompt, "none", DecodeConfig(max_tokens=24), stop_at_eos=False)
        sm.reset_cache()
        spec = generate(sm, prompt, "mtp", DecodeConfig(gamma=3, max_tokens=24), stop_at_eos=False)
    finally:
        sm.close()
    assert spec.tokens == plain.tokens
    if "demote" in policy:  # both pools judged the passes
        assert sm.streamer.cache.hot.demoted + sm.streamer.cache.cold.demoted > 0


def test_access_share_splits_like_one_lru_over_both_sizes(root, tmp_path):
    src, _ = mixed_pack(root, "qwen3_moe", None)
    out = pack(src, tmp_path / "split", cold_bits=2, hotlist=hot_pairs(src), hot_access_share=0.6)
    index = ExpertIndex.load(out)
    full = plan_pools("100%", index, top_k=4)
    assert full.holds_all
    budget = full.stats()["cache_bytes"] // 4
    part = plan_pools(f"{budget}B", index, top_k=4)
    hot_b, cold_b = (p.n_slots * p.slot_bytes for p in (part.hot, part.cold))
    want = 0.6 * part.hot.slot_bytes / (0.6 * part.hot.slot_bytes + 0.4 * part.cold.slot_bytes)
    assert abs(hot_b - want * budget) <= part.hot.slot_bytes  # floor to whole slots
    assert abs(cold_b - (1 - want) * budget) <= part.cold.slot_bytes + part.hot.slot_bytes


def _bias_layout(dtype: str) -> LayerLayout:
    """One layer of two experts whose block holds only an up_proj bias of `dtype` (4 values)."""
    spec = TensorSpec("up_proj.bias", dtype, (4,), 0, 32)
    return LayerLayout("model.layers.1.mlp.switch_mlp", 2, 4096, [spec], np.zeros(2), np.zeros(2))


@pytest.mark.parametrize(
    "dtype, name",
    [(mx.float64, "F64"), (mx.int64, "I64"), (mx.uint64, "U64"), (mx.bool_, "BOOL")],
)
def test_cold_layout_names_every_safetensors_dtype(dtype, name):
    # an expert bias is copied into the cold block as it is: its dtype keeps its name
    cold = cold_layout(_bias_layout(name), {"up_proj.bias": mx.zeros((4,), dtype=dtype)}, 2)
    assert [(t.name, t.dtype) for t in cold.tensors] == [("up_proj.bias", name)]


def test_cold_layout_refuses_a_dtype_safetensors_cannot_hold_in_one_line():
    with pytest.raises(StoreError) as e:
        cold_layout(_bias_layout("F32"), {"up_proj.bias": mx.zeros((4,), dtype=mx.complex64)}, 2)
    msg = str(e.value)
    assert msg.startswith("tensor model.layers.1.mlp.switch_mlp.up_proj.bias is complex64")
    assert "mlx_lm.convert --dtype" in msg and "\n" not in msg
