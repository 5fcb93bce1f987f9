"""How much of fio's lead at one read in flight is its one reused buffer: O_DIRECT reads into one
buffer against reads into 64 buffers in turn (an arena's footprint), beside fio psync, interleaved.

    python benchmarks/bench_read_footprint.py [--dir DIR] [--rounds 4]   # ~2 minutes; needs fio

Each round, in a shuffled order: a plain Python loop of `os.preadv` (one thread, 1.18 MB blocks,
226 distinct blocks in random order, O_DIRECT) into a single buffer, and into 64 buffers used in
turn, each buffer of huge pages (MAP_HUGETLB where huge pages are reserved: as root this script
reserves them and restores the setting after, as bench_read.py does for fio; else transparent
huge pages), and fio psync with `--mem=shmhuge` (one buffer per job; specdec.bench.fio, as
`specdec bench read` runs it) on the same file with a fresh random order. The loops isolate the
destination's footprint; beside them specdec's reader (one thread, O_DIRECT) reads the same
blocks into a 64-slot huge-page arena (the loop's footprint), as one batch and one block a call
(a lone miss), and the plain loop reads into that arena's slots (its memory, without the
reader), so the reader's own cost shows against the loop on the same input and memory. Writes
benchmarks/results/read_footprint.json.
"""

from __future__ import annotations

import argparse
import mmap
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specdec.bench import fio as fiobench  # noqa: E402
from specdec.bench.read import ARENA_SLOTS, BenchFile, make_bench_file  # noqa: E402
from specdec.core.machine import machine_info, write_result  # noqa: E402
from specdec.store.layout import EXPERTS_BIN  # noqa: E402

BLOCK, N_BLOCKS, READS, SLOTS = 1183744, 900, 226, 64
MAP_HUGETLB = 0x40000  # Linux; Python's mmap module does not export it before 3.13
NR = Path("/proc/sys/vm/nr_hugepages")
FIO = fiobench.FioConfig("psync", 1, "shmhuge")  # fio's best at one read in flight here


def buffer(size: int) -> tuple[mmap.mmap, str]:
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    try:
        buf, kind = mmap.mmap(-1, size, flags=flags | MAP_HUGETLB), "hugetlb"
    except OSError:
        buf, kind = mmap.mmap(-1, size, flags=flags), "thp"
        buf.madvise(mmap.MADV_HUGEPAGE)
    buf.write(b"\1" * size)  # every page present before the clock
    return buf, kind


def preadv_loop(path: Path, seed: int, into) -> float:
    """GB/s of a plain Python loop of O_DIRECT `preadv`, one thread: READS random blocks, read
    i into the buffers `into(i)` gives."""
    order = random.Random(seed).sample(range(N_BLOCKS), READS)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        t0 = time.perf_counter()
        for i, e in enumerate(order):
            os.preadv(fd, into(i), e * BLOCK)
        return READS * BLOCK / (time.perf_counter() - t0) / 1e9
    finally:
        os.close(fd)


def buffers_loop(path: Path, slots: int, seed: int) -> float:
    """The loop into `slots` huge-page buffers of one mapping, in turn."""
    buf, _ = buffer(-(-slots * BLOCK // (2 << 20)) * (2 << 20))
    view = memoryview(buf)
    try:
        return preadv_loop(
            path, seed, lambda i: [view[i % slots * BLOCK : (i % slots + 1) * BLOCK]]
        )
    finally:
        view.release()
        buf.close()


def specdec_reader(bf: BenchFile, seed: int, lone: bool) -> float:
    """specdec's ExpertReader, one thread, the same reads into the bench arena's slots in turn:
    one batch, or one block a call (`lone`)."""
    from specdec.store.reader import ExpertReader

    order = random.Random(seed).sample(range(N_BLOCKS), READS)
    reqs = [(0, e, i % ARENA_SLOTS) for i, e in enumerate(order)]
    with ExpertReader(bf.dir, bf.index, bf.arena, io="direct", threads=1) as reader:
        t0 = time.perf_counter()
        for batch in [[q] for q in reqs] if lone else [reqs]:
            reader.read(batch)
        return READS * BLOCK / (time.perf_counter() - t0) / 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=ROOT)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/read_footprint.json")
    args = ap.parse_args()
    old = NR.read_text() if os.geteuid() == 0 else None
    if old is not None:
        NR.write_text("64\n")  # 128 MiB: the 64-buffer footprint and fio's one
    assert ARENA_SLOTS == SLOTS, "the reader's arena is the loop's footprint"
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="footprint-") as tmp:
        bf = make_bench_file(Path(tmp), BLOCK, N_BLOCKS * BLOCK)  # random blocks, synced
        path, arena_huge = bf.dir / EXPERTS_BIN, bf.arena.huge_page_fraction
        probe, kind = buffer(2 << 20)  # what the buffers get: hugetlb or thp
        probe.close()
        print(f"the reader's arena: {arena_huge or 0:.0%} huge pages; the loops' buffers: {kind}")
        arena = lambda i: bf.arena.segments(i % ARENA_SLOTS, BLOCK)  # noqa: E731
        how = {  # name -> GB/s of one run with this seed
            "one buffer": lambda seed: buffers_loop(path, 1, seed),
            f"{SLOTS} buffers": lambda seed: buffers_loop(path, SLOTS, seed),
            "fio psync shmhuge": lambda seed: fiobench.run(path, BLOCK, FIO, READS, seed),
            "loop into the arena's 64 slots": lambda seed: preadv_loop(path, seed, arena),
            "specdec reader, one batch": lambda seed: specdec_reader(bf, seed, lone=False),
            "specdec reader, a block a call": lambda seed: specdec_reader(bf, seed, lone=True),
        }
        runs: dict[str, list[float]] = {name: [] for name in how}
        try:
            rng = random.Random(0)
            for _ in range(args.rounds):
                for name in rng.sample(list(runs), len(runs)):
                    fd = os.open(path, os.O_RDONLY)  # O_DIRECT skips it; the host's copy may not
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    os.close(fd)
                    runs[name].append(how[name](rng.randrange(1 << 30)))
        finally:
            if old is not None:
                NR.write_text(old)
    med = {k: statistics.median(v) for k, v in runs.items()}
    per_round = {k: [a / b for a, b in zip(v, runs["fio psync shmhuge"], strict=True)]
                 for k, v in runs.items() if not k.startswith("fio")}  # fmt: skip
    result = {
        # results name no machine's paths
        "command": "python benchmarks/bench_read_footprint.py "
        + " ".join(sys.argv[1:]).replace(str(args.dir), "DIR"),
        "block_bytes": BLOCK, "reads_per_run": READS, "buffers": kind,
        "arena_huge_pages": arena_huge,
        "gbps": runs, "median_gbps": med, "over_fio_per_round": per_round,
        "machine": machine_info(),
    }  # fmt: skip
    write_result(args.out, result)
    for k in runs:
        print(f"{k:>30}: {' '.join(f'{x:.2f}' for x in runs[k])} GB/s (median {med[k]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
