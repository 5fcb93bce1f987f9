"""The copy pipeline `specdec pack` writes through: gather pieces of source files into large
aligned buffers on one thread, checksum and write them on another.

    write_chunks(out_path, chunks, on_written, direct=True)

Each `Chunk` is one contiguous range of the output file, assembled in a buffer from `Piece`s
(byte ranges of open source files, or literal bytes); whatever no piece covers is zero. Pieces
that are adjacent in a source file are read with one `preadv` scattering straight into their
places (a group of experts of one stacked tensor is one read), so the disk sees large sequential
reads. The calling thread reads chunk k+1 while a writer thread checksums (zlib.crc32, which
releases the GIL) and writes chunk k; a bounded pool of buffers bounds memory (`pool_bytes`,
at least two chunks). With `direct=True` the output is written with O_DIRECT (falling back to
buffered writes where the file system refuses it): no dirty page cache to throttle on and none
left over. The file is fsynced before `write_chunks` returns.

Failures anywhere (a short source file, a read error, a full disk) stop both threads and raise
in the caller; what was written is left for the caller's temp-dir cleanup. Run the tests with
`pytest tests/test_pack_pipeline.py`.
"""

from __future__ import annotations

import errno
import itertools
import os
import queue
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specdec.errors import StoreError
from specdec.store.layout import ALIGN

IOV_MAX = 1024  # Linux's limit on iovecs per preadv
POOL_BYTES = 256 << 20  # buffers in flight: peak RSS of a pack stays ~ this plus the interpreter


@dataclass(frozen=True)
class Piece:
    """`nbytes` bytes placed at `dst` in the chunk: from `fd` at `src`, or `data` if given."""

    dst: int
    nbytes: int
    fd: int = -1
    src: int = 0
    what: str = ""  # named in errors (a tensor name)
    data: bytes | None = None


@dataclass
class Chunk:
    """One contiguous range [offset, offset + nbytes) of the output file."""

    offset: int
    nbytes: int
    pieces: list[Piece]
    crc_ranges: list[tuple[int, int]] = field(default_factory=list)  # (start, len) in the chunk
    tag: object = None  # the caller's, handed back to on_written


