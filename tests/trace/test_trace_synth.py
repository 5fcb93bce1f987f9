"""Tests of the calibrated trace generator, `specdec trace stats` and the fit.

    pytest tests/trace/test_trace_synth.py

The statistics are checked against plain-Python recomputations (sets, an OrderedDict LRU with
ExpertCache's step semantics, counts for the knapsack) on hand-made traces; the MiniMax preset
against the seed question's targets at a moderate number of positions.
"""

from __future__ import annotations

import json
from collections import OrderedDict

import numpy as np
import pytest

from specdec.cli import main as cli_main
from specdec.core.errors import SpecdecError
from specdec.sim.fit import TOLERANCE, fit
from specdec.sim.stats import trace_stats
from specdec.trace.format import Trace, load_trace
from specdec.trace.presets import PRESETS, load_targets
from specdec.trace.synthetic import SynthParams, Targets, TraceShape, generate, generate_experts

MINIMAX = PRESETS["minimax-m2.5"]


def _sets(e: np.ndarray) -> list[list[set]]:
    return [[set(row.tolist()) for row in pos] for pos in e]


def test_generator_is_deterministic_per_seed_and_writes_a_loadable_trace(tmp_path):
    out = tmp_path / "syn"
    args = ["trace", "synth", str(out), "--like", "minimax-m2.5", "--positions", "40"]
    assert cli_main([*args, "--seed", "3"]) == 0
    t = load_trace(out)
    assert t.experts.shape == (40, 62, 8) and t.n_experts == 256
    assert t.expert_bytes == [7_962_624] * 62 and t.slot_bytes * 1130 <= 9e9 < t.slot_bytes * 1131
    assert all(len(s) == 8 for pos in _sets(t.experts) for s in pos)  # k distinct experts
    again = generate(MINIMAX.shape, MINIMAX.params, 40, seed=3)
    np.testing.assert_array_equal(t.experts, again.experts)
    other = generate(MINIMAX.shape, MINIMAX.params, 40, seed=4)
    assert not np.array_equal(t.experts, other.experts)
    assert cli_main([*args, "--seed", "3"]) == 2  # exists: no overwrite without --overwrite
    assert cli_main([*args, "--seed", "4", "--overwrite"]) == 0
    np.testing.assert_array_equal(load_trace(out).experts, other.experts)
    ds = generate(PRESETS["deepseek-v3"].shape, MINIMAX.params, 3)
    assert ds.layer_ids == list(range(3, 61)) and ds.expert_bytes[0] == 24_772_608


def _first_lag_shares(window: float) -> np.ndarray:
    """Share of S_t's experts last seen j = 1..6 positions back ([6]), uniform popularity."""
    e = generate_experts(1500, 4, 64, 4, SynthParams(0.0, 0.0, 0.8, window), seed=1)
    sets = _sets(e)
    lags = [
        next((j for j in range(1, 7) if x in sets[t - j][i]), 7)
        for t in range(10, 1500)
        for i in range(4)
        for x in sets[t][i]
    ]
    return np.bincount(lags, minlength=8)[1:7] / len(lags)


def test_recent_use_reaches_back_exactly_the_window():
    """Re-draws come from the last ceil(window) positions, the oldest weighted by its fraction;
    beyond the window only the popularity part (0.2 of 64 uniform experts) is left."""
    shares = {w: _first_lag_shares(w) for w in (1.0, 2.0, 2.5, 3.0)}
    for w, s in shares.items():
        m = int(np.ceil(w))
        assert (s[:m] > 0.04).all() and (s[m:] < 0.01).all(), (w, s)
    assert shares[2.0][2] < shares[2.5][2] < shares[3.0][2]


def test_minimax_preset_meets_the_question_targets():
    trace = generate(MINIMAX.shape, MINIMAX.params, 600, seed=5)
    s = trace_stats(trace, "9GB", gammas=(2, 3, 8))
    want = MINIMAX.targets
    assert s["budget_slots"] == want.budget_slots == 1130
    per_layer = np.array(s["overlap_per_layer"])
    assert np.abs(per_layer - want.overlap).max() <= TOLERANCE["overlap"]
    assert abs(s["overlap"] - want.overlap) <= TOLERANCE["overlap"]
    for g, u in want.union.items():
        assert abs(s["union"][str(g)] - u) <= TOLERANCE["union"] * u, g
    assert abs(s["lru"] - want.lru) <= TOLERANCE["lru"]
    assert abs(s["static"] - want.static) <= TOLERANCE["static"]


