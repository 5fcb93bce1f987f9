"""Probes found by name, as the cache policies and the drafters are.

A probe is one module of this package: a `Probe` subclass decorated with `@register`, with its
`name`, where `specdec probe --help` and `probe all` list it (`listed`), what it needs
(`needs`: a routing trace, a model's MoE inputs, a read-bench JSON...), the `ProbeOptions`
fields it reads (`options`; a probe with knobs of its own gives a subclass of ProbeOptions as
`Options`, each new field with `metadata={"help": ...}`, and the command line grows a flag for
it), its headline for specdec-exp and a `run(opts, ctx)` that writes its files through
specdec/probes/report.py and returns a `ProbeOutput`; plus, if it should be an experiment, a
conf/experiment/NAME.yaml. Nothing else changes to add one: `specdec probe NAME` and
`specdec-exp task.name=NAME` find it here.

    out = run_probe("eviction", ProbeOptions(model="tiny", budgets=parse_budgets(["10%"])))
    out.rows, out.files["md"]          # the rows, and <out>/<name>.{md,json,png}

Budgets are `specdec.core.units.Budget`s (`10%` of all routed experts, bytes `512MiB`, slots
`96slots`); `parse_budgets` reads a list of them at the edge (the command line's `--budgets`,
Hydra's `task.options.budgets`) and refuses a bare number, the old spelling.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from specdec.cache.spec import PolicySpec
from specdec.checkpoint.bundled import DEFAULT_MODEL
from specdec.core.errors import BudgetError, SpecdecError
from specdec.core.registry import Registry
from specdec.core.units import Budget

# what a probe may need (`Probe.needs`):
#   trace          a routing trace: --trace, or recorded from --prompts on --model
#   profile_trace  a second trace (a hotlist's source): --profile-trace, or --profile-prompts
#   inputs         the model's MoE inputs, recorded on --model (a trace does not hold them)
#   model          the model's weights (--model)
#   read_json      `specdec bench read --json` output (--read-json)
NEEDS = ("trace", "profile_trace", "inputs", "model", "read_json")

_BARE = re.compile(r"^\s*[+-]?([0-9]*\.?[0-9]+(e[+-]?[0-9]+)?|inf|nan)\s*$", re.IGNORECASE)


def parse_budgets(
    values: Iterable[str | int | float | Budget], where: str, fractions: bool = False
) -> list[Budget]:
    """Budget per value (`10%`, `512MiB`, `96slots`). A bare number is refused, the message
    rewriting it in the old spelling's meaning: a percent on the command line (`10` -> `10%`,
    the list comma-separated), a fraction in an experiment file (`0.1` -> `10%`, a YAML list
    when `fractions`; a number above 1 there a percent: `10` -> `10%`). `where` starts the
    message."""
    values = list(values)
    if not values:
        raise BudgetError(f"{where}: give at least one budget, e.g. 10%,25%")
    bare = [not isinstance(v, Budget) and bool(_BARE.match(str(v))) for v in values]
    if any(bare):
        # an experiment file's numbers were fractions; one above 1 there is a percent already
        # (`[10]` -> 10%, not 1000%), as on the command line
        fixed = [
            f"{float(v) * (100 if fractions and abs(float(v)) <= 1 else 1):g}%" if b else str(v)
            for v, b in zip(values, bare, strict=True)
        ]
        shown = f"[{', '.join(fixed)}]" if fractions else ",".join(fixed)
        raise BudgetError(
            f"{where}: a budget needs its unit; write {shown} for shares of the routed experts "
            "(or bytes, 512MiB, or slots, 96slots)"
        )
    return [Budget.parse(v) for v in values]


def budget_slots(budget: Budget, n_layers: int, n_experts: int, slot_bytes: int, top_k: int):
    """Whole slots of `budget` in a model of n_layers x n_experts routed experts: a share is
    rounded to the nearest slot and raised to one position's top-k; bytes (of the largest
    expert's slot) and slots are taken as given and must hold the top-k. At most every expert."""
    total = n_layers * n_experts
    if budget.percent is not None:
        n = max(top_k, int(round(budget.percent / 100 * total)))
    else:
        n = budget.to_slots(slot_bytes)
        if n < top_k:
            raise BudgetError(
                f"budget {budget} is {n} slots, below one position's top-k = {top_k}: "
                f"use at least {top_k}slots"
            )
    return min(n, total)


def trace_budget_slots(trace, budget: Budget) -> int:
    """budget_slots in the model a routing trace was recorded on."""
    return budget_slots(budget, trace.n_layers, trace.n_experts, trace.slot_bytes, trace.top_k)


DEFAULT_BUDGETS = ("5%", "10%", "20%", "30%", "50%", "75%")


@dataclass
class ProbeOptions:
    """The knobs every probe shares; each probe reads only its own fields (`Probe.options`)."""

    model: str = DEFAULT_MODEL
    out: str = "runs/probes"
    trace: str | None = None  # evaluated trace; recorded from `prompts` when None
    profile_trace: str | None = None  # hotlist source (eviction); recorded from `profile_prompts`
    prompts: str = "heldout"
    profile_prompts: str = "profile"
    limit: int | None = None  # prompts per set
    max_tokens: int = 32
    budgets: list[Budget] = field(
        default_factory=lambda: [Budget.parse(b) for b in DEFAULT_BUDGETS]
    )
    positions: str = "decode"
    policy: PolicySpec = PolicySpec()  # residency (gates), the prefetch replay's cache (lookahead)
    read_json: str = "benchmarks/results/read.json"

    def __post_init__(self):
        if not all(isinstance(b, Budget) for b in self.budgets):
            raise TypeError(f"budgets={self.budgets!r}: Budget values (parse_budgets)")
        self.policy = PolicySpec.parse(self.policy)  # text from the command line or Hydra

    @property
    def where(self) -> str:
        """What the evaluated trace is, for titles."""
        return self.trace or f"{self.model}, prompts {self.prompts}"


