"""The expert arena: the slots reads land in and MLX computes on, one dense region per tensor.

    arena = Arena(n_slots, index.slot_bytes, block_layout(index))   # tensors of every block
    w = arena.tensor_view(spec)        # [n_slots, *spec.shape] MLX array, no copy, cached
    arena.segments(slot)               # writable numpy views covering one block, in file order

A block of experts.bin holds an expert's tensors one after another (specdec.store.layout). The
arena keeps each tensor of the layout in a region of its own, `[n_slots, nbytes]`, dense: slot
i of tensor t sits right after slot i - 1, so every view `[n_slots, *shape]` is a contiguous
array (row strides equal its shape's), which is what MLX's CUDA quantized kernels require of
their weights (a strided view of rows, as an array of slots would give, is refused there; the CPU
and Metal kernels take it, Metal by copying the whole arena each call). The bytes between and
after the tensors (padding) get regions too, so a block's segments cover it whole: a read
scatters one block into its segments (`os.preadv` takes one buffer per segment) and a checksum
runs over them in order. Without a layout (`Arena(n, slot_bytes)`: benches, verify) a slot is one
segment, a region [n_slots, slot_bytes] of bytes.

Each region is its own MLX array of rows of `ROW` bytes, cut at an ALIGN boundary (MLX's
allocations are 8-byte aligned, not page-aligned), or on Linux, where a region can hold a huge
page, at a 2 MiB one with its end rounded up to one, so no slot lies in a partial huge page left
in 4 KiB pages (docs/results/read-path.md): rows keep every array dimension under 2^31
elements (MLX shapes are int32) however large the arena; the cut is a range of whole rows, so the
region stays contiguous and its typed views share its memory. A slot's segment starts on an
ALIGN boundary wherever the tensor's size is a multiple of ALIGN (every real model's: 4-bit
DeepSeek-V3, MiniMax and Qwen3 experts are), so O_DIRECT reads scatter straight into the slots
(`direct`); a tiny model's small tensors are read into a staging buffer and copied
(specdec.store.reader). Views are evaluated once and cached; they share the regions' memory and
read it afresh at every later evaluation that uses them.

Memory: on the CPU backend every region is host memory; on CUDA, taking the numpy view moves a
region into CUDA managed (unified) memory once (MLX's allocator), which the host writes and the
GPU reads: a slot is written only after every computation that reads it has been evaluated
(specdec.stream.source flushes before each read), so no kernel ever reads a slot being refilled.

On Linux each region asks for transparent huge pages (madvise MADV_HUGEPAGE, then MADV_COLLAPSE,
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
import functools
import mmap
import os
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from specdec.core.accelerator import on_cuda
from specdec.core.errors import StoreError
from specdec.core.machine import thp_mode
from specdec.store.layout import ALIGN, ExpertIndex, LayerLayout, TensorSpec, round_up
from specdec.store.safetensors import mx_dtype

LINUX = sys.platform.startswith("linux")  # transparent huge pages: Linux only
MADV_HUGEPAGE = 14
MADV_NOHUGEPAGE = 15
MADV_COLLAPSE = 25  # Linux >= 6.1: make existing pages huge now, contents kept
HUGE = 2 << 20
KPF_THP = 22  # /proc/kpageflags: the page belongs to a transparent huge page
MAX_DIM = 2**31 - 1  # MLX shape dimensions are int32
ROW = 8  # bytes per row of a region: MLX aligns allocations to 8 bytes, so the ALIGN cut is whole rows


@dataclass(frozen=True)
class HugePages:
    """What the kernel granted: the fraction of the arena's whole 2 MiB pages that are huge,
    as /proc/self/smaps counts them, and why not all (None when all are, or none were asked)."""

    fraction: float
    advised_bytes: int  # the 2 MiB-aligned part of the arena that can be huge
    reason: str | None = None

    @property
    def share(self) -> float | None:
        """`fraction`, or None where no 2 MiB page was asked for."""
        return self.fraction if self.advised_bytes else None

    @classmethod
    def combined(cls, pages: list[HugePages]) -> HugePages:
        """Several ranges' pages as one: the huge share weighted by the bytes each asked for,
        the first shortfall's reason (an arena's regions; a reader's staging buffers)."""
        asked = [p for p in pages if p.advised_bytes]
        advised = sum(p.advised_bytes for p in asked)
        got = sum(p.fraction * p.advised_bytes for p in asked)
        reason = next((p.reason for p in asked if p.reason), None)
        return cls(got / advised if advised else 0.0, advised, reason)


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


