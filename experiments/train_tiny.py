"""Train the bundled `tiny` model: a DeepSeek-V3-style MoE with one MTP module, in MLX.

    python -m experiments.train_tiny                       # train (resumes runs/tiny if present)
    python -m experiments.train_tiny --time-limit-min 42   # wall-clock cap, summed over resumes
    python -m experiments.train_tiny --export-only         # quantize + write specdec/models/tiny

Architecture: mlx-lm's `deepseek_v3` (MLA attention, sigmoid routing with the `noaux_tc`
correction bias, one shared expert, dense first layer) plus `specdec.model.mtp.MTPModule`.
Loss = CE(main, t_{i+1}) + λ·CE(MTP, t_{i+2}) with λ = 0.3 (DeepSeek-V3's early value).
Balance: DeepSeek-V3's auxiliary-loss-free rule; after every step, per MoE layer (MTP's
included) `bias_e += u·sign(mean_load − load_e)`; the bias only changes which experts are
selected, never the gate values (mlx-lm's `group_expert_select` adds it after the sigmoid).

Seeded (init and every batch derive from --seed and the step), resumable (checkpoint in
--out every --ckpt-every steps), progress bar, metrics to <out>/metrics.jsonl and to wandb
(offline). Export quantizes as `mlx_lm.convert -q` does (affine, 4 bits, group 64) and writes
config.json, model.safetensors, mtp.safetensors and the tokenizer into specdec/models/tiny.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path

from specdec.blas import active_blas, ensure_fast_blas

ensure_fast_blas()

import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402
import mlx.optimizers as optim  # noqa: E402
import numpy as np  # noqa: E402
from mlx.utils import tree_flatten, tree_unflatten  # noqa: E402
from mlx_lm.models.deepseek_v3 import Model, ModelArgs, MoEGate  # noqa: E402
from mlx_lm.models.switch_layers import SwitchGLU  # noqa: E402
from mlx_lm.utils import quantize_model  # noqa: E402

from experiments.tiny_corpus import VOCAB_SIZE, encode_files, stdlib_corpus, train_tokenizer  # noqa: E402
from specdec.model.mtp import MTP_FILE, MTPModule  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SHIP_DIR = REPO / "specdec" / "models" / "tiny"
MTP_WEIGHT = 0.3
QUANT = {"group_size": 64, "bits": 4, "mode": "affine"}

TINY_ARGS = ModelArgs(
    model_type="deepseek_v3",
    vocab_size=VOCAB_SIZE,
    hidden_size=192,
    intermediate_size=384,  # dense first layer
    moe_intermediate_size=128,
    num_hidden_layers=5,
    num_attention_heads=4,
    num_key_value_heads=4,
    n_shared_experts=1,
    n_routed_experts=32,
    routed_scaling_factor=2.5,  # DeepSeek-V3's value
    kv_lora_rank=64,
    q_lora_rank=None,
    qk_rope_head_dim=16,
    v_head_dim=32,
    qk_nope_head_dim=32,
    topk_method="noaux_tc",
    scoring_func="sigmoid",
    norm_topk_prob=True,
    n_group=1,
    topk_group=1,
    num_experts_per_tok=4,
    moe_layer_freq=1,
    first_k_dense_replace=1,
    max_position_embeddings=4096,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
)


class CountingGate(MoEGate):
    """mlx-lm's MoEGate that also keeps its selection counts for the balance update."""

    def __call__(self, x):
        inds, scores = super().__call__(x)  # [B, T, k]
        n = self.n_routed_experts
        loads = (mx.stop_gradient(inds).reshape(-1, 1) == mx.arange(n)).sum(axis=0)  # [N]
        # A plain attribute: an array set the Module way would become a parameter.
        object.__setattr__(self, "loads", loads)
        return inds, scores


