"""Tests of device profiles: the read curve, read times, loading, the built-in profile files
(equal to what the code that built them computed), the read bench's measured `this-machine`,
the one default profile and the profile `--gamma auto` prices on.
Run: `pytest tests/clock/test_clock.py`."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml

from specdec.clock import (
    BUILTIN_NAMES,
    DEFAULT_PROFILE,
    DeviceProfile,
    auto_profile,
    get_profile,
    load_profile,
    measured_profile_path,
    profile_yaml,
)
from specdec.clock import profiles as profiles_module
from specdec.core.errors import SpecdecError

MIB = 2**20


def curve_profile(**kw) -> DeviceProfile:
    base = dict(read_curve=((1, 1.0), (4, 2.0)), read_block_bytes=1e6, read_latency_s=0.0)
    return DeviceProfile("t", **(base | kw))


def test_a_read_curve_made_non_decreasing_pools_each_point_below_an_earlier_one():
    from specdec.bench.device import _pooled_source
    from specdec.clock.profiles import non_decreasing

    rising = ((1.0, 1.75), (2.0, 1.94), (4.0, 2.0), (8.0, 2.02))
    assert non_decreasing(rising) == rising  # nothing to pool
    assert _pooled_source(rising, non_decreasing(rising)) == ""
    # the thirty-second session's medians: every later point below the one at 2 in flight
    r32 = ((1.0, 2.172), (2.0, 2.418), (4.0, 2.239), (8.0, 2.025), (16.0, 1.842))
    got = non_decreasing(r32)
    assert [n for n, _ in got] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert [g for _, g in got] == pytest.approx([sum(g for _, g in r32) / 5] * 5)
    # a dip pooled with the point before it, and a later rise kept
    dip = non_decreasing(((1, 2.0), (2, 3.0), (4, 2.5), (8, 3.5)))
    assert [n for n, _ in dip] == [1, 2, 4, 8]
    assert [g for _, g in dip] == pytest.approx([2.0, 2.75, 2.75, 3.5])
    assert "medians by reads in flight 1: 2, 2: 3, 4: 2.5, 8: 3.5" in _pooled_source(
        ((1, 2.0), (2, 3.0), (4, 2.5), (8, 3.5)), dip
    )


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
    from specdec.bench.read import measured_profile

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
    p = measured_profile(bench)
    assert p.read_curve == ((1.0, 2.3), (4.0, 2.9), (8.0, 3.2))
    assert p.compute == "measured" and p.read_block_bytes == MIB
    assert p.name == "this-machine" and "direct-arena" in p.description
    with pytest.raises(SpecdecError):
        measured_profile({"block_bytes": MIB})


BENCH = {
    "block_bytes": 1183744,
    "rounds": 5,
    "machine": {"cpu": "test cpu"},
    "paths": [
        {"name": "preadv_direct_arena", "gbps": 1.7171939136062162, "page_cache": False, "threads": 1},
        {"name": "preadv_direct_arena", "gbps": 3.146645410968511, "page_cache": False, "threads": 8},
        {"name": "preadv_buffered_arena", "gbps": 9.0, "page_cache": True, "threads": 8},
    ],
}  # fmt: skip


def test_read_bench_writes_this_machine_into_the_specdec_directory(tmp_path, monkeypatch):
    """`specdec bench read` -> $SPECDEC_CACHE/profiles/this-machine.yaml, which then is
    `this-machine` (every field, each with its source); the checkout is not read."""
    from specdec.bench.read import measured_profile, write_measured_profile

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    assert "fallback" in get_profile("this-machine").description  # nothing measured yet
    path = write_measured_profile(BENCH)
    assert path == measured_profile_path() == tmp_path / "cache" / "profiles" / "this-machine.yaml"
    loaded = get_profile("this-machine")
    assert asdict(loaded) == asdict(measured_profile(BENCH))  # sources included
    assert loaded.read_curve == ((1.0, 1.7171939136062162), (8.0, 3.146645410968511))
    data = yaml.safe_load(path.read_text())
    every = {f for f in asdict(loaded) if f != "sources"}
    assert every <= set(data)  # every field written, each with its source
    assert set(data["sources"]) == every - {"name", "description"}
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "other"))
    assert "fallback" in get_profile("this-machine").description


def test_bench_read_cli_writes_the_profile_unless_told_not_to(tmp_path, monkeypatch, capsys):
    import argparse

    from specdec.cli import store

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    store.save_measured_profile(BENCH, argparse.Namespace(no_profile=True), "t")
    assert not measured_profile_path().exists()
    store.save_measured_profile(BENCH, argparse.Namespace(no_profile=False), "t")
    assert (
        measured_profile_path().exists() and str(measured_profile_path()) in capsys.readouterr().err
    )
    cached_only = {**BENCH, "paths": BENCH["paths"][2:]}  # nothing bypassed the page cache
    measured_profile_path().unlink()
    store.save_measured_profile(cached_only, argparse.Namespace(no_profile=False), "t")
    assert not measured_profile_path().exists() and "not written" in capsys.readouterr().err


def test_this_machine_fallback(tmp_path, monkeypatch):
    """No measured file: the shipped fallback, with the values the code gave before the files."""
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "empty"))
    p = get_profile("this-machine")
    assert p.read_curve == ((1.0, 2.0),) and "fallback" in p.description
    old = DeviceProfile(
        "this-machine",
        compute="measured",
        router_sync_s=0.0,
        reads_in_flight=8,
        read_curve=((1, 2.0),),
        read_block_bytes=2**20,
        sources={
            "compute": "measured on this machine (wall minus time blocked on reads), per pass",
            "router_sync_s": "0: already inside the measured compute",
            "reads_in_flight": "this harness's ExpertReader: 8 threads",
            "read_curve": "anchors.md: fio 2.0 GB/s, 1 MiB O_DIRECT random reads",
        },
    )
    assert same(p, old, description=False, skip=LATER)


def test_load_user_profile_yaml_and_json(tmp_path):
    y = tmp_path / "mac.yaml"
    y.write_text(
        "mem_gbps: 200\npeak_tflops: 8\nrouter_sync_s: 0.00002\n"
        "read_curve: [[1, 3.0], [16, 6.0]]\nread_block_bytes: 1048576\noverlap_reads: true\n"
    )
    p = get_profile(str(y))
    assert (p.name, p.mem_gbps, p.read_gbps(16), p.overlap_reads) == ("mac", 200, 6.0, True)
    j = tmp_path / "m.json"
    full = {"mem_gbps": 9, "peak_tflops": 1, "router_sync_s": 0, "read_block_bytes": 1 << 20}
    j.write_text(json.dumps({"name": "j", "read_curve": [[1, 2.0]], **full}))
    assert load_profile(j).name == "j"
    for text in (
        "mem_gbps: 5\nspeed: 3\n",  # unknown field
        "mem_gbps: -1\npeak_tflops: 1\nrouter_sync_s: 0\nread_curve: [[1, 2]]\n"
        "read_block_bytes: 4096\n",  # complete, one number out of range
        "- 1\n",
        "read_gbps: 5\nread_latency_s: 0\ncompute_scale: 1\n",  # the old format, named
        "mem_gbps: 5\npeak_tflops: 1\nrouter_sync_s: 0\nread_curve: [[1, x]]\n"
        "read_block_bytes: 4096\n",
        "name: x\n",  # the model's numbers missing: no defaults of another machine
    ):
        y.write_text(text)
        with pytest.raises(SpecdecError):
            load_profile(y)
    with pytest.raises(SpecdecError):
        load_profile(tmp_path / "absent.yaml")


# ----------------------------------------------------------------------------- built-in files


# fields added after the built-in files: each built-in's value has its own test
LATER = ("land_gbps", "land_curve", "position_s", "miss_call_s", "batched_verify")


def same(a: DeviceProfile, b: DeviceProfile, description: bool = True, skip=()) -> bool:
    """Every field but `skip`'s equal, as the same floats (and types), sources included."""
    da, db = asdict(a), asdict(b)
    if not description:
        da.pop("description"), db.pop("description")
    for d in (da, db):
        d["sources"] = {k: v for k, v in d["sources"].items() if k not in skip}
        for name in skip:
            d.pop(name)
    return da == db and all(type(da[k]) is type(db[k]) for k in da)


