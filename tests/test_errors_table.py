"""Every row of docs/errors.md, run: bad input gives exactly its documented one-line error.

Run: `pytest tests/test_errors_table.py`. The table in docs/errors.md is the source of truth:
each row is `case | command | message`; this test reads it, prepares the case's bad input
(SETUPS below, one per case, keyed by the case name), runs the command through the real CLI
entry point (`specdec.cli.main`, in process: the same code path as the `specdec` script, minus
the interpreter start) and requires exit status 2, nothing on stderr but
`specdec: error: <message>` and no traceback. Placeholders: {model} a random DeepSeek-V3
checkpoint, {packed} a fresh packed copy of it, {trace} a routing trace, {tmp} an empty directory.
tests/test_store_errors.py checks a few of these through a subprocess (exit code, no traceback).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from specdec.cli import main
from specdec.store.layout import EXPERTS_BIN, EXPERTS_JSON, ExpertIndex
from specdec.store.pack import pack
from specdec.trace.format import Trace, save_trace
from tests.helpers import random_checkpoint

DOC = Path(__file__).resolve().parents[1] / "docs" / "errors.md"
ROW = re.compile(r"^\| (?P<case>[^|]+?) \| `(?P<command>[^`]+)` \| (?P<message>.+) \|$")


def doc_rows() -> list[tuple[str, str, str]]:
    rows = [ROW.match(line) for line in DOC.read_text().splitlines()]
    return [(m["case"], m["command"], m["message"].replace("\\|", "|")) for m in rows if m]


def edit_config(path: Path, **changes) -> None:
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


def edit_meta(trace: Path, **changes) -> None:
    meta = json.loads((trace / "meta.json").read_text())
    meta.update(changes)
    (trace / "meta.json").write_text(json.dumps(meta))


def corrupt_layer(path: Path, layer: int) -> None:
    """Flip one byte in every expert block of `layer` (a disk or copy gone wrong)."""
    layout = ExpertIndex.load(path).layers[layer]
    with open(path / EXPERTS_BIN, "r+b") as f:
        for off in layout.offsets:
            f.seek(int(off) + 100)
            b = f.read(1)
            f.seek(int(off) + 100)
            f.write(bytes([b[0] ^ 0xFF]))


def save_experts(trace: Path, array: np.ndarray) -> None:
    np.save(trace / "experts.npy", array)


def nothing(ctx: dict[str, Path]) -> None:
    pass


# case name (first column of docs/errors.md) -> how to make its bad input
SETUPS: dict[str, Callable[[dict[str, Path]], None]] = {
    "model path does not exist": nothing,
    "pack: model directory does not exist": nothing,
    "verify: directory does not exist": nothing,
    "missing experts.json (verify)": lambda c: (c["packed"] / EXPERTS_JSON).unlink(),
    "missing experts.json (generate)": lambda c: (c["packed"] / EXPERTS_JSON).unlink(),
    "experts.json is not JSON": lambda c: (c["packed"] / EXPERTS_JSON).write_text('{"version": 1,'),
    "experts.json lacks fields": lambda c: (c["packed"] / EXPERTS_JSON).write_text(
        '{"version": 1, "layers": {}}'
    ),
    "experts.json from another format version": lambda c: (c["packed"] / EXPERTS_JSON).write_text(
        '{"version": 0}'
    ),
    "truncated experts.bin (generate)": lambda c: shrink(c["packed"] / EXPERTS_BIN),
    "truncated experts.bin (verify)": lambda c: shrink(c["packed"] / EXPERTS_BIN),
    "truncated model.safetensors (generate)": lambda c: shrink(c["packed"] / "model.safetensors"),
    "truncated mtp.safetensors (verify)": lambda c: shrink(c["packed"] / "mtp.safetensors"),
    "corrupt expert block (verify)": lambda c: corrupt_layer(c["packed"], 2),
    "corrupt expert block (--verify-checksums)": lambda c: corrupt_layer(c["packed"], 2),
    "config.json: other expert count": lambda c: edit_config(c["packed"], n_routed_experts=32),
    "config.json: other MoE width": lambda c: edit_config(c["packed"], moe_intermediate_size=128),
    "config.json: other MoE layers": lambda c: edit_config(c["packed"], first_k_dense_replace=0),
    "config.json is not JSON": lambda c: (c["packed"] / "config.json").write_text("{"),
    "unknown model family": lambda c: edit_config(c["packed"], model_type="olmoe"),
    "trace: wrong shape": lambda c: save_experts(c["trace"], np.zeros((10, 2), np.int32)),
    "trace: wrong layer count": lambda c: save_experts(c["trace"], np.zeros((10, 3, 4), np.int32)),
    "trace: wrong dtype": lambda c: save_experts(c["trace"], np.zeros((10, 2, 4), np.float32)),
    "trace: not a trace directory": lambda c: shutil.rmtree(c["trace"]),
    "trace: meta.json field of the wrong type": lambda c: edit_meta(c["trace"], n_experts="x"),
    "budget below one position's top-k": nothing,
    "budget below one position's top-k (simulate)": nothing,
    "budget that does not parse": nothing,
    "gamma below 1": nothing,
    "max tokens below 1": nothing,
    "reader threads below 1": nothing,
    "unknown drafter": nothing,
    "unknown cache policy": nothing,
    "unknown cache policy (simulate)": nothing,
    "unknown device profile": nothing,
    "negative lookahead": nothing,
}


def shrink(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 4096)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("errors")
    model = random_checkpoint(root, "deepseek_v3", 4)
    rng = np.random.default_rng(0)
    experts = np.stack([[rng.permutation(16)[:4] for _ in range(2)] for _ in range(10)])
    save_trace(Trace(experts, 16, [8192, 8192], model="random"), root / "trace")
    return {"model": model, "packed": pack(model, root / "packed"), "trace": root / "trace"}


def test_every_case_has_a_row_and_a_setup():
    assert sorted(case for case, _, _ in doc_rows()) == sorted(SETUPS)


@pytest.mark.parametrize("case, command, message", doc_rows(), ids=[r[0] for r in doc_rows()])
def test_documented_error(pristine, tmp_path, monkeypatch, capsys, case, command, message):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    ctx = {
        "model": pristine["model"],
        "packed": Path(shutil.copytree(pristine["packed"], tmp_path / "packed")),
        "trace": Path(shutil.copytree(pristine["trace"], tmp_path / "trace")),
        "tmp": tmp_path,
    }
    SETUPS[case](ctx)

    def fill(text: str) -> str:
        for name, value in ctx.items():
            text = text.replace("{" + name + "}", str(value))
        return text

    argv = shlex.split(fill(command))
    assert argv[0] == "specdec"
    assert main(argv[1:]) == 2, f"{case}: expected exit status 2"
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines() == [f"specdec: error: {fill(message)}"]
