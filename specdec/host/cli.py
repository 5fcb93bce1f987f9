"""`specdec bench BENCH ...`: the benchmarks of this host, one subcommand each.

    specdec bench read [--json]     read paths: pread->heap, fresh buffer, arena (direct,
                                    buffered), mmap, against fio (specdec/store/readbench.py)
    specdec bench overhead [--json] streamed decode vs mlx-lm's decode, host µs per MoE layer
                                    (specdec/model/overhead.py)

Each bench lives in the module that owns what it measures and exposes `add_arguments(parser)`
and `run(args) -> int`; add a row to BENCHES to add one. Scripts in benchmarks/ call these and
write their JSON (with the machine it ran on) into benchmarks/results/.
"""

from __future__ import annotations

import argparse
import importlib

BENCHES: dict[str, tuple[str, str]] = {
    "read": ("specdec.store.readbench", "throughput of the read paths into MLX, vs fio"),
    "overhead": (
        "specdec.model.overhead",
        "streamed vs resident decode speed, host µs per MoE layer",
    ),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", required=True, metavar="BENCH")
    for name, (module, help_) in BENCHES.items():
        p = sub.add_parser(name, help=help_, description=help_)
        p.set_defaults(_bench_module=module)
        # imported only to declare options: bench modules keep their heavy imports lazy or cheap
        importlib.import_module(module).add_arguments(p)


def run(args: argparse.Namespace) -> int:
    return importlib.import_module(args._bench_module).run(args)
