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

One case stays wrong on CUDA after the reshape: where a row holds a single quantization group
(in == group size, the scales' last dimension 1: the bundled `tiny` model's `embed_q`, 4 heads of
32 x 64). Measured on the H200 (MLX 0.32.4): two calls on the same input differ by up to 1.8 and
the resident tiny model's logits by up to 17 between repeated forwards, while every real
DeepSeek-V3 shape (several groups per row) equals the CPU's. There, `fit_for_backends` on a CUDA
device stores those weights dequantized (the values the quantized kernel would use, computed
once on the CPU) and the module computes as mlx-lm's float `MultiLinear`: a batched float
matmul, no quantized kernel. Resident and streamed models get the same fix, so streamed logits
still equal resident ones; the CPU path is unchanged.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.mla import MultiLinear, QuantizedMultiLinear

from specdec.core.accelerator import on_cuda


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


def _dequantized(m: QuantizedMultiLinear) -> None:
    """`m` in place as a float MultiLinear holding the values its quantized weights encode."""
    with mx.stream(mx.cpu):
        w = mx.dequantize(m["weight"], m["scales"], m.get("biases"), m.group_size, m.bits, m.mode)
        mx.eval(w)  # [H, out, in], the scales' dtype
    for name in ("scales", "biases"):
        m.pop(name, None)
    m.__class__ = MultiLinear
    m.weight = w


def fit_for_backends(module: nn.Module, dequantize_single_group: bool | None = None) -> int:
    """Make every QuantizedMultiLinear of `module` rank-safe in place; returns how many.
    dequantize_single_group (None: on a CUDA device): one whose rows hold a single quantization
    group becomes a float MultiLinear of its dequantized weights instead."""
    if dequantize_single_group is None:
        dequantize_single_group = on_cuda()
    n = 0
    for _, m in module.named_modules():
        if type(m) is QuantizedMultiLinear:
            if dequantize_single_group and m["scales"].shape[-1] == 1:
                _dequantized(m)
            else:
                m.__class__ = RankedQuantizedMultiLinear
            n += 1
    return n
