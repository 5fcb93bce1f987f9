"""Tiny random-weight checkpoints of real mlx-lm model classes, for tests and demos.

`specdec make-random FAMILY OUT_DIR [--quantize BITS] [--seed N]` builds the family's mlx-lm
`Model` from a scaled-down config (specdec.checkpoint.tiny_configs: hidden 64, 3 layers, 16 experts,
top-4, float32; ~28 MoE families), draws every
parameter at random (routers and DeepSeek's `e_score_correction_bias` too, so routing is real and
varies across tokens), optionally quantizes the whole model the way `mlx_lm.convert -q` does
(affine, group size 64), and writes it with mlx-lm's own `save_model`/`save_config`, so
`mlx_lm.load(OUT_DIR)` opens it. The tokenizer is a byte-level BPE trained here with `tokenizers`
on a few stdlib sources; nothing comes from a hub.

DeepSeek-V3, GLM-4.5 (glm4_moe), Qwen3-Next and DeepSeek-V4.1 (deepseek_v41, ds4's V4 MTP layout)
checkpoints also get `mtp.safetensors`: a random
MTP layer of the family's layout (model/mtp.py) stored as `model.layers.{num_hidden_layers}.*` (for
DeepSeek-V3's layout enorm, hnorm, eh_proj, shared_head.norm and a full MoE decoder layer with
stacked `mlp.switch_mlp` experts), as in the Hugging Face checkpoint.
mlx-lm's loader ignores the file (it only reads model*.safetensors); `specdec pack` packs it.

Python: `make_random("qwen3_moe", "/tmp/q", bits=4)`. Real dimensions (`--like PRESET`):
specdec.checkpoint.random_scale.
"""

from __future__ import annotations

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
from mlx.utils import tree_flatten, tree_map_with_path, tree_unflatten

from specdec.checkpoint.bpe import train_byte_bpe
from specdec.checkpoint.families import family_config
from specdec.checkpoint.tiny_configs import VOCAB
from specdec.core.errors import SpecdecError
from specdec.core.files import (
    check_free_space,
    check_replaceable,
    fresh_dir,
    remove_leftover,
    swap_dir,
    write_error,
)
from specdec.store.layout import MTP_FILE
from specdec.store.safetensors import mlx_write_error

GROUP_SIZE = 64
EOS = "<|endoftext|>"
RANDOM_KIND = "random"  # the ownership marker's kind (store/files.py)
MTP_FAMILIES = (
    "deepseek_v3",
    "glm4_moe",
    "qwen3_next",
    "deepseek_v41",
)  # random checkpoints with MTP


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


DTYPES = ("float32", "bfloat16", "float16")


def cast_floats(module: nn.Module, dtype: mx.Dtype) -> None:
    """Every float parameter of `module` to `dtype`, but those its `cast_predicate` keeps (as
    `mlx_lm.convert --dtype` casts)."""
    keep = getattr(module, "cast_predicate", lambda _: True)

    def cast(name: str, v: mx.array) -> mx.array:
        return v.astype(dtype) if keep(name) and mx.issubdtype(v.dtype, mx.floating) else v

    module.update(tree_map_with_path(cast, module.parameters()))


def _mtp_weights(args, config: dict, key: mx.array, bits: int | None, dtype: mx.Dtype) -> dict:
    """One random MTP layer of the family's layout, under our stored names (model.layers.{N}.*),
    its float parameters in `dtype` as the main model's."""
    from specdec.checkpoint.mtp import mtp_class

    mtp = mtp_class(config["model_type"])(args)
    _randomize(mtp, key)
    if bits is not None:
        _quantize(mtp, copy.deepcopy(config), bits)
    cast_floats(mtp, dtype)
    return mtp.checkpoint_weights()


@contextlib.contextmanager
def writing_checkpoint(out_dir: str | Path, force: bool, need: int = 0) -> Iterator[Path]:
    """A fresh marked directory to write a checkpoint into, swapped in for out_dir on success
    and deleted on failure (a full disk, Ctrl-C); `need` bytes must be free before it starts.

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
    tmp = fresh_dir(out_dir, RANDOM_KIND)  # dead make-randoms' leftovers go first
    try:
        check_free_space(out_dir.parent, need, f"the checkpoint {out_dir}")
        yield tmp
        swap_dir(tmp, out_dir, RANDOM_KIND)
    except OSError as e:
        remove_leftover(tmp, RANDOM_KIND)
        raise write_error(out_dir, e) from None
    except RuntimeError as e:  # MLX's save_safetensors on a full disk
        remove_leftover(tmp, RANDOM_KIND)
        raise (mlx_write_error(out_dir, e) or e) from None
    except BaseException:
        remove_leftover(tmp, RANDOM_KIND)
        raise


def random_model(config: dict, bits: int | None, key: mx.array) -> tuple[nn.Module, Any, dict]:
    """(model, its ModelArgs, the config as quantized) of mlx-lm's class for config.json
    contents `config`, every parameter drawn (`_randomize`), quantized as mlx-lm's convert
    does where `bits` is given; in memory (make_random writes one to disk)."""
    from mlx_lm.utils import _get_classes

    model_class, args_class = _get_classes(config)
    args = args_class.from_dict(config)
    model = model_class(args)
    _randomize(model, key)
    if bits is not None:
        config = _quantize(model, config, bits)
    mx.eval(model.parameters())
    return model, args, config


def make_random(
    family: str,
    out_dir: str | Path,
    bits: int | None = None,
    seed: int = 0,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
    dtype: str = "float32",
) -> Path:
    """Write a tiny random checkpoint of `family` to out_dir (see writing_checkpoint).

    overrides: config.json entries to change (tests: e.g. a huge expert width, few experts).
    dtype: of its float parameters (quantized: scales and biases), so of its activations and
    logits: "bfloat16" as a real quantized checkpoint (mlx-lm's greedy rule rounds there)."""
    from mlx_lm.utils import save_config, save_model

    if dtype not in DTYPES:
        raise SpecdecError(f"dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    config = {**family_config(family), **(overrides or {})}
    k_model, k_mtp = mx.random.split(mx.random.key(seed))
    model, args, config = random_model(config, bits, k_model)
    cast_floats(model, getattr(mx, dtype))

    weights = tree_flatten(model.parameters())
    need = sum(v.nbytes for _, v in weights) * (2 if family in MTP_FAMILIES else 1)  # MTP < model
    with writing_checkpoint(out_dir, force, need) as tmp:
        save_model(tmp, model)
        if family in MTP_FAMILIES:
            mtp = _mtp_weights(args, config, k_mtp, bits, getattr(mx, dtype))
            mx.save_safetensors(str(tmp / MTP_FILE), mtp, metadata={"format": "mlx"})
        save_config(copy.deepcopy(config), tmp / "config.json")
        write_tokenizer(tmp)
    return Path(out_dir)
