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
    arena = Arena(5, 3 * ALIGN)  # no layout: each slot one segment of bytes
    addrs = [arena.slot_np(i).ctypes.data for i in range(5)]
    assert all(a % ALIGN == 0 for a in addrs) and arena.direct
    assert np.diff(addrs).tolist() == [3 * ALIGN] * 4  # dense: slot after slot
    with pytest.raises(IndexError):
        arena.slot_np(5)


def _write(arena: Arena, slot: int, spec: TensorSpec, data: np.ndarray) -> None:
    """Put `data` where `spec` sits in the slot's block, through the segments a read fills."""
    block = np.zeros(arena.slot_bytes, np.uint8)
    at = 0
    for piece in arena.segments(slot):
        block[at : at + len(piece)] = piece
        at += len(piece)
    block[spec.offset : spec.offset + spec.nbytes] = data.view(np.uint8).ravel()
    at = 0
    for piece in arena.segments(slot):
        piece[:] = block[at : at + len(piece)]
        at += len(piece)


@pytest.mark.parametrize(
    "dtype,np_dtype",
    [("F32", np.float32), ("U32", np.uint32), ("BF16", np.uint16), ("F16", np.float16)],
)
def test_tensor_view_sees_bytes_written_after_it_was_made(dtype, np_dtype):
    spec = TensorSpec("gate_proj.weight", dtype, (3, 5), 128, 3 * 5 * np.dtype(np_dtype).itemsize)
    arena = Arena(4, ALIGN, [spec])
    view = arena.tensor_view(spec)  # [4, 3, 5], made before any data is there
    assert view.shape == (4, 3, 5)
    assert arena.tensor_view(spec) is view  # cached
    rng = np.random.default_rng(0)
    data = rng.integers(0, 1000, size=(4, 3, 5)).astype(np_dtype)
    for s in range(4):
        _write(arena, s, spec, data[s])
    got = np.array(view.view(mx.uint16) if dtype == "BF16" else view)
    assert np.array_equal(got, data)
    # slot 2 rewritten: MLX sees the new bytes on the next evaluation, without a new view
    _write(arena, 2, spec, np.zeros_like(data[2]))
    assert float(mx.abs(view[2].astype(mx.float32)).sum()) == 0
    assert float(mx.abs(view[1].astype(mx.float32)).sum()) > 0


def test_views_are_dense_arrays_sharing_the_arena():
    """What MLX's CUDA quantized kernels require of weights: [slots, *shape] with no gap between
    slots (a strided array of slots is refused there), and no copy of the arena."""
    w = TensorSpec("g.weight", "U32", (8, 16), 0, 8 * 16 * 4)
    s = TensorSpec("g.scales", "BF16", (8, 2), 8 * 16 * 4, 8 * 2 * 2)  # 32 B: not an ALIGN multiple
    arena = Arena(6, ALIGN, [w, s])
    assert [seg.tensor for seg in arena.segments_] == [w, s, None]  # padding after the tensors
    for i, spec in enumerate((w, s)):
        view = arena.tensor_view(spec)
        host = np.array(view.view(mx.uint16) if spec.dtype == "BF16" else view, copy=False)
        assert host.flags["C_CONTIGUOUS"] and host.shape == (6, *spec.shape)
        assert host.ctypes.data == arena.segments(0)[i].ctypes.data  # the region itself
    assert not arena.direct  # the scales' 32-byte slots cannot take O_DIRECT: reads are staged


def test_crc32_runs_over_the_segments_in_block_order():
    import zlib

    w = TensorSpec("g.weight", "U32", (4, 4), 0, 64)
    arena = Arena(2, ALIGN, [w])
    block = np.random.default_rng(1).integers(0, 256, ALIGN, dtype=np.uint8)
    at = 0
    for piece in arena.segments(1):
        piece[:] = block[at : at + len(piece)]
        at += len(piece)
    assert arena.crc32(1, ALIGN) == zlib.crc32(block)
    assert arena.crc32(1, 100) == zlib.crc32(block[:100])


def test_gather_mm_on_view_reads_slots():
    spec = TensorSpec("w.weight", "F32", (2, 4), 0, 32)
    arena = Arena(3, ALIGN, [spec])
    w = arena.tensor_view(spec)  # [3, 2, 4]
    for s in range(3):
        _write(arena, s, spec, np.full((2, 4), s + 1, np.float32))
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


