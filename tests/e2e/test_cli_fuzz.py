"""Property: no `specdec` subcommand answers a user's bad arguments with a traceback.

Run: `pytest tests/e2e/test_cli_fuzz.py` (about 50 s). Hypothesis draws argument lists for every
subcommand (and `trace synth`, `trace stats`) from its own option names (read off its argparse parser) and a pool of values a user
might type or mistype: numbers (negative, zero, NaN, inf, 1e99), budgets (`1e99%`, `inf%`,
`10^23slots`), words, and paths (missing, a plain file, an empty folder, a folder of junk, a
real model, pack and trace). Each list runs through the real CLI entry point
(`specdec.cli.main`, in process). Whatever it does, it must exit 0 or with a one-line error
(`specdec: error: ...`, or argparse's usage error) and never raise. Runs that would be long when
valid start from cheap defaults (`--max-tokens 2`, one prompt, a 1 MiB read benchmark) that the
drawn arguments may override; integers are kept small so that a valid run stays short. Outputs
land in a scratch directory that is also the working directory.

`test_malformed_files_and_hostile_outputs` damages the files themselves: config.json and
experts.json (whole-file garbage, a field set to a hostile value or dropped) and safetensors
headers (lengths, offsets, dtypes, shapes), each read by the commands that read it, and gives
every writing command a hostile output path (a foreign file, a path below a file, a symlink,
a name too long); it requires one-line errors, untouched user files and no temporary leftovers.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shutil
from pathlib import Path

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


# -- malformed files and hostile output paths ---------------------------------------------------
# Values a hand-edit, a bad converter or a truncated download leaves in a JSON field, and whole
# files that are not the JSON object they should be.
HOSTILE = [None, "x", "4", -1, 0, 2**70, 1e300, 0.5, True, [], {}, [1, 2], ""]
RAW = [b"", b"{", b"[]", b"null", b'"x"', b"\xff\xfe\x00", b"{}"]
CONFIG_KEYS = ["hidden_size", "num_experts_per_tok", "n_routed_experts", "num_hidden_layers"]
CONFIG_KEYS += ["quantization", "model_type", "moe_intermediate_size", "vocab_size"]
CONFIG_KEYS += ["first_k_dense_replace", "rope_theta", "max_position_embeddings"]
INDEX_FIELDS = ["version", "slot_bytes", "layers", "n_experts", "block_bytes", "offsets"]
INDEX_FIELDS += ["crc32", "tensors", "quant", "prefix"]
# safetensors header damages: (what, how) applied to the first tensor or the whole header
HEADER = ["length 2^63", "length 0", "length past the file", "not JSON", "a list", "dtype XX"]
HEADER += ["offsets reversed", "offsets negative", "offsets past the file", "shape [-1]"]
HEADER += ["shape too large", "overlapping offsets"]
# commands that read each damaged file, with cheap settings; {dir} is the damaged copy
READERS = {
    "config": [
        ["verify", "{dir}", "--io", "buffered"],
        ["generate", "--model", "{dir}", "--max-tokens", "1", "--io", "buffered"],
        ["pack", "{dir}", "{out}/p"],
        [
            "simulate",
            "{trace}",
            "--gamma",
            "auto",
            "--policy",
            "lru",
            "--config",
            "{dir}/config.json",
        ],
        ["extract-mtp", "{dir}", "{out}/m"],
    ],
    "index": [
        ["verify", "{dir}", "--io", "buffered"],
        ["generate", "--model", "{dir}", "--max-tokens", "1", "--io", "buffered"],
    ],
    "safetensors": [
        ["verify", "{dir}", "--io", "buffered"],
        ["generate", "--model", "{dir}", "--max-tokens", "1", "--io", "buffered"],
        ["pack", "{dir}", "{out}/p"],
    ],
}
# commands that write, each with its output path as {path}
WRITERS = [
    ["pack", "{model}", "{path}"],
    ["make-random", "qwen3_moe", "{path}"],
    ["trace", "synth", "{path}", "--like", "deepseek-v3", "--positions", "4"],
    ["trace", "hotlist", "{trace}", "--out", "{path}"],
    ["generate", "--model", "{packed}", "--max-tokens", "1", "--records", "{path}"],
    ["extract-mtp", "{model}", "{path}"],
]
# hostile output paths: an existing foreign file, a path below a file, a non-empty foreign
# folder, a dangling symlink, a symlink to a foreign file, a name too long for the file system
OUTPUTS = ["file", "below a file", "foreign folder", "dangling link", "link to a file", "long name"]


def edit_json(path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def damage_json(path, damage, first_layer: bool) -> None:
    """One damage to a JSON file: raw bytes, or a field set to a hostile value or dropped."""
    kind, *rest = damage
    if kind == "raw":
        path.write_bytes(rest[0])
        return
    key, value = rest

    def edit(data):
        node = (
            data["layers"][min(data["layers"], key=int)]
            if first_layer and key not in data
            else data
        )
        if kind == "drop":
            node.pop(key, None)
        else:
            node[key] = value

    edit_json(path, edit)


def damage_header(path, how: str) -> None:
    """One damage to a safetensors file's header (8-byte little-endian length, then JSON)."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header, data = json.loads(raw[8 : 8 + n]), raw[8 + n :]
    name = next(k for k in header if k != "__metadata__")
    t = header[name]
    lo, hi = t["data_offsets"]
    body = None
    if how == "length 2^63":
        path.write_bytes((1 << 63).to_bytes(8, "little") + raw[8:])
        return
    if how == "length 0":
        path.write_bytes((0).to_bytes(8, "little") + raw[8:])
        return
    if how == "length past the file":
        path.write_bytes((len(raw) * 2).to_bytes(8, "little") + raw[8:])
        return
    if how == "not JSON":
        body = b"{" * n
    elif how == "a list":
        body = b"[1, 2, 3]"
    elif how == "dtype XX":
        t["dtype"] = "XX"
    elif how == "offsets reversed":
        t["data_offsets"] = [hi, lo]
    elif how == "offsets negative":
        t["data_offsets"] = [-8, hi]
    elif how == "offsets past the file":
        t["data_offsets"] = [lo, len(data) + 4096]
    elif how == "shape [-1]":
        t["shape"] = [-1]
    elif how == "shape too large":
        t["shape"] = [2**40, 2**40]
    elif how == "overlapping offsets":
        other = next(k for k in header if k not in ("__metadata__", name))
        header[other]["data_offsets"] = [
            lo,
            lo + header[other]["data_offsets"][1] - header[other]["data_offsets"][0],
        ]
    body = body if body is not None else json.dumps(header).encode()
    path.write_bytes(len(body).to_bytes(8, "little") + body + data)


