#!/usr/bin/env python3
"""Train basalt's embedded default model: a small Qwen3ForCausalLM on the King James Bible.

Input: the corpus written by tools/make_corpus.py (default .corpus/train.txt, .corpus/heldout.txt:
one verse per line, chapters separated by a blank line).

Steps:
  1. train a byte-level BPE tokenizer (HF `tokenizers`) on train.txt: NFC normalizer, Qwen2/3's
     pre-tokenizer (Split with the Qwen regex, then ByteLevel with use_regex=false), ByteLevel
     decoder; all 256 byte symbols in the vocabulary; specials <|endoftext|>, <|im_start|>,
     <|im_end|> at the end of the vocabulary;
  2. tokenize: each chapter becomes its text followed by <|endoftext|>, all concatenated;
  3. build Qwen3ForCausalLM from a Qwen3Config and train it with AdamW, linear warm-up then cosine
     decay, on random windows of --seq tokens, under bf16 autocast (fp32 master weights);
  4. evaluate the held-out loss every --eval-every steps and at the end; with --select best
     (default) keep the weights of the evaluation with the lowest held-out loss;
  5. save in Hugging Face format to --out (bf16 model.safetensors, config.json,
     generation_config.json, tokenizer.json, tokenizer_config.json), reload the saved folder with
     transformers, re-evaluate, generate samples, and write the metrics JSON (--metrics).

--time-budget bounds the wall-clock training time: the schedule's progress is
max(step/steps, elapsed/time_budget), so if the budget binds the cosine finishes early and the
run stays usable (the metrics say so). When the budget does not bind, the run is the fixed
--steps, seeded; bitwise reproducibility on a GPU is as far as torch allows.

Typical use:
  python3 tools/make_corpus.py                       # where the Debian packages are installed
  python3 tools/train_default_model.py --out models/default                     # on one H200
  python3 tools/train_default_model.py --steps 20 --device cpu --out /tmp/m     # smoke test
  python3 tools/train_default_model.py --draft      # draft model -> models/draft/ (see DRAFT_DEFAULTS)
  python3 tools/train_default_model.py --acceptance models/draft   # draft vs models/default, CPU

--draft trains the small speculative-decoding draft model instead: it loads the default model's
tokenizer (--tokenizer, default models/default/tokenizer.json; not retrained, so token ids are
shared) and copies its tokenizer.json / tokenizer_config.json byte for byte into --out, and changes
the defaults listed in DRAFT_DEFAULTS (explicit flags still win). Its metrics go to
<out>/train_metrics.json.
"""

import argparse
import json
import math
import os
import platform
import random
import shutil
import sys
import time

# Must be set before CUDA initialises for deterministic cuBLAS.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch
import torch.nn.functional as F

import tokenizers
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, Qwen3Config, Qwen3ForCausalLM

# Qwen2 / Qwen3 pre-tokenizer regex, as in their tokenizer.json.
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# ChatML, as Qwen2's template (without its default system prompt).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
SAMPLE_PROMPTS = ["In the beginning", "And the LORD said unto Moses", "Blessed are the"]
# --draft: a ~0.8 M-parameter Qwen3 sharing models/default's tokenizer (speculative-decoding draft).
DRAFT_DEFAULTS = dict(out="models/draft", tokenizer="models/default/tokenizer.json", hidden=128, layers=2,
                      heads=2, kv_heads=1, head_dim=64, intermediate=256, steps=3000, dropout=0.1,
                      time_budget=170.0, size_budget=2 * 1024 * 1024)


def log(msg):
    print(msg, flush=True)


