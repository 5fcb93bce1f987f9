"""`--gamma auto`: the value type, the chooser's rule, replay pass by pass, records and the CLI.

pytest tests/test_gamma_auto.py

Lossless decoding with auto, every drafter: tests/test_speculative.py (γ = "auto" beside 2-8).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys

import numpy as np
import pytest

from specdec.cache.adaptive import replay_passes, trace_clock
from specdec.cache.cli import add_arguments, run
from specdec.cache.replay import replay_trace
from specdec.clock.profiles import get_profile
from specdec.decode.gamma import AUTO, BLOCK, GammaChooser, Observed, parse_gamma
from specdec.errors import BudgetError, SpecdecError
from specdec.trace.format import save_trace
from specdec.trace.synthetic import synthetic_trace

TINY = {  # a 4-MoE-layer config for the replay clock (the bundled model's shape)
    "model_type": "qwen3_moe",
    "vocab_size": 4096,
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_experts": 32,
    "num_experts_per_tok": 4,
    "moe_intermediate_size": 128,
    "intermediate_size": 512,
}


def test_parse_gamma():
    assert parse_gamma("auto") == AUTO and parse_gamma("AUTO ") == AUTO
    assert parse_gamma("4") == 4 and parse_gamma(2) == 2
    for bad in ("2.5", "four", ""):
        with pytest.raises(SpecdecError, match="whole number >= 1"):
            parse_gamma(bad)
    for bad in ("0", "-1"):
        with pytest.raises(SpecdecError, match="gamma must be >= 1"):
            parse_gamma(bad)


def _chooser(read_s: float, max_gamma: int = 8) -> GammaChooser:
    """A chooser whose pass costs 1 s + read_s per expected miss (one layer, k = 2)."""

    def cost(g, context, union, misses, du, dm):
        return 1.0 + read_s * float(misses.sum())

    return GammaChooser(cost, n_layers=1, top_k=2, block_bytes=100.0, max_gamma=max_gamma)


def _feed(ch: GammaChooser, passes: int, alpha: float, union_per_pos: float, miss_frac: float):
    """Run `passes` passes at whatever γ the chooser picks, with seeded acceptance α; each
    position adds `union_per_pos` experts to the union, `miss_frac` of which miss."""
    rng = np.random.default_rng(0)
    chosen = []
    for _ in range(passes):
        c = ch.choose(0, 1000)
        acc = 0
        while acc < c.gamma - 1 and rng.random() < alpha:
            acc += 1
        u = 2 + union_per_pos * (c.gamma - 1)
        ch.observe(Observed(c.gamma, acc, np.array([u]), np.array([u * miss_frac])))
        chosen.append(c.gamma)
    return chosen


def test_auto_stays_plain_when_drafts_do_not_pay():
    ch = _chooser(read_s=1.0)  # reads dominate, every extra expert misses
    chosen = _feed(ch, 400, alpha=0.3, union_per_pos=2.0, miss_frac=1.0)
    assert chosen[:BLOCK] == [1] * BLOCK, "the first block is plain"
    assert np.mean(np.array(chosen[-200:]) == 1) > 0.9, np.bincount(chosen[-200:])


def test_auto_drafts_when_passes_are_cheap_and_drafts_accepted():
    ch = _chooser(read_s=0.0)  # no read cost: tokens per pass decide; no misses: bytes equal
    chosen = _feed(ch, 400, alpha=0.95, union_per_pos=2.0, miss_frac=0.0)
    assert np.median(chosen[-200:]) >= 6, np.bincount(chosen[-200:])
    assert ch.alphas()[:3] == pytest.approx(0.95, abs=0.06)


def test_bytes_guard_keeps_plain_when_drafting_reads_more_per_token():
    # time alone would draft (a pass costs 1 s, reads nothing in time), but every draft's
    # experts miss: bytes per token grow with γ, so auto stays plain and says why
    ch = _chooser(read_s=0.0)
    _feed(ch, 100, alpha=0.6, union_per_pos=2.0, miss_frac=1.0)
    c = ch.choose(0, 1000)
    while c.why in ("hold", "explore"):
        ch.observe(Observed(c.gamma, 0, np.array([2.0]), np.array([2.0])))
        c = ch.choose(0, 1000)
    assert {"gamma", "why", "candidates"} <= set(c.record())
    assert c.gamma == 1 and c.why == "bytes", c.record()
    rows = c.record()["candidates"]
    assert [r["gamma"] for r in rows] == list(range(1, 9))
    assert rows[0]["tokens"] == 1 and all(r["tokens"] > 1 for r in rows[1:])


def test_expected_tokens_follow_the_acceptance_per_position():
    ch = _chooser(read_s=0.0, max_gamma=4)
    for _ in range(500):  # draft 1 always accepted, draft 2 never
        ch.observe(Observed(4, 1, np.array([2.0]), np.array([0.0])))
    a = ch.alphas()
    assert a[0] > 0.97 and a[1] < 0.03
    assert ch.expected_tokens(2) == pytest.approx(1 + a[0])
    assert ch.expected_tokens(4) == pytest.approx(1 + a[0] + a[0] * a[1] + a[0] * a[1] * a[2])


def test_auto_never_chooses_past_the_tokens_left():
    ch = _chooser(read_s=0.0)
    _feed(ch, 50, alpha=0.95, union_per_pos=1.0, miss_frac=0.0)
    assert all(ch.choose(0, left).gamma <= left for left in (1, 2, 3) for _ in range(BLOCK))


@pytest.fixture(scope="module")
def trace():
    t = synthetic_trace(160, n_layers=4, n_experts=32, top_k=4, expert_bytes=[10, 10, 30, 20])
    t.prompt_ids = np.repeat([0, 1], 80)
    return t


@pytest.mark.parametrize("policy", ["lru", "slru", "lfu"])
@pytest.mark.parametrize("gamma", [1, 2, 4])
def test_fixed_gamma_pass_by_pass_equals_the_compiled_replay(trace, policy, gamma):
    clock = trace_clock(TINY, trace)
    m4 = get_profile("m4-24gb")
    for n in (24, 60):
        r = replay_passes(trace, policy, n, gamma, 1.0, clock, m4)
        ref = replay_trace(trace, policy, n, gamma, 1.0)
        assert (r.hits, r.bytes_read, r.committed) == (ref.hits, ref.bytes_read, ref.committed)
        assert r.passes == ref.passes and r.modeled_s > 0


def test_auto_replay_commits_every_position_and_records_each_pass(trace):
    clock = trace_clock(TINY, trace)
    r = replay_passes(trace, "lru", 40, AUTO, 0.8, clock, get_profile("m4-24gb"), seed=1)
    assert r.committed == 160 and len(r.choices) == r.passes
    assert sum(r.gamma_hist) == r.passes
    assert all(c["gamma"] * 4 <= 40 for c in r.choices), "auto's passes fit the cache"
    assert {c["why"] for c in r.choices} >= {"warmup", "hold"}


def test_fixed_gamma_wider_than_the_cache_is_refused(trace):
    clock = trace_clock(TINY, trace)
    with pytest.raises(BudgetError, match="raise the budget or lower gamma"):
        replay_passes(trace, "lru", 6, 4, 1.0, clock, get_profile("m4-24gb"))


def test_generate_gamma_auto_records_its_choices(tmp_path):
    out = tmp_path / "steps.jsonl"
    cmd = [sys.executable, "-m", "specdec", "generate", "--model", "tiny", "--drafter"]
    cmd += ["oracle:0.9", "--gamma", "auto", "--max-tokens", "48", "--budget", "25%"]
    cmd += ["--records", str(out), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    stats = json.loads(p.stdout.strip().splitlines()[-1])["stats"]
    assert stats["gamma"] == "auto" and sum(stats["gamma_chosen_hist"]) == stats["passes"]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(r["gamma_choice"]["gamma"] >= r["drafted"] + 1 for r in rows)
    firsts = [r for r in rows if "candidates" in r["gamma_choice"]]
    assert firsts and all(
        {"gamma", "tokens", "cost_s", "bytes"} <= set(c)
        for r in firsts
        for c in r["gamma_choice"]["candidates"]
    )
    bad = subprocess.run([*cmd[:8], "--gamma", "sometimes"], capture_output=True, text=True)
    assert bad.returncode != 0 and "whole number >= 1" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_simulate_gamma_auto_rows(tmp_path, trace):
    save_trace(trace, tmp_path / "t")
    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args([str(tmp_path / "t"), "--gamma", "1,auto", "--alpha", "0.8", "--policy",
                         "lru", "--budget", "40slots", "--config", "minimax-m2.5", "--json"])  # fmt: skip
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert run(args) == 0
    rows = json.loads(out.getvalue())
    assert [r["gamma"] for r in rows] == [1, "auto"]
    auto = rows[1]
    assert auto["committed"] == 160 and sum(auto["gamma_hist"]) > 0
    assert auto["modeled_tokens_per_s"] > 0
