"""libCacheSim as a peer: our LRU, LFU and Belady against its own, on the same requests.

pytest tests/sim/test_lcs.py

On steps of one key the step semantics are the request semantics, so every access must agree.
On top-k steps they differ (a request-level cache can evict a key of the current step before
its own request comes): the difference is measured, and must stay small.
"""

from __future__ import annotations

import numpy as np
import pytest

from specdec.core.errors import SpecdecError
from specdec.core.units import Budget
from specdec.sim.lcs import lcs_hits, lcs_process, write_oracle_trace
from specdec.sim.replay import Access, access_sequence, policy_hits
from specdec.sim.simulate import simulate
from specdec.trace.synthetic import synthetic_trace


@pytest.mark.parametrize("seed", [0, 1])
def test_one_key_steps_agree_access_by_access(seed, tmp_path):
    keys = (np.random.default_rng(seed).zipf(1.3, size=4000) % 80).tolist()
    acc = Access.from_steps([[k] for k in keys], 80)
    write_oracle_trace(acc.keys, tmp_path / "req.bin")
    for n in (4, 19, 60):
        for ours, theirs in (("lru", "LRU"), ("lfu", "LFU"), ("belady", "Belady")):
            mine = policy_hits(ours, acc, n)[0]
            assert mine.tolist() == lcs_hits(theirs, acc, n).tolist(), (ours, n)
            miss_ratio = lcs_process(theirs, tmp_path / "req.bin", n, 80)
            assert round((1 - miss_ratio) * len(keys)) == mine.sum()


def test_top_k_steps_against_requests():
    """8 layers x top-8: one token's experts are 64 keys. Near that budget a request-level LRU
    evicts keys of the running step before their own request (0.33 vs 0.47 hit rate at 64
    slots); from 2.5 tokens' worth up the two agree within a point. A request-level Belady may
    evict a key its step already used, so it sits between step Belady and opt_bypass (both
    orders are theorems: every step schedule is a request schedule, and every request schedule
    a bypass one)."""
    trace = synthetic_trace(400, n_layers=8, n_experts=64, top_k=8, seed=4)
    acc = access_sequence(trace)
    for n in (16, 64, 160, 300):
        belady = policy_hits("belady", acc, n)[0].sum()
        req = lcs_hits("Belady", acc, n).sum()
        assert belady <= req <= policy_hits("opt_bypass", acc, n)[0].sum(), n
        if n >= 160:
            for ours, theirs in (("lru", "LRU"), ("lfu", "LFU")):
                gap = policy_hits(ours, acc, n)[0].mean() - lcs_hits(theirs, acc, n).mean()
                assert abs(gap) < 0.01, (ours, n, gap)


def test_lcs_policies_in_simulate():
    trace = synthetic_trace(60, n_layers=4, n_experts=32, top_k=4, seed=1)
    names = ["lcs:ARC", "lcs:LIRS", "lcs:S3FIFO", "lcs:Sieve", "lcs:WTinyLFU", "opt_bypass"]
    # WTinyLFU's window is 1% of the cache: below 100 slots it has none and never hits
    rows = simulate(trace, names, [Budget(slots=100)], gammas=[1, 2])
    bound = {r.gamma: r.misses for r in rows if r.policy == "opt_bypass"}
    for r in rows:
        assert 0 < r.hits < r.accesses and r.misses >= bound[r.gamma], r.policy
    with pytest.raises(SpecdecError, match="unknown libCacheSim policy lcs:NOPE: use one of"):
        simulate(trace, ["lcs:NOPE"], [Budget(slots=24)])
