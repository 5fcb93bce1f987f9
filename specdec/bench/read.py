"""`specdec bench read`: throughput of the ways to get an expert block from disk into MLX.

Reproduces section 5 of the seed question on this machine, for expert-sized blocks (default
1.18 MB, rounded up to 4 KiB), read once each in random order from a ~1 GiB file on the real disk:

    pread_heap_mxarray     os.pread -> bytes on the heap -> mx.array (a copy)     page cache
    preadv_fresh_buffer    new MLX buffer per read, O_DIRECT preadv into it        bypassed
    preadv_direct_arena    ExpertReader(io="direct") into preallocated arena slots  bypassed
    ..._one_by_one         the same, one block per read() (a lone miss)            bypassed
    ..._4k_pages           the same arena without transparent huge pages            bypassed
    ..._reused_slots       the same into as many slots as threads, in turn: reused    bypassed
                           as fio's jobs reuse their buffers (a decode's blocks each need a
                           slot of their own; on a VM a read lands faster in memory one landed
                           in lately)
    ..._gpu_touched        into slots the device has just computed on (CUDA: managed  bypassed
                           pages on the GPU migrate back before O_DIRECT pins them)
    preadv_pinned_arena_gpu_touched  ExpertReader(io="pinned") into the same: O_DIRECT   bypassed
                           into page-locked staging, a copy-engine copy onto the slot (CUDA only)
    preadv_buffered_arena  ExpertReader(io="buffered")                              page cache
    mmap_copy              ExpertReader(io="mmap"): copy out of an mmap            page cache

each serial and with 8 threads. `--pack DIR` reads a packed model's own experts.bin in place
instead (its blocks, across the whole file: what a decode of it reads). The file's pages are
dropped (posix_fadvise DONTNEED) before each run, so buffered paths read the disk too. The peer
is fio (`store/fiobench.py`; `apt-get install fio`) in every configuration that could be its
best: psync, libaio and io_uring with the same reads in flight, each with 4 KiB-page and
huge-page buffers (the arena has huge pages, and O_DIRECT pins every page of its buffer).
Every path and every fio configuration run once per round, shuffled together, so the disk's
drift hits all alike; `checks.best` compares our best page-cache-bypassing path with fio's best.
The arena paths run the project's real reader over a real packed layout (experts.bin +
experts.json), not a copy of its code.

`specdec bench read --json` prints the JSON; `python benchmarks/bench_read.py` writes
benchmarks/results/read.json. Both write this machine's device profile from the measured curve
(`measured_profile`) to $SPECDEC_CACHE/profiles/this-machine.yaml, the profile `this-machine`
(specdec.clock.profiles), unless `--no-profile`.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from specdec.bench import fio as fiobench
from specdec.clock.profiles import (
    ASSUMED_LATENCY_S,
    MEASURED_PROFILE,
    DeviceProfile,
    capped_latency,
    measured_profile_path,
    profile_yaml,
)
from specdec.core import machine
from specdec.core.accelerator import on_cuda
from specdec.core.errors import SpecdecError, StoreError
from specdec.core.files import write_atomic, write_error
from specdec.store.arena import Arena
from specdec.store.layout import (
    ALIGN,
    EXPERTS_BIN,
    INDEX_VERSION,
    ExpertIndex,
    LayerLayout,
    TensorSpec,
    round_up,
)
from specdec.store.reader import (
    RAM_FILESYSTEMS,
    ExpertReader,
    filesystem_type,
    open_expert_file,
)

DEFAULT_BLOCK = 1_180_000  # the seed question's 1.18 MB expert blocks
DEFAULT_FILE = 1 << 30
DEFAULT_RUN = 256 << 20  # bytes read per timed run (distinct blocks, random order)
ARENA_SLOTS = 64  # slots cycled through; > threads, so reads in flight never share a slot
COMPACT_MEMORY = Path("/proc/sys/vm/compact_memory")  # root: compact, then retry huge pages


@dataclass
class PathResult:
    name: str
    gbps: float  # median over rounds, 1e9 bytes/s
    page_cache: bool  # True when the path reads through the page cache
    threads: int
    runs_gbps: list[float]
    # device bytes read / bytes asked for (kernel readahead and mmap fault-around inflate it);
    # None where the block device's counters cannot be read
    read_amplification: float | None = None


# ----------------------------------------------------------------------------- the test file


@dataclass
class BenchFile:
    """The test file in packed layout, its index, the preallocated arena the reads land in, and
    the blocks a run draws from."""

    dir: Path
    index: ExpertIndex
    arena: Arena  # transparent huge pages where the kernel grants them (Arena's default)
    arena_4k: Arena  # the same without huge pages: shows what page pinning costs O_DIRECT
    keys: list[tuple[int, int]]  # (layer id, expert) of each block a run may read

    @property
    def layout(self) -> LayerLayout:
        return self.index.layers[0]

    def block(self, i: int) -> tuple[int, int]:
        """(offset in experts.bin, bytes) of block keys[i]."""
        lid, e = self.keys[i]
        ly = self.index.layers[lid]
        return int(ly.offsets[e]), ly.block_bytes


def _on_disk(directory: Path, fix: str) -> None:
    """The read bench measures a disk: refuse a RAM file system."""
    fstype = filesystem_type(directory)
    if fstype in RAM_FILESYSTEMS:
        raise StoreError(f"{directory} is on {fstype}: {fix}")


def _bench_file(directory: Path, index: ExpertIndex, keys: list[tuple[int, int]]) -> BenchFile:
    """The reads' arenas (one with huge pages where granted, one without) sized to the index."""
    slot = index.slot_bytes
    arenas = _huge_page_arena(slot), Arena(ARENA_SLOTS, slot, huge_pages=False)
    return BenchFile(directory, index, *arenas, keys)