BASE_FIELDS = tuple(f.name for f in dataclasses.fields(ProbeOptions))


@dataclass
class ProbeOutput:
    rows: list[dict]
    files: dict  # {"json" | "md" | "png": Path}, as write_report returns them


class Probe:
    """Base probe; a subclass sets the class attributes and `run`."""

    name = ""
    listed = 100  # order in --help and in `probe all` (built-in probes first)
    needs: tuple[str, ...] = ()  # of NEEDS
    options: tuple[str, ...] = ()  # the ProbeOptions (or Options) fields it reads
    Options: type = ProbeOptions
    headline_name = ""  # specdec-exp's headline metric (empty: the job has none)

    @classmethod
    def headline(cls, rows: list[dict]) -> float | None:
        return None

    @classmethod
    def skip(cls, opts: ProbeOptions) -> str | None:
        """Why `probe all` leaves this probe out with these options (None: it runs)."""
        if "read_json" in cls.needs and not Path(opts.read_json).is_file():
            return f"{opts.read_json} not found, {cls.name} skipped (run `specdec bench read`)"
        if "inputs" in cls.needs and opts.trace:
            return f"{cls.name} needs the model's MoE inputs, not a trace: {cls.name} skipped"
        return None

    @classmethod
    def run(cls, opts: ProbeOptions, ctx: ProbeContext) -> ProbeOutput:
        raise NotImplementedError


PROBES = Registry("probe")


def register(cls: type[Probe]) -> type[Probe]:
    """Class decorator: make the probe findable by its `name` (`all` is taken)."""
    if cls.name == "all" or not cls.name.isidentifier():
        raise ValueError(f"probe name {cls.name!r}: a Python identifier other than 'all'")
    unknown = set(cls.needs) - set(NEEDS)
    if unknown:
        raise ValueError(f"probe {cls.name}: unknown needs {sorted(unknown)} (known: {NEEDS})")
    return PROBES.register(cls)


def probe_names() -> tuple[str, ...]:
    """The probes in the order `--help` and `probe all` list them."""
    return tuple(sorted(PROBES, key=lambda n: (PROBES[n].listed, n)))


def get_probe(name: str) -> type[Probe]:
    if name not in PROBES:
        raise SpecdecError(f"unknown probe {name!r}: use one of {', '.join(probe_names())} or all")
    return PROBES[name]


def make_options(name: str, fields: dict, where: str = "options") -> ProbeOptions:
    """The probe's Options from `fields`; a field it does not know is one line naming them."""
    cls = get_probe(name).Options
    known = [f.name for f in dataclasses.fields(cls)]
    extra = sorted(set(fields) - set(known))
    if extra:
        raise SpecdecError(
            f"probe {name} has no option {', '.join(extra)} ({where} takes "
            f"{', '.join(known)}): drop {extra[0]}"
        )
    return cls(**fields)


_LOADED: dict[str, object] = {}  # model -> StreamedModel, loaded once per process
_RECORDED: dict[tuple, object] = {}  # (model, prompts, max_tokens, limit) -> Recording


class ProbeContext:
    """What a probe's `run` takes its inputs from: traces (loaded or recorded), recordings with
    MoE inputs, the loaded model. A model is loaded once per process and a prompt set recorded
    once, so `probe all` records each set once for every probe."""

    def __init__(self, opts: ProbeOptions):
        self.opts = opts

    def model(self):
        """The StreamedModel of opts.model with every expert resident (budget 100%): a trace
        does not depend on the cache, and the gates probe runs blocks on every expert."""
        from specdec.stream.loader import load

        m = self.opts.model
        if m not in _LOADED:
            _LOADED[m] = load(m, budget="100%", with_mtp=False)
        return _LOADED[m]

    def recording(self, prompts: str, keep_inputs: bool = False):
        """`prompts` recorded on opts.model; a recording with MoE inputs also serves requests
        without them."""
        from specdec.probes.record import record

        o = self.opts
        key = (o.model, prompts, o.max_tokens, o.limit)
        rec = _RECORDED.get(key)
        if rec is None or (keep_inputs and rec.inputs is None):
            rec = record(
                o.model,
                prompts,
                o.max_tokens,
                limit=o.limit,
                keep_inputs=keep_inputs,
                sm=self.model(),
            )
            _RECORDED[key] = rec
        return rec

    def trace(self, path: str | None, prompts: str):
        from specdec.trace.format import load_trace

        return load_trace(path) if path else self.recording(prompts).trace

    def eval_trace(self):
        return self.trace(self.opts.trace, self.opts.prompts)

    def profile_trace(self):
        return self.trace(self.opts.profile_trace, self.opts.profile_prompts)


def run_probe(name: str, opts: ProbeOptions) -> ProbeOutput:
    """Run one probe: its files under opts.out, its rows returned."""
    probe = get_probe(name)
    if "inputs" in probe.needs and opts.trace:
        raise SpecdecError(f"probe {name} needs the MoE inputs, not a trace: drop --trace")
    return probe.run(opts, ProbeContext(opts))