def old_builtins() -> dict[str, DeviceProfile]:
    """m4-24gb and m5-24gb as specdec/clock/profiles.py computed them before they were files."""
    sync = 0.6e-3
    gain = 1.995 / 1.565  # this machine's read bench, 1 -> 8 threads, borrowed
    m4 = DeviceProfile(
        "m4-24gb",
        mem_gbps=100.0,
        peak_tflops=4.0,
        router_sync_s=sync,
        read_curve=((1, 2.62), (8, round(2.62 * gain, 2))),
        read_block_bytes=1.18e6,
        read_latency_s=100e-6,
        reads_in_flight=8,
        overlap_reads=False,
        description="24 GB M4 of the seed question running a Python runtime like this harness",
        sources={
            "mem_gbps": "assumed: 83% of the M4's 120 GB/s LPDDR5X (Apple spec), the share "
            "bandwidth-bound kernels usually reach",
            "peak_tflops": "assumed: M4 10-core GPU, 10 × 128 ALUs × 2 FLOP × ~1.58 GHz ≈ 4.0 "
            "TFLOP/s, 16-bit at the 32-bit rate",
            "router_sync_s": "measured by the seed question (§2): ~0.6 ms per router call in "
            "Python on its M4 (matmul, argsort, .tolist() GPU sync)",
            "read_curve": "(1, 2.62): seed question §5, preadv + F_NOCACHE into a preallocated "
            "slot, 1.18 MB blocks, taken as one read in flight; (8, 3.34): assumed, the 1 → 8 "
            "gain this machine's read bench measured (1.565 → 1.995 GB/s, ×1.27)",
            "read_latency_s": "assumed: 100 µs, NVMe random read at queue depth 1",
            "reads_in_flight": "this harness's ExpertReader: 8 threads",
            "overlap_reads": "this harness: a layer's reads complete before its experts compute",
        },
    )
    m5 = DeviceProfile(
        "m5-24gb",
        mem_gbps=127.0,
        peak_tflops=4.4,
        router_sync_s=sync / 30,
        read_curve=((1, round(4.4 / gain, 2)), (9, 4.4)),
        read_block_bytes=4.61 * 2**30 / 700,  # #627: 700 cached experts take 4.61 GiB
        read_latency_s=100e-6,
        reads_in_flight=9,
        overlap_reads=True,
        description="24 GB M5 of ds4 issue #627 running ds4 (C, Metal)",
        sources={
            "mem_gbps": "assumed: 83% of the M5's 153 GB/s (Apple spec)",
            "peak_tflops": "assumed: M5 10-core GPU at ~1.1x the M4's clock-for-clock rate; "
            "its neural accelerators are not counted",
            "router_sync_s": "assumed: the seed question's 0.6 ms / 30 (it says its per-layer "
            "overhead is ~30x ds4's)",
            "read_curve": "(9, 4.4): ds4 #627, ~4.4 GB/s through ds4's pread pool (9 threads) at "
            "~7.07 MB experts; (1, 3.45): assumed, the same 1 → 8 gain as this machine's bench",
            "read_latency_s": "assumed: 100 µs",
            "reads_in_flight": "ds4: 9 read threads by default (anchors.md)",
            "overlap_reads": "ds4 starts misses when the router's ids are known and computes the "
            "shared and resident experts meanwhile (anchors.md)",
        },
    )
    return {"m4-24gb": m4, "m5-24gb": m5}


