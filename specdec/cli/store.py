"""The store's commands: `specdec pack`, `specdec verify` and `specdec bench read`.

    specdec pack MODEL_DIR OUT_DIR [--force] [--cold-bits 2 --hotlist hot.txt]
    specdec verify PACKED_DIR [--io direct]
    specdec bench read [--json] [--no-profile]   # also writes this machine's device profile

What each does: specdec.pack.pack (the packed layout: store/layout.py), specdec.pack.verify,
specdec.bench.read. Each command is a pair `add_NAME_arguments(parser)`, `run_NAME(args)`
(specdec/cli/__init__.py and host/cli.py name them `specdec.cli.store:NAME`); the read bench imports MLX,
so it is imported only for `bench read`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from specdec.cli import output_path
from specdec.core.errors import StoreError
from specdec.store.layout import EXPERTS_BIN, ExpertIndex
from specdec.store.reader import IO_MODES


def add_pack_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model_dir", type=Path, help="mlx-lm model directory")
    parser.add_argument("out_dir", type=output_path, help="packed directory to write")
    parser.add_argument(
        "--force", action="store_true", help="replace an existing pack (never other folders)"
    )
    parser.add_argument(
        "--cold-bits",
        type=int,
        help="requantize experts not in --hotlist to this many bits (MLX affine, group 64)",
    )
    parser.add_argument(
        "--hotlist", type=Path, help="a ds4 hotlist: the experts that keep their precision"
    )
    parser.add_argument(
        "--hot-access-share",
        type=float,
        help="share of routed accesses the hotlist's experts took (splits budgets by it)",
    )


def run_pack(args: argparse.Namespace) -> int:
    from specdec.pack.pack import pack  # here: it imports mlx-lm (seconds; --help)

    hot = None
    if args.hotlist is not None:
        from specdec.trace.format import read_hotlist

        hot = [(e.layer, e.expert) for e in read_hotlist(args.hotlist)]
    out = pack(
        args.model_dir,
        args.out_dir,
        args.force,
        cold_bits=args.cold_bits,
        hotlist=hot,
        hot_access_share=args.hot_access_share,
    )
    index = ExpertIndex.load(out)
    size = (out / EXPERTS_BIN).stat().st_size
    cold = sum(int(ly.is_cold.sum()) for ly in index.layers.values() if ly.cold is not None)
    mixed = f", {cold} of them {args.cold_bits}-bit cold" if cold else ""
    print(
        f"packed {args.model_dir} -> {out}: {index.n_blocks} expert blocks in "
        f"{len(index.layers)} layers{mixed}, {size / 1e6:.1f} MB experts.bin, "
        f"slot {index.slot_bytes} B"
    )
    return 0


def add_verify_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("packed_dir", type=Path, help="directory written by `specdec pack`")
    parser.add_argument("--io", choices=IO_MODES, default="direct", help="how blocks are read")


def run_verify(args: argparse.Namespace) -> int:
    from specdec.pack.verify import verify  # here: it imports mlx-lm (seconds; --help)

    r = verify(args.packed_dir, io=args.io)
    print(
        f"ok: {args.packed_dir}: {r.blocks} expert blocks in {r.layers} layers "
        f"({r.expert_bytes / 1e6:.1f} MB) match their checksums; "
        f"{r.resident_tensors} resident tensors"
    )
    return 0


def add_read_arguments(parser: argparse.ArgumentParser, block_sizes: tuple[int, ...] = ()) -> None:
    """The read bench's options; with block_sizes, --block-bytes takes several (these by
    default)."""
    from specdec.bench.read import DEFAULT_BLOCK, DEFAULT_FILE, DEFAULT_RUN, PATHS

    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--dir", type=Path, default=None, help="where the test file goes")
    if block_sizes:
        parser.add_argument(
            "--block-bytes", type=int, nargs="+", default=list(block_sizes), help="block sizes"
        )
    else:
        parser.add_argument(
            "--block-bytes", type=int, help=f"bytes per read (one expert; {DEFAULT_BLOCK})"
        )
    parser.add_argument("--file-bytes", type=int, help=f"test file size ({DEFAULT_FILE})")
    parser.add_argument(
        "--pack",
        type=Path,
        help="read this packed model's expert blocks in place, not a test file (their size and "
        "file are the pack's: no --dir, --block-bytes, --file-bytes)",
    )
    parser.add_argument(
        "--threads", type=int, nargs="+", default=[1, 8], help="reader thread counts to run"
    )
    parser.add_argument("--rounds", type=int, default=10, help="timed runs of each path")
    parser.add_argument("--run-bytes", type=int, default=DEFAULT_RUN, help="bytes per run")
    parser.add_argument(
        "--paths",
        nargs="+",
        choices=list(PATHS),
        help="paths to run (default: every one this backend can: the pinned path on CUDA only)",
    )
    parser.add_argument(
        "--no-profile",
        action="store_true",
        help="don't write this machine's device profile (this-machine) from the measured curve",
    )


def read_bench_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """`bench_read` with the options `add_read_arguments` declared."""
    from specdec.bench.read import DEFAULT_BLOCK, DEFAULT_FILE, bench_read

    if args.pack is not None:
        refuse_beside_pack("--pack", args, ("dir", "block_bytes", "file_bytes"))
    args.block_bytes = DEFAULT_BLOCK if args.block_bytes is None else args.block_bytes
    args.file_bytes = DEFAULT_FILE if args.file_bytes is None else args.file_bytes
    check_counts(args, ("block_bytes", "file_bytes", "rounds", "run_bytes", "threads"))
    return bench_read(
        args.dir,
        args.block_bytes,
        args.file_bytes,
        tuple(args.threads),
        args.rounds,
        args.run_bytes,
        tuple(args.paths) if args.paths else None,
        args.pack,
    )


def check_counts(args: argparse.Namespace, names: tuple[str, ...]) -> None:
    """Options that count something (bytes, threads, rounds; a list: each), at least 1 where
    given: checked before a bench starts, not found minutes in as a division by zero."""
    for name in names:
        value = getattr(args, name)
        for v in value if isinstance(value, list) else [value]:
            if v is not None and v < 1:
                raise StoreError(f"--{name.replace('_', '-')} {v}: give at least 1")


def refuse_beside_pack(pack: str, args: argparse.Namespace, test_file: tuple[str, ...]) -> None:
    """A read of a pack in place takes its blocks' size and file from the pack: the test
    file's options, given beside it, would be ignored silently; refuse them by name."""
    given = ["--" + name.replace("_", "-") for name in test_file if getattr(args, name) is not None]
    if given:
        raise StoreError(
            f"{pack} reads the pack's own blocks in place, so {' and '.join(given)} "
            f"(a test file's) would be ignored: drop {'them' if len(given) > 1 else 'it'}, "
            f"or drop {pack}"
        )


def run_read(args: argparse.Namespace) -> int:
    from specdec.bench.read import format_table

    result = read_bench_from_args(args)
    print(json.dumps(result, indent=1) if args.json else format_table(result))
    save_measured_profile(result, args, "specdec bench read")
    return 0


def save_measured_profile(result: dict[str, Any], args: argparse.Namespace, what: str) -> None:
    """Write `this-machine` from a read bench result (unless --no-profile), with a note."""
    from specdec.bench.read import write_measured_profile

    if args.no_profile:
        return
    if not any(not p["page_cache"] for p in result["paths"]):
        print(
            "specdec: note: no page-cache-bypassing path ran: this-machine's profile not written",
            file=sys.stderr,
        )
        return
    path = write_measured_profile(result, what)
    print(
        f"specdec: note: wrote this machine's device profile to {path} "
        "(`specdec clock show this-machine`)",
        file=sys.stderr,
    )