def _aligned_buffer(nbytes: int) -> np.ndarray:
    """Zeroed uint8 buffer whose address is ALIGN-aligned (O_DIRECT needs it)."""
    raw = np.zeros(nbytes + ALIGN, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    return raw[start : start + nbytes]


def _read_runs(pieces: list[Piece]) -> Iterator[list[Piece]]:
    """File pieces grouped into runs that are contiguous in one source file (one preadv each)."""
    run: list[Piece] = []
    for p in sorted((p for p in pieces if p.data is None), key=lambda p: (p.fd, p.src)):
        if run and (
            p.fd != run[-1].fd or p.src != run[-1].src + run[-1].nbytes or len(run) == IOV_MAX
        ):
            yield run
            run = []
        run.append(p)
    if run:
        yield run


def _preadv_all(fd: int, views: list[memoryview], offset: int, what: str) -> None:
    """Fill every view from fd at offset, completing short reads."""
    while views:
        got = os.preadv(fd, views, offset)
        if got == 0:
            raise StoreError(f"unexpected end of file reading {what} (truncated checkpoint?)")
        offset += got
        while views and got >= len(views[0]):
            got -= len(views[0])
            views.pop(0)
        if views and got:
            views[0] = views[0][got:]


def _advise(chunk: Chunk, advice: str) -> None:
    """posix_fadvise every source range of the chunk (WILLNEED: start reading it now, in the
    background; DONTNEED: drop it from the page cache, it is read once)."""
    if hasattr(os, advice):  # Linux; macOS has no posix_fadvise
        for run in _read_runs(chunk.pieces):
            os.posix_fadvise(run[0].fd, run[0].src, sum(p.nbytes for p in run), getattr(os, advice))


def _fill(chunk: Chunk, buf: np.ndarray) -> None:
    """Assemble the chunk in buf[:chunk.nbytes]: pieces read or copied, gaps zeroed."""
    covered = sorted((p.dst, p.dst + p.nbytes) for p in chunk.pieces)
    pos = 0
    for a, b in [*covered, (chunk.nbytes, chunk.nbytes)]:
        if a > pos:
            buf[pos:a] = 0  # buffers are reused: padding must be zeroed each time
        pos = max(pos, b)
    for p in chunk.pieces:
        if p.data is not None:
            buf[p.dst : p.dst + p.nbytes] = np.frombuffer(p.data, np.uint8)
    view = memoryview(buf)
    for run in _read_runs(chunk.pieces):
        views = [view[p.dst : p.dst + p.nbytes] for p in run]
        _preadv_all(run[0].fd, views, run[0].src, run[0].what)


def _pwrite_all(fd: int, data: memoryview, offset: int, path: Path) -> None:
    try:
        while data:
            n = os.pwrite(fd, data, offset)
            data, offset = data[n:], offset + n
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StoreError(
                f"{path}: no space left on the device while packing ({e.strerror}); "
                "free space or choose an OUT_DIR on another disk"
            ) from e
        raise StoreError(f"{path}: write failed ({e.strerror or e}); check the disk") from e


def _open_output(path: Path, direct: bool) -> tuple[int, bool]:
    """Open path for writing, with O_DIRECT when asked and accepted; returns (fd, direct)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    if direct and hasattr(os, "O_DIRECT"):
        try:
            return os.open(path, flags | os.O_DIRECT, 0o644), True
        except OSError as e:
            if e.errno != errno.EINVAL:  # EINVAL: this file system refuses O_DIRECT
                raise
    return os.open(path, flags, 0o644), False


def write_chunks(
    path: Path,
    chunks: Iterable[Chunk],
    on_written: Callable[[Chunk, list[int]], None],
    max_chunk: int,
    direct: bool = False,
    pool_bytes: int = POOL_BYTES,
) -> None:
    """Write `chunks` (each at most max_chunk bytes) to a new file at path, then fsync it.

    `on_written(chunk, crc32s)` runs on the writer thread once the chunk is written, with the
    crc32 of each of its `crc_ranges`. With direct=True every chunk's offset and length must be
    multiples of ALIGN.
    """
    fd, direct = _open_output(path, direct)
    n_buffers = max(2, pool_bytes // max(max_chunk, 1))
    free: queue.Queue = queue.Queue()
    for _ in range(n_buffers):
        free.put(_aligned_buffer(max_chunk))
    full: queue.Queue = queue.Queue()
    failed: list[BaseException] = []
    stop = threading.Event()

    def writer() -> None:
        try:
            while (item := full.get()) is not None and not stop.is_set():
                chunk, buf = item
                data = buf[: chunk.nbytes]
                crcs = [zlib.crc32(data[a : a + n]) for a, n in chunk.crc_ranges]
                if direct and (chunk.offset % ALIGN or chunk.nbytes % ALIGN):
                    raise ValueError(f"unaligned chunk {chunk.offset}+{chunk.nbytes} for O_DIRECT")
                _pwrite_all(fd, memoryview(data), chunk.offset, path)
                on_written(chunk, crcs)
                free.put(buf)
        except BaseException as e:  # handed to the reading thread, which raises it
            failed.append(e)
            free.put(None)

    thread = threading.Thread(target=writer, name="pack-writer", daemon=True)
    thread.start()
    try:
        chunk: Chunk | None = None
        for ahead in itertools.chain(chunks, [None]):
            if ahead is not None:
                _advise(ahead, "POSIX_FADV_WILLNEED")  # the disk reads it while we fill chunk
            if chunk is not None:
                buf = free.get()
                if buf is None:
                    break
                _fill(chunk, buf)
                _advise(chunk, "POSIX_FADV_DONTNEED")  # read once: leave the page cache alone
                full.put((chunk, buf))
            chunk = ahead
    except BaseException:
        stop.set()
        raise
    finally:
        full.put(None)
        thread.join()
        if failed or stop.is_set():
            os.close(fd)
    if failed:
        raise failed[0]
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