def test_every_slot_lies_in_huge_pages():
    """A region that can hold a huge page starts and ends on one, so no slot sits in a partial
    2 MiB page at either end (4 KiB pages there: a block read into slot 0 pinned ~290 pages and
    read at half the speed). Measured by huge_page_bytes (page flags as root, else smaps)."""
    from specdec.store.arena import HUGE, huge_page_bytes

    if _thp_off():
        pytest.skip("transparent huge pages are off on this kernel")
    slot = 1183744  # a Qwen3-30B-A3B expert: slots straddle 2 MiB pages
    w = TensorSpec("w", "U8", (slot - ALIGN,), 0, slot - ALIGN)  # then a page of padding
    arena = Arena(7, slot, [w])
    if not arena.huge_pages:
        pytest.skip(f"the kernel granted no huge pages now ({arena.pages.reason})")
    assert arena.segments(0)[0].ctypes.data % HUGE == 0
    for s in range(arena.n_slots):
        tensor = arena.segments(s)[0]  # the padding's region (7 pages) holds no huge page
        start = tensor.ctypes.data - tensor.ctypes.data % HUGE
        pages = -(-(tensor.ctypes.data + tensor.nbytes - start) // HUGE) * HUGE
        assert huge_page_bytes(start, pages) == pages, s


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


def _packed_blocks(tmp_path, tensors, block_bytes: int, n_experts: int = 6):
    """experts.bin of random blocks and an index of one layer laid out as `tensors`."""
    from specdec.store.layout import EXPERTS_BIN, ExpertIndex, LayerLayout

    rng = np.random.default_rng(3)
    blocks = rng.integers(0, 256, (n_experts, block_bytes), dtype=np.uint8)
    (tmp_path / EXPERTS_BIN).write_bytes(blocks.tobytes())
    import zlib

    ly = LayerLayout(
        "model.layers.1.mlp.switch_mlp",
        n_experts,
        block_bytes,
        list(tensors),
        np.arange(n_experts, dtype=np.int64) * block_bytes,
        np.array([zlib.crc32(b) for b in blocks], dtype=np.uint32),
    )
    return ExpertIndex(1, block_bytes, {1: ly}), blocks


@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("io", ["direct", "buffered", "mmap"])
def test_a_read_scatters_each_block_into_its_tensors(tmp_path, aligned, io):
    """Straight into the slots where every segment is ALIGN-sized, through the staging buffer
    where not (O_DIRECT only); either way every tensor's view holds its bytes of the block."""
    from specdec.store.reader import ExpertReader, filesystem_type

    if io == "direct" and filesystem_type(tmp_path) in ("tmpfs", "ramfs"):
        pytest.skip("O_DIRECT needs a disk-backed directory")
    a = (
        TensorSpec("p.weight", "U32", (ALIGN // 4,), 0, ALIGN)
        if aligned
        else (TensorSpec("p.weight", "U32", (24,), 0, 96))
    )
    b = TensorSpec("p.scales", "U32", (ALIGN // 4,), ALIGN, ALIGN)
    index, blocks = _packed_blocks(tmp_path, [a, b], 3 * ALIGN)
    arena = Arena(4, 3 * ALIGN, [a, b])
    assert arena.direct == aligned
    with ExpertReader(tmp_path, index, arena, io=io, threads=2, verify_checksums=True) as r:
        r.read([(1, 5, 0), (1, 2, 3)])
        staged = r.stats.staged
    for slot, e in ((0, 5), (3, 2)):
        for t in (a, b):
            got = np.array(arena.tensor_view(t))
            want = blocks[e, t.offset : t.offset + t.nbytes].view(np.uint32)
            assert np.array_equal(got[slot].ravel(), want)
        assert arena.crc32(slot, 3 * ALIGN) == int(index.layers[1].crc32[e])
    assert (staged > 0) == (io == "direct" and not aligned)


def test_a_staging_buffer_lies_in_huge_pages_and_a_4k_one_in_none():
    """huge_buffer: a span of 2 MiB or more starts and ends on a 2 MiB page, touched, and
    says what the kernel granted (measured, as the arena's); asked for none, it is ALIGN-aligned
    and in 4 KiB pages even where THP is "always"; a span below 2 MiB asks for none."""
    from specdec.store.arena import HUGE, huge_buffer, huge_page_bytes

    size = 7962624  # a MiniMax-M2.5 expert block: the CUDA sessions' staging
    buf, pages = huge_buffer(size)
    assert buf.ctypes.data % HUGE == 0 and len(buf) == 4 * HUGE and not buf.any()
    assert pages.advised_bytes == len(buf)
    assert pages.fraction == huge_page_bytes(buf.ctypes.data, len(buf)) / len(buf)
    small, none = huge_buffer(size, huge=False)
    assert small.ctypes.data % ALIGN == 0 and len(small) == size and none.advised_bytes == 0
    assert huge_page_bytes(small.ctypes.data, len(small)) == 0
    below, asked = huge_buffer(HUGE - ALIGN)
    assert len(below) == HUGE - ALIGN and asked.advised_bytes == 0
    if _thp_off():
        pytest.skip("transparent huge pages are off on this kernel")
    if pages.fraction < 1.0:
        pytest.skip(f"the kernel granted no huge pages now ({pages.reason})")
    assert huge_page_bytes(buf.ctypes.data, len(buf)) == len(buf)


def test_staged_reads_land_through_either_staging_and_count_its_huge_pages(tmp_path):
    """A reader stages in 2 MiB pages by default and in 4 KiB pages when told (`huge_staging`,
    what bench_cuda's `copies` reads both ways with), keeping a buffer of each: blocks land
    whole either way, and `staging_huge_pages` measures only the buffers that asked."""
    from specdec.store.arena import HUGE
    from specdec.store.reader import ExpertReader, filesystem_type

    if filesystem_type(tmp_path) in ("tmpfs", "ramfs"):
        pytest.skip("O_DIRECT needs a disk-backed directory")
    odd = TensorSpec("p.weight", "U32", (HUGE // 4 + 24,), 0, HUGE + 96)  # not ALIGN-sized
    block = 2 * HUGE
    index, blocks = _packed_blocks(tmp_path, [odd], block, n_experts=3)
    arena = Arena(2, block, [odd])
    assert not arena.direct  # every read staged
    with ExpertReader(tmp_path, index, arena, io="direct", threads=1) as r:
        r.huge_staging = False
        r.read([(1, 2, 0)])
        assert r.staging_huge_pages is None and r.stats.staging_bytes == block
        r.huge_staging = True
        r.read([(1, 1, 1)])
        r.huge_staging = False
        r.read([(1, 0, 0)])  # the 4 KiB buffer again: no third one
        assert r.stats.staged == 3 and r.stats.staging_bytes == 2 * block
        assert 0.0 <= r.staging_huge_pages <= 1.0
    got = np.array(arena.tensor_view(odd))
    for slot, e in ((0, 0), (1, 1)):
        want = blocks[e, : odd.nbytes].view(np.uint32)
        assert np.array_equal(got[slot].ravel(), want)


def test_memory_o_direct_refuses_is_read_through_staging(tmp_path):
    """EFAULT from O_DIRECT into the arena (CUDA managed memory may refuse to be pinned): the
    reader stages from then on, and the block lands whole."""
    import errno

    from specdec.store.reader import ExpertReader, filesystem_type

    if filesystem_type(tmp_path) in ("tmpfs", "ramfs"):
        pytest.skip("O_DIRECT needs a disk-backed directory")
    a = TensorSpec("p.weight", "U32", (ALIGN // 4,), 0, ALIGN)
    index, blocks = _packed_blocks(tmp_path, [a], 2 * ALIGN)
    arena = Arena(2, 2 * ALIGN, [a])
    refused = []

    def hook(layer, expert, attempt):
        if not refused:
            refused.append(expert)
            raise OSError(errno.EFAULT, "Bad address")
        return None

    with ExpertReader(tmp_path, index, arena, io="direct", threads=1) as r:
        r.fault_hook = hook
        r.read([(1, 4, 1)])
        r.read([(1, 0, 0)])
        assert r.stats.staged == 2 and refused == [4]  # once refused, every read stages
    assert np.array_equal(np.array(arena.tensor_view(a))[1].view(np.uint8), blocks[4, :ALIGN])
    assert np.array_equal(np.array(arena.tensor_view(a))[0].view(np.uint8), blocks[0, :ALIGN])


def test_pages_of_several_ranges_combine_weighted_by_what_each_asked_for():
    """HugePages.combined (an arena's regions, a reader's staging buffers): the share weighted
    by the bytes each range asked for, ranges that asked for none left out, the first
    shortfall's reason; none asked for anywhere: no share."""
    from specdec.store.arena import HUGE, HugePages

    pages = [HugePages(1.0, HUGE), HugePages(0.5, 3 * HUGE, "part"), HugePages(0.0, 0, "none")]
    both = HugePages.combined(pages)
    assert both == HugePages(0.625, 4 * HUGE, "part") and both.share == 0.625
    assert HugePages.combined([HugePages(0.0, 0, "below 2 MiB")]).share is None
    assert HugePages.combined([]) == HugePages(0.0, 0, None)
