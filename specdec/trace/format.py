"""Routing traces on disk: which experts each position routed to, per MoE layer.

    from specdec.trace.format import load_trace, save_trace
    trace = load_trace("runs/trace-qwen")          # validates; one-line SpecdecError if wrong
    trace.experts                                  # [T, L, k] routed experts

The directory format (documented for other engines in docs/trace-format.md):
  meta.json      n_layers, n_experts, top_k, expert_bytes (int, or a list per layer), model,
                 source, optional layer_ids (model layer index of each MoE layer),
                 optional lookahead_distances (when lookahead.npy is present)
  experts.npy    integer [T, L, k]: routed experts per position per MoE layer
  gates.npy      optional float [T, L, k]: gate weights aligned with experts
  tokens.npy     optional integer [T]: the token at each position
  prompt_ids.npy optional integer [T]: which prompt each position belongs to
  phase.npy      optional integer [T]: 0 where the position was prefilled, 1 where decoded
  lookahead.npy  optional integer [D, T, L, k]: layer l's router applied to the MoE input of layer
                 l - d (d = lookahead_distances[i]); -1 where l - d < 0
  rejected.npy   optional integer [T, L, k]: a rejected draft's routing at position t (recorded
                 verify passes); -1 where none

Also the ds4 hotlist format (`# ds4 expert hotlist v1`, lines `layer expert hits weight`,
priority order) and `profile_hotlist`, which makes one from a trace.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specdec.core.errors import SpecdecError
from specdec.core.files import (
    check_output_file,
    check_replaceable,
    fresh_dir,
    swap_dir,
    write_atomic,
    write_error,
)
from specdec.core.inputs import check_input_file

HOTLIST_HEADER = "# ds4 expert hotlist v1"
MAX_EXPERTS = 1 << 31  # per layer; keeps cache keys (layer * n_experts + expert) inside int64
TRACE_KIND = "trace"  # the ownership marker's kind (store/files.py)
_OPTIONAL = ("gates", "tokens", "prompt_ids", "phase", "lookahead", "rejected")


class TraceError(SpecdecError):
    """A trace directory or hotlist file that is missing, malformed or inconsistent."""


@dataclass
class Trace:
    """A routing trace in memory; `experts[t, l]` are the top-k experts of position t, layer l."""

    experts: np.ndarray  # [T, L, k] integer
    n_experts: int
    expert_bytes: list[int]  # one per MoE layer
    model: str = ""
    source: str = ""
    layer_ids: list[int] | None = None
    gates: np.ndarray | None = None  # [T, L, k]
    tokens: np.ndarray | None = None  # [T]
    prompt_ids: np.ndarray | None = None  # [T]
    phase: np.ndarray | None = None  # [T] 0 prefill, 1 decode
    lookahead: np.ndarray | None = None  # [D, T, L, k]
    lookahead_distances: list[int] = field(default_factory=list)
    rejected: np.ndarray | None = None  # [T, L, k] a rejected draft's routing at t; -1: none

    @property
    def n_positions(self) -> int:
        return self.experts.shape[0]

    @property
    def n_layers(self) -> int:
        return self.experts.shape[1]

    @property
    def top_k(self) -> int:
        return self.experts.shape[2]

    @property
    def slot_bytes(self) -> int:
        """One cache slot holds the largest expert of any layer."""
        return max(self.expert_bytes)

    def keys(self) -> np.ndarray:
        """Cache keys layer * n_experts + expert, [T, L, k] int64 (the runtime's keys too)."""
        layer = np.arange(self.n_layers, dtype=np.int64)[None, :, None] * self.n_experts
        return self.experts.astype(np.int64) + layer

    def validate(self, where: str = "trace") -> None:
        """Raise TraceError (one line, with the fix) for any inconsistency."""
        e = self.experts
        if e.ndim != 3 or not np.issubdtype(e.dtype, np.integer):
            raise TraceError(
                f"{where}: experts must be integers [T, L, k], got {e.dtype} {e.shape}: "
                "write integer expert ids (see docs/trace-format.md)"
            )
        T, L, k = e.shape
        if L < 1 or k < 1:
            raise TraceError(
                f"{where}: experts has shape {e.shape}: a trace needs at least one MoE layer and "
                "top_k >= 1 (see docs/trace-format.md)"
            )
        if T < 1:
            raise TraceError(
                f"{where}: experts has shape {e.shape}: the trace holds no positions; record or "
                "synthesize one with at least one position (specdec trace record, trace synth)"
            )
        if not 1 <= self.n_experts <= MAX_EXPERTS:
            raise TraceError(
                f"{where}: n_experts {self.n_experts} outside 1..{MAX_EXPERTS}: fix meta.json"
            )
        if e.size and (e.min() < 0 or e.max() >= self.n_experts):
            raise TraceError(
                f"{where}: experts range {e.min()}..{e.max()} outside 0..{self.n_experts - 1}: "
                "fix n_experts in meta.json or the writer"
            )
        if len(self.expert_bytes) != L or not all(0 < b < 1 << 48 for b in self.expert_bytes):
            raise TraceError(
                f"{where}: expert_bytes needs one int in 1..2^48 or {L} (one per layer), "
                f"got {self.expert_bytes[:4]}"
            )
        if self.layer_ids is not None:
            _check_layer_ids(self.layer_ids, L, where)
        shapes = {"gates": (T, L, e.shape[2]), "tokens": (T,), "prompt_ids": (T,), "phase": (T,)}
        shapes["rejected"] = e.shape
        if self.lookahead is not None:
            shapes["lookahead"] = (len(self.lookahead_distances), T, L, e.shape[2])
        for name, shape in shapes.items():
            a = getattr(self, name)
            if a is not None and a.shape != shape:
                raise TraceError(f"{where}: {name} has shape {a.shape}, expected {shape}")
        if self.lookahead is None and self.lookahead_distances:
            raise TraceError(
                f"{where}: meta.json lists lookahead_distances but there is no lookahead.npy: "
                "drop them or add the file"
            )
        if self.gates is not None and not np.isfinite(self.gates).all():
            raise TraceError(f"{where}: gates hold NaN or inf: re-record the trace")
        for name in ("tokens", "prompt_ids", "phase", "lookahead", "rejected"):
            a = getattr(self, name)
            if a is not None and not np.issubdtype(a.dtype, np.integer):
                raise TraceError(f"{where}: {name} must be integers, got {a.dtype}")
        for name in ("lookahead", "rejected"):
            a = getattr(self, name)
            if a is not None and a.size and (a.min() < -1 or a.max() >= self.n_experts):
                raise TraceError(
                    f"{where}: {name} range {a.min()}..{a.max()} outside -1..{self.n_experts - 1}"
                )


def _check_layer_ids(ids, L: int, where: str) -> None:
    """layer_ids: L distinct whole numbers >= 0 (a hotlist and the runtime key layers by them)."""
    if not isinstance(ids, list | tuple) or not all(
        isinstance(i, int | np.integer) and not isinstance(i, bool) and i >= 0 for i in ids
    ):
        raise TraceError(
            f"{where}: layer_ids must be a list of whole numbers >= 0 (the model layer of each "
            f"MoE layer), got {str(ids)[:60]}: fix meta.json"
        )
    if len(ids) != L:
        raise TraceError(f"{where}: layer_ids has {len(ids)} entries, need {L}")
    if len(set(ids)) != len(ids):
        twice = sorted({i for i in ids if list(ids).count(i) > 1})
        raise TraceError(
            f"{where}: layer_ids names layer {twice[0]} twice: each MoE layer is one model "
            "layer; fix layer_ids in meta.json"
        )


def load_trace(path: str | os.PathLike) -> Trace:
    """Read and validate a trace directory."""
    d = Path(path)
    meta_path = d / "meta.json"
    if not (d / "experts.npy").is_file() or not meta_path.is_file():
        raise TraceError(
            f"{d}: not a trace directory (needs meta.json and experts.npy): "
            "record one with `specdec trace record` or see docs/trace-format.md"
        )
    try:
        check_input_file(meta_path, "trace meta.json")
        meta = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise TraceError(f"{meta_path}: invalid JSON ({err}): rewrite the file") from None
    except OSError as err:
        raise TraceError(f"{meta_path}: cannot read ({err.strerror}): check the path") from None
    if not isinstance(meta, dict):
        raise TraceError(f"{meta_path}: not a JSON object: see docs/trace-format.md")
    missing = [k for k in ("n_layers", "n_experts", "top_k", "expert_bytes") if k not in meta]
    if missing:
        raise TraceError(f"{meta_path}: missing {', '.join(missing)}: see docs/trace-format.md")
    arrays = {"experts": _load_npy(d / "experts.npy")}
    for name in _OPTIONAL:
        if (d / f"{name}.npy").is_file():
            arrays[name] = _load_npy(d / f"{name}.npy")
    e = arrays["experts"]
    want = (meta["n_layers"], meta["top_k"])
    if e.ndim != 3 or e.shape[1:] != want:
        raise TraceError(
            f"{d}: experts.npy has shape {e.shape}, meta.json says [T, {want[0]}, {want[1]}]: "
            "fix n_layers/top_k in meta.json or re-record the trace (specdec trace record)"
        )
    eb = meta["expert_bytes"]
    try:
        trace = Trace(
            experts=e,
            n_experts=int(meta["n_experts"]),
            expert_bytes=[int(eb)] * e.shape[1] if isinstance(eb, int) else [int(b) for b in eb],
            model=str(meta.get("model", "")),
            source=str(meta.get("source", "")),
            layer_ids=meta.get("layer_ids"),
            lookahead_distances=list(meta.get("lookahead_distances", [])),
            **{k: v for k, v in arrays.items() if k != "experts"},
        )
    except (TypeError, ValueError) as err:  # e.g. "n_experts": "x"
        raise TraceError(
            f"{meta_path}: a field has the wrong type ({err}): n_experts is an int, "
            "expert_bytes an int or a list of ints (see docs/trace-format.md)"
        ) from None
    trace.validate(str(d))
    return trace


def save_trace(trace: Trace, path: str | os.PathLike, overwrite: bool = False) -> None:
    """Write a trace directory atomically: a temporary sibling directory, then a rename."""
    trace.validate("trace to save")
    d = Path(path)
    if d.exists() and not overwrite:
        raise TraceError(f"{d} exists: choose another directory or pass overwrite=True")
    check_replaceable(d, TRACE_KIND, None, "`specdec trace record`", "--overwrite")
    tmp = fresh_dir(d, TRACE_KIND)  # marked first; dead writers' leftovers go
    try:
        eb = trace.expert_bytes
        meta = {
            "n_layers": trace.n_layers,
            "n_experts": trace.n_experts,
            "top_k": trace.top_k,
            "expert_bytes": eb[0] if len(set(eb)) == 1 else list(eb),
            "model": trace.model,
            "source": trace.source,
        }
        if trace.layer_ids is not None:
            meta["layer_ids"] = list(trace.layer_ids)
        if trace.lookahead is not None:
            meta["lookahead_distances"] = list(trace.lookahead_distances)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        np.save(tmp / "experts.npy", trace.experts)
        for name in _OPTIONAL:
            if getattr(trace, name) is not None:
                np.save(tmp / f"{name}.npy", getattr(trace, name))
        swap_dir(tmp, d, TRACE_KIND)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise write_error(d, e) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _load_npy(p: Path) -> np.ndarray:
    try:
        check_input_file(p, ".npy file", limit=None)
        return np.load(p, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:  # EOFError: a 0-byte file
        raise TraceError(f"{p}: unreadable .npy ({err}): rewrite it with numpy.save") from None


# -- hotlists ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class HotlistEntry:
    layer: int  # the model's layer index (ds4's numbering), mapped with Trace.layer_ids
    expert: int
    hits: int
    weight: float


def read_hotlist(path: str | os.PathLike) -> list[HotlistEntry]:
    """Parse a ds4 hotlist file; entries keep the file's (priority) order."""
    p = Path(path)
    try:
        check_input_file(p, "ds4 hotlist")
        lines = p.read_text().splitlines()
    except OSError as err:
        raise TraceError(f"{p}: cannot read hotlist ({err.strerror}): check the path") from None
    except UnicodeDecodeError:
        raise TraceError(
            f"{p}: not a text file (bytes that are not UTF-8): not a ds4 hotlist"
        ) from None
    if not lines or lines[0].strip() != HOTLIST_HEADER:
        raise TraceError(f"{p}: first line must be {HOTLIST_HEADER!r}: not a ds4 hotlist")
    out: list[HotlistEntry] = []
    seen: dict[tuple[int, int], int] = {}
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split()
        try:
            layer, expert, hits, weight = (
                int(parts[0]),
                int(parts[1]),
                int(parts[2]),
                float(parts[3]),
            )
        except (ValueError, IndexError):
            raise TraceError(
                f"{p}:{n}: expected `layer expert hits weight`, got {line!r}"
            ) from None
        if not math.isfinite(weight) or hits < 0:
            raise TraceError(
                f"{p}:{n}: hits {hits} and weight {weight} must be a count >= 0 and a finite number"
            )
        if (layer, expert) in seen:
            raise TraceError(
                f"{p}:{n}: layer {layer} expert {expert} is listed twice (first on line "
                f"{seen[layer, expert]}): a hotlist names each expert once"
            )
        seen[layer, expert] = n
        out.append(HotlistEntry(layer, expert, hits, weight))
    return out


def is_hotlist(path: Path) -> bool:
    """Whether `path` starts with the hotlist header (a file `write_hotlist` may replace)."""
    try:
        with open(path, "rb") as f:
            return f.readline(len(HOTLIST_HEADER) + 2).strip() == HOTLIST_HEADER.encode()
    except OSError:
        return False


def write_hotlist(
    entries: list[HotlistEntry], path: str | os.PathLike, overwrite: bool = False
) -> None:
    """Write a ds4 hotlist file (atomically); an existing file only with `overwrite`, and only
    a hotlist (the output rule, specdec.core.files.check_output_file)."""
    check_output_file(path, "`specdec trace hotlist`", overwrite, "--overwrite", is_hotlist)
    rows = [f"{e.layer} {e.expert} {e.hits} {e.weight:.6g}" for e in entries]
    write_atomic(path, "\n".join([HOTLIST_HEADER, *rows]) + "\n")


def profile_hotlist(trace: Trace) -> list[HotlistEntry]:
    """A hotlist from a trace: every routed (layer, expert), by hits then summed gate weight."""
    T, L, k = trace.experts.shape
    keys = trace.keys().reshape(-1)
    hits = np.bincount(keys, minlength=L * trace.n_experts)
    if trace.gates is not None:
        weight = np.bincount(
            keys, weights=trace.gates.reshape(-1).astype(np.float64), minlength=L * trace.n_experts
        )
    else:
        weight = hits.astype(np.float64)
    order = np.lexsort((np.arange(hits.size), -weight, -hits))  # hits, then weight, then key
    order = order[hits[order] > 0]
    ids = trace.layer_ids or list(range(L))
    E = trace.n_experts
    return [
        HotlistEntry(ids[q // E], q % E, int(hits[q]), float(weight[q])) for q in order.tolist()
    ]


def hotlist_keys(trace: Trace, entries: list[HotlistEntry]) -> list[int]:
    """Cache keys (layer * n_experts + expert) of a hotlist, in its order, for this trace."""
    index = {lid: i for i, lid in enumerate(trace.layer_ids or range(trace.n_layers))}
    out = []
    for e in entries:
        if e.layer not in index or not 0 <= e.expert < trace.n_experts:
            raise TraceError(
                f"hotlist entry (layer {e.layer}, expert {e.expert}) is not in this trace "
                f"({trace.n_layers} MoE layers of {trace.n_experts} experts): use the model's hotlist"
            )
        out.append(index[e.layer] * trace.n_experts + e.expert)
    return out
