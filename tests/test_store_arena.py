"""The arena: aligned slots, zero-copy MLX views that see later writes, huge pages.

Run: `pytest tests/test_store_arena.py`.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from specdec.errors import StoreError
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


def test_huge_pages_requested_on_linux():
    import sys

    arena = Arena(4, 1 << 20)  # 4 MiB: holds at least one whole 2 MiB page
    if not sys.platform.startswith("linux"):
        assert arena.huge_pages is False
        return
    thp = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    if "[never]" in thp:
        pytest.skip("transparent huge pages are off on this kernel")
    assert arena.huge_pages is True
    assert Arena(4, 1 << 20, huge_pages=False).huge_pages is False
