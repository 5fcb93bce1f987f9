"""The device profile's landing bench reads real blocks into the expert kernel's slots.

Run: `pytest tests/bench/test_device_bench.py`. On a CPU the landing time itself is null (the
CPU computes where the bytes lie); what is checked is the decode-ordered sequence it times on
CUDA: blocks O_DIRECT-read from a packed file land in the slots byte for byte, and the layer
computed on them equals the layer computed on the same bytes stored by the host.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from specdec.bench import device
from specdec.store.layout import EXPERTS_BIN
from specdec.store.reader import ExpertReader

HIDDEN, INTER, N = 512, 256, 3  # every tensor a whole number of 4 KiB pages: O_DIRECT-able


def test_read_blocks_land_in_the_slots_and_compute_as_stored(tmp_path):
    index = device.block_file(tmp_path, HIDDEN, INTER, blocks=5)
    arena, views, _ = device._expert_arena(HIDDEN, INTER, N, 4, 64)
    slot_bytes = arena.slot_bytes
    assert index.slot_bytes == slot_bytes and arena.direct
    data = np.fromfile(tmp_path / EXPERTS_BIN, np.uint8).reshape(5, slot_bytes)
    picks = [4, 0, 2]
    with ExpertReader(tmp_path, index, arena, io="direct", threads=2) as reader:
        reader.read([(0, e, s) for s, e in enumerate(picks)])
    for s, e in enumerate(picks):
        assert np.array_equal(np.concatenate(arena.segments(s)), data[e])
    x = mx.random.normal((N, HIDDEN), key=mx.random.key(0))
    idx = mx.arange(N, dtype=mx.uint32).reshape(N, 1)
    read = device._layer(views, x, idx, 4, 64)
    stored, views2, _ = device._expert_arena(HIDDEN, INTER, N, 4, 64)
    for s, e in enumerate(picks):  # the same bytes, stored by the host segment by segment
        for piece, seg in zip(stored.segments(s), stored.segments_, strict=True):
            piece[:] = data[e][seg.start : seg.end]
    again = device._layer(views2, x, idx, 4, 64)
    assert mx.all(mx.isfinite(read)).item()
    assert mx.array_equal(read, again).item()


def test_landing_is_null_where_the_accelerator_computes_in_place():
    got = device.landing(HIDDEN, INTER, n=2, rounds=1)
    assert got["gbps"] is None and "host memory" in got["why"]


def test_layer_cost_times_verify_passes_of_each_width_at_full_residency():
    """`position_s` comes from decode-form verify passes that verify exactly P positions and read
    nothing (an oracle drafting plain's own tokens at full residency), beside plain's one."""
    from dataclasses import replace

    from specdec.clock.profiles import get_profile

    profile = replace(get_profile("m4-24gb"), router_sync_s=0.0)
    got = device.layer_cost("tiny", profile, tokens=3, positions=(2, 4))
    assert [r["positions"] for r in got["verify"]] == [1, 2, 4]
    assert all(r["passes"] >= 2 for r in got["verify"])
    assert got["moe_layers"] > 0 and got["position_s"] >= 0.0
    assert got["per_layer_s"] == max(0.0, got["verify"][0]["beyond_compute_s"]) / got["moe_layers"]
    assert "2: " in device._position_source(got) and "4: " in device._position_source(got)


def test_miss_cost_prices_the_calls_that_read_beyond_their_blocked_time():
    """`miss_call_s` comes from plain passes at a budget where calls read: each pass's time
    beyond the profile's price and its blocked time, over its calls that read; the median."""
    import statistics
    from dataclasses import replace

    from specdec.clock.profiles import get_profile

    profile = replace(get_profile("m4-24gb"), router_sync_s=0.0)
    got = device.miss_cost("tiny", profile, budget="10%", tokens=6)
    assert got["passes"] == len(got["per_call_s"]) >= 1 and got["misses_per_call"] >= 1.0
    assert got["miss_call_s"] == max(0.0, statistics.median(got["per_call_s"]))
    assert "10%" in device._miss_source(got) and "blocks a call" in device._miss_source(got)


def test_miss_cost_reads_its_misses_as_the_runs_land_them(monkeypatch):
    """The bench reads its misses from the page cache, but lands them as the runs do: pinned
    where that is the backend's default (CUDA), where a buffered host write into managed memory
    once put the managed pages' faults into `miss_call_s` (1.5-1.8 ms a call against 0.1-0.3
    pinned, on an H100). The backend is patched and the copy engine stood in for, as CI has no
    GPU; off CUDA the bench reads buffered."""
    from dataclasses import replace

    from specdec.clock.profiles import get_profile
    from specdec.store import reader
    from tests.helpers import pinned_stand_in

    assert reader.page_cache_io() == "buffered"  # this machine: no CUDA
    monkeypatch.setattr(reader, "default_io", lambda: "pinned")
    made = pinned_stand_in(monkeypatch)
    profile = replace(get_profile("m4-24gb"), router_sync_s=0.0)
    got = device.miss_cost("tiny", profile, budget="10%", tokens=6)
    assert got["passes"] >= 1
    assert made and sum(m.landed for m in made) > 0  # the misses landed by the stand-in
    assert all(m.closed for m in made)