@pytest.mark.parametrize("name", ["m4-24gb", "m5-24gb"])
def test_builtin_files_hold_the_numbers_the_code_computed(name):
    new, old = get_profile(name), old_builtins()[name]
    assert same(new, old, skip=LATER), (asdict(new), asdict(old))  # the same floats, bit for bit
    # the file holds every field (none left to a default) and the sources as they were
    data = yaml.safe_load((profiles_module.BUILTIN_DIR / f"{name}.yaml").read_text())
    assert set(data) == set(asdict(new))
    assert {k: v for k, v in data["sources"].items() if k not in LATER} == old.sources


def test_the_later_fields_of_the_builtins():
    """What each built-in says of the fields that came after its file: no landing (unified
    memory, a CPU), no measured further-position or miss-call cost, and its runtime's verify:
    ds4 (m5) batched, a Python runtime like this harness (m4) and this machine as the run
    computed."""
    for name in BUILTIN_NAMES:
        p = load_profile(profiles_module.BUILTIN_DIR / f"{name}.yaml")  # the shipped file
        assert (p.land_gbps, p.land_curve, p.position_s, p.miss_call_s) == (None, (), 0.0, 0.0)
        assert p.batched_verify is (name == "m5-24gb")
        assert {"position_s", "miss_call_s", "batched_verify", "land_gbps"} <= set(p.sources)


