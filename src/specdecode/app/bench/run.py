"""`specdecode bench`: Spec-Bench prompts through our methods and the peers (transformers
`generate()` on the same weights: plain, prompt lookup, assisted by a draft model; llama.cpp on the
model's GGUF file when installed), interleaved prompt by prompt, repeated (median), written as
records, a Markdown report, JSON and plots."""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ...drafters import DRAFTERS
from ...errors import InvalidParameterError, SpecDecodeError
from ...models import LoadedModel, load_model
from ...models.loader import gguf_file
from ...models.timing import cpu_name
from ...pipeline import SpecDecoder
from ..options import check_args, drafter_values, load, positive_ints, resolve_args
from . import llamacpp, llamacpp_programs
from .audit import greedy_audit
from .fim import MODULES as FIM_MODULES
from .fim import fim_questions
from .records import Record, RecordStore
from .report import format_report, summarize
from .specbench import (
    LLAMA_CPP_PEERS,
    LLAMA_CPP_PROGRAMS,
    PEERS,
    group_of,
    load_questions,
    select,
    turns_of,
)

DRAFTING_PROGRAMS = ("llamacpp-bin-draft", "llamacpp-bin-ngram")  # --sweep-depth sets their n-max
DRAFT_MODEL_METHODS = {"draft", "hf-assisted", "llamacpp-bin-draft"}  # run --draft-model


def default_methods() -> str:
    """Every registered drafter (plain decoding first) and every peer: what `bench` runs."""
    return ",".join(["ar", *sorted(m for m in DRAFTERS if m != "ar"), *PEERS])


def run_bench(args: argparse.Namespace) -> int:
    """`specdecode bench`: every method (and peer) on every selected prompt, interleaved; the
    records kept in --out as they come, then the report, its JSON and plots."""
    if args.limit < 1 or args.repeats < 1 or args.max_new_tokens < 1 or (args.fim or 1) < 1:
        raise InvalidParameterError("--limit, --repeats, --max-new-tokens and --fim must be >= 1")
    if args.cross_request_memory and args.repeats != 1:
        raise InvalidParameterError("--cross-request-memory needs --repeats 1: a repeat would "
                                    "draft from its own earlier run")
    if args.temperature < 0:
        raise InvalidParameterError(f"--temperature must be >= 0, got {args.temperature}")
    sweep = positive_ints(args.sweep_depth, "--sweep-depth") if args.sweep_depth else []
    methods = [m.strip() for m in (args.methods or default_methods()).split(",") if m.strip()]
    unknown = [m for m in methods if m not in DRAFTERS and m not in PEERS]
    if unknown:
        raise InvalidParameterError(f"unknown method {unknown[0]!r} (choose from "
                                    f"{', '.join(sorted(DRAFTERS) + list(PEERS))})")
    if "ar" not in methods:
        methods.insert(0, "ar")  # every speed-up is relative to our plain decoding
    check_args(args)
    model = load(args)
    if args.fim and model.fim is None:
        raise InvalidParameterError(f"--fim needs a model with fill-in-the-middle tokens; "
                                    f"{model.name} has none")
    contestants = _Contestants.of(args, model, methods, sweep)
    settings = {"model": model.key, "backend": model.backend, "dtype": args.dtype,
                "max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
                "questions": args.questions or "shipped", "max_draft_nodes": args.max_draft_nodes,
                "max_draft_depth": args.max_draft_depth, "adaptive": args.adaptive,
                "options": drafter_values(args), "hf_lookup_tokens": args.hf_lookup_tokens,
                "cross_request_memory": args.cross_request_memory, "fim": args.fim}
    if args.fim:
        settings["python"] = platform.python_version()  # the FIM set is its library's code
    store = RecordStore(Path(args.out), settings, args.resume)
    questions = (fim_questions(args.fim) if args.fim
                 else select(load_questions(args.questions), args.limit))
    peers = [label for label, (m, _) in contestants.labels.items() if m in PEERS]
    if peers and any("json_schema" in q or "prefix" in q for q in questions):
        raise InvalidParameterError(f"questions with a json_schema and fill-in-the-middle run on "
                                    f"our methods only: leave out {', '.join(peers)}")
    runner = _Runner(args, model, store, contestants)
    runner.run_all(questions)
    return _report(args, model, questions, runner)


