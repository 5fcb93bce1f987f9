"""Hot/cold mixed precision at pack time: `specdec pack MODEL OUT --cold-bits 2 --hotlist FILE`.

The hotlist's experts (a ds4 hotlist, `specdec trace hotlist`) keep their blocks as packed;
every other routed expert is requantized to `cold_bits` with MLX's affine quantization, group 64
(`mx.quantize`). Quantized sources are dequantized first (`mx.dequantize`, into the dtype of
their scales) and quantized again: the 2-bit block approximates the 4-bit weights, not the
original float ones, which the checkpoint no longer has. Float sources are quantized directly.
Scales and biases of a cold block keep the float dtype they were computed in (bf16 for an
`mlx_lm.convert -q` checkpoint); an expert bias (`<proj>.bias`) is copied unchanged.

`requantize_cold` runs after pack has written the all-hot experts.bin into its temporary
directory: it rewrites the file block by block (one block in memory at a time), cold blocks
smaller, and records in each layer's layout the cold layout and which experts are cold
(store/layout.py: `LayerLayout.cold`, `is_cold`). Run `pytest tests/pack/test_mixed_precision.py`.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np

from specdec.core.errors import StoreError
from specdec.core.files import durable_replace
from specdec.store.layout import (
    ALIGN,
    QUANT_BITS,
    TENSOR_ALIGN,
    LayerLayout,
    Quant,
    TensorSpec,
    round_up,
)
from specdec.store.safetensors import mx_dtype, safetensors_dtype

COLD_GROUP = 64  # MLX affine group size, as the question's prototype ran
_FLOATS = (mx.float32, mx.float16, mx.bfloat16)


@dataclass(frozen=True)
class ColdSpec:
    """What a mixed pack asks for: the cold width, the hot experts, the profiled access share."""

    bits: int
    hotlist: tuple[tuple[int, int], ...]
    hot_access_share: float | None = None

    @classmethod
    def of(cls, bits: int | None, hotlist, share: float | None) -> ColdSpec | None:
        """From pack's arguments (None: an all-hot pack); refuses what cannot go together."""
        if (bits is None) != (hotlist is None):
            raise StoreError(
                "--cold-bits and --hotlist go together: the hotlist names the experts that keep "
                "their precision, --cold-bits the width of the rest"
            )
        if bits is not None and bits not in QUANT_BITS:
            raise StoreError(
                f"--cold-bits {bits} is not a width MLX's affine quantization packs: use one of "
                f"{', '.join(map(str, QUANT_BITS))}"
            )
        if share is not None and not (bits and 0 < share < 1):
            raise StoreError(
                f"--hot-access-share {share} must be a fraction in (0, 1) and comes with "
                "--cold-bits: the share of routed accesses that went to the hotlist's experts"
            )
        if bits is None:
            return None
        return cls(bits, tuple((int(lay), int(e)) for lay, e in hotlist), share)

    def fingerprint(self) -> dict:
        """What the index's `source` records (another hotlist or width is another pack)."""
        hot = hashlib.sha1(json.dumps(sorted(map(list, self.hotlist))).encode()).hexdigest()
        return {"bits": self.bits, "hotlist_sha1": hot, "hot_access_share": self.hot_access_share}

    def pairs(self, layers: dict[int, LayerLayout]) -> set:
        return cold_pairs(layers, list(self.hotlist), self.bits)


def cold_pairs(layers: dict[int, LayerLayout], hot: list[tuple[int, int]], bits: int) -> set:
    """The (layer, expert) pairs to requantize: every routed expert not in the hotlist.
    Refuses a hotlist naming an expert the model lacks, and a cold width that saves nothing."""
    if not hot:
        raise StoreError(
            "the hotlist names no experts: every block would be cold; list the experts to keep "
            "(`specdec trace hotlist TRACE --out FILE`)"
        )
    for layer, expert in hot:
        if layer not in layers or not 0 <= expert < layers[layer].n_experts:
            raise StoreError(
                f"hotlist entry (layer {layer}, expert {expert}) is not a routed expert of this "
                f"model (MoE layers {sorted(layers)}): use a hotlist profiled on this model"
            )
    for lid, ly in layers.items():
        for proj, q in ly.quant.items():
            if q is not None and (q.mode != "affine" or q.bits <= bits):
                raise StoreError(
                    f"layer {lid} {proj} is {q.mode} {q.bits}-bit: --cold-bits {bits} must be "
                    f"below the experts' own affine bits (or pack without --cold-bits)"
                )
    keep = set(map(tuple, hot))
    return {(lid, e) for lid, ly in layers.items() for e in range(ly.n_experts)} - keep


