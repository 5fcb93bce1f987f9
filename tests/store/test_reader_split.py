"""A block split across the reader's threads reads back exactly, under faults too.

Run: `pytest tests/store/test_reader_split.py`. A real packed random checkpoint (minimax family, 16 KiB
blocks); the reader runs with split_min = 4 KiB, so a lone block is read as four pieces by four
threads (the fault hook counts them: the split really happens) and a batch of three as two
pieces each. Every block must equal its bytes in experts.bin and pass its crc32, with short
reads and transient EIO injected into every piece; a persistent EIO in one piece names the
layer and expert; a wrong crc32 is caught by the thread that reads the block's last piece.
"""

from __future__ import annotations

import errno
from collections import Counter

import numpy as np
import pytest

from specdec.checkpoint.random_models import make_random
from specdec.core.errors import StoreError
from specdec.pack.pack import pack
from specdec.store.arena import Arena
from specdec.store.layout import EXPERTS_BIN, ExpertIndex
from specdec.store.reader import ExpertReader


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("split")
    out = pack(make_random("minimax", root / "model", bits=8, seed=5), root / "packed")
    index = ExpertIndex.load(out)
    assert {ly.block_bytes for ly in index.layers.values()} == {16384}
    return out, index


def _blocks(index: ExpertIndex) -> list[tuple[int, int]]:
    return [(lid, e) for lid, ly in index.layers.items() for e in range(ly.n_experts)]


def _expected(out, index, lid, e) -> np.ndarray:
    ly = index.layers[lid]
    return np.fromfile(out / EXPERTS_BIN, np.uint8, ly.block_bytes, offset=int(ly.offsets[e]))


@pytest.mark.parametrize("io", ["direct", "buffered", "mmap"])
@pytest.mark.parametrize("faulty", [False, True], ids=["clean", "short-and-eio"])
def test_split_blocks_read_exactly(packed, io, faulty):
    out, index = packed
    calls: Counter = Counter()

    def hook(layer: int, expert: int, attempt: int) -> int | None:
        calls[(layer, expert, attempt)] += 1
        if faulty and attempt == 0:
            raise OSError(errno.EIO, "Input/output error (injected)")
        return 4096 + 1 if faulty else None  # capped to one page per attempt: short reads

    arena = Arena(3, index.slot_bytes)
    with ExpertReader(
        out, index, arena, io=io, threads=8, verify_checksums=True, split_min=4096
    ) as r:
        r.fault_hook = hook
        blocks = _blocks(index)
        for lid, e in blocks[:6]:  # alone: four pieces
            r.read([(lid, e, 0)])
            assert np.array_equal(arena.slot_np(0)[:16384], _expected(out, index, lid, e))
        for i in range(6, len(blocks) - 2, 3):  # batches of three: two pieces each
            batch = [(*blocks[i + j], j) for j in range(3)]
            r.read(batch)
            for lid, e, slot in batch:
                assert np.array_equal(arena.slot_np(slot)[:16384], _expected(out, index, lid, e))
        assert r.stats.reads == 6 + 3 * len(range(6, len(blocks) - 2, 3))
    if io != "mmap":  # mmap copies; no preadv, no hook
        first = [calls[(lid, e, 0)] for lid, e in blocks[:6]]
        assert first == [4] * 6  # the hook saw four pieces of each lone block
        lid, e = blocks[6]
        assert calls[(lid, e, 0)] == 2


def test_persistent_fault_in_one_piece_names_the_block(packed):
    out, index = packed
    (lid, e), *_ = _blocks(index)

    def hook(layer: int, expert: int, attempt: int) -> None:
        if (layer, expert) == (lid, e):
            raise OSError(errno.EIO, "Input/output error (injected)")

    with ExpertReader(out, index, Arena(1, index.slot_bytes), io="direct", split_min=4096) as r:
        r.fault_hook = hook
        with pytest.raises(StoreError, match=f"layer {lid} expert {e} .*failed after 4 attempt"):
            r.read([(lid, e, 0)])


def test_crc_checked_after_the_last_piece(packed):
    out, index = packed
    lid, e = _blocks(index)[-1]
    index = ExpertIndex.load(out)
    index.layers[lid].crc32[e] ^= 1
    arena = Arena(1, index.slot_bytes)
    with ExpertReader(out, index, arena, verify_checksums=True, split_min=4096) as r:
        with pytest.raises(StoreError, match=f"layer {lid} expert {e} fails its crc32"):
            r.read([(lid, e, 0)])


@pytest.mark.parametrize("threads", [1, 4])
def test_read_reads_a_share_in_the_calling_thread(packed, threads):
    """`read` makes its caller one of the batch's workers (a lone block: no hand-off to the pool
    and back), `submit` leaves it free; a batch has at most `threads` workers, the caller's
    included (they drain its pieces, so one may take several)."""
    import threading

    out, index = packed
    seen: list[str] = []
    arena = Arena(4, index.slot_bytes)
    with ExpertReader(out, index, arena, io="buffered", threads=threads) as r:
        r.fault_hook = lambda layer, expert, attempt: seen.append(threading.current_thread().name)
        (lid, e), me = _blocks(index)[0], threading.current_thread().name
        r.read([(lid, e, 0)])
        assert seen == [me], "a lone whole block is read by the caller itself"
        seen.clear()
        r.wait(r.submit([(lid, e, 1)]))
        assert seen and me not in seen, "submit's reads run on the pool"
        seen.clear()
        r.read([(*b, j) for j, b in enumerate(_blocks(index)[:4])])
        assert me in seen and len(set(seen)) <= threads
        assert np.array_equal(arena.slot_np(0)[:16384], _expected(out, index, lid, e))
