"""Bring your own checkpoint: every MoE family make-random builds streams exactly, and its router
adapter, self-draft, lookahead and trace recording work (specdec.bench.coverage runs the checks).

Run: `pytest tests/checkpoint/test_families.py` (~1 min on 2 cores). Each family's tiny checkpoint is built
from mlx-lm's own class; streamed logits and greedy tokens are held to the exactness contract
(tests/helpers.py) against mlx-lm's resident model, at a 40% budget. Families with untrimmable
caches speculate by restoring their state (decode/rollback.py: self-draft at γ 2 == plain), and a
cache that can be neither trimmed nor restored refuses γ > 1 in one line; a family without a router adapter streams and decodes, and
the features that need one say so; a dense checkpoint is refused in one line.
"""

from __future__ import annotations

import dataclasses
import json

import mlx.core as mx
import pytest

from specdec.bench.coverage import check_family
from specdec.checkpoint import families as families_module
from specdec.checkpoint.families import FAMILIES as ROUTED
from specdec.checkpoint.families import TINY_FAMILIES as FAMILIES
from specdec.checkpoint.random_models import MTP_FAMILIES, make_random
from specdec.core.errors import SpecdecError
from specdec.decode.loop import DecodeConfig
from specdec.decode.run import generate
from specdec.pack.pack import pack
from specdec.probes.capture import MoETap
from specdec.store.layout import ExpertIndex
from specdec.stream.loader import load
from tests.helpers import assert_greedy_match, assert_logits_match, fast_cases

ALL = sorted(FAMILIES)
QUANTIZED = ["deepseek_v41", "gpt_oss", "granitemoe", "qwen3_next"]  # 4-bit: mixed-bit recipes too
ASKED_FOR = {  # the list
    "gpt_oss", "qwen3_next", "llama4", "olmoe", "phimoe", "granitemoe", "deepseek_v2",
    "deepseek_v41", "ernie4_5_moe", "dots1", "lfm2_moe", "bailing_moe",
}  # fmt: skip


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("families")


def test_coverage_is_what_the_readme_claims():
    assert len(ALL) >= 20 and ASKED_FOR <= set(ALL)
    assert len([f for f in ALL if f in ROUTED]) >= 12


@pytest.mark.parametrize(
    "family,bits",
    fast_cases(
        [(f, None) for f in ALL] + [(f, 4) for f in QUANTIZED],
        ("qwen3_next", 4),
    ),
)
def test_family_streams_exactly_and_its_features_work(root, tmp_path, monkeypatch, family, bits):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    r = check_family(family, root, bits, tokens=6)
    what = f"{family} bits={bits}"
    assert r.streams
    assert_logits_match(r.worst, bits, what)
    assert_greedy_match(r.greedy, r.ref_greedy, r.ref_logits, bits, what)
    assert r.router, f"{what}: {r.notes}"
    assert r.trace
    # what lets a full-budget decode count its steps (specdec.stream.streamer): seen, not assumed
    assert r.distinct and ROUTED[family].distinct_picks
    assert_logits_match(r.lookahead_worst, bits, f"{what} lookahead 1")
    # every family, the untrimmable ones (deepseek_v41, the ArraysCache hybrids) by restoring
    assert r.can_speculate, r.notes
    assert r.self_draft is True
    assert r.mtp == (family in MTP_FAMILIES)


def test_an_untrimmable_family_speculates_and_an_unrestorable_cache_says_why_not(
    root, tmp_path, monkeypatch
):
    from specdec.decode import rollback

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    src = make_random("qwen3_next", tmp_path / "q")
    sm = load(src, budget="50%", with_mtp=False)
    try:
        plain = generate(sm, [1, 2, 3], "none", DecodeConfig(1, 6), stop_at_eos=False).tokens
        sm.reset_cache()
        spec = generate(sm, [1, 2, 3], "lookup", DecodeConfig(2, 6), stop_at_eos=False).tokens
        assert spec == plain
        monkeypatch.setattr(rollback, "_restorable", lambda c: False)  # as a CacheList would be
        with pytest.raises(SpecdecError, match=r"ArraysCache.*use --gamma 1 \(got 2\)"):
            generate(sm, [1, 2, 3], "lookup", DecodeConfig(2, 4), stop_at_eos=False)
    finally:
        sm.close()


def test_a_family_without_router_adapter_streams_and_says_what_needs_one(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    no_route = dataclasses.replace(families_module.FAMILIES["olmoe"], route=None)
    monkeypatch.setitem(families_module.FAMILIES, "olmoe", no_route)
    src = make_random("olmoe", tmp_path / "o")
    sm = load(src, budget="50%", with_mtp=False)
    try:
        plain = generate(sm, [1, 2, 3], "none", DecodeConfig(1, 6), stop_at_eos=False).tokens
        sm.reset_cache()
        assert (
            generate(sm, [1, 2, 3], "lookup", DecodeConfig(2, 6), stop_at_eos=False).tokens == plain
        )
        for run in (
            lambda: generate(sm, [1, 2, 3], "self", DecodeConfig(2, 6)),
            lambda: MoETap(sm.model, sm.family),
            lambda: load(src, budget="50%", lookahead=1),
        ):
            with pytest.raises(SpecdecError, match="no router adapter for olmoe"):
                run()
    finally:
        sm.close()


def test_a_dense_checkpoint_is_refused_in_one_line(tmp_path):
    from mlx_lm.models import llama
    from mlx_lm.utils import save_config, save_model

    config = {
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 64,
        "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
        "vocab_size": 512, "tie_word_embeddings": False,
    }  # fmt: skip
    model = llama.Model(llama.ModelArgs.from_dict(config))
    mx.eval(model.parameters())
    (tmp_path / "dense").mkdir()
    save_model(tmp_path / "dense", model)
    save_config(config, tmp_path / "dense" / "config.json")
    with pytest.raises(SpecdecError, match="'llama' has no routed experts") as e:
        pack(tmp_path / "dense", tmp_path / "out")
    assert "\n" not in str(e.value)


def test_switch_linear_outside_a_switch_module_stays_resident(tmp_path):
    """DeepSeek-V4.1's grouped attention output is a SwitchLinear but not an expert."""
    src = make_random("deepseek_v41", tmp_path / "d")
    index = ExpertIndex.load(pack(src, tmp_path / "p"))
    assert {lay.prefix for lay in index.layers.values()} == {
        f"model.layers.{i}.mlp.experts.switch_mlp"
        for i in range(4)  # 3: the V4 MTP layer
    }
    header = json.loads(
        (tmp_path / "p" / "model.safetensors").read_bytes()[8:].split(b"}}")[0] + b"}}"
    )
    assert any(".o_a_proj." in name for name in header)


def test_experts_with_a_global_scale_are_refused_not_mis_streamed(tmp_path):
    """nvfp4 experts carry a per-expert global scale that the arena's gather_qmm does not take."""
    src = make_random("olmoe", tmp_path / "o")
    weights = mx.load(str(src / "model.safetensors"))
    weights["model.layers.0.mlp.switch_mlp.gate_proj.global_scale"] = mx.ones((16,))
    mx.save_safetensors(str(src / "model.safetensors"), weights)
    with pytest.raises(SpecdecError, match="global scale"):
        pack(src, tmp_path / "p")
