#!/usr/bin/env python3
"""Write basalt's golden reference fixtures (tests/golden/) from Hugging Face transformers.

Each case is a tiny random-weight LlamaForCausalLM / Qwen3ForCausalLM checkpoint saved by
transformers itself, plus the fp32 logits of one full-sequence forward pass and a greedy
continuation. Two of the models are also written as GGUF files (llama.cpp conventions), each
with its own reference computed by transformers on the weights exactly as the GGUF stores them.

    python3 -m venv .venv-ref && .venv-ref/bin/pip install -r tools/requirements-ref.txt
    .venv-ref/bin/python tools/make_reference.py --out tests/golden [--verify]

--verify recomputes every reference with an independent float64 numpy forward pass that reads
the files on disk (safetensors header parsed by hand, GGUF tensors decoded by hand, GGUF q/k in
llama.cpp's interleaved RoPE layout) and checks it agrees to 1e-5 of max|logit|.

Deterministic: the same bytes on re-run on the same machine (torch runs single-threaded so the
reduction order does not depend on the core count).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import (AutoModelForCausalLM, LlamaConfig, Qwen3_5MoeTextConfig, Qwen3_5TextConfig,
                          Qwen3Config, Qwen3MoeConfig, Qwen3NextConfig)

import gguf
from gguf import GGMLQuantizationType as QT

GREEDY_NEW_TOKENS = 24
# a near-tie between the top two logits would make the greedy test flaky for reasons that are
# not bugs: every greedy step must win by at least this fraction of max|logit|
MIN_REL_MARGIN = 1e-2
# random models like to fall into a one-token loop; a continuation that varies tests more
MIN_DISTINCT_GREEDY = 8
VERIFY_REL_TOL = 1e-5
MAX_SEED_TRIES = 200

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class GgufVariant:
    ftype: str  # "F32" | "F16" | "Q8_0"

    @property
    def suffix(self) -> str:
        return self.ftype.lower()


@dataclass
class Case:
    name: str
    arch: str  # "llama" | "qwen3" | "qwen3_moe" | "qwen3_next" | "qwen3_5" | "qwen3_5_moe"
    config: dict
    dtype: str  # dtype the checkpoint is saved in
    base_seed: int  # first seed tried; set to the one a previous search found, so runs are fast
    seq_len: int  # length of input_ids for the logits reference
    prompt_len: int  # length of the greedy prompt
    gain: float  # std of linear weights is gain / sqrt(fan_in)
    embed_std: float = 1.0  # tied models need a smaller one, else "repeat the input" dominates
    ggufs: list[GgufVariant] = field(default_factory=list)
    note: str = ""
    fused_experts: bool = False  # rewrite the experts as fused 3-D stacks after saving


# bos/eos: llama cases put the specials at the end of the vocabulary (Llama-3 style); qwen3 cases
# have no bos (Qwen's tokenizer adds none) and eos = the last id.
CASES = [
    Case(
        "llama2_mha_tied", "llama",
        dict(vocab_size=256, hidden_size=48, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=4, rms_norm_eps=1e-5, rope_theta=10000.0,
             max_position_embeddings=256, tie_word_embeddings=True, bos_token_id=254, eos_token_id=255),
        "float32", 1001, 20, 6, 1.0, embed_std=0.05,
        note="MHA (heads == kv heads), tied lm_head, plain RoPE (theta 1e4)."),
    Case(
        "llama_gqa_untied", "llama",
        dict(vocab_size=272, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=8, num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=500000.0,
             max_position_embeddings=256, tie_word_embeddings=False, bos_token_id=270, eos_token_id=271),
        "float32", 2006, 24, 6, 1.0,
        ggufs=[GgufVariant("F32")],
        note="GQA 8 q heads / 2 kv heads, untied lm_head, rope_theta 5e5."),
    Case(
        "llama3_rope_scaling", "llama",
        dict(vocab_size=264, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
             num_attention_heads=2, num_key_value_heads=1, head_dim=32, rms_norm_eps=1e-5,
             rope_theta=10000.0, max_position_embeddings=512, tie_word_embeddings=False,
             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                           "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
             bos_token_id=262, eos_token_id=263),
        "float32", 3001, 40, 6, 1.0,
        note="Llama-3.1 style rope scaling; head_dim 32 puts frequencies in all three bands."),
    Case(
        "llama_headdim", "llama",
        dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=24, rms_norm_eps=1e-5,
             rope_theta=10000.0, max_position_embeddings=256, tie_word_embeddings=False,
             attention_bias=False, mlp_bias=False, bos_token_id=254, eos_token_id=255),
        "bfloat16", 4010, 18, 5, 1.0,
        note="explicit head_dim 24 != hidden/heads = 16, bf16 weights."),
    Case(
        "qwen3_tied", "qwen3",
        dict(vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
             num_attention_heads=8, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
             rope_theta=1000000.0, max_position_embeddings=256, tie_word_embeddings=True,
             bos_token_id=None, eos_token_id=319),
        "float32", 5019, 20, 6, 1.0, embed_std=0.05,
        ggufs=[GgufVariant("F16"), GgufVariant("Q8_0")],
        note="Qwen3 (per-head q_norm/k_norm), tied, GQA 8/2, head_dim 16 != hidden/heads = 8."),
    Case(
        "qwen3_untied_f16", "qwen3",
        dict(vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
             rope_theta=1000000.0, max_position_embeddings=256, tie_word_embeddings=False,
             bos_token_id=None, eos_token_id=383),
        "float16", 6004, 22, 6, 1.0,
        note="Qwen3, untied, 3 layers, head_dim 32 (q dim 128 != hidden 64), f16 weights."),
    # Head dims the CUDA attention kernels take (64, 128), prompts longer than one 64-key chunk.
    Case(
        "llama_d128_bf16", "llama",
        dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=128, rms_norm_eps=1e-5,
             rope_theta=500000.0, max_position_embeddings=512, tie_word_embeddings=False,
             bos_token_id=254, eos_token_id=255),
        "bfloat16", 7001, 100, 6, 1.0,
        note="GQA 4/2, head_dim 128 (q dim 512 != hidden 128), bf16, 100 positions (2 chunks of 64)."),
    Case(
        "qwen3_d64_bf16", "qwen3",
        dict(vocab_size=320, hidden_size=128, intermediate_size=192, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=1, head_dim=64, rms_norm_eps=1e-6,
             rope_theta=1000000.0, max_position_embeddings=512, tie_word_embeddings=True,
             bos_token_id=None, eos_token_id=319),
        "bfloat16", 8001, 90, 6, 1.0, embed_std=0.05,
        note="Qwen3, tied, GQA 4/1 (MQA), head_dim 64, bf16, 90 positions (2 chunks of 64)."),
    # Mixture-of-experts and hybrid (Gated DeltaNet + gated attention) models. Hybrid prompts are
    # longer than one 64-token chunk of transformers' chunked delta rule.
    Case(
        "qwen3_moe", "qwen3_moe",
        dict(vocab_size=288, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
             rope_theta=1000000.0, max_position_embeddings=256, tie_word_embeddings=False,
             num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=False,
             decoder_sparse_step=1, mlp_only_layers=[1], bos_token_id=None, eos_token_id=287),
        "float32", 9001, 40, 6, 1.0,
        note="Qwen3-MoE: 8 experts, top-2 not renormalised, layer 1 dense (mlp_only_layers)."),
    Case(
        "qwen3_next", "qwen3_next",
        dict(vocab_size=288, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
             max_position_embeddings=512, tie_word_embeddings=False,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                              "partial_rotary_factor": 0.25},
             linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
             linear_value_head_dim=16, linear_conv_kernel_dim=4,
             num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
             shared_expert_intermediate_size=48, norm_topk_prob=True, decoder_sparse_step=1,
             mlp_only_layers=[1], bos_token_id=None, eos_token_id=287),
        "float32", 10001, 80, 6, 1.0,
        note="Qwen3-Next: 3 GDN + 1 gated attention layer, partial rotary 1/4, interleaved "
             "in_proj_qkvz/ba, MoE + shared expert, layer 1 dense."),
    Case(
        "qwen3_5", "qwen3_5",
        dict(vocab_size=288, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
             max_position_embeddings=512, tie_word_embeddings=False,
             rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                              "partial_rotary_factor": 0.25},
             layer_types=["linear_attention", "full_attention", "linear_attention",
                          "full_attention"],
             linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
             linear_value_head_dim=24, linear_conv_kernel_dim=4, bos_token_id=None,
             eos_token_id=287),
        "bfloat16", 11001, 80, 6, 1.0,
        note="Qwen3.5 dense hybrid: GDN/attention alternating, 2 key heads serving 4 value heads, "
             "value head dim 24 != key head dim 16, bf16."),
    Case(
        "qwen3_5_moe", "qwen3_5_moe",
        dict(vocab_size=288, hidden_size=64, num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=1, head_dim=32, rms_norm_eps=1e-6,
             max_position_embeddings=512, tie_word_embeddings=True,
             rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                              "partial_rotary_factor": 0.25},
             linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16,
             linear_value_head_dim=16, linear_conv_kernel_dim=4,
             num_experts=8, num_experts_per_tok=3, moe_intermediate_size=32,
             shared_expert_intermediate_size=48, bos_token_id=None, eos_token_id=287),
        "float32", 12001, 80, 6, 1.0, embed_std=0.05, fused_experts=True,
        note="Qwen3.5-MoE: default layer_types (3 GDN : 1 attention), top-3 of 8 experts "
             "renormalised, shared expert, tied, experts stored fused 3-D."),
]

CONFIG_CLASSES = {"llama": LlamaConfig, "qwen3": Qwen3Config, "qwen3_moe": Qwen3MoeConfig,
                  "qwen3_next": Qwen3NextConfig, "qwen3_5": Qwen3_5TextConfig,
                  "qwen3_5_moe": Qwen3_5MoeTextConfig}
ZERO_CENTRED = {"qwen3_next", "qwen3_5", "qwen3_5_moe"}  # RMSNorms scale by (1 + w)


# ----------------------------------------------------------------------------------------------
# model construction


def make_config(case: Case):
    kw = dict(case.config)
    cls = CONFIG_CLASSES[case.arch]
    # the initializer_range is recorded only; the weights are drawn below from our own generator
    # so they do not depend on transformers' init code
    return cls(initializer_range=0.0, pad_token_id=None, dtype="float32", **kw)


def random_state(model, case: Case, seed: int) -> dict[str, torch.Tensor]:
    """Weights drawn from a numpy generator in parameter order: linear weights gain/sqrt(fan_in),
    embeddings N(0, 1), norm weights 1 + 0.25 N(0, 1) (never all ones, so an ignored norm weight
    shows up in the logits)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, p in model.named_parameters():
        shape = tuple(p.shape)
        if name.endswith("linear_attn.norm.weight"):  # gated RMSNorm: a plain weight
            v = 1.0 + 0.25 * rng.standard_normal(shape)
        elif name.endswith("norm.weight") and case.arch in ZERO_CENTRED:
            v = 0.25 * rng.standard_normal(shape)  # used as (1 + w)
        elif name.endswith("norm.weight"):
            v = 1.0 + 0.25 * rng.standard_normal(shape)
        elif name.endswith("A_log"):  # decay rates exp(A_log) in [0.02, 0.5]: memory spans chunks
            v = np.log(rng.uniform(0.02, 0.5, shape))
        elif name.endswith("dt_bias"):
            v = rng.uniform(-2.0, 0.0, shape)
        elif "embed_tokens" in name:
            v = case.embed_std * rng.standard_normal(shape)
        elif name == "lm_head.weight":
            v = 1.5 * rng.standard_normal(shape) / math.sqrt(shape[1])
        else:  # linear weights, conv1d [C, 1, K], fused experts [n, out, in]: fan-in = last dim
            v = case.gain * rng.standard_normal(shape) / math.sqrt(shape[-1])
        out[name] = torch.from_numpy(v.astype(np.float32))
    if "lm_head.weight" not in out:  # tied: named_parameters() lists the shared tensor once
        out["lm_head.weight"] = out["model.embed_tokens.weight"]
    return out


