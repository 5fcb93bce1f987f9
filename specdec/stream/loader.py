"""Load an mlx-lm MoE checkpoint with its routed experts streamed from disk.

    sm = specdec.load("tiny", budget="64MiB", policy="lru", io="direct")
    logits = sm.model(mx.array([[1, 2, 3]]))   # experts read through sm.streamer

The model is mlx-lm's own class, built and quantized by mlx-lm's loader from the packed
directory's `model.safetensors` (every non-routed weight); then each MoE block's switch module
(found by type, whatever attribute holds it: specdec.checkpoint.discover) is replaced by a
`StreamedSwitchGLU` before any expert weight is materialised, so a 100 GB model
never touches memory beyond its resident weights and the arena. An mlx-lm directory that is not
packed yet is packed into a cache directory on first use (SPECDEC_CACHE, default
~/.cache/specdec).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.utils import load_model, load_tokenizer

from specdec.cache.expert_cache import ExpertCache
from specdec.cache.spec import PolicySpec
from specdec.checkpoint.backend import fit_for_backends
from specdec.checkpoint.bundled import BUNDLED, DEFAULT_MODEL, resolve_model
from specdec.checkpoint.config_check import check_config, check_quantized
from specdec.checkpoint.discover import model_classes, switch_sites
from specdec.checkpoint.families import Family, get_family
from specdec.core.accelerator import on_cuda
from specdec.core.errors import SpecdecError, StoreError
from specdec.core.files import cache_root, check_readable
from specdec.pack.agree import check_experts, check_layers
from specdec.pack.pack import pack, source_files
from specdec.pack.packed_cache import hold_in_use, remove_old_copies
from specdec.pack.verify import verify_resident
from specdec.store.arena import Arena, block_layout
from specdec.store.budget import SlotPlan, plan_slots
from specdec.store.layout import EXPERTS_BIN, EXPERTS_JSON, INDEX_VERSION, MTP_FILE, ExpertIndex
from specdec.store.pools import PoolArenas, PooledReader, PoolPlan, plan_pools, pool_index
from specdec.store.reader import ExpertReader, default_io
from specdec.stream.config import StreamConfig
from specdec.stream.mixed import pooled_cache
from specdec.stream.source import ExpertSource
from specdec.stream.streamed import StreamedSwitchGLU
from specdec.stream.streamer import Lookahead, Streamer

_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")


@dataclass
class StreamedModel:
    """A loaded model: mlx-lm model and tokenizer, its expert streamer, and its MTP module."""

    model: nn.Module
    tokenizer: Any
    streamer: Streamer
    mtp: nn.Module | None
    config: dict
    family: Family
    path: Path  # the packed directory
    # what the budget bought: slots, arena bytes, whether it holds every expert (per pool)
    plan: SlotPlan | PoolPlan
    policy: PolicySpec = PolicySpec()
    policy_options: dict | None = None
    in_use_lock: int | None = None  # fd of the shared lock on a cached pack (packed_cache.py)
    source: Path | None = None  # the model directory `path` argument resolved to (absolute)
    model_hash: str = ""  # ExpertIndex.content_hash: config.json + the pack's checksums

    def reset_cache(self) -> None:
        """Start cold again: an empty cache with the same policy, and zeroed read counters."""
        s = self.streamer
        src = s.source
        src.settle_all()  # a failed lookahead read no longer matters: the cache is rebuilt
        s.deferred.clear()
        src.cache = new_cache(
            self.policy, self.plan, self.policy_options, src.key_stride, src.index
        )
        src.reader.reset_stats()
        s.log.drain()
        s.preload()

    @property
    def top_k(self) -> int:
        return _top_k(self.config)

    @property
    def main_moe_layers(self) -> list[int]:
        """MoE layer ids of the main model (the MTP layer, packed after them, excluded)."""
        return [lid for lid in self.streamer.index.layer_ids if lid < len(self.model.layers)]

    def encode(self, text: str) -> list[int]:
        """Prompt token ids, as the tokenizer gives them without added special tokens."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def close(self) -> None:
        self.streamer.reader.close()
        if self.in_use_lock is not None:
            os.close(self.in_use_lock)
            self.in_use_lock = None


