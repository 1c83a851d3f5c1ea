#!/usr/bin/env python3
"""Write basalt's MTP (multi-token prediction) head fixtures for Qwen3.5: tests/golden/qwen3_5_mtp/
and tests/golden/qwen3_5_moe_mtp/.

transformers ignores the `mtp.*` tensors of Qwen3.5 checkpoints (`_keys_to_ignore_on_load_unexpected`),
so the reference here is assembled from transformers' own pieces: the decoder-layer class of the
model's full-attention layers (Qwen3_5DecoderLayer / Qwen3_5MoeDecoderLayer), its zero-centred
RMSNorm class, its rotary embedding, its embedding and lm_head. Each fixture is the base checkpoint
(tests/golden/qwen3_5, tests/golden/qwen3_5_moe, made by tools/make_reference.py; every tensor
unchanged) plus random `mtp.*` tensors in bf16 and `"mtp_num_hidden_layers": 1` in config.json.

MTP entry i (vLLM's qwen3_5_mtp.py convention), for ids x_0..x_{n-1}:
    h_i = the target model's final hidden state at position i, after its final norm (lm_head input)
    u_i = mtp.fc( cat[ pre_fc_norm_embedding(embed(x_{i+1})), pre_fc_norm_hidden(h_i) ] )
    the decoder layer mtp.layers.0 over u_0..u_{n-2}: RoPE position i, causal attention over the
    MTP layer's own keys/values of entries 0..i; then mtp.norm, then the model's lm_head
    -> logits predicting x_{i+2}.

Checks (the script exits non-zero if one fails):
  - transformers loads the new checkpoint with no missing / mismatched weights of the main model,
    and its logits for reference.json's input_ids equal the base case's logits.npy;
  - h_i: output_hidden_states' last entry equals last_hidden_state (post-norm) and lm_head(h) equals
    the model's logits;
  - an independent float64 numpy forward of the whole MTP head, reading the safetensors file by
    hand (pre-layer part, gated partial-RoPE attention, dense MLP / top-k MoE with shared expert),
    agrees with the torch logits to 1e-5 of max|logit|; the pre-layer part (u) is compared on its
    own and the embedding half of fc is pinned to fc.weight[:, :E] (swapping halves must change u).

    /work/venv-ref/bin/python tools/make_mtp_reference.py [--out tests/golden]

Deterministic (torch single-threaded): the same bytes on re-run on the same machine.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_reference as mr  # noqa: E402  (CASES, read_safetensors, gqa_attention_np)

N_IDS = 40
MIN_REL_MARGIN = mr.MIN_REL_MARGIN  # every MTP entry's top-1/top-2 gap >= this fraction of max|row|
# MoE: the k-th and (k+1)-th router probabilities of every entry must differ by at least this much,
# so that no rounding difference can change which experts an entry uses
MIN_ROUTER_GAP = 1e-3
MAX_SEED_TRIES = 200
VERIFY_REL_TOL = 1e-5
BASE_CHECK_REL_TOL = 1e-5
MTP_DTYPE = torch.bfloat16

CONVENTION = (
    "entry i (0 <= i < n-1): h_i = target final hidden state after model.norm at position i (lm_head "
    "input); u_i = mtp.fc(cat[mtp.pre_fc_norm_embedding(embed(ids[i+1])), mtp.pre_fc_norm_hidden(h_i)]) "
    "(embedding half = fc.weight[:, :E], hidden half = fc.weight[:, E:]); u_i -> mtp.layers.0 (a "
    "full-attention decoder layer: RoPE position i, causal over the MTP layer's own K/V of entries "
    "0..i, residual = u) -> mtp.norm -> lm_head = logits predicting ids[i+2]. All RMSNorms "
    "zero-centred: x_hat * (1 + w), eps = rms_norm_eps.")


@dataclass
class MtpCase:
    name: str  # fixture directory
    base: str  # tests/golden/<base>, a make_reference.py case
    base_seed: int  # first seed tried (set to the one a previous search found, so runs are fast)


CASES = [
    MtpCase("qwen3_5_mtp", "qwen3_5", 21027),
    MtpCase("qwen3_5_moe_mtp", "qwen3_5_moe", 22170),
]


# ----------------------------------------------------------------------------------------------
# the MTP head, from transformers' own classes


class MtpHead(nn.Module):
    """Parameter names = the checkpoint names without the `mtp.` prefix."""

    def __init__(self, model):
        super().__init__()
        cfg = model.config
        E, eps = cfg.hidden_size, cfg.rms_norm_eps
        norm_cls = type(model.model.norm)
        full_idx = cfg.layer_types.index("full_attention")
        layer_cls = type(model.model.layers[full_idx])
        self.pre_fc_norm_embedding = norm_cls(E, eps=eps)
        self.pre_fc_norm_hidden = norm_cls(E, eps=eps)
        self.fc = nn.Linear(2 * E, E, bias=False)
        self.layers = nn.ModuleList([layer_cls(cfg, layer_idx=full_idx)])
        self.norm = norm_cls(E, eps=eps)
        self.class_names = {"norm": norm_cls.__name__, "layer": layer_cls.__name__,
                            "layer_idx_borrowed": full_idx,
                            "rotary": type(model.model.rotary_emb).__name__}
        assert self.layers[0].block_type == "full_attention"

    def pre(self, model, ids: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """ids [n], h [n, E] -> u [n-1, E]"""
        e = self.pre_fc_norm_embedding(model.model.embed_tokens(ids[1:]))
        g = self.pre_fc_norm_hidden(h[:-1])
        return self.fc(torch.cat([e, g], dim=-1))

    def forward(self, model, ids: torch.Tensor, h: torch.Tensor):
        u = self.pre(model, ids, h)
        T = u.shape[0]
        x = u[None]  # [1, T, E]
        pos = torch.arange(T)[None]
        cos_sin = model.model.rotary_emb(x, pos)
        mask = torch.full((T, T), float("-inf")).triu(1)[None, None]  # eager additive causal mask
        y = self.layers[0](x, position_embeddings=cos_sin, attention_mask=mask, position_ids=pos)
        if isinstance(y, tuple):
            y = y[0]
        return u, model.lm_head(self.norm(y))[0]


def draw_mtp_weights(head: MtpHead, gain: float, seed: int) -> dict[str, torch.Tensor]:
    """make_reference.random_state's rules, in head.named_parameters() order: zero-centred norm
    weights 0.25 N(0,1); linear weights / fused expert stacks [n, out, in] gain N(0,1)/sqrt(fan_in),
    fan_in = last dim. Returned as the stored dtype (bf16)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, p in head.named_parameters():
        shape = tuple(p.shape)
        if name.endswith("norm.weight") or name.startswith("pre_fc_norm"):
            v = 0.25 * rng.standard_normal(shape)
        else:
            assert len(shape) >= 2, name
            v = gain * rng.standard_normal(shape) / math.sqrt(shape[-1])
        out["mtp." + name] = torch.from_numpy(v.astype(np.float32)).to(MTP_DTYPE)
    return out


