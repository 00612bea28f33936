"""Self-distillation data: which prompts, and the target's own greedy answers to them.

A training sequence is x_0..x_{L-1} = chat-templated prompt ids + the target's greedy answer (its
first EOS included, so a head learns to draft the end as well). Answers are cached as JSONL, one
line per finished prompt, so an interrupted run resumes without regenerating them.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Callable, Iterator, Sequence

import torch

from ...errors import InvalidParameterError, SpecDecodeError

ANSWERS_FILE = "answers.jsonl"

# Answers come from transformers' batched greedy generate: larger batches make more answer tokens
# a second than our one-request engine (docs/benchmarks/defaults); 64 rows of up to 640 tokens
# keep the KV cache of a batch within a few GB.
GENERATION_BATCH = 64
# A few instructions run to ~750 tokens; a padded batch would pay for them in every row.
MAX_PROMPT_TOKENS = 512

AnswerFn = Callable[[list[list[int]]], list[list[int]]]  # prompts' ids -> their answers' ids


def shipped_prompts() -> Path:
    """The training prompts shipped with the package (11,949 instructions: GSM8K train, Dolly
    open QA, self-instruct, Open-Assistant; none from Spec-Bench; licences in
    data/TRAIN_PROMPTS_LICENSE.md)."""
    return Path(str(resources.files("specdecode") / "data" / "train_prompts.jsonl"))


@dataclass(frozen=True)
class Sample:
    id: str
    split: str  # "train" or "val"
    source: str
    prompt_ids: list[int]
    answer_ids: list[int]

    @property
    def tokens(self) -> list[int]:
        return self.prompt_ids + self.answer_ids


def read_prompts(path: str | Path) -> list[dict]:
    """The records of a prompts JSONL file (fields id, prompt, source, ...); a one-line error for
    a missing or malformed file."""
    try:
        # split on newlines only: str.splitlines also splits at U+2028 and others inside strings
        lines = Path(path).read_text(encoding="utf-8").split("\n")
    except OSError as exc:
        raise SpecDecodeError(f"cannot read prompts file {path}: {exc.strerror}")
    records, seen = [], set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise SpecDecodeError(f"{path}:{number} is not valid JSON")
        if not isinstance(record, dict) or not isinstance(record.get("prompt"), str) \
                or "id" not in record:
            raise SpecDecodeError(f"{path}:{number} needs the fields 'id' and 'prompt'")
        if str(record["id"]) in seen:
            raise SpecDecodeError(f"{path}:{number} repeats the id {record['id']!r}")
        seen.add(str(record["id"]))
        records.append(record)
    if not records:
        raise SpecDecodeError(f"{path} holds no prompts")
    return records


def balanced_order(records: Sequence[dict], seed: int) -> list[dict]:
    """All records, interleaved round-robin over their `source` (each source shuffled with a
    seeded RNG), so any prefix is balanced across sources and not dominated by the largest
    (GSM8K is 63% of the shipped file). A larger prefix extends a smaller one."""
    rng = random.Random(seed)
    by_source: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        by_source[str(record.get("source", ""))].append(record)
    queues = []
    for source in sorted(by_source):
        queue = list(by_source[source])
        rng.shuffle(queue)
        queues.append(queue)
    order = []
    for i in range(max(len(q) for q in queues)):
        order.extend(q[i] for q in queues if i < len(q))
    return order


def select_prompts(records: Sequence[dict], encode: Callable[[str], list[int]], num_train: int,
                   num_val: int, max_prompt_tokens: int, seed: int
                   ) -> list[tuple[dict, str, list[int]]]:
    """-> [(record, split, prompt ids)]: the first `num_val` usable prompts of the balanced order
    are held out for validation, the next `num_train` are for training. Prompts longer than
    `max_prompt_tokens` are skipped (they would not leave room for the answer)."""
    chosen = []
    for record in balanced_order(records, seed):
        if len(chosen) == num_val + num_train:
            break
        ids = encode(record["prompt"])
        if 0 < len(ids) <= max_prompt_tokens:
            chosen.append((record, "val" if len(chosen) < num_val else "train", ids))
    if len(chosen) < num_val + num_train:
        raise InvalidParameterError(
            f"only {len(chosen)} prompts of at most {max_prompt_tokens} tokens are available; "
            f"asked for {num_train} training + {num_val} validation prompts")
    return chosen


def read_answers(path: Path) -> dict[str, Sample]:
    """The cached answers by prompt id. A last line cut short by an interruption is ignored."""
    samples: dict[str, Sample] = {}
    if not path.is_file():
        return samples
    for line in path.read_text(encoding="utf-8").split("\n"):
        try:
            sample = Sample(**json.loads(line))
        except (json.JSONDecodeError, TypeError):
            continue
        samples[sample.id] = sample
    return samples


def generate_answers(chosen: Sequence[tuple[dict, str, list[int]]], answer: AnswerFn, path: Path,
                     batch_size: int = GENERATION_BATCH, progress: bool = True) -> list[Sample]:
    """The samples of `chosen` (in its order), generating the answers not yet cached in `path`.

    Pending prompts run in batches of similar length (less padding); each finished answer is
    appended to `path` as one line at once."""
    from tqdm import tqdm

    cached = read_answers(path)
    todo = sorted((c for c in chosen if str(c[0]["id"]) not in cached), key=lambda c: len(c[2]))
    if todo and path.is_file() and not path.read_bytes().endswith(b"\n"):
        with path.open("a", encoding="utf-8") as f:  # end a line cut short, keep later ones whole
            f.write("\n")
    bar = tqdm(total=len(chosen), initial=len(chosen) - len(todo), desc="answers", unit="prompt",
               disable=not progress)
    with bar, path.open("a", encoding="utf-8") as f:
        for batch in _chunks(todo, batch_size):
            answers = answer([ids for _, _, ids in batch])
            for (record, split, ids), answer_ids in zip(batch, answers):
                sample = Sample(str(record["id"]), split, str(record.get("source", "")), ids,
                                answer_ids)
                f.write(json.dumps(asdict(sample)) + "\n")
                cached[sample.id] = sample
            f.flush()
            bar.update(len(batch))
    return [cached[str(record["id"])] for record, _, _ in chosen]


def _chunks(items: Sequence, size: int) -> Iterator[Sequence]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def hf_greedy(model, max_new_tokens: int) -> AnswerFn:
    """Batched greedy answers from transformers' `generate` on the same weights (left padding).

    Each answer is cut after its first EOS (kept). Greedy answers computed this way may differ from
    the native engine's in rare near-ties; either is valid self-distillation data."""
    from transformers import GenerationConfig

    hf, eos = model.hf_model, sorted(model.eos_token_ids)
    pad = model.tokenizer.pad_token_id
    pad = pad if pad is not None else (eos[0] if eos else 0)
    # a complete config: the checkpoint's own generation defaults (sampling, penalties) must not leak in
    config = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                              pad_token_id=pad, eos_token_id=eos or None)

    def answer(prompts: list[list[int]]) -> list[list[int]]:
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        with torch.inference_mode():
            out = hf.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        answers = []
        for row in out[:, width:].tolist():
            end = next((i + 1 for i, t in enumerate(row) if t in model.eos_token_ids), len(row))
            answers.append(row[:end])
        return answers

    return answer
