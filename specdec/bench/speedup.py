"""`specdec bench speedup`: speculative decoding against plain decoding in measured seconds on
this machine, and the acceptance at which it breaks even.

    specdec bench speedup --model DIR --budget 25% --drafters oracle:1,oracle:0.9,oracle:0.8 \
        --gammas 3,4 --tokens 64 [--routing TRACE] [--profile NAME] [--json] [--out FILE]

Greedy decoding. Each (drafter, γ) runs in lockstep with a plain run of its own
(specdec.bench.lockstep): the model is loaded twice at the budget (two caches: twice the arena
in memory) and the two sides take turns a pass at a time, so a disk or a thermal state that
drifts over minutes moves both sides of a speed-up alike (on the lent H100, three grids measured
so landed within 0.05 of each other, two between plain runs 0.14 apart: docs/results/cuda.md,
the thirty-second session). Where two caches do not fit (a 24 GB Mac at a 9 GB budget),
`--pairing between` loads the model once and runs each speculative run between two plain runs,
its speed-up against their mean time per token: less precise where the machine drifts, and the
result says so (`pairing`, and each row's two plain rates); it also times a budget that holds
every expert, which lockstep refuses.

Per run: each side's tok/s (decode: prefill excluded), the speed-up, acceptance, bytes per
committed token against plain's, the GB/s each side's reads reached, and whether its tokens are
plain greedy's (they must be). With oracle drafters at two α or more, the break-even α per γ,
where the measured speed-up crosses 1 (costmodel.speedup.measured_break_even); with --profile,
the device model's speed-up and break-even beside. `--gammas auto` runs `--gamma auto` beside
plain (auto prices its passes on --profile, else the default profile). The result records its
config, seed, versions and machine. In lockstep a budget that holds every expert is refused:
there plain decoding starts the next token before it yields one, which lockstep cannot time
apart (`specdec bench overhead` measures that regime).
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from specdec.bench.lockstep import Pair, paired_runs, prepare, two_models
from specdec.checkpoint.bundled import DEFAULT_PROMPT
from specdec.clock.profiles import get_profile
from specdec.core.errors import SpecdecError
from specdec.core.machine import machine_info
from specdec.costmodel.speedup import break_even_words, measured_break_even
from specdec.decode.drafters import DrafterSpec
from specdec.decode.loop import DecodeConfig
from specdec.decode.run import GenerationResult, generate
from specdec.gamma.spec import Gamma
from specdec.stream.loader import StreamedModel, load
from specdec.trace.format import Trace, load_trace

SEED = 0  # the decodes' seed (DecodeConfig's default): greedy needs none, the oracle's draws do
PAIRINGS = ("lockstep", "between")  # each run beside a plain run of its own, or between two


@dataclass(frozen=True)
class SpeedupConfig:
    model: str
    budget: str
    drafters: tuple[str, ...]
    gammas: tuple[int | str, ...]  # fixed γ >= 2, or "auto" (auto's choice against plain)
    tokens: int = 64
    prompt: str = DEFAULT_PROMPT
    routing: str | None = None  # a routing trace every MoE layer follows (None: the router)
    profile: str | None = None  # a device profile to model each run on beside
    pairing: str = "lockstep"  # PAIRINGS: "between" loads the model once (one cache)

    def check(self) -> None:
        """Refuse a bad config before any model loads (a user error: one line)."""
        if self.pairing not in PAIRINGS:
            raise SpecdecError(f"--pairing {self.pairing}: give one of {', '.join(PAIRINGS)}")
        if self.tokens < 2:
            raise SpecdecError(f"--tokens {self.tokens}: give at least 2")
        if not self.drafters or not self.gammas:
            raise SpecdecError("give at least one drafter (--drafters) and one γ (--gammas)")
        for d in self.drafters:
            if DrafterSpec.parse(d).name == "none":
                raise SpecdecError("drafter none drafts nothing: every run is beside plain already")
        for g in self.gammas:
            if Gamma.parse(g).fixed == 1:
                raise SpecdecError("γ 1: give γ >= 2 or auto (1 is the plain side itself)")


def measure_speedup(cfg: SpeedupConfig) -> dict:
    """Every (drafter, γ) of `cfg` beside plain decoding (in lockstep, or between plain runs:
    `cfg.pairing`): rows, break-even α per γ, and what produced them."""
    cfg.check()
    profiles = (get_profile(cfg.profile),) if cfg.profile else ()
    routing = load_trace(Path(cfg.routing)) if cfg.routing else None
    runs = [(d, Gamma.parse(g).label) for d in cfg.drafters for g in cfg.gammas]
    with _loaded(cfg) as models:
        sm = models[0]
        prompt = sm.encode(cfg.prompt)
        if cfg.pairing == "between":
            pairs = _between_runs(sm, prompt, runs, cfg.tokens, profiles, routing)
        else:
            pairs = paired_runs(models, prompt, runs, cfg.tokens, profiles, routing)
        rows = [_row(p, profiles) for p in pairs]
        ran = {"model_path": str(sm.source or sm.path), "model_hash": sm.model_hash,
               "io": sm.streamer.reader.io, **sm.plan.stats()}  # fmt: skip
    return {
        "config": asdict(cfg),
        "seed": SEED,
        "ran": ran,  # the model, its read path and each side's cache, as resolved
        "rows": rows,
        "break_even": _break_even(rows, profiles),
        "machine": machine_info(),
    }


@contextlib.contextmanager
def _loaded(cfg: SpeedupConfig) -> Iterator[tuple[StreamedModel, ...]]:
    """Two models at the budget in lockstep (one cache a side), one where runs go between plain
    runs."""
    if cfg.pairing == "lockstep":
        with two_models(cfg.model, cfg.budget, with_mtp=_mtp(cfg)) as models:
            yield models
        return
    sm = load(cfg.model, budget=cfg.budget, with_mtp=_mtp(cfg))
    try:
        yield (sm,)
    finally:
        sm.close()


def _between_runs(
    sm: StreamedModel,
    prompt: list[int],
    runs: list[tuple[str, int | str]],
    tokens: int,
    profiles: tuple,
    routing: Trace | None,
) -> Iterator[Pair]:
    """`--pairing between`: a plain run, then each (drafter, γ) of `runs` followed by another
    plain run, every run from a cold cache on the one model (warmed first, as lockstep's); each
    run paired with the plain runs either side of it (`_bracket`)."""
    reference = prepare((sm,), prompt, runs, tokens, routing)

    def run(drafter: str, gamma: int | str) -> GenerationResult:
        sm.reset_cache()
        return generate(sm, prompt, drafter, DecodeConfig(gamma, tokens), profiles,
                        stop_at_eos=False, routing=routing, reference=reference)  # fmt: skip

    before = run("none", 1)
    for k, (drafter, gamma) in enumerate(runs):
        spec, after = run(drafter, gamma), run("none", 1)
        yield Pair(k, drafter, gamma, _bracket(before, after), spec, None)
        before = after


def _bracket(before: GenerationResult, after: GenerationResult) -> GenerationResult:
    """The plain runs either side of a speculative run as one: their mean time per token and
    mean read rate (bytes, tokens and modeled time are the same run to run: a plain greedy run
    from a cold cache), and both rates as measured (`plain_runs_tokens_per_s`)."""
    rates = [r.summary["tokens_per_s"] for r in (before, after)]
    gbps = [r.summary["miss_gb_per_s"] for r in (before, after)]
    summary = {
        **before.summary,
        "tokens_per_s": 1 / statistics.mean(1 / t for t in rates),
        "miss_gb_per_s": statistics.mean(gbps) if None not in gbps else None,
        "plain_runs_tokens_per_s": rates,
    }
    return replace(before, summary=summary)


def _mtp(cfg: SpeedupConfig) -> bool:
    """The MTP layer loaded only where a drafter drafts with it."""
    return any(DrafterSpec.parse(d).needs_mtp for d in cfg.drafters)


def _row(pair: Pair, profiles: tuple) -> dict:
    plain, spec = pair.plain.summary, pair.spec.summary
    row = {
        "drafter": pair.drafter,
        "gamma": pair.gamma,
        "acceptance": spec["acceptance"],
        "plain_tokens_per_s": plain["tokens_per_s"],
        "tokens_per_s": spec["tokens_per_s"],
        "speedup": spec["tokens_per_s"] / plain["tokens_per_s"],
        "bytes_per_token_vs_plain": _ratio(spec["bytes_per_token"], plain["bytes_per_token"]),
        "plain_read_gbps": plain["miss_gb_per_s"],
        "read_gbps": spec["miss_gb_per_s"],
        "tokens_equal": pair.spec.tokens == pair.plain.tokens,
    }
    if "plain_runs_tokens_per_s" in plain:  # --pairing between: the plain runs either side
        row["plain_runs_tokens_per_s"] = plain["plain_runs_tokens_per_s"]
    for p in profiles:  # the model on the same records (summarize prices each side)
        key = f"modeled_tokens_per_s/{p.name}"
        row[f"modeled_speedup/{p.name}"] = spec[key] / plain[key]
    return row


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None  # a plain run that read nothing: no ratio


def _break_even(rows: list[dict], profiles: tuple) -> dict[str, dict]:
    """Per γ with oracle runs at two acceptances or more: where the measured speed-up (and each
    profile's modeled one) crosses 1 over the oracle's α; None where α 1 still loses."""
    out: dict[str, dict] = {}
    for g in sorted({r["gamma"] for r in rows}, key=str):
        specs = [(DrafterSpec.parse(r["drafter"]), r) for r in rows if r["gamma"] == g]
        pts = sorted(
            ((s.options.alpha, r) for s, r in specs if s.name == "oracle"), key=lambda p: p[0]
        )
        if len(pts) < 2:
            continue
        keys = ["speedup"] + [f"modeled_speedup/{p.name}" for p in profiles]
        out[str(g)] = {k: measured_break_even([(a, r[k]) for a, r in pts]) for k in keys}
        out[str(g)]["alphas"] = [a for a, _ in pts]
    return out


def speedup_lines(result: dict) -> list[str]:
    """The result as text: one line a run, then the break-even α per γ."""
    return run_lines(result) + break_even_lines(result)


def run_lines(result: dict) -> list[str]:
    """One line a run: against its plain run, measured and modeled."""
    lines = []
    for r in result["rows"]:
        modeled = "".join(
            f", modeled {v:.2f}x ({k.split('/', 1)[1]})"
            for k, v in r.items()
            if k.startswith("modeled_speedup/")
        )
        acc = "—" if r["acceptance"] is None else f"{r['acceptance']:.2f}"
        b = r["bytes_per_token_vs_plain"]
        either = r.get("plain_runs_tokens_per_s")  # --pairing between
        side = f" (runs either side: {either[0]:.2f}, {either[1]:.2f})" if either else ""
        lines.append(
            f"{r['drafter']} γ={r['gamma']}: acceptance {acc}, {r['tokens_per_s']:.2f} against "
            f"plain's {r['plain_tokens_per_s']:.2f}{side} tok/s, {r['speedup']:.2f}x{modeled}; "
            f"bytes/token {'—' if b is None else f'{b:.2f}x'} plain's; "
            f"tokens {'equal' if r['tokens_equal'] else 'DEPART from'} plain's"
        )
    return lines


def break_even_lines(result: dict) -> list[str]:
    """The break-even α per γ, measured and modeled, over the oracle's α."""
    lines = []
    for g, be in result["break_even"].items():
        text = ", ".join(
            f"{'measured' if k == 'speedup' else 'modeled (' + k.split('/', 1)[1] + ')'} "
            + break_even_words(v, be["alphas"][0], be["alphas"][-1])
            for k, v in be.items()
            if k != "alphas"
        )
        lines.append(
            f"break-even α, γ = {g} (oracle α {', '.join(f'{a:g}' for a in be['alphas'])}): {text}"
        )
    return lines
