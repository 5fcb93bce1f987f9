"""`specdec clock`: show a device profile, or check it against the seed question's own runs.

specdec clock show m4-24gb              # every field with its source
specdec clock check --profile m4-24gb   # the question's M4 runs, modeled vs measured
specdec bench device --out dev.yaml     # this machine's profile, from microbenchmarks
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specdec.cli import output_path
from specdec.clock.check import MINIMAX_M25, QUESTION_RUNS, TOLERANCE, reproduce
from specdec.clock.profiles import BUILTIN_NAMES, DEFAULT_PROFILE, get_profile
from specdec.clock.shapes import ModelShape


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True)
    show = sub.add_parser("show", help="a profile's fields and their sources")
    show.add_argument("profile", help=f"one of {', '.join(BUILTIN_NAMES)} or a .yaml/.json file")
    check = sub.add_parser("check", help="the seed question's M4 runs, modeled vs measured")
    check.add_argument("--profile", default=DEFAULT_PROFILE, help="the profile to model them on")


def run(args: argparse.Namespace) -> int:
    profile = get_profile(args.profile)
    if args.action == "show":
        print(f"{profile.name}: {profile.description}")
        for name, value in vars(profile).items():
            if name not in ("name", "description", "sources"):
                src = profile.sources.get(name, "")
                print(f"  {name} = {value}" + (f"\n      {src}" if src else ""))
        return 0
    print(f"MiniMax-M2.5 4-bit on {profile.name}, one expert block {MINIMAX_BLOCK:,} B")
    print(
        "| run | misses/token | GB/token | compute | router syncs | reads | modeled t/s "
        "| measured t/s | modeled/measured |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    worst = 0.0
    for r, t in reproduce(profile):
        ratio = 1 / t.total_s / r.measured_tps
        if r.checked:
            worst = max(worst, abs(ratio - 1))
        print(
            f"| {r.label} | {t.reads} | {t.bytes_read / 1e9:.2f} | {t.compute_s * 1e3:.0f} ms | "
            f"{t.sync_s * 1e3:.0f} ms | {t.read_s * 1e3:.0f} ms | {1 / t.total_s:.2f} | "
            f"{r.measured_tps:.2f} | {ratio:.2f}{'' if r.checked else ' (not checked)'} |"
        )
    for r in QUESTION_RUNS:
        print(f"- {r.label}: {r.source}")
    print(f"worst deviation {worst:.0%} (tolerance {TOLERANCE:.0%})")
    return 0 if worst <= TOLERANCE else 1


# one MiniMax-M2.5 expert block (4-bit): the device bench's default read, from a 4 GiB test file
MINIMAX_BLOCK = int(ModelShape.from_config(MINIMAX_M25).expert_block_bytes)
READ_FILE = 4 << 30


def add_device_arguments(p: argparse.ArgumentParser) -> None:
    from specdec.checkpoint.bundled import DEFAULT_MODEL

    p.add_argument("--out", type=output_path, required=True, help="the profile YAML to write")
    p.add_argument("--name", help="the profile's name (default: the file's stem)")
    p.add_argument("--model", default=DEFAULT_MODEL, help="checkpoint whose MoE layers are timed")
    p.add_argument("--dir", type=Path, default=Path.cwd(), help="where the read bench's file goes")
    p.add_argument("--block-bytes", type=int, help=f"expert block to read ({MINIMAX_BLOCK})")
    p.add_argument(
        "--threads", type=int, nargs="+", default=[1, 2, 4, 8, 16], help="reader thread counts"
    )
    p.add_argument("--hidden", type=int, default=3072, help="expert kernel: model width")
    p.add_argument("--inter", type=int, default=1536, help="expert kernel: expert width")
    p.add_argument("--file-bytes", type=int, help=f"the read bench's file ({READ_FILE})")
    p.add_argument(
        "--read-pack",
        type=Path,
        help="the read curve from this packed model's expert blocks, read in place (the blocks "
        "the profiled runs read), instead of a test file in --dir",
    )
    p.add_argument("--details", type=output_path, help="write every measurement here (JSON)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --out and --details where they exist (only files this command wrote)",
    )


WRITTEN_BY = "written by `specdec bench device`"  # the first line of every profile it writes


def _is_ours(path: Path) -> bool:
    """Whether `path` is a profile (its first line) or details file (its first key) that
    `specdec bench device` wrote."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096).decode("utf-8", "replace")
    except OSError:
        return False
    if path.suffix == ".json":
        return f'"written_by": "{WRITTEN_BY}"' in head
    return head.split("\n", 1)[0].endswith(WRITTEN_BY)


def check_device_args(args: argparse.Namespace) -> None:
    """Every option checked before the minutes of benchmarks run: the outputs (never a file
    this command did not write; their folders writable), the sizes, --dir and the model."""
    from specdec.bench.read import check_bench_dir
    from specdec.cli.store import check_counts, refuse_beside_pack
    from specdec.core.files import check_output_dir, check_output_file
    from specdec.stream.loader import resolve

    for path in (args.out, args.details):
        if path is not None:
            check_output_file(
                path, "`specdec bench device`", args.overwrite, "--overwrite", _is_ours
            )
            check_output_dir(path)
    if args.read_pack is not None:
        refuse_beside_pack("--read-pack", args, ("block_bytes", "file_bytes"))
    check_bench_dir(args.dir)  # the landing and latency benches write there, a pack read or not
    check_counts(args, ("block_bytes", "file_bytes", "hidden", "inter", "threads"))
    resolve(args.model)  # a model that is not there fails now, not after the benches


def run_device(args: argparse.Namespace) -> int:
    import json

    from specdec.bench.device import device_profile
    from specdec.clock.profiles import profile_yaml
    from specdec.core.files import write_atomic
    from specdec.core.machine import home_as_tilde

    check_device_args(args)
    name = args.name or args.out.stem
    profile, details = device_profile(
        name, args.model, args.dir,
        MINIMAX_BLOCK if args.block_bytes is None else args.block_bytes, tuple(args.threads),
        args.hidden, args.inter, READ_FILE if args.file_bytes is None else args.file_bytes,
        args.read_pack,
    )  # fmt: skip
    # the profile travels (--profile on another machine): it names no one's home
    text = profile_yaml(profile, f"{name}: {WRITTEN_BY}")
    write_atomic(args.out, home_as_tilde(text))
    if args.details:
        details = {"written_by": WRITTEN_BY, **details}
        write_atomic(args.details, home_as_tilde(json.dumps(details, indent=1, default=str) + "\n"))
    print(f"wrote {args.out}: `specdec clock show {args.out}`")
    return 0
