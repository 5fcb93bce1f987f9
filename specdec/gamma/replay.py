"""Speculative replay pass by pass, with modeled time: a fixed γ or `auto` choosing each pass.

    from specdec.gamma.replay import replay_passes, trace_clock
    clock = trace_clock(config, trace, "none")
    r = replay_passes(trace, "lru", 1130, "auto", alpha=0.8, clock=clock, profile=m4)
    r.bytes_per_token, r.tokens_per_s, r.choices   # choices: one Choice.record() per pass

`--gamma auto` must see the cache as it is before each pass, so this replay runs the passes one
at a time through the runtime's ExpertCache and policy classes (specdec.cache.policies), not as
one precomputed access sequence (specdec.sim.replay). Everything else is replay.py's: the
acceptance draws (the geometric draw of pass i, seeded as `plan_passes`), rejected positions
routed as recorded (rejected.npy) or as `rejected_routing` models them, passes that never cross
a prompt boundary, `new_sequence()` at each prompt, one cache step per MoE layer over the pass's
union (counts = positions selecting each expert), then tick(γ). A fixed γ gives the same hits as
`replay_trace` (tests/gamma/test_gamma_auto.py). Each pass is charged its modeled seconds on the
device clock (`PassClock.modeled`: the verify forward with its own unions and misses, plus the
draft phase the drafter's `draft_compute` implies; replay has no draft-phase reads).

`auto`'s counterfactual caches (specdec.gamma.shadows: plain's and one per candidate γ) are fed
each pass's committed positions, and reset at each prompt as the run's cache is. Under a plain
LRU the run's cache re-syncs to plain's shadow where the chooser says so (Choice.sync): its
reads are the pass's, priced as one batch before it (`PassesResult.resync_reads` counts them).
`specdec simulate --gamma auto` rows come from `auto_rows` here.

A pass's union must fit the cache (as in replay.py, BudgetError otherwise); `auto` considers only
γ with γ·k <= slots, so its passes always fit.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specdec.cache.spec import PolicySpec
from specdec.cache.speculative import verdict_keys
from specdec.clock.passes import PassClock, StepCounts, resync_time
from specdec.clock.profiles import DeviceProfile
from specdec.clock.shapes import ModelShape
from specdec.core.errors import BudgetError, SpecdecError
from specdec.core.inputs import read_json_object
from specdec.core.progress import progress
from specdec.gamma.chooser import (
    MAX_GAMMA,
    GammaChooser,
    Observed,
    can_resync,
    front_for,
    lru_reserve,
)
from specdec.gamma.shadows import Shadows, divergence, pass_keys
from specdec.gamma.spec import AUTO, Gamma
from specdec.sim.replay import prompt_starts, rejected_routing, routing_model, trace_routes
from specdec.trace.agree import check_trace_config
from specdec.trace.format import Trace, hotlist_keys, profile_hotlist


@dataclass
class PassesResult:
    policy: str
    budget_slots: int
    gamma: str  # "auto" or the fixed γ
    alpha: float
    committed: int
    passes: int
    bytes_read: float
    modeled_s: float
    hits: int
    accesses: int
    gamma_hist: list[int]  # passes per γ run (index γ)
    positions: int = 0  # positions the passes ran (rejected drafts included)
    choices: list[dict] = field(default_factory=list)  # auto: Choice.record() per pass
    resync_reads: int = 0  # auto: blocks its re-syncs to plain's shadow read (in bytes_read)

    @property
    def bytes_per_token(self) -> float:
        return self.bytes_read / max(self.committed, 1)

    @property
    def tokens_per_s(self) -> float:
        return self.committed / self.modeled_s if self.modeled_s > 0 else 0.0


def trace_clock(config: dict, trace: Trace, draft_compute: str = "none") -> PassClock:
    """The clock of a trace's model: shapes from its config.json, MoE layers from the trace."""
    layers = trace.layer_ids or list(range(trace.n_layers))
    shape = ModelShape.from_config(
        config, moe_layers=layers, expert_block_bytes=float(np.mean(trace.expert_bytes))
    )
    return PassClock(shape, tuple(range(shape.n_layers)), draft_compute)


def _pass_routes(e, rejected, t, n, a, rho_logp, rng) -> np.ndarray:
    """[n, L, k] experts of the pass at t: true for 0..a, then its rejected drafts."""
    routes = e[t : t + n].copy()  # [n, L, k]; rows past a are replaced below
    for i in range(a + 1, n):
        rec = rejected[t + i] if rejected is not None and t + i < len(rejected) else None
        if rec is not None and (rec >= 0).all():
            routes[i] = rec
        else:
            rho, logp = rho_logp()
            routes[i] = rejected_routing(routes[i - 1][None], rho, logp, rng)[0]
    return routes


