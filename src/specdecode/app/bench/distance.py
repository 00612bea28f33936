"""`specdecode bench --distance`: how far a GGUF model's quantized arithmetic moves greedy tokens
from the fp32 reference, for our kernels and for llama.cpp on the same file. The reference is
transformers' own reading of the file (its GGUF loader, dequantized, computed in fp32): code
independent of ours, so a file our loader misreads (a layout rule, a scaling it does not apply)
shows as low agreement rather than agreeing with itself.

Two measures on the first turn of Spec-Bench prompts:
- teacher-forced top-1 agreement: along the reference's own greedy continuation, the share of
  positions where the path's most likely next token is the reference's token (one token's
  rounding does not carry into the next);
- greedy agreement: the share of continuations identical to the reference's, and the mean share
  of each continuation before its first differing token.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass, field

import torch

from ...core.target import forward
from ...models import LoadedModel, load_model
from ...models.loader import gguf_file
from ...pipeline import SpecDecoder
from .llamacpp import LlamaCppPeer, installed
from .specbench import load_questions, select


@dataclass
class Agreement:
    forced_same: int = 0  # teacher-forced positions whose top-1 is the reference's token
    forced: int = 0
    identical: int = 0  # continuations equal to the reference's
    prefix_shares: list[float] = field(default_factory=list)  # per continuation

    def add(self, reference: list[int], predicted: list[int], greedy: list[int]) -> None:
        self.forced += len(reference)
        self.forced_same += sum(p == r for p, r in zip(predicted, reference))
        self.identical += greedy == reference
        prefix = next((i for i, (g, r) in enumerate(zip(greedy, reference)) if g != r),
                      min(len(greedy), len(reference)))
        self.prefix_shares.append(prefix / max(1, len(reference)))

    def row(self, name: str) -> str:
        return (f"| {name} | {self.forced_same / max(1, self.forced):.2%} | "
                f"{self.identical}/{len(self.prefix_shares)} | "
                f"{statistics.mean(self.prefix_shares or [0]):.0%} |")


def _top1_along(model: LoadedModel, prompt: list[int], continuation: list[int]) -> list[int]:
    """Our model's most likely token after each prefix prompt + continuation[:i]."""
    target = model.target
    logits = forward(target, target.new_cache(), torch.tensor(prompt + continuation))
    return logits[len(prompt) - 1 : len(prompt) - 1 + len(continuation)].argmax(-1).tolist()


def distance_report(args: argparse.Namespace, model: LoadedModel) -> str:
    """The table of both measures for our path (`model`) and llama.cpp, against fp32."""
    path = gguf_file(args.model)
    if path is None:
        raise SystemExit("specdecode: error: --distance needs a GGUF model")
    reference = load_model(args.model, backend="transformers")
    questions = select(load_questions(args.questions), args.limit)
    plain_ref, plain_ours = SpecDecoder(reference, "ar"), SpecDecoder(model, "ar")
    peer = forcing = None
    if installed():  # the benchmark's plain peer for greedy output; logits at every position
        from llama_cpp import Llama

        peer = LlamaCppPeer(path, torch.get_num_threads(), reference.target.max_length)
        forcing = Llama(model_path=str(path), n_ctx=min(reference.target.max_length, 4096),
                        n_threads=torch.get_num_threads(), logits_all=True, verbose=False)
    from tqdm import tqdm

    ours, llama = Agreement(), Agreement()
    for q in tqdm(questions, desc="distance", unit="prompt"):
        prompt = reference.encode_prompt(q["turns"][0])
        expected = plain_ref.generate(prompt, max_new_tokens=args.max_new_tokens).token_ids
        ours.add(expected, _top1_along(model, prompt, expected),
                 plain_ours.generate(prompt, max_new_tokens=args.max_new_tokens).token_ids)
        if peer is not None:
            forcing.reset()
            forcing.eval(prompt + expected)
            scores = forcing.scores[len(prompt) - 1 : len(prompt) - 1 + len(expected)]
            greedy, _ = peer.generate(prompt, args.max_new_tokens, 0.0, 0, model.eos_token_ids)
            llama.add(expected, scores.argmax(-1).tolist(), greedy)
    lines = [f"distance from the fp32 reference (transformers' reading of {args.model}, "
             f"dequantized, fp32 arithmetic): "
             f"{len(questions)} Spec-Bench prompts (first turns), {args.max_new_tokens} new tokens",
             "", "| path | teacher-forced top-1 agreement | identical greedy outputs | "
             "mean share before the first difference |", "|---|---:|---:|---:|",
             ours.row(f"specdecode {model.weights}, {model.kernels}")]
    lines.append(llama.row("llama.cpp on the same file") if peer is not None
                 else "llama.cpp: not installed (pip install 'specdecode[peers]')")
    return "\n".join(lines)
