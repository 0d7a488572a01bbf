#!/usr/bin/env python3
"""Turn `train.py`'s LoRA matrices into the delta ken ships.

    pack.py RUN_DIR OUT.safetensors

Keys become the base weight's name with `.lora_a` / `.lora_b` for `.weight`
(peft's `base_model.model.X.lora_A.default.weight` is `X.lora_a`), values f16 (half
the size; the merge sums in f32), and the metadata holds `scale` (alpha /
rank), as src/embed/lora.rs reads them.
"""
import json
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file

run, out = Path(sys.argv[1]), sys.argv[2]
args = json.load(open(run / "train-args.json"))
lora = load_file(str(run / "adapter.safetensors"))
packed = {}
for name, tensor in lora.items():
    module = name.removeprefix("base_model.model.")
    for theirs, ours in ((".lora_A.default.weight", ".lora_a"), (".lora_B.default.weight", ".lora_b")):
        if module.endswith(theirs):
            packed[module[: -len(theirs)] + ours] = tensor.half().contiguous()
scale = 2 * args["rank"] / args["rank"]
save_file(packed, out, metadata={"scale": repr(float(scale)), "rank": str(args["rank"])})
print(f"{len(packed) // 2} weights, rank {args['rank']}, scale {scale}: {Path(out).stat().st_size} bytes")