def test_the_same_check_fails_on_a_different_float(tmp_path):
    m4 = old_builtins()["m4-24gb"]
    text = (profiles_module.BUILTIN_DIR / "m4-24gb.yaml").read_text()
    (tmp_path / "m4-24gb.yaml").write_text(text.replace("[8, 3.34]", "[8, 3.3400000000000003]"))
    assert not same(load_profile(tmp_path / "m4-24gb.yaml"), m4, skip=LATER)


def test_builtin_names_are_the_files_found(tmp_path, monkeypatch):
    files = sorted(p.stem for p in profiles_module.BUILTIN_DIR.glob("*.yaml"))
    assert list(BUILTIN_NAMES) == files and set(files) >= {"m4-24gb", "m5-24gb", "this-machine"}
    for name in BUILTIN_NAMES:  # each loads by the user's loader; its name is its file's
        data = yaml.safe_load((profiles_module.BUILTIN_DIR / f"{name}.yaml").read_text())
        assert set(data) == set(asdict(DeviceProfile(name)))  # every field written out
        assert load_profile(profiles_module.BUILTIN_DIR / f"{name}.yaml").name == name
        assert get_profile(name).name == name
    # adding a profile is adding a file: the registry lists it, messages name it
    extra = tmp_path / "profiles"
    extra.mkdir()
    for p in profiles_module.BUILTIN_DIR.glob("*.yaml"):
        (extra / p.name).write_text(p.read_text())
    (extra / "m9-1tb.yaml").write_text(
        "name: m9-1tb\nread_curve: [[1, 9.0]]\nmem_gbps: 9\npeak_tflops: 1\nrouter_sync_s: 0\n"
        "read_block_bytes: 1048576\n"
    )
    monkeypatch.setattr(profiles_module, "BUILTIN_DIR", extra)
    monkeypatch.setattr(profiles_module, "BUILTIN_NAMES", profiles_module.builtin_names())
    assert get_profile("m9-1tb").read_gbps(1) == 9.0
    with pytest.raises(SpecdecError, match="m9-1tb"):
        get_profile("m10")


def test_every_builtin_has_its_specdec_exp_device_and_the_default_is_one():
    conf = Path(__file__).resolve().parents[2] / "conf"
    for name in BUILTIN_NAMES:
        assert yaml.safe_load((conf / "device" / f"{name}.yaml").read_text()) == {"profile": name}
    assert DEFAULT_PROFILE in BUILTIN_NAMES
    # Hydra's YAML cannot import Python: conf/config.yaml's device default is DEFAULT_PROFILE
    defaults = yaml.safe_load((conf / "config.yaml").read_text())["defaults"]
    device = [d["device"] for d in defaults if isinstance(d, dict) and "device" in d]
    assert device == [DEFAULT_PROFILE]


def test_profile_yaml_round_trips(tmp_path):
    for name in BUILTIN_NAMES:
        p = get_profile(name)
        path = tmp_path / f"{name}.yaml"
        path.write_text(profile_yaml(p, "a header\nof two lines"))
        assert same(load_profile(path), p)
        assert path.read_text().startswith("# a header\n# of two lines\n")


def test_auto_prices_on_the_first_roofline_profile_else_the_default_with_a_note(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    m5, here = get_profile("m5-24gb"), get_profile("this-machine")
    assert auto_profile((here, m5)) == (m5, None)  # given and roofline: no note
    assert auto_profile(())[0].name == DEFAULT_PROFILE and auto_profile(())[1] is None
    chosen, note = auto_profile((here,))  # measured compute only: the default, said
    assert chosen.name == DEFAULT_PROFILE
    assert note and DEFAULT_PROFILE in note and "this-machine" in note and "\n" not in note
