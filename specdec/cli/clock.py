"""`specdec clock`: show a device profile, or check it against the seed question's own runs.

specdec clock show m4-24gb              # every field with its source
specdec clock check --profile m4-24gb   # the question's M4 runs, modeled vs measured
"""

from __future__ import annotations

import argparse

from specdec.clock.check import MINIMAX_M25, QUESTION_RUNS, TOLERANCE, reproduce
from specdec.clock.profiles import BUILTIN_NAMES, DEFAULT_PROFILE, get_profile
from specdec.clock.shapes import ModelShape


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True)
    show = sub.add_parser("show", help="a profile's fields and their sources")
    show.add_argument("profile", help=f"one of {', '.join(BUILTIN_NAMES)} or a .yaml/.json file")
    check = sub.add_parser("check", help="the seed question's M4 runs, modeled vs measured")
    check.add_argument("--profile", default=DEFAULT_PROFILE)


def run(args: argparse.Namespace) -> int:
    profile = get_profile(args.profile)
    if args.action == "show":
        print(f"{profile.name}: {profile.description}")
        for name, value in vars(profile).items():
            if name not in ("name", "description", "sources"):
                src = profile.sources.get(name, "")
                print(f"  {name} = {value}" + (f"\n      {src}" if src else ""))
        return 0
    block = ModelShape.from_config(MINIMAX_M25).expert_block_bytes
    print(f"MiniMax-M2.5 4-bit on {profile.name}, one expert block {block:,.0f} B")
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