def hostile_output(kind: str, scratch) -> tuple[str, dict]:
    """(the output path, {path: bytes} of the user's files that must stay as they are)."""
    user = scratch / "user.txt"
    user.write_text("the user's data\n")
    keep = {user: user.read_bytes()}
    if kind == "file":
        out = scratch / "existing.json"
        out.write_text('{"mine": 1}\n')
        keep[out] = out.read_bytes()
    elif kind == "below a file":
        out = user / "sub"
    elif kind == "foreign folder":
        out = scratch / "theirs"
        out.mkdir()
        (out / "notes.txt").write_text("keep\n")
        keep[out / "notes.txt"] = b"keep\n"
    elif kind == "dangling link":
        out = scratch / "dangling"
        out.symlink_to(scratch / "nowhere")
    elif kind == "link to a file":
        out = scratch / "link"
        out.symlink_to(user)
    else:
        out = scratch / ("x" * 300)
    return str(out), keep


def leftovers(root) -> list[str]:
    """Temporary names a command must not leave behind (its temp files and swapped-out dirs)."""
    temp = re.compile(r"\.tmp|\.old-|^\.[^.]+\.[A-Za-z0-9_]{8}$")  # ours and tempfile's names
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if temp.search(p.name))


def fill_in(token: str, fill: dict[str, str]) -> str:
    for name, value in fill.items():
        token = token.replace(name, value)
    return token


