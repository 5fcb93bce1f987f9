"""Which mlx-lm MoE families specdec streams and which features work on each, by real checks.

    report = check_family("olmoe", root)       # a FamilyReport; root: a scratch directory
    python -m analysis.families                 # the README table "Bring your own checkpoint"

For one family: a tiny random checkpoint built from mlx-lm's own class (`make_random`), packed
and loaded at a budget of 40% of the expert slots (so reads and evictions happen), then

- streams: pack, load and forward; exact: the streamed logits against mlx-lm's resident model
  over an 8-token prefill and 4 decode steps (largest difference), and greedy tokens against
  mlx-lm's `generate_step` (the test suite holds both to tests/helpers.py's contract);
- router: the family's `route` against the block's own choice (the indices its switch module
  receives, in order) and the weights the block mixes expert outputs with (probed by a switch
  that returns one-hot rows; equal up to a constant factor, which renormalisation cancels);
- self-draft: the self drafter at γ = 2 gives the plain greedy tokens (lossless); lookahead:
  `lookahead=1` logits equal the resident ones; trace: `record_trace` runs (it compares the route
  with the streamed block's routing itself);
- mtp: the loaded model has an MTP module to draft with.

A check that cannot run says why in `notes` (no router adapter, an untrimmable cache).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from specdec.checkpoint.discover import switch_sites
from specdec.checkpoint.families import Route, get_family
from specdec.core.errors import SpecdecError

PROMPT = [1, 5, 9, 33, 100, 7, 8, 200]  # [8] token ids, all below the tiny vocabulary


@dataclass
class FamilyReport:
    """What `check_family` found; None: not checked (see notes)."""

    family: str
    bits: int | None
    streams: bool = False
    worst: float | None = None  # largest |streamed - resident| logit
    greedy: list[int] = field(default_factory=list)  # streamed greedy tokens
    ref_greedy: list[int] = field(default_factory=list)  # mlx-lm's generate_step tokens
    ref_logits: list[np.ndarray] = field(default_factory=list)  # mlx-lm's, per greedy token
    router: bool | None = None
    self_draft: bool | None = None
    lookahead_worst: float | None = None  # the same with lookahead=1
    trace: bool | None = None
    # every traced position's experts distinct at every layer (Family.distinct_picks)
    distinct: bool | None = None
    mtp: bool = False
    can_speculate: bool = True
    restores: bool = False  # γ > 1 by restoring untrimmable state (decode/rollback.py)
    notes: list[str] = field(default_factory=list)


class _Spy(nn.Module):
    """Stands in for a module and calls `fn` instead; `fn` stays out of the parameter tree."""

    def __init__(self, fn):
        super().__init__()
        self._fn = (fn,)

    def __call__(self, *args):
        return self._fn[0](*args)


def _swapped(owner: nn.Module, attr: str, fn, run):
    """run() with owner.attr replaced by a module calling fn; restored afterwards."""
    original = getattr(owner, attr)
    setattr(owner, attr, _Spy(fn))
    try:
        return run()
    finally:
        setattr(owner, attr, original)


def route_mismatch(model: nn.Module, route: Route, tokens: list[int]) -> str | None:
    """None if `route` picks what each MoE block picks and weighs as it weighs; else why not."""
    sites = switch_sites(model)
    seen: dict[int, list] = {lid: [] for lid in sites}  # lid -> [block input, switch indices]

    def tapped(lid: int):
        site = sites[lid]
        block_call = site.block.__call__  # the block's own bound method, not the spy

        def block(x):
            seen[lid].append(x)
            return block_call(x)

        def switch(x, inds):
            seen[lid].append(inds)
            return site.switch(x, inds)

        return block, switch

    def run_all(i: int = 0):
        if i == len(sites):
            return mx.eval(model(mx.array([tokens])))
        lid = sorted(sites)[i]
        block, switch = tapped(lid)
        site = sites[lid]
        layer = model.layers[lid]
        return _swapped(
            layer,
            site.block_attr,
            block,
            lambda: _swapped(site.owner, site.attr, switch, lambda: run_all(i + 1)),
        )

    run_all()
    for lid, site in sites.items():
        x, inds = seen[lid][:2]
        got, scores = route(site.block, x)
        if got.shape != inds.shape or not np.array_equal(np.array(got), np.array(inds)):
            return f"layer {lid}: route's indices differ from the block's"
        mixed = _mixing_weights(site, x, inds.shape[-1])  # [T, k]
        k = inds.shape[-1]
        want = np.array(scores.astype(mx.float32)).reshape(-1, k)
        norm = lambda a: a / a.sum(-1, keepdims=True)  # noqa: E731
        if not np.allclose(norm(mixed), norm(want), atol=1e-4):
            return f"layer {lid}: route's scores are not the block's mixing weights"
    return None


def _mixing_weights(site, x: mx.array, k: int) -> np.ndarray:
    """[T, k]: what the block adds per expert slot when slot j's expert returns the unit vector
    e_j (minus what it adds when every expert returns 0: shared experts cancel)."""
    hidden = x.shape[-1]

    def stub(value: float):
        eye = mx.eye(k, hidden) * value  # [k, H]: expert slot j writes `value` at dim j
        return lambda xx, ii: mx.broadcast_to(eye, (*ii.shape, hidden)).astype(xx.dtype)

    y1 = _swapped(site.owner, site.attr, stub(1.0), lambda: site.block(x))
    y0 = _swapped(site.owner, site.attr, stub(0.0), lambda: site.block(x))
    return np.array((y1 - y0).astype(mx.float32)).reshape(-1, hidden)[:, :k]


def _logit_diff(ref_model, sm) -> float:
    from mlx_lm.models.cache import make_prompt_cache

    caches = make_prompt_cache(ref_model), make_prompt_cache(sm.model)
    worst, feed = 0.0, PROMPT
    for _ in range(5):  # the prefill, then 4 single-token steps
        a, b = (
            np.array(m(mx.array([feed]), cache=c)[0].astype(mx.float32))
            for m, c in zip((ref_model, sm.model), caches, strict=True)
        )
        worst = max(worst, float(np.abs(a - b).max()))
        feed = [int(a[-1].argmax())]
    return worst


def check_family(family: str, root: Path, bits: int | None = None, tokens: int = 8) -> FamilyReport:
    """Run every check on `family`'s tiny random checkpoint (see module doc)."""
    from mlx_lm import load as mlx_load
    from mlx_lm.generate import generate_step
    from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache

    from specdec.checkpoint.random_models import make_random
    from specdec.decode.loop import DecodeConfig
    from specdec.decode.rollback import check_speculation
    from specdec.decode.run import generate, plain_greedy
    from specdec.probes.record import record_trace
    from specdec.stream.loader import load

    r = FamilyReport(family, bits)
    src = root / f"{family}-{bits or 'f32'}"
    if not (src / "config.json").exists():
        make_random(family, src, bits=bits, seed=0)
    ref_model, _ = mlx_load(str(src))
    fam = get_family(family)
    sm = load(src, budget="40%", io="buffered")
    try:
        r.streams, r.mtp = True, sm.mtp is not None
        r.worst = _logit_diff(ref_model, sm)
        sm.reset_cache()
        steps = list(generate_step(mx.array(PROMPT), ref_model, max_tokens=tokens))
        r.ref_greedy = [int(t) for t, _ in steps]
        r.ref_logits = [np.array(lp.astype(mx.float32)) for _, lp in steps]
        r.greedy = generate(
            sm, PROMPT, "none", DecodeConfig(max_tokens=tokens), stop_at_eos=False
        ).tokens
        r.restores = not can_trim_prompt_cache(make_prompt_cache(sm.model))
        try:
            check_speculation(sm, 2)
        except SpecdecError as e:
            r.can_speculate = False
            r.notes.append(str(e))
        if fam.route is None:
            r.notes.append(f"no router adapter for {family}")
        else:
            why = route_mismatch(ref_model, fam.route, PROMPT)
            r.router = why is None
            if why:
                r.notes.append(why)
            sm.reset_cache()
            rec = record_trace(sm, [PROMPT], max_tokens=3, distances=(1,))
            r.trace = rec.trace.experts.shape[0] > 0
            picks = np.sort(rec.trace.experts, axis=-1)  # [T, L, k]
            r.distinct = bool((np.diff(picks, axis=-1) != 0).all())
            sm.reset_cache()
            if r.can_speculate:
                plain = plain_greedy(sm, PROMPT, tokens, stop_at_eos=False)
                cfg = DecodeConfig(gamma=2, max_tokens=tokens)
                r.self_draft = generate(sm, PROMPT, "self", cfg, stop_at_eos=False).tokens == plain
    finally:
        sm.close()
    if fam.route is not None:
        ahead = load(src, budget="40%", io="buffered", with_mtp=False, lookahead=1)
        try:
            r.lookahead_worst = _logit_diff(ref_model, ahead)
        finally:
            ahead.close()
    return r