def _hand_trace() -> Trace:
    """Two prompts (positions 0-4, 5-8), prefill then decode, 2 layers, 6 experts, top-2."""
    experts = np.array(
        [
            [[0, 1], [2, 3]],
            [[1, 2], [2, 3]],
            [[1, 2], [4, 5]],
            [[3, 4], [0, 5]],
            [[0, 4], [0, 1]],
            [[0, 1], [0, 1]],  # prompt 1 begins: no pair or window with position 4
            [[5, 1], [1, 2]],
            [[1, 5], [2, 3]],
            [[2, 3], [3, 1]],
        ]
    )
    return Trace(
        experts=experts,
        n_experts=6,
        expert_bytes=[100, 100],
        prompt_ids=np.array([0, 0, 0, 0, 0, 1, 1, 1, 1]),
        phase=np.array([0, 0, 1, 1, 1, 0, 1, 1, 1]),
    )


def _lru_hits(steps: list[list[int]], n: int) -> int:
    """ExpertCache's step semantics: hits touched ascending, misses admitted ascending."""
    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for ks in steps:
        ks = sorted(set(ks))
        for k in ks:
            if k in cache:
                hits += 1
                cache.move_to_end(k)
        for k in ks:
            if k not in cache:
                while len(cache) >= n:
                    victim = next(v for v in cache if v not in ks)
                    del cache[victim]
                cache[k] = None
    return hits


