"""Real-shape random checkpoints, written quantized tensor by tensor: `make-random --like`.

    specdec make-random --like minimax-m2.5 --layers 16 OUT_DIR        # ~32 GB, 4-bit
    make_like("qwen3-30b-a3b", "/tmp/q", layers=2, experts=16)         # real dims, fewer experts

The model's mlx-lm class is built from the preset's config (specdec.checkpoint.presets) without
materialising a parameter (MLX is lazy), cast to bf16 and quantized by mlx-lm's own
`quantize_model` (affine, group 64, 4 bits; the family's quant_predicate too, e.g. 8-bit
routers), again lazily: this gives the exact tensor names, shapes and dtypes `mlx_lm.convert -q`
writes. Their bytes are then drawn directly, shard by shard and chunk by chunk, never holding a
float copy of a layer (peak RSS stays well under 2 GB at any size):

    packed weights (uint32)  uniform random codes: a 32 MiB random pool, per chunk a random
                             offset into it and a random xor key (numpy's generator alone
                             runs at ~0.3 GB/s here; this runs at memory speed)
    scales, biases (bf16)    scale = fan_in^-0.5 / std(codes) x U(0.75, 1.25) per group, bias =
                             -scale x (2^bits - 1) / 2: dequantized weights ~ N(0, 1/fan_in)-sized
    norms                    1 + 0.1 N(0, 1); other vectors 0.1 N(0, 1) (routers' correction
                             biases included, so routing varies token to token)

Every tensor's bytes depend only on (seed, tensor name), so a file is reproducible. The
vocabulary is the local 512-token BPE (specdec.checkpoint.random_models): the embedding and the head
are the only tensors smaller than in the real model. DeepSeek-V3 also gets `mtp.safetensors` (one
real-shape MTP layer). `mlx_lm.load(OUT_DIR)` opens the result.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import json
import zlib
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from specdec.checkpoint.presets import like_config
from specdec.checkpoint.random_models import (
    GROUP_SIZE,
    VOCAB,
    cast_floats,
    write_tokenizer,
    writing_checkpoint,
)
from specdec.store.layout import MTP_FILE
from specdec.store.safetensors import safetensors_header_bytes

CHUNK = 32 << 20  # bytes of packed codes drawn at a time
SHARD_BYTES = 4 << 30
_ST = {mx.uint32: "U32", mx.bfloat16: "BF16", mx.float32: "F32", mx.float16: "F16"}

_NP_FLOAT = {"F32": np.float32, "F16": np.float16}
Tensor = tuple[str, str, tuple[int, ...]]  # (name, safetensors dtype, shape)


def _rng(seed: int, name: str, part: int = 0) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode()), part])


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns (uint16), rounded to nearest."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


class _Writer:
    """Draws each tensor's bytes; the code pool is shared by every packed weight."""

    def __init__(self, seed: int, shapes: dict[str, tuple[int, ...]]):
        self.seed, self.shapes = seed, shapes
        self.pool = np.frombuffer(_rng(seed, "pool").bytes(2 * CHUNK), np.uint64)

    def codes(self, name: str, nbytes: int, f) -> None:
        words = nbytes // 8
        for part, start in enumerate(range(0, words, CHUNK // 8)):
            n = min(CHUNK // 8, words - start)
            r = _rng(self.seed, name, part)
            off = int(r.integers(0, len(self.pool) - n + 1))
            f.write(np.bitwise_xor(self.pool[off : off + n], r.integers(0, 2**63, dtype=np.uint64)))
        if nbytes % 8:  # uint32 tensors of odd length
            f.write(_rng(self.seed, name, -1).bytes(nbytes % 8))

    def scales(self, prefix: str, want_bias: bool, f) -> None:
        """Scales (or biases) of one quantized module, one expert (or the matrix) at a time."""
        w, s = self.shapes[prefix + ".weight"], self.shapes[prefix + ".scales"]
        fan_in = s[-1] * GROUP_SIZE
        levels = 2 ** (w[-1] * 32 // fan_in)  # 2^bits
        base = np.float32(fan_in**-0.5 / (levels / 12**0.5))
        for i in range(int(np.prod(s[:-2], dtype=np.int64))):
            u = _rng(self.seed, prefix, i + 1).random(s[-2:], dtype=np.float32)  # [out, groups]
            scale = (0.75 + 0.5 * u) * base
            f.write(_bf16(scale * np.float32(-(levels - 1) / 2) if want_bias else scale))

    def floats(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        r = _rng(self.seed, name)
        if name.endswith("norm.weight"):
            return 1.0 + 0.1 * r.standard_normal(shape)
        if len(shape) >= 2:
            return r.standard_normal(shape) * shape[-1] ** -0.5
        return 0.1 * r.standard_normal(shape)

    def write(self, t: Tensor, f) -> None:
        name, dtype, shape = t
        prefix, _, kind = name.rpartition(".")
        if dtype == "U32":
            self.codes(name, 4 * int(np.prod(shape, dtype=np.int64)), f)
        elif kind in ("scales", "biases") and prefix + ".weight" in self.shapes:
            self.scales(prefix, kind == "biases", f)
        else:
            x = self.floats(name, shape)
            f.write(_bf16(x) if dtype == "BF16" else x.astype(_NP_FLOAT[dtype]))


def _nbytes(t: Tensor) -> int:
    item = {"U32": 4, "BF16": 2, "F16": 2, "F32": 4}[t[1]]
    return item * int(np.prod(t[2], dtype=np.int64))


def _write_file(path: Path, tensors: list[Tensor], writer: _Writer) -> None:
    entries = [(n, d, s, _nbytes((n, d, s))) for n, d, s in tensors]
    with open(path, "wb") as f:
        f.write(safetensors_header_bytes(entries, {"format": "mlx"}))
        for t in tensors:
            writer.write(t, f)


def _quantized_tensors(module: nn.Module, config: dict, bits: int) -> tuple[list[Tensor], dict]:
    """Names, dtypes and shapes `mlx_lm.convert -q` gives `module`, found lazily."""
    from mlx_lm.utils import quantize_model

    cast_floats(module, mx.bfloat16)  # as mlx_lm.convert casts
    with contextlib.redirect_stdout(io.StringIO()):  # quantize_model prints bits per weight
        _, config = quantize_model(module, config, GROUP_SIZE, bits, mode="affine")
    params = tree_flatten(module.parameters())
    return [(n, _ST[p.dtype], tuple(p.shape)) for n, p in params], config


def _shards(tensors: list[Tensor], limit: int) -> list[list[Tensor]]:
    shards: list[list[Tensor]] = [[]]
    size = 0
    for t in tensors:
        if shards[-1] and size + _nbytes(t) > limit:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += _nbytes(t)
    return shards


def make_like(
    preset: str,
    out_dir: str | Path,
    layers: int | None = None,
    experts: int | None = None,
    bits: int = 4,
    seed: int = 0,
    shard_bytes: int = SHARD_BYTES,
    force: bool = False,
) -> Path:
    """Write a random checkpoint with `preset`'s real dimensions to out_dir.

    An existing non-empty out_dir is refused unless force=True and make-random wrote it."""
    from mlx_lm.utils import save_config

    config = like_config(preset, layers, experts, VOCAB)
    module = importlib.import_module(f"mlx_lm.models.{config['model_type']}")
    args = module.ModelArgs.from_dict(config)
    tensors, qconfig = _quantized_tensors(module.Model(args), config, bits)
    mtp: list[Tensor] = []
    if config["model_type"] == "deepseek_v3":
        from specdec.checkpoint.mtp import MTPModule

        m = MTPModule(args)
        mtp_names, _ = _quantized_tensors(m, copy.deepcopy(config), bits)
        prefix = f"model.layers.{args.num_hidden_layers}."
        mtp = [(prefix + n.removeprefix("layer."), d, s) for n, d, s in mtp_names]
    writer = _Writer(seed, {n: s for n, _, s in tensors + mtp})

    need = sum(_nbytes(t) for t in tensors + mtp)
    with writing_checkpoint(out_dir, force, need) as tmp:
        shards = _shards(tensors, shard_bytes)
        weight_map = {}
        for i, shard in enumerate(shards):
            name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            _write_file(tmp / name, shard, writer)
            weight_map.update({t[0]: name for t in shard})
        total = sum(_nbytes(t) for t in tensors)
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
        if mtp:
            _write_file(tmp / MTP_FILE, mtp, writer)
        save_config(qconfig, tmp / "config.json")
        write_tokenizer(tmp)
    return Path(out_dir)