def advise_huge_pages(addr: int, nbytes: int, touch: Callable[[], None] | None = None) -> HugePages:
    """Best effort: back [addr, addr + nbytes) with transparent huge pages; measure the result.
    `touch`: fault the range in once advised (memory not touched yet: its faults then take
    2 MiB pages), before the collapse of what is still small and the measure."""
    start = -(-addr // HUGE) * HUGE  # only whole huge pages inside the range can be huge
    length = max(0, (addr + nbytes - start) // HUGE * HUGE)
    if length == 0 or not LINUX:
        if touch is not None:
            touch()
        return HugePages(0.0, 0, "no whole 2 MiB page to ask for, or not Linux")
    reason = None
    err = _madvise(start, length, MADV_HUGEPAGE)
    if touch is not None:
        touch()
    if err:
        reason = f"madvise(MADV_HUGEPAGE) failed: {os.strerror(err)}"
    elif err := _madvise(start, length, MADV_COLLAPSE):
        reason = f"MADV_COLLAPSE failed ({os.strerror(err)})"
    got = huge_page_bytes(start, length)
    if got is None:
        return HugePages(0.0 if reason else 1.0, length, reason)
    fraction = min(1.0, got / length)
    if fraction < 1.0 and reason is None:
        reason = "the kernel granted part of the range"
    if fraction < 1.0 and thp_mode() == "never":
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


def huge_buffer(nbytes: int, huge: bool = True) -> tuple[np.ndarray, HugePages]:
    """[nbytes or more] host bytes for O_DIRECT reads, touched, and the 2 MiB pages they got.
    Where they span a huge page: cut at a 2 MiB boundary, rounded up to one, advised before the
    touch and measured after it (advise_huge_pages' `touch`); else ALIGN-aligned in 4 KiB
    pages, huge ones refused (MADV_NOHUGEPAGE: THP "always" gives none), as also where not
    `huge`.
    A block read into 4 KiB pages lands in as many physical pieces as the memory is
    fragmented, each a segment of the disk's requests; in 2 MiB pages an 8 MB block is four
    (the thirty-seventh CUDA session's second-loaded copy spent 24% more preadv thread-time a
    call than the first, its staging then in `np.empty`'s pages; in 2 MiB pages the
    thirty-eighth's decode pairs blocked alike on either copy: docs/results/cuda.md)."""
    align = HUGE if huge and round_up(nbytes, ALIGN) >= HUGE else ALIGN
    length = round_up(nbytes, align)
    # a fresh private anonymous mapping: not the heap's (memory malloc reuses may already lie
    # in huge pages, which no advice splits) nor a shared one (shmem, whose huge pages follow
    # shmem_enabled, mostly never); the array keeps the mapping alive
    raw = np.frombuffer(mmap.mmap(-1, length + align, flags=mmap.MAP_PRIVATE), dtype=np.uint8)
    cut = (-raw.ctypes.data) % align
    buf = raw[cut : cut + length]
    if align == HUGE:
        return buf, advise_huge_pages(buf.ctypes.data, length, touch=lambda: buf.fill(0))
    if LINUX:  # before the touch: its faults then refuse 2 MiB pages
        _madvise(buf.ctypes.data, length, MADV_NOHUGEPAGE)
    buf.fill(0)
    return buf, HugePages(0.0, 0, "below 2 MiB" if huge else "not asked for")


def _madvise(addr: int, length: int, advice: int) -> int:
    """madvise(2) on [addr, addr + length): 0, or the errno it failed with."""
    return 0 if _libc_madvise()(addr, length, advice) == 0 else ctypes.get_errno()


@functools.cache
def _libc_madvise():
    """libc's madvise, typed once (a reader makes a staging buffer per thread and kind)."""
    fn = ctypes.CDLL(None, use_errno=True).madvise
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return fn


def arena_bytes(n_slots: int, slot_bytes: int) -> int:
    """Memory an Arena(n_slots, slot_bytes, layout) allocates, at most: its slots, plus per
    region (a layout has a handful) its alignment cut: an ALIGN, or where a region can hold a
    huge page its cut to a 2 MiB boundary and its tail rounded up to one (`_region`)."""
    return n_slots * slot_bytes + 16 * (2 * HUGE if n_slots * slot_bytes >= HUGE else ALIGN)


@dataclass(frozen=True)
class Segment:
    """Bytes [start, end) of every block, kept in a region of their own (a tensor, or padding)."""

    start: int
    end: int
    tensor: TensorSpec | None  # None: padding between tensors or after the last

    @property
    def nbytes(self) -> int:
        return self.end - self.start


def segments_of(tensors: list[TensorSpec], slot_bytes: int) -> list[Segment]:
    """The tensors in block order, with the padding around them, covering [0, slot_bytes)."""
    out, at = [], 0
    for t in sorted(tensors, key=lambda t: t.offset):
        if t.offset < at:
            raise StoreError(f"tensor {t.name} overlaps the one before it in the block layout")
        if t.offset > at:
            out.append(Segment(at, t.offset, None))
        out.append(Segment(t.offset, t.offset + t.nbytes, t))
        at = t.offset + t.nbytes
    if at > slot_bytes:
        raise StoreError(f"the block's tensors run past its {slot_bytes} bytes")
    if at < slot_bytes:
        out.append(Segment(at, slot_bytes, None))
    return out


def block_layout(index: ExpertIndex) -> list[TensorSpec]:
    """The tensors every MoE layer's blocks hold; one arena serves layers laid out alike."""
    layouts = {lid: _shape_of(ly) for lid, ly in index.layers.items()}
    first = next(iter(layouts.values()))
    odd = [lid for lid, lay in layouts.items() if lay != first]
    if odd:
        raise StoreError(
            f"MoE layers {odd} lay out their expert blocks unlike layer {index.layer_ids[0]}: "
            "one arena holds one layout; re-pack (specdec pack --force) or report the model"
        )
    return list(index.layers[index.layer_ids[0]].tensors)


def _shape_of(ly: LayerLayout) -> tuple:
    return tuple((t.name, t.dtype, t.shape, t.offset, t.nbytes) for t in ly.tensors)


class Arena:
    """n_slots slots of slot_bytes each, one dense MLX region per segment of the block layout."""

    # slot ids as MLX's gather kernels take them: made so once per call, not cast by each
    # projection's kernel (an AsType node apiece, ~5 µs of launch on CUDA)
    slot_ids = mx.uint32

    def __init__(
        self,
        n_slots: int,
        slot_bytes: int,
        tensors: list[TensorSpec] | None = None,
        huge_pages: bool = True,
    ) -> None:
        if n_slots <= 0:
            raise StoreError(f"arena needs at least one slot, got {n_slots}; raise the budget")
        if slot_bytes <= 0 or slot_bytes % ALIGN:
            raise StoreError(f"slot_bytes {slot_bytes} must be a positive multiple of {ALIGN}")
        if slot_bytes > MAX_DIM or n_slots > MAX_DIM:
            raise StoreError(
                f"an expert block of {slot_bytes} bytes is too large for one MLX array row "
                f"(MLX dimensions stop at 2^31 elements); split the model's experts"
            )
        self.n_slots, self.slot_bytes = n_slots, slot_bytes
        self.segments_ = segments_of(tensors or [], slot_bytes)
        self._regions: list[mx.array] = []  # [rows, ROW] uint8 per segment, cut ALIGN-aligned
        self._np: list[np.ndarray] = []  # [n_slots, nbytes] writable views of the same memory
        granted: list[HugePages] = []  # what each region asked for and got
        managed = on_cuda()  # a host view moves the arena into CUDA managed memory
        # madvise(MADV_COLLAPSE) fails there (EINVAL, seen on an H200): nothing to ask for
        huge_pages = huge_pages and not managed
        for seg in self.segments_:
            # a region that can hold a huge page starts on one and ends on one: every slot's
            # bytes then lie in 2 MiB pages (a partial page at either end stays 4 KiB pages,
            # and a block read into it pins ~290 of them: the slots there read ~2x slower)
            whole = huge_pages and LINUX and n_slots * seg.nbytes >= HUGE
            region, host, span = self._region(seg.nbytes, HUGE if whole else ALIGN)
            self._regions.append(region)
            self._np.append(host)
            if huge_pages:
                granted.append(advise_huge_pages(host.ctypes.data, span))
        self._by_tensor = {seg.tensor: i for i, seg in enumerate(self.segments_) if seg.tensor}
        # O_DIRECT can scatter into the slots when every segment of every slot is ALIGN-aligned
        self.direct = all(
            h.ctypes.data % ALIGN == 0 and seg.nbytes % ALIGN == 0
            for seg, h in zip(self.segments_, self._np, strict=True)
        )
        self._views: dict[TensorSpec, mx.array] = {}
        if huge_pages:
            self.pages = HugePages.combined(granted)
            warn_short(self.pages, f"expert arena of {self.nbytes / 2**30:.2f} GiB")
        else:
            why = "CUDA managed memory (no transparent huge pages)" if managed else "not asked for"
            self.pages = HugePages(0.0, 0, why)

    def _region(self, nbytes: int, align: int) -> tuple[mx.array, np.ndarray, int]:
        """A dense [n_slots, nbytes] region: MLX rows cut at an `align` boundary, its numpy view,
        and the bytes from its start that are its own (its size rounded up to `align`)."""
        total = self.n_slots * nbytes
        span = -(-total // align) * align
        row = ROW
        while -(-span // row) + align // row > MAX_DIM:  # rows stay an int32 dimension
            row *= 2
        rows = -(-total // row)
        buf = mx.zeros((-(-span // row) + align // row, row), dtype=mx.uint8)  # + cut room
        mx.eval(buf)
        addr = np.array(buf, copy=False).ctypes.data  # CUDA: moves it to managed memory once
        lead = (-addr) % align
        # whole rows up to the `align` boundary; a region whose allocation is coarser-grained than
        # its rows stays where it is (its reads are then staged: see `direct`)
        cut = lead // row if lead % row == 0 else 0
        region = buf[cut : cut + rows]  # whole rows: contiguous, shares buf's memory
        mx.eval(region)
        host = np.array(region, copy=False).reshape(-1)[:total].reshape(self.n_slots, nbytes)
        if host.ctypes.data % 8:
            raise StoreError(f"MLX buffer at {addr:#x} is not 8-byte aligned; cannot build arena")
        return region, host, span  # buf runs at least span bytes past any cut

    def touch(self) -> None:
        """Every region read once by a computation on the default device: on CUDA its managed
        pages then live on the GPU, as a decode's slots do after their experts ran."""
        mx.eval([region.max() for region in self._regions])

    @property
    def huge_page_fraction(self) -> float | None:
        """Measured share of the arena's whole 2 MiB pages that are huge (None: none asked for,
        or the arena is smaller than one huge page)."""
        return self.pages.share

    @property
    def huge_pages(self) -> bool:
        """Every whole 2 MiB page of the arena is a huge page (measured, not the madvise result)."""
        return bool(self.pages.advised_bytes) and self.pages.fraction >= 1.0

    @property
    def nbytes(self) -> int:
        return self.n_slots * self.slot_bytes

    def segments(self, slot: int, n: int | None = None) -> list[np.ndarray]:
        """Writable uint8 views of slot `slot`'s segments, in block order, covering its first n
        bytes (default: the whole slot)."""
        if not 0 <= slot < self.n_slots:
            raise IndexError(f"slot {slot} out of range [0, {self.n_slots})")
        n = self.slot_bytes if n is None else n
        out = []
        for seg, host in zip(self.segments_, self._np, strict=True):
            if seg.start >= n:
                break
            out.append(host[slot, : min(seg.end, n) - seg.start])
        return out

    def slot_np(self, slot: int) -> np.ndarray:
        """Writable uint8 view [slot_bytes] of one slot of an arena without a layout (one segment)."""
        if len(self.segments_) != 1:
            raise StoreError("slot_np: this arena keeps a block in several regions (segments())")
        return self.segments(slot)[0]

    def crc32(self, slot: int, n: int) -> int:
        """crc32 of the first n bytes of a slot's block, segment by segment in block order."""
        crc = 0
        for piece in self.segments(slot, n):
            crc = zlib.crc32(piece, crc)
        return crc

    def tensor_view(self, spec: TensorSpec) -> mx.array:
        """MLX array [n_slots, *spec.shape] of `spec` in every slot (no copy, cached)."""
        view = self._views.get(spec)
        if view is None:
            i = self._by_tensor.get(spec)
            if i is None:
                raise StoreError(f"tensor {spec.name} is not part of this arena's block layout")
            if spec.nbytes % spec.itemsize:
                raise StoreError(f"tensor {spec.name} is not a whole number of its dtype")
            region, nbytes = self._regions[i], spec.nbytes
            total = self.n_slots * nbytes
            if total % ROW:  # the region's last row is part padding: reshape over elements
                flat = region.view(mx_dtype(spec.dtype)).reshape(-1)
                view = flat[: total // spec.itemsize].reshape(self.n_slots, *spec.shape)
            else:
                view = region.view(mx_dtype(spec.dtype)).reshape(self.n_slots, *spec.shape)
            mx.eval(view)
            self._views[spec] = view
        return view