def replay_passes(
    trace: Trace,
    policy: PolicySpec | str,
    budget_slots: int,
    gamma: Gamma | int | str,
    alpha: float,
    clock: PassClock,
    profile: DeviceProfile,
    seed: int = 0,
    positions: int | None = None,
    hotlist: list[int] | None = None,
    max_gamma: int | None = None,
) -> PassesResult:
    """Replay `trace` through `policy` in passes of `gamma` positions (or chosen by `auto`).
    A policy's speculation-aware options hear each pass's verdict, as the runtime's cache does."""
    spec = PolicySpec.parse(policy)
    gamma = Gamma.parse(gamma)
    e = trace_routes(trace, alpha, positions)  # [T, L, k]
    T, L, k = e.shape
    E = trace.n_experts
    if hotlist is None and spec.name == "static":
        hotlist = hotlist_keys(trace, profile_hotlist(trace))
    cache = spec.cache(budget_slots, hotlist=hotlist)
    cache.preload()  # a hotlist's keys, read before the first pass (not per token)
    block = np.asarray(trace.expert_bytes, np.float64)  # [L]
    layers = sorted(clock.shape.moe_layers)
    if len(layers) != L:
        raise SpecdecError(f"the clock's model has {len(layers)} MoE layers, the trace {L}")
    chooser = shadows = None
    if gamma.auto:
        widest = max(1, cache.max_step // k)  # every candidate's pass fits the cache
        cap = min(max_gamma or MAX_GAMMA, widest)

        def cost(g, context, union, misses, du, dm) -> float:
            return clock.expected(profile, g, context, layers, union, misses, block, du, dm)

        reserve = lru_reserve(spec, budget_slots, L, k)
        chooser = GammaChooser(
            cost, L, k, block, cache_blocks=reserve, front=front_for(reserve), max_gamma=cap,
            resync=can_resync(spec, reserve),
            resync_s=lambda reads: resync_time(profile, reads, float(block.max())),
        )  # fmt: skip
        shadows = Shadows(
            lambda: spec.cache(budget_slots, hotlist=hotlist),
            range(2, cap + 1),
            seed,
            L,
        )
        shadows.preload()
    ends = [*prompt_starts(trace, T).tolist(), T]
    geo = np.random.default_rng(seed).geometric(1.0 - alpha, T) - 1 if alpha < 1 else None
    rng = np.random.default_rng([seed, 1])
    model: list = []

    def rho_logp():
        if not model:
            model.append(routing_model(trace))
        return model[0]

    offsets = np.arange(L)[:, None] * E  # [L, 1]
    out = PassesResult(str(spec), budget_slots, str(gamma), alpha, 0, 0, 0.0, 0.0, 0, 0, [])
    t = seg = 0
    while t < T:
        while ends[seg] <= t:
            seg += 1
            cache.new_sequence()
            if shadows is not None:
                shadows.new_sequence(chooser.alphas())
        left = ends[seg] - t
        choice = chooser.choose(t, left, ends=seg == len(ends) - 1) if chooser else None
        resync = _resync(cache, shadows.plain, layers, block, E) if choice and choice.sync else []
        n = min(choice.gamma if choice else gamma.fixed, left)
        a = n - 1 if geo is None else min(int(geo[out.passes]), n - 1)
        routes = _pass_routes(e, trace.rejected, t, n, a, rho_logp, rng)  # [n, L, k]
        steps, union, misses = [], np.zeros(L), np.zeros(L)
        for li, (ks, counts) in enumerate(pass_keys(routes + offsets[None])):
            if len(ks) > cache.max_step:
                raise BudgetError(
                    f"a pass of {n} positions selects {len(ks)} experts at one layer, more than "
                    f"the cache's {cache.max_step}: raise the budget or lower gamma"
                )
            missed = len(cache.access(ks, counts))
            union[li], misses[li] = len(ks), missed
            steps.append(StepCounts(layers[li], len(ks), missed, int(missed * block[li])))
        cache.tick(n)
        if spec.options:  # the verdict: positions 0..a committed (keys carry their layer)
            cache.judge(*verdict_keys([(0, (routes + offsets[None]).reshape(n, -1))], a + 1))
        spent = (
            float(misses @ block) + sum(s.bytes_read for s in resync),
            clock.modeled(
                profile,
                drafted=n - 1,
                context=t,
                draft_steps=[],
                verify_steps=steps,
                measured_compute_s=0.0,
                resync_steps=resync,
            ).total_s,
        )
        out.resync_reads += sum(s.misses for s in resync)
        out.bytes_read += spent[0]
        out.modeled_s += spent[1]
        out.accesses += int(union.sum())
        out.passes += 1
        out.positions += n
        out.committed += a + 1
        out.gamma_hist += [0] * (n + 1 - len(out.gamma_hist))
        out.gamma_hist[n] += 1
        if chooser:
            out.choices.append(choice.record())
            seen = shadows.feed(e[t : t + a + 1] + offsets[None], chooser.alphas())
            cold = L * E - len(cache.resident_keys())
            tracked = chooser.tracks_divergence(cold)
            diverged, synced = divergence(cache, shadows.plain) if tracked else (None, False)
            chooser.observe(
                Observed(n, a, union, misses, plain_misses=seen.plain_misses,
                         shadow=seen.passes, context=t, spent=spent, cold=cold,
                         diverged=diverged, synced=synced)
            )  # fmt: skip
        t += a + 1
    out.hits = cache.hits
    return out


def _resync(cache, plain, layers: list[int], block: np.ndarray, E: int) -> list[StepCounts]:
    """`cache` takes plain's shadow's state (Choice.sync): its reads, one step per layer read."""
    read = np.bincount([key // E for key, _ in cache.adopt(plain)], minlength=len(layers))
    return [StepCounts(layers[li], 0, int(n), int(n * block[li])) for li, n in enumerate(read) if n]


def auto_setup(
    trace: Trace, policies: list[PolicySpec], lookahead: int, config: str | None, profile: str
) -> tuple[PassClock, DeviceProfile]:
    """(clock, profile) for `--gamma auto` rows; refuses what auto cannot replay. The profile
    is the one auto prices passes on (`auto_profile`: `profile` unless its compute is measured,
    noted on stderr)."""
    from specdec.cache.policies import policy_names
    from specdec.clock.check import MINIMAX_M25
    from specdec.clock.profiles import auto_profile, get_profile

    bad = [str(p) for p in policies if not p.runtime]
    if bad:
        raise SpecdecError(
            f"--gamma auto replays the runtime's policies ({', '.join(policy_names())}), not "
            f"{', '.join(bad)}: give those at fixed γ in another run"
        )
    if lookahead:
        raise SpecdecError("--lookahead replays plain decoding only: drop it with --gamma auto")
    if not config:
        raise SpecdecError(
            "--gamma auto costs passes in modeled time: give --config (the model's config.json, "
            "or minimax-m2.5)"
        )
    if config == "minimax-m2.5":
        model_config = MINIMAX_M25
    else:
        model_config = read_json_object(Path(config), "model config.json (--config)")
    # the preset too: a trace of another model priced on MiniMax's shapes is silently wrong
    check_trace_config(trace, model_config, "the trace", f"--config {config}")
    chosen, note = auto_profile((get_profile(profile),))
    if note:
        print(f"specdec: note: {note}", file=sys.stderr, flush=True)
    return trace_clock(model_config, trace), chosen


def auto_rows(
    trace: Trace,
    policies: list[PolicySpec],
    sizes: list[tuple[int, int]],
    hotlist: list[int] | None,
    alphas: list[float],
    seed: int,
    positions: int | None,
    clock: PassClock,
    profile: DeviceProfile,
) -> list:
    """One `--gamma auto` row per (α, policy, budget), replayed pass by pass."""
    from specdec.sim.simulate import SimResult

    given = hotlist is not None
    out = []
    runs = [(a, p, n, nbytes) for a in alphas for p in policies for n, nbytes in sizes]
    for alpha, policy, n, nbytes in progress(runs, desc="simulate γ auto", unit="replay"):
        r = replay_passes(
            trace, policy, n, AUTO, alpha, clock, profile, seed, positions,
            hotlist,
        )  # fmt: skip
        out.append(
            SimResult(
                policy=str(policy),
                budget_slots=n,
                budget_bytes=nbytes,
                accesses=r.accesses,
                hits=r.hits,
                misses=r.accesses - r.hits,
                hit_rate=r.hits / max(r.accesses, 1),
                bytes_read=r.bytes_read,
                bytes_per_token=r.bytes_per_token,
                positions=r.positions,
                gamma=AUTO.label,
                alpha=alpha,
                committed=r.committed,
                mean_union=r.accesses / max(r.passes * trace.n_layers, 1),
                hotlist="given" if given else "",
                modeled_tokens_per_s=r.tokens_per_s,
                gamma_hist=r.gamma_hist,
                gamma_auto_profile=profile.name,
            )
        )
    return out
