"""The CLI's subcommands: argument plumbing and printing only; the work is done by the library."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..core.constraint import Grammar
from ..core.engine import collect
from ..core.run_stats import RunStats
from ..core.sampling import SamplingParams
from ..core.sequence import GenerationConfig
from ..errors import InvalidParameterError, SpecDecodeError
from ..pipeline import SpecDecoder
from ..spec import resolve
from .options import check_args, load, parse_size, print_json, resolve_args


def _read_prompt(args: argparse.Namespace) -> str:
    if args.prompt is not None:
        return args.prompt
    if args.prompt_file:
        try:
            return Path(args.prompt_file).read_text()
        except OSError as exc:
            raise SpecDecodeError(f"cannot read prompt file {args.prompt_file}: {exc.strerror}")
    if sys.stdin is None or sys.stdin.isatty():
        raise InvalidParameterError("give a PROMPT, --prompt-file FILE, or pipe the prompt to stdin")
    return sys.stdin.read()


def _grammar(args: argparse.Namespace, decoder: SpecDecoder) -> Grammar | None:
    """The grammar of --json-schema FILE or --grammar FILE (None: free output)."""
    path = args.json_schema or args.grammar
    if path is None:
        return None
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InvalidParameterError(f"cannot read {path}: {exc.strerror}") from None
    return decoder.grammars.compile("json_schema" if args.json_schema else "gbnf", text)


def generate(args: argparse.Namespace) -> int:
    prompt = _read_prompt(args)
    check_args(args)
    GenerationConfig(args.max_new_tokens, SamplingParams(args.temperature, args.top_k, args.top_p))
    model = load(args)
    spec = resolve_args(args, model)
    decoder = SpecDecoder(model, spec)
    ids = decoder.prompt_ids(prompt, chat=not args.no_chat)
    kwargs = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                  top_k=args.top_k, top_p=args.top_p, seed=args.seed, stop=tuple(args.stop),
                  grammar=_grammar(args, decoder))
    plain = SpecDecoder(model, resolve(model, "ar")) if args.compare else None
    if plain:  # the first forward pays one-time allocations: warm both up before timing
        for d in (decoder, plain):
            d.generate(ids, **{**kwargs, "max_new_tokens": 2})
    if args.json:
        result = decoder.generate(ids, **kwargs)
    else:
        chunks = []
        for chunk in decoder.stream(ids, **kwargs):
            sys.stdout.write(chunk.text)
            sys.stdout.flush()
            chunks.append(chunk)
        print()
        result = collect(chunks)
        if result.finish_reason == "length":
            print(f"[the answer was cut at --max-new-tokens {args.max_new_tokens}: it did not "
                  f"finish; raise the limit for the whole answer]")
    base = plain.generate(ids, **kwargs) if plain else None
    greedy = args.temperature == 0
    if args.json:
        out = {"text": result.text, "token_ids": result.token_ids, "method": spec.method,
               "finish_reason": result.finish_reason, "stats": result.stats.to_dict(),
               "kernels": model.kernels, "defaults": spec.note}
        if base:
            out["compare"] = {"ar": base.stats.to_dict(),
                              "speedup": _ratio(result.stats, base.stats),
                              "identical": result.token_ids == base.token_ids if greedy else None}
        print_json(out)
        return 0
    rows = [(spec.method, result.stats)] + ([("ar", base.stats)] if base else [])
    note = f" · {spec.note}" if spec.note else ""
    print(f"\n[{model.name} · {model.backend} {model.weights} · {model.kernels} · "
          f"{decoder.describe()}{note}]")
    print(format_stats(rows))
    if base:
        same = ("yes" if result.token_ids == base.token_ids else "NO") if greedy else "n/a (sampling)"
        print(f"speed-up over plain decoding: {_ratio(result.stats, base.stats):.2f}x · "
              f"greedy output token-identical: {same}")
    return 0


def _ratio(stats: RunStats, base: RunStats) -> float:
    return round(stats.tokens_per_second / base.tokens_per_second, 3) if base.tokens_per_second else 0.0


def format_stats(rows: list[tuple[str, RunStats]]) -> str:
    """The stats table: one row per method, then acceptance detail for each speculative row."""
    head = (f"{'method':<10} {'tokens':>6} {'target fw':>9} {'draft fw':>8} {'tau':>5} "
            f"{'accept':>6} {'tok/s':>7} {'wall s':>7}  {'draft/verify/other s':>20}")
    lines = [head, "-" * len(head)]
    for name, s in rows:
        rate = "-" if s.acceptance_rate is None else f"{s.acceptance_rate:.0%}"
        split = f"{s.draft_seconds:.2f}/{s.verify_seconds:.2f}/{s.other_seconds + s.prefill_seconds:.2f}"
        lines.append(f"{name:<10} {s.new_tokens:>6} {s.target_forwards:>9} {s.draft_forwards:>8} "
                     f"{s.tau:>5.2f} {rate:>6} {s.tokens_per_second:>7.1f} {s.wall_seconds:>7.2f}"
                     f"  {split:>20}")
    for name, s in rows:
        if s.drafted:
            by_pos = " ".join(f"{r:.0%}" for r in s.acceptance_by_position[:8])
            lines.append(f"{name}: acceptance by draft position: {by_pos}; "
                         f"accepted-per-step histogram: {s.accepted_histogram}")
    return "\n".join(lines)


def _synthetic_1b(path: Path) -> Path:
    """The random-weight ~1B Q4_K_M-mix GGUF at `path`, written first if it is not there."""
    if not path.exists():
        from .bench.synthetic import ONE_B, write_random_gguf

        print(f"writing a random-weight ~1B Q4_K_M-mix model to {path} ...", file=sys.stderr)
        partial = path.with_name(path.name + ".partial")  # renamed when whole
        write_random_gguf(partial, **ONE_B, qtype="Q4_K_M")
        partial.rename(path)
    return path


def bench(args: argparse.Namespace) -> int:
    if args.load:
        from .bench.load import run_load

        return run_load(args)
    if args.synthetic_1b:
        args.model = str(_synthetic_1b(Path(args.synthetic_1b)))
    if args.distance:
        from .bench.distance import distance_report

        model = load(args)
        print(distance_report(args, model))
        return 0
    if args.ttft:
        from .bench.ttft import ttft_report

        print(ttft_report(args, ["--model", args.model, "--backend", args.backend, "--dtype",
                                 args.dtype, *(["--threads", str(args.threads)]
                                               if args.threads else [])]))
        return 0
    if args.prefill:
        from .bench.prefill import measure_prefill, peer_rates, prefill_report

        model = load(args)
        times = measure_prefill(model)  # ours first: llama-bench must not run beside it
        print(prefill_report(model, times, *peer_rates(model, times.sizes)))
        return 0
    if args.floor:
        from .bench.floor import (
            floor_report,
            gguf_tensor_mb,
            resident_mb,
            tokenizer_alone,
        )

        # the tokenizer first, so that what loading the model adds is its weights (plus at most
        # a second tokenizer): an upper bound on the weights' resident memory
        before = resident_mb()
        tokenizer = tokenizer_alone(args.model)
        tokenizer_mb, started = resident_mb() - before, time.perf_counter()
        model = load(args)
        loaded, weights_mb = time.perf_counter() - started, resident_mb() - before - tokenizer_mb
        del tokenizer
        print(f"{model.name} ({model.backend}, {model.weights}, {model.kernels})")
        print(f"loaded in {loaded:.1f} s; resident: {before:.0f} MB before loading, tokenizer "
              f"{tokenizer_mb:.0f} MB, then weights <= {weights_mb:.0f} MB (packed "
              f"{model.target.weight_bytes() / 1e6:.0f} MB"
              + (f"; <= {weights_mb / file_mb:.2f}x the file's {file_mb:.0f} MB of tensors)"
                 if (file_mb := gguf_tensor_mb(model)) else ")"))
        print(floor_report(model))
        return 0
    from .bench.run import run_bench

    return run_bench(args)


def tune(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ..models.timing import measure, save_step_cost
    from ..profiles import save_profile_section
    from .bench.specbench import GROUPS, calibration_prompts
    from .layer_search import search_layers_once
    from .tune import PROFILE_SECTION, candidates
    from .tune import tune as run_tune

    if args.per_group < 1 or args.max_new_tokens < 1:
        raise InvalidParameterError("--per-group and --max-new-tokens must be >= 1")
    model = load(args)
    cost = measure(model.target)
    save_step_cost(model, cost)  # before the candidates: every drafter's budget is chosen by it
    print(f"step cost on this machine ({model.kernels}): {cost}", file=sys.stderr)
    search_layers_once(model, redo=args.search_layers)
    prompts = [model.encode_prompt(p) for p in calibration_prompts(args.per_group, tuple(GROUPS))]
    runs = len(prompts) * len(candidates(model, args.draft_model))
    with tqdm(total=runs, desc="tune", unit="run") as bar:
        result = run_tune(model, prompts, args.draft_model, args.max_new_tokens, bar.update)
    path = save_profile_section(model.key, PROFILE_SECTION, result)
    for label, speedup in sorted(result["measured"].items(), key=lambda kv: -kv[1]):
        print(f"  {speedup:5.2f}x  {label}")
    print(f"{model.name}: fastest lossless configuration: {result['label']} "
          f"({result['speedup']:.2f}x over plain on {len(prompts)} prompts, {model.kernels}). "
          f"Saved to {path}; generate, bench and serve now use it unless told otherwise.")
    return 0


def check_serve_args(args: argparse.Namespace) -> None:
    """`serve`'s values, checked before any model loads (one-line errors)."""
    from ..core.engine import MAX_BATCH

    if args.max_queue < 1 or not 1 <= args.max_batch <= MAX_BATCH:
        raise InvalidParameterError(f"need --max-queue >= 1 and 1 <= --max-batch <= {MAX_BATCH}, "
                                    f"got {args.max_queue}, {args.max_batch}")
    if args.max_body_bytes is not None and args.max_body_bytes < 1:
        raise InvalidParameterError(f"--max-body-bytes must be >= 1, got {args.max_body_bytes}")
    if not args.request_timeout > 0:
        raise InvalidParameterError(f"--request-timeout must be > 0, got {args.request_timeout}")
    if not args.shutdown_grace >= 0:
        raise InvalidParameterError(f"--shutdown-grace must be >= 0, got {args.shutdown_grace}")
    parse_size(args.prompt_cache, "--prompt-cache")
    parse_size(args.prompt_cache_disk, "--prompt-cache-disk")
    if not 0 <= args.port <= 65535:
        raise InvalidParameterError(f"--port must be in 0..65535, got {args.port}")
    check_args(args)


