"""Every row of docs/errors.md, run: bad input gives exactly its documented one-line error.

Run: `pytest tests/cli/test_errors_table.py`. The table in docs/errors.md is the source of truth:
each row is `case | command | message`; this test reads it, prepares the case's bad input
(SETUPS below, one per case, keyed by the case name), runs the command through the real CLI
entry point (`specdec.cli.main`, in process: the same code path as the `specdec` script, minus
the interpreter start) and requires exit status 2, nothing on stderr but
`specdec: error: <message>` and no traceback. Placeholders: {model} a random DeepSeek-V3
checkpoint, {packed} a fresh packed copy of it, {trace} a routing trace, {tmp} an empty directory,
{profiles} the built-in device profile names (specdec.clock.BUILTIN_NAMES, comma-separated).
tests/store/test_store_errors.py checks a few of these through a subprocess (exit code, no traceback).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
import shlex
import shutil
import sys
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import specdec.pack.pack as pack_module
from specdec.cache.policies import POLICIES
from specdec.cache.spec import OFFLINE
from specdec.cli import main
from specdec.clock import BUILTIN_NAMES
from specdec.decode.drafters import drafter_usage, drafting_usage
from specdec.decode.records import PassRecord
from specdec.pack.pack import pack
from specdec.report.rundir import JobCard
from specdec.store.layout import EXPERTS_BIN, EXPERTS_JSON, ExpertIndex
from specdec.trace.format import Trace, save_trace
from tests.helpers import random_checkpoint

DOC = Path(__file__).resolve().parents[2] / "docs" / "errors.md"
# lists the messages take from a registry (docs/errors.md says which placeholder is which)
REGISTRIES = {
    "drafters": drafter_usage(),
    "drafting": drafting_usage(),
    "policies": ", ".join(POLICIES),
    "offline_policies": ", ".join(OFFLINE),
}
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


def hub_offline(ctx: dict) -> None:
    """huggingface_hub offline with an empty cache (HF_HUB_OFFLINE=1, HF_HUB_CACHE=...)."""
    import huggingface_hub.constants as hub

    ctx["monkeypatch"].setattr(hub, "HF_HUB_OFFLINE", True)
    ctx["monkeypatch"].setattr(hub, "HF_HUB_CACHE", str(ctx["tmp"] / "hub"))


def without_scipy(ctx: dict) -> None:
    """`pip install specdec` without its sim extra: importing scipy fails."""
    ctx["monkeypatch"].setitem(sys.modules, "scipy.optimize", None)


def mixed_pack(c) -> None:
    """{tmp}/mixed: the model packed with cold blocks (--cold-bits 2), one hot expert."""
    pack(c["model"], c["tmp"] / "mixed", cold_bits=2, hotlist=[(1, 0)])


def nothing(ctx: dict[str, Path]) -> None:
    pass


def edit_index(path: Path, edit: Callable[[dict], object]) -> None:
    index = json.loads((path / EXPERTS_JSON).read_text())
    edit(index)
    (path / EXPERTS_JSON).write_text(json.dumps(index))


def first_layer(index: dict) -> dict:
    return index["layers"][min(index["layers"], key=int)]


def zero_experts(index: dict) -> None:
    first_layer(index).update(n_experts=0, offsets=[], crc32=[])


def overlap_tensors(index: dict) -> None:
    """The second tensor of the first layer's blocks moved onto the first one's bytes."""
    tensors = sorted(first_layer(index)["tensors"], key=lambda t: t["offset"])
    tensors[1]["offset"] = tensors[0]["offset"]


def set_quant(index: dict, **fields) -> None:
    for q in first_layer(index)["quant"].values():
        q.update(fields)


def symlink_loop(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.name)


def dir_instead_of(path: Path) -> None:
    path.unlink()
    path.mkdir()


def reshape_trace(trace: Path, experts: np.ndarray) -> None:
    """experts.npy and meta.json rewritten together (consistent, but not a possible trace)."""
    save_experts(trace, experts)
    edit_meta(trace, n_layers=experts.shape[1], top_k=experts.shape[2])


def hotlist(ctx: dict, body: bytes) -> None:
    (ctx["tmp"] / "hot.txt").write_bytes(b"# ds4 expert hotlist v1\n" + body)


def user_notes(ctx: dict) -> None:
    (ctx["tmp"] / "notes.yaml").write_text("my notes\n")  # a user's file, not a profile


def old_job(ctx: dict) -> None:
    """A finished job directory whose records were written by an older specdec (no union)."""
    job = ctx["tmp"] / "job"
    job.mkdir()
    for name, obj in (("result.json", {}), ("config.json", {"config": {}, "meta": {}})):
        (job / name).write_text(json.dumps(obj))
    (job / "summary.json").write_text("{}")
    row = {f.name: 0 for f in dataclasses.fields(PassRecord) if f.name != "draft_union"}
    (job / "records.jsonl").write_text(json.dumps(row) + "\n")


def finished_job(ctx: dict, keep: int | None = None) -> None:
    """A finished job directory with 3 records (the first `keep` of them left, if given)."""
    job = ctx["tmp"] / "job"
    job.mkdir()
    card = JobCard("union_cost", "none", 1, "m4-24gb", {"model": "tiny"}, "tiny")
    config = {"config": {}, "meta": {}, "job": dataclasses.asdict(card)}
    for name, obj in (("result.json", {"records": 3}), ("config.json", config)):
        (job / name).write_text(json.dumps(obj))
    (job / "summary.json").write_text("{}")
    row = {f.name: 0 for f in dataclasses.fields(PassRecord)}
    rows = [json.dumps({**row, "pass_idx": i}) + "\n" for i in range(3)]
    (job / "records.jsonl").write_text("".join(rows[:keep]))


def fifo_instead_of(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def no_space(ctx: dict, module, name: str) -> None:
    """Fault injection (a full disk cannot be made here without root): `module.name` raises
    ENOSPC the way a write(2) on a full file system does."""

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    ctx["monkeypatch"].setattr(module, name, full)


def records_os_without_space(ctx: dict) -> None:
    import specdec.decode.records as records

    fake = types.SimpleNamespace(**{k: getattr(os, k) for k in dir(os) if not k.startswith("__")})
    no_space({"monkeypatch": ctx["monkeypatch"]}, fake, "write")
    ctx["monkeypatch"].setattr(records, "os", fake)


def non_empty_dir(ctx: dict) -> None:
    (ctx["tmp"] / "mine").mkdir()
    (ctx["tmp"] / "mine" / "notes.txt").write_text("keep")


# case name (first column of docs/errors.md) -> how to make its bad input
SETUPS: dict[str, Callable[[dict[str, Path]], None]] = {
    "model path does not exist": nothing,
    "device profile missing fields": lambda c: (c["tmp"] / "p.yaml").write_text("name: x\n"),
    "--lookahead beyond the MoE layers": nothing,
    "trace hotlist: --out empty": nothing,
    "Hugging Face repo not cached, offline": hub_offline,
    "pack: model directory does not exist": nothing,
    "verify: directory does not exist": nothing,
    "pack: --cold-bits not an MLX width": lambda c: hotlist(c, b"1 0 5 1.0\n"),
    "pack: --hotlist without --cold-bits": lambda c: hotlist(c, b"1 0 5 1.0\n"),
    "pack: --cold-bits not below the experts' bits": lambda c: hotlist(c, b"1 0 5 1.0\n"),
    "pack: hotlist names an unknown expert": lambda c: hotlist(c, b"9 0 5 1.0\n"),
    "pack: empty hotlist": lambda c: hotlist(c, b""),
    "pack: hotlist missing": nothing,
    "pack: --hot-access-share not a fraction": lambda c: hotlist(c, b"1 0 5 1.0\n"),
    "missing experts.json (verify)": lambda c: (c["packed"] / EXPERTS_JSON).unlink(),
    "missing experts.json (generate)": lambda c: (c["packed"] / EXPERTS_JSON).unlink(),
    "experts.json is not JSON": lambda c: (c["packed"] / EXPERTS_JSON).write_text('{"version": 1,'),
    "experts.json lacks fields": lambda c: (c["packed"] / EXPERTS_JSON).write_text(
        '{"version": 2, "layers": {}}'
    ),
    "experts.json from another format version": lambda c: (c["packed"] / EXPERTS_JSON).write_text(
        '{"version": 0}'
    ),
    "truncated experts.bin (generate)": lambda c: shrink(c["packed"] / EXPERTS_BIN),
    "truncated experts.bin (verify)": lambda c: shrink(c["packed"] / EXPERTS_BIN),
    "truncated model.safetensors (generate)": lambda c: shrink(c["packed"] / "model.safetensors"),
    "truncated mtp.safetensors (verify)": lambda c: shrink(c["packed"] / "mtp.safetensors"),
    "model.safetensors cut to nothing (generate)": lambda c: os.truncate(
        c["packed"] / "model.safetensors", 0
    ),
    "model.safetensors cut inside its header (generate)": lambda c: os.truncate(
        c["packed"] / "model.safetensors", 10
    ),
    "verify: a file, not a directory": lambda c: (c["tmp"] / "steps.jsonl").write_text("{}\n"),
    "an option without its value": nothing,
    "corrupt expert block (verify)": lambda c: corrupt_layer(c["packed"], 2),
    "corrupt expert block (--verify-checksums)": lambda c: corrupt_layer(c["packed"], 2),
    "config.json: other expert count": lambda c: edit_config(c["packed"], n_routed_experts=32),
    "config.json: other MoE width": lambda c: edit_config(c["packed"], moe_intermediate_size=128),
    "config.json: other MoE layers": lambda c: edit_config(c["packed"], first_k_dense_replace=0),
    "config.json is not JSON": lambda c: (c["packed"] / "config.json").write_text("{"),
    "extract-mtp: a family without an MTP layout": lambda c: edit_config(
        c["packed"], model_type="mixtral"
    ),
    "extract-mtp: a checkpoint without its MTP layer": lambda c: (
        c["packed"] / "mtp.safetensors"
    ).unlink(),
    "+scratch on a mixed-precision pack": mixed_pack,
    "extract-mtp: a GGUF MLX cannot read": lambda c: (
        edit_config(c["packed"], model_type="deepseek_v41"),
        (c["packed"] / "mtp.gguf").write_bytes(b"not a gguf"),
    ),
    "model_type mlx-lm does not know": lambda c: edit_config(c["packed"], model_type="not_a_model"),
    "a dense checkpoint (generate)": lambda c: edit_config(c["packed"], model_type="llama"),
    "a dense checkpoint (pack)": lambda c: edit_config(model_copy(c), model_type="llama"),
    "self drafter without a router adapter": lambda c: no_router(c),
    "lookahead without a router adapter": lambda c: no_router(c),
    "trace record without a router adapter": lambda c: no_router(c),
    "trace: wrong shape": lambda c: save_experts(c["trace"], np.zeros((10, 2), np.int32)),
    "trace: wrong layer count": lambda c: save_experts(c["trace"], np.zeros((10, 3, 4), np.int32)),
    "trace: wrong dtype": lambda c: save_experts(c["trace"], np.zeros((10, 2, 4), np.float32)),
    "trace: not a trace directory": lambda c: shutil.rmtree(c["trace"]),
    "trace: meta.json field of the wrong type": lambda c: edit_meta(c["trace"], n_experts="x"),
    "budget below one position's top-k": nothing,
    "budget below one position's top-k (simulate)": nothing,
    "simulate --gamma auto without a model config": nothing,
    "simulate --gamma auto with an offline bound": nothing,
    "budget that does not parse": nothing,
    "--warm with a budget below every expert": nothing,
    "gamma below 1": nothing,
    "gamma neither a number nor auto": nothing,
    "max tokens below 1": nothing,
    "reader threads below 1": nothing,
    "unknown drafter": nothing,
    "unknown cache policy": nothing,
    "unknown policy option": nothing,
    "unknown cache policy (simulate)": nothing,
    "policy option on a bound (simulate)": nothing,
    "unknown device profile": nothing,
    "negative lookahead": nothing,
    "prompt not UTF-8": nothing,
    "--chat without a chat template": nothing,
    "--drafter with mlx-lm's --draft-model": nothing,
    "--gamma with mlx-lm's --num-draft-tokens": nothing,
    "--num-draft-tokens negative": nothing,
    "negative seed": nothing,
    "temperature NaN": nothing,
    "temperature inf": nothing,
    "temperature below 1e-6": nothing,
    "NaN weights (greedy)": lambda c: nan_weights(c),
    "NaN weights (sampled)": lambda c: nan_weights(c),
    "seed above 2^32-1": nothing,
    "negative seed (simulate)": nothing,
    "negative seed (trace synth)": nothing,
    "negative seed (trace fit)": nothing,
    "negative seed (make-random)": nothing,
    "trace record: --limit 0": nothing,
    "trace record: --limit -1": nothing,
    "trace record: --max-prompt-tokens 0": nothing,
    "trace: no positions (simulate)": lambda c: save_experts(
        c["trace"], np.zeros((0, 2, 4), np.int32)
    ),
    "trace: no positions (trace stats)": lambda c: save_experts(
        c["trace"], np.zeros((0, 2, 4), np.int32)
    ),
    "trace: experts.npy of 0 bytes": lambda c: (c["trace"] / "experts.npy").write_bytes(b""),
    "trace: a layer twice in layer_ids": lambda c: edit_meta(c["trace"], layer_ids=[1, 1]),
    "make-random: --layers without --like": nothing,
    "make-random: --dtype with --like": nothing,
    "SPECDEC_BLAS names no file": lambda c: c["monkeypatch"].setenv(
        "SPECDEC_BLAS", str(c["tmp"] / "typo.so")
    ),
    "simulate --config is a JSON list": lambda c: (c["tmp"] / "list.json").write_text("[1, 2]"),
    "simulate --gamma auto: the MiniMax preset for another model's trace": nothing,
    "simulate: --profile without auto": nothing,
    "simulate: --config and --profile without auto": nothing,
    "gamma above 1024": nothing,
    "hotlist is a device": nothing,
    "extract-mtp: config.json not JSON": lambda c: hf_config(c, "not json"),
    "extract-mtp: config.json a list": lambda c: hf_config(c, "[]"),
    "extract-mtp: num_hidden_layers not a number": lambda c: hf_config(
        c, '{"model_type": "deepseek_v3", "num_hidden_layers": "x"}'
    ),
    "chat template with a syntax error": lambda c: chat_template(c, "{{ messages[0]['content'] }"),
    "chat template that raises": lambda c: chat_template(
        c, "{{ raise_exception('only user turns') }}"
    ),
    "simulate: an empty --budget": nothing,
    "simulate: an empty --gamma": nothing,
    "hotlist: a NaN weight": lambda c: hotlist(c, b"0 1 5 nan\n"),
    "trace: lookahead_distances without lookahead.npy": lambda c: edit_meta(
        c["trace"], lookahead_distances=[1]
    ),
    "trace: NaN gates": lambda c: np.save(c["trace"] / "gates.npy", np.full((10, 2, 4), np.nan)),
    "trace: meta.json a list": lambda c: (c["trace"] / "meta.json").write_text("[]"),
    "trace synth: --targets a device": nothing,
    "bench overhead: --pairs 0": nothing,
    "unknown subcommand": nothing,
    "trace record: a prompt that is not text": lambda c: (c["tmp"] / "p.jsonl").write_text(
        '{"text": 5}\n'
    ),
    "prompt past the context": lambda c: edit_config(c["packed"], max_position_embeddings=4),
    "draft model without a path": nothing,
    "draft model is a packed directory": nothing,
    "--records is a directory": nothing,
    "--records file exists": lambda c: (c["tmp"] / "r.jsonl").write_text("{}\n"),
    "disk full writing records": records_os_without_space,
    "disk full while packing": lambda c: no_space(c, pack_module, "_write_experts"),
    "experts.json is a list": lambda c: (c["packed"] / EXPERTS_JSON).write_text("[]"),
    "experts.json layers is a list": lambda c: edit_index(
        c["packed"], lambda i: i.update(layers=list(i["layers"].values()))
    ),
    "a layer with 0 experts": lambda c: edit_index(c["packed"], zero_experts),
    "negative crc32": lambda c: edit_index(
        c["packed"], lambda i: first_layer(i)["crc32"].__setitem__(0, -5)
    ),
    "block offset 2^70": lambda c: edit_index(
        c["packed"], lambda i: first_layer(i)["offsets"].__setitem__(0, 2**70)
    ),
    "quantization bits 0": lambda c: edit_index(c["packed"], lambda i: set_quant(i, bits=0)),
    "quantization mode not its tensors'": lambda c: edit_index(
        c["packed"], lambda i: set_quant(i, mode="mxfp4")
    ),
    "quantization mode unknown": lambda c: edit_index(
        c["packed"], lambda i: set_quant(i, mode="fp3")
    ),
    "two tensors overlap in a block": lambda c: edit_index(c["packed"], overlap_tensors),
    "a tensor of no safetensors dtype": lambda c: edit_index(
        c["packed"],
        lambda i: next(
            t for t in first_layer(i)["tensors"] if t["name"] == "down_proj.weight"
        ).update(dtype="Q7"),
    ),
    "quantization group_size 0": lambda c: edit_index(
        c["packed"], lambda i: set_quant(i, group_size=0)
    ),
    "config.json without num_experts_per_tok": lambda c: edit_config_drop(
        c["packed"], "num_experts_per_tok"
    ),
    "config.json: other num_hidden_layers": lambda c: edit_config(c["packed"], num_hidden_layers=2),
    "experts.json is a symlink loop": lambda c: symlink_loop(c["packed"] / EXPERTS_JSON),
    "tokenizer missing": lambda c: [p.unlink() for p in c["packed"].glob("tokenizer*")],
    "tokenizer garbage": lambda c: (c["packed"] / "tokenizer.json").write_text("garbage{"),
    "experts.bin is a directory": lambda c: dir_instead_of(c["packed"] / EXPERTS_BIN),
    "budget 1e99%": nothing,
    "budget inf%": nothing,
    "budget of 10^23 slots": nothing,
    "trace: no MoE layers": lambda c: reshape_trace(c["trace"], np.zeros((10, 0, 4), np.int32)),
    "trace: top_k 0": lambda c: reshape_trace(c["trace"], np.zeros((10, 2, 0), np.int32)),
    "trace: n_experts 2^62": lambda c: edit_meta(c["trace"], n_experts=2**62),
    "hotlist: an expert twice": lambda c: hotlist(c, b"0 1 5 1.0\n0 1 5 1.0\n"),
    "hotlist: binary bytes": lambda c: hotlist(c, b"\xff\xfe\x00\x01\n"),
    "simulate: 10^12 slots": nothing,
    "simulate: a share of no experts": nothing,
    "probe: a bare number as a budget": nothing,
    "probe gates on a trace": nothing,
    "union-model: --plot not writable": lambda c: (c["tmp"] / "file").write_text("x"),
    "union-model: union shrinks with gamma": nothing,
    "union-model without the sim extra": without_scipy,
    "trace synth: more positions than memory": lambda c: c.update(
        memory=f"{os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 1e9:.1f}"
    ),
    "trace synth: no positions": nothing,
    "union-model: k above U(1)": nothing,
    "trace record: bad --lookahead": nothing,
    "trace record: --out holds the model": nothing,
    "trace record: --overwrite on a folder it did not write": non_empty_dir,
    "bench read: --dir missing": nothing,
    "bench read: --pack not a pack": nothing,
    "bench read: --pack a mixed pack": mixed_pack,
    "bench read: --pack beside a test file's options": nothing,
    "bench device: --read-pack beside a test file's size": nothing,
    "gamma above 1 without a drafter": nothing,
    "trace synth: an empty output path": nothing,
    "trace record: a --lookahead distance twice": nothing,
    "trace record: --out empty": nothing,
    "make-random: an empty output path": nothing,
    "pack: an empty output path": nothing,
    "bench device: --out a file it did not write": user_notes,
    "bench device: --overwrite on a file it did not write": user_notes,
    "bench device: --out in no folder": nothing,
    "bench speedup: a budget that holds every expert": nothing,
    "bench speedup: γ 1": nothing,
    "bench speedup: drafter none": nothing,
    "bench speedup: --tokens 1": nothing,
    "bench device: --dir missing": nothing,
    "bench device: a zero size": nothing,
    "bench device: zero threads": nothing,
    "bench device: model missing": nothing,
    "report: records from an older specdec": old_job,
    "reader threads: far too many": nothing,
    "union-model: γ beyond 1024": nothing,
    "union-model: γ 0 in the table": nothing,
    "a pack without its config.json": lambda c: (c["packed"] / "config.json").unlink(),
    "experts.bin is a FIFO (verify)": lambda c: fifo_instead_of(c["packed"] / EXPERTS_BIN),
    "experts.bin is a FIFO (generate)": lambda c: fifo_instead_of(c["packed"] / EXPERTS_BIN),
    "SPECDEC_CACHE names a file": lambda c: (c["tmp"] / "cache").write_text("not a folder"),
    "report: --out a file": lambda c: (finished_job(c), (c["tmp"] / "file.txt").write_text("x")),
    "report: --out a folder it did not write": lambda c: (finished_job(c), non_empty_dir(c)),
    "report: --out the job directory": finished_job,
    "report: records cut short": lambda c: finished_job(c, keep=1),
    "trace hotlist: --out exists": lambda c: hotlist(c, b""),
    "trace hotlist: --out a device or FIFO": lambda c: os.mkfifo(c["tmp"] / "pipe"),
    "trace hotlist: --out a symlink": lambda c: (c["tmp"] / "link.txt").symlink_to("gone.txt"),
    "trace hotlist: --overwrite on a file it did not write": nothing,
    "--records --append to a file that is not a record file": nothing,
    "extract-mtp: OUT_DIR has an mtp.safetensors": nothing,
    "trace synth onto a symlink": lambda c: (
        (c["tmp"] / "real").mkdir() or (c["tmp"] / "link").symlink_to("real")
    ),
    "union-model: --plot over a user's plot": lambda c: (
        (c["tmp"] / "mine").mkdir()
        or (c["tmp"] / "mine" / "union_vs_gamma.png").write_text("my plot")
    ),
    "pack onto a symlink": lambda c: (
        (c["tmp"] / "real").mkdir() or (c["tmp"] / "link").symlink_to("real")
    ),
    "pack into the model's parent": nothing,
    "pack into the model itself": nothing,
    "pack --force into a folder pack did not write": non_empty_dir,
    "make-random into a non-empty folder": non_empty_dir,
    "make-random --force into a folder it did not write": non_empty_dir,
    "config.json: top-k 0": lambda c: edit_config(c["packed"], num_experts_per_tok=0),
    "config.json: top-k above the expert count": lambda c: edit_config(
        c["packed"], num_experts_per_tok=99
    ),
    "config.json: negative hidden_size": lambda c: edit_config(c["packed"], hidden_size=-64),
    "config.json: fractional hidden_size": lambda c: edit_config(c["packed"], hidden_size=64.5),
    "config.json: hidden_size missing": lambda c: edit_config_drop(c["packed"], "hidden_size"),
    "config.json: quantization removed": lambda c: drop_quantization(c["packed"]),
    "config.json: quantization a string (pack)": lambda c: edit_config(
        model_copy(c), quantization="4bit"
    ),
    "config.json: negative expert count": lambda c: edit_config(c["packed"], n_routed_experts=-16),
    "config.json: rope_theta not a number": lambda c: edit_config(c["packed"], rope_theta="abc"),
    "config.json: top-k a string": lambda c: edit_config(c["packed"], num_experts_per_tok="4"),
    "config.json: max_position_embeddings a string": lambda c: edit_config(
        c["packed"], max_position_embeddings="big"
    ),
    "experts.json: quantized weight as F32": lambda c: edit_index(c["packed"], quantized_as_f32),
    "experts.json: layer key -1": lambda c: edit_index(
        c["packed"], lambda i: i["layers"].__setitem__("-1", i["layers"].pop("1"))
    ),
    "experts.json: two experts on one block": lambda c: edit_index(
        c["packed"], two_experts_one_block
    ),
    "experts.json: version a string": lambda c: (c["packed"] / EXPERTS_JSON).write_text(
        '{"version": "1"}'
    ),
    "experts.json: a symlink to /dev/zero": lambda c: symlink_to(
        c["packed"] / EXPERTS_JSON, "/dev/zero"
    ),
    "model.safetensors: header edited after packing": lambda c: edit_header(
        c["packed"] / "model.safetensors", lambda h: h["model.norm.weight"].update(dtype="I32")
    ),
    "model.safetensors: a flipped byte (verify)": lambda c: flip_byte(
        c["packed"] / "model.safetensors", 100
    ),
    "mtp.safetensors: a flipped byte (verify)": lambda c: flip_byte(
        c["packed"] / "mtp.safetensors", 100
    ),
    "mtp.safetensors deleted (generate)": lambda c: (c["packed"] / "mtp.safetensors").unlink(),
    "mtp.safetensors deleted (verify)": lambda c: (c["packed"] / "mtp.safetensors").unlink(),
    "pack: a packed directory as the model": nothing,
    "pack: a source header that is a JSON list": lambda c: edit_header(
        model_copy(c) / "model.safetensors", lambda h: b"[1,2,3]"
    ),
    "pack: reversed data_offsets in a source header": lambda c: source_tensor(
        c, lambda t: t.update(data_offsets=t["data_offsets"][::-1])
    ),
    "pack: a source dtype that lies": lambda c: source_tensor(c, lambda t: t.update(dtype="F32")),
    "config.json: a head count the weights do not fit": lambda c: edit_config(
        c["packed"], num_attention_heads=3
    ),
    "simulate --gamma auto: a config of another model": lambda c: edit_meta(
        c["trace"], n_experts=256
    ),
    "probe eviction: traces of two models": lambda c: save_trace(
        Trace(np.zeros((10, 3, 4), np.int32), 16, [8192] * 3, model="other"), c["tmp"] / "other"
    ),
}


def symlink_to(path: Path, target: str) -> None:
    path.unlink()
    path.symlink_to(target)


def model_copy(c: dict) -> Path:
    """{model} becomes a copy of the checkpoint, for a case that damages the model itself."""
    c["model"] = Path(shutil.copytree(c["model"], c["tmp"] / "model"))
    return c["model"]


def edit_header(path: Path, edit: Callable[[dict], object]) -> None:
    """Edit a safetensors header in place (same length, padded with spaces); edit() may return
    bytes to write instead of the edited JSON."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    new = edit(header)
    body = new if isinstance(new, bytes) else json.dumps(header, separators=(",", ":")).encode()
    assert len(body) <= n
    path.write_bytes(raw[:8] + body + b" " * (n - len(body)) + raw[8 + n :])


