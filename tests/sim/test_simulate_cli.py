"""Trace directories, hotlists and the `specdec simulate` command, errors included.

pytest tests/sim/test_simulate_cli.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from specdec.cache.expert_cache import ExpertCache
from specdec.cache.policies import make_policy
from specdec.core.errors import SpecdecError
from specdec.core.units import Budget
from specdec.sim.bounds import Belady
from specdec.sim.simulate import lookahead_steps, simulate, trace_steps
from specdec.trace.format import (
    HotlistEntry,
    Trace,
    hotlist_keys,
    load_trace,
    profile_hotlist,
    read_hotlist,
    save_trace,
    write_hotlist,
)
from specdec.trace.synthetic import synthetic_trace


@pytest.fixture
def trace_dir(tmp_path):
    trace = synthetic_trace(60, n_layers=3, n_experts=16, top_k=4, expert_bytes=1000, seed=1)
    trace.gates = np.random.default_rng(0).random(trace.experts.shape).astype(np.float32)
    trace.tokens = np.arange(60)
    trace.prompt_ids = np.zeros(60, dtype=np.int64)
    save_trace(trace, tmp_path / "tr")
    return tmp_path / "tr"


def _cli(*args):
    env = dict(os.environ, SPECDEC_BLAS="reference")  # no re-exec: nothing here uses BLAS
    return subprocess.run(
        [sys.executable, "-m", "specdec", "simulate", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
    )


def test_roundtrip_keeps_every_array(trace_dir):
    t = load_trace(trace_dir)
    assert t.experts.shape == (60, 3, 4) and t.expert_bytes == [1000] * 3
    assert t.gates.shape == (60, 3, 4) and t.tokens.tolist() == list(range(60))
    assert sorted(p.name for p in trace_dir.iterdir()) == [
        ".specdec-trace",  # the ownership marker: --overwrite replaces only traces
        "experts.npy",
        "gates.npy",
        "meta.json",
        "prompt_ids.npy",
        "tokens.npy",
    ]
    with pytest.raises(SpecdecError, match="exists"):
        save_trace(t, trace_dir)
    t.expert_bytes = [1000, 2000, 3000]
    save_trace(t, trace_dir, overwrite=True)
    assert json.loads((trace_dir / "meta.json").read_text())["expert_bytes"] == [1000, 2000, 3000]
    assert [p.name for p in trace_dir.parent.iterdir()] == ["tr"]  # no temporary left behind


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: (d / "experts.npy").unlink(), "not a trace directory"),
        (lambda d: np.save(d / "experts.npy", np.zeros((5, 3), np.int32)), "experts.npy has shape"),
        (lambda d: np.save(d / "experts.npy", np.full((5, 3, 4), 16, np.int32)), "outside 0..15"),
        (lambda d: np.save(d / "experts.npy", np.zeros((5, 3, 4), np.float32)), "must be integers"),
        (lambda d: np.save(d / "tokens.npy", np.arange(7)), "tokens has shape"),
        (lambda d: (d / "meta.json").write_text("{"), "invalid JSON"),
        (lambda d: (d / "meta.json").write_text('{"n_layers": 3}'), "missing n_experts"),
    ],
)
def test_load_errors_are_one_line(trace_dir, damage, message):
    damage(trace_dir)
    with pytest.raises(SpecdecError, match=message) as err:
        load_trace(trace_dir)
    assert "\n" not in str(err.value)


def test_hotlist_file_roundtrip_and_profile(tmp_path):
    experts = np.array([[[1, 2]], [[1, 3]], [[1, 2]]], dtype=np.int32)  # [T=3, L=1, k=2]
    trace = Trace(experts=experts, n_experts=4, expert_bytes=[8], layer_ids=[5])
    prof = profile_hotlist(trace)
    assert [(e.layer, e.expert, e.hits) for e in prof] == [(5, 1, 3), (5, 2, 2), (5, 3, 1)]
    write_hotlist(prof, tmp_path / "hot.txt")
    text = (tmp_path / "hot.txt").read_text()
    assert text.splitlines()[0] == "# ds4 expert hotlist v1" and "5 1 3 3" in text
    assert read_hotlist(tmp_path / "hot.txt") == prof
    assert hotlist_keys(trace, prof) == [1, 2, 3]  # model layer 5 is trace layer 0
    with pytest.raises(SpecdecError, match="not in this trace"):
        hotlist_keys(trace, [HotlistEntry(layer=0, expert=1, hits=1, weight=1.0)])
    (tmp_path / "bad.txt").write_text("layer expert hits weight\n")
    with pytest.raises(SpecdecError, match="not a ds4 hotlist"):
        read_hotlist(tmp_path / "bad.txt")


def test_cli_json_rows(trace_dir, tmp_path):
    write_hotlist(profile_hotlist(load_trace(trace_dir)), tmp_path / "hot.txt")
    out = _cli(
        trace_dir,
        "--policy=lru,slru,hotness,lfu,static,belady,knapsack_bound",
        "--budget=8slots,20000,30slots",
        "--hotlist",
        tmp_path / "hot.txt",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert len(rows) == 7 * 3
    keys = {
        "policy",
        "budget_slots",
        "budget_bytes",
        "accesses",
        "hits",
        "misses",
        "hit_rate",
        "bytes_read",
        "bytes_per_token",
    }
    for r in rows:
        assert keys <= set(r) and r["accesses"] == 60 * 3 * 4
        assert abs(r["hits"] + r["misses"] - r["accesses"]) < 1e-9
        assert abs(r["bytes_read"] - r["misses"] * 1000) < 1e-6
    by = {(r["policy"], r["budget_slots"]): r for r in rows}
    assert by[("lru", 20)]["budget_bytes"] == 20000
    for n in (8, 20, 30):
        assert by[("static", n)]["hits"] <= by[("knapsack_bound", n)]["hits"]
        for p in ("lru", "slru", "lfu"):  # cold starts, like belady
            assert by[(p, n)]["hits"] <= by[("belady", n)]["hits"]
    assert by[("hotness", 30)]["preload_bytes"] == 30 * 1000


@pytest.mark.slow
def test_cli_budget_takes_a_share_of_the_experts_as_every_command_does(trace_dir):
    # 25% of the trace's 3 x 16 experts is 12 slots: the same rows as 12slots and 12000 bytes
    out = _cli(trace_dir, "--policy=lru,belady", "--budget=25%,12slots,12000", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["budget_slots"] for r in rows] == [12] * 6
    for policy in ("lru", "belady"):
        share, slots, nbytes = (r for r in rows if r["policy"] == policy)
        assert share == slots == nbytes
    assert "% of the trace's experts" in _cli("--help").stdout


@pytest.mark.slow
def test_cli_table_and_positions(trace_dir):
    out = _cli(trace_dir, "--policy=lru,belady", "--budget=10slots", "--positions=20")
    assert out.returncode == 0, out.stderr
    assert "20 positions" in out.stdout and "belady" in out.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--budget=3slots"], "below the widest step (4 experts): use at least 4slots"),
        (["--budget=2000"], "2 slots of"),
        (["--budget=12parsecs"], "unknown unit"),
        (["--budget=0%"], "above 0% and at most 100%"),
        (["--policy=lru,arc"], "unknown policy 'arc': use one of lru, slru"),
        (["--positions=0"], "--positions 0"),
        (["--hotlist=/nonexistent/hot.txt"], "cannot read hotlist"),
        (["--lookahead=2"], "no lookahead at distance 2 (has: none)"),
    ],
)
def test_cli_errors_are_one_line(trace_dir, args, message):
    out = _cli(trace_dir, *args)
    assert out.returncode == 2
    assert out.stderr.startswith("specdec: error: ") and message in out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_cli_missing_trace(tmp_path):
    out = _cli(tmp_path / "nope")
    assert out.returncode == 2 and "not a trace directory" in out.stderr
    assert "Traceback" not in out.stderr


def test_perfect_lookahead_leaves_only_first_layer_misses():
    trace = synthetic_trace(50, n_layers=4, n_experts=16, top_k=4, seed=5)
    # a router that predicts perfectly: the prediction for layer l is layer l's own experts
    trace.lookahead = trace.experts[None].copy()  # [D=1, T, L, k]
    trace.lookahead[0, :, :1] = -1  # nothing predicts layer 0 from an earlier layer
    trace.lookahead_distances = [1]
    for policy in ("lru", "slru", "hotness", "lfu"):
        plain, ahead = (
            simulate(trace, [policy], [Budget(slots=12)], lookahead=d)[0] for d in (0, 1)
        )
        layer0 = [r for r in simulate(_only_layer0(trace), [policy], [Budget(slots=12)])][0]
        assert ahead.misses <= layer0.accesses, policy  # layers 1..3 were all read ahead
        assert ahead.prefetch_hits > 0 and ahead.hits > plain.hits, policy
        assert ahead.bytes_read == (ahead.misses * trace.slot_bytes + ahead.prefetch_bytes)


def _only_layer0(trace):
    return Trace(experts=trace.experts[:, :1], n_experts=trace.n_experts, expert_bytes=[1])


def test_bytes_follow_each_layers_expert_size():
    trace = synthetic_trace(
        40, n_layers=3, n_experts=8, top_k=2, expert_bytes=[100, 200, 700], seed=2
    )
    flat = [ks for position in trace_steps(trace) for ks in position]
    for policy in ("lru", "slru", "belady"):
        (row,) = simulate(trace, [policy], [Budget(slots=5)])
        pol = Belady(5, flat) if policy == "belady" else make_policy(policy, 5)
        cache = ExpertCache(5, pol)
        want = sum(trace.expert_bytes[k // 8] for ks in flat for k, _ in cache.access(ks))
        assert row.bytes_read == want and row.budget_bytes == 5 * 700, policy
    (bound,) = simulate(
        trace, ["knapsack_bound"], [Budget(nbytes=1400)]
    )  # two slots of the largest
    assert bound.budget_slots == 2 and bound.hits <= bound.accesses


def test_lookahead_steps_map_predictions_to_target_layers():
    experts = np.array([[[0, 1], [2, 3], [1, 2]]], dtype=np.int32)  # [T=1, L=3, k=2]
    la = np.array([[[[-1, -1], [3, 2], [-1, -1]]]], dtype=np.int32)  # [D=1, T, L, k]
    trace = Trace(experts, 4, [1] * 3, lookahead=la, lookahead_distances=[1])
    # after layer 0: layer 1's prediction (keys 4 + e); after layer 1: none recorded (-1)
    assert lookahead_steps(trace, 1) == [[[6, 7], [], []]]
    with pytest.raises(SpecdecError, match="no lookahead at distance 2 \\(has: 1\\)"):
        lookahead_steps(trace, 2)
    trace.lookahead = la + 5
    with pytest.raises(SpecdecError, match="lookahead range"):
        trace.validate()