def ensure_packed(model_dir: Path) -> Path:
    """`model_dir` if it is packed, else its packed copy in the cache (packing it if needed)."""
    if (model_dir / EXPERTS_JSON).exists() or (model_dir / EXPERTS_JSON).is_symlink():
        return model_dir  # a broken index (even a symlink loop) is reported by ExpertIndex.load
    if (model_dir / EXPERTS_BIN).exists():  # a packed dir whose index is gone: don't re-pack it
        raise StoreError(
            f"{model_dir}/experts.json not found: {model_dir} is a packed directory without its "
            f"index; re-pack it from the model directory (specdec pack MODEL_DIR {model_dir} "
            "--force), then run `specdec verify`"
        )
    # the stamp covers every file the pack is made from (tokenizer files and chat templates
    # too: a changed chat template is a new pack) and the index format
    stamp = hashlib.sha1(f"{model_dir.resolve()}:{INDEX_VERSION}".encode())
    for f in source_files(model_dir):
        st = f.stat()
        stamp.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    out = cache_root() / "packed" / f"{model_dir.name}-{stamp.hexdigest()[:12]}"
    if not (out / EXPERTS_JSON).exists():
        pack(model_dir, out)
        remove_old_copies(model_dir, out)  # the model changed: its older copies are stale
    return out


def resolve(path: str | Path, revision: str | None = None) -> Path:
    """The model directory `--model` names, in this order: a bundled model's bare name, an
    existing directory (checkpoint/bundled.py `resolve_model`), a Hugging Face repo id (ORG/NAME
    that is no local path) fetched as mlx-lm fetches it (mlx_lm.utils._download: the hub cache,
    HF_HUB_CACHE, HF_HUB_OFFLINE, `revision`)."""
    text = str(path)
    if not Path(text).expanduser().exists() and re.fullmatch(r"[\w.-]+/[\w.-]+", text):
        if text[0] not in ".~":
            return _from_hub(text, revision)
    return resolve_model(path)


def _from_hub(repo: str, revision: str | None) -> Path:
    from mlx_lm.utils import _download  # mlx-lm's own: `mlx_lm.generate --model ORG/NAME`

    try:
        return Path(_download(repo, revision=revision))
    except (OSError, ValueError) as e:  # huggingface_hub's errors: not found, offline, HTTP
        at = f" at revision {revision}" if revision else ""
        if isinstance(e, FileNotFoundError):  # LocalEntryNotFoundError: offline, not cached
            why = "not in the Hugging Face cache, and the hub is offline (HF_HUB_OFFLINE) or out of reach"
        else:
            why = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise SpecdecError(
            f"model {repo!r}{at}: {why}; check the repo id and revision, download it online once, "
            "or pass a model directory"
        ) from None


def _top_k(config: dict) -> int:
    cfg = config.get("text_config", config)
    try:
        return int(cfg["num_experts_per_tok"])
    except (KeyError, TypeError, ValueError):
        raise SpecdecError(
            "config.json has no valid num_experts_per_tok (the router's top-k); restore the "
            "config.json of the original model"
        ) from None


def load(
    path: str | Path = DEFAULT_MODEL,
    stream: StreamConfig | None = None,
    *,
    with_mtp: bool = True,
    revision: str | None = None,
    **settings,
) -> StreamedModel:
    """Build the streamed model; `stream` says how its experts stream (budget, policy, io, ...).

    Without `stream`, keywords name its fields (`load("tiny", budget="10%", policy="lru")`).
    lookahead d > 0 starts reading, at each MoE layer, the experts that the router d MoE layers
    later picks on this layer's input; warm reads every routed expert at load, as mlx-lm loads
    every weight, so decode needs no read and no host sync of the router (device tables).
    """
    if stream is not None and settings:
        raise TypeError(f"load: pass a StreamConfig or its fields, not both ({sorted(settings)})")
    stream = stream or StreamConfig(
        **{k: v for k, v in settings.items() if k != "policy_options" or v is not None}
    )
    stream = replace(stream, io=stream.io or default_io())  # as it ran: the summary records it
    src = resolve(path, revision)  # revision: of a Hugging Face repo id
    check_readable(src)
    if not (src / "config.json").is_file():
        if (src / EXPERTS_JSON).is_file():  # a pack that lost its config.json, as verify says
            raise SpecdecError(f"{src.resolve()}/config.json missing; re-pack with `specdec pack`")
        bundled = f" (the bundled model is `--model {src.name}`)" if src.name in BUNDLED else ""
        raise SpecdecError(
            f"{src.resolve()}: no config.json; give an mlx-lm model directory or a packed "
            f"one{bundled}"
        )
    try:
        config = json.loads((src / "config.json").read_text())
        model_type = config.get("model_type", "?")
    except (ValueError, AttributeError) as e:
        raise SpecdecError(
            f"{src}/config.json is not a JSON object ({e}); restore it from the original model"
        ) from None
    # one line for a type mlx-lm does not know, or a key it could not build the model from
    check_config(config, model_classes(config)[1], f"{src}/config.json")
    family = get_family(model_type)
    packed = ensure_packed(src)
    in_use = hold_in_use(packed) if packed != src else None  # a cached copy: not to be removed
    try:
        sm = _load_packed(packed, family, stream, with_mtp)
    except BaseException:
        if in_use is not None:
            os.close(in_use)
        raise
    sm.in_use_lock = in_use
    sm.source = src.resolve()
    return sm


