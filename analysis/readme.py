"""Regenerate or check the README's tables: each one an analysis script makes sits between
`<!-- table: python -m analysis.NAME ARGS -->` and `<!-- /table -->`.

    python -m analysis.readme --check     # exit 1 if any table differs from what its script prints
    python -m analysis.readme --write     # rewrite those tables in place (atomically)
    python -m analysis.readme --check --only union_cost,scale

A table whose inputs are not on this machine (run directories are not in git: `runs/` is made by
the commands the README gives) is listed as not checked, with the script's one-line reason;
`--strict` makes that a failure too. This is what "the README's tables reproduce exactly" means:
the same run directories give the same bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from specdec.core.files import durable_replace

BEGIN = re.compile(r"^<!-- table: python -m analysis\.(\w+)(.*?) -->$")
END = "<!-- /table -->"


@dataclass(frozen=True)
class Block:
    """One generated table: its script, arguments and the line span of its body (end exclusive)."""

    script: str
    args: list[str]
    start: int
    end: int


def blocks(lines: list[str]) -> list[Block]:
    out, i = [], 0
    while i < len(lines):
        m = BEGIN.match(lines[i])
        if m:
            end = next((j for j in range(i + 1, len(lines)) if lines[j] == END), None)
            if end is None:
                raise SystemExit(f"README line {i + 1}: `{lines[i]}` has no `{END}` after it")
            out.append(Block(m[1], shlex.split(m[2]), i + 1, end))
            i = end
        i += 1
    return out


def run(block: Block) -> tuple[int, str, str]:
    """The script's exit status, stdout and stderr, run in this process as `python -m` would."""
    module = importlib.import_module(f"analysis.{block.script}")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = module.main(block.args)
    return status, out.getvalue(), err.getvalue()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="compare, change nothing")
    mode.add_argument("--write", action="store_true", help="rewrite the tables that differ")
    p.add_argument("--readme", type=Path, default=Path("README.md"))
    p.add_argument("--only", help="comma-separated script names (default: every table)")
    p.add_argument("--strict", action="store_true", help="a table not checked is a failure")
    args = p.parse_args(argv)
    lines = args.readme.read_text().splitlines()
    only = set(args.only.split(",")) if args.only else None
    differ, skipped, same = [], [], 0
    for b in reversed(blocks(lines)):  # from the end, so earlier spans stay valid while rewriting
        if only is not None and b.script not in only:
            continue
        status, out, err = run(b)
        label = f"{b.script} (README line {b.start})"
        if status != 0:
            reason = err.strip().splitlines()[-1] if err.strip() else f"exit {status}"
            skipped.append(f"{label}: {reason}")
            continue
        new = out.rstrip("\n").splitlines()
        if new == lines[b.start : b.end]:
            same += 1
            continue
        differ.append(label)
        lines[b.start : b.end] = new
    if args.write and differ:
        tmp = args.readme.with_name(f".{args.readme.name}.tmp")
        tmp.write_text("\n".join(lines) + "\n")
        durable_replace(tmp, args.readme)
    verb = "rewritten" if args.write else "differ"
    print(f"{same} tables reproduce, {len(differ)} {verb}, {len(skipped)} not checked")
    for line in differ:
        print(f"  {verb}: {line}")
    for line in skipped:
        print(f"  not checked: {line}")
    failed = (differ and args.check) or (skipped and args.strict)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
