"""The training fast paths of training/tiny_ops.py equal the stock MLX/mlx-lm code.

    pytest tests/checkpoint/test_tiny_ops.py

The `tiny` model was trained with them, so its weights are only mlx-lm weights if these are
exact: same outputs and same gradients as SwitchGLU (gather_mm) and nn.losses.cross_entropy.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm.models.switch_layers import SwitchGLU

from training.tiny_ops import SortedSwitchGLU, cross_entropy


def _skewed_indices(rng, b: int, t: int, n: int, k: int) -> mx.array:
    p = rng.dirichlet(np.full(n, 0.3))  # uneven loads; some experts get nothing
    rows = [rng.choice(n, k, replace=False, p=p) for _ in range(b * t)]
    return mx.array(np.array(rows, dtype=np.uint32).reshape(b, t, k))  # [B, T, k]


def test_sorted_switch_glu_matches_gather_mm_outputs_and_gradients():
    rng = np.random.default_rng(0)
    mx.random.seed(0)
    b, t, h, inter, n, k = 2, 24, 64, 32, 16, 4
    stock = SwitchGLU(h, inter, n)
    fast = SortedSwitchGLU(h, inter, n)
    fast.update(stock.parameters())
    x = mx.random.normal((b, t, h))
    inds = _skewed_indices(rng, b, t, n, k)
    assert int(np.bincount(np.array(inds).ravel(), minlength=n).min()) == 0
    assert mx.allclose(fast(x, inds), stock(x, inds), atol=1e-5)

    def loss(model, x):
        return (model(x, inds) ** 2).sum()

    (v1, g1), (v2, g2) = (nn.value_and_grad(m, loss)(m, x) for m in (stock, fast))
    assert abs(v1.item() - v2.item()) <= 1e-4 * abs(v1.item())
    for (name, a), (_, c) in zip(tree_flatten(g1), tree_flatten(g2), strict=True):
        assert mx.allclose(a, c, atol=1e-4, rtol=1e-4), name
    gx1 = mx.grad(lambda x: loss(stock, x))(x)
    gx2 = mx.grad(lambda x: loss(fast, x))(x)
    assert mx.allclose(gx1, gx2, atol=1e-4, rtol=1e-4)


def test_numpy_cross_entropy_matches_mlx_value_and_gradient():
    mx.random.seed(1)
    logits = mx.random.normal((3, 7, 50)) * 4  # [B, T, V]
    targets = mx.random.randint(0, 50, (3, 7))

    def ref(lg):
        return nn.losses.cross_entropy(lg, targets).mean()

    assert mx.allclose(cross_entropy(logits, targets), ref(logits), atol=1e-5)
    g_ref = mx.grad(lambda lg: 2.5 * ref(lg))(logits)
    g_fast = mx.grad(lambda lg: 2.5 * cross_entropy(lg, targets))(logits)
    assert mx.allclose(g_fast, g_ref, atol=1e-6)
