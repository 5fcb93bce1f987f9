"""DeepSeek-V4's MTP module (specdec/checkpoint/mtp/deepseek_v4.py) against ds4.c, mirrored in numpy.

The mirror below follows antirez/ds4's C one function at a time, one token at a time, with the
C's own index arithmetic: `metal_graph_eval_mtp_draft_from_hc` (embed, enorm, e_proj repeated
over the HC streams, hnorm per stream, h_proj, sum), the decode layer as ds4 runs it for the
MTP block (`hc_pre_from_state_one` with `hc_split_sinkhorn_one`, `layer_q_projection_normed_one`
incl. the per-head RMS norm, `rope_tail_layer_inplace` for an uncompressed layer,
`dsv4_fp8_kv_quantize_row_inplace_cpu` + f16, `layer_attention_rows_one` with sinks over the raw
window, `layer_grouped_out_one`, `hc_post_one`, `layer_topk_selected_experts_from_probs`, the
clamped SwiGLU experts and shared expert) and `metal_graph_encode_output_head_mtp` (the
`output_hc_head_one` mixing with the MTP's hc_head, its norm, the main output head). On random
weights, a catch-up over several positions then chained drafts: every step's logits and
fed-back streams agree within 1e-4, also once the raw window has filled and slid.
"""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm.models import deepseek_v41

from specdec.checkpoint.families import family_config
from specdec.checkpoint.mtp import DeepseekV4MTP
from specdec.checkpoint.random_models import _randomize

TOL = 1e-4
WINDOW = 3  # small, so the raw window slides within the test

# --- ds4.c, in numpy ------------------------------------------------------------------------


def rms_norm(x, w=None, eps=1e-6):  # rms_norm_no_weight / rms_norm_weight
    out = x / np.sqrt(np.mean(x.astype(np.float64) ** 2) + eps)
    return out if w is None else out * w


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def hc_split_sinkhorn(mix, scale, base, n, iters, eps):
    pre = sigmoid(mix[:n] * scale[0] + base[:n]) + eps
    post = 2.0 * sigmoid(mix[n : 2 * n] * scale[1] + base[n : 2 * n])
    c = np.zeros(n * n)
    for dst in range(n):
        v = np.array(
            [mix[2 * n + s + dst * n] * scale[2] + base[2 * n + s + dst * n] for s in range(n)]
        )
        e = np.exp(v - v.max())
        for s in range(n):
            c[s + dst * n] = e[s] / e.sum() + eps
    for src in range(n):
        tot = sum(c[src + d * n] for d in range(n))
        for d in range(n):
            c[src + d * n] /= tot + eps
    for _ in range(1, iters):
        for dst in range(n):
            tot = sum(c[s + dst * n] for s in range(n))
            for s in range(n):
                c[s + dst * n] /= tot + eps
        for src in range(n):
            tot = sum(c[src + d * n] for d in range(n))
            for d in range(n):
                c[src + d * n] /= tot + eps
    return pre, post, c


def hc_pre(w, name, res_hc, a):  # hc_pre_from_state_one
    n = a.hc_mult
    mix = w[f"{name}.fn"] @ rms_norm(res_hc.reshape(-1), eps=a.rms_norm_eps)
    pre, post, comb = hc_split_sinkhorn(
        mix, w[f"{name}.scale"], w[f"{name}.base"], n, a.hc_sinkhorn_iters, a.hc_eps
    )
    return (pre[:, None] * res_hc).sum(0), post, comb


def hc_post(block_out, res_hc, post, comb, n):  # hc_post_one
    out = np.zeros_like(res_hc)
    for dst in range(n):
        out[dst] = block_out * post[dst]
        for src in range(n):
            out[dst] += comb[dst + src * n] * res_hc[src]
    return out


def rope_tail(x, n_head, head_dim, n_rot, pos, base, inverse):  # rope_tail_ext_inplace, ext 0
    x = x.copy().reshape(n_head, head_dim)
    theta_scale = base ** (-2.0 / n_rot)
    sign = -1.0 if inverse else 1.0
    for h in range(n_head):
        theta = float(pos)
        for i in range(0, n_rot, 2):
            j = head_dim - n_rot + i
            c, s = np.cos(theta), sign * np.sin(theta)
            x0, x1 = x[h, j], x[h, j + 1]
            x[h, j], x[h, j + 1] = x0 * c - x1 * s, x0 * s + x1 * c
            theta *= theta_scale
    return x.reshape(-1)


