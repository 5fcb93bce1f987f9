"""Tests of device profiles: the read curve, read times, loading and the read bench's curve.
Run: `pytest tests/clock/test_clock.py`."""

from __future__ import annotations

import json

import pytest

from specdec.clock import BUILTIN_NAMES, DeviceProfile, get_profile, load_profile, this_machine
from specdec.core.errors import SpecdecError

MIB = 2**20


def curve_profile(**kw) -> DeviceProfile:
    base = dict(read_curve=((1, 1.0), (4, 2.0)), read_block_bytes=1e6, read_latency_s=0.0)
    return DeviceProfile("t", **(base | kw))


def test_read_curve_interpolates_and_clamps():
    p = curve_profile(read_curve=[[4, 2.0], [1, 1.0]])  # any order, lists as YAML gives them
    assert p.read_curve == ((1.0, 1.0), (4.0, 2.0))
    assert p.read_gbps(1) == 1.0 and p.read_gbps(4) == 2.0
    assert p.read_gbps(2.5) == pytest.approx(1.5)  # linear between points
    assert p.read_gbps(0.5) == 1.0 and p.read_gbps(64) == 2.0  # clamped at the ends


def test_read_time_uses_in_flight_and_reproduces_the_curve():
    p = curve_profile(reads_in_flight=4)
    # 2 reads: 2 in flight, 1 + (2 - 1) / 3 GB/s
    assert p.read_time(2, 1e6) == pytest.approx(2e6 / (4 / 3 * 1e9))
    # 8 reads: capped at 4 in flight, 2 GB/s
    assert p.read_time(8, 1e6) == pytest.approx(8e6 / 2e9)
    assert p.read_time(0, 1e6) == 0.0
    # with a latency, the curve's own block size still costs exactly what the curve says
    q = curve_profile(read_latency_s=1e-4, reads_in_flight=4)
    for n in (1, 2, 4):
        assert q.read_time(n, 1e6) == pytest.approx(n * 1e6 / (q.read_gbps(n) * 1e9))
    # and a half-size read pays the latency in full: 0.5e6 / (1e6 / (1 ms - 0.1 ms)) + 0.1 ms
    assert q.read_time(1, 5e5) == pytest.approx(0.5e6 * 0.9e-3 / 1e6 + 1e-4)
    assert q.read_time(1, 5e5) > 5e5 / 1e9  # smaller reads get slower per byte


def test_invalid_profiles_are_refused():
    for kw in (
        dict(mem_gbps=0),
        dict(peak_tflops=-1),
        dict(router_sync_s=-1e-3),
        dict(read_curve=()),
        dict(read_curve=((0, 1.0),)),
        dict(read_curve=((1, 0.0),)),
        dict(compute="guess"),
        dict(read_latency_s=2e-3),  # longer than one 1 MB read at 1 GB/s
    ):
        with pytest.raises(SpecdecError):
            curve_profile(**kw)


def test_builtin_mac_profiles_match_their_sources():
    m4 = get_profile("m4-24gb")
    assert m4.read_gbps(1) == 2.62 and m4.read_block_bytes == 1.18e6
    assert m4.router_sync_s == pytest.approx(0.6e-3)
    m5 = get_profile("m5-24gb")
    assert m5.read_gbps(9) == 4.4 and m5.reads_in_flight == 9 and m5.overlap_reads
    for p in (m4, m5):  # every number of a Mac profile names where it comes from
        assert {"mem_gbps", "peak_tflops", "router_sync_s", "read_curve"} <= set(p.sources)
    assert set(BUILTIN_NAMES) == {"m4-24gb", "m5-24gb", "this-machine"}


def test_unknown_profile_lists_the_valid_names():
    with pytest.raises(SpecdecError) as e:
        get_profile("m9-1tb")
    for name in BUILTIN_NAMES:
        assert name in str(e.value)


def test_this_machine_curve_from_read_bench(tmp_path):
    bench = {
        "block_bytes": MIB,
        "paths": [
            {"name": "direct-arena", "gbps": 3.2, "page_cache": False, "threads": 8},
            {"name": "direct-arena", "gbps": 2.3, "page_cache": False, "threads": 1},
            {"name": "direct-arena", "gbps": 2.9, "page_cache": False, "threads": 4},
            {"name": "fresh-arena", "gbps": 1.0, "page_cache": False, "threads": 8},
            {"name": "buffered", "gbps": 9.0, "page_cache": True, "threads": 8},  # cache, ignored
        ],
    }
    path = tmp_path / "read.json"
    path.write_text(json.dumps(bench))
    p = this_machine(path)
    assert p.read_curve == ((1.0, 2.3), (4.0, 2.9), (8.0, 3.2))
    assert p.compute == "measured" and p.read_block_bytes == MIB
    path.write_text(json.dumps({"block_bytes": MIB}))
    with pytest.raises(SpecdecError):
        this_machine(path)


def test_this_machine_fallback(tmp_path):
    p = this_machine(tmp_path / "missing.json")
    assert p.read_curve == ((1.0, 2.0),) and "fallback" in p.description


def test_load_user_profile_yaml_and_json(tmp_path):
    y = tmp_path / "mac.yaml"
    y.write_text(
        "mem_gbps: 200\npeak_tflops: 8\nrouter_sync_s: 0.00002\n"
        "read_curve: [[1, 3.0], [16, 6.0]]\nread_block_bytes: 1048576\noverlap_reads: true\n"
    )
    p = get_profile(str(y))
    assert (p.name, p.mem_gbps, p.read_gbps(16), p.overlap_reads) == ("mac", 200, 6.0, True)
    j = tmp_path / "m.json"
    j.write_text(json.dumps({"name": "j", "read_curve": [[1, 2.0]]}))
    assert load_profile(j).name == "j"
    for text in (
        "mem_gbps: 5\nspeed: 3\n",  # unknown field
        "mem_gbps: -1\n",
        "- 1\n",
        "read_gbps: 5\nread_latency_s: 0\ncompute_scale: 1\n",  # the old format, named
        "read_curve: [[1, x]]\n",
    ):
        y.write_text(text)
        with pytest.raises(SpecdecError):
            load_profile(y)
    with pytest.raises(SpecdecError):
        load_profile(tmp_path / "absent.yaml")