@pytest.mark.parametrize("phase", ["all", "decode"])
def test_stats_equal_an_independent_computation(phase, capsys, tmp_path):
    from specdec.trace.format import save_trace

    t = _hand_trace()
    sets = _sets(t.experts)
    keep = [p == 1 or phase == "all" for p in t.phase]
    pairs = [
        (a, a + 1)
        for a in range(8)
        if keep[a] and keep[a + 1] and t.prompt_ids[a] == t.prompt_ids[a + 1]
    ]
    overlap = [np.mean([len(sets[a][i] & sets[b][i]) / 2 for a, b in pairs]) for i in range(2)]
    runs = {"all": [(0, 5), (5, 9)], "decode": [(2, 5), (6, 9)]}[phase]
    union = {}
    for g in (1, 2, 3):
        sizes = [
            len(set().union(*(sets[s + j][i] for j in range(g))))
            for a, b in runs
            for s in range(a, b - g + 1, g)
            for i in range(2)
        ]
        union[str(g)] = float(np.mean(sizes))
    steps = [[i * 6 + x for x in sets[p][i]] for p in range(9) for i in range(2)]
    counts = np.bincount([k for ks in steps for k in ks], minlength=12)
    static = np.sort(counts)[::-1][:5].sum() / 36  # 5 slots, one expert size: whole keys

    s = trace_stats(t, "5slots", gammas=(1, 2, 3), phase=phase)
    # the phase's positions (it said 9 at --phase decode), and its skew over those
    chosen = [p for p in range(9) if keep[p]]
    # the busiest tenth of 6 experts is one: its share of a layer's accesses, mean of layers
    busiest = [np.bincount(t.experts[chosen, i].ravel(), minlength=6).max() for i in range(2)]
    assert (s["positions"], s["trace_positions"]) == (len(chosen), 9)
    assert s["top10_share"] == pytest.approx(np.mean(busiest) / (len(chosen) * 2))
    assert s["overlap_per_layer"] == pytest.approx(overlap, abs=1e-4)
    assert s["overlap"] == pytest.approx(np.mean(overlap))
    assert s["union"] == pytest.approx(union)
    assert s["lru"] == pytest.approx(_lru_hits(steps, 5) / 36)  # replays every position
    assert s["static"] == pytest.approx(static)
    save_trace(t, tmp_path / "hand")
    args = ["trace", "stats", str(tmp_path / "hand"), "--budget", "5slots", "--phase", phase]
    assert cli_main([*args, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["union"]
    assert {g: got[g] for g in union} == pytest.approx(union) and got["8"] is None  # no window
    assert cli_main(args) == 0
    assert "U(3)" in capsys.readouterr().out


@pytest.mark.slow
def test_fit_recovers_the_statistics_of_a_known_generator(monkeypatch):
    from specdec.sim import fit as fit_module

    shape = TraceShape(3, 32, 4, 1000)
    truth = generate(shape, SynthParams(0.7, 0.15, 0.3, 2.0), 300, seed=9)
    s = trace_stats(truth, "18slots", gammas=(2, 3, 8))
    targets = Targets(
        overlap=s["overlap"],
        union={g: s["union"][str(g)] for g in (2, 3, 8)},
        budget_slots=18,
        lru=s["lru"],
        static=s["static"],
        positions=300,
    )
    r = fit(targets, shape, seed=1)
    got = r.replayed
    assert abs(got["overlap"] - targets.overlap) <= TOLERANCE["overlap"]
    for g, u in targets.union.items():
        assert abs(got["union"][g] - u) <= TOLERANCE["union"] * u
    assert abs(got["lru"] - targets.lru) <= TOLERANCE["lru"]
    assert abs(got["static"] - targets.static) <= TOLERANCE["static"]
    monkeypatch.setitem(fit_module.NM_OPTIONS, "maxfev", 15)  # determinism: a short fit twice
    assert fit(targets, shape, seed=2).params == fit(targets, shape, seed=2).params


def test_targets_file_is_read_with_its_budget_in_slots(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"overlap": 0.3, "union": {"2": 13.4}, "budget": "9GB", "lru": 0.5}))
    shape, t = load_targets(p, like="minimax-m2.5")
    assert shape == MINIMAX.shape and t.budget_slots == 1130 and t.union == {2: 13.4}
    p.write_text(
        json.dumps(
            {
                "shape": {"n_layers": 2, "n_experts": 8, "top_k": 2, "expert_bytes": 10},
                "static": 0.4,
                "budget": "40",
            }
        )
    )
    shape, t = load_targets(p)
    assert shape.n_layers == 2 and t.budget_slots == 4 and t.static == 0.4


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "invalid JSON"),
        ('{"overlap": 0.3}', "no shape"),
        ('{"shape": {"n_layers": 2}, "overlap": 0.3}', "bad targets"),
        ('{"overlap": 1.5, "budget": "9GB"}', "not a fraction"),
        ('{"lru": 0.5}', "need the budget"),
        ('{"union": {"2": 40}}', "must lie in"),
        ('{"overlp": 0.3}', "unknown field"),
        ("[1, 2]", "JSON object"),
    ],
)
def test_bad_targets_files_are_one_line_errors(content, message, tmp_path, capsys):
    p = tmp_path / "t.json"
    p.write_text(content)
    like = [] if message == "no shape" else ["--like", "minimax-m2.5"]
    assert cli_main(["trace", "fit", "--targets", str(p), *like]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("specdec: error:") and "\n" not in err and message in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["synth", "X", "--like", "nope", "--positions", "5"], "unknown preset 'nope'"),
        (["synth", "X", "--like", "minimax-m2.5", "--positions", "0"], "--positions 0"),
        (["synth", "X", "--positions", "5"], "give --like PRESET or --targets FILE"),
        (["fit", "--like", "deepseek-v3"], "shape only"),
        (["fit", "--targets", "missing.json"], "cannot read targets"),
        (["stats", "missing-trace"], "not a trace directory"),
    ],
)
def test_bad_inputs_are_one_line_errors(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli_main(["trace", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("specdec: error:") and "\n" not in err and message in err
    assert not (tmp_path / "X").exists()


def test_out_of_range_parameters_are_refused():
    with pytest.raises(SpecdecError, match="out of range"):
        generate_experts(5, 1, 8, 2, SynthParams(0.5, 1.2, 0.0, 1.0), seed=0)


def test_stats_json_of_any_trace_is_a_targets_file(tmp_path, capsys):
    from specdec.trace.format import save_trace

    save_trace(_hand_trace(), tmp_path / "hand")
    assert cli_main(["trace", "stats", str(tmp_path / "hand"), "--budget", "5slots", "--json"]) == 0
    (tmp_path / "t.json").write_text(capsys.readouterr().out)
    shape, t = load_targets(tmp_path / "t.json")
    s = json.loads((tmp_path / "t.json").read_text())
    assert shape == TraceShape(2, 6, 2, 100) and t.budget_slots == 5 and t.positions == 9
    assert t.union == {g: s["union"][str(g)] for g in (2, 3, 4)}  # 8: no window; 1: always k
    assert (t.overlap, t.lru, t.static) == (s["overlap"], s["lru"], s["static"])


def test_synth_from_a_targets_file_fits_then_writes_its_shape(tmp_path, monkeypatch, capsys):
    from specdec.sim import fit as fit_module

    monkeypatch.setitem(fit_module.NM_OPTIONS, "maxfev", 10)  # the CLI path, not the fit's quality
    shape = {"n_layers": 2, "n_experts": 16, "top_k": 2, "expert_bytes": 64}
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"shape": shape, "overlap": 0.3, "positions": 100}))
    out = tmp_path / "syn"
    assert cli_main(["trace", "synth", str(out), "--targets", str(p), "--positions", "30"]) == 0
    t = load_trace(out)
    assert t.experts.shape == (30, 2, 2) and t.n_experts == 16 and t.expert_bytes == [64, 64]
    assert "fitted to t.json" in capsys.readouterr().out
