"""A second adversarial pass over every subcommand: hostile inputs issue 22 did not list.

Run from the repo root: `python scripts/adversarial.py` (about a minute on 2 cores); writes
benchmarks/results/adversarial.json (every case: command, expectation, outcome, stderr's last
line) and benchmarks/results/adversarial.md (the tally and the cases that are not ok).

Each case runs through the real CLI entry point (`specdec.cli.main`, in process) in a scratch
directory that is also the working directory, under a 20 s alarm. Inputs: a random DeepSeek-V3
4-bit checkpoint, its pack and a routing trace, made fresh, and whatever the case sets up.
Outcomes: `ok` (exit 2 with one line where an error is expected, exit 0 where success is),
`traceback` (an exception left main, or a traceback on stderr), `hang` (the alarm fired),
`data loss` (a file that existed before the run changed or vanished: the shared inputs and the
case's own files), `silent wrong` (exit 0 where the input is invalid), `false refusal` (an
error for a valid input), `multi-line` (an error of more than one line).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specdec.checkpoint.random_models import make_random  # noqa: E402
from specdec.cli import main  # noqa: E402
from specdec.core.blas import ensure_fast_blas  # noqa: E402
from specdec.core.machine import write_result  # noqa: E402
from specdec.pack.pack import pack  # noqa: E402
from specdec.trace.format import Trace, save_trace  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
TIMEOUT_S = 20
GEN = ["--max-tokens", "2", "--io", "buffered"]


def write(rel: str, data: str | bytes):
    """A setup step: write `data` to {s}/rel."""

    def step(s: Path) -> None:
        p = s / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)

    return step


def copy(what: str, rel: str):
    def step(s: Path) -> None:
        shutil.copytree(s / ".." / what, s / rel, symlinks=True)

    return step


def edit(rel: str, change):
    """Load JSON at {s}/rel, apply change(obj), write it back."""

    def step(s: Path) -> None:
        p = s / rel
        obj = json.loads(p.read_text())
        change(obj)
        p.write_text(json.dumps(obj))

    return step


def npy(rel: str, array):
    def step(s: Path) -> None:
        np.save(s / rel, array)

    return step


def steps(*fns):
    def step(s: Path) -> None:
        for f in fns:
            f(s)

    return step


HOT = "# ds4 expert hotlist v1\n"
TRACE = [copy("trace", "tr")]  # a damaged copy of the trace lives at {s}/tr


def cases() -> list[tuple[str, list[str], object, str]]:
    """(name, argv with {packed} {model} {trace} {s}, setup or None, "error" | "ok")."""
    c: list[tuple[str, list[str], object, str]] = []

    def case(name: str, argv: list[str], setup=None, expect: str = "error") -> None:
        c.append((name, argv, setup, expect))

    g = ["generate", "--model", "{packed}", *GEN]
    for v in ["", "   "]:
        case(f"generate --prompt {v!r}", [*g, "--prompt", v], expect="error" if not v else "ok")
    for v in ["1e308", "1e-7", "-0.0", "0.0000001"]:
        case(
            f"generate --temp {v}",
            [*g, "--temp", v],
            expect="ok" if v in ("1e308", "-0.0") else "error",
        )
    for v in ["2.5", "0x10", " 2", "+2", "1e1", "٣"]:  # with a drafter: γ > 1 needs one
        case(
            f"generate --gamma {v!r}",
            [*g, "--drafter", "self", "--gamma", v],
            expect="ok" if v.strip() in ("2", "+2", "٣") else "error",
        )
    for v in [
        "oracle:1.5",
        "oracle:-1",
        "oracle:abc",
        "oracle:",
        "lookup:0",
        "lookup:-3",
        "lookup:x",
        "self:1",
        "mtp:2",
        "none:1",
        "draft:{s}/nope",
        "draft:{s}/f.txt",
        "ORACLE:0.5",
        " oracle:0.5",
    ]:
        case(f"generate --drafter {v}", [*g, "--drafter", v, "--gamma", "2"], write("f.txt", "x"))
    for v in [
        "",
        "-10%",
        "0slots",
        "1B",
        "0B",
        "nan%",
        "1e-9%",
        "5%%",
        "2slot",
        "3 slots",
        "0.5slots",
        "1e3slots",
        "100.0001%",
        "0x10slots",
    ]:
        exp = "error"  # 1e3slots: more slots than the model's 48 experts, refused as simulate does
        case(
            f"generate --budget {v!r}",
            ["generate", "--model", "{packed}", *GEN, "--budget", v],
            expect=exp,
        )
    for v in [
        "",
        "lru+protect+protect",
        "LRU",
        "lru+",
        "+demote",
        "static",
        "hotness+demote",
        "belady",
    ]:
        exp = "ok" if v in ("lru+protect+protect", "hotness+demote") else "error"
        case(f"generate --policy {v!r}", [*g, "--policy", v], expect=exp)
    for v in ["-1", "0", "abc"]:
        case(f"generate --threads {v}", [*g, "--threads", v])
    for v in ["/dev/null", "{s}/list.json", "{s}/bad.yaml", "", "m4-24gb,m4-24gb"]:
        case(
            f"generate --profile {v}",
            [*g, "--profile", v],
            steps(write("list.json", "[1]"), write("bad.yaml", "a: [")),
        )
    for v in ["trace:{s}/none", "trace:{s}/f.txt", "foo", "trace:", "trace:{trace}"]:
        case(
            f"generate --routing {v}",
            [*g, "--routing", v],
            write("f.txt", "x"),
            expect="ok" if v == "trace:{trace}" else "error",
        )
    for v in ["1000000000", "-2", "x"]:
        case(f"generate --lookahead {v}", [*g, "--lookahead", v])
    case("generate --seed 2^64", [*g, "--seed", str(2**64), "--temp", "1"])
    # past the context: a warning names it and the run goes on (positions it was not trained on)
    case(
        "generate --max-tokens 10^12",
        ["generate", "--model", "{packed}", "--io", "buffered", "--max-tokens", str(10**12)],
        expect="ok",
    )
    case("generate --io weird", [*g, "--io", "weird"])
    case("generate --model ''", ["generate", "--model", "", *GEN])
    case("generate --model a file", ["generate", "--model", "{s}/f.txt", *GEN], write("f.txt", "x"))
    case(
        "generate --model an empty dir",
        ["generate", "--model", "{s}/e", *GEN],
        lambda s: (s / "e").mkdir(),
    )
    case("generate --prompt 20k chars", [*g, "--prompt", "def " * 5000])
    case(
        "generate --records under a file",
        [*g, "--records", "{s}/f.txt/r.jsonl"],
        write("f.txt", "x"),
    )
    case(
        "generate --append to a missing file",
        [*g, "--records", "{s}/new.jsonl", "--append"],
        expect="ok",
    )
    # packed directory damages not in the issue
    P = [copy("packed", "p")]
    gp = ["generate", "--model", "{s}/p", *GEN]
    case("packed: experts.bin 0 bytes", gp, steps(*P, write("p/experts.bin", b"")))
    case(
        "packed: model.safetensors missing",
        gp,
        steps(*P, lambda s: (s / "p/model.safetensors").unlink()),
    )
    case(
        "packed: model.safetensors a dir",
        gp,
        steps(
            *P,
            lambda s: (
                (s / "p/model.safetensors").unlink(),
                (s / "p/model.safetensors").mkdir(),
            ),
        ),
    )
    case("packed: config.json missing", gp, steps(*P, lambda s: (s / "p/config.json").unlink()))
    case(
        "packed: config.json a dir",
        gp,
        steps(*P, lambda s: ((s / "p/config.json").unlink(), (s / "p/config.json").mkdir())),
    )
    case("packed: config.json empty", gp, steps(*P, write("p/config.json", "")))
    case(
        "packed: tokenizer_config.json a list",
        gp,
        steps(*P, write("p/tokenizer_config.json", "[]")),
    )
    case(
        "packed: experts.json slot_bytes 0",
        ["verify", "{s}/p", "--io", "buffered"],
        steps(*P, edit("p/experts.json", lambda o: o.update(slot_bytes=0))),
    )
    case(
        "packed: experts.json layer key 'x'",
        ["verify", "{s}/p", "--io", "buffered"],
        steps(*P, edit("p/experts.json", lambda o: o["layers"].update(x=o["layers"]["1"]))),
    )
    case(
        "packed: experts.json n_experts 17",
        ["verify", "{s}/p", "--io", "buffered"],
        steps(*P, edit("p/experts.json", lambda o: o["layers"]["1"].update(n_experts=17))),
    )
    case(
        "packed: experts.json crc32 list short",
        ["verify", "{s}/p", "--io", "buffered"],
        steps(*P, edit("p/experts.json", lambda o: o["layers"]["1"]["crc32"].pop())),
    )
    case(
        "packed: experts.json tensors empty",
        gp,
        steps(*P, edit("p/experts.json", lambda o: o["layers"]["1"].update(tensors=[]))),
    )
    case(
        "packed: experts.json block_bytes 1",
        ["verify", "{s}/p", "--io", "buffered"],
        steps(*P, edit("p/experts.json", lambda o: o["layers"]["1"].update(block_bytes=1))),
    )
    case("verify: a file", ["verify", "{s}/f.txt"], write("f.txt", "x"))
    case("verify: an empty dir", ["verify", "{s}/e"], lambda s: (s / "e").mkdir())
    case("verify: --io weird", ["verify", "{packed}", "--io", "weird"])
    case("verify: ok", ["verify", "{packed}", "--io", "buffered"], expect="ok")
    # pack
    case("pack: out is /", ["pack", "{model}", "/"])
    case("pack: out ''", ["pack", "{model}", ""])
    case("pack: model a file", ["pack", "{s}/f.txt", "{s}/o"], write("f.txt", "x"))
    case("pack: model an empty dir", ["pack", "{s}/e", "{s}/o"], lambda s: (s / "e").mkdir())
    case(
        "pack: --cold-bits 2 --hotlist header only",
        ["pack", "{model}", "{s}/o", "--cold-bits", "2", "--hotlist", "{s}/h"],
        write("h", HOT),
    )
    case(
        "pack: --cold-bits 2 --hotlist /dev/null",
        ["pack", "{model}", "{s}/o", "--cold-bits", "2", "--hotlist", "/dev/null"],
    )
    case("pack: --cold-bits abc", ["pack", "{model}", "{s}/o", "--cold-bits", "abc"])
    case(
        "pack: --hot-access-share nan",
        [
            "pack",
            "{model}",
            "{s}/o",
            "--cold-bits",
            "2",
            "--hotlist",
            "{s}/h",
            "--hot-access-share",
            "nan",
        ],
        write("h", HOT + "1 0 5 1.0\n"),
    )
    case("pack: a packed dir into a new dir", ["pack", "{packed}", "{s}/o"])
    case("pack: ok", ["pack", "{model}", "{s}/o"], expect="ok")
    # make-random
    for v in ["0", "-4", "7", "1", "16"]:
        case(f"make-random --quantize {v}", ["make-random", "qwen3_moe", "{s}/r", "--quantize", v])
    case("make-random unknown family", ["make-random", "gpt9", "{s}/r"])
    case("make-random family ''", ["make-random", "", "{s}/r"])
    case("make-random --like unknown", ["make-random", "--like", "gpt9", "{s}/r"])
    for v in ["0", "-1"]:
        case(
            f"make-random --like --layers {v}",
            ["make-random", "--like", "deepseek-v3", "{s}/r", "--layers", v],
        )
        case(
            f"make-random --like --experts {v}",
            ["make-random", "--like", "deepseek-v3", "{s}/r", "--layers", "2", "--experts", v],
        )
    case(
        "make-random --experts without --like",
        ["make-random", "qwen3_moe", "{s}/r", "--experts", "4"],
    )
    case("make-random --seed 2^32", ["make-random", "qwen3_moe", "{s}/r", "--seed", str(2**32)])
    case(
        "make-random FAMILY and --like",
        ["make-random", "qwen3_moe", "{s}/r", "--like", "deepseek-v3"],
    )
    case("make-random ok", ["make-random", "qwen3_moe", "{s}/r"], expect="ok")
    # extract-mtp
    case("extract-mtp: hf a file", ["extract-mtp", "{s}/f.txt", "{s}/o"], write("f.txt", "x"))
    case(
        "extract-mtp: hf empty dir", ["extract-mtp", "{s}/e", "{s}/o"], lambda s: (s / "e").mkdir()
    )
    case(
        "extract-mtp: config.json a dir",
        ["extract-mtp", "{s}/h", "{s}/o"],
        lambda s: (s / "h/config.json").mkdir(parents=True),
    )
    case(
        "extract-mtp: num_hidden_layers -1",
        ["extract-mtp", "{s}/h", "{s}/o"],
        write("h/config.json", '{"model_type": "deepseek_v3", "num_hidden_layers": -1}'),
    )
    case(
        "extract-mtp: num_hidden_layers true",
        ["extract-mtp", "{s}/h", "{s}/o"],
        write("h/config.json", '{"model_type": "deepseek_v3", "num_hidden_layers": true}'),
    )
    case(
        "extract-mtp: model_type a list",
        ["extract-mtp", "{s}/h", "{s}/o"],
        write("h/config.json", '{"model_type": ["deepseek_v3"]}'),
    )
    case(
        "extract-mtp: index weight_map a list",
        ["extract-mtp", "{s}/h", "{s}/o"],
        steps(
            write("h/config.json", '{"model_type": "deepseek_v3", "num_hidden_layers": 3}'),
            write("h/model.safetensors.index.json", '{"weight_map": []}'),
        ),
    )
    case(
        "extract-mtp: index names a missing shard",
        ["extract-mtp", "{s}/h", "{s}/o"],
        steps(
            write("h/config.json", '{"model_type": "deepseek_v3", "num_hidden_layers": 3}'),
            write(
                "h/model.safetensors.index.json",
                '{"weight_map": {"model.layers.3.a": "gone.safetensors"}}',
            ),
        ),
    )
    case(
        "extract-mtp: a shard of garbage",
        ["extract-mtp", "{s}/h", "{s}/o"],
        steps(
            write("h/config.json", '{"model_type": "deepseek_v3", "num_hidden_layers": 3}'),
            write("h/model.safetensors", b"\x00" * 64),
        ),
    )
    case(
        "extract-mtp: --group-size 0",
        ["extract-mtp", "{model}", "{s}/o", "--quantize", "4", "--group-size", "0"],
    )
    case(
        "extract-mtp: --group-size -64",
        ["extract-mtp", "{model}", "{s}/o", "--quantize", "4", "--group-size", "-64"],
    )
    # simulate
    sim = ["simulate", "{trace}"]
    for v in ["lru,,", ",", "lru,lru", "lcs:", "lcs:NOPE"]:
        case(
            f"simulate --policy {v!r}",
            [*sim, "--policy", v],
            expect="ok" if v in ("lru,,", "lru,lru") else "error",
        )
    for v in ["", ",", "1e-9%", "4slots,", "-4slots"]:
        case(
            f"simulate --budget {v!r}",
            [*sim, "--budget", v, "--policy", "lru"],
            expect="ok" if v == "4slots," else "error",
        )
    for v in ["1.5", "-0.1", "nan", "", "inf"]:
        case(
            f"simulate --alpha {v!r}",
            [*sim, "--alpha", v, "--policy", "lru", "--gamma", "2", "--budget", "8slots"],
        )
    for v in ["1,,2", "auto,auto", "", "0,2"]:
        case(
            f"simulate --gamma {v!r}",
            [*sim, "--gamma", v, "--policy", "lru", "--budget", "8slots"],
            expect="ok" if v == "1,,2" else "error",
        )
    case(
        "simulate --positions 10^12",
        [*sim, "--positions", str(10**12), "--policy", "lru", "--budget", "8slots"],
        expect="ok",
    )
    case(
        "simulate --lookahead 2 without lookahead.npy",
        [*sim, "--lookahead", "2", "--policy", "lru", "--budget", "8slots"],
    )
    case(
        "simulate --hotlist empty file",
        [*sim, "--hotlist", "{s}/h", "--policy", "lru", "--budget", "8slots"],
        write("h", ""),
    )
    case(
        "simulate --hotlist negative expert",
        [*sim, "--hotlist", "{s}/h", "--budget", "8slots"],
        write("h", HOT + "0 -1 5 1.0\n"),
    )
    case(
        "simulate --hotlist float layer",
        [*sim, "--hotlist", "{s}/h", "--budget", "8slots"],
        write("h", HOT + "0.5 1 5 1.0\n"),
    )
    case(
        "simulate --hotlist weight nan",
        [*sim, "--hotlist", "{s}/h", "--budget", "8slots", "--policy", "lru"],
        write("h", HOT + "0 1 5 nan\n"),
    )
    case(
        "simulate --hotlist a FIFO",
        [*sim, "--hotlist", "{s}/fifo", "--budget", "8slots"],
        lambda s: os.mkfifo(s / "fifo"),
    )
    case(
        "simulate --hotlist-trace a file",
        [*sim, "--hotlist-trace", "{s}/f.txt", "--budget", "8slots"],
        write("f.txt", "x"),
    )
    case(
        "simulate --config a FIFO",
        [
            *sim,
            "--gamma",
            "auto",
            "--policy",
            "lru",
            "--budget",
            "8slots",
            "--config",
            "{s}/fifo",
        ],
        lambda s: os.mkfifo(s / "fifo"),
    )
    case(
        "simulate --config {} ",
        [
            *sim,
            "--gamma",
            "auto",
            "--policy",
            "lru",
            "--budget",
            "8slots",
            "--config",
            "{s}/c.json",
        ],
        write("c.json", "{}"),
    )
    case(
        "simulate --config hidden_size 'x'",
        [
            *sim,
            "--gamma",
            "auto",
            "--policy",
            "lru",
            "--budget",
            "8slots",
            "--config",
            "{s}/c.json",
        ],
        steps(
            lambda s: shutil.copy(s / ".." / "model" / "config.json", s / "c.json"),
            edit("c.json", lambda o: o.update(hidden_size="x")),
        ),
    )
    case(
        "simulate --profile a list.json",
        [
            *sim,
            "--gamma",
            "auto",
            "--policy",
            "lru",
            "--budget",
            "8slots",
            "--config",
            "{model}/config.json",
            "--profile",
            "{s}/p.json",
        ],
        write("p.json", "[]"),
    )
    case(
        "simulate --json ok", [*sim, "--json", "--policy", "lru", "--budget", "8slots"], expect="ok"
    )
    # trace directory damages
    st_ = ["simulate", "{s}/tr", "--policy", "lru", "--budget", "8slots"]
    meta = "tr/meta.json"
    for name, change in [
        ("n_layers -2", lambda o: o.update(n_layers=-2)),
        ("top_k 'x'", lambda o: o.update(top_k="x")),
        ("expert_bytes []", lambda o: o.update(expert_bytes=[])),
        ("expert_bytes 0", lambda o: o.update(expert_bytes=0)),
        ("expert_bytes 'x'", lambda o: o.update(expert_bytes="x")),
        ("expert_bytes 1.5", lambda o: o.update(expert_bytes=1.5)),
        ("layer_ids negative", lambda o: o.update(layer_ids=[-1, 2])),
        ("layer_ids a string", lambda o: o.update(layer_ids="ab")),
        ("layer_ids floats", lambda o: o.update(layer_ids=[1.0, 2.0])),
        ("n_experts 0", lambda o: o.update(n_experts=0)),
        ("n_experts true", lambda o: o.update(n_experts=True)),
        ("lookahead_distances without lookahead.npy", lambda o: o.update(lookahead_distances=[1])),
    ]:
        case(f"trace meta {name}", st_, steps(*TRACE, edit(meta, change)))
    case("trace meta.json a list", st_, steps(*TRACE, write(meta, "[]")))
    case(
        "trace meta.json NaN n_experts",
        st_,
        steps(
            *TRACE,
            write(meta, '{"n_layers": 2, "top_k": 4, "n_experts": NaN, "expert_bytes": 8192}'),
        ),
    )
    case(
        "trace meta.json a dir",
        st_,
        steps(*TRACE, lambda s: ((s / meta).unlink(), (s / meta).mkdir())),
    )
    case(
        "trace experts.npy a dir",
        st_,
        steps(*TRACE, lambda s: ((s / "tr/experts.npy").unlink(), (s / "tr/experts.npy").mkdir())),
    )
    case(
        "trace experts.npy pickled objects",
        st_,
        steps(*TRACE, npy("tr/experts.npy", np.array([[[None]]], dtype=object))),
    )
    case(
        "trace experts -1",
        st_,
        steps(*TRACE, npy("tr/experts.npy", -np.ones((10, 2, 4), np.int32))),
    )
    case(
        "trace experts bool", st_, steps(*TRACE, npy("tr/experts.npy", np.zeros((10, 2, 4), bool)))
    )
    case(
        "trace experts uint64 2^63",
        st_,
        steps(*TRACE, npy("tr/experts.npy", np.full((10, 2, 4), 2**63, np.uint64))),
    )
    case(
        "trace gates wrong shape",
        st_,
        steps(*TRACE, npy("tr/gates.npy", np.zeros((3,), np.float32))),
    )
    case(
        "trace tokens float", st_, steps(*TRACE, npy("tr/tokens.npy", np.zeros((10,), np.float32)))
    )
    case(
        "trace phase wrong length", st_, steps(*TRACE, npy("tr/phase.npy", np.zeros((3,), np.int8)))
    )
    case(
        "trace gates NaN",
        ["trace", "hotlist", "{s}/tr", "--out", "{s}/h.txt"],
        steps(*TRACE, npy("tr/gates.npy", np.full((10, 2, 4), np.nan, np.float32))),
    )
    case("trace gates a 0-byte file", st_, steps(*TRACE, write("tr/gates.npy", b"")))
    case(
        "trace experts.npy truncated",
        st_,
        steps(
            *TRACE,
            lambda s: (s / "tr/experts.npy").write_bytes((s / "tr/experts.npy").read_bytes()[:-10]),
        ),
    )
    case(
        "trace experts a FIFO",
        st_,
        steps(*TRACE, lambda s: ((s / "tr/experts.npy").unlink(), os.mkfifo(s / "tr/experts.npy"))),
    )
    case(
        "trace meta.json a FIFO",
        st_,
        steps(*TRACE, lambda s: ((s / meta).unlink(), os.mkfifo(s / meta))),
    )
    # trace subcommands
    case("trace stats --budget 0slots", ["trace", "stats", "{trace}", "--budget", "0slots"])
    case("trace stats --budget junk", ["trace", "stats", "{trace}", "--budget", "junk"])
    case("trace stats --like unknown", ["trace", "stats", "{trace}", "--like", "gpt9"])
    case(
        "trace stats --phase decode without phase.npy",
        ["trace", "stats", "{trace}", "--phase", "decode"],
    )
    case("trace stats --json ok", ["trace", "stats", "{trace}", "--json"], expect="ok")
    syn = ["trace", "synth", "{s}/y", "--positions", "4"]
    case("trace synth --like unknown", [*syn, "--like", "gpt9"])
    case("trace synth --targets missing", [*syn, "--targets", "{s}/none.json"])
    case("trace synth --targets a list", [*syn, "--targets", "{s}/t.json"], write("t.json", "[]"))
    case("trace synth --targets not JSON", [*syn, "--targets", "{s}/t.json"], write("t.json", "{"))
    case("trace synth --targets {}", [*syn, "--targets", "{s}/t.json"], write("t.json", "{}"))
    case("trace synth --targets /dev/zero", [*syn, "--targets", "/dev/zero"])
    case(
        "trace synth --positions -5",
        ["trace", "synth", "{s}/y", "--positions", "-5", "--like", "deepseek-v3"],
    )
    case("trace synth out ''", ["trace", "synth", "", "--positions", "4", "--like", "deepseek-v3"])
    case("trace fit without --like or --targets", ["trace", "fit"])
    case("trace fit --like shape-only preset", ["trace", "fit", "--like", "deepseek-v3"])
    case(
        "trace fit --targets union a list",
        ["trace", "fit", "--targets", "{s}/t.json"],
        write(
            "t.json",
            '{"shape": {"n_layers": 2, "n_experts": 16, "top_k": 4, "expert_bytes": 8}, "union": [1, 2]}',
        ),
    )
    case(
        "trace import-hotlist trace missing",
        ["trace", "import-hotlist", "{s}/h", "--trace", "{s}/none"],
        write("h", HOT),
    )
    case(
        "trace import-hotlist /dev/null",
        ["trace", "import-hotlist", "/dev/null", "--trace", "{trace}"],
    )
    case("trace import-hotlist a dir", ["trace", "import-hotlist", "{s}", "--trace", "{trace}"])
    case(
        "trace import-hotlist 4 fields as 3",
        ["trace", "import-hotlist", "{s}/h", "--trace", "{trace}"],
        write("h", HOT + "0 1 5\n"),
    )
    case(
        "trace import-hotlist expert 2^70",
        ["trace", "import-hotlist", "{s}/h", "--trace", "{trace}"],
        write("h", HOT + f"0 {2**70} 5 1.0\n"),
    )
    case("trace hotlist --out ''", ["trace", "hotlist", "{trace}", "--out", ""])
    case("trace hotlist trace missing", ["trace", "hotlist", "{s}/none", "--out", "{s}/h"])
    case(
        "trace record --max-tokens 0",
        ["trace", "record", "{packed}", "--out", "{s}/t", "--max-tokens", "0"],
    )
    case(
        "trace record --prompts missing file",
        ["trace", "record", "{packed}", "--out", "{s}/t", "--prompts", "{s}/none.jsonl"],
    )
    case(
        "trace record --prompts empty file",
        ["trace", "record", "{packed}", "--out", "{s}/t", "--prompts", "{s}/p.jsonl"],
        write("p.jsonl", ""),
    )
    case(
        "trace record --prompts binary",
        ["trace", "record", "{packed}", "--out", "{s}/t", "--prompts", "{s}/p.jsonl"],
        write("p.jsonl", b"\xff\xfe\x00"),
    )
    case(
        "trace record --prompts bad JSON line",
        ["trace", "record", "{packed}", "--out", "{s}/t", "--prompts", "{s}/p.jsonl"],
        write("p.jsonl", '{"text": 1\n'),
    )
    case(
        "trace record --prompts text not a string",
        ["trace", "record", "{packed}", "--out", "{s}/t", "--prompts", "{s}/p.jsonl"],
        write("p.jsonl", '{"text": 5}\n'),
    )
    case(
        "trace record --text-field missing",
        [
            "trace",
            "record",
            "{packed}",
            "--out",
            "{s}/t",
            "--prompts",
            "{s}/p.jsonl",
            "--text-field",
            "q",
        ],
        write("p.jsonl", '{"text": "a"}\n'),
    )
    case(
        "trace record --prompts a FIFO",
        ["trace", "record", "{packed}", "--out", "{s}/t", "--prompts", "{s}/fifo"],
        lambda s: os.mkfifo(s / "fifo"),
    )
    case(
        "trace record --lookahead 0",
        ["trace", "record", "{packed}", "--out", "{s}/t", "--lookahead", "0"],
    )
    case(
        "trace record ok",
        ["trace", "record", "{packed}", "--out", "{s}/t", "--limit", "1", "--max-tokens", "2"],
        expect="ok",
    )
    # union-model
    for v in [
        "",
        "1:4",
        "a:b",
        "1:4,1:5",
        "0:4,2:6",
        "1:-4,2:6",
        "1:4,2:inf",
        "1:4,2:nan",
        "1:4;2:6",
        "1:4,2:6,",
    ]:
        case(f"union-model --union {v!r}", ["union-model", "--union", v])
    for v in ["", "0", "-1", "1,x"]:
        case(f"union-model --gammas {v!r}", ["union-model", "--union", "1:4,2:6", "--gammas", v])
    for v in ["0", "-1", "nan"]:
        case(f"union-model --k {v}", ["union-model", "--union", "1:4,2:6", "--k", v])
    # probe
    case("probe unknown name", ["probe", "telepathy"])
    case(
        "probe eviction --budgets ''", ["probe", "eviction", "--trace", "{trace}", "--budgets", ""]
    )
    case(
        "probe eviction --budgets 0%",
        ["probe", "eviction", "--trace", "{trace}", "--budgets", "0%", "--out", "{s}/o"],
    )
    case(
        "probe eviction --trace a file",
        ["probe", "eviction", "--trace", "{s}/f.txt", "--out", "{s}/o"],
        write("f.txt", "x"),
    )
    case(
        "probe eviction --limit 0",
        ["probe", "eviction", "--model", "{packed}", "--limit", "0", "--out", "{s}/o"],
    )
    case(
        "probe lookahead --trace without lookahead",
        ["probe", "lookahead", "--trace", "{trace}", "--out", "{s}/o"],
    )
    # report
    case("report: missing dir", ["report", "{s}/none"])
    case("report: a file", ["report", "{s}/f.txt"], write("f.txt", "x"))
    case("report: an empty dir", ["report", "{s}/e"], lambda s: (s / "e").mkdir())
    job = [write("j/result.json", "{}"), write("j/config.json", '{"config": {}, "meta": {}}')]
    case(
        "report: summary.json a list",
        ["report", "{s}/j"],
        steps(*job, write("j/summary.json", "[]"), write("j/records.jsonl", "")),
    )
    case(
        "report: records.jsonl garbage",
        ["report", "{s}/j"],
        steps(*job, write("j/summary.json", "{}"), write("j/records.jsonl", "garbage\n")),
    )
    case(
        "report: config.json not JSON",
        ["report", "{s}/j"],
        steps(
            write("j/result.json", "{}"),
            write("j/config.json", "{"),
            write("j/summary.json", "{}"),
        ),
    )
    case(
        "report: result.json binary",
        ["report", "{s}/j"],
        steps(
            write("j/result.json", b"\xff\x00"),
            write("j/config.json", '{"config": {}, "meta": {}}'),
            write("j/summary.json", "{}"),
        ),
    )
    # bench, clock, models
    b = ["bench", "read", "--dir", "{s}", "--rounds", "1", "--threads", "1"]
    for flag, v in [
        ("--file-bytes", "0"),
        ("--file-bytes", "-1"),
        ("--run-bytes", "0"),
        ("--run-bytes", "-5"),
        ("--rounds", "0"),
        ("--threads", "0"),
        ("--file-bytes", str(2**62)),
    ]:
        case(
            f"bench read {flag} {v}",
            [*b, "--file-bytes", "1048576", "--run-bytes", "65536", flag, v],
        )
    case("bench read --dir a file", ["bench", "read", "--dir", "{s}/f.txt"], write("f.txt", "x"))
    for flag, v in [
        ("--tokens", "0"),
        ("--pairs", "0"),
        ("--tokens", "-1"),
        ("--repeats", "0"),
        ("--lookahead-budget", "junk"),
    ]:
        case(f"bench overhead {flag} {v}", ["bench", "overhead", "--model", "{packed}", flag, v])
    case("clock show unknown", ["clock", "show", "m9"])
    case("clock show /dev/null", ["clock", "show", "/dev/null"])
    case("clock show a list.yaml", ["clock", "show", "{s}/p.yaml"], write("p.yaml", "- 1\n- 2\n"))
    case(
        "clock show yaml missing fields",
        ["clock", "show", "{s}/p.yaml"],
        write("p.yaml", "name: x\n"),
    )
    case("clock show bad yaml", ["clock", "show", "{s}/p.yaml"], write("p.yaml", "a: [\n"))
    case(
        "clock show negative bandwidth",
        ["clock", "show", "{s}/p.json"],
        write("p.json", '{"name": "x", "ssd_gbps": -1}'),
    )
    case("models --json", ["models", "--json"], expect="ok")
    case("unknown subcommand", ["fly"])
    return c


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def digest(root: Path) -> dict[str, str]:
    """sha1 of every regular file below root (symlinks and FIFOs by their kind only)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            out[str(p)] = "link:" + os.readlink(p)
        elif p.is_file():
            out[str(p)] = hashlib.sha1(p.read_bytes()).hexdigest()
        elif not p.is_dir():
            out[str(p)] = "special"
    return out


