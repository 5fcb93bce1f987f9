"""Read-path benchmark at real block sizes, against fio's best configuration, interleaved.

Run from the repo root (about 4 minutes; needs `fio`: `apt-get install -y fio`):

    python benchmarks/bench_read.py [--block-bytes 1180000 8000000] [--rounds 5] [--dir DIR]

For each block size it runs `specdec bench read` (every read path, 1 and 8 threads, and fio with
psync / libaio / io_uring and 4 KiB-page or huge-page buffers, all shuffled together in every
round) and writes benchmarks/results/read.json (the first block size: the file `specdec probe
read_path` reads), read-<bytes>.json for the others, and read.md with our best direct path
against fio's best per block size; and, from the first block size's curve, this machine's device
profile `this-machine` ($SPECDEC_CACHE/profiles/this-machine.yaml; not with --no-profile). fio's huge-page
buffers need reserved huge pages: as root this script raises vm.nr_hugepages for the run and
restores it after; otherwise the JSON says how many were missing and fio runs on 4 KiB pages.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.bench import fio as fiobench
from specdec.bench import read as readbench  # noqa: E402
from specdec.cli.store import (  # noqa: E402
    add_read_arguments,
    read_bench_from_args,
    save_measured_profile,
)
from specdec.core.blas import ensure_fast_blas  # noqa: E402
from specdec.core.files import write_atomic  # noqa: E402
from specdec.core.machine import write_result  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
NR_HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")


@contextlib.contextmanager
def hugepages_for_fio(block_bytes: list[int], threads: tuple[int, ...]):
    """Reserve the huge pages fio's shmhuge buffers need (root only), restored afterwards."""
    short = max(fiobench.hugepages_short(b, threads) for b in block_bytes)
    old = int(NR_HUGEPAGES.read_text()) if NR_HUGEPAGES.exists() else None
    raised = False
    if short and old is not None and os.geteuid() == 0:
        NR_HUGEPAGES.write_text(f"{old + short}\n")
        raised = True
    try:
        yield
    finally:
        if raised:
            NR_HUGEPAGES.write_text(f"{old}\n")


def _write(name: str, text: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_atomic(RESULTS / name, text)


def _share(fraction: float | None) -> str:
    return "-" if fraction is None else f"{fraction:.0%}"


def markdown(results: list[dict], argv: list[str]) -> str:
    lines = [
        "# Read path vs fio's best (O_DIRECT random block reads, interleaved rounds)",
        "",
        "| block | ours best | GB/s | fio best | GB/s | ours / fio | per-round median "
        "| arena huge pages |",
        "|---:|---|---:|---|---:|---:|---:|---|",
    ]
    for r in results:
        b = r["checks"].get("best")
        if b:
            lines.append(
                f"| {r['block_bytes'] / 1e6:.2f} MB | {b['ours']} | {b['ours_gbps']:.2f} | "
                f"{b['fio']} | {b['fio_gbps']:.2f} | {b['ours_over_fio_best']:.2f} | "
                f"{b['per_round_ratio_median']:.2f} | {_share(r['arena_huge_pages'])} |"
            )
    m = results[0]["machine"]
    lines += [
        "",
        f"{results[0]['rounds']} rounds of {results[0]['bytes_per_run'] / 1e6:.0f} MB runs per "
        f"configuration; page cache dropped before every run; load average at the end "
        f"{m['loadavg_1_5_15']} (a shared machine). Full tables: read.json and read-*.json.",
        "",
        f"Command: `python benchmarks/bench_read.py {' '.join(argv)}`".rstrip() + "",
    ]
    for r in results:
        lines += ["", "```", readbench.format_table(r), "```"]
    return "\n".join(lines) + "\n"


def main() -> int:
    ensure_fast_blas()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_read_arguments(parser, block_sizes=(readbench.DEFAULT_BLOCK, 8_000_000))
    parser.set_defaults(rounds=5)
    args = parser.parse_args()
    if args.pack is not None:
        parser.error("--pack: this benchmark compares block sizes on test files; read a pack with "
                     "`specdec bench read --pack DIR`")  # fmt: skip
    sizes = list(args.block_bytes)
    results = []
    with hugepages_for_fio(sizes, tuple(args.threads)):
        for size in sizes:
            args.block_bytes = size
            result = read_bench_from_args(args)
            result["machine"]["bench_dir"] = "DIR"
            results.append(result)
            print(readbench.format_table(result), flush=True)
    places = {args.dir: "DIR"} if args.dir is not None else None  # results name no machine's paths
    RESULTS.mkdir(parents=True, exist_ok=True)
    for i, result in enumerate(results):
        name = "read.json" if i == 0 else f"read-{result['block_bytes']}.json"
        write_result(RESULTS / name, result, places)
    argv = sys.argv[1:]
    if args.dir is not None:  # results name no machine's paths
        argv = [a.replace(str(args.dir), "DIR") for a in argv]
    _write("read.md", markdown(results, argv))
    print(markdown(results, argv))
    save_measured_profile(results[0], args, "benchmarks/bench_read.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
