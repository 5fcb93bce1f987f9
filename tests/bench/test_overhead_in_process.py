"""`specdec bench overhead`'s in-process comparison runs on a model of any depth.

    pytest tests/bench/test_overhead_in_process.py

It asked for lookahead 2 on every model, so a model of 2 MoE layers (the MiniMax-shaped
checkpoint the H200 benchmark uses) was refused after its other figures were measured, and all
of them were lost. A real random checkpoint, real decodes; nothing here is timed.
"""

from __future__ import annotations

import pytest

from specdec.bench.overhead import LOOP_PARTS, WIDE_HELD, in_process
from specdec.checkpoint.random_models import make_random
from specdec.decode import loop
from specdec.stream.streamer import Deferred

_RECORD = loop.Decode._record
_JOIN = Deferred.join


@pytest.mark.parametrize("layers, ahead", [(2, 1), (3, 2)])
def test_in_process_looks_ahead_as_far_as_the_model_allows(tmp_path, monkeypatch, layers, ahead):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    src = make_random("qwen3_moe", tmp_path / "m", bits=4, overrides={"num_hidden_layers": layers})
    held = loop.HELD_TOKENS
    out = in_process(str(src), tokens=4, repeats=1, lookahead_budget="50%")
    assert out["moe_layers"] == layers
    # the held tokens' A/B ran, and left the decode loop's constant as it found it
    assert len(out["streamed_steps_each_token_tokens_per_s"]["all"]) == 1
    assert len(out[f"streamed_steps_{WIDE_HELD}_tokens_tokens_per_s"]["all"]) == 1
    assert len(out["streamed_routing_per_call_tokens_per_s"]["all"]) == 1
    assert loop.HELD_TOKENS == held and Deferred.join is _JOIN
    # the loop's parts are exclusive wall times of one decode: together at most its token
    parts = out["loop_us_per_token"]
    assert parts["records_wall"] > 0 and parts["next_forward_wall"] > 0
    measured = sum(parts[f"{p}_wall"] for p in LOOP_PARTS)
    assert measured + parts["rest_wall"] == pytest.approx(parts["token_wall"])
    assert measured <= parts["token_wall"]
    assert loop.Decode._record is _RECORD  # every wrapped method handed back
    # the streamed token's graph is mlx-lm's node for node (its input's expand and its output's
    # squeeze against our pick's reshape and the take of its log-probability), but for that
    # take's gather and the routing joined for one host read (a reshape a MoE call, their
    # concatenation)
    nodes = out["graph_nodes"]
    assert nodes["mlx_lm"] > 20 * layers
    assert nodes["extra"] == {"Concatenate": 1, "GatherAxis": 1, "Reshape": layers + 1}
    assert set(out["host_us_per_moe_layer"]) == {
        "full_budget",
        "full_budget_synced",
        f"full_budget_lookahead_{ahead}",
        "budget_50%_lookahead_0",
        f"budget_50%_lookahead_{ahead}",
    }