def source_tensor(c: dict, edit: Callable[[dict], object]) -> None:
    """Edit the down_proj experts' header entry in a copy of {model}'s model.safetensors."""
    name = "model.layers.1.mlp.switch_mlp.down_proj.weight"
    edit_header(model_copy(c) / "model.safetensors", lambda h: edit(h[name]))


def flip_byte(path: Path, from_end: int) -> None:
    with open(path, "r+b") as f:
        f.seek(path.stat().st_size - from_end)
        b = f.read(1)
        f.seek(path.stat().st_size - from_end)
        f.write(bytes([b[0] ^ 0xFF]))


def quantized_as_f32(index: dict) -> None:
    for t in first_layer(index)["tensors"]:
        if t["dtype"] == "U32":
            t["dtype"] = "F32"


def two_experts_one_block(index: dict) -> None:
    ly = first_layer(index)
    ly["offsets"][1], ly["crc32"][1] = ly["offsets"][0], ly["crc32"][0]


def drop_quantization(path: Path) -> None:
    edit_config_drop(path, "quantization")
    edit_config_drop(path, "quantization_config")


def nan_weights(c) -> None:
    """A copy of {model} whose final norm is NaN (a checkpoint broken in conversion)."""
    import mlx.core as mx

    shutil.copytree(c["model"], c["tmp"] / "nan")
    path = str(c["tmp"] / "nan" / "model.safetensors")
    weights = mx.load(path)
    weights["model.norm.weight"] = mx.full(weights["model.norm.weight"].shape, float("nan"))
    mx.save_safetensors(path, weights, metadata={"format": "mlx"})


