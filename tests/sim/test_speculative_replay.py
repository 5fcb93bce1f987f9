"""Speculative replay: verify passes as union steps, the acceptance process, rejected routing.

pytest tests/sim/test_speculative_replay.py
"""

from __future__ import annotations

import numpy as np
import pytest

from specdec.cache.expert_cache import ExpertCache
from specdec.cache.policies import make_policy
from specdec.core.units import Budget
from specdec.decode.trace_union import window_unions
from specdec.sim.bounds import Belady
from specdec.sim.replay import (
    access_sequence,
    plan_passes,
    rejected_routing,
    replay_trace,
    routing_model,
)
from specdec.sim.simulate import replay, simulate, trace_steps
from specdec.trace.format import hotlist_keys, profile_hotlist
from specdec.trace.synthetic import synthetic_trace

POLICIES = ("lru", "slru", "hotness", "lfu", "static", "belady")


@pytest.fixture(scope="module")
def trace():
    t = synthetic_trace(96, n_layers=4, n_experts=32, top_k=4, expert_bytes=[10, 10, 30, 20])
    t.prompt_ids = np.repeat([0, 1, 2], 32)
    return t


def _python_rows(trace, policy, n, hot):
    """Plain replay through the runtime's ExpertCache and classes, as before speculation."""
    steps = trace_steps(trace)
    flat = [ks for pos in steps for ks in pos]
    widest = max(map(len, flat))
    pol = (
        Belady(n, flat)
        if policy == "belady"
        else make_policy(policy, n, hotlist=hot, scratch=widest)
    )
    cache = ExpertCache(n, pol)
    cache.preload()
    E = trace.n_experts
    key_bytes = {k: trace.expert_bytes[k // E] for ks in flat for k in ks}
    missed, _ = replay(cache, steps, key_bytes, starts=frozenset([32, 64]))
    return cache.hits, missed


@pytest.mark.parametrize("policy", POLICIES)
def test_gamma_one_is_todays_plain_replay(trace, policy):
    hot = hotlist_keys(trace, profile_hotlist(trace))
    for n in (4, 9, 40):
        r = replay_trace(trace, policy, n, gamma=1, alpha=0.7, seed=3, hotlist=hot)
        hits, read = _python_rows(trace, policy, n, hot)
        assert (r.hits, r.bytes_read) == (hits, read), n
        assert r.committed == 96 and r.mean_union == 4.0


def test_full_acceptance_passes_cover_consecutive_windows(trace):
    for gamma in (2, 3, 8):
        acc = access_sequence(trace, gamma, 1.0)
        steps = acc.steps()
        e = trace.experts
        want = []  # pass p covers [p·γ, p·γ + γ) within each prompt, one step per layer
        for start in (0, 32, 64):
            for t in range(start, start + 32, gamma):
                for layer in range(4):
                    ks = e[t : min(t + gamma, start + 32), layer] + layer * 32
                    want.append(sorted(set(ks.ravel().tolist())))
        assert steps == want
        assert acc.committed == 96 and acc.tick.sum() == 96
        if 32 % gamma == 0:  # the question's union: windows of γ consecutive positions
            u = np.mean(
                [
                    window_unions(e[s : s + 32, layer], gamma)
                    for s in (0, 32, 64)
                    for layer in range(4)
                ]
            )
            assert np.mean(np.diff(acc.ptr)) == pytest.approx(u)


def test_union_steps_replay_as_the_runtime_steps_them(trace):
    """One ExpertCache.step(keys, counts) per layer of each pass, then tick(γ): what
    specdec.stream.streamed does with a forward call of γ positions."""
    gamma, n = 4, 24
    hot = hotlist_keys(trace, profile_hotlist(trace))
    acc = access_sequence(trace, gamma, 0.6, seed=1)
    for policy in ("lru", "hotness", "lfu", "slru"):
        cache = ExpertCache(n, make_policy(policy, n, hotlist=hot))
        cache.preload()
        counts = np.split(acc.counts, acc.ptr[1:-1])
        for s, ks in enumerate(np.split(acc.keys, acc.ptr[1:-1])):
            if acc.new_seq[s]:
                cache.new_sequence()
            cache.step(ks, counts[s])
            if acc.tick[s]:
                cache.tick(int(acc.tick[s]))
        r = replay_trace(trace, policy, n, gamma=gamma, alpha=0.6, seed=1, hotlist=hot)
        assert r.hits == cache.hits and r.accesses == cache.accesses, policy


def test_acceptance_process_is_seeded_and_geometric():
    T, gamma, alpha = 200_000, 4, 0.8
    plan = plan_passes(T, gamma, alpha, seed=7, starts=np.zeros(0, np.int64))
    assert np.array_equal(plan, plan_passes(T, gamma, alpha, 7, np.zeros(0, np.int64)))
    assert (plan[:, 1] == gamma).sum() >= len(plan) - 1  # every pass verifies γ positions
    assert plan[-1, 0] + plan[-1, 2] + 1 == T and (plan[:, 2] + 1).sum() == T
    # accepted drafts: P(a >= j) = α^j, j < γ
    mean = sum(alpha**j for j in range(1, gamma))
    assert plan[:, 2].mean() == pytest.approx(mean, rel=0.02)


def test_rejected_positions_follow_the_traces_overlap_and_popularity():
    t = synthetic_trace(3000, n_layers=3, n_experts=64, top_k=8, skew=1.0, reuse=0.4, seed=2)
    rho, logp = routing_model(t)
    prev = t.experts[:-1].astype(np.int64)
    out = rejected_routing(prev, rho, logp, np.random.default_rng(0))  # [T-1, L, k]
    assert (np.sort(out, -1)[..., 1:] != np.sort(out, -1)[..., :-1]).all()  # distinct
    same = (out[:, :, :, None] == prev[:, :, None, :]).any(-1).mean(axis=(0, 2))  # [L]
    # kept with rho, plus fresh draws that land on the previous experts by chance
    assert np.all(same >= rho - 0.02) and np.all(same <= rho + 0.12)
    freq = np.exp(logp)  # [L, E]
    got = (
        np.stack([np.bincount(out[:, i].ravel(), minlength=64) for i in range(3)]) / out[:, 0].size
    )
    # draws without replacement flatten the top of the distribution a little; the shape holds
    assert np.abs(got - freq).max() < 0.03
    assert min(np.corrcoef(g, f)[0, 1] for g, f in zip(got, freq, strict=True)) > 0.95


def test_simulate_rows_carry_gamma_alpha_and_union(trace):
    rows = simulate(
        trace, ["lru", "opt_bypass"], [Budget(slots=16)], gammas=[1, 4], alphas=[1.0, 0.5]
    )
    assert [(r.gamma, r.alpha, r.policy) for r in rows] == [
        (g, a, p) for g in (1, 4) for a in (1.0, 0.5) for p in ("lru", "opt_bypass")
    ]
    by = {(r.gamma, r.alpha, r.policy): r for r in rows}
    assert by[(1, 0.5, "lru")].hits == by[(1, 1.0, "lru")].hits
    assert by[(4, 1.0, "lru")].mean_union > by[(1, 1.0, "lru")].mean_union
    assert by[(4, 0.5, "lru")].positions > by[(4, 0.5, "lru")].committed == 96
    for g, a in ((4, 1.0), (4, 0.5)):
        assert by[(g, a, "opt_bypass")].misses <= by[(g, a, "lru")].misses


def test_recorded_rejections_replace_the_model():
    t = synthetic_trace(40, n_layers=2, n_experts=8, top_k=2, seed=1)
    t.n_experts = 16  # committed positions route to experts 0..7 only
    t.rejected = np.full_like(t.experts, -1)
    t.rejected[1::2] = 8 + np.arange(2)  # rejected drafts recorded at odd positions: 8 and 9
    acc = access_sequence(t, 4, 0.5, seed=2)
    plan = plan_passes(40, 4, 0.5, 2, np.zeros(0, np.int64))
    rejected_at = {int(p + i) for p, n, a in plan for i in range(a + 1, n)}
    keys = np.split(acc.keys % 16, acc.ptr[1:-1])
    for (p, n, a), layer0 in zip(plan, keys[::2], strict=True):
        rej = [p + i for i in range(a + 1, n)]
        if any(r % 2 for r in rej):  # recorded there: experts 8 and 9 join the union
            assert {8, 9} <= set(layer0.tolist())
    assert any(r % 2 for r in rejected_at) and any(r % 2 == 0 for r in rejected_at)


def test_generate_records_carry_every_positions_routing(tmp_path):
    from specdec.decode.loop import DecodeConfig
    from specdec.decode.records import read_records, records_trace
    from specdec.decode.run import generate
    from specdec.stream.loader import load
    from tests.helpers import random_checkpoint

    sm = load(random_checkpoint(tmp_path, "deepseek_v3", None), budget="30%")
    gamma = 4
    generate(
        sm, [1, 2, 3, 4], "oracle:0.5", DecodeConfig(gamma=gamma, max_tokens=24),
        records_path=tmp_path / "r.jsonl", stop_at_eos=False,
    )  # fmt: skip
    rows = read_records(tmp_path / "r.jsonl")
    k = sm.config["num_experts_per_tok"]
    for r in rows:
        assert set(r["routing"]) == set(r["union"])  # every MoE layer of the verify pass
        for lid, pos in r["routing"].items():
            assert len(pos) == 1 + r["drafted"] and all(len(x) == k for x in pos)
            assert len({e for x in pos for e in x}) == r["union"][lid]
    assert any(r["accepted"] < r["drafted"] for r in rows)  # some drafts were rejected
    t = records_trace(rows, sm.config["n_routed_experts"], 1000)
    # positions fed and kept: each pass's first token and its accepted drafts
    assert t.n_positions == sum(1 + r["accepted"] for r in rows)
    assert (t.rejected >= 0).all(axis=(1, 2)).sum() > 0
    sm.close()


@pytest.mark.slow
def test_cli_speculative_rows_and_errors(trace, tmp_path):
    import json
    import os
    import subprocess
    import sys

    from specdec.trace.format import save_trace

    save_trace(trace, tmp_path / "tr")

    def cli(*args):
        env = dict(os.environ, SPECDEC_BLAS="reference")
        cmd = [sys.executable, "-m", "specdec", "simulate", str(tmp_path / "tr"), *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=env)

    out = cli(
        "--gamma=1,4", "--alpha=1,0.8", "--policy=lru,opt_bypass", "--budget=16slots", "--json"
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    want = {"policy", "budget_slots", "gamma", "alpha", "accesses", "hits", "misses"}
    want |= {"hit_rate", "bytes_read", "committed", "bytes_per_token", "mean_union"}
    assert len(rows) == 8 and all(want <= set(r) for r in rows)
    for args, message in (
        (["--gamma=0"], "gamma must be >= 1 (got 0); gamma = 1 is plain decoding"),
        (["--alpha=1.5", "--gamma=2"], "alpha 1.5: give an acceptance rate in [0, 1]"),
        (["--gamma=2,x"], "gamma 'x': give a whole number >= 1 (1 is plain decoding) or auto"),
        (["--policy=lcs:S3FIFO", "--budget=8slots"], "lcs:S3FIFO needs at least 20 slots"),
    ):
        out = cli(*args)
        assert out.returncode == 2 and message in out.stderr, (args, out.stderr)
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
