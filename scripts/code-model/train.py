#!/usr/bin/env python3
"""Fine-tune the built-in model (all-MiniLM-L6-v2) for code search with LoRA.

Contrastive (multiple negatives ranking) on the pairs `mine.py` makes: each
question must rank its own code above the other codes of its batch, and each
batch holds pairs of one repository (the negatives share its language and
vocabulary). Only low-rank deltas of the encoder's dense layers are trained,
so the result ships as a small file over the base weights ken already
fetches and verifies.

    train.py --base DIR --pairs pairs.jsonl --out DIR [--steps N]

writes DIR/adapter.safetensors (the LoRA matrices, what ken ships) and
DIR/merged/ (config.json, tokenizer.json, model.safetensors: the base with
the deltas added, a folder `KEN_MODEL_DIR` can load to evaluate).
"""
import argparse
import json
import random
import shutil
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModel, AutoTokenizer

TARGETS = ["query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"]


def embed(model, tok, texts, max_len):
    batch = tok(texts, padding=True, truncation=True, max_length=max_len, return_tensors="pt")
    out = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (out * mask).sum(1) / mask.sum(1)
    return F.normalize(pooled, dim=-1)


def batches(pairs, size, rng):
    by_repo = {}
    for p in pairs:
        by_repo.setdefault(p["repo"], []).append(p)
    out = []
    for group in by_repo.values():
        rng.shuffle(group)
        out += [group[i : i + size] for i in range(0, len(group) - size + 1, size)]
    rng.shuffle(out)
    return out


@torch.no_grad()
def held_out_mrr(model, tok, pairs, args):
    model.eval()
    by_repo = {}
    for p in pairs:
        by_repo.setdefault(p["repo"], []).append(p)
    total, n = 0.0, 0
    for group in by_repo.values():
        q = torch.cat([embed(model, tok, [p["question"] for p in group[i : i + 64]], args.question_tokens) for i in range(0, len(group), 64)])
        c = torch.cat([embed(model, tok, [p["code"] for p in group[i : i + 64]], args.code_tokens) for i in range(0, len(group), 64)])
        sims = q @ c.T
        ranks = (sims > sims.diag().unsqueeze(1)).sum(1) + 1
        total += (1.0 / ranks.float()).sum().item()
        n += len(group)
    model.train()
    return total / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--pairs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=0, help="0: one pass over the pairs")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--scale", type=float, default=20.0)
    ap.add_argument("--code-tokens", type=int, default=256)
    ap.add_argument("--question-tokens", type=int, default=64)
    ap.add_argument("--held-out", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--bf16", action="store_true", help="bfloat16 autocast for the passes (CPUs with AVX-512 BF16)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    pairs = [json.loads(l) for l in open(args.pairs)]
    rng.shuffle(pairs)
    cut = int(len(pairs) * args.held_out)
    held, train = pairs[:cut], pairs[cut:]
    tok = AutoTokenizer.from_pretrained(args.base)
    base = AutoModel.from_pretrained(args.base)
    config = LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.05, target_modules=TARGETS)
    model = get_peft_model(base, config)
    model.print_trainable_parameters()
    print(f"held-out MRR before: {held_out_mrr(model, tok, held, args):.4f} ({len(held)} pairs)", flush=True)
    plan = batches(train, args.batch, rng)
    steps = args.steps or len(plan)
    plan = (plan * (steps // len(plan) + 1))[:steps]
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.01)
    warmup = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup) * max(0.0, (steps - s) / steps))
    model.train()
    start = time.time()
    for step, batch in enumerate(plan):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            q = embed(model, tok, [p["question"] for p in batch], args.question_tokens)
            c = embed(model, tok, [p["code"] for p in batch], args.code_tokens)
        sims = q.float() @ c.float().T * args.scale
        labels = torch.arange(len(batch))
        loss = (F.cross_entropy(sims, labels) + F.cross_entropy(sims.T, labels)) / 2
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
        if step % 20 == 0 or step == steps - 1:
            print(f"step {step + 1}/{steps} loss {loss.item():.3f} {time.time() - start:.0f}s", flush=True)
    print(f"held-out MRR after: {held_out_mrr(model, tok, held, args):.4f}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lora = {k: v.detach().contiguous() for k, v in model.state_dict().items() if "lora_" in k}
    save_file(lora, str(out / "adapter.safetensors"), metadata={"rank": str(args.rank), "alpha": str(2 * args.rank)})
    merged = model.merge_and_unload()
    (out / "merged").mkdir(exist_ok=True)
    state = {k: v.contiguous() for k, v in merged.state_dict().items()}
    save_file(state, str(out / "merged" / "model.safetensors"), metadata={"format": "pt"})
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(Path(args.base) / name, out / "merged" / name)
    json.dump(vars(args), open(out / "train-args.json", "w"), indent=1)


if __name__ == "__main__":
    main()
