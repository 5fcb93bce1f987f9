"""Tiny random-weight checkpoints of real mlx-lm model classes, for tests and demos.

`specdec make-random FAMILY OUT_DIR [--quantize BITS] [--seed N]` builds the family's mlx-lm
`Model` from a scaled-down config (hidden 64, 3 layers, 16 experts, top-4, float32), draws every
parameter at random (routers and DeepSeek's `e_score_correction_bias` too, so routing is real and
varies across tokens), optionally quantizes the whole model the way `mlx_lm.convert -q` does
(affine, group size 64), and writes it with mlx-lm's own `save_model`/`save_config`, so
`mlx_lm.load(OUT_DIR)` opens it. The tokenizer is a byte-level BPE trained here with `tokenizers`
on a few stdlib sources; nothing comes from a hub.

DeepSeek-V3 and GLM-4.5 (glm4_moe) checkpoints also get `mtp.safetensors`: one random MTP layer
of the family's layout (model/mtp.py) stored as `model.layers.{num_hidden_layers}.*` (for
DeepSeek-V3's layout enorm, hnorm, eh_proj, shared_head.norm and a full MoE decoder layer with
stacked `mlp.switch_mlp` experts), as in the Hugging Face checkpoint.
mlx-lm's loader ignores the file (it only reads model*.safetensors); `specdec pack` packs it.

Python: `make_random("qwen3_moe", "/tmp/q", bits=4)`. Real dimensions (`--like PRESET`):
specdec.model.random_scale.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import io
import json
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

from specdec.errors import SpecdecError
from specdec.model.bpe import train_byte_bpe
from specdec.store.files import check_replaceable, fresh_dir, swap_dir
from specdec.store.layout import MTP_FILE

VOCAB = 512
GROUP_SIZE = 64
EOS = "<|endoftext|>"
RANDOM_KIND = "random"  # the ownership marker's kind (store/files.py)

# Scaled-down configs; every dim a multiple of 64 so mlx-lm's affine group size 64 divides it.
_COMMON: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
    "num_experts_per_tok": 4,
}
FAMILIES: dict[str, dict[str, Any]] = {
    "deepseek_v3": {
        "intermediate_size": 128,
        "moe_intermediate_size": 64,
        "num_key_value_heads": 4,
        "n_shared_experts": 1,
        "n_routed_experts": 16,
        "routed_scaling_factor": 2.5,
        "kv_lora_rank": 64,
        "q_lora_rank": 64,
        "qk_rope_head_dim": 16,
        "qk_nope_head_dim": 32,
        "v_head_dim": 32,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "norm_topk_prob": True,
        "n_group": 4,
        "topk_group": 2,
        "moe_layer_freq": 1,
        "first_k_dense_replace": 1,
    },
    "qwen3_moe": {
        "intermediate_size": 128,
        "moe_intermediate_size": 64,
        "num_experts": 16,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "head_dim": 16,
        "norm_topk_prob": True,
    },
    "qwen2_moe": {
        "intermediate_size": 128,
        "moe_intermediate_size": 64,
        "num_experts": 16,
        "shared_expert_intermediate_size": 128,
    },
    "mixtral": {"intermediate_size": 64, "num_local_experts": 8, "num_experts_per_tok": 2},
    "minimax": {
        "intermediate_size": 64,
        "num_local_experts": 16,
        "shared_intermediate_size": 0,
        "rotary_dim": 8,
        "head_dim": 16,
        "scoring_func": "sigmoid",
        "use_qk_norm": True,
    },
    "glm4_moe": {
        "intermediate_size": 128,
        "moe_intermediate_size": 64,
        "norm_topk_prob": True,
        "n_group": 1,
        "topk_group": 1,
        "head_dim": 16,
        "n_shared_experts": 1,
        "n_routed_experts": 16,
        "routed_scaling_factor": 2.5,
        "first_k_dense_replace": 1,
        "rope_scaling": None,
        "use_qk_norm": True,
        "attention_bias": True,
        "partial_rotary_factor": 0.5,
    },
}
FAMILIES["deepseek_v32"] = {
    **FAMILIES["deepseek_v3"],
    "index_head_dim": 32,
    "index_n_heads": 4,
    "index_topk": 64,
}
MTP_FAMILIES = ("deepseek_v3", "glm4_moe", "qwen3_next")  # random checkpoints with MTP


def family_config(family: str) -> dict[str, Any]:
    """The scaled-down config.json contents of a family (vocab_size included)."""
    if family not in FAMILIES:
        raise SpecdecError(
            f"unknown model family {family!r}; supported: {', '.join(sorted(FAMILIES))}"
        )
    return {"model_type": family, **_COMMON, **FAMILIES[family], "vocab_size": VOCAB}


# ----------------------------------------------------------------------------- tokenizer


def _corpus() -> list[str]:
    """A little local text to train on: a few stdlib modules that every Python ships."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    names = ["textwrap.py", "string.py", "json/encoder.py", "json/decoder.py", "random.py"]
    return [(lib / n).read_text() for n in names if (lib / n).is_file()]


@functools.lru_cache(maxsize=1)
def _tokenizer_json() -> str:
    """A byte-level BPE with exactly VOCAB tokens, trained locally (cached per process)."""
    tok = train_byte_bpe(_corpus(), VOCAB, EOS)
    if tok.get_vocab_size() != VOCAB:
        raise SpecdecError(f"trained tokenizer has {tok.get_vocab_size()} tokens, need {VOCAB}")
    return tok.to_str()


def write_tokenizer(out_dir: Path) -> None:
    (out_dir / "tokenizer.json").write_text(_tokenizer_json())
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": EOS,
        "eos_token": EOS,
        "pad_token": EOS,
        "model_max_length": 2048,
        "clean_up_tokenization_spaces": False,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=1))


