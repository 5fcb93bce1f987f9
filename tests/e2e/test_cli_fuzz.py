"""Property: no `specdec` subcommand answers a user's bad arguments with a traceback.

Run: `pytest tests/e2e/test_cli_fuzz.py` (about 30 s). Hypothesis draws argument lists for every
subcommand (and `trace synth`, `trace stats`) from its own option names (read off its argparse parser) and a pool of values a user
might type or mistype: numbers (negative, zero, NaN, inf, 1e99), budgets (`1e99%`, `inf%`,
`10^23slots`), words, and paths (missing, a plain file, an empty folder, a folder of junk, a
real model, pack and trace). Each list runs through the real CLI entry point
(`specdec.cli.main`, in process). Whatever it does, it must exit 0 or with a one-line error
(`specdec: error: ...`, or argparse's usage error) and never raise. Runs that would be long when
valid start from cheap defaults (`--max-tokens 2`, one prompt, a 1 MiB read benchmark) that the
drawn arguments may override; integers are kept small so that a valid run stays short. Outputs
land in a scratch directory that is also the working directory.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdec.cli import COMMANDS, command, main
from specdec.pack.pack import pack
from specdec.trace.format import Trace, save_trace
from tests.helpers import random_checkpoint

NUMBERS = ["-1", "0", "1", "2", "3", "nan", "inf", "-inf", "1e99", "0.5", "2.5", "abc", ""]
BUDGETS = ["25%", "1e99%", "inf%", "0%", "4slots", "99999999999999999999999slots", "1GB", "-3"]
WORDS = ["lru", "none", "mtp", "self", "oracle:0.9", "oracle:nan", "draft:", "x", "%", ",", ":"]
# cheap defaults placed before the drawn arguments (argparse keeps the last value given)
PREFIX = {
    "union-model": ["--union", "1:4,2:6,4:7"],
    "generate": ["--model", "{packed}", "--max-tokens", "2", "--io", "buffered"],
    "verify": ["--io", "buffered"],
    "probe": ["--model", "{packed}", "--limit", "1", "--max-tokens", "2", "--out", "{tmp}/p"],
}
ACTIONS = {  # subcommands with their own subcommands: the action and its cheap defaults
    "bench": [
        "read",
        "--dir",
        "{tmp}",
        "--file-bytes",
        "1048576",
        "--run-bytes",
        "65536",
        "--rounds",
        "1",
        "--threads",
        "1",
    ],
    "trace": ["record", "{packed}", "--out", "{tmp}/t", "--limit", "1", "--max-tokens", "2"],
    "trace synth": ["synth", "{tmp}/s", "--like", "deepseek-v3", "--positions", "16"],
    "trace stats": ["stats", "{trace}"],
}
EXAMPLES = {
    "trace": 12,
    "trace synth": 12,
    "trace stats": 12,
    "bench": 6,
}  # per subcommand; valid runs of these take ~1 s
DEFAULT_EXAMPLES = 30
POSITIONALS = {"pack": 2, "verify": 1, "make-random": 2, "extract-mtp": 2, "trace": 1}
POSITIONALS |= {"simulate": 1, "probe": 1, "report": 1}  # how many a list may start with
SLOW = {"probe": ["read_path", "all"]}  # probe names that benchmark the disk: not drawn


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("fuzz")
    model = random_checkpoint(root, "deepseek_v3", 4)
    packed = pack(model, root / "packed")
    rng = np.random.default_rng(0)
    experts = np.stack([[rng.permutation(16)[:4] for _ in range(2)] for _ in range(10)])
    save_trace(Trace(experts.astype(np.int32), 16, [8192, 8192]), root / "trace")
    (root / "file.txt").write_text("not a model\n")
    (root / "junk").mkdir()
    (root / "junk" / "experts.json").write_text("[]")
    (root / "empty").mkdir()
    return {
        "model": str(model),
        "packed": str(packed),
        "trace": str(root / "trace"),
        "file": str(root / "file.txt"),
        "junk": str(root / "junk"),
        "empty": str(root / "empty"),
        "missing": str(root / "no" / "such"),
        "root": str(root),
    }


def grammar(name: str) -> tuple[list[str], list[str], list[str]]:
    """A subcommand's (flags, options taking a value, choices of positionals), from its parser
    and its actions' parsers; probe names in SLOW left out."""
    parser = argparse.ArgumentParser()
    command(COMMANDS[name][0])[0](parser)
    flags: set[str] = set()
    valued: set[str] = set()
    choices: set[str] = set()
    stack = [parser]
    while stack:
        p = stack.pop()
        for action in p._actions:
            names = [s for s in action.option_strings if s not in ("-h", "--help")]
            (valued if action.nargs != 0 else flags).update(names)
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
            elif action.choices and not names:
                choices.update(str(c) for c in action.choices if str(c) not in SLOW.get(name, []))
    return sorted(flags), sorted(valued), sorted(choices)


def run_cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse: --help (0) or a usage error (2)
            rc = e.code if isinstance(e.code, int) else 2
    return rc, err.getvalue()


@pytest.mark.parametrize("case", [*COMMANDS, "trace synth", "trace stats"])
def test_no_traceback_on_random_arguments(places, tmp_path_factory, monkeypatch, case):
    name = case.split()[0]
    scratch = tmp_path_factory.mktemp(f"fuzz-{name}")
    monkeypatch.chdir(scratch)  # relative outputs ("abc") land here, never in the checkout
    monkeypatch.setenv("SPECDEC_CACHE", str(scratch / "cache"))
    paths = [places[k] for k in ("model", "packed", "trace", "file", "junk", "empty", "missing")]
    values = NUMBERS + BUDGETS + WORDS + paths
    flags, valued, choices = grammar(name)
    option = st.sampled_from(flags or ["--help"]).map(lambda f: (f,))
    if valued:
        option = option | st.tuples(st.sampled_from(valued), st.sampled_from(values))
    positional = st.sampled_from(choices + paths + WORDS + NUMBERS[:3])
    n_pos = POSITIONALS.get(name, 0)
    drawn_args = st.tuples(st.lists(positional, max_size=n_pos), st.lists(option, max_size=4)).map(
        lambda pa: [*pa[0], *(t for opt in pa[1] for t in opt)]
    )
    slow = set(SLOW.get(name, []))

    @settings(
        max_examples=EXAMPLES.get(case, DEFAULT_EXAMPLES),
        deadline=None,
        derandomize=True,  # the same lists every run: a failure reproduces
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(drawn_args)
    def check(drawn: list[str]) -> None:
        if slow & set(drawn):
            return
        out = scratch / "out"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        fill = {"{packed}": places["packed"], "{trace}": places["trace"], "{tmp}": str(out)}
        head = [fill.get(t, t).replace("{tmp}", str(out)) for t in PREFIX.get(name, [])]
        action = [t.replace("{tmp}", str(out)) for t in ACTIONS.get(case, [])]
        action = [fill.get(t, t) for t in action]
        argv = [name, *action, *head, *drawn]
        try:
            rc, err = run_cli(argv)
        except Exception as e:  # anything escaping main is a traceback for the user
            raise AssertionError(
                f"specdec {' '.join(argv)!r} raised {type(e).__name__}: {e}"
            ) from e
        assert "Traceback" not in err, f"specdec {argv}: {err}"
        assert rc in (0, 2), f"specdec {argv}: exit {rc}: {err[-500:]}"
        if rc == 2:
            last = err.strip().splitlines()[-1]
            assert last.startswith(("specdec: error: ", f"specdec {name}")), (argv, err[-500:])

    check()