def make_bench_file(directory: Path, block_bytes: int, file_bytes: int) -> BenchFile:
    """A packed-layout experts.bin of random bytes (one 'layer' of equal blocks) and its index."""
    _on_disk(directory, "pass --dir on a real disk")
    n_blocks = max(16, file_bytes // block_bytes)
    layout = LayerLayout(
        prefix="bench",
        n_experts=n_blocks,
        block_bytes=block_bytes,
        tensors=[TensorSpec("block.weight", "U8", (block_bytes,), 0, block_bytes)],
        offsets=block_bytes * np.arange(n_blocks, dtype=np.int64),
        crc32=np.zeros(n_blocks, dtype=np.uint32),
    )
    index = ExpertIndex(INDEX_VERSION, block_bytes, {0: layout})
    rng = np.random.default_rng(0)
    with open(directory / EXPERTS_BIN, "wb") as f:
        for _ in range(n_blocks):
            f.write(rng.bytes(block_bytes))
        f.flush()
        os.fsync(f.fileno())
    index.save(directory)
    return _bench_file(directory, index, index.blocks())


def open_bench_pack(pack: Path, window_bytes: int | None = None) -> BenchFile:
    """A packed model's own experts.bin as the test file, read in place: a run draws from all its
    expert blocks (or those wholly within its first `window_bytes`), so its reads span the file a
    decode of that model reads, where a written test file spans a few GiB just written (a
    virtual disk may read the two at different rates: docs/results/cuda.md)."""
    pack = Path(pack)
    if not (pack / EXPERTS_BIN).is_file():
        raise StoreError(f"{pack}: no {EXPERTS_BIN} there; give a packed model's directory")
    _on_disk(pack, "the read bench measures a disk; give a pack on one")
    index = ExpertIndex.load(pack)
    if index.mixed:  # its cold blocks land in an arena of their own layout (stream/mixed.py)
        raise StoreError(
            f"{pack} is a mixed pack (--cold-bits): the read bench reads one block size; "
            "give a pack without cold blocks"
        )
    bf = _bench_file(pack, index, index.blocks())
    if window_bytes is not None:
        bf.keys = [k for i, k in enumerate(bf.keys) if sum(bf.block(i)) <= window_bytes]
        if not bf.keys:
            raise StoreError(f"{pack}: no expert block within its first {window_bytes} bytes")
    return bf


@contextlib.contextmanager
def _source(
    directory: Path | None, block_bytes: int, file_bytes: int, pack: Path | None
) -> Iterator[BenchFile]:
    """What a bench reads: the pack in place, or a test file written first (removed after)."""
    if pack is not None:
        yield open_bench_pack(pack)
        return
    work = _work_dir(directory, file_bytes)
    try:
        yield make_bench_file(work, block_bytes, file_bytes)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _huge_page_arena(block_bytes: int) -> Arena:
    """The arena, with one retry after compacting memory (root) when the kernel had no free
    2 MiB pages: without them the arena path measures 4 KiB-page pinning, not the arena the
    reader is built for (fio gets reserved huge pages). What the kernel granted, measured, is in
    the result and the table, with a warning line when short."""
    arena = Arena(ARENA_SLOTS, block_bytes)
    if not arena.huge_pages and os.access(COMPACT_MEMORY, os.W_OK):
        del arena
        mx.clear_cache()  # else MLX hands the same 4 KiB-page memory back
        COMPACT_MEMORY.write_text("1\n")
        arena = Arena(ARENA_SLOTS, block_bytes)
    return arena


def device_sectors_read(path: Path) -> int | None:
    """Sectors (512 B) read so far by the block device holding `path` (Linux sysfs), or None."""
    st = os.stat(path)
    try:
        fields = Path(
            f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/stat"
        ).read_text()
        return int(fields.split()[2])
    except (OSError, IndexError, ValueError):
        return None


def drop_page_cache(path: Path) -> bool:
    """Evict the file's clean pages (it was fsynced); True when the kernel took the advice."""
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- the paths


def _run_pool(threads: int, fn: Callable[[int], None], items: list[int]) -> float:
    """Seconds to run fn over items on `threads` threads (pool started before the clock)."""
    if threads == 1:
        t0 = time.perf_counter()
        for i in items:
            fn(i)
        return time.perf_counter() - t0
    with cf.ThreadPoolExecutor(threads) as pool:
        started = threading.Barrier(threads + 1)
        for _ in range(threads):
            pool.submit(started.wait)
        started.wait()
        t0 = time.perf_counter()
        list(pool.map(fn, items))
        return time.perf_counter() - t0


def _pread_heap_mxarray(bf: BenchFile, order: list[int], threads: int) -> float:
    fd = open_expert_file(bf.dir / EXPERTS_BIN, "buffered")

    def one(i: int) -> None:
        offset, nbytes = bf.block(i)
        data = os.pread(fd, nbytes, offset)  # heap bytes
        mx.eval(mx.array(np.frombuffer(data, np.uint8)))  # copied into an MLX buffer

    try:
        return _run_pool(threads, one, order)
    finally:
        os.close(fd)


def _preadv_fresh_buffer(bf: BenchFile, order: list[int], threads: int) -> float:
    fd = open_expert_file(bf.dir / EXPERTS_BIN, "direct")

    def one(i: int) -> None:
        offset, nbytes = bf.block(i)
        buf = mx.zeros((nbytes + ALIGN,), dtype=mx.uint8)  # allocated (and zeroed) per read
        mx.eval(buf)
        view = np.array(buf, copy=False)
        start = (-view.ctypes.data) % ALIGN
        os.preadv(fd, [memoryview(view[start : start + nbytes])], offset)

    try:
        return _run_pool(threads, one, order)
    finally:
        os.close(fd)


def _reader_path(io: str, huge_pages: bool = True, reused: bool = False):
    """The reader opened (file, threads) before the clock, as a decode engine opens it at load;
    its blocks land in the arena's slots in turn, or with `reused` in its first `threads` in
    turn (the bytes are not checked: two reads in flight may share a slot)."""

    def run(bf: BenchFile, order: list[int], threads: int) -> float:
        arena = bf.arena if huge_pages else bf.arena_4k
        slots = threads if reused else ARENA_SLOTS
        with ExpertReader(bf.dir, bf.index, arena, io=io, threads=threads) as reader:
            requests = [(*bf.keys[k], i % slots) for i, k in enumerate(order)]
            t0 = time.perf_counter()
            reader.read(requests)
            return time.perf_counter() - t0

    return run


def _touched(io: str):
    """The reader with `io` into arena slots a computation on the default device has just read,
    as a decode's slots are between reads: on CUDA the arena is managed memory and those pages
    live on the GPU, so each direct read first migrates them back (what the runs pay and the
    plain arena path does not; docs/results/cuda.md), where a pinned one copies onto them. On a
    CPU or unified memory: the plain path's reads."""

    def run(bf: BenchFile, order: list[int], threads: int) -> float:
        bf.arena.touch()  # before the clock, as the reader's setup is
        return _reader_path(io)(bf, order, threads)

    return run


# a decode's reads on each O_DIRECT io, into slots the device computed on (the device profile's
# read curve on CUDA: specdec.bench.device)
TOUCHED = {"direct": "preadv_direct_arena_gpu_touched", "pinned": "preadv_pinned_arena_gpu_touched"}


def _direct_one_by_one(bf: BenchFile, order: list[int], threads: int) -> float:
    """Each block alone, as a lone miss (the reader splits blocks over 2 x SPLIT_MIN)."""
    with ExpertReader(bf.dir, bf.index, bf.arena, io="direct", threads=threads) as reader:
        t0 = time.perf_counter()
        for i, k in enumerate(order):
            reader.read([(*bf.keys[k], i % ARENA_SLOTS)])
        return time.perf_counter() - t0


PATHS: dict[str, tuple[Callable, bool]] = {
    "pread_heap_mxarray": (_pread_heap_mxarray, True),
    "preadv_fresh_buffer": (_preadv_fresh_buffer, False),
    "preadv_direct_arena": (_reader_path("direct"), False),
    "preadv_direct_arena_one_by_one": (_direct_one_by_one, False),
    "preadv_direct_arena_4k_pages": (_reader_path("direct", huge_pages=False), False),
    "preadv_direct_arena_reused_slots": (_reader_path("direct", reused=True), False),
    **{name: (_touched(io), False) for io, name in TOUCHED.items()},
    "preadv_buffered_arena": (_reader_path("buffered"), True),
    "mmap_copy": (_reader_path("mmap"), True),
}


CUDA_PATHS = (TOUCHED["pinned"],)  # `--io pinned`: MLX's CUDA backend only


def available_paths() -> tuple[str, ...]:
    """The paths this backend can run (every one but CUDA's elsewhere)."""
    return tuple(n for n in PATHS if on_cuda() or n not in CUDA_PATHS)


def time_path(
    name: str, bf: BenchFile, threads: int, n_reads: int, seed: int
) -> tuple[float, float | None]:
    """One run: n_reads distinct blocks of bf.keys in random order, page cache dropped first.
    Each path opens its file and starts its threads before its clock starts, as fio does (fio's
    bandwidth counts a job's I/O time, not process start, file open or buffer allocation).

    Returns (GB/s, read amplification: device bytes read / bytes asked for, or None).
    """
    fn, _ = PATHS[name]
    order = np.random.default_rng(seed).permutation(len(bf.keys))[:n_reads].tolist()
    drop_page_cache(bf.dir / EXPERTS_BIN)
    sectors = device_sectors_read(bf.dir / EXPERTS_BIN)
    dt = fn(bf, order, threads)  # the reads only: like fio's, setup is off the clock
    nbytes = sum(bf.block(i)[1] for i in order)
    after = device_sectors_read(bf.dir / EXPERTS_BIN)
    amp = None if sectors is None or after is None else (after - sectors) * 512 / nbytes
    return nbytes / dt / 1e9, amp


# ----------------------------------------------------------------------------- machine


def machine_info(directory: Path) -> dict[str, Any]:
    return {
        **machine.machine_info(),
        "filesystem": filesystem_type(directory),
        "bench_dir": str(directory),
        "fio": fiobench.version(),
        "hugepages_free": fiobench.hugepages_free(),
    }


# ----------------------------------------------------------------------------- entry points


def bench_read(
    directory: Path | None = None,
    block_bytes: int = DEFAULT_BLOCK,
    file_bytes: int = DEFAULT_FILE,
    threads: tuple[int, ...] = (1, 8),
    rounds: int = 10,
    run_bytes: int = DEFAULT_RUN,
    paths: tuple[str, ...] | None = None,
    pack: Path | None = None,
) -> dict[str, Any]:
    """Each path (default: every one this backend runs) and fio, `rounds` times each; per round
    the order of the runs is shuffled. `pack`: read that packed model's expert blocks in place
    (`open_bench_pack`) instead of a test file written first (block_bytes and file_bytes are
    then the pack's)."""
    paths = available_paths() if paths is None else paths
    # O_DIRECT needs whole 4 KiB pages
    with _source(directory, round_up(block_bytes, ALIGN), file_bytes, pack) as bf:
        index = bf.index
        block_bytes = index.slot_bytes  # the test file's blocks, or the pack's largest
        n_reads = min(len(bf.keys), max(1, run_bytes // block_bytes))
        dropped = drop_page_cache(bf.dir / EXPERTS_BIN)
        fio_cfgs = {c.name + f"@{c.threads}": c for c in fiobench.configs(block_bytes, threads)}
        # A shared (virtual) disk drifts by tens of percent within seconds: interleave every
        # path and fio in a shuffled order per round, so drift hits all alike; report medians.
        jobs = [(n, t) for t in threads for n in paths] + [
            (k, c.threads) for k, c in fio_cfgs.items()
        ]
        runs: dict[tuple[str, int], list[float]] = {job: [] for job in jobs}
        amps: dict[tuple[str, int], list[float]] = {job: [] for job in jobs}
        rng = np.random.default_rng(0)
        for r in range(rounds):
            for i in rng.permutation(len(jobs)):
                name, t = jobs[i]
                seed = 1000 * r + int(i)
                if name in fio_cfgs:
                    cfg = fio_cfgs[name]
                    gbps = fiobench.run(bf.dir / EXPERTS_BIN, block_bytes, cfg, n_reads, seed)
                else:
                    gbps, amp = time_path(name, bf, t, n_reads, seed)
                    if amp is not None:
                        amps[(name, t)].append(amp)
                runs[(name, t)].append(gbps)
        results = [
            PathResult(
                n,
                statistics.median(v),
                PATHS[n][1],
                t,
                v,
                statistics.median(amps[(n, t)]) if amps[(n, t)] else None,
            )
            for (n, t), v in runs.items()
            if n in PATHS
        ]
        fio = [
            {
                "engine": c.engine,
                "mem": c.mem,
                "threads": c.threads,
                "gbps": statistics.median(runs[(k, c.threads)]),
                "runs_gbps": runs[(k, c.threads)],
                "command": " ".join(
                    fiobench.command(bf.dir / EXPERTS_BIN, block_bytes, c, n_reads)
                ).replace(str(bf.dir), "BENCH_DIR"),
            }
            for k, c in fio_cfgs.items()
        ] or None
        return {
            "source": f"a {index.file_bytes >> 20} MiB test file written first in {bf.dir.parent}"
            if pack is None
            else f"pack {pack}: {len(bf.keys)} blocks ({index.file_bytes >> 20} MiB), read in place",
            "block_bytes": block_bytes,
            "file_bytes": index.file_bytes,
            "bytes_per_run": n_reads * block_bytes,
            "rounds": rounds,
            "page_cache_dropped_between_runs": dropped,
            "arena_huge_pages": bf.arena.huge_page_fraction,  # measured (smaps), 0..1
            "arena_huge_pages_reason": bf.arena.pages.reason,
            "paths": [asdict(r) for r in results],
            "fio": fio,
            "checks": _checks(results, fio),
            "hugepages_short_for_fio": fiobench.hugepages_short(block_bytes, threads),
            "machine": machine_info(bf.dir),
        }


def check_bench_dir(directory: Path) -> None:
    """--dir, where a bench writes its test files, is a directory."""
    if not Path(directory).is_dir():
        raise StoreError(f"--dir {directory}: no such directory; create it or pass another")


def _work_dir(directory: Path | None, file_bytes: int) -> Path:
    """A fresh directory for the test file, on a disk with room for it."""
    if directory is None and filesystem_type(Path(tempfile.gettempdir())) in RAM_FILESYSTEMS:
        directory = Path.cwd()  # the temp dir is RAM here: measure the disk instead
    if directory is not None:
        check_bench_dir(directory)
    where = Path(directory) if directory is not None else Path(tempfile.gettempdir())
    free = shutil.disk_usage(where).free
    if file_bytes > free:  # before the block table and the file are made
        raise StoreError(
            f"--file-bytes {file_bytes}: more than the {free} bytes free in {where}; "
            "give a smaller file or another --dir"
        )
    return Path(tempfile.mkdtemp(prefix="specdec-bench-read-", dir=directory))


DIRECT_PATHS = ("preadv_direct_arena", "preadv_direct_arena_one_by_one")  # ours, into the arena


def _checks(results: list[PathResult], fio: list[dict] | None) -> dict[str, Any]:
    """The done-criteria: per thread count, direct arena vs each fio config and vs pread->heap;
    overall, our best direct configuration vs fio's best (by median over the interleaved rounds;
    also the median of their per-round ratios)."""
    by = {(r.name, r.threads): r for r in results}
    out: dict[str, Any] = {}
    for t in sorted({r.threads for r in results}):
        if ("preadv_direct_arena", t) not in by:
            continue  # a --paths run without it
        direct = by[("preadv_direct_arena", t)].gbps
        row: dict[str, Any] = {}
        if ("pread_heap_mxarray", t) in by:
            row["direct_over_pread_heap"] = direct / by[("pread_heap_mxarray", t)].gbps
            row["faster_than_pread_heap"] = row["direct_over_pread_heap"] > 1.0
        for f in fio or []:
            if f["threads"] == t:
                row[f"direct_over_fio_{f['engine']}_{f['mem']}"] = direct / f["gbps"]
        out[f"threads_{t}"] = row
    ours = [r for r in results if r.name in DIRECT_PATHS]
    if fio and ours:
        best_ours = max(ours, key=lambda r: r.gbps)
        best_fio = max(fio, key=lambda f: f["gbps"])
        # paired per round: the two best configurations ran in the same shuffled round
        per_round = [a / b for a, b in zip(best_ours.runs_gbps, best_fio["runs_gbps"], strict=True)]
        ratio = best_ours.gbps / best_fio["gbps"]
        out["best"] = {
            "ours": f"{best_ours.name} threads={best_ours.threads}",
            "ours_gbps": best_ours.gbps,
            "fio": f"{best_fio['engine']} mem={best_fio['mem']} threads={best_fio['threads']}",
            "fio_gbps": best_fio["gbps"],
            "ours_over_fio_best": ratio,
            "per_round_ratio_median": statistics.median(per_round),
            "meets_0.95_fio_best": ratio >= 0.95,
        }
    return out


def format_table(result: dict[str, Any]) -> str:
    lines = [
        f"block {result['block_bytes']} B, file {result['file_bytes'] / 1e9:.2f} GB, "
        f"{result['bytes_per_run'] / 1e6:.0f} MB per run, median of {result['rounds']} runs"
    ]
    lines.append(f"{'path':<34}{'threads':>8}{'GB/s':>8}  {'page cache':<11}read amplification")
    for p in result["paths"]:
        amp = "-" if p["read_amplification"] is None else f"{p['read_amplification']:.2f}"
        lines.append(
            f"{p['name']:<34}{p['threads']:>8}{p['gbps']:>8.2f}  {p['page_cache']!s:<11}{amp}"
        )
    for f in result["fio"] or []:
        name = f"fio {f['engine']} {f['mem']} O_DIRECT"
        lines.append(f"{name:<34}{f['threads']:>8}{f['gbps']:>8.2f}  False")
    huge = result["arena_huge_pages"]
    if huge is not None and huge < 1.0:  # never a silent 4 KiB-page figure under the arena's name
        lines.append(
            f"WARNING: the arena got 2 MiB pages for only {huge:.0%} of its memory "
            f"({result.get('arena_huge_pages_reason')}): its rows measure 4 KiB-page pinning"
        )
    best = result["checks"].get("best")
    if best:
        lines.append(
            f"best direct ({best['ours']}) / best fio ({best['fio']}): "
            f"{best['ours_over_fio_best']:.2f} (per-round median {best['per_round_ratio_median']:.2f})"
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- this-machine


def measured_profile(result: dict[str, Any], what: str = "specdec bench read") -> DeviceProfile:
    """The device profile `this-machine` from a read bench result (`bench_read`'s dict, or
    read.json): measured compute; the read curve of the fastest page-cache-bypassing path
    (arena paths first), one point per thread count it ran with (threads = reads in flight; a
    run's `in_flight` field wins when the bench writes one); latency assumed, as for the Macs.
    `what` names the bench run in the sources."""
    try:
        block = float(result["block_bytes"])
        paths = [p for p in result["paths"] if not p["page_cache"]]
        arena = [p for p in paths if "arena" in p["name"]] or paths
        best = max(arena, key=lambda p: p["gbps"])["name"]
        curve = {
            float(p.get("in_flight", p["threads"])): float(p["gbps"])
            for p in arena
            if p["name"] == best
        }
        rounds = result.get("rounds", "?")
    except (ValueError, KeyError, TypeError) as e:
        raise SpecdecError(f"not a read bench result ({e}): rerun the read bench") from e
    unused = "unused: compute is measured"
    return DeviceProfile(
        MEASURED_PROFILE,
        compute="measured",
        router_sync_s=0.0,
        read_curve=tuple(curve.items()),
        read_block_bytes=block,
        read_latency_s=capped_latency(ASSUMED_LATENCY_S, curve.items(), block),
        reads_in_flight=8,
        overlap_reads=False,
        description=f"this machine; reads from {what}, path {best!r}",
        sources={
            "compute": "measured on this machine (wall minus time blocked on reads), per pass",
            "mem_gbps": unused,
            "peak_tflops": unused,
            "router_sync_s": "0: already inside the measured compute",
            "position_s": "0: already inside the measured compute",
            "miss_call_s": "0: already inside the measured compute",
            "batched_verify": "false: unused; compute is measured as the run computed",
            "read_curve": f"{what}: {best}, GB/s per thread count (median of {rounds} rounds), "
            f"{block:.0f}-byte blocks",
            "read_block_bytes": f"{what}: its block size",
            "read_latency_s": "assumed: 100 µs, NVMe random read at queue depth 1 (capped below "
            "a block's time at each curve point)",
            "reads_in_flight": "this harness's ExpertReader: 8 threads",
            "overlap_reads": "this harness: a layer's reads complete before its experts compute",
            "land_gbps": "null: the CPU computes on the memory the read filled",
            "land_curve": "empty: the CPU computes on the memory the read filled",
        },
    )


def write_measured_profile(result: dict[str, Any], what: str = "specdec bench read") -> Path:
    """Write `measured_profile(result)` where `this-machine` is read from; returns the path."""
    profile = measured_profile(result, what)
    path = measured_profile_path()
    header = (
        f"{MEASURED_PROFILE}: this machine's device profile, written by {what} "
        f"({time.strftime('%Y-%m-%d %H:%M')}, {result.get('machine', {}).get('cpu', '?')}).\n"
        "Rerun the read bench to replace it; delete it to go back to the shipped fallback."
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise write_error(path, e) from None
    write_atomic(path, profile_yaml(profile, header))
    return path