class SortedSwitchGLU(SwitchGLU):
    """SwitchGLU computed exactly by grouping token-slots by expert, one dense matmul each.

    Same parameters and same math as mlx-lm's SwitchGLU, whose `gather_mm` (and its backward)
    runs at ~4 GFLOP/s on our CPU. Sorting the M = tokens·k assignments by expert and running
    each expert's rows as a plain matmul is ~4x faster in training (measured, fwd+bwd) and
    pads nothing. Training only; the saved model uses the stock classes.
    """

    def __call__(self, x: mx.array, indices: mx.array) -> mx.array:
        *lead, k = indices.shape  # x [B, T, H], indices [B, T, k]
        h = x.shape[-1]
        flat = np.array(indices).reshape(-1)  # [M] host copy: the split needs concrete sizes
        e = self.gate_proj.weight.shape[0]
        order = np.argsort(flat, kind="stable")  # assignments grouped by expert
        counts = np.bincount(flat, minlength=e)
        xs = x.reshape(-1, h)[mx.array(order // k)]  # [M, H]
        parts = mx.split(xs, np.cumsum(counts)[:-1].tolist(), axis=0)  # E x [count_e, H]
        w_up, w_gate, w_down = (
            mx.split(p.weight, e, axis=0) for p in (self.up_proj, self.gate_proj, self.down_proj)
        )  # E x [1, out, in]
        outs = [
            self.activation(xp @ w_up[i][0].T, xp @ w_gate[i][0].T) @ w_down[i][0].T
            for i, xp in enumerate(parts)
            if counts[i]
        ]  # [count_e, H] each
        inverse = np.empty_like(order)
        inverse[order] = np.arange(order.size)
        ys = mx.concatenate(outs, axis=0)[mx.array(inverse)]  # [M, H] back in token order
        return ys.reshape(*lead, k, h)  # [B, T, k, H]


def _softmax_parts(logits: mx.array, targets: mx.array):
    lg = np.array(logits, copy=False).reshape(-1, logits.shape[-1])  # [N, V]
    t = np.array(targets).reshape(-1)  # [N]
    m = lg.max(-1, keepdims=True)
    e = np.exp(lg - m)
    return lg, t, m, e, e.sum(-1, keepdims=True)


@mx.custom_function
def cross_entropy(logits: mx.array, targets: mx.array) -> mx.array:
    """Mean token cross-entropy, computed in numpy: MLX's CPU `exp` is ~10x slower than
    numpy's, and the two [N, 4096] softmaxes per step dominated the step time."""
    lg, t, m, _, s = _softmax_parts(logits, targets)
    lse = np.log(s[:, 0]) + m[:, 0]
    return mx.array((lse - lg[np.arange(t.size), t]).mean(dtype=np.float64).astype(np.float32))


@cross_entropy.vjp
def _cross_entropy_vjp(primals, cotangent, output):
    logits, targets = primals
    _, t, _, e, s = _softmax_parts(logits, targets)
    g = e / s  # softmax - onehot, over N
    g[np.arange(t.size), t] -= 1.0
    g *= np.array(cotangent) / t.size
    return mx.array(g.reshape(logits.shape)), mx.zeros_like(targets)


class TinyMTP(nn.Module):
    """The main model and its MTP module as one trainable tree."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.main = Model(args)
        self.mtp = MTPModule(args)
        for layer in [*self.main.model.layers, self.mtp.layer]:
            if isinstance(getattr(layer.mlp, "gate", None), MoEGate):
                gate = CountingGate(args)
                # Zero init makes every score 0.5; spread them so routing starts informative.
                gate.weight = mx.random.normal(gate.weight.shape) * args.hidden_size**-0.5
                layer.mlp.gate = gate
                fast = SortedSwitchGLU(
                    args.hidden_size, args.moe_intermediate_size, gate.n_routed_experts
                )
                fast.update(layer.mlp.switch_mlp.parameters())
                layer.mlp.switch_mlp = fast
        self.apply_to_modules(
            lambda _, m: (
                m.freeze(keys=["e_score_correction_bias"], strict=False)
                if isinstance(m, MoEGate)
                else None
            )
        )

    def gates(self) -> list[CountingGate]:
        return [m for _, m in self.named_modules() if isinstance(m, CountingGate)]

    def losses(self, tokens: mx.array) -> tuple[mx.array, mx.array]:
        x, y, z = tokens[:, :-2], tokens[:, 1:-1], tokens[:, 2:]  # [B, T] each
        hidden = self.main.model(x)  # [B, T, H] after the final norm
        main = cross_entropy(self.main.lm_head(hidden), y)
        logits2, _ = self.mtp(
            hidden, y, embed=self.main.model.embed_tokens, head=self.main.lm_head
        )  # [B, T, V]
        return main, cross_entropy(logits2, z)


def batch(data: np.ndarray, seed: int, step: int, bsz: int, seq: int) -> mx.array:
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(data) - seq - 2, size=bsz)
    return mx.array(np.stack([data[s : s + seq + 2] for s in starts]))  # [B, T+2]


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * frac)))


def prepare_data(out: Path) -> tuple[np.ndarray, np.ndarray]:
    tok_dir = out / "tokenizer"
    if not (out / "train.npy").exists():
        corpus = stdlib_corpus()
        tok = train_tokenizer(corpus, tok_dir)
        np.save(out / "heldout.npy", encode_files(tok, corpus, corpus.heldout))
        np.save(out / "train.npy", encode_files(tok, corpus, corpus.train))
        (out / "corpus.json").write_text(json.dumps(corpus.describe(), indent=2) + "\n")
    return np.load(out / "train.npy"), np.load(out / "heldout.npy")


def save_ckpt(out: Path, model: TinyMTP, opt: optim.Optimizer, state: dict) -> None:
    tmp = out / "ckpt.tmp"
    tmp.mkdir(exist_ok=True)
    mx.save_safetensors(str(tmp / "model.safetensors"), dict(tree_flatten(model.parameters())))
    mx.save_safetensors(str(tmp / "opt.safetensors"), dict(tree_flatten(opt.state)))
    (tmp / "state.json").write_text(json.dumps(state))
    if (out / "ckpt").exists():
        shutil.rmtree(out / "ckpt")
    tmp.rename(out / "ckpt")


def load_ckpt(out: Path, model: TinyMTP, opt: optim.Optimizer) -> dict | None:
    ck = out / "ckpt"
    if not (ck / "state.json").exists():
        return None
    model.load_weights(str(ck / "model.safetensors"))
    opt.state = tree_unflatten(list(mx.load(str(ck / "opt.safetensors")).items()))
    return json.loads((ck / "state.json").read_text())


def train(a: argparse.Namespace) -> None:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    train_data, _ = prepare_data(out)
    mx.random.seed(a.seed)
    model = TinyMTP(TINY_ARGS)
    opt = optim.AdamW(learning_rate=a.lr, betas=[0.9, 0.95], weight_decay=0.1)
    state = load_ckpt(out, model, opt) or {"step": 0, "elapsed_s": 0.0, "total_steps": a.steps}
    gates = model.gates()

    def loss_fn(params_model, tokens):
        main, mtp = params_model.losses(tokens)
        return main + MTP_WEIGHT * mtp, (main, mtp, [g.loads for g in gates])

    value_grad = nn.value_and_grad(model, loss_fn)

    def step_fn(tokens, lr):
        (loss, (main, mtp, loads)), grads = value_grad(model, tokens)
        grads, _ = optim.clip_grad_norm(grads, 1.0)
        opt.learning_rate = lr
        opt.update(model, grads)
        for g, load in zip(gates, loads, strict=True):
            mean = load.sum() / load.size
            g.e_score_correction_bias = g.e_score_correction_bias + a.bias_rate * mx.sign(
                mean - load.astype(mx.float32)
            )
        return loss, main, mtp, mx.stack(loads)

    import wandb
    from tqdm import tqdm

    os.environ.setdefault("WANDB_MODE", "offline")
    run = wandb.init(project="specdec", dir=str(out), config={**vars(a), **asdict(TINY_ARGS)})
    log = (out / "metrics.jsonl").open("a")
    tokens_per_step = a.batch * a.seq
    try:
        bar = tqdm(initial=state["step"], total=state["total_steps"] or None, unit="step")
        t_last = time.perf_counter()
        while state["elapsed_s"] < a.time_limit_min * 60:
            step = state["step"]
            if state["total_steps"] and step >= state["total_steps"]:
                break
            lr = lr_at(step, state["total_steps"] or 10**9, a.lr, a.warmup)
            loss, main, mtp, loads = step_fn(batch(train_data, a.seed, step, a.batch, a.seq), lr)
            mx.eval(loss, main, mtp, loads, model.parameters(), opt.state)
            now = time.perf_counter()
            dt, t_last = now - t_last, now
            state["step"], state["elapsed_s"] = step + 1, state["elapsed_s"] + dt
            if not state["total_steps"] and step + 1 == a.calibrate_steps:
                # Size the cosine schedule to the time cap from the measured step time.
                per = state["elapsed_s"] / (step + 1)
                state["total_steps"] = int(a.time_limit_min * 60 * 0.95 / per)
                bar.total = state["total_steps"]
            bar.update(1)
            if (step + 1) % a.log_every == 0 or step == 0:
                ld = np.array(loads)  # [layers, N]
                rec = {
                    "step": step + 1,
                    "tokens": (step + 1) * tokens_per_step,
                    "loss": loss.item(),
                    "main_loss": main.item(),
                    "mtp_loss": mtp.item(),
                    "lr": lr,
                    "tok_per_s": tokens_per_step / dt,
                    "elapsed_s": state["elapsed_s"],
                    "max_over_mean_load": (ld.max(1) / ld.mean(1)).round(3).tolist(),
                }
                log.write(json.dumps(rec) + "\n")
                log.flush()
                run.log({k: v for k, v in rec.items() if k != "max_over_mean_load"}, step=step + 1)
                bar.set_postfix(loss=f"{rec['main_loss']:.3f}", mtp=f"{rec['mtp_loss']:.3f}")
            if (step + 1) % a.ckpt_every == 0:
                save_ckpt(out, model, opt, state)
                t_last = time.perf_counter()  # checkpoint time is not training time
        save_ckpt(out, model, opt, state)
        bar.close()
    finally:
        log.close()
        wandb.finish()


def export(a: argparse.Namespace) -> None:
    """Quantize the trained checkpoint like `mlx_lm.convert -q` and write SHIP_DIR."""
    out = Path(a.out)
    model = TinyMTP(TINY_ARGS)
    model.load_weights(str(out / "ckpt" / "model.safetensors"))
    config = {k: v for k, v in asdict(TINY_ARGS).items() if v is not None}
    config.update(architectures=["DeepseekV3ForCausalLM"], torch_dtype="float32")
    config.update(eos_token_id=0, bos_token_id=None, tie_word_embeddings=False)
    main, config = quantize_model(model.main, config, QUANT["group_size"], QUANT["bits"])
    config["quantization_config"] = config["quantization"]
    mtp = model.mtp
    nn.quantize(
        mtp,
        group_size=QUANT["group_size"],
        bits=QUANT["bits"],
        class_predicate=lambda _, m: (
            hasattr(m, "to_quantized") and m.weight.shape[-1] % QUANT["group_size"] == 0
        ),
    )
    # Plain mlx-lm module classes in the saved names (CountingGate keeps MoEGate's keys).
    SHIP_DIR.mkdir(parents=True, exist_ok=True)
    files = {
        "model.safetensors": dict(tree_flatten(main.parameters())),
        MTP_FILE: mtp.checkpoint_weights(),
    }
    for name, weights in files.items():
        tmp = SHIP_DIR / name.replace(".safetensors", ".partial.safetensors")
        mx.save_safetensors(str(tmp), weights, metadata={"format": "mlx"})
        os.replace(tmp, SHIP_DIR / name)
    (SHIP_DIR / "config.json.tmp").write_text(json.dumps(config, indent=2) + "\n")
    os.replace(SHIP_DIR / "config.json.tmp", SHIP_DIR / "config.json")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(out / "tokenizer" / name, SHIP_DIR / name)
    shutil.copyfile(out / "corpus.json", SHIP_DIR / "corpus.json")
    print(f"wrote {SHIP_DIR} (blas: {active_blas()})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(REPO / "runs" / "tiny"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--steps", type=int, default=0, help="0: fit the schedule to the time cap")
    p.add_argument("--calibrate-steps", type=int, default=20)
    p.add_argument("--time-limit-min", type=float, default=42.0)
    p.add_argument("--bias-rate", type=float, default=5e-3, help="u of the balance update")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--ckpt-every", type=int, default=50)
    p.add_argument("--export-only", action="store_true")
    a = p.parse_args()
    if not a.export_only:
        train(a)
    export(a)


if __name__ == "__main__":
    main()
