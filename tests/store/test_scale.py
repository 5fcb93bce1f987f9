"""Real scale, cheaply: an arena past 2 GiB, expert blocks past 32 MiB, budgets past the model or
the machine, and real-shape checkpoints from `make-random --like`.

Run: `pytest tests/store/test_scale.py` (~2.2 GB of memory for a second in the arena test; the
multi-GB checkpoints and their decode live in benchmarks/bench_scale.py).
"""

from __future__ import annotations

import json

import mlx.core as mx
import mlx_lm
import numpy as np
import pytest
from mlx_lm.models.cache import make_prompt_cache

from specdec.checkpoint.presets import PRESETS, like_config
from specdec.checkpoint.random_models import make_random
from specdec.checkpoint.random_scale import make_like
from specdec.core.errors import BudgetError, SpecdecError
from specdec.core.units import Budget
from specdec.decode.loop import DecodeConfig
from specdec.decode.run import generate
from specdec.pack.pack import pack
from specdec.pack.verify import verify
from specdec.store.arena import Arena
from specdec.store.budget import plan_slots
from specdec.store.layout import ExpertIndex, TensorSpec
from specdec.stream import loader
from tests.helpers import assert_logits_match, resident_logits


@pytest.mark.slow
def test_arena_past_2gib_computes_on_its_last_slot():
    """A tensor region past 2 GiB (2^17 + 8 slots of a 16 KiB weight: a flat MLX array cannot
    hold it): gather_qmm on the view reads an expert written at byte offsets past 2^31, exactly."""
    w = mx.random.normal((1, 128, 256), key=mx.random.key(0)).astype(mx.bfloat16)
    wq, scales, biases = mx.quantize(w, group_size=64, bits=4)  # [1, 128, 32] u32, [1, 128, 4]
    specs, offset = [], 0
    for name, t, dtype in (
        ("weight", wq, "U32"),
        ("scales", scales, "BF16"),
        ("biases", biases, "BF16"),
    ):
        specs.append((TensorSpec(f"p.{name}", dtype, t.shape[1:], offset, t[0].nbytes), t))
        offset += -(-t[0].nbytes // 64) * 64
    n = (1 << 17) + 8
    arena = Arena(n, -(-offset // 4096) * 4096, [sp for sp, _ in specs], huge_pages=False)
    try:
        last = n - 1
        pieces = arena.segments(last)
        assert (pieces[0].ctypes.data - arena.segments(0)[0].ctypes.data) > 2**31
        views = []
        for (spec, t), piece in zip(specs, pieces, strict=False):
            raw = np.array(t[0].view(mx.uint8) if t.dtype != mx.uint32 else t[0]).view(np.uint8)
            piece[:] = raw.ravel()
            views.append(arena.tensor_view(spec))  # [n, *shape]
        x = mx.random.normal((1, 1, 256), key=mx.random.key(1)).astype(mx.bfloat16)
        kw = dict(transpose=True, group_size=64, bits=4)
        got = mx.gather_qmm(x, *views, rhs_indices=mx.array([last]), **kw)
        want = mx.gather_qmm(x, wq, scales, biases, rhs_indices=mx.array([0]), **kw)
        assert mx.array_equal(got, want).item()
    finally:
        del arena
        mx.clear_cache()


def test_arena_refuses_blocks_past_one_mlx_row():
    with pytest.raises(SpecdecError, match="too large for one MLX array row"):
        Arena(1, 2**31)


@pytest.fixture(scope="module")
def big_blocks(tmp_path_factory):
    """A mixtral checkpoint with 34.6 MB float32 expert blocks (hidden 64, expert width 45056),
    two experts (top-2), one layer: `specdec verify` used to need 64 of them in one array."""
    root = tmp_path_factory.mktemp("big-blocks")
    src = make_random(
        "mixtral",
        root / "src",
        overrides={"intermediate_size": 45056, "num_local_experts": 2, "num_hidden_layers": 1},
    )
    packed = pack(src, root / "packed")
    return src, packed


@pytest.mark.slow
def test_blocks_past_32mib_verify_and_decode_exactly(big_blocks):
    src, packed = big_blocks
    assert ExpertIndex.load(packed).slot_bytes > 32 << 20
    report = verify(packed, io="buffered")
    assert report.blocks == 2
    ref_model, _ = mlx_lm.load(str(src))
    sm = loader.load(packed, budget="2slots", io="buffered")
    try:
        prompt = [5, 17, 300, 42]
        ref = resident_logits(ref_model, prompt, make_prompt_cache(ref_model))
        got = resident_logits(sm.model, prompt, make_prompt_cache(sm.model))
        assert_logits_match(float(np.abs(ref - got).max()), None, "34.6 MB blocks")
    finally:
        sm.close()


def test_budget_above_the_model_holds_every_expert_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    sm = loader.load("tiny", budget="100GB", io="buffered", with_mtp=False)
    try:
        n_main = sum(sm.streamer.index.layers[lid].n_experts for lid in sm.main_moe_layers)
        assert sm.streamer.arena.n_slots == n_main  # never more slots than experts
        res = generate(sm, sm.encode("def f(x):"), "none", DecodeConfig(max_tokens=4))
    finally:
        sm.close()
    s = res.summary
    assert s["holds_all_experts"] is True and s["cache_slots"] == n_main
    assert s["requested_slots"] > n_main
    assert 0 < s["peak_rss_bytes"] < 4 << 30
    assert set(s["per_token_ms"]) == {"compute", "blocked_on_reads", "reads_overlapped"}
    assert all(r.peak_rss_bytes > 0 for r in res.records)


def test_budget_beyond_memory_fails_before_allocating(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    index = ExpertIndex.load(loader.ensure_packed(loader.resolve("tiny")))
    with pytest.raises(BudgetError, match=r"only 1\.0MiB of memory is available.*at most \d+slots"):
        plan_slots(Budget.parse("100%"), index, top_k=4, resident_bytes=0, available=1 << 20)
    monkeypatch.setattr("specdec.store.budget.available_memory", lambda: 1 << 20)

    def no_arena(*a, **k):
        raise AssertionError("the arena was allocated before the memory check")

    monkeypatch.setattr(loader, "Arena", no_arena)
    with pytest.raises(BudgetError, match="of memory is available"):
        loader.load("tiny", budget="100%", io="buffered")


def test_like_config_keeps_real_dimensions():
    cfg = like_config("deepseek-v3", layers=2)
    assert (cfg["hidden_size"], cfg["moe_intermediate_size"], cfg["n_routed_experts"]) == (
        7168,
        2048,
        256,
    )
    assert cfg["first_k_dense_replace"] == 1 and cfg["vocab_size"] == 512
    assert like_config("minimax-m2.5")["num_hidden_layers"] == 62
    assert {"minimax-m2.5", "deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b"} <= set(PRESETS)
    with pytest.raises(SpecdecError, match="presets: deepseek-v3"):
        like_config("llama-70b")


@pytest.mark.slow
def test_make_like_writes_what_mlx_lm_convert_writes(tmp_path):
    """Real qwen3-30b-a3b dimensions (one layer, 16 of 128 experts): 4-bit, group 64, bf16 scales, 8-bit
    routers (mlx-lm's quant_predicate); mlx_lm.load opens it; routing varies across tokens."""
    out = make_like("qwen3-30b-a3b", tmp_path / "q", layers=1, experts=16, shard_bytes=24 << 20)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["quantization"]["bits"] == 4 and cfg["quantization"]["group_size"] == 64
    assert cfg["quantization"]["model.layers.0.mlp.gate"]["bits"] == 8
    shards = sorted(out.glob("model-*.safetensors"))
    assert len(shards) >= 2  # written shard by shard
    w = {}
    for f in shards:
        w.update(mx.load(str(f)))
    gate = w["model.layers.0.mlp.switch_mlp.gate_proj.weight"]
    assert gate.shape == (16, 768, 2048 // 8) and gate.dtype == mx.uint32
    assert w["model.layers.0.mlp.switch_mlp.gate_proj.scales"].dtype == mx.bfloat16
    model, tok = mlx_lm.load(str(out))
    ids = tok.encode("for i in range(10): print(i)")
    logits = model(mx.array([ids[:3]]))  # bf16 quantized matmuls crawl on CPU: few tokens
    assert bool(mx.isfinite(logits).all())
    layer = model.model.layers[0]
    h = layer.post_attention_layernorm(model.model.embed_tokens(mx.array(ids)))
    inds = mx.argpartition(-layer.mlp.gate(h), 8, axis=-1)[:, :8]  # [T, 8]
    assert len({tuple(sorted(r)) for r in inds.tolist()}) > len(ids) // 2


def test_cli_make_random_like_errors(tmp_path, capsys):
    from specdec.cli import main

    assert main(["make-random", "--like", "llama-70b", str(tmp_path / "x")]) == 2
    assert main(["make-random", "--like", "mixtral-8x7b", "mixtral", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "presets: deepseek-v3" in err[0] and "not both" in err[1]
    assert not (tmp_path / "x").exists()
