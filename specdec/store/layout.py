"""The packed-directory format: file names, safetensors headers, and the expert index.

A packed directory (written by `specdec pack`, read by `store.reader`) holds:

    config.json, tokenizer files   copied from the model directory
    model.safetensors              every tensor that is not a routed expert, raw bytes, dtype kept
    mtp.safetensors                the same for the MTP layer (model.layers.{num_hidden_layers}.*)
    experts.bin                    one block per (MoE layer, expert); each block starts at a
                                   4096-aligned offset and its size is a multiple of 4096, so
                                   O_DIRECT reads land straight in an arena slot
    experts.json                   the index (`ExpertIndex`): per layer the tensor layout inside a
                                   block, the quantization of each projection, per expert the
                                   block offset and crc32; a mixed-precision pack (`--cold-bits`)
                                   adds per layer `cold`: the requantized blocks' layout (size,
                                   tensors, bits) and the experts that have one (the rest keep
                                   the layer's own layout); `resident`: per resident
                                   safetensors file, each tensor's name, dtype, shape and
                                   crc32, so `specdec verify` checks every byte of the pack

Routed-expert tensors are mlx-lm's stacked switch projections (leading dim = number of experts),
found by `specdec.checkpoint.discover` from the family's module tree; the format itself knows nothing
of model families. Try it:
`python -c "from specdec.store.layout import ExpertIndex; print(ExpertIndex.load('PACKED').layer_ids)"`
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specdec.core.errors import StoreError
from specdec.core.files import write_atomic
from specdec.store.safetensors import ST_DTYPES, dtype_itemsize

INDEX_VERSION = 2  # 2: resident tensors' checksums recorded
ALIGN = 4096  # block alignment: O_DIRECT needs logical-block alignment; 4 KiB covers NVMe and APFS
TENSOR_ALIGN = 64  # tensors inside a block: keeps every dtype's element offset whole

EXPERTS_BIN = "experts.bin"
EXPERTS_JSON = "experts.json"
RESIDENT = "model.safetensors"
MTP_FILE = "mtp.safetensors"


def round_up(n: int, align: int) -> int:
    return -(-n // align) * align


# ----------------------------------------------------------------------------- index

QUANT_BITS = (2, 3, 4, 5, 6, 8)  # what mlx's affine quantization packs
# mlx's quantization modes: affine keeps float scales and biases per group; the microscaling
# ones an 8-bit scale per group and no biases
FLOAT_SCALES = ("F16", "BF16", "F32")
MICROSCALED = ("mxfp4", "mxfp8", "nvfp4")


def _crc32s(values) -> np.ndarray:
    """crc32 list -> [E] uint32; a value outside 0..2^32-1 is a damaged index, not a wrap."""
    arr = np.asarray(values, dtype=np.int64)
    if arr.size and (arr.min() < 0 or arr.max() >= 1 << 32):
        raise ValueError(f"crc32 values must be in 0..2^32-1, got {arr.min()}..{arr.max()}")
    return arr.astype(np.uint32)


def _quant_problem(ly: LayerLayout, proj: str, q: Quant) -> str | None:
    """Why a projection's quantization cannot describe its packed tensors, or None."""
    if q.bits not in QUANT_BITS:
        return f"has bits {q.bits}, not one of {QUANT_BITS}"
    if q.group_size < 1:
        return f"has group_size {q.group_size}"
    names = {t.name: t for t in ly.tensors}
    weight, scales = names.get(f"{proj}.weight"), names.get(f"{proj}.scales")
    if weight is None or scales is None or len(weight.shape) != 2 or len(scales.shape) != 2:
        return "is quantized but lacks a 2-d weight and scales"
    if weight.dtype != "U32":
        return f"is quantized but its weight is {weight.dtype}, not U32 (packed integers)"
    biases = names.get(f"{proj}.biases")
    if q.mode == "affine":
        if scales.dtype not in FLOAT_SCALES or biases is None or biases.shape != scales.shape:
            return "is affine-quantized but lacks float scales and biases of one shape"
    elif q.mode in MICROSCALED:
        if scales.dtype != "U8" or biases is not None:
            return f"is {q.mode}-quantized but its scales are not 8-bit or it has biases"
    else:
        return f"has mode {q.mode!r}, not affine or one of {', '.join(MICROSCALED)}"
    in_dim = weight.shape[1] * 32 // q.bits
    if in_dim % q.group_size or scales.shape[1] != in_dim // q.group_size:
        return (
            f"scales {list(scales.shape)} do not fit {q.bits}-bit groups of {q.group_size} "
            f"over {in_dim} inputs"
        )
    return None