def check_run(argv, *, must_fail: bool) -> tuple[int, str]:
    try:
        rc, err = run_cli(argv)
    except Exception as e:  # anything escaping main is a traceback for the user
        raise AssertionError(f"specdec {' '.join(argv)!r} raised {type(e).__name__}: {e}") from e
    assert "Traceback" not in err, f"specdec {argv}: {err}"
    assert rc in ((2,) if must_fail else (0, 2)), f"specdec {argv}: exit {rc}: {err[-500:]}"
    if rc == 2:
        lines = [line for line in err.strip().splitlines() if not line.startswith("specdec: note")]
        assert len(lines) == 1 and lines[0].startswith(("specdec: error: ", "usage:")), (argv, err)
    return rc, err


def test_malformed_files_and_hostile_outputs(places, tmp_path_factory, monkeypatch):
    """Malformed config.json, experts.json and safetensors headers, fed to every command that
    reads them, and hostile output paths given to every command that writes: each run exits 0
    or with one line (a damage to a whole file always fails), never a traceback; the user's
    files stay byte for byte, and no temporary file or swapped-out folder is left behind."""
    scratch = tmp_path_factory.mktemp("fuzz-files")
    monkeypatch.chdir(scratch)
    monkeypatch.setenv("SPECDEC_CACHE", str(scratch / "cache"))
    value = st.sampled_from(HOSTILE)
    json_damage = (
        st.tuples(st.just("raw"), st.sampled_from(RAW))
        | st.tuples(st.just("set"), st.sampled_from(CONFIG_KEYS + INDEX_FIELDS), value)
        | st.tuples(st.just("drop"), st.sampled_from(CONFIG_KEYS + INDEX_FIELDS), st.just(None))
    )
    reads = st.sampled_from(sorted(READERS)).flatmap(
        lambda target: st.tuples(
            st.just(target),
            st.sampled_from(range(len(READERS[target]))),
            st.sampled_from(HEADER) if target == "safetensors" else json_damage,
        )
    )
    writes = st.tuples(st.sampled_from(range(len(WRITERS))), st.sampled_from(OUTPUTS))

    @settings(
        max_examples=24,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(st.one_of(reads, writes))
    def check(case) -> None:
        work = scratch / "work"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        fill = {"{trace}": places["trace"], "{model}": places["model"], "{out}": str(work)}
        fill["{packed}"] = places["packed"]
        if len(case) == 3:  # a damaged file read by a command
            target, which, damage = case
            src = (
                places["model"]
                if READERS[target][which][0] in ("pack", "extract-mtp")
                else places["packed"]
            )
            d = Path(shutil.copytree(src, work / "in"))
            if target == "config":
                damage_json(d / "config.json", damage, first_layer=False)
            elif target == "index":
                damage_json(d / "experts.json", damage, first_layer=True)
            else:
                damage_header(d / "model.safetensors", damage)
            fill["{dir}"] = str(d)
            argv = [fill_in(t, fill) for t in READERS[target][which]]
            whole = target == "safetensors" or damage[0] == "raw"
            check_run(argv, must_fail=whole and damage != ("raw", b"{}"))
            assert leftovers(work) == [], (argv, leftovers(work))
        else:  # a hostile output path
            which, kind = case
            path, keep = hostile_output(kind, work)
            fill["{path}"] = path
            argv = [fill_in(t, fill) for t in WRITERS[which]]
            check_run(argv, must_fail=False)
            for p, data in keep.items():
                assert p.read_bytes() == data, (argv, f"{p} changed")
            assert leftovers(work) == [], (argv, leftovers(work))

    check()
