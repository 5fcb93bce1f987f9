"""How much of fio's lead at one read in flight is its one reused buffer: O_DIRECT reads into one
buffer against reads into 64 buffers in turn (an arena's footprint), beside fio psync, interleaved.

    python benchmarks/bench_read_footprint.py [--dir DIR] [--rounds 4]   # ~1 minute; needs fio

Each round, in a shuffled order: a plain Python loop of `os.preadv` (one thread, 1.18 MB blocks,
226 distinct blocks in random order, O_DIRECT) into a single buffer, and into 64 buffers used in
turn, each buffer of huge pages (MAP_HUGETLB where huge pages are reserved: as root this script
reserves them and restores the setting after, as bench_read.py does for fio; else transparent
huge pages), and fio psync with `--mem=shmhuge` (one buffer per job; specdec.bench.fio, as
`specdec bench read` runs it) on the same file with a fresh random order. No specdec code reads
here: it isolates the destination's footprint. Writes benchmarks/results/read_footprint.json.
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
from specdec.core.machine import machine_info, write_result  # noqa: E402

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


def python_loop(path: Path, slots: int, seed: int) -> float:
    size = -(-slots * BLOCK // (2 << 20)) * (2 << 20)
    buf, _ = buffer(size)
    view = memoryview(buf)
    order = random.Random(seed).sample(range(N_BLOCKS), READS)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        t0 = time.perf_counter()
        for i, e in enumerate(order):
            at = (i % slots) * BLOCK
            os.preadv(fd, [view[at : at + BLOCK]], e * BLOCK)
        return READS * BLOCK / (time.perf_counter() - t0) / 1e9
    finally:
        os.close(fd)
        view.release()
        buf.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=ROOT)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/read_footprint.json")
    args = ap.parse_args()
    old = NR.read_text() if os.geteuid() == 0 else None
    if old is not None:
        NR.write_text("64\n")  # 128 MiB: the 64-buffer footprint and fio's one
    runs: dict[str, list[float]] = {
        "one buffer": [],
        f"{SLOTS} buffers": [],
        "fio psync shmhuge": [],
    }
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="footprint-") as tmp:
        path = Path(tmp) / "blocks"
        path.write_bytes(os.urandom(N_BLOCKS * BLOCK))
        os.sync()
        probe, kind = buffer(2 << 20)  # what the buffers get: hugetlb or thp
        probe.close()
        try:
            rng = random.Random(0)
            for _ in range(args.rounds):
                for name in rng.sample(list(runs), len(runs)):
                    fd = os.open(path, os.O_RDONLY)  # O_DIRECT skips it; the host's copy may not
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    os.close(fd)
                    seed = rng.randrange(1 << 30)
                    slots = 1 if name == "one buffer" else SLOTS
                    if name.startswith("fio"):
                        got = fiobench.run(path, BLOCK, FIO, READS, seed)
                    else:
                        got = python_loop(path, slots, seed)
                    runs[name].append(got)
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
        "gbps": runs, "median_gbps": med, "over_fio_per_round": per_round,
        "machine": machine_info(),
    }  # fmt: skip
    write_result(args.out, result)
    for k in runs:
        print(f"{k:>20}: {' '.join(f'{x:.2f}' for x in runs[k])} GB/s (median {med[k]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
