"""Which accelerator MLX computes on here: the CPU, Apple's GPU (Metal) or an NVIDIA GPU (CUDA).

    on_cuda()          # MLX's CUDA backend (mlx-cuda-13) runs the default device
    describe()         # {"mlx_device": "Device(gpu, 0)", "backend": "cuda", ...} for results

Only CUDA keeps the arena in memory of its own (CUDA managed memory, migrated on first touch:
specdec.store.arena, specdec.bench.device); the CPU and Metal compute on host memory where it is.
"""

from __future__ import annotations

import mlx.core as mx


def on_cuda() -> bool:
    cuda = getattr(mx, "cuda", None)
    return mx.default_device() == mx.gpu and cuda is not None and cuda.is_available()


def backend() -> str:
    if on_cuda():
        return "cuda"
    metal = getattr(mx, "metal", None)
    if mx.default_device() == mx.gpu and metal is not None and metal.is_available():
        return "metal"
    return "cpu"


def describe() -> dict:
    return {"mlx_device": str(mx.default_device()), "backend": backend()}
