"""Tests of device profiles and modeled time. Run: `pytest tests/test_clock.py`."""

from __future__ import annotations

import json

import pytest

from specdec.clock import (
    BUILTIN_NAMES,
    DeviceProfile,
    breakdown,
    get_profile,
    load_profile,
    modeled_time,
    this_machine,
)
from specdec.errors import SpecdecError

MIB = 2**20


def test_modeled_time_arithmetic():
    p = DeviceProfile("t", read_gbps=2.0, read_latency_s=1e-4, compute_scale=3.0)
    # 0.5 s compute × 3 + 4 GB / 2 GB/s + 1000 reads × 100 µs
    assert modeled_time(p, compute_s=0.5, bytes_read=4e9, reads=1000) == pytest.approx(3.6)
    parts = breakdown(p, 0.5, 4e9, 1000)
    assert (parts.compute_s, parts.transfer_s, parts.latency_s) == pytest.approx((1.5, 2.0, 0.1))
    assert modeled_time(p, 0.0, 0.0, 0) == 0.0
    with pytest.raises(SpecdecError):
        modeled_time(p, -1.0, 0.0, 0)


def test_from_effective_reproduces_the_measurement():
    p = DeviceProfile.from_effective(
        "x", effective_gbps=2.62, block_bytes=1.18e6, read_latency_s=1e-4
    )
    assert p.effective_gbps(1.18e6) == pytest.approx(2.62)
    assert p.read_gbps > 2.62  # the latency share is taken out of the bandwidth
    assert p.effective_gbps(64 * 1024) < p.effective_gbps(8 * MIB) < p.read_gbps
    # one 1.18 MB read takes what the measurement said
    assert modeled_time(p, 0.0, 1.18e6, 1) == pytest.approx(1.18e6 / 2.62e9)
    with pytest.raises(SpecdecError):
        DeviceProfile.from_effective("x", effective_gbps=2.0, block_bytes=1e5, read_latency_s=1e-3)


def test_builtin_mac_profiles_match_their_sources():
    m4 = get_profile("m4-24gb")
    assert m4.effective_gbps(1.18e6) == pytest.approx(2.62)
    m5 = get_profile("m5-24gb")
    assert m5.effective_gbps(4.61 * 2**30 / 700) == pytest.approx(4.4)
    assert set(BUILTIN_NAMES) == {"m4-24gb", "m5-24gb", "this-machine"}


def test_unknown_profile_lists_the_valid_names():
    with pytest.raises(SpecdecError) as e:
        get_profile("m9-1tb")
    for name in BUILTIN_NAMES:
        assert name in str(e.value)


def test_this_machine_from_read_bench(tmp_path):
    bench = {
        "block_bytes": MIB,
        "paths": [
            {"name": "direct-arena", "gbps": 3.2, "page_cache": False, "threads": 8},
            {"name": "direct-arena", "gbps": 2.3, "page_cache": False, "threads": 1},
            {"name": "buffered", "gbps": 9.0, "page_cache": True, "threads": 8},  # cache, ignored
        ],
    }
    path = tmp_path / "read.json"
    path.write_text(json.dumps(bench))
    p = this_machine(path)
    assert p.read_gbps == 3.2
    assert p.read_latency_s == pytest.approx(MIB / 2.3e9 - MIB / 3.2e9)
    # one read issued alone costs what the 1-thread run measured
    assert modeled_time(p, 0.0, MIB, 1) == pytest.approx(MIB / 2.3e9)
    path.write_text(json.dumps({"block_bytes": MIB}))
    with pytest.raises(SpecdecError):
        this_machine(path)


def test_this_machine_fallback(tmp_path):
    p = this_machine(tmp_path / "missing.json")
    assert p.effective_gbps(MIB) == pytest.approx(2.0)
    assert "fallback" in p.description


def test_load_user_profile_yaml_and_json(tmp_path):
    y = tmp_path / "mac.yaml"
    y.write_text("read_gbps: 5.0\nread_latency_s: 0.00005\ncompute_scale: 0.5\n")
    p = get_profile(str(y))
    assert (p.name, p.read_gbps, p.read_latency_s, p.compute_scale) == ("mac", 5.0, 5e-5, 0.5)
    j = tmp_path / "eff.json"
    j.write_text(
        json.dumps({"name": "e", "effective_gbps": 3.0, "block_bytes": MIB, "read_latency_s": 1e-4})
    )
    assert load_profile(j).effective_gbps(MIB) == pytest.approx(3.0)
    for text in (
        "read_gbps: 5\nread_latency_s: 0\nspeed: 3\n",
        "read_gbps: -1\nread_latency_s: 0\n",
        "- 1\n",
        "read_gbps: 5\n",
    ):
        y.write_text(text)
        with pytest.raises(SpecdecError):
            load_profile(y)
    with pytest.raises(SpecdecError):
        load_profile(tmp_path / "absent.yaml")
