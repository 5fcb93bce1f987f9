"""Typed schema of `specdec-exp`'s configuration, registered in Hydra's ConfigStore.

conf/config.yaml puts `specdec_exp` first in its defaults list, so every YAML file of conf/
is merged onto these dataclasses and a misspelt key or a wrong type fails at composition, not
halfway through a sweep. Tasks get the plain object: `to_config(cfg)` runs
`OmegaConf.to_object` once. No `from __future__ import annotations` here: OmegaConf reads the
annotations at class creation.

    python -c "from experiments.config import Config; print(Config())"
"""

import difflib
import re
from dataclasses import dataclass, field, fields, is_dataclass
from functools import cached_property
from typing import Any, Union

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from specdec.cache.spec import PolicySpec
from specdec.checkpoint.bundled import DEFAULT_PROMPT
from specdec.core.errors import SpecdecError
from specdec.core.units import DEFAULT_BUDGET, Budget
from specdec.decode.drafters import DrafterSpec
from specdec.decode.loop import DecodeConfig
from specdec.decode.verify_form import FORMS
from specdec.gamma.spec import Gamma
from specdec.report.wandb_sink import check_mode
from specdec.stream.config import StreamConfig

_STREAM, _DECODE = StreamConfig(), DecodeConfig()  # the library's defaults are the schema's


@dataclass
class ModelConfig:
    name: str = MISSING  # short name for tags and tables
    path: str = MISSING  # bundled name, mlx-lm or packed directory, or random:FAMILY
    bits: int | None = 4  # random:FAMILY only: quantization of the generated checkpoint
    io: str | None = _STREAM.io  # direct | buffered | mmap | pinned; null: the backend's
    threads: int = _STREAM.threads


@dataclass
class CacheConfig:
    policy: str = str(_STREAM.policy)  # a registered policy, +demote +protect
    budget: str = DEFAULT_BUDGET  # 512MiB, 2GB, 96slots or N% of all experts
    # d > 0: each MoE layer starts the reads the router d layers on will want
    lookahead: int = _STREAM.lookahead
    hotlist: str | None = None  # a ds4 hotlist: seeds hotness, pinned by static (required)


@dataclass
class DeviceConfig:
    profile: str = MISSING  # built-in name or a YAML/JSON profile file


@dataclass
class LoggerConfig:
    mode: str = "offline"  # offline | online | disabled
    project: str = "specdec"
    entity: str | None = None
    tags: list[str] = field(default_factory=list)


@dataclass
class TaskConfig:
    name: str = "union_cost"  # a module of experiments/tasks/
    trace_gammas: list[int] = field(default_factory=lambda: list(range(1, 9)))
    alphas: list[float] = field(  # acceptances the report tabulates best γ and speedup at
        default_factory=lambda: [0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0]
    )
    options: dict[str, Any] = field(default_factory=dict)  # knobs of tasks added later


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    # the drafter group: `name` plus the options of that drafter's Options dataclass (registry
    # of specdec/decode/drafters/), checked when the spec is made in to_config
    drafter: dict[str, Any] = field(default_factory=lambda: {"name": DrafterSpec().name})
    cache: CacheConfig = field(default_factory=CacheConfig)
    device: DeviceConfig = field(default_factory=DeviceConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    # positions per verify pass (1 = plain decoding), or auto: chosen before each pass
    # (specdec.gamma.chooser); checked by to_config
    gamma: Union[int, str] = _DECODE.gamma.label  # noqa: UP007 -- OmegaConf needs typing.Union
    max_tokens: int = _DECODE.max_tokens
    temp: float = _DECODE.temp
    seed: int = _DECODE.seed
    # how a verify pass computes its positions (specdec/decode/verify_form.py): decode | native
    verify_form: str = _DECODE.verify_form
    prompt: str = DEFAULT_PROMPT
    stop_at_eos: bool = False  # False: every run decodes exactly max_tokens, so runs compare
    sweep: str = "adhoc"  # sweep name: the wandb group and the folder under runs/
    progress: bool = True  # tqdm bars on stderr

    @cached_property
    def drafter_spec(self) -> DrafterSpec:
        """The decode library's drafter spec, made once from the `drafter` group."""
        return DrafterSpec.from_fields(self.drafter)


def register() -> None:
    ConfigStore.instance().store(name="specdec_exp", node=Config)


SWEEP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=,+-]*")


def check_sweep_name(name: str) -> None:
    """A sweep name is one folder under runs/sweeps/: no `/`, no `..`, nothing hidden."""
    if not SWEEP_NAME.fullmatch(str(name)):
        raise SpecdecError(
            f"sweep={name}: a sweep name is one folder name (letters, digits and ._=,+- , "
            "starting with a letter or digit); to write elsewhere set hydra.sweep.dir=DIR"
        )


def _check_keys(node: dict, schema: type, prefix: str = "") -> None:
    """Every key of `node` is a field of the dataclass `schema` (recursively; dict fields such
    as `drafter` and `task.options` are open); else one line naming it and the valid keys."""
    valid = [f.name for f in fields(schema)]
    types = {f.name: f.type for f in fields(schema)}
    for key, value in node.items():
        if key not in types:
            close = difflib.get_close_matches(str(key), valid, n=1)
            hint = f"did you mean {prefix}{close[0]}=...?" if close else "fix the override"
            where = prefix.rstrip(".") or "the config"
            raise SpecdecError(
                f"unknown config key '{prefix}{key}': {where} has {', '.join(valid)}; {hint}"
            )
        if is_dataclass(types[key]) and isinstance(value, dict):
            _check_keys(value, types[key], f"{prefix}{key}.")


def to_config(cfg: DictConfig) -> Config:
    """The composed config as the typed object (Hydra's own `hydra` node left out)."""
    plain = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    # a group option may leave a value to the user (`path: ???`); the schema has no default
    # for those keys, so a merge cannot hide the gap
    missing = sorted(OmegaConf.missing_keys(plain))
    if missing:
        raise SpecdecError(
            f"{', '.join(missing)} must be set: add e.g. {missing[0]}=VALUE to the command "
            "(conf/ leaves it to you)"
        )
    # `+gama=4` or `+cache.polcy=lru` adds a key the schema lacks; to_object drops a nested one
    _check_keys(OmegaConf.to_container(plain, resolve=False), Config)
    typed = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), plain))
    check_sweep_name(typed.sweep)
    typed.gamma = Gamma.parse(typed.gamma)
    if typed.verify_form not in FORMS:
        raise SpecdecError(f"verify_form={typed.verify_form}: use {' or '.join(FORMS)}")
    typed.drafter_spec  # noqa: B018 -- a bad drafter option fails here, before any job starts
    # ... and so do a bad budget, policy or logger: before a job's folder gets its config.json
    # and a wandb run for a job that never ran
    Budget.parse(typed.cache.budget)
    PolicySpec.parse(typed.cache.policy)
    check_mode(typed.logger.mode)
    bad = [g for g in typed.task.trace_gammas if g < 1]
    if bad:
        raise SpecdecError(
            f"task.trace_gammas={typed.task.trace_gammas}: every γ must be >= 1 (1 is plain "
            "decoding), e.g. task.trace_gammas=[1,2,4,8]"
        )
    return typed