def _array(block: np.ndarray, spec: TensorSpec) -> mx.array:
    raw = block[spec.offset : spec.offset + spec.nbytes]  # [nbytes] uint8
    return mx.array(raw).view(mx_dtype(spec.dtype)).reshape(spec.shape)


def _float_weight(block: np.ndarray, ly: LayerLayout, proj: str) -> mx.array:
    """[out, in] float weights of one projection (dequantized if quantized)."""
    w = _array(block, ly.tensor(f"{proj}.weight"))
    q = ly.quant.get(proj)
    if q is None:
        if w.dtype not in _FLOATS:
            raise StoreError(f"{ly.prefix}.{proj}: {w.dtype} weights cannot be requantized")
        return w
    scales = _array(block, ly.tensor(f"{proj}.scales"))
    names = {t.name for t in ly.tensors}
    biases = _array(block, ly.tensor(f"{proj}.biases")) if f"{proj}.biases" in names else None
    return mx.dequantize(w, scales, biases, group_size=q.group_size, bits=q.bits, mode=q.mode)


def _cold_tensors(block: np.ndarray, ly: LayerLayout, bits: int) -> dict[str, mx.array]:
    """The cold block's tensors by name: requantized weights, copied expert biases."""
    out = {}
    for proj in ly.projections:
        w = _float_weight(block, ly, proj)  # [out, in]
        if w.shape[-1] % COLD_GROUP:
            raise StoreError(
                f"{ly.prefix}.{proj} has {w.shape[-1]} inputs, not a multiple of the cold "
                f"group size {COLD_GROUP}: this model cannot be packed with --cold-bits"
            )
        wq, scales, biases = mx.quantize(w, group_size=COLD_GROUP, bits=bits)
        out.update({f"{proj}.weight": wq, f"{proj}.scales": scales, f"{proj}.biases": biases})
        if any(t.name == f"{proj}.bias" for t in ly.tensors):
            out[f"{proj}.bias"] = _array(block, ly.tensor(f"{proj}.bias"))
    return out


def cold_layout(ly: LayerLayout, tensors: dict[str, mx.array], bits: int) -> LayerLayout:
    """The layout of this layer's cold blocks (tensors in name order, as pack lays them)."""
    specs, pos = [], 0
    for name in sorted(tensors):
        a = tensors[name]
        dtype = safetensors_dtype(a, f"{ly.prefix}.{name}")
        specs.append(TensorSpec(name, dtype, tuple(a.shape), pos, a.nbytes))
        pos = round_up(pos + a.nbytes, TENSOR_ALIGN)
    quant = {p: Quant(bits, COLD_GROUP) for p in ly.projections}
    return LayerLayout(
        ly.prefix, ly.n_experts, round_up(pos, ALIGN), specs, ly.offsets, ly.crc32, quant
    )


def requantize_cold(path: Path, layers: dict[int, LayerLayout], cold: set, bits: int) -> None:
    """Rewrite experts.bin at `path` with the `cold` (layer, expert) blocks at `bits`; update
    each layout's offsets, crc32, cold layout and cold mask in place. Blocks stay in layer-major,
    expert-minor order, each at an ALIGN boundary."""
    tmp = path.with_name(path.name + ".cold")
    pos = 0
    with open(path, "rb") as src, open(tmp, "wb") as dst:
        for lid in sorted(layers):
            ly = layers[lid]
            offsets = np.zeros(ly.n_experts, dtype=np.int64)
            crcs = np.zeros(ly.n_experts, dtype=np.uint32)
            is_cold = np.array([(lid, e) in cold for e in range(ly.n_experts)])
            for e in range(ly.n_experts):
                src.seek(int(ly.offsets[e]))
                block = np.frombuffer(src.read(ly.block_bytes), dtype=np.uint8)
                if is_cold[e]:
                    tensors = _cold_tensors(block, ly, bits)
                    if ly.cold is None:
                        ly.cold = cold_layout(ly, tensors, bits)
                    block = np.zeros(ly.cold.block_bytes, dtype=np.uint8)
                    for t in ly.cold.tensors:
                        a = tensors[t.name]
                        block[t.offset : t.offset + t.nbytes] = np.array(a.view(mx.uint8)).reshape(
                            -1
                        )
                offsets[e], crcs[e] = pos, zlib.crc32(block)
                dst.write(block.tobytes())
                pos += len(block)
            ly.offsets[:], ly.crc32[:] = offsets, crcs  # the cold layout shares these arrays
            ly.is_cold = is_cold if ly.cold is not None else None
        dst.flush()
        os.fsync(dst.fileno())
    durable_replace(tmp, path)
