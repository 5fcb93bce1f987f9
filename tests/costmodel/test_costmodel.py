"""Tests of the union cost model: fits, speedup, break-even, best γ, and `specdec union-model`.

Run: `pytest tests/costmodel/test_costmodel.py`. The seed question's table is the reference: its stated
1.83x / 1.30x / 1.08x must come out of the model.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.cli.union_model import parse_union
from specdec.core.errors import SpecdecError
from specdec.costmodel import (
    best_gamma,
    break_even,
    build_union_model,
    expected_tokens,
    fit_linear,
    fit_overlap,
    fit_power,
    overlap_union,
    solve_acceptance,
    speedup,
)
from tests.helpers import fast_cases

QUESTION = {1: 8.0, 2: 13.42, 3: 17.99, 8: 35.01}  # seed question §3, top-8 MiniMax-M2.5


def test_question_figures_reproduce():
    m = build_union_model(QUESTION, alphas=[0.8, 0.9, 1.0], k=8)
    by_alpha = {r.alpha: r for r in m.alphas}
    assert by_alpha[1.0].speedup == pytest.approx(1.83, abs=0.01)
    assert by_alpha[1.0].best_gamma == 8
    assert by_alpha[0.9].speedup == pytest.approx(1.30, abs=0.01)
    assert by_alpha[0.9].best_gamma == 8
    assert by_alpha[0.8].speedup == pytest.approx(1.08, abs=0.01)
    assert by_alpha[0.8].best_gamma == 3
    rows = {r.gamma: r for r in m.gammas}
    assert rows[8].ceiling == pytest.approx(8 / (35.01 / 8))
    # "net loss below ~72%" holds for γ = 3 only: γ = 2 breaks even lower, γ = 8 higher
    assert rows[2].break_even == pytest.approx(0.6775)
    assert rows[3].break_even == pytest.approx(0.72423, abs=1e-5)
    assert rows[8].break_even == pytest.approx(0.81674, abs=1e-5)
    assert m.break_even_any == pytest.approx(0.6775)
    assert rows[1].break_even is None


def test_expected_tokens_matches_closed_form():
    for gamma in (1, 2, 3, 8):
        assert expected_tokens(1.0, gamma) == gamma
        for a in (0.0, 0.3, 0.9):
            assert expected_tokens(a, gamma) == pytest.approx((1 - a**gamma) / (1 - a))


def test_linear_fit_recovers_true_slope():
    k, s = 6.0, 0.37
    table = {g: k * (1 + s * (g - 1)) for g in (1, 2, 3, 5, 8)}
    fit = fit_linear(table)
    assert fit.slope == pytest.approx(s, abs=1e-12)
    assert fit.rmse == pytest.approx(0.0, abs=1e-12)
    # k given and no γ = 1 row: same slope
    assert fit_linear({g: u for g, u in table.items() if g > 1}, k=k).slope == pytest.approx(s)


def test_power_fit_recovers_true_exponent():
    table = {g: 8 * g**0.71 for g in (1, 2, 3, 4, 8)}
    fit = fit_power(table)
    assert fit.exponent == pytest.approx(0.71, abs=1e-6)
    assert fit.rmse < 1e-5


def test_overlap_fit_recovers_rho_and_model_limits():
    gammas = np.array([1, 2, 3, 4, 8], dtype=float)
    table = dict(zip(map(int, gammas), overlap_union(gammas, 8, 0.4, 64), strict=True))
    fit = fit_overlap(table, n_experts=64)
    assert fit.rho == pytest.approx(0.4, abs=1e-6)
    assert fit.rho_source == "fit"
    # the first step adds exactly (1 − ρ)·k for any pool size: ρ is the one-step overlap
    for n in (None, 16, 256):
        assert overlap_union(np.array(2.0), 8, 0.3, n) == pytest.approx(8 * 1.7)
    # unbounded pool: linear with slope 1 − ρ; bounded: saturates below N
    assert overlap_union(gammas, 8, 0.3, None) == pytest.approx(8 * (1 + 0.7 * (gammas - 1)))
    assert overlap_union(np.array(200.0), 8, 0.3, 64) < 64
    measured = fit_overlap(QUESTION, n_experts=256, rho=0.334)
    assert measured.rho_source == "measured"
    # the one-step model at the measured ρ matches γ = 2 and overshoots γ = 8 (reuse reaches
    # further back than one token)
    assert abs(measured.residuals[2]) < 0.2
    assert measured.residuals[8] < -5


@settings(max_examples=60, deadline=None)
@given(gamma=st.integers(2, 12), frac=st.floats(0.0, 1.0), draft=st.floats(0.0, 0.05))
def test_break_even_solves_e_equals_cost(gamma, frac, draft):
    total = 1.0 + frac * (gamma - 1)  # pass cost anywhere in [1, γ]
    cost = total - draft * (gamma - 1)  # union part; the drafter pays the rest (cost ≥ 0.45)
    be = break_even(gamma, cost, draft)
    assert be is not None and 0.0 <= be <= 1.0
    assert expected_tokens(be, gamma) == pytest.approx(total, rel=1e-9)
    assert speedup(be, gamma, cost, draft) == pytest.approx(1.0, rel=1e-9)


def test_break_even_closed_form_equals_root_finding():
    for cost in (1.0, 1.2, 1.6775, 1.99, 2.0):
        assert break_even(2, cost) == pytest.approx(solve_acceptance(2, cost), abs=1e-12)


def test_break_even_edges():
    assert break_even(1, 1.0) is None  # plain decoding: nothing to break even
    assert break_even(3, 3.5) is None  # ceiling 3/3.5 < 1: loses at any α
    assert break_even(3, 0.9) == 0.0  # cheaper than a plain pass: never loses
    assert break_even(3, 2.0, draft_cost=0.25) == pytest.approx(break_even(3, 2.5))


def test_best_gamma():
    costs = {1: 1.0, 2: 1.5, 3: 2.0}
    assert best_gamma(0.0, costs) == (1, 1.0)  # every draft rejected: plain decoding wins
    g, s = best_gamma(1.0, costs)
    assert (g, s) == (3, pytest.approx(1.5))  # 3/2.0 beats 2/1.5
    # α = 0.5: γ = 2 gives 1.5/1.5 = 1.0, a tie with plain decoding, which wins ties
    assert best_gamma(0.5, costs) == (1, 1.0)
    g, s = best_gamma(0.8, costs)  # γ = 2: 1.8/1.5 = 1.20; γ = 3: 2.44/2.0 = 1.22
    assert (g, s) == (3, pytest.approx(2.44 / 2.0))
    with pytest.raises(SpecdecError):
        best_gamma(1.5, costs)


def test_unmeasured_gamma_comes_from_the_chosen_fit():
    m = build_union_model(QUESTION, alphas=[0.9], gammas=[2, 4, 8])
    rows = {r.gamma: r for r in m.gammas}
    assert [r.gamma for r in m.gammas] == [1, 2, 4, 8]  # γ = 1 always present
    assert rows[4].source == "linear_fit"
    assert rows[4].union == pytest.approx(m.linear.union(4))
    assert rows[8].source == "measured"
    p = build_union_model(QUESTION, alphas=[0.9], gammas=[4], fill="power")
    assert {r.gamma: r for r in p.gammas}[4].union == pytest.approx(p.power.union(4))


def test_parse_union_and_bad_tables():
    assert parse_union("1:8, 2:13.42") == {1: 8.0, 2: 13.42}
    for bad in ("1:8,2", "1:8,,2:3", "1.5:8", "1:8,1:9", "a:3"):
        with pytest.raises(SpecdecError):
            parse_union(bad)
    with pytest.raises(SpecdecError):
        build_union_model({1: 8.0}, alphas=[0.9])  # nothing to fit the growth from
    with pytest.raises(SpecdecError):
        build_union_model({2: 13.0, 3: 17.0}, alphas=[0.9])  # no k and no γ = 1


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specdec", "union-model", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_cli_json_schema(tmp_path):
    out = _cli(
        "--union", "1:8,2:13.42,3:17.99,8:35.01", "--k", "8", "--alpha", "0.8,0.9,1.0",
        "--plot", str(tmp_path),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))  # beside its .specdec-plots marker
    assert pngs == ["speedup_vs_acceptance.png", "union_vs_gamma.png"]
    text = _cli(
        "--union", "1:8,2:13.42,3:17.99,8:35.01", "--k", "8", "--alpha", "0.8,0.9,1.0",
        "--gammas", "1,2,3,4,8", "--json",
    )  # fmt: skip
    assert text.returncode == 0, text.stderr
    data = json.loads(text.stdout.strip().splitlines()[-1])
    assert data["k"] == 8
    assert set(data["fits"]) >= {"linear", "power", "overlap"}
    assert {"slope", "rmse"} <= set(data["fits"]["linear"])
    assert {"exponent", "rmse"} <= set(data["fits"]["power"])
    assert {"rho", "rmse"} <= set(data["fits"]["overlap"])
    assert [g["gamma"] for g in data["gammas"]] == [1, 2, 3, 4, 8]
    for g in data["gammas"]:
        assert {"gamma", "union", "cost", "ceiling", "break_even", "source"} <= set(g)
    assert {g["gamma"]: g["source"] for g in data["gammas"]}[4] == "linear_fit"
    for a in data["alphas"]:
        assert {"alpha", "best_gamma", "speedup", "speedup_by_gamma"} <= set(a)
        assert set(a["speedup_by_gamma"]) == {"1", "2", "3", "4", "8"}
    assert "1.8280x" in out.stdout  # the text table prints the ceiling


@pytest.mark.parametrize(
    "args",
    fast_cases(
        [
            ["--union", "1:8,2"],
            ["--union", "0:8,2:13"],
            ["--union", "1:8,2:13", "--alpha", "1.2"],
            ["--union", "1:8,2:13", "--alpha", "-0.1"],
            ["--union", "1:8,2:13", "--k", "0"],
            ["--union", "1:8,2:13", "--k", "-3"],
            ["--union", "1:8,2:abc"],
            ["--union", "1:8,2:13", "--gammas", "0,2"],
        ]
    ),  # each case is a process of its own
)
def test_cli_bad_input_is_one_line(args):
    out = _cli(*args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specdec: error:"), out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_plots_write_pngs(tmp_path):
    from specdec.costmodel.plots import plot_speedup_vs_acceptance, plot_union_vs_gamma

    fits = [fit_linear(QUESTION), fit_power(QUESTION), fit_overlap(QUESTION, n_experts=256)]
    per_layer = {1: [8.0] * 4, 2: [13.0, 13.5, 13.9, 13.3], 8: [34.0, 36.0, 35.0, 35.0]}
    cost = {g: u / 8 for g, u in QUESTION.items()}
    paths = [
        plot_union_vs_gamma(per_layer, fits, tmp_path / "u.png"),
        plot_union_vs_gamma(QUESTION, fits, tmp_path / "u_means.png"),
        plot_speedup_vs_acceptance([(0.85, 3, 1.1)], cost, tmp_path / "s.png"),
    ]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["s.png", "u.png", "u_means.png"]


def test_draft_cost_enters_every_pass():
    m = build_union_model(QUESTION, alphas=[0.9], draft_cost=0.05)
    rows = {r.gamma: r for r in m.gammas}
    assert rows[8].cost == pytest.approx(35.01 / 8 + 0.05 * 7)
    assert m.cost_by_gamma[8] == pytest.approx(35.01 / 8)  # the union part alone
    assert m.alphas[0].speedup_by_gamma[8] == pytest.approx(expected_tokens(0.9, 8) / rows[8].cost)
    assert rows[8].break_even == pytest.approx(solve_acceptance(8, rows[8].cost))


def test_measured_break_even_interpolates_the_last_crossing_into_1x():
    from specdec.costmodel.speedup import measured_break_even

    assert measured_break_even([(0.8, 0.84), (0.9, 1.02), (1.0, 1.04)]) == pytest.approx(
        0.8 + 0.16 / 0.18 * 0.1
    )
    # a dip above the crossing: the α from which the speed-up stays at 1x or more
    assert measured_break_even([(0.8, 1.01), (0.9, 0.96), (1.0, 1.1)]) == pytest.approx(
        0.9 + 0.04 / 0.14 * 0.1
    )
    assert measured_break_even([(0.8, 1.2), (1.0, 1.3)]) == 0.8  # every α pays: the lowest
    assert measured_break_even([(0.8, 0.7), (1.0, 0.95)]) is None  # α 1 still loses
    assert measured_break_even([]) is None


def test_break_even_words_say_which_end_it_fell_at():
    from specdec.costmodel.speedup import break_even_words

    assert break_even_words(0.873, 0.8, 1.0) == "0.87"
    assert break_even_words(0.8, 0.8, 1.0) == "0.80 or lower (at or above 1x from α 0.8)"
    assert break_even_words(None, 0.8, 1.0) == "above 1 (below 1x at α 1)"