def load_head(model, weights: dict[str, torch.Tensor]) -> MtpHead:
    head = MtpHead(model).eval()
    head.load_state_dict({k[len("mtp."):]: v.float() for k, v in weights.items()}, strict=True)
    return head


def make_ids(base_case: mr.Case, seed: int, n: int) -> list[int]:
    """Like make_reference.make_ids (uniform over the non-special ids), its own stream."""
    rng = np.random.default_rng(seed * 7919 + 2)
    specials = {base_case.config["eos_token_id"], base_case.config["bos_token_id"]}
    pool = [i for i in range(base_case.config["vocab_size"] - 2) if i not in specials]
    return [int(pool[j]) for j in rng.integers(0, len(pool), n)]


@torch.no_grad()
def final_hidden(model, ids: list[int]) -> torch.Tensor:
    t = torch.tensor([ids])
    out = model(t, use_cache=False, output_hidden_states=True)
    last = model.model(t, use_cache=False).last_hidden_state
    # hidden_states[-1] is the post-norm state for these classes (capture_outputs replaces the last
    # layer's output with last_hidden_state); pin it, and that it is exactly the lm_head input
    assert torch.equal(out.hidden_states[-1], last), "hidden_states[-1] is not post-norm"
    assert len(out.hidden_states) == model.config.num_hidden_layers + 1
    assert torch.equal(model.lm_head(last), out.logits), "lm_head(last_hidden_state) != logits"
    return last[0]