def _validate_tensors(ly: LayerLayout, lid: int, bad) -> None:
    """Every tensor fits its block and agrees with its shape and quantization."""
    end, before = 0, None  # tensors in offset order: each begins where the one before ends
    for t in sorted(ly.tensors, key=lambda t: t.offset):
        if t.dtype not in ST_DTYPES:
            raise bad(f"layer {lid}: tensor {t.name} has dtype {t.dtype!r}, no safetensors dtype")
        if t.offset % TENSOR_ALIGN or t.offset + t.nbytes > ly.block_bytes:
            raise bad(f"layer {lid}: tensor {t.name} does not fit its block")
        if t.nbytes != int(np.prod(t.shape, dtype=np.int64)) * t.itemsize:
            raise bad(f"layer {lid}: tensor {t.name} nbytes disagrees with its shape")
        if t.offset < end:
            raise bad(f"layer {lid}: tensors {before} and {t.name} overlap in the block")
        end, before = t.offset + t.nbytes, t.name
    for proj, q in ly.quant.items():
        if q is not None and (problem := _quant_problem(ly, proj, q)):
            raise bad(f"layer {lid}: {proj} {problem}")


def _validate_regions(index: ExpertIndex, bad) -> None:
    """No two blocks of experts.bin overlap: each expert owns its own bytes."""
    starts, ends, who = [], [], []
    for lid, ly in index.layers.items():
        starts.append(ly.offsets)
        ends.append(ly.offsets + ly.sizes())
        who += [(lid, e) for e in range(ly.n_experts)]
    if not who:
        return
    start, end = np.concatenate(starts), np.concatenate(ends)
    order = np.argsort(start, kind="stable")
    clash = np.flatnonzero(start[order][1:] < end[order][:-1])
    if clash.size:
        a, b = who[order[clash[0]]], who[order[clash[0] + 1]]
        raise bad(
            f"the blocks of layer {a[0]} expert {a[1]} and layer {b[0]} expert {b[1]} overlap "
            "in experts.bin"
        )


def _tensor_json(t: TensorSpec) -> dict[str, Any]:
    return {
        "name": t.name,
        "dtype": t.dtype,
        "shape": list(t.shape),
        "offset": t.offset,
        "nbytes": t.nbytes,
    }


def _tensor_spec(d: dict[str, Any]) -> TensorSpec:
    return TensorSpec(d["name"], d["dtype"], tuple(d["shape"]), d["offset"], d["nbytes"])


@dataclass(frozen=True)
class Quant:
    """Quantization of one projection (mlx-lm's affine/mx modes)."""

    bits: int
    group_size: int
    mode: str = "affine"


@dataclass(frozen=True)
class TensorSpec:
    """One expert tensor inside a block, e.g. 'gate_proj.weight' of shape [out, in/8] U32."""

    name: str  # '<projection>.<weight|scales|biases|bias>'
    dtype: str  # safetensors dtype string; `mx_dtype(spec.dtype)` gives the MLX one
    shape: tuple[int, ...]  # per-expert shape (the stacked tensor without its leading E)
    offset: int  # byte offset inside the block, TENSOR_ALIGN-aligned
    nbytes: int

    @property
    def projection(self) -> str:
        return self.name.rsplit(".", 1)[0]

    @property
    def itemsize(self) -> int:
        return dtype_itemsize(self.dtype)