@dataclass
class _Contestants:
    """What a run compares: each label's (method, depth cap), our decoders and the peers."""

    labels: dict[str, tuple[str, int | None]]
    decoders: dict[str, SpecDecoder]
    llama_cpp_peers: dict[str, llamacpp.LlamaCppPeer]
    program_peers: dict[str, llamacpp_programs.ProgramPeer]
    assistant: Any  # transformers' draft model for hf-assisted

    @classmethod
    def of(cls, args: argparse.Namespace, model: LoadedModel, methods: list[str],
           sweep: list[int]) -> "_Contestants":
        """The methods that can run here (the others left out with a line on stderr why)."""
        drafting = DRAFT_MODEL_METHODS & set(methods)
        if drafting:
            args.draft_model = args.draft_model or model.drafter  # the alias's own drafter
        left_out: dict[str, str] = {}
        if "hf-assisted" in methods and not args.draft_model:
            left_out["hf-assisted"] = "it needs --draft-model"
        assistant = (load_model(args.draft_model).hf_model
                     if "hf-assisted" in methods and args.draft_model else None)
        gguf = gguf_file(args.model)
        if not (llamacpp.installed() and gguf):
            why = ("the model has no GGUF file" if llamacpp.installed()
                   else "llama-cpp-python is not installed: pip install 'specdecode[peers]'")
            left_out.update({m: why for m in methods if m in LLAMA_CPP_PEERS})
        programs_missing = (llamacpp_programs.missing_reason() if gguf
                            else "the model has no GGUF file")
        # looked up only for the peer that reads it (an alias's file may need assembling)
        drafter_gguf = (gguf_file(args.draft_model)
                        if args.draft_model and "llamacpp-bin-draft" in methods else None)
        for m in methods:
            if m in LLAMA_CPP_PROGRAMS and programs_missing:
                left_out[m] = programs_missing
            elif m == "llamacpp-bin-draft" and drafter_gguf is None:
                left_out[m] = "it needs a GGUF --draft-model"
        decoders = _decoders(args, model, methods, left_out, drafting)
        for m, why in left_out.items():
            print(f"bench: leaving out {m} ({why})", file=sys.stderr)
        methods = [m for m in methods if m not in left_out]
        llama_cpp_peers = {m: llamacpp.LlamaCppPeer(
            gguf, torch.get_num_threads(), model.context_length,
            lookup_tokens=args.hf_lookup_tokens if m == "llamacpp-lookup" else None)
            for m in methods if m in LLAMA_CPP_PEERS}
        labels: dict[str, tuple[str, int | None]] = {}  # label -> (method, depth cap)
        for m in methods:
            if m in PEERS and not (sweep and m in DRAFTING_PROGRAMS):
                labels[m] = (m, None)
            elif sweep and m != "ar":
                labels.update({f"{m}@d{d}": (m, d) for d in sweep})
            else:
                labels[m] = (m, decoders[m].budget.depth or None)
        program_peers = {label: llamacpp_programs.ProgramPeer(
            method, gguf, torch.get_num_threads(), drafter_gguf, draft_max=depth)
            for label, (method, depth) in labels.items() if method in LLAMA_CPP_PROGRAMS}
        return cls(labels, decoders, llama_cpp_peers, program_peers, assistant)


def _decoders(args: argparse.Namespace, model: LoadedModel, methods: list[str],
              left_out: dict[str, str], drafting: set[str]) -> dict[str, SpecDecoder]:
    """Our methods' decoders; one whose options cannot run is added to `left_out`, with why.
    --draft-model is the draft model when one runs (`draft`, `hf-assisted`,
    `llamacpp-bin-draft`); learned drafters then take the heads shipped for the model."""
    overrides = {"draft_model": None} if drafting else {}
    if not args.cross_request_memory:
        overrides["memory_tokens"] = 0  # every prompt starts clean
    decoders = {}
    for m in methods:
        if m in PEERS or m in left_out:
            continue
        try:
            spec = resolve_args(args, model, m, **({} if m == "draft" else overrides))
        except SpecDecodeError as exc:
            left_out[m] = str(exc)
            continue
        decoders[m] = SpecDecoder(model, spec)
    return decoders


