"""The `specdec` command: one subcommand per job, each in the module that owns the job.

Run `specdec --help` for the list, `specdec SUBCOMMAND --help` for its options. Each module
named below exposes `add_arguments(parser)` and `run(args) -> int`; only the chosen one is
imported, so `specdec simulate` never pays for loading MLX models.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from specdec.errors import SpecdecError
from specdec.host.blas import ensure_fast_blas

COMMANDS: dict[str, tuple[str, str]] = {
    "generate": ("specdec.decode.cli", "generate text with routed experts streamed from disk"),
    "pack": ("specdec.store.pack", "pack an mlx-lm model directory for streaming"),
    "verify": ("specdec.store.verify", "check every expert block of a packed directory"),
    "make-random": ("specdec.model.random_models", "write a tiny random-weight checkpoint"),
    "models": ("specdec.model.cli", "list the bundled models"),
    "extract-mtp": (
        "specdec.model.extract_mtp",
        "take the MTP layer out of a DeepSeek-V3 HF checkpoint",
    ),
    "bench": (
        "specdec.host.cli",
        "benchmarks: read paths (`bench read`), host overhead (`bench overhead`)",
    ),
    "trace": (
        "specdec.trace.cli",
        "routing traces: record, synth, stats, fit; ds4 hotlists",
    ),
    "simulate": (
        "specdec.cache.simulate",
        "replay a routing trace through cache policies and bounds",
    ),
    "union-model": (
        "specdec.costmodel.cli",
        "fit union cost and speedup bounds from a union table",
    ),
    "probe": (
        "specdec.probes.cli",
        "the question's measurements: eviction, lookahead, gates, basis, read_path",
    ),
    "report": ("specdec.report.cli", "tables and plots from a run or sweep directory"),
    "clock": ("specdec.clock.cli", "device profiles: `clock show NAME`, `clock check`"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items())
    return f"usage: specdec SUBCOMMAND [options]\n\nsubcommands:\n{rows}\n"


def main(argv: list[str] | None = None) -> int:
    ensure_fast_blas()
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"specdec: error: unknown subcommand {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    parser = argparse.ArgumentParser(prog=f"specdec {name}", description=COMMANDS[name][1])
    module.add_arguments(parser)
    args = parser.parse_args(rest)
    try:
        return int(module.run(args) or 0)
    except SpecdecError as e:
        print(f"specdec: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specdec: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
