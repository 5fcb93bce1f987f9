"""`to_host`: a device array read on the host keeps its values, dtype and shape on either path
(tolist for small arrays, the fast read on MLX's CUDA backend; np.array past SMALL_READ)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from specdec.core.accelerator import SMALL_READ, to_host


@pytest.mark.parametrize("dtype", [mx.uint32, mx.int32, mx.int64, mx.uint8, mx.float32, mx.bool_])
@pytest.mark.parametrize("shape", [(), (1, 1, 8), (3, 5), (SMALL_READ + 1,)])
def test_to_host_keeps_values_dtype_and_shape(dtype, shape):
    a = (mx.arange(int(np.prod(shape)), dtype=mx.int32).reshape(shape) * 7 - 3).astype(dtype)
    got, want = to_host(a), np.array(a)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)


def test_to_host_evaluates_a_lazy_array():
    x = mx.array([3, 1, 2], dtype=mx.uint32)
    assert to_host(mx.argsort(x)).tolist() == [1, 2, 0]