def _load_packed(
    packed: Path,
    family: Family,
    stream: StreamConfig,
    with_mtp: bool,
) -> StreamedModel:
    budget, policy, lookahead = stream.budget, stream.policy, stream.lookahead
    index = ExpertIndex.load(packed)
    # the recorded resident files, headers as packed (a truncated or edited one: one line, not
    # MLX's error); their checksums are `specdec verify`'s
    verify_resident(packed, index, crc=False)
    names = [t.name for ts in index.resident.values() for t in ts]
    check_quantized(
        json.loads((packed / "config.json").read_text()), names, f"{packed}/config.json"
    )
    try:
        model, config = load_model(packed, lazy=True, strict=False)
    except (ValueError, TypeError, AttributeError, KeyError, ZeroDivisionError) as e:
        # config.json passed its checks (config_check.py) but still does not fit the weights:
        # mlx-lm fails inside a layer or in quantize (e.g. a head count that changes a width)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise SpecdecError(
            f"{packed}: mlx-lm cannot build the model from config.json ({first}); restore the "
            "config.json the model was packed with"
        ) from None
    tokenizer = _load_tokenizer(packed)
    sites = switch_sites(model)
    if not sites:
        raise SpecdecError(
            f"{packed}: mlx-lm's {family.name} has no SwitchGLU/SwitchMLP layers, so there are "
            "no routed experts to stream; run a dense model with mlx-lm itself"
        )
    blocks = {lid: site.block for lid, site in sites.items()}
    if lookahead:
        family.require_route(f"--lookahead {lookahead}")
        # measured: docs/results/cuda.md, "Router lookahead where reads dominate": host writes
        # into managed memory while kernels ran on neighbouring slots changed greedy output on an
        # H200; a pinned read lands by the GPU's copy engine, so no managed page moves
        if on_cuda() and stream.io != "pinned":
            raise SpecdecError(
                f"--lookahead {lookahead} on CUDA with --io {stream.io}: its reads land in "
                "managed memory while kernels run on neighbouring slots, which changed greedy "
                "output on an H200; use --io pinned (the default there) or --lookahead 0"
            )
    n_main = len(model.layers)
    check_layers(packed, sorted(blocks), n_main, index)

    k = _top_k(config)
    resident = [*packed.glob("model*.safetensors"), *([packed / MTP_FILE] if with_mtp else [])]
    streamed = [lid for lid in index.layer_ids if lid < n_main or with_mtp]
    resident_bytes = sum(f.stat().st_size for f in resident if f.is_file())
    key_stride = max(index.layers[lid].n_experts for lid in index.layer_ids)
    policy_options = {"scratch": 8 * k, **stream.policy_options}
    _check_hotlist(policy_options.get("hotlist") or (), index)

    def open_reader(view: ExpertIndex, arena: Arena) -> ExpertReader:
        io, threads, crc = stream.io, stream.threads, stream.verify_checksums
        return ExpertReader(packed, view, arena, io=io, threads=threads, verify_checksums=crc)

    if index.mixed:  # two block sizes: a slot pool, reader and cache per precision
        plan = plan_pools(budget, index, k, resident_bytes, streamed)
        hot, cold = pool_index(index, cold=False), pool_index(index, cold=True)
        arena = PoolArenas(
            Arena(plan.hot.n_slots, hot.slot_bytes, block_layout(hot)),
            Arena(plan.cold.n_slots, cold.slot_bytes, block_layout(cold)),
        )
        reader = PooledReader(open_reader(hot, arena.hot), open_reader(cold, arena.cold))
    else:
        plan = plan_slots(budget, index, k, resident_bytes, streamed)
        arena = Arena(plan.n_slots, index.slot_bytes, block_layout(index))
        reader = open_reader(index, arena)
    cache = new_cache(policy, plan, policy_options, key_stride, index)
    order = sorted(blocks)
    if lookahead >= len(order):  # no layer that far ahead: nothing would be prefetched
        raise SpecdecError(
            f"--lookahead {lookahead}: this model has {len(order)} MoE layers, so a router looks "
            f"at most {len(order) - 1} ahead; give 0 to {len(order) - 1}"
        )
    ahead_of = {
        lid: (order[i + lookahead], blocks[order[i + lookahead]])
        for i, lid in enumerate(order)
        if lookahead and i + lookahead < len(order)
    }
    streamer = Streamer(
        ExpertSource(index, arena, reader, cache, key_stride, holds_all=plan.holds_all),
        last_layer=order[-1],
        lookahead=Lookahead(lookahead, ahead_of),
        warm=stream.warm,
        streamed=tuple(streamed),
    )
    for lid, site in sites.items():
        check_experts(packed, lid, site.switch, index)
        streamed_switch = StreamedSwitchGLU(streamer, lid, site.switch, site.block, family.route)
        setattr(site.owner, site.attr, streamed_switch)
    streamer.preload()

    _load_resident_strictly(model, packed, n_main)
    mtp = _load_streamed_mtp(model, packed, streamer, family, n_main, index) if with_mtp else None
    for m in (model, mtp):  # mlx-lm's MLA weights, made fit for every backend (CUDA too)
        if m is not None:
            fit_for_backends(m)
    mx.eval(model.parameters())
    sm = StreamedModel(
        model, tokenizer, streamer, mtp, config, family, packed, plan, policy, policy_options
    )
    sm.model_hash = index.content_hash((packed / "config.json").read_bytes())
    return sm


