"""The copy pipeline `specdec pack` writes through: gather pieces of source files into large
aligned buffers on one thread, checksum and write them on another.

    write_chunks(out_path, chunks, on_written, max_chunk, direct=True)

Each `Chunk` is one contiguous range of the output file, assembled in a buffer from `Piece`s
(byte ranges of open source files, or literal bytes); whatever no piece covers is zero. Pieces
adjacent in a source file are read with one read (a group of experts of one stacked tensor is
one sequential read), so the disk sees large sequential reads. Sources opened by `open_source`
are read with O_DIRECT: the span, rounded out to 4 KiB, lands in a staging buffer and is copied
into place (tensors sit at arbitrary offsets); buffered reads of a multi-GB checkpoint spent
their time filling and reclaiming page cache (benchmarks/results/pack.md). Sources without
O_DIRECT are scatter-read (`preadv`) straight into place, the next chunk's ranges announced
ahead (POSIX_FADV_WILLNEED) and dropped once read (DONTNEED).

The calling thread reads chunk k+1 while a writer thread checksums (zlib.crc32, which releases
the GIL) and writes chunk k; a bounded pool of buffers bounds memory (`pool_bytes`, two to
eight chunks). With `direct=True` the output is written with O_DIRECT (buffered where the file
system refuses it, and for an unaligned tail): no dirty page cache to throttle on and none left
over. The file is fsynced before `write_chunks` returns.

Failures anywhere (a short source file, a read error, a full disk) stop both threads and raise
in the caller; what was written is left for the caller's temp-dir cleanup. Tests:
`pytest tests/pack/test_pack_pipeline.py`; speed: `python benchmarks/bench_pack.py`.
"""

from __future__ import annotations

import concurrent.futures as cf
import errno
import fcntl
import itertools
import os
import queue
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specdec.core.errors import StoreError
from specdec.store.layout import ALIGN, round_up

IOV_MAX = 1024  # Linux's limit on iovecs per preadv
READERS = 4  # reads of one chunk in flight at once (a chunk has one run per stacked tensor)
POOL_BYTES = 128 << 20
STAGING_SLACK = (
    32 * ALIGN
)  # staging beyond one chunk: room for runs' rounding to ALIGN  # buffers in flight: peak RSS of a pack stays ~ this plus the interpreter


@dataclass(frozen=True)
class Piece:
    """`nbytes` bytes placed at `dst` in the chunk: from `fd` at `src`, or `data` if given."""

    dst: int
    nbytes: int
    fd: int = -1
    src: int = 0
    what: str = ""  # named in errors: the tensor and its file
    data: bytes | None = None


@dataclass
class Chunk:
    """One contiguous range [offset, offset + nbytes) of the output file."""

    offset: int
    nbytes: int
    pieces: list[Piece]
    # (start, len) in the chunk; (start, len, key): the crc32 continues the one of the ranges
    # of earlier chunks with that key (a tensor cut over several chunks)
    crc_ranges: list[tuple] = field(default_factory=list)
    tag: object = None  # the caller's, handed back to on_written


def open_source(path: Path) -> int:
    """Open a source file that is read once: O_DIRECT where the file system takes it (no page
    cache to fill and reclaim), else buffered with sequential readahead."""
    if hasattr(os, "O_DIRECT"):
        try:
            return os.open(path, os.O_RDONLY | os.O_DIRECT)
        except OSError as e:
            if e.errno != errno.EINVAL:  # EINVAL: this file system refuses O_DIRECT
                raise
    fd = os.open(path, os.O_RDONLY)
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    return fd


def is_direct(fd: int) -> bool:
    """True when fd was opened with O_DIRECT."""
    return hasattr(os, "O_DIRECT") and bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)


