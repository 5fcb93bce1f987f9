"""Regenerate or check the tables of the README and docs/: each one an analysis script makes sits
between `<!-- table: python -m analysis.NAME ARGS -->` and `<!-- /table -->`.

    python -m analysis.readme --check     # exit 1 if any table differs from what its script prints
    python -m analysis.readme --write     # rewrite those tables in place (atomically)
    python -m analysis.readme --check --only union_cost,scale
    python -m analysis.readme --check --readme docs/results/caching.md    # these files only

The files: every Markdown file of the checkout (tracked by git, or new and not ignored) that holds
such a marker: README.md and docs/**/*.md today; outside a git checkout, every .md under --root.
A script runs in this process as `python -m` would, from the current directory, so the paths in
a marker are relative to the repository root.

A table whose inputs are not on this machine (run directories are not in git: `runs/` is made by
the commands written beside each table) is listed as "not checked (input missing)", with the path
that is missing and the script's one-line reason; `--strict` makes that a failure too. A script
that fails although every path it names exists is a failure. This is what "the tables reproduce
exactly" means: the same inputs give the same bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from specdec.core.files import durable_replace
from specdec.core.progress import progress

BEGIN = re.compile(r"^<!-- table: python -m analysis\.(\w+)(.*?) -->$")
END = "<!-- /table -->"
MARK = "<!-- table: python -m analysis."
SKIP_DIRS = {".venv", "runs", "node_modules", "__pycache__"}  # walked only outside git


@dataclass(frozen=True)
class Block:
    """One generated table: its script, arguments and the line span of its body (end exclusive)."""

    script: str
    args: list[str]
    start: int
    end: int


def blocks(lines: list[str], where: str = "README") -> list[Block]:
    out, i = [], 0
    while i < len(lines):
        m = BEGIN.match(lines[i])
        if m:
            end = next((j for j in range(i + 1, len(lines)) if lines[j] == END), None)
            if end is None:
                raise SystemExit(f"{where} line {i + 1}: `{lines[i]}` has no `{END}` after it")
            out.append(Block(m[1], shlex.split(m[2]), i + 1, end))
            i = end
        i += 1
    return out


def markdown_files(root: Path) -> list[Path]:
    """The .md files under `root` git tracks or would track (untracked, not ignored); every .md
    under it, hidden and SKIP_DIRS folders aside, where `root` is not in a git checkout."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
             "--exclude-standard", "--", "*.md"],
            capture_output=True, check=True, text=True,
        ).stdout  # fmt: skip
        found = [root / name for name in listed.split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        found = []
        for top, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
            found += [Path(top) / n for n in names if n.endswith(".md")]
    return sorted({p for p in found if p.is_file()})


def with_tables(files: list[Path]) -> list[Path]:
    """The files that hold at least one table marker, shallowest first (README.md, docs/...)."""
    have = [p for p in files if any(line.startswith(MARK) for line in p.read_text().splitlines())]
    return sorted(have, key=lambda p: (len(p.parts), str(p)))


def run(block: Block) -> tuple[int, str, str]:
    """The script's exit status, stdout and stderr, run in this process as `python -m` would."""
    module = importlib.import_module(f"analysis.{block.script}")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = module.main(block.args)
        except SystemExit as e:  # argparse refusing the marker's arguments
            status = e.code if isinstance(e.code, int) else 2
        except Exception as e:  # a bug in the script: reported as a failure, the rest still run
            print(f"{type(e).__name__}: {e}", file=sys.stderr)
            status = 1
    return status, out.getvalue(), err.getvalue()


def missing_inputs(block: Block) -> list[str]:
    """The paths a marker names (arguments with a `/` that are not options) that do not exist."""
    return [a for a in block.args if not a.startswith("-") and "/" in a and not Path(a).exists()]


def _shown(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    return str(path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="compare, change nothing")
    mode.add_argument("--write", action="store_true", help="rewrite the tables that differ")
    p.add_argument(
        "--readme",
        type=Path,
        action="append",
        help="check this file only (repeat for more; default: every file with a marker)",
    )
    p.add_argument("--root", type=Path, default=Path("."), help="where to look for the files")
    p.add_argument("--only", help="comma-separated script names (default: every table)")
    p.add_argument("--strict", action="store_true", help="a table not checked is a failure")
    args = p.parse_args(argv)
    files = args.readme or with_tables(markdown_files(args.root))
    only = set(args.only.split(",")) if args.only else None
    differ, skipped, failed, same = [], [], [], 0
    todo = [(p, blocks(p.read_text().splitlines(), _shown(p))) for p in files]
    bar = progress(total=sum(len(bs) for _, bs in todo), desc="readme tables", unit="table")
    for path, found in todo:
        name = _shown(path)
        lines = path.read_text().splitlines()
        here: dict[str, list[str]] = {"differ": [], "skipped": [], "failed": []}
        for b in reversed(found):  # from the end: earlier spans stay valid
            bar.update()
            if only is not None and b.script not in only:
                continue
            status, out, err = run(b)
            label = f"{b.script} ({name} line {b.start})"
            if status != 0:
                reason = err.strip().splitlines()[-1] if err.strip() else f"exit {status}"
                gone = missing_inputs(b)
                if gone:
                    here["skipped"].append(f"{label}: {', '.join(gone)} missing; {reason}")
                else:
                    here["failed"].append(f"{label}: {reason}")
                continue
            new = out.rstrip("\n").splitlines()
            if new == lines[b.start : b.end]:
                same += 1
                continue
            here["differ"].append(label)
            lines[b.start : b.end] = new
        differ += reversed(here["differ"])  # in the file's order
        skipped += reversed(here["skipped"])
        failed += reversed(here["failed"])
        if args.write and here["differ"]:
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text("\n".join(lines) + "\n")
            durable_replace(tmp, path)
    bar.close()
    verb = "rewritten" if args.write else "differ"
    print(
        f"{same} tables reproduce, {len(differ)} {verb}, {len(skipped)} not checked, "
        f"{len(failed)} failed ({len(files)} files)"
    )
    for line in differ:
        print(f"  {verb}: {line}")
    for line in skipped:
        print(f"  not checked (input missing): {line}")
    for line in failed:
        print(f"  failed: {line}")
    bad = (differ and args.check) or failed or (skipped and args.strict)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
