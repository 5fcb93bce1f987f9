"""A profile bracketing runs: the mean of one machine's profiles measured before and after them
(specdec.clock.bracket), and `python -m analysis.cuda` modeling a session's runs on one.

Run: `pytest tests/clock/test_bracket.py`.
"""

from __future__ import annotations

import pytest

from specdec.clock import DeviceProfile
from specdec.clock.bracket import bracket
from specdec.core.errors import SpecdecError


def profile(name: str, **kw) -> DeviceProfile:
    base = dict(
        mem_gbps=1000.0,
        peak_tflops=400.0,
        router_sync_s=1e-3,
        miss_call_s=4e-4,
        read_curve=((1.0, 2.0), (16.0, 2.0)),
        read_block_bytes=8e6,
        read_latency_s=30e-6,
        land_curve=((1.0, 70.0), (4.0, 160.0)),
    )
    return DeviceProfile(name, **(base | kw))


def test_a_bracket_is_the_mean_of_every_measured_number_at_every_point_either_has():
    before = profile("r38", read_curve=((1.0, 2.1), (16.0, 2.1)))
    after = profile(
        "r38-2",
        mem_gbps=1024.0,
        miss_call_s=1.3e-3,
        read_curve=((1.0, 1.5), (4.0, 1.5), (8.0, 1.6), (16.0, 1.6)),
        land_curve=((1.0, 88.0), (2.0, 52.0)),
    )
    mid = bracket([before, after])
    assert mid.name == "r38+r38-2" and "r38 and r38-2" in mid.description
    assert mid.mem_gbps == 1012.0 and mid.miss_call_s == pytest.approx(8.5e-4)
    assert mid.router_sync_s == 1e-3 and mid.read_latency_s == 30e-6
    # the read curve at the union of points, each curve read as the model reads it
    assert [n for n, _ in mid.read_curve] == [1.0, 4.0, 8.0, 16.0]
    assert [g for _, g in mid.read_curve] == pytest.approx([1.8, 1.8, 1.85, 1.85])
    # the landing curve: the first clamped past its last point (4 blocks), the second past 2
    assert [n for n, _ in mid.land_curve] == [1.0, 2.0, 4.0]
    assert [g for _, g in mid.land_curve] == pytest.approx([79.0, 76.0, 106.0])
    assert set(mid.sources) >= {"read_curve", "mem_gbps"}
    # what the model charges lies between the two moments: a batch of 9 reads with 8 in flight
    times = [p.read_time(9, 8e6) for p in (before, mid, after)]
    assert times[0] < times[1] < times[2]


def test_only_one_machines_profiles_bracket_and_the_message_names_what_differs():
    a = profile("a")
    for kw, field in (
        (dict(read_block_bytes=4e6), "read_block_bytes"),
        (dict(reads_in_flight=16), "reads_in_flight"),
        (dict(compute="measured"), "compute"),
        (dict(overlap_reads=True), "overlap_reads"),
    ):
        with pytest.raises(SpecdecError, match=f"differ in {field}") as e:
            bracket([a, profile("b", **kw)])
        assert "\n" not in str(e.value)
    with pytest.raises(SpecdecError, match="two or more"):
        bracket([a])
    with pytest.raises(SpecdecError, match="land_curve and some none"):
        bracket([a, profile("b", land_curve=(), land_gbps=7.0)])


def test_a_landing_measured_by_one_figure_brackets_to_its_mean_or_none():
    a, b = (profile(n, land_curve=(), land_gbps=g) for n, g in (("a", 6.0), ("b", 8.0)))
    assert bracket([a, b]).land_gbps == 7.0 and bracket([a, b]).land_curve == ()
    assert bracket([a, profile("c", land_curve=(), land_gbps=None)]).land_gbps is None


def test_a_brackets_latency_stays_below_one_read_of_its_mean_curve():
    # each alone is valid (the latency below a read's time at its own rate), the mean latency
    # would not be at the mean curve's slowest point: it is capped, and the profile is valid
    a = profile("a", read_curve=((1.0, 1.0),), read_block_bytes=1e6, read_latency_s=0.9e-3)
    b = profile("b", read_curve=((1.0, 3.0),), read_block_bytes=1e6, read_latency_s=0.3e-3)
    mid = bracket([a, b])  # 2 GB/s: a read takes 0.5 ms, the mean latency 0.6 ms
    assert mid.read_latency_s == pytest.approx(0.9 * 1e6 / 2e9)


def test_the_cuda_tables_model_a_session_on_its_bracket():
    from analysis import cuda

    profs = cuda.profiles()
    mid = profs["h100-r38+h100-r38-2"]
    ends = [profs["h100-r38"].read_curve[0][1], profs["h100-r38-2"].read_curve[0][1]]
    assert min(ends) < mid.read_curve[0][1] < max(ends)
    runs = [r for r in cuda.runs("auto") if r.get("session") == 38]
    assert len(runs) == 4  # both sides of two pairs, each modeled between the two moments
    for row in runs:
        tps = [cuda.modeled_tps(row, profs[n]) for n in ("h100-r38-2", "h100-r38")]
        assert tps[0] < cuda.modeled_tps(row, mid) < tps[1]


def test_a_session_profiled_between_its_grids_models_each_budget_on_its_own_profiles():
    # the thirty-ninth: 9 GB priced on the profile before it, 10% on the one between the grids;
    # each grid's bracket is the pair of profiles around it, not the session's first and last
    from analysis import cuda

    rows = {r["budget"]: r for r in cuda.runs("spec") if r.get("session") == 39}
    assert set(rows) == {"9GB", "10%"}
    assert cuda.own(rows["9GB"]) == "h100-r39" and cuda.own(rows["10%"]) == "h100-r39-2"
    assert "h100-r39-2+h100-r39-3" in cuda.names(rows["10%"])
    assert "h100-r39-2+h100-r39-3" not in cuda.names(rows["9GB"])
    # the model table: one row a (profile, grid), the profile between the grids in both roles
    assert cuda.model_row(rows["9GB"], "h100-r39-2") == "h100-r39-2, session 39's 9GB runs"
    assert cuda.model_row(rows["10%"], "h100-r39-2") == "h100-r39-2, session 39's 10% runs"
    before = next(r for r in cuda.runs("spec") if r.get("session") == 34)
    assert cuda.model_row(before, "h200-r34") == "h200-r34"