def _load_tokenizer(packed: Path):
    try:
        return load_tokenizer(packed)
    except Exception as e:  # transformers raises ValueError, OSError, JSON errors, ...
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise SpecdecError(
            f"{packed}: cannot load the tokenizer ({first}); copy the tokenizer files "
            "(tokenizer.json, tokenizer_config.json) from the original model"
        ) from None


def _check_hotlist(pairs, index: ExpertIndex) -> None:
    """Every (layer, expert) of a hotlist must be one of the packed model's routed experts."""
    for layer, expert in pairs:
        if layer not in index.layers or not 0 <= expert < index.layers[layer].n_experts:
            raise SpecdecError(
                f"hotlist entry (layer {layer}, expert {expert}) is not a routed expert of this "
                f"model (MoE layers {index.layer_ids}): use a hotlist profiled on this model"
            )


def new_cache(policy: PolicySpec, plan, options: dict, key_stride: int, index: ExpertIndex):
    """An empty cache for `plan`: one ExpertCache, or a PooledCache for a mixed pack."""
    if isinstance(plan, PoolPlan):
        make = lambda n, opts: build_cache(policy, n, opts, key_stride)  # noqa: E731
        return pooled_cache(make, plan, options, key_stride, index)
    return build_cache(policy, plan.n_slots, options, key_stride)


def build_cache(
    policy: PolicySpec, n_slots: int, options: dict | None, key_stride: int
) -> ExpertCache:
    """An empty cache; hotlist (layer, expert) pairs become cache keys."""
    opts = dict(options or {})
    if opts.get("hotlist"):
        opts["hotlist"] = [int(layer) * key_stride + int(e) for layer, e in opts["hotlist"]]
    return policy.cache(n_slots, **opts)


def _load_resident_strictly(model: nn.Module, packed: Path, n_main: int) -> None:
    """Reload the resident weights strictly: every parameter left in the model must be on disk.

    mlx-lm's loader ran with strict=False (the routed experts are not in model.safetensors);
    after the swap the model has no expert parameters left, so a strict load now catches any
    resident tensor that is missing or has the wrong shape. MTP keys (layer index >= the main
    model's layer count) are loaded separately.
    """
    weights: dict[str, mx.array] = {}
    for f in sorted(packed.glob("model*.safetensors")):
        weights.update(mx.load(str(f)))
    weights = model.sanitize(weights) if hasattr(model, "sanitize") else weights
    main = {
        name: w
        for name, w in weights.items()
        if not ((m := _LAYER_RE.search(name)) and int(m.group(1)) >= n_main)
    }
    have = dict(tree_flatten(model.parameters()))
    missing = sorted(have.keys() - main.keys())
    if missing:
        raise SpecdecError(
            f"{packed}: model.safetensors lacks {len(missing)} resident tensors "
            f"(first: {missing[0]}); re-pack the model"
        )
    try:
        model.load_weights([(n, main[n]) for n in have], strict=True)
    except ValueError as e:  # a shape that config.json and model.safetensors disagree on
        raise SpecdecError(
            f"{packed}: config.json does not match model.safetensors ({e}); restore the "
            "config.json the model was packed with, or re-pack it"
        ) from None


def _load_streamed_mtp(model, packed, streamer, family, n_main, index) -> nn.Module | None:
    """The family's MTP module (model.mtp_class), its experts streamed as layer `n_main`, if
    the packed directory has one."""
    if not (packed / MTP_FILE).exists():
        return None
    from specdec.checkpoint.mtp import load_mtp

    mtp = load_mtp(packed, model, with_experts=False)
    if mtp is None:
        return None
    if n_main not in index.layers:
        raise SpecdecError(
            f"{packed}: mtp.safetensors present but its experts are not packed; re-pack"
        )
    owner, attr, block = mtp.switch_site()
    switch = getattr(owner, attr)
    check_experts(packed, n_main, switch, index)
    setattr(owner, attr, StreamedSwitchGLU(streamer, n_main, switch, block, family.route))
    return mtp
