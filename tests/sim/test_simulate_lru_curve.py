"""The one-pass LRU curve equals one LRU replay per budget, exactly, per layer too.

pytest tests/sim/test_simulate_lru_curve.py
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.cache.expert_cache import ExpertCache
from specdec.cache.policies import make_policy
from specdec.core.errors import BudgetError
from specdec.core.units import Budget
from specdec.sim.bounds import lru_curve_steps
from specdec.sim.simulate import simulate, trace_steps
from specdec.trace.synthetic import synthetic_trace


def _replay_hits(steps, n, group_size=None):
    """LRU replay through ExpertCache: total hits, or hits per key group."""
    cache = ExpertCache(n, make_policy("lru", n))
    groups: dict[int, int] = {}
    for ks in steps:
        missed = cache.access(ks)
        missed = {k for k, _ in missed}
        for k in ks:
            if k not in missed and group_size:
                groups[k // group_size] = groups.get(k // group_size, 0) + 1
    return cache.hits if group_size is None else groups


steps_st = st.lists(
    st.sets(st.integers(0, 13), min_size=1, max_size=5).map(sorted), min_size=1, max_size=80
)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(steps=steps_st, data=st.data())
def test_curve_equals_replays(steps, data):
    widest = max(map(len, steps))
    every = list(range(widest, 16))
    budgets = data.draw(st.lists(st.sampled_from(every), min_size=1, max_size=6))  # sparse too
    assert lru_curve_steps(steps, budgets).tolist() == [_replay_hits(steps, n) for n in budgets]


@settings(max_examples=60, deadline=None)
@given(steps=steps_st)
def test_curve_per_group_equals_replays(steps):
    widest = max(map(len, steps))
    budgets = list(range(widest, 15, 2))
    by_group = lru_curve_steps(steps, budgets, group_size=4)  # [B, G]
    for row, n in zip(by_group, budgets, strict=True):
        want = _replay_hits(steps, n, group_size=4)
        assert {g: int(h) for g, h in enumerate(row) if h} == want


def test_lru_is_not_a_stack_algorithm_here():
    # Hits are touched before misses, so recency inside a step depends on the budget: the key 2
    # of the last step hits with 4 slots and misses with 5. A single stack distance per access
    # cannot express that; the curve still matches the replays.
    steps = [[0, 2, 6], [3, 4, 5, 6], [0, 2, 4, 5], [0], [1, 3], [2, 3, 6]]

    def last_step_hits(n):
        cache = ExpertCache(n, make_policy("lru", n))
        for ks in steps:
            missed = cache.access(ks)
        return [k for k in steps[-1] if k not in {m for m, _ in missed}]

    assert 2 in last_step_hits(4) and 2 not in last_step_hits(5)
    assert lru_curve_steps(steps, [4, 5]).tolist() == [
        _replay_hits(steps, 4),
        _replay_hits(steps, 5),
    ]


def test_simulate_lru_rows_match_replays_on_a_synthetic_trace():
    trace = synthetic_trace(120, n_layers=4, n_experts=16, top_k=4, seed=3)
    flat = [ks for position in trace_steps(trace) for ks in position]
    rows = simulate(trace, ["lru"], [Budget(slots=n) for n in (4, 9, 20, 40)])
    assert [r.hits for r in rows] == [_replay_hits(flat, n) for n in (4, 9, 20, 40)]
    assert all(r.hits + r.misses == r.accesses == 120 * 4 * 4 for r in rows)


def test_budget_below_widest_step():
    with pytest.raises(BudgetError, match="at least 3 slots"):
        lru_curve_steps([[1, 2, 3]], [2])
    assert np.array_equal(lru_curve_steps([[1, 2, 3], [1]], [3]), [1])