def run_case(argv: list[str]) -> tuple[str, int | None, str]:
    """(raised | hang | exit, exit status, stderr)."""
    err = io.StringIO()
    signal.alarm(TIMEOUT_S)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                rc = main(argv)
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else 2
        return "exit", rc, err.getvalue()
    except Hang:
        return "hang", None, err.getvalue()
    except Exception as e:  # noqa: BLE001 -- a traceback the user would see
        return "raised", None, err.getvalue() + f"{type(e).__name__}: {e}"
    finally:
        signal.alarm(0)


def outcome(kind: str, rc, err: str, expect: str, lost: list[str]) -> str:
    if kind == "hang":
        return "hang"
    if kind == "raised" or "Traceback" in err:
        return "traceback"
    if lost:
        return "data loss"
    if rc == 0:
        return "ok" if expect == "ok" else "silent wrong"
    lines = [x for x in err.strip().splitlines() if not x.startswith("specdec: note")]
    # argparse's own error: its usage line(s), then `specdec CMD: error: ...` (one message)
    argparse_error = len(lines) > 1 and lines[0].startswith("usage:") and ": error: " in lines[-1]
    if len(lines) != 1 and not argparse_error:
        return "multi-line"
    return "ok" if expect == "error" else "false refusal"


def main_() -> None:
    ensure_fast_blas()  # before any chdir: main() would re-exec from the case's directory
    signal.signal(signal.SIGALRM, _alarm)
    base = Path(tempfile.mkdtemp(prefix="specdec-adv-"))
    os.environ["SPECDEC_CACHE"] = str(base / "cache")
    model = make_random("deepseek_v3", base / "model", bits=4, seed=0)
    packed = pack(model, base / "packed")
    rng = np.random.default_rng(0)
    experts = np.stack([[rng.permutation(16)[:4] for _ in range(2)] for _ in range(10)])
    save_trace(Trace(experts.astype(np.int32), 16, [8192, 8192], model="random"), base / "trace")
    shared = {p: digest(p) for p in (model, packed, base / "trace")}
    rows = []
    here = os.getcwd()
    t0 = time.perf_counter()
    try:
        for i, (name, argv, setup, expect) in enumerate(cases()):
            s = base / f"case{i:03d}"
            s.mkdir()
            if setup:
                setup(s)
            before = digest(s)
            fill = {
                "{packed}": str(packed),
                "{model}": str(model),
                "{trace}": str(base / "trace"),
                "{s}": str(s),
            }
            args = [a for a in argv]
            for k, v in fill.items():
                args = [a.replace(k, v) for a in args]
            os.chdir(s)
            t = time.perf_counter()
            kind, rc, err = run_case(args)
            os.chdir(here)
            after = digest(s)
            lost = [p for p, h in before.items() if after.get(p) != h]
            lost += [str(p) for p, d in shared.items() if digest(p) != d]
            res = outcome(kind, rc, err, expect, lost)
            last = (err.strip().splitlines() or [""])[-1]
            rows.append(
                {
                    "case": name,
                    "command": "specdec " + " ".join(argv),
                    "expect": expect,
                    "outcome": res,
                    "exit": rc,
                    "stderr": last.replace(str(s), "{s}").replace(str(base), "{base}")[:300],
                    "lost": [p.replace(str(s), "{s}").replace(str(base), "{base}") for p in lost],
                    "seconds": round(time.perf_counter() - t, 2),
                }
            )
            print(f"{res:>14}  {name}", flush=True)
            shutil.rmtree(s, ignore_errors=True)
    finally:
        os.chdir(here)
        shutil.rmtree(base, ignore_errors=True)
    tally = dict(Counter(r["outcome"] for r in rows))
    result = {
        "command": "python scripts/adversarial.py",
        "cases": len(rows),
        "tally": tally,
        "wall_s": round(time.perf_counter() - t0, 1),
        "rows": rows,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_result(RESULTS / "adversarial.json", result)
    bad = [r for r in rows if r["outcome"] != "ok"]
    md = [
        "# Adversarial pass: hostile inputs issue 22 did not list",
        "",
        "Command: `python scripts/adversarial.py` (in process, a 20 s alarm per case; all rows in",
        "adversarial.json). Outcomes are defined in the script's docstring.",
        "",
        f"{len(rows)} cases: " + ", ".join(f"{n} {k}" for k, n in sorted(tally.items())),
        "",
        "| case | outcome | stderr (last line) |",
        "|---|---|---|",
        *[f"| {r['case']} | {r['outcome']} | {r['stderr'].replace('|', '/')[:160]} |" for r in bad],
        "",
    ]
    write_atomic_text(RESULTS / "adversarial.md", "\n".join(md))
    print(f"{len(rows)} cases: {tally}")


def write_atomic_text(path: Path, text: str) -> None:
    from specdec.core.files import write_atomic

    write_atomic(path, text)


if __name__ == "__main__":
    main_()
