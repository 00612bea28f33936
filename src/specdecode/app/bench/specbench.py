"""Spec-Bench's questions (Xia et al. 2024; the file ships with the package, see
`data/SPECBENCH_LICENSE.md`): six task groups, MT-bench's eight categories (two turns each) forming
"multi-turn conversation"."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from ...errors import SpecDecodeError

GROUPS = {
    "multi-turn conversation": {"writing", "roleplay", "reasoning", "math", "coding", "extraction",
                                "stem", "humanities"},
    "translation": {"translation"},
    "summarization": {"summarization"},
    "question answering": {"qa"},
    "mathematical reasoning": {"math_reasoning"},
    "retrieval-augmented generation": {"rag"},
    "code generation": {"code"},  # not in Spec-Bench: HumanEval-style prompts of --questions files
    # not in Spec-Bench: prompts of --questions files whose answer follows their "json_schema"
    "structured output": {"structured"},
    "fill-in-the-middle": {"fim"},  # not in Spec-Bench: `bench --fim`, code with a middle cut
}
SHORT = {"multi-turn conversation": "mt-bench", "translation": "trans", "summarization": "sum",
         "question answering": "qa", "mathematical reasoning": "math",
         "retrieval-augmented generation": "rag", "code generation": "code",
         "structured output": "json", "fill-in-the-middle": "fim"}
# transformers generate() (plain, prompt lookup, draft model) on the same weights, and llama.cpp
# (plain, prompt lookup) on the model's GGUF file
LLAMA_CPP_PEERS = ("llamacpp", "llamacpp-lookup")  # through llama-cpp-python
LLAMA_CPP_PROGRAMS = ("llamacpp-bin", "llamacpp-bin-draft", "llamacpp-bin-ngram")  # its programs
PEERS = ("hf", "hf-lookup", "hf-assisted", *LLAMA_CPP_PEERS, *LLAMA_CPP_PROGRAMS)
# quantized arithmetic: their greedy output is not the fp32 target's
UNAUDITED = (*LLAMA_CPP_PEERS, *LLAMA_CPP_PROGRAMS)


def load_questions(path: str | Path | None = None) -> list[dict]:
    """Spec-Bench questions (the shipped copy unless a path is given)."""
    if path is None:
        text = (resources.files("specdecode") / "data" / "specbench_question.jsonl").read_text()
    else:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise SpecDecodeError(f"cannot read questions file {path}: {exc.strerror}")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def turns_of(question: dict) -> list[str]:
    """The user turns to run: both of MT-bench's, the first of every other question."""
    turns = question["turns"]
    return turns[:2] if group_of(question) == "multi-turn conversation" else turns[:1]


def group_of(question: dict) -> str:
    for group, categories in GROUPS.items():
        if question["category"] in categories:
            return group
    raise SpecDecodeError(f"question {question.get('question_id')} has unknown category "
                          f"{question['category']!r}")


def select(questions: list[dict], limit: int) -> list[dict]:
    """The first `limit` questions of each task group, in file order."""
    taken: dict[str, int] = {}
    chosen = []
    for q in questions:
        g = group_of(q)
        if taken.get(g, 0) < limit:
            taken[g] = taken.get(g, 0) + 1
            chosen.append(q)
    return chosen


def calibration_prompts(count_per_group: int = 1,
                        groups: tuple[str, ...] = ("translation", "summarization",
                                                   "mathematical reasoning")) -> list[str]:
    """Prompts for tuning, disjoint from the benchmark's selection (which takes the first
    questions): the first turn of the *last* questions of the given groups."""
    by_group: dict[str, list[dict]] = {}
    for q in load_questions():
        by_group.setdefault(group_of(q), []).append(q)
    return [q["turns"][0] for g in groups for q in by_group[g][-count_per_group:]]