class _Runner:
    """Runs the jobs, each method by its own means, and records them; keeps the prompts' ids for
    the audit and which peers crashed."""

    def __init__(self, args: argparse.Namespace, model: LoadedModel, store: RecordStore,
                 contestants: _Contestants) -> None:
        self.args, self.model, self.store, self.c = args, model, store, contestants
        self.prompts: dict[tuple[int, int], list[int]] = {}
        self.crashed: dict[str, str] = {}  # label -> how its peer's process died

    def prompt_ids(self, q: dict, turn: int) -> list[int]:
        """Turn 2 continues the conversation with our plain decoding's first answer."""
        key = (q["question_id"], turn)
        if key not in self.prompts:
            turns, model = turns_of(q), self.model
            if "prefix" in q:  # fill-in-the-middle, cut (as llama.cpp cuts) to leave room
                self.prompts[key] = model.encode_fim(q["prefix"], q["suffix"], limit=(
                    model.context_length - self.args.max_new_tokens))[0]
            elif turn == 1:
                self.prompts[key] = model.encode_prompt(turns[0])
            else:
                answer = self.store.get((q["question_id"], 1, "ar", 0))
                self.prompts[key] = model.encode_chat([
                    {"role": "user", "content": turns[0]},
                    {"role": "assistant", "content": model.decode(answer.token_ids)},
                    {"role": "user", "content": turns[1]}])
        return self.prompts[key]

    def run(self, label: str, ids: list[int], max_new: int, repeat: int,
            schema: dict | None = None, fim: bool = False) -> dict:
        """One generation by `label`'s method: a Record's fields (`fim`: it ends where the
        middle does)."""
        args, model, c = self.args, self.model, self.c
        method, depth = c.labels[label]
        if label in c.program_peers:
            done = c.program_peers[label].generate(
                model.tokenizer.decode(ids), len(ids), max_new, args.temperature, repeat)
            return dict(new_tokens=done.new_tokens, seconds=done.seconds,
                        prefill_seconds=done.prefill_seconds, drafted=done.drafted,
                        accepted=done.accepted,
                        token_ids=model.tokenizer(done.text)["input_ids"] if done.text else [])
        if method in c.llama_cpp_peers:
            out_ids, seconds = c.llama_cpp_peers[method].generate(
                ids, max_new, args.temperature, repeat, model.eos_token_ids)
            return dict(new_tokens=len(out_ids), seconds=seconds, token_ids=out_ids)
        if method in PEERS:
            out_ids, seconds = _hf_generate(
                model, ids, max_new, args.temperature, repeat,
                lookup=args.hf_lookup_tokens if method == "hf-lookup" else None,
                assistant=c.assistant if method == "hf-assisted" else None)
            return dict(new_tokens=len(out_ids), seconds=seconds, token_ids=out_ids)
        decoder = c.decoders[method]
        grammar = None if schema is None else decoder.grammars.json_schema(schema)
        result = decoder.generate(ids, max_new_tokens=max_new, max_draft_depth=depth,
                                  temperature=args.temperature, seed=repeat, grammar=grammar,
                                  stop_token_ids=model.fim.ends if fim else frozenset())
        s = result.stats
        return dict(new_tokens=s.new_tokens, seconds=s.wall_seconds,
                    prefill_seconds=s.prefill_seconds, token_ids=result.token_ids,
                    first_token_seconds=s.first_token_seconds,
                    target_forwards=s.target_forwards, confirmed_tokens=s.confirmed_tokens,
                    drafted=s.drafted, accepted=s.accepted, drafted_at=list(s.drafted_at),
                    accepted_at=list(s.accepted_at),
                    **({} if grammar is None else dict(forced=s.forced,
                                                       grammar_seconds=s.constraint_seconds)))

    def measured(self, label: str, *run_args) -> dict | None:
        """`run`, or None once the label's peer has crashed (said once, on stderr)."""
        if label in self.crashed:
            return None
        try:
            return self.run(label, *run_args)
        except llamacpp.PeerCrashed as exc:
            self.crashed[label] = str(exc)
            print(f"\nbench: {label}: {exc}; its rows are left out", file=sys.stderr)
            return None

    def run_all(self, questions: list[dict]) -> None:
        """Every job not yet in the store, interleaved (drifts in speed hit every method alike);
        an interrupt keeps what was measured."""
        from tqdm import tqdm

        args, store, labels = self.args, self.store, self.c.labels
        jobs = [(q, turn, r, label) for q in questions for turn in range(1, len(turns_of(q)) + 1)
                for r in range(args.repeats) for label in labels]
        todo = [j for j in jobs if store.get((j[0]["question_id"], j[1], j[3], j[2])) is None]
        if todo:
            # not a benchmark prompt: a memory of earlier outputs must not have seen any of them
            warm = self.model.encode_prompt("Say hello.")
            for label in labels:  # one-time allocations are not part of any measurement
                self.measured(label, warm, 4, 0)
        bar = tqdm(total=len(jobs), initial=len(jobs) - len(todo), desc="bench", unit="run")
        try:
            for q, turn, repeat, label in todo:
                result = self.measured(label, self.prompt_ids(q, turn), args.max_new_tokens,
                                       repeat, q.get("json_schema"), "prefix" in q)
                if result is not None:
                    store.add(Record(q["question_id"], turn, group_of(q), label, repeat,
                                     **result))
                bar.update()
        except KeyboardInterrupt:
            print(f"\ninterrupted: reporting what was measured; `--resume --out {args.out}` "
                  "continues")
        finally:
            bar.close()


