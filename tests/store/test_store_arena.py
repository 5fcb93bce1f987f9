"""The arena: aligned slots, zero-copy MLX views that see later writes, huge pages.

Run: `pytest tests/store/test_store_arena.py`.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from specdec.core.errors import StoreError
from specdec.store.arena import Arena
from specdec.store.layout import ALIGN, TensorSpec


def test_slots_are_aligned_and_disjoint():
    arena = Arena(5, 3 * ALIGN)
    addrs = [arena.slot_np(i).ctypes.data for i in range(5)]
    assert all(a % ALIGN == 0 for a in addrs)
    assert np.diff(addrs).tolist() == [arena.row_bytes] * 4 and arena.row_bytes >= 3 * ALIGN
    assert arena.base % 8 == 0
    with pytest.raises(IndexError):
        arena.slot_np(5)


@pytest.mark.parametrize(
    "dtype,np_dtype",
    [("F32", np.float32), ("U32", np.uint32), ("BF16", np.uint16), ("F16", np.float16)],
)
def test_tensor_view_sees_bytes_written_after_it_was_made(dtype, np_dtype):
    spec = TensorSpec("gate_proj.weight", dtype, (3, 5), 128, 3 * 5 * np.dtype(np_dtype).itemsize)
    arena = Arena(4, ALIGN)
    view = arena.tensor_view(spec)  # [4, 3, 5], made before any data is there
    assert view.shape == (4, 3, 5)
    assert arena.tensor_view(spec) is view  # cached
    rng = np.random.default_rng(0)
    data = rng.integers(0, 1000, size=(4, 3, 5)).astype(np_dtype)
    for s in range(4):
        arena.slot_np(s)[spec.offset : spec.offset + spec.nbytes] = data[s].view(np.uint8).ravel()
    got = np.array(view.view(mx.uint16) if dtype == "BF16" else view)
    assert np.array_equal(got, data)
    # slot 2 rewritten: MLX sees the new bytes on the next evaluation, without a new view
    arena.slot_np(2)[spec.offset : spec.offset + spec.nbytes] = 0
    assert float(mx.abs(view[2].astype(mx.float32)).sum()) == 0
    assert float(mx.abs(view[1].astype(mx.float32)).sum()) > 0


def test_gather_mm_on_view_reads_slots():
    spec = TensorSpec("w.weight", "F32", (2, 4), 0, 32)
    arena = Arena(3, ALIGN)
    w = arena.tensor_view(spec)  # [3, 2, 4]
    for s in range(3):
        arena.slot_np(s)[:32] = np.full((2, 4), s + 1, np.float32).view(np.uint8).ravel()
    x = mx.ones((1, 1, 4))
    out = mx.gather_mm(x, w.swapaxes(-1, -2), rhs_indices=mx.array([2]))  # [1, 1, 2]
    assert out.tolist() == [[[12.0, 12.0]]]


def test_bad_sizes_are_store_errors():
    with pytest.raises(StoreError, match="multiple of 4096"):
        Arena(2, 1000)
    with pytest.raises(StoreError, match="at least one slot"):
        Arena(0, ALIGN)


def _thp_off() -> bool:
    import sys

    if not sys.platform.startswith("linux"):
        return True
    return "[never]" in open("/sys/kernel/mm/transparent_hugepage/enabled").read()


def test_huge_pages_requested_on_linux():
    arena = Arena(4, 1 << 20)  # 4 MiB: holds at least one whole 2 MiB page
    if _thp_off():
        assert arena.huge_pages is False
        return
    if not arena.huge_pages and "failed" in (arena.pages.reason or ""):
        pytest.skip(f"the kernel refused huge pages now (memory pressure): {arena.pages.reason}")
    assert arena.huge_pages is True, arena.pages
    assert arena.huge_page_fraction == 1.0
    off = Arena(4, 1 << 20, huge_pages=False)
    assert off.huge_pages is False and off.huge_page_fraction is None


def test_huge_page_count_is_measured_not_assumed():
    """The fraction comes from smaps: a huge page split after the fact is counted as lost."""
    import ctypes

    from specdec.store.arena import HUGE, huge_page_bytes

    if _thp_off():
        pytest.skip("transparent huge pages are off on this kernel")
    arena = Arena(8, 1 << 20)  # 8 MiB: three or four whole 2 MiB pages
    if not arena.huge_pages:
        pytest.skip(f"the kernel granted no huge pages now ({arena.pages.reason})")
    start = -(-arena.slot_np(0).ctypes.data // HUGE) * HUGE
    length = arena.pages.advised_bytes
    assert huge_page_bytes(start, length) == length
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.madvise(start, 4096, 4) == 0  # MADV_DONTNEED one 4 KiB page: splits its huge page
    assert huge_page_bytes(start, length) == length - HUGE


def test_short_huge_pages_warn_and_report(monkeypatch, capsys):
    """Memory pressure (mocked: smaps reports no huge page, as under fragmentation): the arena
    says so on stderr and reports 0, never a huge-page arena."""
    from specdec.store import arena as arena_mod

    if _thp_off():
        pytest.skip("transparent huge pages are off on this kernel")
    monkeypatch.setattr(arena_mod, "huge_page_bytes", lambda start, length: 0)
    arena = Arena(4, 1 << 20)
    assert arena.huge_pages is False and arena.huge_page_fraction == 0.0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "specdec: warning: expert arena" in err
    assert "only 0% of" in err and "compact_memory" in err