def margins(logits: np.ndarray) -> np.ndarray:
    s = np.sort(logits, axis=-1)
    return (s[:, -1] - s[:, -2]) / np.abs(logits).max(-1)


# ----------------------------------------------------------------------------------------------
# independent float64 numpy MTP head (reads the safetensors file by hand)


def zc_rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (1.0 + w)


def np_pre(W, cfg, ids, h, swap=False):
    E, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
    fc = W["mtp.fc.weight"]
    assert fc.shape == (E, 2 * E)
    e = zc_rms(W["model.embed_tokens.weight"][ids[1:]], W["mtp.pre_fc_norm_embedding.weight"], eps)
    g = zc_rms(h[:-1], W["mtp.pre_fc_norm_hidden.weight"], eps)
    if swap:
        e, g = g, e
    return e @ fc[:, :E].T + g @ fc[:, E:].T  # embedding half first


def np_mtp(W, cfg, u):
    E, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
    H, Hkv, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    rp = cfg["rope_parameters"]
    rot = int(D * rp.get("partial_rotary_factor", 1.0))
    inv = 1.0 / rp["rope_theta"] ** (np.arange(0, rot, 2, dtype=np.float64) / rot)
    p = lambda n: W[f"mtp.layers.0.{n}"]  # noqa: E731
    T = u.shape[0]

    x = zc_rms(u, p("input_layernorm.weight"), eps)
    qg = (x @ p("self_attn.q_proj.weight").T).reshape(T, H, 2 * D)
    q, gate = qg[..., :D], qg[..., D:].reshape(T, H * D)  # per head: D query rows, then D gate rows
    k = (x @ p("self_attn.k_proj.weight").T).reshape(T, Hkv, D)
    v = (x @ p("self_attn.v_proj.weight").T).reshape(T, Hkv, D)
    q, k = zc_rms(q, p("self_attn.q_norm.weight"), eps), zc_rms(k, p("self_attn.k_norm.weight"), eps)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(t):  # rotate-half on the first `rot` dims, the rest passes through
        a, b = t[..., :rot // 2], t[..., rot // 2:rot]
        return np.concatenate([a * c - b * s, a * s + b * c, t[..., rot:]], axis=-1)

    q, k = rope(q), rope(k)
    mask = np.triu(np.full((T, T), -np.inf), 1)
    o = mr.gqa_attention_np(q, k, v, mask).reshape(T, H * D) * (1.0 / (1.0 + np.exp(-gate)))
    x = u + o @ p("self_attn.o_proj.weight").T

    silu = lambda z: z / (1.0 + np.exp(-z))  # noqa: E731
    hn = zc_rms(x, p("post_attention_layernorm.weight"), eps)
    router_gap = None
    if "num_experts" in cfg:
        F, K, n = cfg["moe_intermediate_size"], cfg["num_experts_per_tok"], cfg["num_experts"]
        gu, dn = p("mlp.experts.gate_up_proj"), p("mlp.experts.down_proj")
        assert gu.shape == (n, 2 * F, E) and dn.shape == (n, E, F)
        logits = hn @ p("mlp.gate.weight").T
        prob = np.exp(logits - logits.max(-1, keepdims=True))
        prob /= prob.sum(-1, keepdims=True)
        order = np.argsort(-prob, axis=-1)
        srt = np.take_along_axis(prob, order, -1)
        router_gap = float((srt[:, K - 1] - srt[:, K]).min())  # a near-tie would make top-k fragile
        y = np.zeros_like(hn)
        for t in range(T):
            top = order[t, :K]
            wts = prob[t, top] / prob[t, top].sum()  # top-k renormalised (norm_topk_prob)
            for e_, w_ in zip(top, wts):
                a = gu[e_] @ hn[t]
                y[t] += w_ * (dn[e_] @ (silu(a[:F]) * a[F:]))  # gate rows first, then up rows
        se = silu(hn @ p("mlp.shared_expert.gate_proj.weight").T) * (hn @ p("mlp.shared_expert.up_proj.weight").T)
        se = se @ p("mlp.shared_expert.down_proj.weight").T
        y += se / (1.0 + np.exp(-(hn @ p("mlp.shared_expert_gate.weight").T)))
    else:
        y = (silu(hn @ p("mlp.gate_proj.weight").T) * (hn @ p("mlp.up_proj.weight").T)) @ p("mlp.down_proj.weight").T
    x = x + y
    x = zc_rms(x, W["mtp.norm.weight"], eps)
    lm = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    return x @ lm.T, router_gap


# ----------------------------------------------------------------------------------------------


def load_model(d: Path):
    model, info = AutoModelForCausalLM.from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    return model.eval(), info


@torch.no_grad()
def generate(case: MtpCase, out: Path) -> dict:
    base_dir, out_dir = out / case.base, out / case.name
    base_case = next(c for c in mr.CASES if c.name == case.base)
    base_ref = json.loads((base_dir / "reference.json").read_text())
    base_cfg = json.loads((base_dir / "config.json").read_text())
    model, _ = load_model(base_dir)

    # seed search: every MTP entry must have a clear top-1 (a near-tie would make greedy_mtp flaky)
    # and, for MoE, a clear top-k expert set
    for attempt in range(MAX_SEED_TRIES):
        seed = case.base_seed + attempt
        weights = draw_mtp_weights(MtpHead(model), base_case.gain, seed)
        ids = make_ids(base_case, seed, N_IDS)
        h = final_hidden(model, ids)
        u, lg = load_head(model, weights)(model, torch.tensor(ids), h)
        if margins(lg.numpy()).min() < MIN_REL_MARGIN:
            continue
        W = {k: v.double().numpy() for k, v in {**model.state_dict(), **weights}.items()}
        _, router_gap = np_mtp(W, base_cfg, u.double().numpy())
        if router_gap is None or router_gap >= MIN_ROUTER_GAP:
            break
    else:
        sys.exit(f"{case.name}: no seed in {MAX_SEED_TRIES} tries gives MTP margins >= {MIN_REL_MARGIN} "
                 f"and router gaps >= {MIN_ROUTER_GAP}")

    # write the fixture: base tensors unchanged + mtp.*
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    cfg = dict(base_cfg, mtp_num_hidden_layers=1)
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    shutil.copyfile(base_dir / "generation_config.json", out_dir / "generation_config.json")
    base_st = load_file(base_dir / "model.safetensors")
    assert not any(k.startswith("mtp.") for k in base_st)
    save_file({**base_st, **weights}, out_dir / "model.safetensors", metadata={"format": "pt"})

    # everything below runs from the files on disk
    st = load_file(out_dir / "model.safetensors")
    for k, v in base_st.items():
        assert st[k].dtype == v.dtype and torch.equal(st[k], v), f"base tensor {k} changed"
    model, info = load_model(out_dir)
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    assert not any(n.startswith("mtp") for n, _ in model.named_parameters())
    got = model(torch.tensor([base_ref["input_ids"]]), use_cache=False).logits[0].numpy()
    want = np.load(base_dir / base_ref["logits_file"])
    base_err = float(np.abs(got - want).max() / np.abs(want).max())
    assert base_err <= BASE_CHECK_REL_TOL, f"{case.name}: base logits differ by {base_err:.3g}"

    mtp_w = {k: v for k, v in st.items() if k.startswith("mtp.")}
    assert set(mtp_w) == set(weights) and all(torch.equal(mtp_w[k], weights[k]) for k in weights)
    head = load_head(model, mtp_w)
    h = final_hidden(model, ids)
    u, lg = head(model, torch.tensor(ids), h)
    u, lg = u.numpy(), lg.numpy()
    m = margins(lg)
    assert m.min() >= MIN_REL_MARGIN

    # independent numpy check, weights parsed from the file by hand
    W = mr.read_safetensors(out_dir / "model.safetensors")
    h64 = h.numpy().astype(np.float64)
    u_np = np_pre(W, cfg, ids, h64)
    pre_err = float(np.abs(u_np - u).max() / np.abs(u_np).max())
    swap_diff = float(np.abs(np_pre(W, cfg, ids, h64, swap=True) - u).max() / np.abs(u_np).max())
    assert pre_err <= VERIFY_REL_TOL, f"{case.name}: pre-layer numpy vs torch {pre_err:.3g}"
    assert swap_diff > 0.1, f"{case.name}: swapping the fc halves changes u by only {swap_diff:.3g}"
    lg_np, router_gap = np_mtp(W, cfg, u_np)
    err = float(np.abs(lg_np - lg).max() / np.abs(lg_np).max())
    assert err <= VERIFY_REL_TOL, f"{case.name}: MTP numpy vs torch {err:.3g} of max|logit|"
    assert (lg_np.argmax(-1) == lg.argmax(-1)).all()
    assert router_gap is None or router_gap >= MIN_ROUTER_GAP

    np.save(out_dir / "mtp_logits.npy", lg.astype(np.float32), allow_pickle=False)
    added = {k: [list(v.shape), str(v.dtype).replace("torch.", "")] for k, v in mtp_w.items()}
    ref = {
        "case": case.name,
        "base_case": case.base,
        "architecture": type(model).__name__,
        "ids": ids,
        "n": len(ids),
        "mtp_logits": "mtp_logits.npy",
        "mtp_logits_shape": list(lg.shape),
        "max_abs": float(np.abs(lg).max()),
        "tolerance": "max |mtp_logit - ref| <= 1e-4 * max_abs (fp32 compute on the upcast stored "
                     "weights); greedy_mtp exactly",
        "convention": CONVENTION,
        "greedy_mtp": [int(t) for t in lg.argmax(-1)],
        "greedy_mtp_min_rel_margin": round(float(m.min()), 6),
        "seed": seed,
        "mtp_dtype": str(MTP_DTYPE).replace("torch.", ""),
        "mtp_tensors": added,
        "transformers_classes": head.class_names,
        "hidden_state": "post-norm (= output_hidden_states[-1] = last_hidden_state; checked)",
        "checks": {"base_logits_vs_base_case_rel": base_err, "numpy_pre_layer_rel": pre_err,
                   "numpy_mtp_logits_rel": err, "fc_halves_swapped_rel_change": round(swap_diff, 4),
                   **({"router_min_topk_gap": round(router_gap, 6)} if router_gap is not None else {})},
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0],
    }
    (out_dir / "mtp_reference.json").write_text(json.dumps(ref, indent=2) + "\n")
    print(f"{case.name}: seed {seed}, [{lg.shape[0]}, {lg.shape[1]}], max|logit| {ref['max_abs']:.4f}, "
          f"min margin {m.min():.4f}, numpy pre {pre_err:.1e} / logits {err:.1e}, base logits {base_err:.1e}, "
          f"model.safetensors {(out_dir / 'model.safetensors').stat().st_size} bytes")
    return ref


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "tests" / "golden")
    args = ap.parse_args()
    mr.quiet_deterministic_torch()
    for case in CASES:
        generate(case, args.out)


if __name__ == "__main__":
    main()