@dataclass
class LayerLayout:
    """Block layout of one MoE layer: every expert's block has the same layout and size."""

    prefix: str  # 'model.layers.3.mlp.switch_mlp'
    n_experts: int
    block_bytes: int  # multiple of ALIGN
    tensors: list[TensorSpec]
    offsets: np.ndarray  # [E] int64, byte offset of each expert's block in experts.bin
    crc32: np.ndarray  # [E] uint32, crc32 of each full block (padding included)
    quant: dict[str, Quant | None] = field(default_factory=dict)  # per projection
    # mixed precision (`specdec pack --cold-bits`): the layout of this layer's requantized
    # blocks, and which experts have one; offsets and crc32 above are per block, either kind
    cold: LayerLayout | None = None
    is_cold: np.ndarray | None = None  # [E] bool

    def block_size(self, expert: int) -> int:
        """Bytes of one expert's block on disk (a cold block is smaller)."""
        if self.cold is not None and self.is_cold[expert]:
            return self.cold.block_bytes
        return self.block_bytes

    def sizes(self) -> np.ndarray:
        """[E] bytes of each expert's block."""
        if self.cold is None:
            return np.full(self.n_experts, self.block_bytes, dtype=np.int64)
        return np.where(self.is_cold, self.cold.block_bytes, self.block_bytes)

    def bytes_of(self, experts) -> int:
        """Bytes of these experts' blocks."""
        if self.cold is None:
            return self.block_bytes * len(experts)
        return sum(map(self.block_size, experts))

    def tensor(self, name: str) -> TensorSpec:
        for t in self.tensors:
            if t.name == name:
                return t
        raise StoreError(f"{self.prefix}: no expert tensor {name!r} in the index")

    @property
    def projections(self) -> list[str]:
        return sorted({t.projection for t in self.tensors})