E4M3 = np.array(
    [
        (m * 0.001953125 if e == 0 else (1 + m * 0.125) * 2.0 ** (e - 7))
        for e in range(16)
        for m in range(8)
    ]
)[:127]


def e4m3_dequant(v):  # dsv4_e4m3fn_dequant_cpu: nearest, ties to the even code
    ax = min(abs(v), 448.0)
    lo = int(np.searchsorted(E4M3, ax, side="right")) - 1
    best = lo
    if lo < 126:
        d0, d1 = abs(ax - E4M3[lo]), abs(ax - E4M3[lo + 1])
        if d1 < d0 or (d1 == d0 and (lo + 1) % 2 == 0 and lo % 2 != 0):
            best = lo + 1
    return np.sign(v) * E4M3[best] if v != 0 else 0.0


def kv_quantize(kv, head_dim, n_rot):  # dsv4_fp8_kv_quantize_row_inplace_cpu, f16_round_inplace_cpu
    kv = kv.astype(np.float32).copy()
    for off in range(0, head_dim - n_rot, 64):
        amax = max(np.abs(kv[off : off + 64]).max(), 1e-4)
        scale = 2.0 ** np.ceil(np.log2(amax / 448.0))
        kv[off : off + 64] = [
            e4m3_dequant(np.clip(v / scale, -448, 448)) * scale for v in kv[off : off + 64]
        ]
    return kv.astype(np.float16).astype(np.float64)


def attention_rows(q, rows, sinks, n_head, head_dim):  # layer_attention_rows_one
    out = np.zeros(n_head * head_dim)
    for h in range(n_head):
        qh = q[h * head_dim : (h + 1) * head_dim]
        score = rows @ qh / np.sqrt(head_dim)
        m = max(sinks[h], score.max())
        wts = np.exp(score - m)
        out[h * head_dim : (h + 1) * head_dim] = wts @ rows / (np.exp(sinks[h] - m) + wts.sum())
    return out


def swiglu(g, u, clamp):
    g, u = np.minimum(g, clamp), np.clip(u, -clamp, clamp)
    return g / (1 + np.exp(-g)) * u


def ffn(w, x, a):  # layer_routed_moe_one (top-k path) + layer_shared_ffn_one
    p = "layer.mlp."
    probs = np.sqrt(np.log1p(np.exp(w[p + "gate.weight"] @ x)))
    sel = np.argsort(-(probs + w[p + "gate.e_score_correction_bias"]), kind="stable")[
        : a.num_experts_per_tok
    ]
    wt = probs[sel] / max(probs[sel].sum(), 6.103515625e-5) * a.routed_scaling_factor
    e = p + "experts.switch_mlp."
    out = np.zeros_like(x)
    for i, ex in enumerate(sel):
        mid = swiglu(
            w[e + "gate_proj.weight"][ex] @ x, w[e + "up_proj.weight"][ex] @ x, a.swiglu_limit
        )
        out += w[e + "down_proj.weight"][ex] @ (mid * wt[i])
    s = p + "shared_experts."
    mid = swiglu(w[s + "gate_proj.weight"] @ x, w[s + "up_proj.weight"] @ x, a.swiglu_limit)
    return out + w[s + "down_proj.weight"] @ mid


