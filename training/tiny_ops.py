"""Training-only fast paths for MLX on CPU, exact and with the stock modules' parameters.

Used by training/train_tiny.py; not run on its own. Both replace a slow MLX CPU kernel
with an exact equivalent (checked against the stock code: outputs and gradients agree to
float32 rounding), so the trained weights load into the unmodified mlx-lm modules.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from mlx_lm.models.switch_layers import SwitchGLU


class SortedSwitchGLU(SwitchGLU):
    """SwitchGLU computed exactly by grouping token-slots by expert, one dense matmul each.

    Same parameters and same math as mlx-lm's SwitchGLU, whose `gather_mm` (and its backward)
    runs at ~4 GFLOP/s on our CPU. Sorting the M = tokens·k assignments by expert and running
    each expert's rows as a plain matmul is ~4x faster in training (measured, fwd+bwd) and
    pads nothing. Training only; the saved model uses the stock classes.
    """

    def __call__(self, x: mx.array, indices: mx.array) -> mx.array:
        *lead, k = indices.shape  # x [B, T, H], indices [B, T, k]
        h = x.shape[-1]
        flat = np.array(indices).reshape(-1)  # [M] host copy: the split needs concrete sizes
        e = self.gate_proj.weight.shape[0]
        order = np.argsort(flat, kind="stable")  # assignments grouped by expert
        counts = np.bincount(flat, minlength=e)
        xs = x.reshape(-1, h)[mx.array(order // k)]  # [M, H]
        parts = mx.split(xs, np.cumsum(counts)[:-1].tolist(), axis=0)  # E x [count_e, H]
        w_up, w_gate, w_down = (
            mx.split(p.weight, e, axis=0) for p in (self.up_proj, self.gate_proj, self.down_proj)
        )  # E x [1, out, in]
        outs = [
            self.activation(xp @ w_up[i][0].T, xp @ w_gate[i][0].T) @ w_down[i][0].T
            for i, xp in enumerate(parts)
            if counts[i]
        ]  # [count_e, H] each
        inverse = np.empty_like(order)
        inverse[order] = np.arange(order.size)
        ys = mx.concatenate(outs, axis=0)[mx.array(inverse)]  # [M, H] back in token order
        return ys.reshape(*lead, k, h)  # [B, T, k, H]


def _softmax_parts(logits: mx.array, targets: mx.array):
    lg = np.array(logits, copy=False).reshape(-1, logits.shape[-1])  # [N, V]
    t = np.array(targets).reshape(-1)  # [N]
    m = lg.max(-1, keepdims=True)
    e = np.exp(lg - m)
    return lg, t, m, e, e.sum(-1, keepdims=True)


@mx.custom_function
def cross_entropy(logits: mx.array, targets: mx.array) -> mx.array:
    """Mean token cross-entropy, computed in numpy: MLX's CPU `exp` is ~10x slower than
    numpy's, and the two [N, 4096] softmaxes per step dominated the step time."""
    lg, t, m, _, s = _softmax_parts(logits, targets)
    lse = np.log(s[:, 0]) + m[:, 0]
    return mx.array((lse - lg[np.arange(t.size), t]).mean(dtype=np.float64).astype(np.float32))


@cross_entropy.vjp
def _cross_entropy_vjp(primals, cotangent, output):
    logits, targets = primals
    _, t, _, e, s = _softmax_parts(logits, targets)
    g = e / s  # softmax - onehot, over N
    g[np.arange(t.size), t] -= 1.0
    g *= np.array(cotangent) / t.size
    return mx.array(g.reshape(logits.shape)), mx.zeros_like(targets)
