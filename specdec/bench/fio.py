"""fio as the read bench's peer, in its best configurations (used by `specdec bench read`).

Every configuration reads the same file with O_DIRECT random reads of whole blocks, no block
twice in a run (a time-based run loops over the file, and a host-side cache of a virtual disk
could serve the repeats), in an order drawn from the run's seed as our paths' are (fio's default
repeats one order every run: the same blocks each round, which such a cache could serve too),
with `threads` reads in flight:

    psync      numjobs = threads, each job on its own 1/threads slice (our thread pool's model)
    libaio     one job, iodepth = threads
    io_uring   one job, iodepth = threads

each with fio's default buffers (malloc, 4 KiB pages) and with huge-page buffers
(`--mem=shmhuge`, 2 MiB pages: the arena is backed by transparent huge pages, and O_DIRECT pins
every page of the buffer, so 4 KiB pages cost fio up to half its throughput here). shmhuge needs
reserved huge pages: `hugepages_short` says how many are missing
(`echo N > /proc/sys/vm/nr_hugepages` as root; `benchmarks/bench_read.py` does it for the run and
restores the old value). List them:
`python -c "from specdec.bench import fio as fiobench; print(fiobench.configs(8_000_000, (1, 8)))"`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from specdec.store.budget import meminfo

ENGINES = ("psync", "libaio", "io_uring")
MEMS = ("malloc", "shmhuge")
HUGE_PAGE = 2 << 20


@dataclass(frozen=True)
class FioConfig:
    engine: str
    threads: int  # reads in flight: numjobs for psync, iodepth for the async engines
    mem: str

    @property
    def name(self) -> str:
        return f"fio_{self.engine}_{self.mem}"


def available() -> bool:
    return shutil.which("fio") is not None


def version() -> str | None:
    if not available():
        return None
    return subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()


def hugepages_needed(block_bytes: int, threads: int) -> int:
    """2 MiB pages fio's shmhuge buffers take at this concurrency (one spare page per job)."""
    per_block = -(-block_bytes // HUGE_PAGE)
    return threads * per_block + threads + 1


def hugepages_free() -> int:
    return meminfo("HugePages_Free") or 0


def hugepages_short(block_bytes: int, threads: tuple[int, ...]) -> int:
    """How many more free huge pages shmhuge runs need (0: enough)."""
    return max(0, hugepages_needed(block_bytes, max(threads)) - hugepages_free())


def configs(block_bytes: int, threads: tuple[int, ...]) -> list[FioConfig]:
    """Every configuration this machine can run (shmhuge only with enough free huge pages)."""
    if not available():
        return []
    mems = MEMS if hugepages_short(block_bytes, threads) == 0 else MEMS[:1]
    return [FioConfig(e, t, m) for t in threads for e in ENGINES for m in mems]


def command(file: Path, block_bytes: int, cfg: FioConfig, n_reads: int, seed: int = 0) -> list[str]:
    """fio random O_DIRECT reads of n_reads distinct blocks, cfg.threads in flight, the order
    drawn from `seed`."""
    n_blocks = file.stat().st_size // block_bytes
    if cfg.engine == "psync":
        span = n_blocks // cfg.threads * block_bytes
        jobs = [f"--numjobs={cfg.threads}", f"--offset_increment={span}"]
        per_job = max(1, n_reads // cfg.threads) * block_bytes
    else:
        span, jobs, per_job = (
            n_blocks * block_bytes,
            [f"--iodepth={cfg.threads}"],
            n_reads * block_bytes,
        )
    return [
        "fio",
        "--name=randread",
        f"--filename={file}",
        "--rw=randread",
        f"--bs={block_bytes}",
        "--direct=1",
        f"--ioengine={cfg.engine}",
        f"--mem={cfg.mem}",
        *jobs,
        f"--size={span}",
        f"--io_size={per_job}",
        f"--randseed={seed}",
        "--group_reporting",
        "--output-format=json",
    ]


def run(file: Path, block_bytes: int, cfg: FioConfig, n_reads: int, seed: int = 0) -> float:
    """GB/s of one fio run (see `command`)."""
    cmd = command(file, block_bytes, cfg, n_reads, seed)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out[out.index("{") :])["jobs"][0]["read"]["bw_bytes"] / 1e9