def serve(args: argparse.Namespace) -> int:
    check_serve_args(args)
    if args.ray:
        from .server.ray_serve import serve_ray  # Ray is an optional extra

        return serve_ray(args)
    from .server import serve
    from .server.launch import build_app

    app, what = build_app(args)
    print(f"specdecode: serving {what} on http://{args.host}:{args.port}/v1", file=sys.stderr)
    serve(app, args.host, args.port, grace=args.shutdown_grace, log_level=args.log_level)
    return 0


def export(args: argparse.Namespace) -> int:
    from .export import export_head

    out = export_head(args.head_dir, args.out_dir, args.verifier, format=args.format,
                      speculative_tokens=args.speculative_tokens)
    print(f"wrote {out}/config.json and model.safetensors ({args.format} layout, verifier "
          f"{args.verifier}); serving: docs/serving-with-vllm.md")
    return 0


def train(args: argparse.Namespace) -> int:
    import shlex

    from .train import TrainOptions, run_training
    from .train.data import shipped_prompts

    prompts = Path(args.prompts) if args.prompts else shipped_prompts()
    options = TrainOptions(args.method, Path(args.out), prompts, args.model,
                           args.num_prompts, args.val_prompts, args.max_new_tokens, args.epochs,
                           args.draft_vocab, args.medusa_heads, args.lr, args.batch_size,
                           args.seed)
    record = run_training(options, resume=args.resume, command_line=shlex.join(sys.argv))
    info = record["training"]
    print(f"{'epoch':>5} {'train loss':>10} {'val loss':>9} {'val acc':>16} {'s':>6}")
    for e in info["history"]:
        accuracy = " ".join(f"{a:.0%}" for a in e["val_accuracy"])
        print(f"{e['epoch']:>5} {e['train_loss']:>10.4f} {e['val_loss']:>9.4f} {accuracy:>16} "
              f"{e['seconds']:>6.0f}")
    tau = info["validation_tau"]
    tau_text = (f"validation τ {tau['tau']:.2f} with {tau['nodes']} nodes at depth "
                f"{tau['depth']} on {tau['prompts']} prompts" if tau else
                "validation τ not measured")
    head = Path(args.out) / "head"
    print(f"{args.method} head for {record['target']}: {info['train_prompts']} prompts, "
          f"{info['train_answer_tokens']} answer tokens, {tau_text}; {info['wall_seconds']:.0f} s. "
          f"Use it: specdecode generate --method {args.method} --draft-model {head}")
    return 0
