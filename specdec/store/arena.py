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
Under memory pressure MADV_COLLAPSE finds no free 2 MiB pages and fails (EAGAIN/ENOMEM), or
succeeds on part of the range only; the memory works all the same, at 4 KiB-page read speed.
So the arena never trusts the call's return: `huge_page_fraction` is what the kernel says of its
memory (page flags where readable, else smaps' AnonHugePages over the advised range); it goes
into decode stats and the read bench, and a one-line warning on stderr names the shortfall and
its cause.

Run `pytest tests/store/test_store_arena.py` for the checks.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np

from specdec.core.errors import StoreError
from specdec.store.layout import ALIGN, TensorSpec
from specdec.store.safetensors import mx_dtype

MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25  # Linux >= 6.1: make existing pages huge now, contents kept
HUGE = 2 << 20
KPF_THP = 22  # /proc/kpageflags: the page belongs to a transparent huge page
MAX_DIM = 2**31 - 1  # MLX shape dimensions are int32


@dataclass(frozen=True)
class HugePages:
    """What the kernel granted: the fraction of the arena's whole 2 MiB pages that are huge,
    as /proc/self/smaps counts them, and why not all (None when all are, or none were asked)."""

    fraction: float
    advised_bytes: int  # the 2 MiB-aligned part of the arena that can be huge
    reason: str | None = None


def _thp_mode() -> str | None:
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return None
    return text[text.index("[") + 1 : text.index("]")] if "[" in text else None


def _huge_page_bytes_exact(start: int, length: int) -> int | None:
    """Exact count where page frames can be read (root: /proc/self/pagemap gives each page's
    frame, /proc/kpageflags its THP bit), looking at the first 4 KiB page of every 2 MiB page;
    None where the frames are hidden."""
    try:
        pagemap = os.open("/proc/self/pagemap", os.O_RDONLY)
    except OSError:
        return None
    try:
        flags = os.open("/proc/kpageflags", os.O_RDONLY)
    except OSError:
        os.close(pagemap)
        return None
    try:
        got = 0
        for addr in range(start, start + length, HUGE):
            entry = int.from_bytes(os.pread(pagemap, 8, addr // 4096 * 8), "little")
            frame = entry & ((1 << 55) - 1)
            if not entry >> 63:  # not present (never touched, or dropped)
                continue
            if frame == 0:
                return None  # frames hidden from this process
            if int.from_bytes(os.pread(flags, 8, frame * 8), "little") >> KPF_THP & 1:
                got += HUGE
        return got
    except OSError:
        return None
    finally:
        os.close(pagemap)
        os.close(flags)


def huge_page_bytes(start: int, length: int) -> int | None:
    """Bytes of [start, start + length) backed by huge pages: exact where page frames can be
    read (root), else from /proc/self/smaps (None without it). smaps counts AnonHugePages per mapping; madvise splits mappings at the range's
    edges, but a neighbour advised alike can merge back into one: such a mapping's count is
    shared in proportion to its overlap with the range (an estimate; exact when the arena has
    its mapping to itself)."""
    exact = _huge_page_bytes_exact(start, length)
    if exact is not None:
        return exact
    end, total, share = start + length, 0.0, 0.0
    try:
        with open("/proc/self/smaps") as f:
            for line in f:
                head = line.split(maxsplit=1)[0]
                if "-" in head and not head.endswith(":"):  # a mapping's header line
                    lo, hi = (int(x, 16) for x in head.split("-"))
                    share = max(0, min(hi, end) - max(lo, start)) / (hi - lo)
                elif share and head == "AnonHugePages:":
                    total += int(line.split()[1]) * 1024 * share
    except OSError:
        return None
    return int(total)


def advise_huge_pages(addr: int, nbytes: int) -> HugePages:
    """Best effort: back [addr, addr + nbytes) with transparent huge pages; measure the result."""
    start = -(-addr // HUGE) * HUGE  # only whole huge pages inside the range can be huge
    length = max(0, (addr + nbytes - start) // HUGE * HUGE)
    if length == 0 or not sys.platform.startswith("linux"):
        return HugePages(0.0, 0, "no whole 2 MiB page to ask for, or not Linux")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    reason = None
    if libc.madvise(start, length, MADV_HUGEPAGE) != 0:
        reason = f"madvise(MADV_HUGEPAGE) failed: {os.strerror(ctypes.get_errno())}"
    elif libc.madvise(start, length, MADV_COLLAPSE) != 0:
        err = ctypes.get_errno()
        reason = f"MADV_COLLAPSE failed ({os.strerror(err)})"
    got = huge_page_bytes(start, length)
    if got is None:
        return HugePages(0.0 if reason else 1.0, length, reason)
    fraction = min(1.0, got / length)
    if fraction < 1.0 and reason is None:
        reason = "the kernel granted part of the range"
    if fraction < 1.0 and _thp_mode() == "never":
        reason = "transparent huge pages are off (/sys/kernel/mm/transparent_hugepage = never)"
    return HugePages(fraction, length, None if fraction >= 1.0 else reason)


def warn_short(pages: HugePages, what: str) -> None:
    """One stderr line when fewer than all of an arena's whole 2 MiB pages are huge."""
    if pages.advised_bytes and pages.fraction < 1.0:
        print(
            f"specdec: warning: {what}: only {pages.fraction:.0%} of "
            f"{pages.advised_bytes / 2**30:.2f} GiB got 2 MiB pages ({pages.reason}); "
            "O_DIRECT reads into 4 KiB pages run ~3x slower. Free memory, or as root "
            "`echo 1 > /proc/sys/vm/compact_memory`, and restart",
            file=sys.stderr,
            flush=True,
        )


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
        if huge_pages:
            self.pages = advise_huge_pages(addr, self._np.nbytes)
            warn_short(self.pages, f"expert arena of {self._np.nbytes / 2**30:.2f} GiB")
        else:
            self.pages = HugePages(0.0, 0, "not asked for")

    @property
    def huge_page_fraction(self) -> float | None:
        """Measured share of the arena's whole 2 MiB pages that are huge (None: none asked for,
        or the arena is smaller than one huge page)."""
        return self.pages.fraction if self.pages.advised_bytes else None

    @property
    def huge_pages(self) -> bool:
        """Every whole 2 MiB page of the arena is a huge page (measured, not the madvise result)."""
        return bool(self.pages.advised_bytes) and self.pages.fraction >= 1.0

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
