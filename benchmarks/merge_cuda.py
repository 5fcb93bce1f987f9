"""Merge a device session's bench_cuda.py output folders into benchmarks/results/cuda.

    python benchmarks/merge_cuda.py --session 19 --card h100 OUT1 OUT2 ...   # each a --out

Each OUT is what one `python benchmarks/bench_cuda.py --out OUT ...` wrote on the lent machine
(brought back as is). A run step's rows (scale spec auto drafters lookahead shm) are appended to
results/cuda/STEP.json, each marked `"session": N`, with the command and machine under
`sessions["N"]`, and its records to STEP.jsonl; the profile (OUT/h200.yaml, the name bench_cuda
gives it on any card) becomes CARD-rN.yaml with that name inside, its details
profile_details-rN.json (a session's second profile, run again after its runs or between its
grids, CARD-rN-2.yaml and profile_details-rN-2.json beside the first's; a third -3, and so on);
every other step's JSON goes to sessionN/ (a second run of a step in one session to
sessionN/STEP-2.json, and so on: both kept). The home directory becomes `~` (results are read
on other machines; tests/core/test_results_portable.py). `python -m analysis.cuda` reads a new
session's runs once SESSIONS in analysis/cuda.py names its profiles.

A step merged before (a run step's command already under `sessions["N"]`, another step's in a
sessionN/ file) is refused, so running this twice does not count the same runs twice; so is a
folder holding no bench_cuda.py output.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specdec.core.files import write_atomic  # noqa: E402
from specdec.core.machine import home_as_tilde  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "cuda"
RUN_STEPS = ("scale", "spec", "auto", "drafters", "lookahead", "shm")
# a session's entry per step; "partial": the step was cut short (a lease's or a pipeline's limit),
# "error": it failed; either way its runs so far are merged (bench_cuda saves them run by run)
KEEP = ("seconds", "command", "mlx_device", "machine", "gpu", "partial", "error")


class MergeError(Exception):
    """A folder or a step that cannot be merged; the message says which and why."""


def merge(outs: list[Path], session: int, card: str, results: Path = RESULTS) -> list[str]:
    """Merge every folder of `outs`, all checked before any is written; returns one line per
    file written."""
    _check(outs, session, results)
    kept = _session_files(outs, session, results)
    runs = {out: _profile_run(out, kept) for out in outs}
    names = {out: f"{card}-r{session}{run}" for out, run in runs.items()}  # each profile's
    for out, name in names.items():
        if (out / "h200.yaml").exists() and (results / f"{name}.yaml").exists():
            raise MergeError(f"{out}/h200.yaml: already merged ({name}.yaml is there)")
    done = []
    for out in outs:
        for f in sorted(out.glob("*.json")):
            done.append(_merge_file(f, session, results, kept.get(f), runs[out]))
        profile, name = out / "h200.yaml", names[out]
        if profile.exists():
            text = re.sub(r"\bh200\b(?=[:'\n])", name, home_as_tilde(profile.read_text()))
            write_atomic(results / f"{name}.yaml", text)
            done.append(f"{out.name}/h200.yaml -> {name}.yaml")
    return done


def _profile_run(out: Path, kept: dict[Path, Path]) -> str:
    """The suffix of `out`'s profile files: none for its session's first profile, "-N" for the
    N-th (its profile.json goes to sessionN/profile-N.json), kept beside the first's, not over
    them (a session may profile again after its runs)."""
    to = kept.get(out / "profile.json")
    n = _run_number("profile", to.name) if to is not None else 1
    return f"-{n}" if n > 1 else ""


def _check(outs: list[Path], session: int, results: Path) -> None:
    """Every folder holds bench_cuda.py output, and no run step's command is merged yet (nor
    twice among `outs`)."""
    seen = set()
    for out in outs:
        files = sorted(out.glob("*.json"))
        if not files:
            raise MergeError(f"{out}: no bench_cuda.py results (STEP.json) there")
        for f in (f for f in files if f.stem in RUN_STEPS):
            command = json.loads(f.read_text()).get("command")
            sessions = json.loads((results / f.name).read_text()).get("sessions", {})
            if (f.stem, command) in seen or any(
                e.get("command") == command for e in sessions.get(str(session), [])
            ):
                raise MergeError(f"{f}: already merged (session {session} lists its command)")
            seen.add((f.stem, command))


def _session_files(outs: list[Path], session: int, results: Path) -> dict[Path, Path]:
    """Where each non-run step's JSON of `outs` goes: sessionN/STEP.json, or STEP-2.json, -3 ...
    where a run of the step is there already or comes earlier in `outs` (the thirty-first
    session ran `overhead` twice: one copy would have overwritten the other). A step whose
    command one of them holds already is refused: merged before."""
    folder = results / f"session{session}"
    commands = {p: json.loads(p.read_text()).get("command") for p in folder.glob("*.json")}
    kept = {}
    for out in outs:
        for f in sorted(out.glob("*.json")):
            if f.stem in RUN_STEPS or f.stem == "profile_details":
                continue
            command = json.loads(home_as_tilde(f.read_text())).get("command")  # as merged
            runs = {p: n for p in commands if (n := _run_number(f.stem, p.name))}
            if command is not None and any(commands[p] == command for p in runs):
                raise MergeError(f"{f}: already merged (session{session} holds its command)")
            after = max(runs.values(), default=0)  # past the last, even where one was removed
            kept[f] = folder / (f"{f.stem}-{after + 1}.json" if after else f.name)
            commands[kept[f]] = command
    return kept


def _run_number(step: str, name: str) -> int:
    """Which run of `step` the session file `name` holds: STEP.json 1, STEP-2.json 2 ...; 0: it
    is another step's."""
    m = re.fullmatch(rf"{re.escape(step)}(?:-(\d+))?\.json", name)
    return 0 if m is None else int(m.group(1) or 1)


def _merge_file(f: Path, session: int, results: Path, to: Path | None, run: str = "") -> str:
    """`f` merged: a run step's runs appended to results/STEP.json, another step's JSON written
    to `to` (_session_files), the profile's details beside its yaml (`run`: _profile_run)."""
    step, text = f.stem, home_as_tilde(f.read_text())
    if step == "profile_details":
        name = f"profile_details-r{session}{run}.json"
        write_atomic(results / name, text)
        return f"{f.parent.name}/{f.name} -> {name}"
    data = json.loads(text)
    if step not in RUN_STEPS:
        to.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(to, json.dumps(data, indent=1) + "\n")
        return f"{f.parent.name}/{f.name} -> {to.parent.name}/{to.name}"
    main = json.loads((results / f.name).read_text())
    entries = main.setdefault("sessions", {}).setdefault(str(session), [])
    runs = data.get("runs", [])
    for run in runs:
        run["session"] = session
    main["runs"].extend(runs)
    entries.append({k: data[k] for k in KEEP if k in data})
    records = f.with_suffix(".jsonl")
    lines = home_as_tilde(records.read_text()) if records.exists() else ""
    write_atomic(results / f.name, json.dumps(main, indent=1) + "\n")
    write_atomic(results / records.name, (results / records.name).read_text() + lines)
    return f"{f.parent.name}/{f.name}: {len(runs)} runs -> {f.name}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outs", nargs="+", type=Path, help="bench_cuda.py --out folders")
    ap.add_argument("--session", type=int, required=True, help="the lent machine's session")
    ap.add_argument("--card", required=True, choices=("h100", "h200"), help="the card it had")
    args = ap.parse_args()
    try:
        for line in merge(args.outs, args.session, args.card):
            print(line)
    except MergeError as e:
        print(f"merge_cuda: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
