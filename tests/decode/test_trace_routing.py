"""`--routing trace:DIR`: the real forward with every MoE layer using a trace's experts.

pytest tests/decode/test_trace_routing.py
"""

from __future__ import annotations

import numpy as np
import pytest

from specdec.core.errors import SpecdecError
from specdec.decode.loop import DecodeConfig
from specdec.decode.run import generate
from specdec.stream.loader import load
from specdec.trace.synthetic import synthetic_trace


@pytest.fixture(scope="module")
def tiny():
    sm = load("tiny", budget="25%", io="buffered", with_mtp=False)
    yield sm
    sm.close()


@pytest.fixture(scope="module")
def trace():
    return synthetic_trace(200, n_layers=4, n_experts=32, top_k=4, seed=5)


def _rows(rec, layer_ids):
    return np.stack([np.sort(np.array(rec.routing[str(lid)]), -1) for lid in layer_ids], 1)


def test_each_position_uses_the_traces_experts(tiny, trace):
    prompt = tiny.encode("def f(x):")
    tiny.reset_cache()
    res = generate(tiny, prompt, "none", DecodeConfig(1, 12), records_path=None, routing=trace)
    assert res.summary["routing"].startswith("trace:")
    tiny.reset_cache()
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        res = generate(tiny, prompt, "none", DecodeConfig(1, 12), records_path=Path(d) / "r.jsonl",
                       stop_at_eos=False, routing=trace)  # fmt: skip
    layers = tiny.main_moe_layers
    for i, rec in enumerate(res.records):
        pos = len(prompt) + i  # the pass feeds the last committed token at this position
        want = np.sort(trace.experts[pos % len(trace.experts)], -1)  # [L, k]
        assert np.array_equal(_rows(rec, layers)[0], want), i
    # the router's own routing is a different one
    tiny.reset_cache()
    own = generate(tiny, prompt, "none", DecodeConfig(1, 12), stop_at_eos=False)
    assert own.summary["routing"] == "model"
    assert own.summary["bytes_read"] != res.summary["bytes_read"]


def test_speculation_under_trace_routing_is_lossless_and_rejects_route_apart(tiny, trace):
    prompt = tiny.encode("import os\n")
    tiny.reset_cache()
    plain = generate(tiny, prompt, "none", DecodeConfig(1, 24), stop_at_eos=False, routing=trace)
    import tempfile
    from pathlib import Path

    tiny.reset_cache()
    with tempfile.TemporaryDirectory() as d:
        spec = generate(tiny, prompt, "oracle:0.6", DecodeConfig(4, 24),
                        records_path=Path(d) / "r.jsonl", stop_at_eos=False, routing=trace)  # fmt: skip
    assert spec.tokens == plain.tokens
    layers, T = tiny.main_moe_layers, len(trace.experts)
    apart, start = 0, len(prompt)  # the first pass feeds the prefill's token at len(prompt)
    for rec in spec.records:
        rows = _rows(rec, layers)  # [γ, L, k]
        want = [np.sort(trace.experts[(start + i) % T], -1) for i in range(len(rows))]
        for i in range(rec.accepted + 1):  # the committed positions: the trace's experts
            assert np.array_equal(rows[i], want[i]), (rec.pass_idx, i)
        apart += sum(
            not np.array_equal(rows[i], want[i]) for i in range(rec.accepted + 1, len(rows))
        )
        start += rec.committed
    assert apart > 0, "rejected drafts route as the replay models them, not as the trace"


def test_trace_routed_greedy_is_the_same_at_every_budget(tiny, trace):
    # given routing leaves only the slots to vary with the budget, and streaming must not change
    # what the model computes (on the H200 trace-routed plain split by budget at 16 layers)
    prompt = tiny.encode("import os\n")
    tiny.reset_cache()
    want = generate(tiny, prompt, "none", DecodeConfig(1, 24), stop_at_eos=False, routing=trace)
    for budget, warm in (("16slots", False), ("100%", True)):
        sm = load("tiny", budget=budget, io="buffered", with_mtp=False, warm=warm)
        try:
            got = generate(sm, prompt, "none", DecodeConfig(1, 24), stop_at_eos=False,
                           routing=trace)  # fmt: skip
        finally:
            sm.close()
        assert got.tokens == want.tokens, budget
        assert got.summary["hit_rate"] != want.summary["hit_rate"], "the budgets must differ"


def test_a_trace_of_another_shape_is_refused(tiny):
    other = synthetic_trace(50, n_layers=4, n_experts=16, top_k=4, seed=1)
    with pytest.raises(SpecdecError, match="record or synthesize a trace of this model's shape"):
        generate(tiny, [1, 2, 3], "none", DecodeConfig(1, 4), routing=other)