def build_and_save(case: Case, seed: int, out_dir: Path):
    torch.manual_seed(seed)
    cfg = make_config(case)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    model.load_state_dict(random_state(model, case, seed), strict=True)
    if case.config.get("tie_word_embeddings"):
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    model = model.to(DTYPES[case.dtype])
    model.generation_config.eos_token_id = case.config["eos_token_id"]
    model.generation_config.bos_token_id = case.config["bos_token_id"]
    if out_dir.exists():
        shutil.rmtree(out_dir)
    model.save_pretrained(out_dir)
    if case.fused_experts:
        fuse_experts(out_dir / "model.safetensors")
    return load_f32(out_dir)


def fuse_experts(path: Path):
    """Rewrites per-expert tensors (mlp.experts.N.{gate,up,down}_proj.weight) as the fused 3-D
    stacks some checkpoints store (mlp.experts.gate_up_proj [n, 2F, E], gate rows first;
    mlp.experts.down_proj [n, E, F]); transformers reads both."""
    from safetensors.torch import load_file, save_file
    st = load_file(path)
    out, groups = {}, {}
    for k, v in st.items():
        if ".mlp.experts." in k and k.split(".mlp.experts.")[1].split(".")[0].isdigit():
            prefix, rest = k.split(".mlp.experts.")
            e, proj = rest.split(".")[0], rest.split(".")[1]
            groups.setdefault(prefix, {}).setdefault(proj, {})[int(e)] = v
        else:
            out[k] = v
    for prefix, g in groups.items():
        n = len(g["gate_proj"])
        out[f"{prefix}.mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([g["gate_proj"][e], g["up_proj"][e]], 0) for e in range(n)]).contiguous()
        out[f"{prefix}.mlp.experts.down_proj"] = torch.stack(
            [g["down_proj"][e] for e in range(n)]).contiguous()
    save_file(out, path, metadata={"format": "pt"})


def load_f32(model_dir: Path):
    m = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager")
    return m.float().eval()


# ----------------------------------------------------------------------------------------------
# references


def make_ids(case: Case, seed: int, n: int, start: int) -> list[int]:
    """Token ids drawn uniformly from the non-special range, prefixed by bos if there is one."""
    rng = np.random.default_rng(seed * 7919 + start)
    specials = {case.config["eos_token_id"], case.config["bos_token_id"]}
    pool = [i for i in range(case.config["vocab_size"] - 2) if i not in specials]
    bos = case.config["bos_token_id"]
    ids = [] if bos is None else [bos]
    ids += [int(pool[j]) for j in rng.integers(0, len(pool), n - len(ids))]
    return ids


@torch.no_grad()
def compute_reference(model, case: Case, input_ids, prompt):
    logits = model(torch.tensor([input_ids]), use_cache=False).logits[0].float().numpy()
    gen = model.generate(
        torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        do_sample=False, max_new_tokens=GREEDY_NEW_TOKENS, min_new_tokens=0,
        return_dict_in_generate=True, output_logits=True, pad_token_id=case.config["eos_token_id"])
    new_ids = gen.sequences[0, len(prompt):].tolist()
    step_logits = torch.stack(gen.logits, 0)[:, 0].float().numpy()  # (N, V)
    margins = []
    for row in step_logits:
        top2 = np.sort(row)[-2:]
        margins.append(float((top2[1] - top2[0]) / np.abs(row).max()))
    return logits, new_ids, min(margins)


def greedy_ok(case: Case, new_ids, margin) -> bool:
    return (len(new_ids) == GREEDY_NEW_TOKENS and case.config["eos_token_id"] not in new_ids
            and margin >= MIN_REL_MARGIN and len(set(new_ids)) >= MIN_DISTINCT_GREEDY)


def write_reference(path_json: Path, logits_name: str, case: Case, arch_name: str, dtype: str,
                    input_ids, logits, prompt, new_ids, margin, extra=None):
    np.save(path_json.parent / logits_name, logits.astype(np.float32), allow_pickle=False)
    ref = {
        "case": case.name,
        "architecture": arch_name,
        "dtype": dtype,
        "input_ids": input_ids,
        "logits_file": logits_name,
        "logits_shape": list(logits.shape),
        "max_abs_logit": float(np.abs(logits).max()),
        "greedy_prompt": prompt,
        "greedy_ids": new_ids,
        "greedy_min_rel_margin": round(margin, 6),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0],
    }
    if extra:
        ref.update(extra)
    path_json.write_text(json.dumps(ref, indent=2) + "\n")


