"""`specdecode bench`: Spec-Bench prompts, our methods and transformers `generate()` on the same
weights, interleaved prompt by prompt, timed with repeats (median), one table per task group.

Spec-Bench (Xia et al. 2024) reports six task groups; MT-bench's eight categories form the
"multi-turn conversation" group. This first benchmark uses the first turn of each question.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import torch

from ..errors import InvalidParameterError, SpecDecodeError
from ..models import LoadedModel, load_model
from ..pipeline import SpecDecoder

GROUPS = {
    "multi-turn conversation": {"writing", "roleplay", "reasoning", "math", "coding", "extraction",
                                "stem", "humanities"},
    "translation": {"translation"},
    "summarization": {"summarization"},
    "question answering": {"qa"},
    "mathematical reasoning": {"math_reasoning"},
    "retrieval-augmented generation": {"rag"},
}
SHORT = {"multi-turn conversation": "mt-bench", "translation": "trans", "summarization": "sum",
         "question answering": "qa", "mathematical reasoning": "math",
         "retrieval-augmented generation": "rag"}
PEERS = ("hf", "hf-lookup")


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


def calibration_prompts(count_per_group: int = 1) -> list[str]:
    """Prompts for tuning, disjoint from the benchmark's selection: the *last* questions of the
    translation, summarization and math groups."""
    by_group: dict[str, list[dict]] = {}
    for q in load_questions():
        by_group.setdefault(group_of(q), []).append(q)
    groups = ("translation", "summarization", "mathematical reasoning")
    return [q["turns"][0] for g in groups for q in by_group[g][-count_per_group:]]


@dataclass
class Record:
    question_id: int
    group: str
    method: str
    repeat: int
    new_tokens: int
    seconds: float
    target_forwards: int | None
    confirmed_tokens: int | None  # new tokens + a final EOS: the numerator of τ
    drafted: int | None
    accepted: int | None
    token_ids: list[int]


def _hf_generate(model: LoadedModel, ids: list[int], max_new: int, lookup: int | None):
    """transformers generate() on the same weights; returns (new token ids without EOS, seconds)."""
    input_ids = torch.tensor([ids])
    kwargs = dict(max_new_tokens=max_new, do_sample=False, attention_mask=torch.ones_like(input_ids),
                  eos_token_id=sorted(model.eos_token_ids),
                  pad_token_id=model.tokenizer.pad_token_id or sorted(model.eos_token_ids)[0])
    if lookup:
        kwargs["prompt_lookup_num_tokens"] = lookup
    started = time.perf_counter()
    with torch.inference_mode():
        out = model.hf_model.generate(input_ids, **kwargs)[0, len(ids):].tolist()
    seconds = time.perf_counter() - started
    while out and out[-1] in model.eos_token_ids:
        out.pop()
    return out, seconds


def _machine() -> dict:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        commit = ""
    return {"cpu": cpu, "threads": torch.get_num_threads(), "torch": torch.__version__,
            "commit": commit or "unknown", "date": time.strftime("%Y-%m-%d %H:%M")}


def run_bench(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ..commands import drafter_options

    if args.limit < 1 or args.repeats < 1 or args.max_new_tokens < 1:
        raise InvalidParameterError("--limit, --repeats and --max-new-tokens must be >= 1")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if "draft" in methods and not args.draft_model:
        methods.remove("draft")  # needs a second model; run it when one is given
    if "ar" not in methods:
        methods.insert(0, "ar")  # every speed-up is relative to our plain decoding
    options = drafter_options(args)
    model = load_model(args.model, backend=args.backend, dtype=args.dtype)
    decoders = {m: SpecDecoder(model, m, options, args.k, args.adaptive, args.k_max)
                for m in methods if m not in PEERS}
    questions = select(load_questions(args.questions), args.limit)
    prompts = {q["question_id"]: model.encode_prompt(q["turns"][0]) for q in questions}

    def run(method: str, ids: list[int], max_new: int) -> tuple[list[int], float, object]:
        if method in PEERS:
            lookup = args.hf_lookup_tokens if method == "hf-lookup" else None
            out, seconds = _hf_generate(model, ids, max_new, lookup)
            return out, seconds, None
        result = decoders[method].generate(ids, max_new_tokens=max_new)
        return result.token_ids, result.stats.wall_seconds, result.stats

    warm = prompts[questions[0]["question_id"]]
    for m in methods:  # one-time allocations are not part of any measurement
        run(m, warm, 4)
    records: list[Record] = []
    bar = tqdm(total=len(questions) * args.repeats * len(methods), desc="bench", unit="run")
    try:
        for q in questions:
            ids = prompts[q["question_id"]]
            for r in range(args.repeats):
                for m in methods:  # interleaved: drifts in machine speed hit every method alike
                    out, seconds, stats = run(m, ids, args.max_new_tokens)
                    records.append(Record(
                        q["question_id"], group_of(q), m, r, len(out), seconds,
                        stats.target_forwards if stats else None,
                        stats.confirmed_tokens if stats else None,
                        stats.drafted if stats else None, stats.accepted if stats else None, out))
                    bar.update()
    except KeyboardInterrupt:
        print("\ninterrupted: reporting what was measured")
    finally:
        bar.close()
    info = {"model": model.name, "backend": model.backend, "dtype": args.dtype,
            "limit": args.limit, "repeats": args.repeats, "max_new_tokens": args.max_new_tokens,
            "methods": {m: (d.describe() if (d := decoders.get(m)) else _peer_label(m, args))
                        for m in methods},
            "machine": _machine()}
    summary = summarize(records)
    report = format_report(summary, info)
    print(report)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(
        {"info": info, "summary": summary, "records": [asdict(r) for r in records]}, indent=1))
    (out / "bench.md").write_text(report + "\n")
    print(f"wrote {out / 'bench.json'} and {out / 'bench.md'}")
    return 0


def _peer_label(method: str, args) -> str:
    if method == "hf-lookup":
        return f"transformers generate(prompt_lookup_num_tokens={args.hf_lookup_tokens})"
    return "transformers generate()"


def summarize(records: list[Record]) -> dict:
    """Per group and overall, per method: tokens/s (total tokens / total median seconds, as
    Spec-Bench computes it), τ, acceptance rate, speed-ups vs our `ar` and vs transformers plain,
    and greedy mismatches against `ar` (prompts whose tokens differ)."""
    runs: dict[tuple[int, str], list[Record]] = {}
    for r in records:
        runs.setdefault((r.question_id, r.method), []).append(r)
    complete = {qid for (qid, m) in runs if all((qid, m2) in runs for (_, m2) in runs)}
    rows: dict[str, dict[str, dict]] = {}
    for (qid, method), reps in runs.items():
        if qid not in complete:
            continue  # an interrupted prompt is not compared
        first = reps[0]
        seconds = statistics.median(r.seconds for r in reps)
        for group in (first.group, "overall"):
            acc = rows.setdefault(group, {}).setdefault(method, dict(
                tokens=0, seconds=0.0, forwards=0, confirmed=0, drafted=0, accepted=0, prompts=0,
                mismatches=0))
            acc["tokens"] += first.new_tokens
            acc["seconds"] += seconds
            acc["prompts"] += 1
            acc["forwards"] += first.target_forwards or 0
            acc["confirmed"] += first.confirmed_tokens or 0
            acc["drafted"] += first.drafted or 0
            acc["accepted"] += first.accepted or 0
            acc["mismatches"] += int(first.token_ids != runs[(qid, "ar")][0].token_ids)
    for group, methods in rows.items():
        for m, acc in methods.items():
            acc["tokens_per_second"] = acc["tokens"] / acc["seconds"] if acc["seconds"] else 0.0
            acc["tau"] = acc["confirmed"] / acc["forwards"] if acc["forwards"] else None
            acc["acceptance_rate"] = acc["accepted"] / acc["drafted"] if acc["drafted"] else None
        for m, acc in methods.items():
            for base in ("ar", "hf"):
                if base in methods and methods[base]["tokens_per_second"]:
                    acc[f"speedup_vs_{base}"] = (acc["tokens_per_second"]
                                                 / methods[base]["tokens_per_second"])
    return rows


def format_report(summary: dict, info: dict) -> str:
    m = info["machine"]
    lines = [f"# specdecode bench — {info['model']} ({info['backend']}, {info['dtype']}), "
             f"greedy, {info['max_new_tokens']} new tokens, first {info['limit']} prompts per "
             f"group, median of {info['repeats']}",
             f"machine: {m['cpu']}, {m['threads']} threads, torch {m['torch']}; commit "
             f"{m['commit']}; {m['date']}", ""]
    lines += [f"- `{name}`: {label}" for name, label in info["methods"].items()]
    groups = [g for g in list(GROUPS) + ["overall"] if g in summary]
    for g in groups:
        lines += ["", f"## {g}", "",
                  "| method | tok/s | × our ar | × hf plain | τ | acceptance | mismatches |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for name, acc in summary[g].items():
            fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
            lines.append(
                f"| {name} | {acc['tokens_per_second']:.1f} | {fmt(acc.get('speedup_vs_ar'), '.2f')}"
                f" | {fmt(acc.get('speedup_vs_hf'), '.2f')} | {fmt(acc['tau'], '.2f')} | "
                f"{fmt(acc['acceptance_rate'], '.0%')} | {acc['mismatches']}/{acc['prompts']} |")
    overall = summary.get("overall", {})
    mism = sum(a["mismatches"] for n, a in overall.items() if n not in PEERS)
    lines += ["", f"greedy equality audit (our methods vs our ar): {mism} prompt(s) differ"]
    return "\n".join(lines)
