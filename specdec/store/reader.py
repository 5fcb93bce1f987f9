"""ExpertReader: reads expert blocks of experts.bin straight into arena slots.

    with ExpertReader(packed_dir, index, arena, io="direct") as reader:
        reader.read([(layer, expert, slot), ...])      # blocks until every block is in its slot
        fut = reader.submit([...]); ...; reader.wait(fut)   # asynchronous (router lookahead)

Each block is one `os.preadv` scattering it into its slot's segments (the arena keeps each tensor
in a dense region of its own: specdec.store.arena), run on a thread pool (`preadv` releases the
GIL, so reads overlap). Where O_DIRECT cannot write into the segments themselves (a tensor whose
size is not a multiple of ALIGN, or memory the kernel refuses to pin for O_DIRECT: EFAULT/EINVAL,
as CUDA managed memory may), a block is read into the thread's staging buffer (in 2 MiB pages
where it spans one: arena.huge_buffer) and copied into its segments (`staged` counts them). A
batch with fewer blocks than threads splits its large blocks into ALIGN-multiple pieces of at
least `split_min` (4 MiB) read in parallel (ds4's trick for a lone miss; here it pays only for
blocks of 8 MiB and more); the crc32 (when verified) is checked by whichever thread reads a
block's last piece. I/O modes:

    direct    page cache bypassed: O_DIRECT on Linux, F_NOCACHE on macOS. What a streaming
              engine's misses really cost; also keeps the page cache from posing as expert cache.
    buffered  plain preadv through the page cache.
    mmap      copy out of an mmap of the file (the baseline an mmap-based loader gets).
    pinned    O_DIRECT into the thread's page-locked staging buffer, then a copy-engine copy
              into the slot (MLX's CUDA backend only: specdec.store.cuda_copy). The slot's managed
              pages stay on the GPU, where `direct` faults them to the host and back. From a RAM
              file system (tmpfs, ramfs) without O_DIRECT: its files are memory, no disk to
              bypass, and the landing is what `pinned` is for (`page_cache_io`).

Short reads are completed in a loop; EIO is retried MAX_RETRIES times, then a StoreError names
the layer, the expert and the file. `fault_hook(layer, expert, attempt)` lets tests inject
faults: it may raise OSError or return a byte count that caps that attempt (a short read).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import errno
import mmap
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specdec.core.accelerator import on_cuda
from specdec.core.errors import StoreError
from specdec.core.files import open_regular
from specdec.store.arena import Arena, HugePages, huge_buffer
from specdec.store.layout import ALIGN, EXPERTS_BIN, ExpertIndex, round_up

IO_MODES = ("direct", "buffered", "mmap", "pinned")
DIRECT_MODES = ("direct", "pinned")  # O_DIRECT: the page cache bypassed
RAM_FILESYSTEMS = ("tmpfs", "ramfs")  # files that are memory: no disk under them
MAX_RETRIES = 3
F_NOCACHE = 48  # macOS fcntl: bypass the unified buffer cache for this fd

Request = tuple[int, int, int]  # (layer, expert, slot)
MAX_THREADS = 256  # reader threads; far past what any SSD queue needs, and bounded so a typo fails

# A block is split across idle threads only into pieces of at least this: the block layer sends
# at most 4 MiB per request here (max_sectors_kb), so one 8 MB preadv already has two in flight,
# and 1 MiB pieces measured slower (benchmarks/results/read.md, `_one_by_one` rows).
SPLIT_MIN = 4 << 20


@dataclass
class _Block:
    left: int  # parts not yet read; the thread reading the last one checks the crc32


@dataclass
class _Part:
    start: int  # byte range of the block, ALIGN multiples (O_DIRECT)
    end: int
    block: _Block


READ_SPLIT = ("io_s", "land_s", "wake_s")  # ReadStats' split of a batch's thread-seconds


@dataclass
class ReadStats:
    """Counters since the reader was opened (or since `reset_stats`)."""

    bytes_read: int = 0  # bytes actually read from experts.bin
    reads: int = 0  # blocks read
    blocked_s: float = 0.0  # time callers spent waiting in read()/wait()
    read_s: float = 0.0  # wall time during which at least one batch was in flight
    staged: int = 0  # block parts read through a staging buffer (see the module doc)
    staging_bytes: int = 0  # staging memory the reader's threads hold
    # where a batch's time goes, summed over the threads that read it (thread-seconds, not
    # wall): reading (preadv or an mmap's page faults; a staging buffer's first allocation and
    # pinning included), landing what was read in its slots (the DMA of pinned reads, or a
    # staging buffer's host copy), and a pool worker's wait from the batch being handed out to
    # its start (the calling thread starts at once: none)
    io_s: float = 0.0
    land_s: float = 0.0
    wake_s: float = 0.0

    def split(self) -> tuple[float, ...]:
        """The thread-seconds so far in each part of READ_SPLIT, in its order."""
        return tuple(getattr(self, name) for name in READ_SPLIT)


def filesystem_type(path: Path) -> str | None:
    """File system type of the mount holding `path` (Linux /proc/self/mountinfo), else None."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    target, best, fstype = str(Path(path).resolve()), -1, None
    for line in lines:
        left, _, right = line.partition(" - ")
        mount_point = left.split()[4].replace("\\040", " ")
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) > best:
            best, fstype = len(mount_point), right.split()[0]
    return fstype


