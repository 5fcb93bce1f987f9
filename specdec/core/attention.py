"""Which attention kernels MLX's CUDA backend may use: specdec keeps cuDNN's out by default.

    from specdec.core.attention import CUDNN_SDPA, pin_attention
    pin_attention()    # MLX_CUDA_USE_CUDNN_SDPA=0 unless the user set it (specdec/__init__.py)

MLX's CUDA backend sends bfloat16/float16 attention to cuDNN: multi-query calls (a prefill, a
native-form verify) at any length, and a single query once it attends 256 or more keys of a KV
cache. cuDNN's single-query result varies in the last bits run to run: on an H100, mlx-lm's
resident model fed one fixed sequence departed from itself at step 257-299 of 1024 (argmax in
11-15 steps), and repeated bit for bit over all 1024 with the variable 0 (docs/results/cuda.md,
twenty-fourth session). With it 0, MLX's own kernels run every attention: its fixed-order vector
kernel for a few queries, its unfused matmul and softmax for more (a prefill; not measured). MLX
reads the variable once a process, at its first attention call, so the package sets it when it
is imported; a value the user exported wins. Other backends ignore it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

CUDNN_SDPA = "MLX_CUDA_USE_CUDNN_SDPA"


def pin_attention() -> None:
    """MLX's own attention kernels on CUDA unless CUDNN_SDPA is set already (module doc)."""
    os.environ.setdefault(CUDNN_SDPA, "0")


def cudnn_sdpa(env: Mapping[str, str] = os.environ) -> str:
    """The setting `env` (this process's, or a child's) gives MLX (its default where unset:
    "1")."""
    return env.get(CUDNN_SDPA, "1")
