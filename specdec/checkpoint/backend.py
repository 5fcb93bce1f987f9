"""What mlx-lm's model code needs to run on every MLX backend: one module made rank-safe.

    fit_for_backends(model)     # after loading; the MTP module too; exact on every backend

mlx-lm's `QuantizedMultiLinear` (DeepSeek-style MLA attention: `embed_q` / `unembed_out`, one
weight per head, [H, out, in]) calls `mx.quantized_matmul` with an input of higher rank than
its weights ([B, H, L, in]). MLX broadcasts the weights to the input's batch shape first, and a
broadcast gives every size-1 dimension stride 0 — the scales' last one too when a row holds a
single quantization group (in == group size, as in small test models). MLX's CUDA quantized
kernels require the last two dimensions of weights, scales and biases row-contiguous and refuse
that ("No implementation for problem shape: 8x32x64x4 ..."); the CPU kernel copies it. Giving
the weights the input's rank by a reshape (fresh row-major strides: a view, no copy) leaves
nothing to broadcast but the input, so every backend takes the call; the arithmetic is the same
kernel on the same values, bit for bit (tests/checkpoint/test_backend.py).
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.mla import QuantizedMultiLinear


class RankedQuantizedMultiLinear(QuantizedMultiLinear):
    """QuantizedMultiLinear whose weights take the input's rank before the matmul."""

    def __call__(self, x: mx.array, transpose: bool = True) -> mx.array:
        w, scales, biases = self["weight"], self["scales"], self.get("biases")
        lead = (1,) * max(0, x.ndim - w.ndim)  # [H, out, in] -> [1, H, out, in] for [B, H, L, in]
        return mx.quantized_matmul(
            x,
            w.reshape(*lead, *w.shape),
            scales=scales.reshape(*lead, *scales.shape),
            biases=None if biases is None else biases.reshape(*lead, *biases.shape),
            transpose=transpose,
            group_size=self.group_size,
            bits=self.bits,
            mode=self.mode,
        )


def fit_for_backends(module: nn.Module) -> int:
    """Make every QuantizedMultiLinear of `module` rank-safe in place; returns how many."""
    n = 0
    for _, m in module.named_modules():
        if type(m) is QuantizedMultiLinear:
            m.__class__ = RankedQuantizedMultiLinear
            n += 1
    return n