def mtp_draft_from_hc(w, a, embed, head, prev_hc, token, pos, raw):
    """metal_graph_eval_mtp_draft_from_hc on one token; `raw` is the MTP's raw KV rows."""
    n, nh, hd, nr, eps = (
        a.hc_mult,
        a.num_attention_heads,
        a.head_dim,
        a.qk_rope_head_dim,
        a.rms_norm_eps,
    )
    eproj = w["e_proj.weight"] @ rms_norm(embed[token], w["enorm.weight"], eps)
    hc = np.stack(
        [
            eproj + w["h_proj.weight"] @ rms_norm(prev_hc[h], w["hnorm.weight"], eps)
            for h in range(n)
        ]
    )
    # the decode layer: attention half
    cur, post, comb = hc_pre(w, "layer.attn_hc", hc, a)
    x = rms_norm(cur, w["layer.input_layernorm.weight"], eps)
    at = "layer.self_attn."
    qr = rms_norm(w[at + "q_a_proj.weight"] @ x, w[at + "q_a_norm.weight"], eps)
    q = (w[at + "q_b_proj.weight"] @ qr).reshape(nh, hd)
    q = np.stack([rms_norm(qh, eps=eps) for qh in q]).reshape(-1)  # head_rms_norm_inplace
    kv = rms_norm(w[at + "kv_proj.weight"] @ x, w[at + "kv_norm.weight"], eps)
    q = rope_tail(q, nh, hd, nr, pos, a.rope_theta, False)
    kv = kv_quantize(rope_tail(kv, 1, hd, nr, pos, a.rope_theta, False), hd, nr)
    raw.append(kv)
    heads = attention_rows(q, np.stack(raw[-a.sliding_window :]), w[at + "sinks"], nh, hd)
    heads = rope_tail(heads, nh, hd, nr, pos, a.rope_theta, True)
    gd = nh * hd // a.o_groups
    low = np.concatenate(
        [w[at + "o_a_proj.weight"][g] @ heads[g * gd : (g + 1) * gd] for g in range(a.o_groups)]
    )
    hc = hc_post(w[at + "o_b_proj.weight"] @ low, hc, post, comb, n)
    # FFN half
    cur, post, comb = hc_pre(w, "layer.ffn_hc", hc, a)
    out_hc = hc_post(
        ffn(w, rms_norm(cur, w["layer.post_attention_layernorm.weight"], eps), a), hc, post, comb, n
    )
    # metal_graph_encode_output_head_mtp
    pre = w["hc_head.fn"] @ rms_norm(out_hc.reshape(-1), eps=eps)
    mixw = sigmoid(pre * w["hc_head.scale"][0] + w["hc_head.base"]) + a.hc_eps
    embd = (mixw[:, None] * out_hc).sum(0)
    return head @ rms_norm(embd, w["norm.weight"], eps), out_hc


# --- the test ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def module():
    args = deepseek_v41.ModelArgs.from_dict(family_config("deepseek_v41"))
    args = dataclasses.replace(args, sliding_window=WINDOW)
    mtp = DeepseekV4MTP(args)
    _randomize(mtp, mx.random.key(3))
    rng = np.random.default_rng(0)
    embed = (rng.standard_normal((args.vocab_size, args.hidden_size)) * 0.5).astype(np.float32)
    head = (rng.standard_normal((args.vocab_size, args.hidden_size)) * 0.1).astype(np.float32)
    return args, mtp, embed, head


def test_v4_mtp_equals_ds4_in_numpy(module):
    args, mtp, embed, head = module
    w = {k: np.array(v, dtype=np.float64) for k, v in tree_flatten(mtp.parameters())}
    emb, lm = nn_embedding(embed), nn_linear(head)
    rng = np.random.default_rng(1)
    n_catch = 4
    hidden = rng.standard_normal((1, n_catch, args.hc_mult, args.hidden_size)).astype(np.float32)
    tokens = [int(t) for t in rng.integers(0, args.vocab_size, n_catch + 2)]
    cache = mtp.make_cache()

    # catch-up: positions 0..3 in one call, then two chained drafts on the fed-back streams
    logits, h = mtp(mx.array(hidden), mx.array([tokens[:n_catch]]), cache, emb, lm)
    got = [(np.array(logits[0, i]), np.array(h[0, i])) for i in range(n_catch)]
    for j in range(2):
        logits, h = mtp(h[:, -1:], mx.array([[tokens[n_catch + j]]]), cache, emb, lm)
        got.append((np.array(logits[0, 0]), np.array(h[0, 0])))

    raw, prev = [], None
    for pos, tok in enumerate(tokens):
        state = hidden[0, pos] if pos < n_catch else prev
        want_logits, prev = mtp_draft_from_hc(w, args, embed, head, state, tok, pos, raw)
        got_logits, got_hc = got[pos]
        assert np.abs(got_logits - want_logits).max() < TOL, f"logits at step {pos}"
        assert np.abs(got_hc - prev).max() < TOL, f"fed-back streams at step {pos}"
    assert len(raw) > WINDOW, "the raw window must have slid"


def nn_embedding(table: np.ndarray):
    import mlx.nn as nn

    e = nn.Embedding(*table.shape)
    e.weight = mx.array(table)
    return e


def nn_linear(weight: np.ndarray):
    import mlx.nn as nn

    lin = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    lin.weight = mx.array(weight)
    return lin