def _report(args: argparse.Namespace, model: LoadedModel, questions: list[dict],
            runner: _Runner) -> int:
    """The report on stdout and in --out (bench.md, bench.json, plots)."""
    store, c, out = runner.store, runner.c, Path(args.out)
    for q in questions:  # the audit needs every prompt, also those measured before a resume
        for turn in range(1, len(turns_of(q)) + 1):
            if store.get((q["question_id"], 1, "ar", 0)) is not None:
                runner.prompt_ids(q, turn)
    records = [r for r in store.all() if r.method not in runner.crashed]
    crashed = runner.crashed
    info = {"model": model.name, "backend": model.backend, "dtype": model.weights,
            "temperature": args.temperature, "limit": args.limit, "repeats": args.repeats,
            "fim": args.fim and {"prompts": len(questions), "python": platform.python_version(),
                                 "modules": len(FIM_MODULES)},
            "max_new_tokens": args.max_new_tokens,
            "methods": {label: _describe(label, c.labels, c.decoders, c.program_peers, args)
                        + (f" — {crashed[label]}, its rows left out" if label in crashed else "")
                        for label in c.labels},
            "machine": {**machine_info(), "kernels": model.kernels}}
    cost = next((d.cost for d in c.decoders.values() if d.cost), None)
    if cost:  # the curve every draft budget in this run was chosen from
        info["step_cost"] = asdict(cost)
    summary = {group: {label: by_label[label] for label in c.labels if label in by_label}
               for group, by_label in summarize(records).items()}  # in the order they ran
    audit = greedy_audit(model, records, runner.prompts) if args.temperature == 0 else None
    report = format_report(summary, info, audit)
    print(report)
    (out / "bench.json").write_text(json.dumps(
        {"info": info, "summary": summary, "audit": audit}, indent=1))
    (out / "bench.md").write_text(report + "\n")
    written = [out / "bench.md", out / "bench.json", store.path]
    if summary:
        from .plots import write_plots

        title = f"{model.name} ({model.weights}), {info['machine']['cpu']}"
        written += write_plots(summary, {lbl: d for lbl, (_, d) in c.labels.items() if d}, out,
                               title)
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def _describe(label: str, labels: dict, decoders: dict, program_peers: dict, args) -> str:
    method, depth = labels[label]
    if label in program_peers:
        return program_peers[label].describe()
    if method == "hf-lookup":
        return f"transformers generate(prompt_lookup_num_tokens={args.hf_lookup_tokens})"
    if method == "hf-assisted":
        return f"transformers generate(assistant_model={args.draft_model})"
    if method == "hf":
        return "transformers generate()"
    if method in LLAMA_CPP_PEERS:
        lookup = (f", prompt lookup drafting {args.hf_lookup_tokens}"
                  if method == "llamacpp-lookup" else "")
        return (f"llama.cpp (llama-cpp-python {llamacpp.binding_version()}) on "
                f"{gguf_file(args.model).name}{lookup}: its quantized kernels, not in the equality "
                "audit")
    tuned = " (tuned profile)" if decoders[method].spec.note else ""
    decoder = decoders[method]
    caps = (f", up to {decoder.budget.nodes} nodes at depth {depth or decoder.budget.depth}"
            if decoder.budget.nodes else "")
    return decoder.drafter.describe() + caps + tuned


def _hf_generate(model: LoadedModel, ids: list[int], max_new: int, temperature: float, seed: int,
                 lookup: int | None = None, assistant=None) -> tuple[list[int], float]:
    """transformers generate() on the same weights; returns (new token ids without EOS, seconds).
    Sampling uses the full distribution (top_k=0, top_p=1), as our sampling does by default."""
    input_ids = torch.tensor([ids])
    kwargs = dict(max_new_tokens=max_new, attention_mask=torch.ones_like(input_ids),
                  eos_token_id=sorted(model.eos_token_ids),
                  pad_token_id=model.tokenizer.pad_token_id or sorted(model.eos_token_ids)[0])
    if temperature > 0:
        kwargs.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
        torch.manual_seed(seed)
    else:
        kwargs.update(do_sample=False)
    if lookup:
        kwargs["prompt_lookup_num_tokens"] = lookup
    if assistant is not None:
        kwargs["assistant_model"] = assistant
    started = time.perf_counter()
    with torch.inference_mode():
        out = model.hf_model.generate(input_ids, **kwargs)[0, len(ids):].tolist()
    seconds = time.perf_counter() - started
    while out and out[-1] in model.eos_token_ids:
        out.pop()
    return out, seconds


def machine_info() -> dict:
    """The CPU, threads, torch, commit, date and this process's peak memory, for reports."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        commit = ""
    # ru_maxrss is in KiB on Linux: the process's peak, weights and KV caches included
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"cpu": cpu_name(), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "commit": commit or "unknown", "date": time.strftime("%Y-%m-%d %H:%M"),
            "peak_rss_mb": peak_mb}
