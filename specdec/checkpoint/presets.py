"""Real dimensions of real MoE models, for `specdec make-random --like PRESET`.

Each preset is the model's own config.json (as mlx-lm reads it) with its real hidden size,
expert width, expert count, top-k, attention shape and layer count; `like_config` shortens it to
N layers and swaps the vocabulary for the small local tokenizer (512 tokens: the embedding and
head are the only non-expert tensors that shrink). Numbers from the models' published configs:

    minimax-m2.5    hidden 3072, expert 1536, 256 experts, top-8, 62 layers  (~7.96 MB/expert at 4 bits)
    deepseek-v3     hidden 7168, expert 2048, 256 experts, top-8, 61 layers, MLA, 1 MTP layer
    qwen3-30b-a3b   hidden 2048, expert 768, 128 experts, top-8, 48 layers
    mixtral-8x7b    hidden 4096, expert 14336, 8 experts, top-2, 32 layers

`python -c "from specdec.checkpoint.presets import like_config; print(like_config('minimax-m2.5', 2))"`
"""

from __future__ import annotations

import copy
from typing import Any

from specdec.core.errors import SpecdecError

PRESETS: dict[str, dict[str, Any]] = {
    "minimax-m2.5": {
        "model_type": "minimax",
        "hidden_size": 3072,
        "intermediate_size": 1536,
        "num_local_experts": 256,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 62,
        "num_attention_heads": 48,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "rotary_dim": 64,
        "shared_intermediate_size": 0,
        "scoring_func": "sigmoid",
        "use_qk_norm": True,
        "rms_norm_eps": 1e-6,
        "rope_theta": 5000000.0,
        "max_position_embeddings": 196608,
        "tie_word_embeddings": False,
    },
    "deepseek-v3": {
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 61,
        "first_k_dense_replace": 3,
        "moe_layer_freq": 1,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "n_group": 8,
        "topk_group": 4,
        "routed_scaling_factor": 2.5,
        "norm_topk_prob": True,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "max_position_embeddings": 163840,
        "num_nextn_predict_layers": 1,
        "tie_word_embeddings": False,
    },
    "qwen3-30b-a3b": {
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "moe_intermediate_size": 768,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 48,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 40960,
        "tie_word_embeddings": False,
    },
    "mixtral-8x7b": {
        "model_type": "mixtral",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-5,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": False,
    },
}

_EXPERT_COUNT = ("num_local_experts", "n_routed_experts", "num_experts")


def like_config(
    preset: str, layers: int | None = None, experts: int | None = None, vocab: int = 512
) -> dict[str, Any]:
    """The preset's config.json for `layers` layers (default: all) and a `vocab`-token vocabulary.

    experts: fewer routed experts per layer, dimensions kept (tests: real block sizes, small
    files). A dense-first model (DeepSeek-V3) keeps at most layers - 1 dense layers, so at least
    one layer is MoE.
    """
    if preset not in PRESETS:
        raise SpecdecError(f"unknown preset {preset!r}; presets: {', '.join(sorted(PRESETS))}")
    cfg = copy.deepcopy(PRESETS[preset])
    if layers is not None:
        if layers < 1:
            raise SpecdecError(f"--layers {layers}: a model needs at least 1 layer")
        cfg["num_hidden_layers"] = layers
        if "first_k_dense_replace" in cfg:
            cfg["first_k_dense_replace"] = min(cfg["first_k_dense_replace"], layers - 1)
    if experts is not None:
        if not cfg["num_experts_per_tok"] <= experts:
            raise SpecdecError(
                f"--experts {experts}: fewer than top-k {cfg['num_experts_per_tok']}"
            )
        key = next(k for k in _EXPERT_COUNT if k in cfg)
        cfg[key] = experts
        if "n_group" in cfg:  # group-limited routing needs experts divisible into the groups
            cfg["n_group"] = cfg["topk_group"] = 1
    cfg["vocab_size"] = vocab
    return cfg


def routed_shape(preset: str) -> tuple[list[int], int, int, int, int]:
    """(MoE layer ids, routed experts, top-k, hidden, expert intermediate) of a preset model:
    what a routing trace of it holds (specdec.trace.presets takes its shapes from here)."""
    cfg = PRESETS[preset]
    dense = cfg.get("first_k_dense_replace", 0)
    layers = list(range(dense, cfg["num_hidden_layers"]))
    experts = next(cfg[k] for k in _EXPERT_COUNT if k in cfg)
    inter = cfg.get("moe_intermediate_size", cfg["intermediate_size"])
    return layers, experts, cfg["num_experts_per_tok"], cfg["hidden_size"], inter