# ----------------------------------------------------------------------------------------------
# GGUF (llama.cpp convert_hf_to_gguf.py conventions)

GGUF_ARCH = {"llama": "llama", "qwen3": "qwen3"}
FTYPE = {"F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16,
         "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}
QTYPE = {"F32": QT.F32, "F16": QT.F16, "Q8_0": QT.Q8_0}


def hf_to_gguf_name(name: str) -> str:
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    if name in fixed:
        return fixed[name]
    parts = name.split(".")  # model.layers.N.<module>.<proj>.weight
    bid, rest = parts[2], ".".join(parts[3:])
    table = {
        "input_layernorm.weight": "attn_norm", "self_attn.q_proj.weight": "attn_q",
        "self_attn.k_proj.weight": "attn_k", "self_attn.v_proj.weight": "attn_v",
        "self_attn.o_proj.weight": "attn_output", "self_attn.q_norm.weight": "attn_q_norm",
        "self_attn.k_norm.weight": "attn_k_norm", "post_attention_layernorm.weight": "ffn_norm",
        "mlp.gate_proj.weight": "ffn_gate", "mlp.up_proj.weight": "ffn_up",
        "mlp.down_proj.weight": "ffn_down",
    }
    return f"blk.{bid}.{table[rest]}.weight"


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF rotate_half layout -> GGUF interleaved layout (llama.cpp LlamaModel.permute): within
    each head, row j of the first half and row j of the second half become rows 2j and 2j+1."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def byte_level_vocab(case: Case) -> tuple[list[str], list[int], list[str]]:
    """A minimal GPT-2 style byte-level BPE vocabulary of exactly vocab_size entries: ids 0..255
    are the 256 byte symbols (GPT-2 bytes_to_unicode), then merged letter pairs, then the two
    special tokens at the end (CONTROL)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_sym = dict(zip(bs, (chr(c) for c in cs)))
    tokens = [byte_sym[b] for b in range(256)]
    types = [gguf.TokenType.NORMAL] * 256
    V = case.config["vocab_size"]
    specials = ["<|begin_of_text|>", "<|end_of_text|>"] if case.arch == "llama" else \
        ["<|endoftext|>", "<|im_end|>"]
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    merges = []
    for a in letters:
        for b in letters:
            if len(tokens) >= V - len(specials):
                break
            merges.append(f"{a} {b}")
            tokens.append(a + b)
            types.append(gguf.TokenType.NORMAL)
    tokens += specials
    types += [gguf.TokenType.CONTROL] * len(specials)
    assert len(tokens) == V
    return tokens, [int(t) for t in types], merges


def write_gguf(case: Case, model, variant: GgufVariant, path: Path):
    cfg = model.config
    arch = GGUF_ARCH[case.arch]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(case.name)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_file_type(FTYPE[variant.ftype])
    if case.arch == "llama":  # LlamaModel adds these; Qwen3Model (TextModel) does not
        w.add_vocab_size(cfg.vocab_size)
        w.add_rope_dimension_count(cfg.head_dim)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokens, types, merges = byte_level_vocab(case)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    if cfg.bos_token_id is not None:
        w.add_bos_token_id(cfg.bos_token_id)
    w.add_eos_token_id(cfg.eos_token_id)
    w.add_add_bos_token(cfg.bos_token_id is not None)

    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    if cfg.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # tied: llama.cpp writes no output tensor
    for name, t in state.items():
        if case.arch == "llama" and name.endswith("q_proj.weight"):
            t = permute_qk(t, cfg.num_attention_heads)
        elif case.arch == "llama" and name.endswith("k_proj.weight"):
            t = permute_qk(t, cfg.num_key_value_heads)
        qtype = QT.F32 if t.ndim <= 1 else QTYPE[variant.ftype]  # 1-D (norms) stay F32
        data = gguf.quants.quantize(np.ascontiguousarray(t, dtype=np.float32), qtype)
        w.add_tensor(hf_to_gguf_name(name), data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gguf_weights_as_hf(case: Case, model, path: Path) -> dict[str, torch.Tensor]:
    """The GGUF's tensors, dequantized with gguf's own code and un-permuted back to HF layout."""
    cfg = model.config
    reader = gguf.GGUFReader(str(path))
    by_name = {t.name: t for t in reader.tensors}
    out = {}
    for name, p in model.state_dict().items():
        gname = hf_to_gguf_name(name)
        if gname == "output.weight" and cfg.tie_word_embeddings:
            gname = "token_embd.weight"
        t = by_name[gname]
        v = gguf.quants.dequantize(t.data, t.tensor_type).reshape(tuple(p.shape)).astype(np.float32)
        if case.arch == "llama" and name.endswith("q_proj.weight"):
            v = unpermute_qk(v, cfg.num_attention_heads)
        elif case.arch == "llama" and name.endswith("k_proj.weight"):
            v = unpermute_qk(v, cfg.num_key_value_heads)
        out[name] = torch.from_numpy(np.ascontiguousarray(v))
    return out


# ----------------------------------------------------------------------------------------------
# independent numpy float64 forward pass (--verify)


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    raw = path.read_bytes()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = raw[base + a:base + b]
        if info["dtype"] == "F32":
            v = np.frombuffer(buf, "<f4")
        elif info["dtype"] == "F16":
            v = np.frombuffer(buf, "<f2")
        elif info["dtype"] == "BF16":
            v = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"[verify] {path}: tensor {name} has dtype {info['dtype']}")
        out[name] = v.astype(np.float64).reshape(info["shape"])
    return out


def inv_freq_np(cfg: dict, head_dim: int) -> np.ndarray:
    rp = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if rp.get("rope_type", "default") == "llama3":
        factor, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
        old = rp["original_max_position_embeddings"]
        wavelen = 2 * np.pi / inv
        out = []
        for f, wl in zip(inv, wavelen):
            if wl < old / hi:
                out.append(f)
            elif wl > old / lo:
                out.append(f / factor)
            else:
                s = (old / wl - lo) / (hi - lo)
                out.append((1 - s) * f / factor + s * f)
        inv = np.array(out)
    else:
        assert rp.get("rope_type", "default") == "default", rp
    return inv


def rope_np(x: np.ndarray, inv: np.ndarray, interleaved: bool) -> np.ndarray:
    """x: (T, H, D). interleaved=False: rotate halves (HF / GGML NEOX); True: rotate adjacent
    pairs (GGML normal mode, what llama.cpp's llama arch uses on permuted q/k)."""
    T = x.shape[0]
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]  # (T, D/2)
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
        return out
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def gqa_attention_np(q, k, v, mask):
    """Softmax attention of q [T, H, D] over k, v [T, Hkv, D] (query head h reads kv head
    h // (H / Hkv)), scaled by 1/sqrt(D), with an additive [T, T] mask: [T, H, D]."""
    T, H, D = q.shape
    Hkv = k.shape[1]
    o = np.empty((T, H, D))
    for hh in range(H):
        kv = hh // (H // Hkv)
        sc = q[:, hh] @ k[:, kv].T / math.sqrt(D) + mask
        sc = np.exp(sc - sc.max(-1, keepdims=True))
        o[:, hh] = (sc / sc.sum(-1, keepdims=True)) @ v[:, kv]
    return o


def rms_np(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def forward_np(W: dict, hp: dict, ids: list[int], interleaved: bool) -> np.ndarray:
    """W uses GGUF-style short names; hp: E, H, Hkv, D, L, eps, inv_freq, qk_norm."""
    H, Hkv, D, eps = hp["H"], hp["Hkv"], hp["D"], hp["eps"]
    x = W["token_embd"][ids]  # (T, E)
    T = len(ids)
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(hp["L"]):
        p = lambda n: W[f"blk.{i}.{n}"]  # noqa: E731
        h = rms_np(x, p("attn_norm"), eps)
        q = (h @ p("attn_q").T).reshape(T, H, D)
        k = (h @ p("attn_k").T).reshape(T, Hkv, D)
        v = (h @ p("attn_v").T).reshape(T, Hkv, D)
        if hp["qk_norm"]:
            q, k = rms_np(q, p("attn_q_norm"), eps), rms_np(k, p("attn_k_norm"), eps)
        q, k = rope_np(q, hp["inv_freq"], interleaved), rope_np(k, hp["inv_freq"], interleaved)
        o = gqa_attention_np(q, k, v, mask)
        x = x + o.reshape(T, H * D) @ p("attn_output").T
        h = rms_np(x, p("ffn_norm"), eps)
        g, u = h @ p("ffn_gate").T, h @ p("ffn_up").T
        x = x + (g / (1 + np.exp(-g)) * u) @ p("ffn_down").T
    x = rms_np(x, W["output_norm"], eps)
    return x @ W.get("output", W["token_embd"]).T


def verify_hf_dir(case_dir: Path, ref: dict) -> float | None:
    cfg = json.loads((case_dir / "config.json").read_text())
    if cfg["model_type"] not in ("llama", "qwen3"):
        return None  # no independent numpy forward for MoE / hybrid models (transformers only)
    st = read_safetensors(case_dir / "model.safetensors")
    W = {hf_to_gguf_name(k).removesuffix(".weight"): v for k, v in st.items()}
    D = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    hp = dict(H=cfg["num_attention_heads"], Hkv=cfg["num_key_value_heads"], D=D,
              L=cfg["num_hidden_layers"], eps=cfg["rms_norm_eps"], inv_freq=inv_freq_np(cfg, D),
              qk_norm=cfg["model_type"] == "qwen3")
    assert ("output" in W) != bool(cfg.get("tie_word_embeddings")), "lm_head presence vs tying"
    return check_against(case_dir / ref["logits_file"], W, hp, ref, interleaved=False)


def decode_gguf_tensor(t) -> np.ndarray:
    """Our own decoder of the raw GGUF bytes (independent of gguf.quants)."""
    raw = np.asarray(t.data).view(np.uint8).reshape(-1)
    shape = tuple(int(n) for n in reversed(t.shape))  # GGUF ne is innermost-first
    if t.tensor_type == QT.F32:
        v = raw.view("<f4").astype(np.float64)
    elif t.tensor_type == QT.F16:
        v = raw.view("<f2").astype(np.float64)
    elif t.tensor_type == QT.Q8_0:
        blk = raw.reshape(-1, 34)  # f16 scale d, then 32 x int8
        d = blk[:, :2].copy().view("<f2").astype(np.float64)
        v = (d * blk[:, 2:].copy().view(np.int8).astype(np.float64)).reshape(-1)
    else:
        raise ValueError(f"[verify] tensor {t.name}: unsupported type {t.tensor_type.name}")
    return v.reshape(shape)


def verify_gguf(path: Path, ref: dict) -> float:
    r = gguf.GGUFReader(str(path))

    def kv(key):
        f = r.fields[key]
        val = f.parts[f.data[0]]
        return val.tobytes().decode() if f.types[0] == gguf.GGUFValueType.STRING else val[0].item()

    arch = kv("general.architecture")
    W = {t.name.removesuffix(".weight"): decode_gguf_tensor(t) for t in r.tensors}
    D = kv(f"{arch}.attention.key_length")
    rope_dim = kv(f"{arch}.rope.dimension_count") if f"{arch}.rope.dimension_count" in r.fields else D
    assert rope_dim == D
    cfg = {"rope_theta": kv(f"{arch}.rope.freq_base")}
    hp = dict(H=kv(f"{arch}.attention.head_count"), Hkv=kv(f"{arch}.attention.head_count_kv"), D=D,
              L=kv(f"{arch}.block_count"), eps=kv(f"{arch}.attention.layer_norm_rms_epsilon"),
              inv_freq=inv_freq_np(cfg, rope_dim), qk_norm=arch == "qwen3")
    assert len(r.fields["tokenizer.ggml.tokens"].data) == W["token_embd"].shape[0]
    # llama arch: GGML normal (interleaved) RoPE on the permuted q/k; qwen3: NEOX, no permutation
    return check_against(path.parent / ref["logits_file"], W, hp, ref, interleaved=arch == "llama")


def check_against(logits_path: Path, W, hp, ref, interleaved: bool) -> float:
    want = np.load(logits_path)
    got = forward_np(W, hp, ref["input_ids"], interleaved)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    if err > VERIFY_REL_TOL:
        sys.exit(f"[verify] {logits_path}: numpy float64 forward differs by {err:.3g} of max|logit|")
    # the greedy ids must also be the numpy model's argmax chain
    seq = list(ref["greedy_prompt"])
    for want_id in ref["greedy_ids"]:
        nxt = int(np.argmax(forward_np(W, hp, seq, interleaved)[-1]))
        if nxt != want_id:
            sys.exit(f"[verify] {logits_path}: greedy step {len(seq)} numpy {nxt} != ref {want_id}")
        seq.append(nxt)
    return err


# ----------------------------------------------------------------------------------------------


def generate_case(case: Case, out: Path) -> list[dict]:
    case_dir = out / case.name
    gguf_dir = out / "gguf"
    for attempt in range(MAX_SEED_TRIES):
        seed = case.base_seed + attempt
        model = build_and_save(case, seed, case_dir)
        input_ids = make_ids(case, seed, case.seq_len, 0)
        prompt = make_ids(case, seed, case.prompt_len, 1)
        logits, new_ids, margin = compute_reference(model, case, input_ids, prompt)
        if not greedy_ok(case, new_ids, margin):
            continue
        results = [dict(path=case_dir / "reference.json", margin=margin, seed=seed,
                        args=(input_ids, logits, prompt, new_ids, margin))]
        ok = True
        for var in case.ggufs:
            gpath = gguf_dir / f"{case.name}.{var.suffix}.gguf"
            gguf_dir.mkdir(parents=True, exist_ok=True)
            write_gguf(case, model, var, gpath)
            gmodel = load_f32(case_dir)
            gmodel.load_state_dict(gguf_weights_as_hf(case, gmodel, gpath), strict=True)
            glogits, gids, gmargin = compute_reference(gmodel, case, input_ids, prompt)
            if not greedy_ok(case, gids, gmargin):
                ok = False
                break
            results.append(dict(path=gguf_dir / f"{case.name}.{var.suffix}.reference.json",
                                margin=gmargin, seed=seed, gguf=gpath, ftype=var.ftype,
                                args=(input_ids, glogits, prompt, gids, gmargin)))
        if ok:
            break
    else:
        sys.exit(f"{case.name}: no seed in {MAX_SEED_TRIES} tries gives greedy margins >= {MIN_REL_MARGIN}")

    if case.name == "llama3_rope_scaling":
        rp, D = model.config.rope_parameters, model.config.head_dim
        wavelen = 2 * np.pi * rp["rope_theta"] ** (np.arange(0, D, 2) / D)
        old = rp["original_max_position_embeddings"]
        bands = [int((wavelen < old / rp["high_freq_factor"]).sum()),
                 int((wavelen > old / rp["low_freq_factor"]).sum())]
        assert bands[0] > 0 and bands[1] > 0 and sum(bands) < D // 2, f"rope bands {bands} of {D // 2}"
        plain = load_f32(case_dir)
        plain.config.rope_parameters = {"rope_type": "default",
                                        "rope_theta": plain.config.rope_parameters["rope_theta"]}
        plain.model.rotary_emb = type(plain.model.rotary_emb)(config=plain.config)
        with torch.no_grad():
            unscaled = plain(torch.tensor([results[0]["args"][0]]), use_cache=False).logits[0].numpy()
        diff = float(np.abs(unscaled - results[0]["args"][1]).max() / np.abs(unscaled).max())
        assert diff > 1e-2, f"llama3 rope scaling changes logits by only {diff:.3g}"
        print(f"  llama3 scaling vs plain rope: max rel logit change {diff:.3g}")

    arch_name = type(model).__name__
    for r in results:
        if "gguf" in r:
            extra = {"gguf_file": r["gguf"].name, "gguf_ftype": r["ftype"],
                     "note": "reference = transformers fp32 on the weights exactly as stored in the GGUF "
                             "(dequantized, q/k un-permuted)"}
            dtype = "float32"
            logits_name = r["path"].name.replace(".reference.json", ".logits.npy")
        else:
            extra, dtype, logits_name = {"seed": r["seed"]}, case.dtype, "logits.npy"
        write_reference(r["path"], logits_name, case, arch_name, dtype, *r["args"], extra=extra)
    return results


@torch.no_grad()
def default_model_reference(out: Path, repo: Path) -> None:
    """References for the trained default model (models/default), which basalt embeds: the
    model itself is not copied, only its logits, tokenization and greedy continuation."""
    from transformers import AutoTokenizer
    model_dir = repo / "models" / "default"
    if not (model_dir / "config.json").exists():
        print("[default_model] models/default not found, skipped")
        return
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = load_f32(model_dir)
    text = "In the beginning God created the heaven and the earth. And the earth was without form"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    logits = model(torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
    prompt_text = "And it came to pass"
    prompt = tok(prompt_text, add_special_tokens=False)["input_ids"]
    gen = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                         do_sample=False, max_new_tokens=48, min_new_tokens=48,
                         return_dict_in_generate=True, output_logits=True,
                         pad_token_id=tok.pad_token_id or 0)
    new_ids = gen.sequences[0, len(prompt):].tolist()
    margins = [float((np.sort(r)[-1] - np.sort(r)[-2]) / np.abs(r).max())
               for r in torch.stack(gen.logits, 0)[:, 0].float().numpy()]
    # Keep the continuation up to the first near-tie (a trained model has some): past it, a
    # last-bit difference could legitimately pick the other token.
    keep = next((i for i, m in enumerate(margins) if m < 1e-4), len(margins))
    new_ids, margins = new_ids[:keep], margins[:keep]
    d = out / "default_model"
    d.mkdir(parents=True, exist_ok=True)
    np.save(d / "logits.npy", logits.astype(np.float32), allow_pickle=False)
    ref = {
        "case": "default_model", "architecture": "Qwen3ForCausalLM", "dtype": "bfloat16",
        "model_dir": "models/default", "text": text, "input_ids": ids,
        "logits_file": "logits.npy", "logits_shape": list(logits.shape),
        "max_abs_logit": float(np.abs(logits).max()),
        "greedy_prompt_text": prompt_text, "greedy_prompt": prompt, "greedy_ids": new_ids,
        "greedy_text": tok.decode(new_ids), "greedy_min_rel_margin": round(min(margins), 6),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0],
    }
    (d / "reference.json").write_text(json.dumps(ref, indent=2, ensure_ascii=False) + "\n")
    print(f"default_model: min greedy margin {min(margins):.4f} of max|logit|")


def quiet_deterministic_torch() -> None:
    """One thread, deterministic algorithms, no transformers chatter: the same bytes on re-run."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("tests/golden"))
    ap.add_argument("--verify", action="store_true", help="check every reference with a numpy float64 forward")
    ap.add_argument("--verify-only", action="store_true", help="only verify what is already in --out")
    ap.add_argument("--only", nargs="*", help="(re)generate only these HF cases (no GGUF rewrite, no default model)")
    args = ap.parse_args()

    quiet_deterministic_torch()

    if args.only:
        for case in [c for c in CASES if c.name in args.only]:
            for r in generate_case(case, args.out):
                print(f"{r['path'].relative_to(args.out)}: seed {r['seed']}, "
                      f"min greedy margin {r['margin']:.4f} of max|logit|")
            ref = json.loads((args.out / case.name / "reference.json").read_text())
            err = verify_hf_dir(args.out / case.name, ref)
            if err is not None:
                print(f"[verify] {case.name}: numpy vs transformers {err:.2e} of max|logit|, greedy ok")
        return
    if not args.verify_only:
        args.out.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(args.out / "gguf", ignore_errors=True)
        for case in CASES:
            results = generate_case(case, args.out)
            for r in results:
                print(f"{r['path'].relative_to(args.out)}: seed {r['seed']}, "
                      f"min greedy margin {r['margin']:.4f} of max|logit|")
        default_model_reference(args.out, Path(__file__).resolve().parent.parent)
    if args.verify or args.verify_only:
        for case in CASES:
            ref = json.loads((args.out / case.name / "reference.json").read_text())
            err = verify_hf_dir(args.out / case.name, ref)
            if err is not None:
                print(f"[verify] {case.name}: numpy vs transformers {err:.2e} of max|logit|, greedy ok")
            for var in case.ggufs:
                stem = args.out / "gguf" / f"{case.name}.{var.suffix}"
                gref = json.loads(Path(f"{stem}.reference.json").read_text())
                err = verify_gguf(Path(f"{stem}.gguf"), gref)
                print(f"[verify] {stem.name}.gguf: numpy vs transformers {err:.2e} of max|logit|, greedy ok")


if __name__ == "__main__":
    main()
