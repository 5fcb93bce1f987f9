"""`specdec bench BENCH ...`: the benchmarks of this host, one subcommand each.

    specdec bench read [--json]     read paths: pread->heap, fresh buffer, arena (direct,
                                    buffered), mmap, against fio (specdec/bench/read.py)
    specdec bench overhead [--json] streamed decode vs mlx-lm's decode, host µs per MoE layer
                                    (specdec/bench/overhead.py)
    specdec bench device --out F    a device profile from microbenchmarks (specdec/bench/device.py)
    specdec bench speedup           speculative vs plain decoding in measured seconds, each run
                                    in lockstep with a plain run of its own; break-even α
                                    (specdec/bench/speedup.py)

Each bench's command line lives in the cli.py of the part that owns what it measures, named
as specdec/cli/__init__.py names commands (`specdec.cli.store:read` is `add_read_arguments(parser)` and
`run_read(args) -> int`); add a row to BENCHES to add one. Scripts in benchmarks/ call these and
write their JSON (with the machine it ran on) into benchmarks/results/.
"""

from __future__ import annotations

import argparse

from specdec.cli import command

BENCHES: dict[str, tuple[str, str]] = {
    "read": ("specdec.cli.store:read", "throughput of the read paths into MLX, vs fio"),
    "overhead": (
        "specdec.cli.model:overhead",
        "streamed vs resident decode speed, host µs per MoE layer",
    ),
    "device": (
        "specdec.cli.clock:device",
        "a roofline device profile of this machine from microbenchmarks",
    ),
    "speedup": (
        "specdec.cli.speedup",
        "speculative vs plain decoding in measured seconds, in lockstep; break-even α",
    ),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", required=True, metavar="BENCH")
    for name, (module, help_) in BENCHES.items():
        p = sub.add_parser(name, help=help_, description=help_)
        add_arguments, run_bench = command(module)
        p.set_defaults(_bench_run=run_bench)
        # imported only to declare options: the parts' cli.py keep their heavy imports lazy
        add_arguments(p)


def run(args: argparse.Namespace) -> int:
    return args._bench_run(args)
