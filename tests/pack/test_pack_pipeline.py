"""Pack's copy pipeline (store/copypipe.py) writes exactly the right bytes, and its faults leave
nothing behind.

Run: `pytest tests/pack/test_pack_pipeline.py`. A real random checkpoint (minimax family, 8-bit, so
blocks carry padding between tensors) is packed with the default chunk size and with tiny chunks
(one block per chunk; resident tensors cut across chunks), from O_DIRECT sources and from
buffered ones. Every packed file must be byte-identical across the four, and every block must
equal an independent reference built from the source files with numpy (tensor bytes at their
offsets, zeros elsewhere) whose crc32 the index records. Faults: a truncated source file (real),
a read error and a full disk (ENOSPC) simulated by patching os.preadv / os.pwrite (the kernel
cannot be made to fail them here), and an exception from the per-block hook: each must raise,
leave no OUT_DIR and no temporary directory, and leave no writer thread running; a rerun then
packs correctly. No timing is asserted (speed lives in benchmarks/bench_pack.py).
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest

from specdec.checkpoint.random_models import make_random
from specdec.core.errors import StoreError
from specdec.pack import copypipe
from specdec.pack import pack as pack_mod
from specdec.pack.pack import pack, plan
from specdec.store.layout import ALIGN, EXPERTS_BIN, RESIDENT, ExpertIndex
from specdec.store.safetensors import read_safetensors_header

FILES = (EXPERTS_BIN, RESIDENT, "experts.json")
# Chunks smaller than a block: one block per experts.bin chunk, resident tensors cut across
# chunks, the resident file's unaligned tail written with O_DIRECT switched off, and a staging
# buffer that cannot hold all of a chunk's direct reads at once.
TINY = 8192


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_random("minimax", tmp_path_factory.mktemp("pipe") / "model", bits=8, seed=3)


def _buffered_source(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    assert not copypipe.is_direct(fd)
    return fd


def _pack_with(model_dir, out, monkeypatch, chunk: int | None, buffered: bool) -> Path:
    with monkeypatch.context() as m:
        if chunk is not None:
            m.setattr(pack_mod, "CHUNK", chunk)
            # staging too small for a chunk's runs at once: runs in flight drain, then reuse it
            m.setattr(copypipe, "STAGING_SLACK", 2 * ALIGN)
        if buffered:
            m.setattr(pack_mod, "open_source", _buffered_source)
        return pack(model_dir, out)


def _reference_blocks(model_dir: Path) -> dict[tuple[int, int], bytes]:
    """Each (layer, expert) block rebuilt from the source files alone."""
    _, layers = plan(model_dir)
    out = {}
    for lid, (layout, srcs) in layers.items():
        for e in range(layout.n_experts):
            block = np.zeros(layout.block_bytes, np.uint8)
            for spec in layout.tensors:
                t = srcs[spec.name]
                raw = np.fromfile(t.path, np.uint8, spec.nbytes, offset=t.offset + e * spec.nbytes)
                block[spec.offset : spec.offset + spec.nbytes] = raw
            out[(lid, e)] = block.tobytes()
    return out


def test_pipeline_output_is_exact_for_any_chunking_and_source_mode(
    model_dir, tmp_path, monkeypatch
):
    packs = {}
    for chunk in (None, TINY):
        for buffered in (False, True):
            out = tmp_path / f"p-{chunk}-{buffered}"
            packs[(chunk, buffered)] = _pack_with(model_dir, out, monkeypatch, chunk, buffered)
    first = packs[(None, False)]
    for out in packs.values():
        for name in FILES:
            assert (out / name).read_bytes() == (first / name).read_bytes(), (out, name)
    index0 = ExpertIndex.load(first)
    data = (first / EXPERTS_BIN).read_bytes()
    ref = _reference_blocks(model_dir)
    assert set(ref) == {
        (lid, e) for lid in index0.layers for e in range(index0.layers[lid].n_experts)
    }
    padded = 0
    for (lid, e), block in ref.items():
        layout = index0.layers[lid]
        off = int(layout.offsets[e])
        assert data[off : off + layout.block_bytes] == block, (lid, e)
        assert int(layout.crc32[e]) == zlib.crc32(block)
        padded += layout.block_bytes > sum(s.nbytes for s in layout.tensors)
    assert padded  # the case covers padding that the reused buffers must zero
    tensors, _ = read_safetensors_header(first / RESIDENT)
    resident, _ = plan(model_dir)
    by_name = {t.name: t for t in resident if Path(t.path).name != "mtp.safetensors"}
    assert {t.name for t in tensors} == set(by_name)
    for t in tensors:
        s = by_name[t.name]
        got = np.fromfile(first / RESIDENT, np.uint8, t.nbytes, offset=t.offset)
        assert got.tobytes() == np.fromfile(s.path, np.uint8, s.nbytes, offset=s.offset).tobytes()


def _assert_nothing_left(out: Path) -> None:
    assert not out.exists()
    assert not list(out.parent.glob(out.name + ".tmp-*"))
    assert not [t for t in threading.enumerate() if t.name == "pack-writer"]


def _fail_on_call(real, n: int, err: int):
    """Wrap os.preadv / os.pwrite: the n-th call fails with errno err (simulated fault)."""
    calls = [0]

    def wrapped(*args):
        calls[0] += 1
        if calls[0] == n:
            raise OSError(err, os.strerror(err) + " (simulated)")
        return real(*args)

    return wrapped


@pytest.mark.parametrize("buffered", [False, True], ids=["direct", "buffered"])
def test_source_shrinking_during_pack_fails_cleanly(model_dir, tmp_path, monkeypatch, buffered):
    """A real end of file inside the pipeline: the shard is cut once the first block is out."""
    src = tmp_path / "model"
    shutil.copytree(model_dir, src)
    (shard,) = src.glob("model*.safetensors")

    def cut(layer: int, expert: int) -> None:
        if shard.stat().st_size > 4096:
            os.truncate(shard, 4096)

    out = tmp_path / "packed"
    with monkeypatch.context() as m:
        m.setattr(pack_mod, "CHUNK", TINY)  # 48 chunks, at most 8 read ahead of the writer
        if buffered:
            m.setattr(pack_mod, "open_source", _buffered_source)
        with pytest.raises(StoreError, match="unexpected end of file.*truncated checkpoint"):
            pack(src, out, on_block=cut)
    _assert_nothing_left(out)


@pytest.mark.parametrize(
    ("call", "n", "err", "match"),
    [
        ("preadv", 25, errno.EIO, "failed: Input/output error"),
        ("pwrite", 3, errno.ENOSPC, "no space left on the device"),
    ],
    ids=["read-eio", "write-enospc"],
)
@pytest.mark.parametrize("chunk", [None, TINY], ids=["default-chunks", "tiny-chunks"])
def test_io_fault_inside_the_pipeline_leaves_nothing(
    model_dir, tmp_path, monkeypatch, call, n, err, match, chunk
):
    out = tmp_path / "packed"
    with monkeypatch.context() as m:
        m.setattr(copypipe.os, call, _fail_on_call(getattr(os, call), n, err))
        with pytest.raises(StoreError, match=match):
            _pack_with(model_dir, out, monkeypatch, chunk, False)
    _assert_nothing_left(out)
    pack(model_dir, out)  # the same pack then succeeds
    assert ExpertIndex.load(out).n_blocks > 0


def test_error_in_block_hook_stops_the_pipeline(model_dir, tmp_path):
    out = tmp_path / "packed"
    seen = []

    def hook(layer: int, expert: int) -> None:
        seen.append((layer, expert))
        if len(seen) == 3:
            raise RuntimeError("hook failed")

    with pytest.raises(RuntimeError, match="hook failed"):
        pack(model_dir, out, on_block=hook)
    assert len(seen) == 3
    _assert_nothing_left(out)


@pytest.mark.parametrize("direct", [False, True], ids=["buffered", "direct"])
def test_write_chunks_zeroes_gaps_in_reused_buffers(tmp_path, direct):
    """Two buffers cycle through full and gappy chunks (full, full, gappy, gappy, ...: each gappy
    chunk lands in a buffer that held a full one): every gap must read back as zeros."""
    n = 8
    data = np.random.default_rng(0).integers(0, 256, 1 << 16, dtype=np.uint8)
    (tmp_path / "src").write_bytes(data.tobytes())
    fd = copypipe.open_source(tmp_path / "src") if direct else _buffered_source(tmp_path / "src")
    size, chunks, want = 8192, [], np.zeros(n * 8192, np.uint8)
    for k in range(n):
        if k % 4 < 2:  # full: one piece from the source
            pieces = [copypipe.Piece(0, size, fd, 100 + k * size, "src")]
            want[k * size : (k + 1) * size] = data[100 + k * size : 100 + (k + 1) * size]
        else:  # gappy: 100 bytes from the source, 4 literal bytes, zeros between
            pieces = [
                copypipe.Piece(0, 100, fd, 7, "src"),
                copypipe.Piece(4096, 4, data=b"abcd"),
            ]
            want[k * size : k * size + 100] = data[7:107]
            want[k * size + 4096 : k * size + 4100] = np.frombuffer(b"abcd", np.uint8)
        chunks.append(copypipe.Chunk(k * size, size, pieces, [(0, size), (50, 5000)], k))
    got_crcs = {}

    def on_written(chunk, crcs):
        got_crcs[chunk.tag] = crcs

    try:
        out = tmp_path / "out"
        copypipe.write_chunks(out, chunks, on_written, size, direct=direct, pool_bytes=0)
    finally:
        os.close(fd)
    assert out.read_bytes() == want.tobytes()
    for k in range(n):
        block = want[k * size : (k + 1) * size]
        assert got_crcs[k] == [zlib.crc32(block), zlib.crc32(block[50:5050])]