def check_threads(threads: int) -> None:
    if not 1 <= threads <= MAX_THREADS:
        raise StoreError(
            f"reader threads must be 1 to {MAX_THREADS} (got {threads}): pass --threads "
            f"between 1 and {MAX_THREADS}"
        )


def open_expert_file(path: Path, io: str) -> int:
    """Open experts.bin for `io` mode; a file system refusing O_DIRECT gives a clear error.

    tmpfs/ramfs are refused in direct mode even where the kernel accepts O_DIRECT (Linux >= 6.6):
    their files live in the page cache, so "direct" reads would measure memory, not a disk.
    `pinned` reads them without O_DIRECT: what it changes is how a block lands, not the source.
    """
    if io not in IO_MODES:
        raise StoreError(f"unknown io mode {io!r}; use one of {', '.join(IO_MODES)}")
    fstype = filesystem_type(path)
    in_ram = fstype in RAM_FILESYSTEMS
    if io == "direct" and in_ram:
        raise StoreError(
            f"{path} is on {fstype}, which has no disk to read directly "
            "(O_DIRECT cannot bypass a RAM file system); use `--io buffered`"
        )
    if Path(path).is_dir():
        raise StoreError(f"{path} is a directory, not the expert file; re-pack with `specdec pack`")
    flags = os.O_RDONLY
    if io in DIRECT_MODES and not in_ram and hasattr(os, "O_DIRECT"):
        flags |= os.O_DIRECT
    try:
        fd = open_regular(path, flags, fix="re-pack with `specdec pack MODEL_DIR OUT_DIR --force`")
    except FileNotFoundError as e:
        raise StoreError(f"{path} not found: re-pack with `specdec pack MODEL_DIR OUT_DIR`") from e
    except OSError as e:
        if e.errno == errno.EINVAL and io in DIRECT_MODES:
            raise StoreError(
                f"{path}: this file system refuses O_DIRECT (tmpfs?); use `--io buffered`"
            ) from e
        raise StoreError(f"{path}: cannot open ({e.strerror})") from e
    if io in DIRECT_MODES and sys.platform == "darwin":
        import fcntl

        fcntl.fcntl(fd, F_NOCACHE, 1)
    return fd


