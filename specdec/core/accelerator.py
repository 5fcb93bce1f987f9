"""Which accelerator MLX computes on here: the CPU, Apple's GPU (Metal) or an NVIDIA GPU (CUDA).

    on_cuda()          # MLX's CUDA backend (mlx-cuda-13) runs the default device
    describe()         # {"mlx_device": "Device(gpu, 0)", "backend": "cuda", ...} for results

Only CUDA keeps the arena in memory of its own (CUDA managed memory, migrated on first touch:
specdec.store.arena, specdec.bench.device); the CPU and Metal compute on host memory where it is.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from specdec.core.attention import cudnn_sdpa

# Reading a device array on the host: on MLX 0.32's CUDA backend `np.array(a)` first moves the
# array into managed memory (cudaMallocManaged and a copy: 262-293 µs a call on the H200 for
# 32-136 bytes) where `a.tolist()` reads the same array in 2 µs (benchmarks/results/cuda/session8/
# host_reads.json; specdec.bench.overhead `host_copy_us` measures both). On this CPU tolist costs
# 1-4 µs more a small read than np.array, next to milliseconds of compute a token: one path on
# every backend, so the CPU tests run the one CUDA takes. tolist's Python objects cost ~90 ns an
# element here (1024: ~92 µs, 4096: 365 µs): past SMALL_READ the move is the cheaper read.
SMALL_READ = 1024
_NUMPY = {
    mx.bool_: np.bool_,
    mx.uint8: np.uint8,
    mx.uint16: np.uint16,
    mx.uint32: np.uint32,
    mx.uint64: np.uint64,
    mx.int8: np.int8,
    mx.int16: np.int16,
    mx.int32: np.int32,
    mx.int64: np.int64,
    mx.float32: np.float32,
}


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


def to_host(a: mx.array) -> np.ndarray:
    """`a` (evaluated here if it is not yet) as a numpy array of its dtype: a small one (a
    router's choice) through tolist, as SMALL_READ says why."""
    if a.size <= SMALL_READ and a.dtype in _NUMPY:
        return np.array(a.tolist(), dtype=_NUMPY[a.dtype])
    return np.array(a)


def describe() -> dict:
    """The device and backend; on CUDA also whether its attention may take cuDNN (as the
    process has it: specdec's default "0", specdec/core/attention.py)."""
    out = {"mlx_device": str(mx.default_device()), "backend": backend()}
    if out["backend"] == "cuda":
        out["cudnn_sdpa"] = cudnn_sdpa()
    return out