def read_chapters(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    chapters = [c.strip("\n") + "\n" for c in text.split("\n\n") if c.strip()]
    if not chapters:
        sys.exit(f"train_default_model: no text in {path} (run tools/make_corpus.py first)")
    return chapters


def train_tokenizer(chapters, vocab_size):
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    n_regular = vocab_size - len(SPECIALS)
    trainer = trainers.BpeTrainer(vocab_size=n_regular, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(chapters, trainer=trainer, length=len(chapters))
    if tok.get_vocab_size() != n_regular:
        sys.exit(f"train_default_model: BPE reached {tok.get_vocab_size()} tokens, wanted {n_regular}")
    tok.add_special_tokens(SPECIALS)  # ids n_regular .. vocab_size-1, as Qwen puts them last
    ids = [tok.token_to_id(s) for s in SPECIALS]
    assert ids == list(range(n_regular, vocab_size)), ids
    byte_syms = set(pre_tokenizers.ByteLevel.alphabet())
    missing = [s for s in byte_syms if tok.token_to_id(s) is None]
    assert not missing, f"byte symbols missing from the vocabulary: {missing}"
    return tok


def save_tokenizer(tok, args):
    """Write tokenizer.json and tokenizer_config.json for a tokenizer trained by train_tokenizer."""
    # decoders.ByteLevel() serialises its (ignored) options as true; write them as Qwen's file does
    tj = json.loads(tok.to_str())
    tj["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tok = Tokenizer.from_str(json.dumps(tj))
    tok.save(os.path.join(args.out, "tokenizer.json"), pretty=False)
    tcfg = tokenizer_config("<|endoftext|>", args.max_pos)
    for s in SPECIALS:
        tcfg["added_tokens_decoder"][str(tok.token_to_id(s))] = {
            "content": s, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
            "special": True}
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(tcfg, f, indent=2)
        f.write("\n")


def encode_chapters(tok, chapters, eos_id):
    out = []
    for enc in tok.encode_batch(chapters, add_special_tokens=False):
        out.extend(enc.ids)
        out.append(eos_id)
    return torch.tensor(out, dtype=torch.long)


def tokenizer_config(eos, max_len):
    return {
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {},  # filled in by the caller
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": eos,
        "eos_token": eos,
        "pad_token": eos,
        "unk_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "model_max_length": max_len,
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def heldout_windows(data, seq):
    """[n, seq+1] windows with stride seq: every token after the first is predicted exactly once."""
    n_win = (len(data) - 1) // seq
    return data[(torch.arange(n_win) * seq)[:, None] + torch.arange(seq + 1)[None, :]]


@torch.no_grad()
def evaluate(model, windows, batch, device, autocast):
    """Mean next-token loss over the [n, seq+1] windows (predicting tokens 1..seq of each)."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(windows), batch):
        xy = windows[i:i + batch].to(device)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=xy[:, :-1]).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), xy[:, 1:].reshape(-1), reduction="sum")
        total += loss.item()
        count += xy[:, 1:].numel()
    model.train()
    return total / count


@torch.no_grad()
def measure_acceptance(draft_dir, target_dir, corpus, n_prompts=20, prompt_tokens=32, new_tokens=64, k=4):
    """Greedy agreement of a draft model with its target on held-out prompts (CPU, fp32 compute).

    For n_prompts held-out chapters (evenly spaced), the prompt is the chapter's first prompt_tokens
    tokens; the target continues it greedily for new_tokens tokens (stopping early at an EOS). Then:
    per-token agreement = how often the draft's greedy next token, given the same prefix, equals the
    target's; accepted length at k = at each position p with p + k <= n, the draft rolls out k tokens
    greedily from the prefix and the accepted length is the longest prefix equal to the target's next
    k tokens (0..k), averaged; simulated speculative decoding walks each continuation accepting a
    tokens plus the target's own token per verify pass, and reports tokens per verify pass.
    """
    device = torch.device("cpu")
    hf_tok = AutoTokenizer.from_pretrained(target_dir)
    d_tok = Tokenizer.from_file(os.path.join(draft_dir, "tokenizer.json"))
    assert d_tok.to_str() == Tokenizer.from_file(os.path.join(target_dir, "tokenizer.json")).to_str(), \
        "draft and target tokenizers differ"
    models_ = {}
    for name, path in (("target", target_dir), ("draft", draft_dir)):
        m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to(device).eval()
        models_[name] = m
    held_ch = read_chapters(os.path.join(corpus, "heldout.txt"))
    eos_id = hf_tok.convert_tokens_to_ids("<|endoftext|>")
    eos_ids = {eos_id, hf_tok.convert_tokens_to_ids("<|im_end|>")}
    held_ids = encode_chapters(Tokenizer.from_file(os.path.join(target_dir, "tokenizer.json")), held_ch, eos_id)
    win = heldout_windows(held_ids, 256)
    res = {"heldout_tokens_scored": win.shape[0] * 256}
    for name, m in models_.items():
        hl = evaluate(m, win, 64, device, autocast=False)  # bf16 weights and compute, as saved
        res[f"{name}_heldout_loss_bf16"] = round(hl, 4)
        res[f"{name}_heldout_ppl_bf16"] = round(math.exp(hl), 3)
        log(f"{name}: held-out loss {hl:.4f} (ppl {math.exp(hl):.2f})")
        models_[name] = m.float()  # fp32 compute for the greedy comparisons
    tgt, drf = models_["target"], models_["draft"]
    picks = [round(i * (len(held_ch) - 1) / (n_prompts - 1)) for i in range(n_prompts)]
    agree = total = 0
    acc_lens, spec_steps, spec_tokens, samples = [], 0, 0, []

    def greedy(m, ids, n):
        out = m.generate(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                         do_sample=False, max_new_tokens=n, eos_token_id=sorted(eos_ids), pad_token_id=eos_id)
        return out[0, len(ids):].tolist()

    def rollout(ids, n):  # draft's greedy n tokens, no cache (prefixes are short)
        ids = list(ids)
        for _ in range(n):
            ids.append(int(drf(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
        return ids[-n:]

    for ci in picks:
        prompt = hf_tok(held_ch[ci])["input_ids"][:prompt_tokens]
        cont = greedy(tgt, prompt, new_tokens)
        full = prompt + cont
        # per-token agreement: one draft forward over the whole sequence
        dpred = drf(input_ids=torch.tensor([full])).logits[0].argmax(-1).tolist()
        for t in range(len(cont)):
            agree += int(dpred[len(prompt) + t - 1] == cont[t])
            total += 1
        # accepted length at k for every position with k target tokens ahead
        for p in range(len(cont) - k + 1):
            d = rollout(full[:len(prompt) + p], k)
            a = 0
            while a < k and d[a] == cont[p + a]:
                a += 1
            acc_lens.append(a)
        # simulated speculative decoding along the target's greedy continuation
        p = 0
        while p < len(cont):
            kk = min(k, len(cont) - p)
            d = rollout(full[:len(prompt) + p], kk)
            a = 0
            while a < kk and d[a] == cont[p + a]:
                a += 1
            step_tokens = min(a + 1, len(cont) - p)
            spec_steps += 1
            spec_tokens += step_tokens
            p += step_tokens
        samples.append({"chapter_index": ci, "prompt": hf_tok.decode(prompt), "target_greedy": hf_tok.decode(cont)})
    hist = [acc_lens.count(i) for i in range(k + 1)]
    res.update({
        "prompts": n_prompts, "prompt_tokens": prompt_tokens, "new_tokens": new_tokens, "k": k,
        "heldout_chapter_indices": picks, "target_tokens_compared": total,
        "per_token_agreement": round(agree / total, 4),
        "mean_accepted_len_k": round(sum(acc_lens) / len(acc_lens), 4), "accepted_len_histogram": hist,
        "positions_k": len(acc_lens),
        "spec_tokens_per_verify_pass": round(spec_tokens / spec_steps, 4), "spec_verify_passes": spec_steps,
        "samples": samples[:3],
    })
    log(f"per-token greedy agreement {agree}/{total} = {agree / total:.4f}; mean accepted length at k={k}: "
        f"{res['mean_accepted_len_k']:.3f} over {len(acc_lens)} positions (histogram 0..{k}: {hist}); "
        f"simulated speculative decoding: {spec_tokens} tokens in {spec_steps} verify passes = "
        f"{spec_tokens / spec_steps:.3f} tokens/pass")
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=".corpus", help="folder with train.txt and heldout.txt")
    ap.add_argument("--out", default="models/default", help="output folder (Hugging Face format)")
    ap.add_argument("--metrics", default=None, help="metrics JSON (default: <out>/../train_metrics.json, outside the embedded folder)")
    ap.add_argument("--device", default="auto", help="auto | cuda | cpu")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--draft", action="store_true", help="train the draft model (defaults: DRAFT_DEFAULTS)")
    ap.add_argument("--tokenizer", default=None,
                    help="load this tokenizer.json (its tokenizer_config.json beside it) instead of training one")
    # tokenizer / model
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=5)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--intermediate", type=int, default=448)
    ap.add_argument("--max-pos", type=int, default=1024)
    # optimisation
    ap.add_argument("--steps", type=int, default=1600)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--dropout", type=float, default=0.2,
                    help="residual dropout on each attention and MLP output, training only (hooks; "
                         "the saved architecture is plain Qwen3)")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--select", choices=["best", "last"], default="best",
                    help="save the weights of the best held-out evaluation, or of the last step")
    ap.add_argument("--time-budget", type=float, default=330.0,
                    help="wall-clock seconds for the training loop (schedule ends early if it binds)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (off by default)")
    ap.add_argument("--size-budget", type=int, default=8 * 1024 * 1024,
                    help="fail if the saved folder is larger (bytes; default 8 MiB)")
    ap.add_argument("--acceptance", metavar="DRAFT_DIR", default=None,
                    help="train nothing: measure DRAFT_DIR against --target (held-out loss, greedy acceptance) "
                         "on the CPU and write DRAFT_DIR/acceptance.json")
    ap.add_argument("--target", default="models/default", help="target model folder for --acceptance")
    if ap.parse_known_args()[0].draft:
        ap.set_defaults(**DRAFT_DEFAULTS)
    args = ap.parse_args()
    metrics_path = args.metrics or (os.path.join(args.out, "train_metrics.json") if args.draft else
                                    os.path.join(os.path.dirname(os.path.abspath(args.out)), "train_metrics.json"))

    if args.acceptance:
        torch.manual_seed(args.seed)
        res = measure_acceptance(args.acceptance, args.target, args.corpus)
        res["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}
        with open(os.path.join(args.acceptance, "acceptance.json"), "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
        return
    t_start = time.time()
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    autocast = True  # bf16 autocast on both CUDA and CPU
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        dev_name = torch.cuda.get_device_name(device)
    else:
        dev_name = platform.processor() or platform.machine()
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, tokenizers {tokenizers.__version__}; "
        f"device {device} ({dev_name})")

    # ---- data + tokenizer -------------------------------------------------------------------
    train_ch = read_chapters(os.path.join(args.corpus, "train.txt"))
    held_ch = read_chapters(os.path.join(args.corpus, "heldout.txt"))
    t0 = time.time()
    if args.tokenizer:
        tok = Tokenizer.from_file(args.tokenizer)
        if tok.get_vocab_size() != args.vocab:
            sys.exit(f"train_default_model: {args.tokenizer} has {tok.get_vocab_size()} tokens, --vocab is {args.vocab}")
        assert [tok.token_to_id(s) for s in SPECIALS] == list(range(args.vocab - len(SPECIALS), args.vocab))
    else:
        tok = train_tokenizer(train_ch, args.vocab)
    eos_id = tok.token_to_id("<|endoftext|>")
    train_ids = encode_chapters(tok, train_ch, eos_id)
    held_ids = encode_chapters(tok, held_ch, eos_id)
    t_tok = time.time() - t0
    train_chars = sum(len(c) for c in train_ch)
    held_chars = sum(len(c) for c in held_ch)
    log(f"tokenizer: vocab {tok.get_vocab_size()} {'loaded from ' + args.tokenizer if args.tokenizer else 'trained'} in {t_tok:.1f}s; train {len(train_ch)} chapters "
        f"{len(train_ids)} tokens ({train_chars / len(train_ids):.2f} chars/token), held-out {len(held_ch)} "
        f"chapters {len(held_ids)} tokens")
    train_dev = train_ids.to(device)

    # ---- model --------------------------------------------------------------------------------
    config = Qwen3Config(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim, max_position_embeddings=args.max_pos, rope_theta=10000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu", attention_bias=False,
        attention_dropout=0.0, use_sliding_window=False, initializer_range=0.02,
        bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id, use_cache=True,
    )
    config._attn_implementation = "sdpa"
    model = Qwen3ForCausalLM(config).to(device)
    assert model.lm_head.weight is model.model.embed_tokens.weight, "embeddings must be tied"
    n_params = sum(p.numel() for p in model.parameters())  # tied weights counted once
    n_embed = model.model.embed_tokens.weight.numel()
    log(f"model: Qwen3ForCausalLM {args.layers} layers, hidden {args.hidden}, {args.heads}x{args.head_dim} heads, "
        f"{args.kv_heads} KV heads, MLP {args.intermediate}; {n_params} parameters ({n_embed} in the tied embedding); "
        f"bf16 weights {2 * n_params / 1e6:.2f} MB")

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt_kwargs = dict(lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    if device.type == "cuda":
        opt_kwargs["fused"] = True
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], **opt_kwargs)
    if args.dropout > 0:
        def residual_dropout(mod, inp, out):
            return F.dropout(out, p=args.dropout, training=mod.training)
        for layer in model.model.layers:
            layer.self_attn.o_proj.register_forward_hook(residual_dropout)
            layer.mlp.register_forward_hook(residual_dropout)
    fwd = torch.compile(model) if args.compile else model

    def lr_at(progress, step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        p = min(1.0, max(0.0, progress))
        return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * p)))

    gen = torch.Generator().manual_seed(args.seed)
    offs = torch.arange(args.seq + 1, device=device)
    n_start = len(train_ids) - args.seq - 1
    # fixed sample of training windows for a clean train-loss evaluation
    # held-out windows, and a fixed sample of 256 disjoint training windows for a clean train loss
    held_win = heldout_windows(held_ids, args.seq)
    all_train_win = heldout_windows(train_ids, args.seq)
    pick = torch.randperm(len(all_train_win), generator=torch.Generator().manual_seed(7))[:256].sort().values
    train_win = all_train_win[pick]

    history, evals = [], []
    best = {"heldout_loss": float("inf"), "step": None, "state": None}
    model.train()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t_train0 = time.time()
    step, time_bound, ema, window_losses = 0, False, None, []
    while True:
        elapsed = time.time() - t_train0
        progress = max(step / args.steps, elapsed / args.time_budget)
        if progress >= 1.0:
            time_bound = step < args.steps
            break
        lr = lr_at(progress, step)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, n_start, (args.batch,), generator=gen).to(device, non_blocking=True)
        xy = train_dev[starts[:, None] + offs[None, :]]
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = fwd(input_ids=xy[:, :-1]).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), xy[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        step += 1
        window_losses.append(loss.detach())
        if step % args.log_every == 0 or step == 1:
            lv = torch.stack(window_losses).mean().item()
            window_losses = []
            ema = lv if ema is None else 0.7 * ema + 0.3 * lv
            el = time.time() - t_train0
            history.append({"step": step, "loss": round(lv, 4), "lr": lr, "grad_norm": round(gnorm.item(), 3),
                            "elapsed_s": round(el, 1)})
            log(f"step {step:6d}  loss {lv:.4f}  lr {lr:.2e}  gnorm {gnorm.item():.2f}  {el:7.1f}s  "
                f"{step * args.batch * args.seq / max(el, 1e-9) / 1e3:.0f}k tok/s")
        if step % args.eval_every == 0 or step == args.steps:
            hl = evaluate(model, held_win, 64, device, autocast)
            tl = evaluate(model, train_win, 64, device, autocast)
            evals.append({"step": step, "heldout_loss": round(hl, 4), "train_sample_loss": round(tl, 4),
                          "elapsed_s": round(time.time() - t_train0, 1)})
            log(f"eval step {step}: held-out loss {hl:.4f} (ppl {math.exp(hl):.2f}), train-sample loss {tl:.4f}")
            if hl < best["heldout_loss"]:
                best = {"heldout_loss": hl, "step": step,
                        "state": {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}}
    if device.type == "cuda":
        torch.cuda.synchronize()
    train_time = time.time() - t_train0
    last_held = evaluate(model, held_win, 64, device, autocast)
    log(f"training: {step} steps in {train_time:.1f}s{' (time budget bound)' if time_bound else ''}; "
        f"last-step held-out loss {last_held:.4f}; best {best['heldout_loss']:.4f} at step {best['step']}")
    if not evals or evals[-1]["step"] != step:
        evals.append({"step": step, "heldout_loss": round(last_held, 4), "elapsed_s": round(train_time, 1)})
        if last_held < best["heldout_loss"]:
            best = {"heldout_loss": last_held, "step": step, "state": None}
    selected_step = step
    if args.select == "best" and best["state"] is not None and best["step"] != step:
        model.load_state_dict(best["state"])
        selected_step = best["step"]
    log(f"saving the weights of step {selected_step} ({args.select})")

    # ---- save -----------------------------------------------------------------------------------
    os.makedirs(args.out, exist_ok=True)
    model = model.to("cpu", dtype=torch.bfloat16)
    model.config.use_cache = True
    model.generation_config = GenerationConfig(
        bos_token_id=eos_id, eos_token_id=[eos_id, tok.token_to_id("<|im_end|>")], pad_token_id=eos_id,
        do_sample=True, temperature=0.8, top_k=40, top_p=0.95, max_new_tokens=256,
    )
    model.save_pretrained(args.out)
    # config.json: keep the transformers-5 fields and add the flat ones older readers look for
    cfg_path = os.path.join(args.out, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg.setdefault("rope_theta", 10000.0)
    cfg["torch_dtype"] = "bfloat16"
    cfg["dtype"] = "bfloat16"
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    if args.tokenizer:  # shared tokenizer: copy both files unchanged
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(os.path.join(os.path.dirname(os.path.abspath(args.tokenizer)), fn),
                            os.path.join(args.out, fn))
    else:
        save_tokenizer(tok, args)

    # ---- reload the saved folder with transformers: re-evaluate and sample ----------------------
    hf_tok = AutoTokenizer.from_pretrained(args.out)
    probe = "And God said, Let there be light: and there was light.\n"
    assert hf_tok(probe)["input_ids"] == tok.encode(probe).ids, "AutoTokenizer disagrees with tokenizer.json"
    reloaded = AutoModelForCausalLM.from_pretrained(args.out, dtype=torch.bfloat16).to(device)
    saved_held = evaluate(reloaded, held_win, 64, device, autocast=False)
    saved_train = evaluate(reloaded, train_win, 64, device, autocast=False)
    log(f"saved bf16 model: held-out loss {saved_held:.4f} (ppl {math.exp(saved_held):.2f}), "
        f"train-sample loss {saved_train:.4f} (ppl {math.exp(saved_train):.2f})")
    samples = []
    reloaded.eval()
    for i, prompt in enumerate(SAMPLE_PROMPTS):
        enc = hf_tok(prompt, return_tensors="pt").to(device)
        for mode in ("greedy", "sampled"):
            torch.manual_seed(args.seed + i)
            kw = dict(do_sample=False) if mode == "greedy" else dict(do_sample=True, temperature=0.8, top_k=40, top_p=0.95)
            with torch.no_grad():
                out = reloaded.generate(**enc, max_new_tokens=80, **kw)
            text = hf_tok.decode(out[0], skip_special_tokens=False)
            samples.append({"prompt": prompt, "mode": mode, "text": text})
            log(f"--- {mode}: {text!r}")

    files = {fn: os.path.getsize(os.path.join(args.out, fn)) for fn in sorted(os.listdir(args.out))
             if os.path.join(args.out, fn) != metrics_path}
    total = sum(files.values())
    log(f"files: {files}; total {total} bytes ({total / 2**20:.2f} MiB)")
    metrics = {
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__, "python": platform.python_version()},
        "device": f"{device.type} ({dev_name})",
        "args": vars(args),
        "corpus": {"train_chapters": len(train_ch), "heldout_chapters": len(held_ch),
                   "train_chars": train_chars, "heldout_chars": held_chars,
                   "train_tokens": len(train_ids), "heldout_tokens": len(held_ids),
                   "chars_per_token_train": round(train_chars / len(train_ids), 3)},
        "params": n_params, "params_embedding_tied": n_embed,
        "steps_done": step, "time_budget_bound": time_bound,
        "tokens_seen": step * args.batch * args.seq,
        "epochs": round(step * args.batch * args.seq / len(train_ids), 2),
        "tokenizer_train_s": round(t_tok, 2), "train_time_s": round(train_time, 1),
        "total_time_s": round(time.time() - t_start, 1),
        "final_train_loss_logged": history[-1]["loss"] if history else None,
        "last_step_heldout_loss": round(last_held, 4),
        "selected_step": selected_step, "selection": args.select,
        "saved_bf16_heldout_loss": round(saved_held, 4), "saved_bf16_heldout_ppl": round(math.exp(saved_held), 3),
        "saved_bf16_train_sample_loss": round(saved_train, 4),
        "saved_bf16_train_sample_ppl": round(math.exp(saved_train), 3),
        "heldout_tokens_scored": held_win.shape[0] * args.seq,
        "heldout_bits_per_char_approx": round(saved_held * len(held_ids) / held_chars / math.log(2), 4),
        "files_bytes": files, "total_bytes": total,
        "loss_history": history, "evals": evals, "samples": samples,
    }
    with open(metrics_path, "w") as f:
        json.dump(metrics, f, indent=1)
        f.write("\n")
    log(f"metrics -> {metrics_path}")
    if total > args.size_budget:
        sys.exit(f"train_default_model: {args.out} is {total} bytes, over the {args.size_budget}-byte budget")


if __name__ == "__main__":
    main()
