"""Acceptance rules of speculative decoding, on host numpy arrays (vocab-sized vectors).

greedy (temperature 0): a draft is accepted while it equals the target's argmax; the token
committed at the first mismatch (or after the last draft) is the target's argmax.
rejection (temperature > 0, Leviathan et al. 2023): accept draft x with probability
min(1, p(x)/q(x)); on rejection sample from norm(max(0, p - q)); after the last accepted draft
sample the bonus token from p. This preserves the target distribution exactly, whatever q is.
Deterministic drafters (lookup, oracle) have q = one-hot(x).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specdec.core.errors import SpecdecError

# The smallest temperature above 0 (0 is greedy). Below it sampling is greedy decoding in all
# but name: two logits a float32 apart (~1e-5 at magnitude 100) already differ e^10-fold at
# 1e-6; and far below (1e-320, a subnormal) logits / temp overflows to inf and every token is NaN.
MIN_TEMP = 1e-6


class NonFiniteLogits(SpecdecError):
    """The model produced NaN or inf logits: its weights (or a dtype's range) are broken."""


def check_finite(value: float) -> None:
    """Stop at a non-finite logit a decision used (one float: no extra pass over the logits)."""
    if not math.isfinite(value):
        raise NonFiniteLogits(
            f"the model's logits are not finite ({value}): its weights hold NaN or inf (or "
            "overflow their dtype); check the checkpoint (`specdec verify` a packed directory, "
            "or convert the model again)"
        )


def probs(logits: np.ndarray, temp: float) -> np.ndarray:
    """softmax(logits / temp) in float64, rows of [..., V]."""
    z = logits.astype(np.float64) / temp
    top = z.max(axis=-1, keepdims=True)  # NaN if any logit of the row is, inf if one is inf
    if not np.isfinite(top).all():
        check_finite(float(top[~np.isfinite(top)][0]))
    z -= top
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def sample(p: np.ndarray, rng: np.random.Generator) -> int:
    """One token from the distribution p [V] (inverse CDF, reproducible from rng)."""
    c = np.cumsum(p)
    return int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), len(p) - 1))


@dataclass(frozen=True)
class Verdict:
    accepted: int  # drafts accepted, 0..γ-1
    tokens: list[int]  # committed this pass: accepted drafts + one target token


def judge_greedy(drafts: list[int], target: np.ndarray, chosen: np.ndarray) -> Verdict:
    """`judge` at temperature 0 from each position's argmax `target` [γ] and its logit `chosen`
    [γ] alone (taken where the logits are: state.forward_greedy)."""
    # a NaN logit makes its whole row NaN (log_probs' logsumexp), and an inf one its pick inf
    # or NaN, whichever index an argmax takes (numpy's and MLX's CPU argmax take a NaN, MLX's
    # GPU kernels may not): the chosen values are finite iff the decision is sound
    if not np.isfinite(chosen).all():
        check_finite(float(chosen[~np.isfinite(chosen)][0]))
    n = 0
    while n < len(drafts) and drafts[n] == int(target[n]):
        n += 1
    return Verdict(n, drafts[:n] + [int(target[n])])


def judge(
    drafts: list[int],
    draft_q: np.ndarray | None,
    target_logits: np.ndarray,
    temp: float,
    rng: np.random.Generator,
) -> Verdict:
    """Decide a verify pass. target_logits: [γ, V], row i predicts the token after position i.

    draft_q: [γ-1, V] draft distributions (None = deterministic drafts, q = one-hot).
    """
    if temp == 0:
        target = target_logits.argmax(-1)  # [γ]
        return judge_greedy(drafts, target, target_logits[np.arange(len(target)), target])
    p = probs(target_logits, temp)  # [γ, V]
    for i, x in enumerate(drafts):
        q = draft_q[i] if draft_q is not None else None
        qx = 1.0 if q is None else q[x]
        if rng.random() < min(1.0, p[i, x] / qx):
            continue
        residual = p[i].copy()
        if q is None:
            residual[x] = 0.0
        else:
            residual = np.maximum(residual - q, 0.0)
        if residual.sum() <= 0:  # p == q: rejection has probability 0; guard rounding
            residual = p[i]
        return Verdict(i, drafts[:i] + [sample(residual / residual.sum(), rng)])
    return Verdict(len(drafts), drafts + [sample(p[len(drafts)], rng)])
