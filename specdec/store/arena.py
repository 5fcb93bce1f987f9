"""The expert arena: one MLX buffer of equal slots that reads land in and MLX computes on.

`Arena(n_slots, slot_bytes)` allocates one uint8 MLX array of shape [n_slots, row_bytes], one
row per slot (row_bytes = slot_bytes + ALIGN: MLX's allocation is not page-aligned, so each slot
starts `base` bytes into its row, at a 4096-aligned address). `slot_np(i)` is a writable numpy
view of slot i (O_DIRECT `preadv` fills it); `tensor_view(spec)` is an MLX array
[n_slots, *spec.shape] over the same memory, made by slicing the rows and splitting the slice
(no copy), so `mx.gather_qmm(x, w_view, ..., rhs_indices=slot_ids)` computes on the bytes a
read just wrote. Views are evaluated once and cached: MLX then holds them as strided arrays that
share the arena's buffer, and reads the memory afresh at every later evaluation that uses them.

Why rows: MLX shapes are 32-bit, so no array dimension may pass 2^31 elements, and
`mx.as_strided` flattens its input to one dimension. A flat buffer (or a view built with
as_strided) therefore caps the arena at 2 GiB (uint8), or 4 GiB for a bf16 view; rows of one
slot each keep every dimension at most one slot long, so the arena can be as large as memory,
and any block under 2 GiB fits a slot. The cost is ALIGN bytes per slot (0.05% of an 8 MB slot).

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
MAX_DIM = 2**31 - 1  # MLX shape dimensions are int32


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


def arena_bytes(n_slots: int, slot_bytes: int) -> int:
    """Memory an Arena(n_slots, slot_bytes) allocates: one row of slot_bytes + ALIGN per slot."""
    return n_slots * (slot_bytes + ALIGN)


class Arena:
    """n_slots slots of slot_bytes each, one row per slot of one MLX buffer, ALIGN-aligned."""

    def __init__(self, n_slots: int, slot_bytes: int, huge_pages: bool = True) -> None:
        if n_slots <= 0:
            raise StoreError(f"arena needs at least one slot, got {n_slots}; raise the budget")
        if slot_bytes <= 0 or slot_bytes % ALIGN:
            raise StoreError(f"slot_bytes {slot_bytes} must be a positive multiple of {ALIGN}")
        if slot_bytes + ALIGN > MAX_DIM or n_slots > MAX_DIM:
            raise StoreError(
                f"an expert block of {slot_bytes} bytes is too large for one MLX array row "
                f"(MLX dimensions stop at 2^31 elements); split the model's experts"
            )
        self.n_slots = n_slots
        self.slot_bytes = slot_bytes
        self.row_bytes = slot_bytes + ALIGN  # room to shift each slot onto an ALIGN boundary
        self.buffer = mx.zeros((n_slots, self.row_bytes), dtype=mx.uint8)  # [n_slots, row]
        mx.eval(self.buffer)
        self._np = np.array(self.buffer, copy=False)  # shares memory with self.buffer
        addr = self._np.ctypes.data
        self.base = (-addr) % ALIGN  # same in every row: row_bytes is a multiple of ALIGN
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
        return self._np[slot, self.base : self.base + self.slot_bytes]

    def tensor_view(self, spec: TensorSpec) -> mx.array:
        """MLX array [n_slots, *spec.shape] of `spec` inside every slot (no copy, cached)."""
        view = self._views.get(spec)
        if view is None:
            itemsize = spec.itemsize
            start = self.base + spec.offset
            if start % itemsize or spec.nbytes % itemsize:
                raise StoreError(f"tensor {spec.name} is not aligned to its dtype in the arena")
            rows = self.buffer.view(mx_dtype(spec.dtype))  # [n_slots, row_bytes / itemsize]
            first, n = start // itemsize, spec.nbytes // itemsize
            # a slice of contiguous columns split into the tensor's shape: strides, not a copy
            view = rows[:, first : first + n].reshape(self.n_slots, *spec.shape)
            mx.eval(view)
            self._views[spec] = view
        return view