@contextlib.contextmanager
def blocked(stats: ReadStats) -> Iterator[None]:
    """The caller waits on reads for the body's time: added to stats.blocked_s."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        stats.blocked_s += time.perf_counter() - t0


def timed_wait(future: cf.Future, stats: ReadStats) -> None:
    """Block until `future` is done (re-raising its error), counting the time as blocked."""
    with blocked(stats):
        future.result()


class ExpertReader:
    """Reads (layer, expert) blocks into arena slots from a thread pool."""

    def __init__(
        self,
        packed_dir: str | Path,
        index: ExpertIndex,
        arena: Arena,
        io: str = "direct",
        threads: int = 8,
        verify_checksums: bool = False,
        split_min: int = SPLIT_MIN,
    ) -> None:
        check_threads(threads)
        if arena.slot_bytes < index.slot_bytes:
            raise StoreError(
                f"arena slots of {arena.slot_bytes} B are smaller than the index's "
                f"{index.slot_bytes} B blocks; build the Arena with index.slot_bytes"
            )
        self.path = Path(packed_dir) / EXPERTS_BIN
        self.index, self.arena, self.io = index, arena, io
        self.verify_checksums = verify_checksums
        self.threads, self.split_min = threads, max(ALIGN, split_min)
        self.fault_hook: Callable[[int, int, int], int | None] | None = None
        self.stats = ReadStats()
        # staging in 2 MiB pages (huge_buffer); False: in 4 KiB pages, as before the thirty-
        # seventh session (bench_cuda.py `copies` reads both ways in turn, each thread keeping
        # a buffer of each)
        self.huge_staging = True
        # (thread, huge_staging) -> that thread's staging buffer and the 2 MiB pages it got
        self._staging: dict[tuple[int, bool], tuple[np.ndarray, HugePages]] = {}
        self._copy = None  # pinned: what lands staged blocks by DMA (made once the file is open)
        self._must_stage = False  # set once O_DIRECT refused the arena's memory
        self._lock = threading.Lock()
        self._in_flight = 0
        self._busy_since = 0.0
        self._fd = open_expert_file(self.path, io)
        self._mmap: mmap.mmap | None = None
        try:
            size = os.fstat(self._fd).st_size
            if size < index.file_bytes:
                raise StoreError(
                    f"{self.path} is {size} bytes but the index needs {index.file_bytes} "
                    "(truncated file); re-pack with `specdec pack`"
                )
            if io == "mmap":
                self._mmap = mmap.mmap(self._fd, 0, prot=mmap.PROT_READ)
            if io == "pinned":
                self._copy = _pinned_copy()
        except BaseException:
            os.close(self._fd)
            raise
        self._pool = cf.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="expert-read")
        # Start every thread now: the executor spawns them lazily, one per submit, so the first
        # batch of misses would pay thread creation on the critical path.
        started = threading.Barrier(threads + 1)
        try:
            for _ in range(threads):
                self._pool.submit(started.wait)
        except RuntimeError as e:  # "can't start new thread": a process or memory limit
            started.abort()  # the threads that did start return instead of waiting forever
            self.close()
            raise StoreError(
                f"cannot start {threads} reader threads ({e}); pass a smaller --threads"
            ) from None
        started.wait()

    # ------------------------------------------------------------------ public

    def read(self, requests: Sequence[Request]) -> None:
        """Read every requested block into its slot; returns when all are in. The calling thread
        reads a share itself, as one of the batch's workers: a lone block then costs no hand-off
        to the pool and no wake-up back (~100 µs a call on the 2-core VM, 1.18 MB blocks; the
        reads in flight stay min(threads, parts)); its reading counts as blocked, like the wait."""
        with blocked(self.stats):
            self._start(requests, caller=True).result()

    def submit(self, requests: Sequence[Request]) -> cf.Future:
        """Start reading; the Future completes (or raises StoreError) when all blocks are in."""
        return self._start(requests, caller=False)

    def _start(self, requests: Sequence[Request], caller: bool) -> cf.Future:
        """The batch's workers on the pool, one of them the calling thread itself with `caller`
        (it returns once no part is left to take; the Future completes when the last worker
        to finish has)."""
        done: cf.Future = cf.Future()
        if not requests:
            done.set_result(None)
            return done
        self._batch_started()
        parts = [
            (layer, expert, slot, part)
            for layer, expert, slot in requests
            for part in self._parts(layer, len(requests))
        ]
        # A few workers drain the batch rather than one pool task per part: one thread wake-up
        # per worker, not per read, which matters when other processes hold the CPUs.
        todo, errors = iter(enumerate(parts)), []
        remaining = [min(self.threads, len(parts))]
        handed, woke = time.perf_counter(), []  # each pool worker's start (list.append: atomic)

        def worker(pooled: bool = True) -> None:
            if pooled:
                woke.append(time.perf_counter())
            while True:
                with self._lock:
                    i, item = next(todo, (None, None))
                if item is None:
                    break
                try:
                    self._read_part(*item)
                except BaseException as e:  # the batch fails; the other parts are still read
                    errors.append((i, e))
            with self._lock:
                remaining[0] -= 1
                if remaining[0]:
                    return
                # the last worker out: every worker has started (each appends before it ends)
                self.stats.wake_s += sum(t - handed for t in woke)
            self._batch_finished()
            if errors:  # the first failing part in request order, whatever finished first
                done.set_exception(min(errors, key=lambda ie: ie[0])[1])
            else:
                done.set_result(None)

        for _ in range(remaining[0] - caller):
            self._pool.submit(worker)
        if caller:
            worker(pooled=False)
        return done

    def wait(self, future: cf.Future) -> None:
        """Block until `future` (from submit) is done, counting the time as blocked."""
        timed_wait(future, self.stats)

    @property
    def staging_pages(self) -> list[HugePages]:
        """The 2 MiB pages each thread's staging buffers asked for and got."""
        with self._lock:  # a thread may add its buffer meanwhile
            return [pages for _, pages in self._staging.values()]

    @property
    def staging_huge_pages(self) -> float | None:
        """Measured share of the staging buffers' whole 2 MiB pages that are huge (None: no
        staging buffer spans one)."""
        return HugePages.combined(self.staging_pages).share

    def reset_stats(self) -> None:
        self.stats = ReadStats()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        if self._copy is not None:
            self._copy.close()
            self._copy = None
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> ExpertReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _batch_started(self) -> None:
        with self._lock:
            if self._in_flight == 0:
                self._busy_since = time.perf_counter()
            self._in_flight += 1

    def _batch_finished(self) -> None:
        with self._lock:
            self._in_flight -= 1
            if self._in_flight == 0:
                self.stats.read_s += time.perf_counter() - self._busy_since

    def _parts(self, layer: int, batch: int) -> list[_Part]:
        """A block's byte ranges, read in parallel: a batch smaller than the pool splits its
        blocks (pieces of at least split_min, ALIGN multiples) so idle threads help; a full
        batch reads each block whole."""
        layout = self.index.layers.get(layer)
        if layout is None:
            return [_Part(0, 0, _Block(1))]  # _read_part names the bad layer
        n = layout.block_bytes
        k = max(1, min(self.threads // batch, n // self.split_min))
        step = round_up(-(-n // k), ALIGN)
        spans = [(a, min(a + step, n)) for a in range(0, n, step)]
        block = _Block(len(spans))
        return [_Part(a, b, block) for a, b in spans]

    def _read_part(self, layer: int, expert: int, slot: int, part: _Part) -> None:
        try:
            layout = self.index.layers[layer]
        except KeyError:
            raise StoreError(f"layer {layer} has no routed experts in {self.path}") from None
        if not 0 <= expert < layout.n_experts:
            raise StoreError(f"layer {layer} has {layout.n_experts} experts, asked for {expert}")
        n, offset = layout.block_bytes, int(layout.offsets[expert])
        pieces = _cut(self.arena.segments(slot, n), part.start, part.end)
        size = part.end - part.start
        t0, land, staged = time.perf_counter(), 0.0, False
        if self._mmap is not None:
            # a page of the mapping past the file's end raises SIGBUS, which kills the process:
            # check the size first (a file truncated after it was mapped)
            if offset + part.end > os.fstat(self._fd).st_size:
                raise StoreError(
                    f"{self.path}: the file shrank under the mmap (the block of layer {layer} "
                    f"expert {expert} ends past it); re-pack with `specdec pack`"
                )
            _scatter(np.frombuffer(self._mmap, np.uint8, size, offset + part.start), pieces)
        elif self._staged_mode():
            staged = True
            land = self._read_staged(pieces, size, offset + part.start, layer, expert)
        else:
            try:
                self._preadv_full(pieces, offset + part.start, layer, expert, direct_memory=True)
            except _Unpinnable:  # the kernel will not pin these pages for O_DIRECT: stage
                self._must_stage = staged = True
                land = self._read_staged(pieces, size, offset + part.start, layer, expert)
        spent = time.perf_counter() - t0
        with self._lock:  # the part's counters at once: one lock a part on the read path
            self.stats.staged += staged
            self.stats.io_s += spent - land
            self.stats.land_s += land
            self.stats.bytes_read += size
            part.block.left -= 1
            if part.block.left:
                return  # another part of this block is still being read
            self.stats.reads += 1
        if self.verify_checksums and self.arena.crc32(slot, n) != int(layout.crc32[expert]):
            raise StoreError(
                f"{self.path}: block of layer {layer} expert {expert} fails its crc32 check "
                "(file corrupt); run `specdec verify` and re-pack"
            )

    def _staged_mode(self) -> bool:
        """O_DIRECT reads go through a staging buffer (see the module doc)."""
        if self._copy is not None:
            return True
        return self.io == "direct" and (self._must_stage or not self.arena.direct)

    def _read_staged(
        self, pieces: list[np.ndarray], size: int, offset: int, layer: int, expert: int
    ) -> float:
        """The `size` bytes from `offset` on (the pieces' total) read into this thread's staging
        buffer, then into the pieces by DMA (pinned) or a host copy; returns the seconds that
        landing took."""
        staging = self._staging_buffer(size)
        self._preadv_full([staging], offset, layer, expert)
        t0 = time.perf_counter()
        if self._copy is not None:
            self._copy.land(staging, pieces)
        else:
            _scatter(staging, pieces)
        return time.perf_counter() - t0

    def _staging_buffer(self, size: int) -> np.ndarray:
        """This thread's staging buffer, at least `size` bytes, in 2 MiB pages where it spans one
        (`huge_buffer`; pinned: page-locked, the one it replaces unlocked)."""
        key = (threading.get_ident(), self.huge_staging)  # only this thread writes its keys
        buf, _ = self._staging.get(key, (None, None))
        if buf is None or len(buf) < size:
            if buf is not None and self._copy is not None:
                self._copy.unpin(buf)
            buf, pages = huge_buffer(size, key[1])
            if self._copy is not None:
                self._copy.pin(buf)
            with self._lock:
                self.stats.staging_bytes += len(buf)
                self._staging[key] = buf, pages
        return buf[:size]

    def _preadv_full(
        self,
        dest: list[np.ndarray],
        offset: int,
        layer: int,
        expert: int,
        direct_memory: bool = False,
    ) -> None:
        """preadv until the buffers are full; retry EIO; name the block on failure.
        direct_memory: O_DIRECT into the arena's own memory, which may refuse to be pinned."""
        views = [memoryview(d) for d in dest]
        total = sum(len(v) for v in views)
        done, attempt, failures = 0, 0, 0
        # O_DIRECT lengths must stay multiples of the logical block size
        unit = ALIGN if self.io in DIRECT_MODES else 1
        while done < total:
            want = total - done
            attempt += 1
            try:
                if self.fault_hook is not None:
                    cap = self.fault_hook(layer, expert, attempt - 1)
                    if cap is not None:
                        want = max(unit, min(want, cap) // unit * unit)
                got = os.preadv(self._fd, _window(views, done, want), offset + done)
            except OSError as e:
                if direct_memory and done == 0 and e.errno in (errno.EFAULT, errno.EINVAL):
                    raise _Unpinnable from e
                failures += 1
                if e.errno == errno.EIO and failures <= MAX_RETRIES:
                    continue
                raise StoreError(
                    f"{self.path}: reading layer {layer} expert {expert} at offset {offset} "
                    f"failed after {failures} attempt(s): {e.strerror or e}; run `specdec verify`"
                ) from e
            if got == 0:
                raise StoreError(
                    f"{self.path}: end of file inside the block of layer {layer} expert "
                    f"{expert} (truncated file); re-pack with `specdec pack`"
                )
            done += got


def default_io() -> str:
    """The read path where none is asked for: `pinned` on MLX's CUDA backend, where O_DIRECT into
    the managed arena faults each slot's pages to the host and back (on an H100 plain decoding
    ran 1.25-1.32x faster pinned, docs/results/cuda.md), `direct` elsewhere."""
    return "pinned" if on_cuda() else "direct"


def page_cache_io() -> str:
    """The io that reads a file in the page cache or a RAM file system (a bench's reads without
    the disk) and lands its blocks as the backend's default does: `pinned` on CUDA (a host write
    into managed memory would add the page faults pinned reads never pay), `buffered` elsewhere."""
    return "pinned" if default_io() == "pinned" else "buffered"


def _pinned_copy():
    """What `--io pinned` lands blocks with: CUDA's copy engine, on MLX's CUDA backend only."""
    if not on_cuda():
        raise StoreError(
            "--io pinned copies blocks into CUDA memory by DMA and needs MLX's CUDA backend "
            "(SPECDEC_BACKEND=cuda bash scripts/setup.sh); use --io direct"
        )
    from specdec.store.cuda_copy import CudaCopy

    return CudaCopy()


class _Unpinnable(Exception):
    """O_DIRECT refused the arena's memory (EFAULT/EINVAL before a byte was read)."""


def _cut(segments: list[np.ndarray], start: int, end: int) -> list[np.ndarray]:
    """The parts of consecutive buffers (a block's segments) that fall in bytes [start, end)."""
    out, at = [], 0
    for seg in segments:
        lo, hi = max(start, at), min(end, at + len(seg))
        if lo < hi:
            out.append(seg[lo - at : hi - at])
        at += len(seg)
    return out


def _window(views: list[memoryview], skip: int, n: int) -> list[memoryview]:
    """The n bytes after the first `skip` of consecutive buffers, as buffers (for preadv)."""
    out, at = [], 0
    for v in views:
        lo, hi = max(skip, at), min(skip + n, at + len(v))
        if lo < hi:
            out.append(v[lo - at : hi - at])
        at += len(v)
    return out


def _scatter(src: np.ndarray, pieces: list[np.ndarray]) -> None:
    """Copy consecutive bytes of `src` into the pieces, in order."""
    at = 0
    for piece in pieces:
        piece[:] = src[at : at + len(piece)]
        at += len(piece)