def hf_config(c, text: str) -> None:
    (c["tmp"] / "hf").mkdir()
    (c["tmp"] / "hf" / "config.json").write_text(text)


def chat_template(c, template: str) -> None:
    path = c["packed"] / "tokenizer_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "chat_template": template}))


def no_router(c) -> None:
    """deepseek_v3 as a family with no router adapter (as any family specdec has none for)."""
    from specdec.checkpoint import families

    c["monkeypatch"].setitem(families.FAMILIES, "deepseek_v3", families.Family("deepseek_v3"))


def edit_config_drop(path: Path, key: str) -> None:
    cfg = json.loads((path / "config.json").read_text())
    del cfg[key]
    (path / "config.json").write_text(json.dumps(cfg))


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
        "profiles": ", ".join(BUILTIN_NAMES),
        "monkeypatch": monkeypatch,
    }
    SETUPS[case](ctx)
    ctx["not_utf8"] = "def\udcff"  # what Python makes of a non-UTF-8 byte in argv
    ctx.update(REGISTRIES)

    def fill(text: str) -> str:
        for name, value in ctx.items():
            if isinstance(value, str | Path):
                text = text.replace("{" + name + "}", str(value))
        return text

    argv = shlex.split(fill(command))
    assert argv[0] == "specdec"
    assert main(argv[1:]) == 2, f"{case}: expected exit status 2"
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines() == [f"specdec: error: {fill(message)}"]
