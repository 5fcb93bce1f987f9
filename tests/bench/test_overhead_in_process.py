"""`specdec bench overhead`'s in-process comparison runs on a model of any depth.

    pytest tests/bench/test_overhead_in_process.py

It asked for lookahead 2 on every model, so a model of 2 MoE layers (the MiniMax-shaped
checkpoint the H200 benchmark uses) was refused after its other figures were measured, and all
of them were lost. A real random checkpoint, real decodes; nothing here is timed.
"""

from __future__ import annotations

import pytest

from specdec.bench.overhead import in_process
from specdec.checkpoint.random_models import make_random
from specdec.decode import loop


@pytest.mark.parametrize("layers, ahead", [(2, 1), (3, 2)])
def test_in_process_looks_ahead_as_far_as_the_model_allows(tmp_path, monkeypatch, layers, ahead):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    src = make_random("qwen3_moe", tmp_path / "m", bits=4, overrides={"num_hidden_layers": layers})
    held = loop.HELD_TOKENS
    out = in_process(str(src), tokens=4, repeats=1, lookahead_budget="50%")
    assert out["moe_layers"] == layers
    # the held tokens' A/B ran, and left the decode loop's constant as it found it
    assert len(out["streamed_steps_each_token_tokens_per_s"]["all"]) == 1
    assert loop.HELD_TOKENS == held
    assert set(out["host_us_per_moe_layer"]) == {
        "full_budget",
        "full_budget_synced",
        f"full_budget_lookahead_{ahead}",
        "budget_50%_lookahead_0",
        f"budget_50%_lookahead_{ahead}",
    }
