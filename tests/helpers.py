"""Test helpers: tiny random checkpoints of every family, built once per session."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np

from specdec.model.random_models import make_random

FAMILIES = ["deepseek_v3", "qwen3_moe", "qwen2_moe", "mixtral", "minimax"]


def random_checkpoint(root: Path, family: str, bits: int | None) -> Path:
    out = root / f"{family}-{bits or 'f32'}"
    if not (out / "config.json").exists():
        make_random(family, out, bits=bits, seed=0)
    return out


def resident_logits(model, tokens: list[int], cache) -> np.ndarray:
    return np.array(model(mx.array([tokens]), cache=cache)[0].astype(mx.float32))
