"""The model part's commands: `specdec models`, `make-random`, `extract-mtp`, `bench overhead`.

    specdec models [--json]                        # the bundled models, name and path
    specdec make-random qwen3_moe /tmp/q [--quantize 4] [--dtype bfloat16] [--like PRESET --layers 4]
    specdec extract-mtp ~/hf/DeepSeek-V3 ~/mlx/DeepSeek-V3-4bit [--quantize 4]
    specdec bench overhead --model tiny --tokens 128 --pairs 7 --json

What each does: specdec.checkpoint.bundled, random_models (random_scale for --like), extract_mtp,
overhead. Each command is a pair `add_NAME_arguments(parser)`, `run_NAME(args)` (specdec/cli/__init__.py
and host/cli.py name them `specdec.cli.model:NAME`); the library modules load MLX, so each is
imported only by the command that runs it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specdec.checkpoint.bundled import BUNDLED, DEFAULT_MODEL
from specdec.checkpoint.families import TINY_FAMILIES as FAMILIES
from specdec.cli import output_path
from specdec.core.errors import SpecdecError
from specdec.core.seed import check_seed


def add_models_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print {name: path} as JSON")


def run_models(args: argparse.Namespace) -> int:
    models = {name: str(path) for name, path in BUNDLED.items()}
    if args.json:
        print(json.dumps(models))
    else:
        for name, path in models.items():
            print(f"{name}\t{path}")
    return 0


def add_make_random_arguments(parser: argparse.ArgumentParser) -> None:
    from specdec.checkpoint.presets import PRESETS
    from specdec.checkpoint.random_models import DTYPES

    parser.add_argument("family", nargs="?", help=f"one of: {', '.join(sorted(FAMILIES))}")
    parser.add_argument("out_dir", type=output_path, help="the mlx-lm model directory to write")
    parser.add_argument(
        "--quantize",
        type=int,
        metavar="BITS",
        default=None,
        help="affine-quantize to BITS like mlx_lm.convert -q (FAMILY default: float32; "
        "--like default: 4)",
    )
    parser.add_argument(
        "--dtype",
        choices=DTYPES,
        help="FAMILY: the float parameters' dtype, so the activations' (default: float32; "
        "--like is bfloat16, as real checkpoints)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    parser.add_argument(
        "--force", action="store_true", help="replace a checkpoint make-random wrote there"
    )
    parser.add_argument(
        "--like", metavar="PRESET", help=f"real dimensions of: {', '.join(sorted(PRESETS))}"
    )
    parser.add_argument("--layers", type=int, help="with --like: layers (default: the model's)")
    parser.add_argument("--experts", type=int, help="with --like: routed experts per layer")


def run_make_random(args: argparse.Namespace) -> int:
    check_seed(args.seed)
    if args.like:
        from specdec.checkpoint.random_scale import make_like

        if args.family:
            raise SpecdecError("give either FAMILY or --like PRESET, not both")
        if args.dtype:
            raise SpecdecError(
                "--dtype goes with FAMILY; a --like checkpoint is bfloat16, as the real one: "
                "drop --dtype"
            )
        bits = 4 if args.quantize is None else args.quantize
        out = make_like(
            args.like, args.out_dir, args.layers, args.experts, bits, args.seed, force=args.force
        )
        print(f"wrote {args.like}-shaped random checkpoint ({bits}-bit) to {out}")
        return 0
    if not args.family:
        raise SpecdecError("give a FAMILY (tiny checkpoint) or --like PRESET (real dimensions)")
    given = [
        f for f, v in (("--layers", args.layers), ("--experts", args.experts)) if v is not None
    ]
    if given:  # a FAMILY checkpoint has its family's fixed tiny shape: it would be ignored
        raise SpecdecError(
            f"{' and '.join(given)} {'go' if len(given) > 1 else 'goes'} with --like PRESET (real dimensions); a {args.family} "
            "checkpoint has the family's fixed tiny shape: drop them, or use --like"
        )
    from specdec.checkpoint.random_models import make_random

    dtype = args.dtype or "float32"
    out = make_random(args.family, args.out_dir, args.quantize, args.seed, args.force, dtype=dtype)
    kind = dtype if args.quantize is None else f"{args.quantize}-bit, {dtype}"
    print(f"wrote {args.family} ({kind}) to {out}")
    return 0


def add_extract_mtp_arguments(p: argparse.ArgumentParser) -> None:
    from specdec.checkpoint.families import FAMILIES

    layouts = ", ".join(sorted(n for n, f in FAMILIES.items() if f.mtp))
    p.add_argument(
        "hf_dir", type=Path, help=f"Hugging Face checkpoint whose model_type is one of: {layouts}"
    )
    p.add_argument(
        "out_dir", type=output_path, help="the mlx-lm model directory to add mtp.safetensors to"
    )
    p.add_argument("--quantize", type=int, choices=[2, 3, 4, 6, 8], help="affine bits")
    p.add_argument("--group-size", type=int, default=64, help="--quantize's group size")
    p.add_argument("--force", action="store_true", help="replace an existing mtp.safetensors")


def run_extract_mtp(args: argparse.Namespace) -> int:
    from specdec.checkpoint.extract_mtp import extract_mtp

    path = extract_mtp(args.hf_dir, args.out_dir, args.quantize, args.group_size, args.force)
    print(f"wrote {path}")
    return 0


def add_overhead_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL, help="bundled name, mlx-lm or packed dir")
    p.add_argument("--tokens", type=int, default=128, help="tokens decoded per run")
    p.add_argument("--pairs", type=int, default=7, help="interleaved pairs (fresh processes)")
    p.add_argument("--repeats", type=int, help="in-process repeats (default: --pairs)")
    p.add_argument("--lookahead-budget", default="50%", help="budget of the lookahead split")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run_overhead(args: argparse.Namespace) -> int:
    from specdec.bench.overhead import measure_overhead
    from specdec.core.units import Budget

    for flag, n in (
        ("--tokens", args.tokens),
        ("--pairs", args.pairs),
        ("--repeats", args.repeats),
    ):
        if n is not None and n < 1:  # checked here, not by a failing child process
            raise SpecdecError(f"{flag} {n}: give at least 1")
    Budget.parse(args.lookahead_budget)
    r = measure_overhead(args.model, args.tokens, args.pairs, args.lookahead_budget, args.repeats)
    if args.json:
        print(json.dumps(r))
        return 0
    c, ip = r["cli"], r["in_process"]
    full = ip["host_us_per_moe_layer"]["full_budget"]
    print(
        f"{r['model']}: fresh processes, median of {len(c['ratio']['all'])} pairs: specdec "
        f"{c['specdec_tokens_per_s']['median']:.1f} tok/s, mlx-lm "
        f"{c['mlx_lm_tokens_per_s']['median']:.1f} tok/s, x{c['ratio']['median']:.2f} "
        f"(range {c['ratio']['min']:.2f}-{c['ratio']['max']:.2f}); warm in process "
        f"x{ip['ratio']:.2f}; host +{ip['added_cpu_us_per_moe_layer']['median']:.0f} µs CPU per "
        f"MoE layer all in, {full['added_cpu']:.0f} µs in the blocks"
    )
    return 0