# ----------------------------------------------------------------------------- weights


def _randomize(model: nn.Module, key: mx.array) -> None:
    """Draw every parameter: norms near 1, matrices ~ N(0, 1/fan_in), vectors small.

    mlx-lm initialises routers and `e_score_correction_bias` to zeros and norms to ones; left
    so, every token would route to the same experts. The scale keeps activations O(1) so
    float32 generation stays finite through a few layers.
    """
    params = tree_flatten(model.parameters())
    keys = mx.random.split(key, len(params))
    new = []
    for (name, p), k in zip(params, keys, strict=True):
        if name.endswith("norm.weight"):
            v = 1.0 + 0.1 * mx.random.normal(p.shape, key=k)
        elif p.ndim >= 2:
            v = mx.random.normal(p.shape, key=k) * (p.shape[-1] ** -0.5)
        else:
            v = 0.1 * mx.random.normal(p.shape, key=k)
        new.append((name, v.astype(p.dtype)))
    model.update(tree_unflatten(new))


def _quantize(model: nn.Module, config: dict, bits: int) -> dict:
    """Quantize like `mlx_lm.convert -q --q-bits BITS` (affine, group size 64)."""
    from mlx_lm.utils import quantize_model

    if bits not in (2, 3, 4, 5, 6, 8):
        raise SpecdecError(f"--quantize {bits}: affine quantization takes 2, 3, 4, 5, 6 or 8 bits")
    with contextlib.redirect_stdout(io.StringIO()):  # quantize_model prints bits per weight
        _, config = quantize_model(model, config, GROUP_SIZE, bits, mode="affine")
    return config


def _mtp_weights(args, config: dict, key: mx.array, bits: int | None) -> dict:
    """One random MTP layer of the family's layout, under our stored names (model.layers.{N}.*)."""
    from specdec.model.mtp import mtp_class

    mtp = mtp_class(config["model_type"])(args)
    _randomize(mtp, key)
    if bits is not None:
        _quantize(mtp, copy.deepcopy(config), bits)
    return mtp.checkpoint_weights()


@contextlib.contextmanager
def writing_checkpoint(out_dir: str | Path, force: bool) -> Iterator[Path]:
    """A fresh marked directory to write a checkpoint into, swapped in for out_dir on success.

    An existing non-empty out_dir is refused; with force=True one that make-random wrote (its
    `.specdec-random` marker) is replaced, anything else still refused.
    """
    out_dir = Path(out_dir)
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        raise SpecdecError(
            f"{out_dir} exists and is not empty: choose another directory, or pass --force to "
            "replace a checkpoint make-random wrote"
        )
    check_replaceable(out_dir, RANDOM_KIND, None, "`specdec make-random`", "--force")
    tmp = fresh_dir(out_dir, RANDOM_KIND)
    yield tmp
    swap_dir(tmp, out_dir, RANDOM_KIND)


def make_random(
    family: str,
    out_dir: str | Path,
    bits: int | None = None,
    seed: int = 0,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Path:
    """Write a tiny random checkpoint of `family` to out_dir (see writing_checkpoint).

    overrides: config.json entries to change (tests: e.g. a huge expert width, few experts)."""
    import importlib

    from mlx_lm.utils import save_config, save_model

    config = {**family_config(family), **(overrides or {})}
    module = importlib.import_module(f"mlx_lm.models.{family}")
    args = module.ModelArgs.from_dict(config)
    model = module.Model(args)
    key = mx.random.key(seed)
    k_model, k_mtp = mx.random.split(key)
    _randomize(model, k_model)
    if bits is not None:
        config = _quantize(model, config, bits)
    mx.eval(model.parameters())

    with writing_checkpoint(out_dir, force) as tmp:
        save_model(tmp, model)
        if family in MTP_FAMILIES:
            mtp = _mtp_weights(args, config, k_mtp, bits)
            mx.save_safetensors(str(tmp / MTP_FILE), mtp, metadata={"format": "mlx"})
        save_config(copy.deepcopy(config), tmp / "config.json")
        write_tokenizer(tmp)
    return Path(out_dir)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from specdec.model.presets import PRESETS

    parser.add_argument("family", nargs="?", help=f"one of: {', '.join(sorted(FAMILIES))}")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--quantize", type=int, metavar="BITS", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--force", action="store_true", help="replace a checkpoint make-random wrote there"
    )
    parser.add_argument(
        "--like", metavar="PRESET", help=f"real dimensions of: {', '.join(sorted(PRESETS))}"
    )
    parser.add_argument("--layers", type=int, help="with --like: layers (default: the model's)")
    parser.add_argument("--experts", type=int, help="with --like: routed experts per layer")


def run(args: argparse.Namespace) -> int:
    if args.like:
        from specdec.model.random_scale import make_like

        if args.family:
            raise SpecdecError("give either FAMILY or --like PRESET, not both")
        bits = 4 if args.quantize is None else args.quantize
        out = make_like(
            args.like, args.out_dir, args.layers, args.experts, bits, args.seed, force=args.force
        )
        print(f"wrote {args.like}-shaped random checkpoint ({bits}-bit) to {out}")
        return 0
    if not args.family:
        raise SpecdecError("give a FAMILY (tiny checkpoint) or --like PRESET (real dimensions)")
    out = make_random(
        args.family, args.out_dir, bits=args.quantize, seed=args.seed, force=args.force
    )
    print(
        f"wrote {args.family} ({'float32' if args.quantize is None else f'{args.quantize}-bit'}) to {out}"
    )
    return 0
