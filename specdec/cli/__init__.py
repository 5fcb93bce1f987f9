"""The `specdec` command: one subcommand per job, each in the module that owns the job.

Run `specdec --help` for the list, `specdec SUBCOMMAND --help` for its options. Command-line
code lives in each part's cli.py: a target `specdec.PART.cli` exposes `add_arguments(parser)` and
`run(args) -> int`; `specdec.PART.cli:NAME`, one of several commands of that part, exposes
`add_NAME_arguments(parser)` and `run_NAME(args) -> int`. Only the chosen one is imported, so
`specdec simulate` never pays for loading MLX models.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

from specdec.core.blas import ensure_fast_blas
from specdec.core.errors import SpecdecError
from specdec.core.registry import load_plugins

COMMANDS: dict[str, tuple[str, str]] = {
    "generate": ("specdec.cli.generate", "generate text with routed experts streamed from disk"),
    "pack": ("specdec.cli.store:pack", "pack an mlx-lm model directory for streaming"),
    "verify": ("specdec.cli.store:verify", "check every expert block of a packed directory"),
    "make-random": ("specdec.cli.model:make_random", "write a tiny random-weight checkpoint"),
    "models": ("specdec.cli.model:models", "list the bundled models"),
    "extract-mtp": (
        "specdec.cli.model:extract_mtp",
        "take the MTP layer out of a DeepSeek-V3 HF checkpoint",
    ),
    "bench": (
        "specdec.cli.bench",
        "benchmarks: read paths (`bench read`), host overhead (`bench overhead`)",
    ),
    "trace": (
        "specdec.cli.trace",
        "routing traces: record, synth, stats, fit; ds4 hotlists",
    ),
    "simulate": (
        "specdec.cli.simulate",
        "replay a routing trace through cache policies and bounds",
    ),
    "union-model": (
        "specdec.cli.union_model",
        "fit union cost and speedup bounds from a union table",
    ),
    "probe": (
        "specdec.cli.probe",
        "the question's measurements: eviction, lookahead, gates, basis, read_path",
    ),
    "report": ("specdec.cli.report", "tables and plots from a run or sweep directory"),
    "clock": ("specdec.cli.clock", "device profiles: `clock show NAME`, `clock check`"),
}


def command(target: str) -> tuple[Callable[[argparse.ArgumentParser], None], Callable]:
    """(add_arguments, run) of a target `module` or `module:NAME` (see the top of this file)."""
    module_name, _, name = target.partition(":")
    module = importlib.import_module(module_name)
    if not name:
        return module.add_arguments, module.run
    return getattr(module, f"add_{name}_arguments"), getattr(module, f"run_{name}")


def _usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items())
    return f"usage: specdec SUBCOMMAND [options]\n\nsubcommands:\n{rows}\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        ensure_fast_blas()
        load_plugins()  # extensions from files outside the package (SPECDEC_PLUGINS)
    except SpecdecError as e:
        print(f"specdec: error: {e}", file=sys.stderr)
        return 2
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(
            f"specdec: error: unknown subcommand {name!r}: use one of {', '.join(COMMANDS)} "
            "(`specdec --help` says what each does)",
            file=sys.stderr,
        )
        return 2
    add_arguments, run = command(COMMANDS[name][0])
    parser = argparse.ArgumentParser(prog=f"specdec {name}", description=COMMANDS[name][1])
    add_arguments(parser)
    args = parser.parse_args(rest)
    try:
        return int(run(args) or 0)
    except SpecdecError as e:
        print(f"specdec: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specdec: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
