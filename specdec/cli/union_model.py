"""`specdec union-model`: from a union table to cost, ceiling, break-even and best γ per α.

    specdec union-model --union 1:8,2:13.42,3:17.99,8:35.01 --k 8 --alpha 0.8,0.9,1.0
    specdec union-model --union 1:8,2:13.42,3:17.99,8:35.01 --alpha 0.8,0.9 --gammas 1,2,3,4,8 --json
    specdec union-model --union ... --alpha ... --plot /tmp/plots   # two PNGs

With --json the last stdout line is one JSON object (schema in specdec.costmodel.model). All
numbers are options, parsed here so that bad input is a one-line SpecdecError (exit 2).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from specdec.core.errors import SpecdecError
from specdec.core.files import claim_dir
from specdec.costmodel.model import FILLS, build_union_model, format_text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--union",
        required=True,
        help="measured mean union per γ, e.g. 1:8,2:13.42,3:17.99,8:35.01",
    )
    parser.add_argument("--k", help="experts per token (default: the union at γ=1)")
    parser.add_argument("--alpha", default="0.8,0.9,1.0", help="acceptances, e.g. 0.8,0.9,1.0")
    parser.add_argument("--gammas", help="γ to tabulate (default: the table's); others use --fill")
    parser.add_argument(
        "--fill", default="linear", choices=FILLS, help="fit giving the union at unmeasured γ"
    )
    parser.add_argument("--n-experts", help="routed experts per layer N: bounds the overlap model")
    parser.add_argument("--rho", help="measured overlap between consecutive tokens' top-k, 0..1")
    parser.add_argument(
        "--draft-cost", default="0", help="drafter cost per drafted token, in plain passes"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--plot",
        metavar="DIR",
        help="write speedup_vs_acceptance.png and union_vs_gamma.png into DIR",
    )


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SpecdecError(f"{what} {text!r} is not a number: write e.g. 0.9") from None
    if not math.isfinite(value):
        raise SpecdecError(f"{what} must be finite, got {text!r}")
    return value


def _integer(text: str, what: str) -> int:
    value = _number(text, what)
    if value != int(value):
        raise SpecdecError(f"{what} must be a whole number, got {text!r}")
    return int(value)


def _list(text: str, what: str) -> list[str]:
    items = [t.strip() for t in text.split(",")]
    if not all(items):
        raise SpecdecError(f"{what} {text!r} has an empty entry: write comma-separated values")
    return items


def parse_union(text: str) -> dict[int, float]:
    """'1:8,2:13.42' -> {1: 8.0, 2: 13.42}; SpecdecError naming the bad pair."""
    table: dict[int, float] = {}
    for pair in _list(text, "--union"):
        parts = pair.split(":")
        if len(parts) != 2:
            raise SpecdecError(f"--union entry {pair!r} is not γ:union: write e.g. 2:13.42")
        gamma = _integer(parts[0], f"γ in --union entry {pair!r}")
        if gamma < 1:
            raise SpecdecError(
                f"--union entry {pair!r}: γ is {gamma}, and a verify pass has at least one "
                "position (γ = 1 is plain decoding): give γ >= 1"
            )
        if gamma in table:
            raise SpecdecError(f"--union gives γ={gamma} twice: keep one value per γ")
        table[gamma] = _number(parts[1], f"union in --union entry {pair!r}")
    return table


def check_growth(table: dict[int, float], k: float | None) -> None:
    """A union table that cannot be a union: U(1) below k, U shrinking as γ grows, or above γ·k.

    The union of more positions' experts holds the union of fewer, so measured means of one
    model grow with γ; a table that shrinks is mistyped or mixes models.
    """
    if k is not None and 1 in table and k > table[1]:
        raise SpecdecError(
            f"--k {k:g} exceeds the union at γ=1 ({table[1]:g}): one position reads its k "
            "experts, so U(1) = k; drop --k or fix the table"
        )
    gammas = sorted(table)
    for lo, hi in zip(gammas, gammas[1:], strict=False):
        if table[hi] < table[lo]:
            raise SpecdecError(
                f"--union shrinks from {table[lo]:g} at γ={lo} to {table[hi]:g} at γ={hi}: a "
                "union of more positions holds the smaller one's experts; fix the table"
            )
    base = k if k is not None else table.get(1)
    for g in gammas:
        if base is not None and table[g] > g * base * (1 + 1e-9):
            raise SpecdecError(
                f"--union at γ={g} is {table[g]:g}, above γ·k = {g * base:g}: γ positions read "
                "at most γ·k experts; fix the table or --k"
            )


def _write_plots(model, where: str, to_stderr: bool) -> None:
    from specdec.costmodel.plots import plot_speedup_vs_acceptance, plot_union_vs_gamma

    fits = [f for f in (model.linear, model.power, model.overlap, model.overlap_measured) if f]
    names = ("speedup_vs_acceptance.png", "union_vs_gamma.png")
    # a folder of ours, a new one, or new files beside a user's (specdec.core.files: output rule)
    out = claim_dir(
        where,
        "plots",
        "`specdec union-model --plot`",
        "give --plot a new or empty directory (or one it wrote)",
        names=names,
    )
    try:
        written = [
            plot_speedup_vs_acceptance([], model.cost_by_gamma, out / names[0], model.draft_cost),
            plot_union_vs_gamma(model.linear.table, fits, out / names[1]),
        ]
    except OSError as e:
        raise SpecdecError(
            f"--plot {where}: cannot write the plots there ({e.strerror or e}); give a writable "
            "directory"
        ) from None
    for path in written:
        print(f"wrote {path}", file=sys.stderr if to_stderr else sys.stdout)


def run(args: argparse.Namespace) -> int:
    table = parse_union(args.union)
    k = None if args.k is None else _number(args.k, "--k")
    check_growth(table, k)
    model = build_union_model(
        table,
        alphas=[_number(a, "--alpha") for a in _list(args.alpha, "--alpha")],
        k=k,
        gammas=None
        if args.gammas is None
        else [_integer(g, "--gammas") for g in _list(args.gammas, "--gammas")],
        fill=args.fill,
        n_experts=None if args.n_experts is None else _integer(args.n_experts, "--n-experts"),
        rho=None if args.rho is None else _number(args.rho, "--rho"),
        draft_cost=_number(args.draft_cost, "--draft-cost"),
    )
    if args.plot:
        _write_plots(model, args.plot, args.json)
    print(json.dumps(model.to_dict()) if args.json else format_text(model))
    return 0
