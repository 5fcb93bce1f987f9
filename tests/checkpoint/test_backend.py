"""specdec.checkpoint.backend: mlx-lm's MLA weights made rank-safe, and nothing else changed.

The CUDA backend refuses a quantized matmul whose broadcast scales have stride 0 in their last
dimension; the reshape that avoids it must compute what mlx-lm computes, bit for bit.

    pytest tests/checkpoint/test_backend.py
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten
from mlx_lm.models.mla import MultiLinear, QuantizedMultiLinear

from specdec.checkpoint.backend import RankedQuantizedMultiLinear, fit_for_backends


@pytest.mark.parametrize("in_dims, group", [(64, 64), (128, 64), (256, 32)])
@pytest.mark.parametrize("transpose", [True, False])
def test_ranked_multilinear_equals_mlx_lm_bit_for_bit(in_dims, group, transpose):
    heads, out = 4, 64
    dense = MultiLinear(in_dims, out, heads)
    q = dense.to_quantized(group, 4)
    assert type(q) is QuantizedMultiLinear
    shape = (2, heads, 3, in_dims if transpose else out)
    x = mx.random.normal(shape, key=mx.random.key(1)).astype(mx.bfloat16)  # [B, H, L, in]
    if not transpose:
        q = MultiLinear(out, in_dims, heads).to_quantized(group, 4)
        x = mx.random.normal((2, heads, 3, in_dims), key=mx.random.key(2)).astype(mx.bfloat16)
    want = q(x, transpose=transpose)
    assert fit_for_backends(q) == 1 and type(q) is RankedQuantizedMultiLinear
    got = q(x, transpose=transpose)
    assert got.shape == want.shape and mx.array_equal(got, want).item()


def test_fit_for_backends_swaps_every_quantized_multilinear_and_nothing_else():
    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_q = MultiLinear(64, 32, 4).to_quantized(64, 4)
            self.unembed_out = MultiLinear(32, 64, 4).to_quantized(32, 4)
            self.dense = MultiLinear(64, 32, 4)
            self.proj = nn.QuantizedLinear(64, 64, group_size=64, bits=4)

    a = Attn()
    params = set(dict(tree_flatten(a.parameters())))
    assert fit_for_backends(a) == 2
    assert type(a.embed_q) is RankedQuantizedMultiLinear
    assert type(a.unembed_out) is RankedQuantizedMultiLinear
    assert type(a.dense) is MultiLinear and type(a.proj) is nn.QuantizedLinear
    assert fit_for_backends(a) == 0  # once is enough
    assert set(dict(tree_flatten(a.parameters()))) == params  # no weight moved or added


@pytest.mark.parametrize("in_dims, dequantized", [(64, True), (128, False)])
def test_single_group_rows_dequantized_where_asked(in_dims, dequantized):
    """CUDA's batched quantized matmul is wrong where a row holds one group (measured on the
    H200); there the weights become the float values they encode: the same products up to the
    float rounding of another kernel, and no quantized parameters left."""
    q = MultiLinear(in_dims, 32, 4).to_quantized(64, 4)
    x = mx.random.normal((1, 4, 3, in_dims), key=mx.random.key(3))  # [B, H, L, in]
    want = q(x)
    w = mx.dequantize(q.weight, q.scales, q.biases, 64, 4)
    assert fit_for_backends(q, dequantize_single_group=True) == 1
    assert (type(q) is MultiLinear) is dequantized
    names = {k for k, _ in tree_flatten(q.parameters())}
    if dequantized:
        assert names == {"weight"} and mx.array_equal(q.weight, w).item()
        assert mx.allclose(q(x), want, atol=1e-4).item()
    else:
        assert mx.array_equal(q(x), want).item()
