"""The expert arena: one MLX buffer cut into equal slots that reads land in and MLX computes on.

`Arena(n_slots, slot_bytes)` allocates a single uint8 MLX array. `slot_np(i)` is a writable numpy
view of slot i (4096-aligned, so O_DIRECT `preadv` can fill it); `tensor_view(spec)` is an MLX
array [n_slots, *spec.shape] over the same memory (made with `mx.as_strided`), so
`mx.gather_qmm(x, w_view, ..., rhs_indices=slot_ids)` computes on the bytes a read just wrote,
without any copy. Views are evaluated once and cached: MLX then holds them as strided arrays that
share the arena's buffer, and reads the memory afresh at every later evaluation that uses them.

On Linux the arena asks for transparent huge pages (madvise MADV_HUGEPAGE, then MADV_COLLAPSE,
since MLX has already touched the memory): an O_DIRECT read pins its destination pages, and
pinning one 2 MiB page instead of ~290 4 KiB ones per expert block roughly doubled direct-read
throughput on our VM (`specdec bench read`; THP is "madvise" by default there).

Run `pytest tests/test_store_arena.py` for the checks.
"""

from __future__ import annotations

import ctypes
import sys

import mlx.core as mx
import numpy as np

from specdec.errors import StoreError
from specdec.store.layout import ALIGN, TensorSpec, mx_dtype

MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25  # Linux >= 6.1: make existing pages huge now, contents kept
HUGE = 2 << 20


def advise_huge_pages(addr: int, nbytes: int) -> bool:
    """Best effort: back [addr, addr + nbytes) with transparent huge pages. True if granted."""
    if not sys.platform.startswith("linux"):
        return False
    start = -(-addr // HUGE) * HUGE  # only whole huge pages inside the range can be huge
    length = (addr + nbytes - start) // HUGE * HUGE
    if length <= 0:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if libc.madvise(start, length, MADV_HUGEPAGE) != 0:
        return False
    return libc.madvise(start, length, MADV_COLLAPSE) == 0


class Arena:
    """n_slots slots of slot_bytes each, in one MLX buffer, each slot ALIGN-aligned."""

    def __init__(self, n_slots: int, slot_bytes: int, huge_pages: bool = True) -> None:
        if n_slots <= 0:
            raise StoreError(f"arena needs at least one slot, got {n_slots}; raise the budget")
        if slot_bytes <= 0 or slot_bytes % ALIGN:
            raise StoreError(f"slot_bytes {slot_bytes} must be a positive multiple of {ALIGN}")
        self.n_slots = n_slots
        self.slot_bytes = slot_bytes
        # MLX aligns allocations to less than a page: over-allocate by ALIGN and shift.
        self.buffer = mx.zeros((n_slots * slot_bytes + ALIGN,), dtype=mx.uint8)
        mx.eval(self.buffer)
        self._np = np.array(self.buffer, copy=False)  # shares memory with self.buffer
        addr = self._np.ctypes.data
        self.base = (-addr) % ALIGN
        if self.base % 8:
            # element offsets of every dtype (up to 8 bytes) must be whole numbers
            raise StoreError(f"MLX buffer at {addr:#x} is not 8-byte aligned; cannot build arena")
        self._views: dict[TensorSpec, mx.array] = {}
        self.huge_pages = huge_pages and advise_huge_pages(addr, self._np.nbytes)

    @property
    def nbytes(self) -> int:
        return self.n_slots * self.slot_bytes

    def slot_np(self, slot: int) -> np.ndarray:
        """Writable uint8 view [slot_bytes] of one slot, ALIGN-aligned (O_DIRECT-ready)."""
        if not 0 <= slot < self.n_slots:
            raise IndexError(f"slot {slot} out of range [0, {self.n_slots})")
        start = self.base + slot * self.slot_bytes
        return self._np[start : start + self.slot_bytes]

    def tensor_view(self, spec: TensorSpec) -> mx.array:
        """MLX array [n_slots, *spec.shape] of `spec` inside every slot (no copy, cached)."""
        view = self._views.get(spec)
        if view is None:
            itemsize = spec.itemsize
            offset = self.base + spec.offset
            if offset % itemsize or self.slot_bytes % itemsize:
                raise StoreError(f"tensor {spec.name} is not aligned to its dtype in the arena")
            # element strides: slot stride, then row-major inside the slot
            inner = [
                int(np.prod(spec.shape[i + 1 :], dtype=np.int64)) for i in range(len(spec.shape))
            ]
            strides = [self.slot_bytes // itemsize, *inner]
            typed = self.buffer.view(mx_dtype(spec.dtype))
            view = mx.as_strided(typed, (self.n_slots, *spec.shape), strides, offset // itemsize)
            mx.eval(view)
            self._views[spec] = view
        return view