@dataclass(frozen=True)
class ResidentTensor:
    """One tensor of model.safetensors or mtp.safetensors as pack wrote it."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    crc32: int  # of the tensor's bytes


def _resident_json(files: dict[str, list[ResidentTensor]]) -> dict[str, Any]:
    return {
        f: [
            {"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "crc32": t.crc32} for t in ts
        ]
        for f, ts in sorted(files.items())
    }


def _resident(data: Any) -> dict[str, list[ResidentTensor]]:
    if not isinstance(data, dict):
        raise TypeError("resident is not an object")
    return {
        f: [
            ResidentTensor(str(t["name"]), str(t["dtype"]), tuple(t["shape"]), t["crc32"])
            for t in ts
        ]
        for f, ts in data.items()
    }


@dataclass
class ExpertIndex:
    """experts.json: where every expert block is and what is inside it."""

    version: int
    slot_bytes: int  # max block_bytes over layers: one arena slot holds any expert
    layers: dict[int, LayerLayout]
    source: dict[str, Any] = field(default_factory=dict)  # what was packed (for re-pack checks)
    # {file name: its tensors in file order}: model.safetensors, and mtp.safetensors if packed
    resident: dict[str, list[ResidentTensor]] = field(default_factory=dict)

    @property
    def layer_ids(self) -> list[int]:
        return sorted(self.layers)

    def expert_bytes(self, layer: int) -> int:
        """Bytes read from disk for one expert of `layer` (its block size)."""
        return self.layers[layer].block_bytes

    @property
    def file_bytes(self) -> int:
        """Size experts.bin must have at least."""
        ends = [int((ly.offsets + ly.sizes()).max()) for ly in self.layers.values()]
        return max(ends, default=0)

    @property
    def mixed(self) -> bool:
        """Some blocks are requantized cold (`specdec pack --cold-bits`): two block sizes."""
        return any(ly.cold is not None for ly in self.layers.values())

    @property
    def n_blocks(self) -> int:
        return sum(ly.n_experts for ly in self.layers.values())

    def blocks(self) -> list[tuple[int, int]]:
        """(layer id, expert) of every expert block, layer by layer."""
        return [(lid, e) for lid in self.layer_ids for e in range(self.layers[lid].n_experts)]

    def content_hash(self, config: bytes) -> str:
        """sha256 (hex, 16 digits) of the model's content without reading a weight: config.json's
        bytes and the checksums pack recorded, of every resident tensor (name, dtype, shape,
        crc32) and every expert block (layout, crc32). Two packs of the same weights and config
        share it wherever they were packed; any changed weight or config key changes it."""
        h = hashlib.sha256(config)
        h.update(json.dumps(_resident_json(self.resident), sort_keys=True).encode())
        for lid in self.layer_ids:
            ly = self.layers[lid]
            h.update(
                json.dumps([lid, ly.n_experts, [_tensor_json(t) for t in ly.tensors]]).encode()
            )
            h.update(ly.crc32.astype("<u4").tobytes())
        return h.hexdigest()[:16]

    # ------------------------------------------------------------------ json

    def to_json(self) -> dict[str, Any]:
        layers = {}
        for lid in self.layer_ids:
            ly = self.layers[lid]
            layers[str(lid)] = {
                "prefix": ly.prefix,
                "n_experts": ly.n_experts,
                "block_bytes": ly.block_bytes,
                "tensors": [_tensor_json(t) for t in ly.tensors],
                "quant": {p: (q.__dict__ if q else None) for p, q in sorted(ly.quant.items())},
                "offsets": [int(o) for o in ly.offsets],
                "crc32": [int(c) for c in ly.crc32],
            }
            if ly.cold is not None:
                c = ly.cold
                layers[str(lid)]["cold"] = {
                    "block_bytes": c.block_bytes,
                    "tensors": [_tensor_json(t) for t in c.tensors],
                    "quant": {p: (q.__dict__ if q else None) for p, q in sorted(c.quant.items())},
                    "experts": np.flatnonzero(ly.is_cold).tolist(),
                }
        return {
            "version": self.version,
            "slot_bytes": self.slot_bytes,
            "source": self.source,
            "resident": _resident_json(self.resident),
            "layers": layers,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = EXPERTS_JSON) -> ExpertIndex:
        if not isinstance(data, dict) or not isinstance(data.get("layers", {}), dict):
            raise StoreError(
                f"{where}: malformed expert index (not an object with a `layers` object); "
                "re-pack with `specdec pack`"
            )
        try:
            version = data.get("version")
            if type(version) is not int or version != INDEX_VERSION:  # not True, not 2.0
                kind = "" if isinstance(version, int) else f" (a {type(version).__name__})"
                raise StoreError(
                    f"{where}: index version {version!r}{kind}, this specdec reads version "
                    f"{INDEX_VERSION} (an integer); re-pack with `specdec pack --force`"
                )
            layers = {}
            for key, d in data["layers"].items():
                tensors = [_tensor_spec(t) for t in d["tensors"]]
                quant = {p: (Quant(**q) if q else None) for p, q in d.get("quant", {}).items()}
                ly = LayerLayout(
                    prefix=d["prefix"],
                    n_experts=int(d["n_experts"]),
                    block_bytes=int(d["block_bytes"]),
                    tensors=tensors,
                    offsets=np.asarray(d["offsets"], dtype=np.int64),
                    crc32=_crc32s(d["crc32"]),
                    quant=quant,
                )
                if d.get("cold") is not None:
                    c = d["cold"]
                    ly.is_cold = np.zeros(ly.n_experts, dtype=bool)
                    ly.is_cold[np.asarray(c["experts"], dtype=np.int64)] = True
                    ly.cold = LayerLayout(
                        ly.prefix,
                        ly.n_experts,
                        int(c["block_bytes"]),
                        [_tensor_spec(t) for t in c["tensors"]],
                        ly.offsets,
                        ly.crc32,
                        {p: (Quant(**q) if q else None) for p, q in c["quant"].items()},
                    )
                # int() takes '-1', ' 3', '+3', '01' and '٣'
                if not (key.isascii() and key.isdigit() and str(int(key)) == key):
                    raise ValueError(f"layer key {key!r} is not a layer number")
                layers[int(key)] = ly
            index = cls(
                int(data["version"]),
                int(data["slot_bytes"]),
                layers,
                data.get("source", {}),
                _resident(data["resident"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError, IndexError) as e:
            raise StoreError(
                f"{where}: malformed expert index ({type(e).__name__}: {e}); re-pack with `specdec pack`"
            ) from e
        index.validate(where)
        return index

    def validate(self, where: str = EXPERTS_JSON, fix: str = "re-pack with `specdec pack`") -> None:
        """Raise StoreError if the index is internally inconsistent ("where: problem; fix")."""

        def bad(msg: str) -> StoreError:
            return StoreError(f"{where}: {msg}; {fix}")

        if self.slot_bytes % ALIGN or self.slot_bytes <= 0:
            raise bad(f"slot_bytes {self.slot_bytes} is not a positive multiple of {ALIGN}")
        for lid, ly in self.layers.items():
            if ly.cold is not None:
                if ly.is_cold is None or ly.is_cold.shape != (ly.n_experts,):
                    raise bad(f"layer {lid}: cold blocks without a per-expert cold mask")
                if ly.cold.block_bytes % ALIGN or ly.cold.block_bytes <= 0:
                    raise bad(f"layer {lid}: cold block_bytes {ly.cold.block_bytes} not aligned")
                _validate_tensors(ly.cold, lid, bad)
            if ly.n_experts < 1:
                raise bad(f"layer {lid}: {ly.n_experts} experts")
            if ly.block_bytes % ALIGN or not 0 < ly.block_bytes <= self.slot_bytes:
                raise bad(f"layer {lid}: block_bytes {ly.block_bytes} is not aligned or > slot")
            if ly.offsets.shape != (ly.n_experts,) or ly.crc32.shape != (ly.n_experts,):
                raise bad(f"layer {lid}: {ly.n_experts} experts but offsets/crc32 lengths differ")
            if (ly.offsets % ALIGN).any() or (ly.offsets < 0).any():
                raise bad(f"layer {lid}: a block offset is not {ALIGN}-aligned")
            if (np.diff(ly.offsets) < 0).any():  # pack lays a layer's blocks out in order
                raise bad(f"layer {lid}: block offsets not in expert order (experts swapped?)")
            _validate_tensors(ly, lid, bad)
        _validate_regions(self, bad)
        for name, tensors in self.resident.items():
            if name not in (RESIDENT, MTP_FILE):
                raise bad(f"resident file {name!r} is not {RESIDENT} or {MTP_FILE}")
            for t in tensors:
                if t.dtype not in ST_DTYPES or not all(isinstance(d, int) for d in t.shape):
                    raise bad(f"{name}: tensor {t.name} has dtype {t.dtype!r}, shape {t.shape}")
                if not isinstance(t.crc32, int) or not 0 <= t.crc32 < 1 << 32:
                    raise bad(f"{name}: tensor {t.name} has crc32 {t.crc32!r}")

    @classmethod
    def load(cls, packed_dir: str | Path) -> ExpertIndex:
        path = Path(packed_dir) / EXPERTS_JSON
        if path.is_symlink() and not path.exists():
            raise StoreError(
                f"{path} is a dangling symlink or a symlink loop; re-pack with `specdec pack`"
            )
        if path.exists() and not path.is_file():  # never read a device or FIFO: it may not end
            raise StoreError(
                f"{path} is not a regular file (a directory, device or FIFO); re-pack with "
                "`specdec pack --force`"
            )
        if not path.is_file():
            raise StoreError(
                f"{path} not found: {packed_dir} is not a packed directory; "
                "create one with `specdec pack MODEL_DIR OUT_DIR`"
            )
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise StoreError(
                f"{path}: unreadable expert index ({e}); re-pack with `specdec pack`"
            ) from e
        return cls.from_json(data, str(path))

    def save(self, packed_dir: str | Path) -> None:
        """Write experts.json through a temporary name (never half-written)."""
        write_atomic(Path(packed_dir) / EXPERTS_JSON, json.dumps(self.to_json(), indent=1))
