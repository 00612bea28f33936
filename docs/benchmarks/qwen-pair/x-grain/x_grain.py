"""What rounding x per 256 values (llama.cpp's Q8_K, the grain that lets the K formats' block
scales apply in integers) instead of per 32 (ours) would cost in accuracy, before building it.

The 1.5B runs on the `torch` path (its matrices dequantized, fp32 arithmetic) with each linear
layer's input rounded to 8 bits as the C kernels round it: per 32 values for every matrix, or per
256 for the K-format matrices (Q4_K, Q5_K, Q6_K; the others keep 32), or not at all (the fp32
reference). Continuations come from our C kernels' greedy decoding (a first run on the best
path writes them); each variant is then teacher-forced over prompt + continuation in one forward,
and compared with the unrounded one: top-1 agreement and the mean KL divergence of the next-token
distributions.

usage: python x_grain.py QUESTIONS.jsonl CONTINUATIONS.json [NEW_TOKENS] [LIMIT]   (writes them)
       SPECDECODE_ISA=torch python x_grain.py QUESTIONS.jsonl CONTINUATIONS.json   (compares)
"""
import json
import os
import sys
import time

import torch

from specdecode.core.target import forward
from specdecode.kernels.torch_path import TorchKernels
from specdecode.models import load_model
from specdecode.quant import QuantTensor

K_FORMATS = {"Q4_K", "Q5_K", "Q6_K"}
grain_of: dict[int, str] = {}  # id(packed weight) -> qtype
mode = {"grain": None}  # None: fp32 x; 32; 256 or "256/2^e" (K formats only)
GRAINS = (32, 256, "256/2^e")


def rounded(x: torch.Tensor, grain) -> torch.Tensor:
    """x as the kernels round it: per `grain` values, d = max|x| / 127, q = x / d to nearest
    (ties to even), x ~ d q. grain "256/2^e": a scale d per 256 values, each block of 32 taking
    d / 2^e with e the largest in 0..4 that keeps its q within 127 (so its integer sums can be
    brought to the super-block's scale by a shift)."""
    T, I = x.shape
    size = 256 if grain == "256/2^e" else grain
    b = x.reshape(T, I // size, size)
    amax = b.abs().amax(-1, keepdim=True)
    d = amax / 127
    if grain == "256/2^e":  # [T, supers, 8, 32]: each block's own power-of-two refinement
        blocks = b.reshape(T, I // size, 8, 32)
        ratio = d.unsqueeze(-1) / (blocks.abs().amax(-1, keepdim=True) / 127).clamp_min(1e-30)
        e = torch.floor(torch.log2(ratio.clamp_min(1))).clamp(0, 4)
        dj = d.unsqueeze(-1) / 2 ** e
        q = torch.round(blocks / torch.where(dj > 0, dj, torch.ones_like(dj)))
        return (q * dj).reshape(T, I)
    return (torch.round(b / torch.where(d > 0, d, torch.ones_like(d))) * d).reshape(T, I)


pack, linear = TorchKernels.pack, TorchKernels.linear


def packing(self, w):
    packed = pack(self, w)
    if isinstance(w, QuantTensor):
        grain_of[id(packed)] = w.qtype
    return packed


def rounding_linear(self, x, w, out_features):
    g = mode["grain"]
    if g is not None and id(w) in grain_of:
        x = rounded(x, g if grain_of[id(w)] in K_FORMATS else 32)
    return linear(self, x, w, out_features)


def continue_greedily(questions: list[dict], new: int, out: str) -> None:
    from specdecode.pipeline import SpecDecoder

    model = load_model("qwen2.5-coder-1.5b")
    plain = SpecDecoder(model, "ar")
    runs = []
    for q in questions:
        prompt = model.encode_prompt(q["turns"][0])
        runs.append({"id": q["question_id"], "prompt": prompt,
                     "continuation": plain.generate(prompt, max_new_tokens=new).token_ids})
    json.dump(runs, open(out, "w"))


def compare(runs: list[dict]) -> None:
    TorchKernels.pack, TorchKernels.linear = packing, rounding_linear
    model = load_model("qwen2.5-coder-1.5b")  # torch path: block formats dequantized at pack
    target = model.target
    totals = {g: [0, 0, 0.0] for g in GRAINS}
    for run in runs:
        prompt, continuation = run["prompt"], run["continuation"]
        start = time.time()
        ids = torch.tensor(prompt + continuation)
        span = slice(len(prompt) - 1, len(prompt) - 1 + len(continuation))
        logits = {}
        for g in (None, *GRAINS):
            mode["grain"] = g
            logits[g] = torch.log_softmax(forward(target, target.new_cache(), ids)[span].float(), -1)
        reference = logits[None]
        line = [f"{run['id']} ({len(prompt)}+{len(continuation)} tokens)"]
        for g in GRAINS:
            same = int((logits[g].argmax(-1) == reference.argmax(-1)).sum())
            kl = float((reference.exp() * (reference - logits[g])).sum(-1).sum())
            totals[g][0] += same
            totals[g][1] += len(continuation)
            totals[g][2] += kl
            line.append(f"x per {g}: top-1 {same}/{len(continuation)}, "
                        f"mean KL {kl / len(continuation):.2e}")
        print("; ".join(line) + f" ({time.time() - start:.0f} s)", flush=True)
    for g, (same, n, kl) in totals.items():
        print(f"all, x per {g}: top-1 agreement with fp32 x {same}/{n} = {100 * same / n:.2f}%, "
              f"mean KL {kl / n:.3e}")


def main() -> None:
    questions = [json.loads(line) for line in open(sys.argv[1])]
    out = sys.argv[2]
    if os.environ.get("SPECDECODE_ISA") == "torch":
        compare(json.load(open(out)))
        return
    new = int(sys.argv[3]) if len(sys.argv) > 3 else 128
    continue_greedily(questions[: int(sys.argv[4])] if len(sys.argv) > 4 else questions, new, out)


if __name__ == "__main__":
    main()