def _aligned_buffer(nbytes: int) -> np.ndarray:
    """Zeroed uint8 buffer whose address is ALIGN-aligned (O_DIRECT needs it)."""
    raw = np.zeros(nbytes + ALIGN, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    return raw[start : start + nbytes]


def _read_runs(pieces: list[Piece]) -> Iterator[list[Piece]]:
    """File pieces grouped into runs that are contiguous in one source file (one read each)."""
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


def _advise(chunk: Chunk, advice: str) -> None:
    """posix_fadvise the chunk's buffered source ranges (WILLNEED: start reading them now, in
    the background; DONTNEED: drop them from the page cache, they are read once)."""
    if hasattr(os, advice):  # Linux; macOS has no posix_fadvise
        for run in _read_runs(chunk.pieces):
            if not is_direct(run[0].fd):
                n = sum(p.nbytes for p in run)
                os.posix_fadvise(run[0].fd, run[0].src, n, getattr(os, advice))


def _eof(what: str) -> StoreError:
    return StoreError(f"unexpected end of file reading {what} (truncated checkpoint?)")


def _preadv_all(fd: int, views: list[memoryview], offset: int, what: str) -> None:
    """Fill every view from fd at offset, completing short reads."""
    while views:
        got = os.preadv(fd, views, offset)
        if got == 0:
            raise _eof(what)
        offset += got
        while views and got >= len(views[0]):
            got -= len(views[0])
            views.pop(0)
        if views and got:
            views[0] = views[0][got:]


def _span(run: list[Piece]) -> tuple[int, int]:
    """(start, length) of the run's bytes rounded out to ALIGN: what an O_DIRECT read takes."""
    start = run[0].src // ALIGN * ALIGN
    return start, round_up(run[-1].src + run[-1].nbytes, ALIGN) - start


def _read_direct(run: list[Piece], buf: np.ndarray, staging: np.ndarray) -> None:
    """O_DIRECT read of the run's span into staging, then copied into place (source tensors sit
    at arbitrary offsets, so their pages cannot land in the chunk)."""
    start, _ = _span(run)
    end = run[-1].src + run[-1].nbytes
    view = memoryview(staging)
    done = 0
    while done < end - start:
        got = os.preadv(run[0].fd, [view[done:]], start + done)
        if got == 0 or (got % ALIGN and done + got < end - start):  # short of `end`: EOF
            raise _eof(run[0].what)
        done += got
    for p in run:
        buf[p.dst : p.dst + p.nbytes] = staging[p.src - start : p.src - start + p.nbytes]


def _read_run(run: list[Piece], buf: np.ndarray, staging: np.ndarray | None) -> None:
    try:
        if staging is not None:
            _read_direct(run, buf, staging)
        else:
            views = [memoryview(buf)[p.dst : p.dst + p.nbytes] for p in run]
            _preadv_all(run[0].fd, views, run[0].src, run[0].what)
    except OSError as e:
        raise StoreError(
            f"reading {run[0].what} failed: {e.strerror or e}; check the disk and the source"
        ) from e


def _fill(chunk: Chunk, buf: np.ndarray, staging: np.ndarray, pool: cf.Executor) -> None:
    """Assemble the chunk in buf[:chunk.nbytes]: pieces read (each run on `pool`, so several
    reads are in flight and the copies out of staging run in parallel) or copied, gaps zeroed."""
    covered = sorted((p.dst, p.dst + p.nbytes) for p in chunk.pieces)
    pos = 0
    for a, b in [*covered, (chunk.nbytes, chunk.nbytes)]:
        if a > pos:
            buf[pos:a] = 0  # buffers are reused: padding must be zeroed each time
        pos = max(pos, b)
    for p in chunk.pieces:
        if p.data is not None:
            buf[p.dst : p.dst + p.nbytes] = np.frombuffer(p.data, np.uint8)
    futures: list[cf.Future] = []
    used = 0  # staging bytes handed to runs in flight
    for run in _read_runs(chunk.pieces):
        area = None
        if is_direct(run[0].fd):
            n = _span(run)[1]
            if used + n > len(staging):  # staging full: let the runs in flight finish
                for f in futures:
                    f.result()
                futures, used = [], 0
            area, used = staging[used : used + n], used + n
        futures.append(pool.submit(_read_run, run, buf, area))
    for f in futures:
        f.result()


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
            if e.errno != errno.EINVAL:
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
    crc32 of each of its `crc_ranges`, in chunk order. With direct=True, chunks go out with
    O_DIRECT while their offsets and lengths are multiples of ALIGN (an unaligned one is the
    file's tail).
    """
    fd, direct = _open_output(path, direct)
    free: queue.Queue = queue.Queue()
    for _ in range(min(8, max(2, pool_bytes // max(max_chunk, 1)))):
        free.put(_aligned_buffer(max_chunk))
    full: queue.Queue = queue.Queue()
    # direct reads of unaligned sources land here: a chunk's runs, each rounded out to ALIGN
    staging = _aligned_buffer(max_chunk + STAGING_SLACK)
    readers = cf.ThreadPoolExecutor(READERS, thread_name_prefix="pack-read")
    failed: list[BaseException] = []
    stop = threading.Event()

    running: dict = {}  # key -> crc32 so far (chunks are written in order, on one thread)

    def crc(data: np.ndarray, start: int, n: int, *key) -> int:
        value = zlib.crc32(data[start : start + n], running.get(key[0], 0) if key else 0)
        if key:
            running[key[0]] = value
        return value

    def writer() -> None:
        try:
            while (item := full.get()) is not None and not stop.is_set():
                chunk, buf = item
                data = buf[: chunk.nbytes]
                crcs = [crc(data, *r) for r in chunk.crc_ranges]
                if direct and (chunk.offset % ALIGN or chunk.nbytes % ALIGN):
                    # the file's unaligned tail: O_DIRECT off from here on (Linux F_SETFL)
                    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_DIRECT)
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
                _advise(ahead, "POSIX_FADV_WILLNEED")  # read it while `chunk` is filled
            if chunk is not None:
                buf = free.get()
                if buf is None:
                    break
                _fill(chunk, buf, staging, readers)
                _advise(chunk, "POSIX_FADV_DONTNEED")  # read once: leave the page cache alone
                full.put((chunk, buf))
            chunk = ahead
    except BaseException:
        stop.set()
        raise
    finally:
        readers.shutdown(wait=True)
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
