"""Command line: `specdecode generate | bench | tune | serve | train | export`.

User mistakes (`SpecDecodeError`) print one line on stderr and exit with code 2; so do argument
errors. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from typing import TYPE_CHECKING

from ..core.engine import MAX_BATCH, SPECULATION
from ..drafters import DRAFTERS
from ..errors import InvalidParameterError, SpecDecodeError
from ..models import DEFAULT_MODEL
from ..models.loader import DTYPE_CHOICES
from ..spec import DEFAULT_METHOD, DEFAULT_WITH_DRAFTER
from .export import DEFAULT_VERIFIER, FORMATS
from .options import add_drafter_arguments

if TYPE_CHECKING:
    from ray.serve import Application

EXIT_USAGE = 2

# Every command: its line in `specdecode --help` and the description heading its own --help.
_COMMANDS: dict[str, tuple[str, str]] = {
    "generate": ("generate text and print the run's statistics",
                 "Generate from PROMPT (or --prompt-file, or stdin), streaming "
                 "the text, then print τ, acceptance rate and speed."),
    "bench": ("Spec-Bench speed table: our methods and their peers",
              "Run the first N prompts of each Spec-Bench task group (MT-bench "
              "with both turns) through plain decoding, every drafter and "
              "transformers generate() on the same weights, interleaved "
              "prompt by prompt; write a Markdown table, JSON records and "
              "PNG plots, and audit greedy outputs token by token."),
    "tune": ("measure drafting settings and save the fastest as defaults",
             "Search which layers layerskip should skip (once per model), "
             "then time plain decoding and every drafter's candidate "
             "settings (prompt lookup over K and n-gram size, layerskip if "
             "the search found a skip set, a draft model with "
             "--draft-model, the shipped heads) on the last Spec-Bench "
             "prompts of each task group, and save the fastest lossless "
             "configuration as this model's defaults for generate, bench "
             "and serve."),
    "serve": ("OpenAI-compatible HTTP server",
              "Serve OpenAI's /v1/chat/completions, /v1/completions and "
              "/v1/responses, Anthropic's /v1/messages, llama.cpp's "
              "/completion, /infill, /tokenize and /props, /v1/models, "
              "/health and /metrics. --method and the draft caps are the "
              "default; a request can pick another drafter with the "
              'extension field "speculative": {"method": ..., '
              '"max_draft_nodes": ..., "max_draft_depth": ...}. Up to '
              "--max-batch requests generate together, sharing each "
              "target forward; the rest wait in a bounded queue."),
    "export": ("export a trained EAGLE head for vLLM",
               "Write the EAGLE head in HEAD_DIR to OUT_DIR as config.json + "
               "model.safetensors: by default in the EAGLE-1 layout vLLM's "
               "method 'eagle' loads; see docs/serving-with-vllm.md."),
    "train": ("train an EAGLE or Medusa drafting head for a model",
              "Self-distillation: sample prompts (balanced across their "
              "sources), let the model answer them greedily, record its "
              "hidden states over prompt + answer, and train a head to draft "
              "its next tokens. Every phase is cached in --out, so --resume "
              "redoes no finished work. The head is written to OUT/head; use "
              "it with `generate --method METHOD --draft-model OUT/head`. "
              "With the defaults, SmolLM2-135M on 2 idle CPU cores takes about "
              "60 minutes."),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line instead of usage + error
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _command(sub: "argparse._SubParsersAction", name: str) -> argparse.ArgumentParser:
    summary, description = _COMMANDS[name]
    return sub.add_parser(name, help=summary, description=description)


def _switch(p: argparse.ArgumentParser, flag: str, help: str) -> None:
    """An option that is off unless given."""
    p.add_argument(flag, action="store_true", help=help)


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"alias, .gguf file, model directory or hub id (default: {DEFAULT_MODEL})")
    p.add_argument("--backend", default="auto", choices=["auto", "native", "transformers"],
                   help="native (the families in models/families: Llama, Mistral, Qwen2, Qwen3, "
                        "Qwen3-MoE, Gemma 3) or transformers (default: native when supported)")
    p.add_argument("--dtype", default="auto",
                   choices=DTYPE_CHOICES,
                   help="what the target's matrices are held in: auto = a GGUF file's own block "
                        "formats (fp32 for other models); float32 or bfloat16 dequantizes them; "
                        "q8_0 or q4_0 quantizes any model's matrices on load, as llama.cpp "
                        "would (native backend; default: auto)")
    p.add_argument("--device", default="cpu",
                   help="cpu (default), or cuda with --backend transformers")
    p.add_argument("--threads", type=int, help="CPU threads for torch and the kernels "
                                               "(default: all cores)")


def _add_method_arg(p: argparse.ArgumentParser) -> None:
    methods = ", ".join(sorted(DRAFTERS))
    p.add_argument("--method",
                   help=f"decoding method: {methods} (default: the model's tuned profile if "
                        f"`specdecode tune` ran, else the fastest lossless method measured: "
                        f"{DEFAULT_WITH_DRAFTER} on a model whose alias names a draft model "
                        f"(qwen2.5-coder-1.5b), {DEFAULT_METHOD} on others; ar = plain decoding)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="specdecode", description=(
        "Lossless speculative decoding: a cheap drafter proposes tokens, the model verifies them "
        "all in one forward pass; the output is exactly what the model alone would produce."))
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_generate(sub)
    _add_bench(sub)
    _add_tune(sub)
    _add_serve(sub)
    _add_export(sub)
    _add_train(sub)
    return parser


def _add_generate(sub: "argparse._SubParsersAction") -> None:
    g = _command(sub, "generate")
    g.add_argument("prompt", nargs="?", help="the prompt (default: --prompt-file or stdin)")
    g.add_argument("--prompt-file", help="read the prompt from this file")
    _add_model_args(g)
    _add_method_arg(g)
    add_drafter_arguments(g)
    g.add_argument("--max-new-tokens", type=int, default=128, help="default 128")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens (0 = off)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass in (0, 1]")
    g.add_argument("--seed", type=int, help="seed for sampling (reproducible runs)")
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    _switch(g, "--no-chat", "do not apply the chat template")
    out = g.add_mutually_exclusive_group()
    out.add_argument("--json-schema", metavar="FILE",
                     help="constrain the output to JSON valid against this JSON schema file "
                          "(speculation stays lossless: every draft row is masked alike)")
    out.add_argument("--grammar", metavar="FILE",
                     help="constrain the output to this grammar file (llama.cpp's GBNF, or Lark)")
    _switch(g, "--json", "print one JSON object instead of text")
    _switch(g, "--compare",
            "also run plain decoding; print both, the speed-up and whether the "
            "greedy outputs are token-identical")


def _add_bench_modes(b: argparse.ArgumentParser) -> None:
    """`bench`'s reports other than the speed table: prefill, floors, distance, load."""
    _switch(b, "--prefill",
            "instead of the table: where the prefill of a 512-, 2,048- and "
            "8,192-token prompt spends its time (matrix calls by format against the "
            "path's matrix peak, attention, the rest), beside llama.cpp's llama-bench "
            "-p on the same file (`make peers` builds it)")
    b.add_argument("--ttft", metavar="REQUEST.json",
                   help="instead of the table: the time to first token of a recorded request "
                        "(an agent's long prompt: {\"path\": ..., \"body\": ...}) read by "
                        "`specdecode serve` cold, from its memory, and from --prompt-cache-dir "
                        "after a restart; the three one-token answers must agree")
    _switch(b, "--floor",
            "instead of the table: the target's weight bytes, its bandwidth floor "
            "(measured memory bandwidth) and arithmetic floor (the kernels' measured "
            "peak), its load time and resident memory, and its step time over 1, 4, "
            "8 and 16 new tokens between them, each also as a fraction of the "
            "path's instruction peak (its dot-product instruction alone, in "
            "registers, on every thread)")
    _switch(b, "--distance",
            "instead of the table: for a GGUF model, how often our quantized path "
            "and llama.cpp pick the greedy token of transformers' fp32 reading of "
            "the same file (teacher-forced "
            "top-1 agreement, identical greedy outputs) on the first --limit prompts "
            "of each group")
    b.add_argument("--synthetic-1b", metavar="PATH",
                   help="use a random-weight ~1B Llama-family GGUF in llama.cpp's Q4_K_M mix "
                        "as the model, written to PATH first if it is not there (~0.8 GB, a "
                        "few minutes): memory and speed at a real model's size")
    b.add_argument("--load", metavar="N1,N2,...",
                   help="instead of the table: the server under N concurrent streaming clients "
                        "for each N (e.g. 1,2,4,8,16), for each --load-modes server: aggregate "
                        "and per-request tokens/s, time to first token, inter-token latency, "
                        "answers the same as one at a time's (load.md, load.json, load.png in "
                        "--out)")
    b.add_argument("--load-modes",
                   help="servers for --load: 'one at a time' (no batching), adaptive, always, "
                        "off (speculation in a batch; default: all four)")
    b.add_argument("--load-url", metavar="URL",
                   help="--load against a server already running at URL (e.g. `specdecode "
                        "serve --ray` behind Ray's proxy) instead of starting --load-modes "
                        "servers; it is neither started nor stopped")


def _add_bench(sub: "argparse._SubParsersAction") -> None:
    b = _command(sub, "bench")
    _add_model_args(b)
    b.add_argument("--limit", type=int, default=3, help="prompts per task group (default 3)")
    b.add_argument("--methods",
                   help="comma-separated: our methods (" + ", ".join(sorted(DRAFTERS)) + ") and "
                        "peers (hf, hf-lookup, hf-assisted: transformers; llamacpp, "
                        "llamacpp-lookup: llama-cpp-python; llamacpp-bin, llamacpp-bin-draft, "
                        "llamacpp-bin-ngram: llama.cpp's own llama-completion and "
                        "llama-speculative-simple, built by `make peers`); a method that cannot "
                        "run is left out with the reason (draft, hf-assisted and "
                        "llamacpp-bin-draft need --draft-model or a model alias with a drafter, "
                        "eagle and medusa a trained head, the llamacpp peers a GGUF model) "
                        "(default: all)")
    add_drafter_arguments(b)
    b.add_argument("--max-new-tokens", type=int, default=128, help="default 128")
    b.add_argument("--temperature", type=float, default=0.0,
                   help="0 = greedy with the equality audit (default); > 0 samples, seeded by "
                        "the repeat index, and reports speed and τ only")
    b.add_argument("--repeats", type=int, default=2, help="timed repeats per prompt (median)")
    _switch(b, "--cross-request-memory",
            "let drafters with a memory of earlier outputs (suffix) keep it across "
            "prompts, as a server does; off by default, so that every prompt starts "
            "clean as Spec-Bench assumes. Needs --repeats 1: no prompt may see its "
            "own earlier run")
    b.add_argument("--sweep-depth", metavar="D1,D2,...",
                   help="run every drafting method at each of these depth caps (for the "
                        "speed-up and τ against depth plot), e.g. 1,2,4,6,8,12; for "
                        "llamacpp-bin-draft and -ngram the --spec-draft-n-max")
    b.add_argument("--hf-lookup-tokens", type=int, default=10,
                   help="draft length of the peers' prompt lookup: transformers "
                        "prompt_lookup_num_tokens, llama.cpp num_pred_tokens (default 10)")
    b.add_argument("--out", default="bench-out",
                   help="directory for bench.md, bench.json, records.jsonl and the plots "
                        "(default bench-out)")
    _switch(b, "--resume", "continue the run recorded in --out: nothing already measured is rerun")
    _add_bench_modes(b)
    b.add_argument("--questions", help="Spec-Bench question file (default: the shipped copy); a "
                   "question with a \"json_schema\" (category \"structured\") is answered "
                   "under that schema, and the report says how many tokens the grammar forced "
                   "and what its masks cost")
    b.add_argument("--fim", type=int, metavar="N",
                   help="instead of Spec-Bench: N fill-in-the-middle prompts, functions of "
                        "Python's own library with one to four statements cut out (the editor's "
                        "60 lines before and 30 after), each decoded until the model ends the "
                        "middle; the report gives time to the first token and to the whole "
                        "middle. Needs a model with FIM tokens (qwen2.5-coder-1.5b)")


def _add_tune(sub: "argparse._SubParsersAction") -> None:
    t = _command(sub, "tune")
    _add_model_args(t)
    t.add_argument("--draft-model", help="also try this draft model")
    t.add_argument("--per-group", type=int, default=1,
                   help="prompts per Spec-Bench task group (default 1)")
    t.add_argument("--max-new-tokens", type=int, default=128, help="default 128")
    _switch(t, "--search-layers",
            "search layerskip's skip set again even if the model's profile has one")


def _add_serve(sub: "argparse._SubParsersAction") -> None:
    v = _command(sub, "serve")
    _add_model_args(v)
    _add_method_arg(v)
    add_drafter_arguments(v)
    v.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    v.add_argument("--port", type=int, default=8000, help="default 8000")
    v.add_argument("--served-model-name",
                   help="model id reported by /v1/models and accepted in requests "
                        "(default: --model as given); more names requests may give after "
                        "commas, `*` for any (as llama.cpp's server takes any: agents' "
                        "configured model names then need no setting)")
    v.add_argument("--max-batch", type=int, default=8,
                   help="requests generating at once, sharing each target forward (default 8, "
                        f"at most {MAX_BATCH}); the rest wait in the queue")
    v.add_argument("--speculation", default="adaptive", choices=SPECULATION,
                   help="adaptive: draft rows chosen for the whole batch by cost, so speculation "
                        "shrinks as the batch fills (default); always: each request drafts as if "
                        "alone; off: plain decoding for every request")
    v.add_argument("--api-key",
                   help="require `Authorization: Bearer KEY` or `x-api-key: KEY` on /v1/ routes "
                        "(default: the SPECDECODE_API_KEY environment variable; unset: open)")
    v.add_argument("--cors-origins", default="*", metavar="ORIGINS",
                   help="comma-separated origins whose browser pages may call the server, "
                        "`localhost` for this machine's pages on any port (as llama.cpp's "
                        "server reads it), or `none`, so browsers refuse cross-origin calls "
                        "(default: *, any page, as llama.cpp's server and vLLM; the API key "
                        "is still required where set)")
    v.add_argument("--slots", action="store_true",
                   help="answer llama.cpp's GET /slots: each place of the batch, whether a "
                        "request decodes there, its prompt and generated tokens (default: off, "
                        "501, as llama.cpp's server: it shows what others are running)")
    v.add_argument("--max-body-bytes", type=int,
                   help="larger request bodies get 413 before they are read (default 4 MiB)")
    v.add_argument("--max-queue", type=int, default=16,
                   help="requests that may wait for the engine; more get 503 (default 16)")
    v.add_argument("--prompt-cache", default="25%", metavar="SIZE",
                   help="memory for the caches of prompts already read, so that a prompt that "
                        "starts like a kept one (a conversation's next turn, an agent's system "
                        "prompt) copies that part instead of reading it again; exact (greedy "
                        "output unchanged), native backend only; a size (4G, 512M) or a share "
                        "of the memory available at start (default 25%%; 0: off)")
    v.add_argument("--prompt-cache-dir", metavar="DIR",
                   help="also save every kept prompt's cache in DIR (keyed by the model file, "
                        "its formats and the kernel path; checked when read), so the next "
                        "server started on the same model reads a known prompt from disk")
    v.add_argument("--prompt-cache-disk", default="16G", metavar="SIZE",
                   help="disk for --prompt-cache-dir, least recently used deleted first "
                        "(default 16G)")
    v.add_argument("--request-timeout", type=float, default=300.0,
                   help="seconds a request may take, queueing included (default 300)")
    v.add_argument("--shutdown-grace", type=float, default=10.0,
                   help="on SIGTERM, seconds running requests may finish before they are "
                        "cancelled (default 10)")
    v.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn log level (default info)")
    r = v.add_argument_group(
        "Ray Serve (pip install 'specdecode[ray]')",
        "--ray serves the same app as Ray Serve replicas behind Ray's HTTP proxy on --host and "
        "--port: one engine and one model load per replica (--threads cores each), a "
        "conversation's turns routed back to the replica that served its first, a replica that "
        "dies replaced and its not yet answered requests retried on another.")
    _switch(r, "--ray", "serve through Ray Serve")
    r.add_argument("--replicas", type=int, default=1,
                   help="engine replicas (default 1); with --max-replicas, the fewest")
    r.add_argument("--max-replicas", type=int,
                   help="autoscale between --replicas and this many on requests in flight")
    r.add_argument("--routing", choices=["conversation", "least-loaded"], default="conversation",
                   help="conversation: a conversation's turns go back to the replica that "
                        "served its first (its prompt's cache is kept there) unless it has "
                        "several more requests in flight than the least loaded (default); "
                        "least-loaded: "
                        "Ray Serve's own choice, the less loaded of two random replicas")
    r.add_argument("--metrics-export-port", type=int, metavar="PORT",
                   help="where the local Ray instance's metrics agent serves every replica's "
                        "metrics (/metrics, Prometheus text, names prefixed ray_, labelled by "
                        "replica; default: a port Ray picks); a cluster sets it at `ray start`")
    r.add_argument("--ray-address",
                   help="a running Ray cluster to join (e.g. auto, or ray://HOST:10001; "
                        "default: start a local Ray instance, stopped on exit)")


def _add_export(sub: "argparse._SubParsersAction") -> None:
    x = _command(sub, "export")
    x.add_argument("head_dir", metavar="HEAD_DIR", help="EAGLE head directory (from training)")
    x.add_argument("out_dir", metavar="OUT_DIR", help="directory to write")
    x.add_argument("--format", default="vllm", choices=FORMATS,
                   help="vllm: the EAGLE-1 checkpoint layout vLLM's method 'eagle' loads "
                        "(default); speculators: the speculators EAGLE-1 layout")
    x.add_argument("--verifier", default=DEFAULT_VERIFIER,
                   help="the verifier (target) model as vLLM will load it: hub id or path "
                        f"(default: {DEFAULT_VERIFIER}, the default model)")
    x.add_argument("--speculative-tokens", type=int,
                   help="draft length recorded in the config (--format speculators only; "
                        "default 5)")
    x.set_defaults(threads=None)


def _add_train(sub: "argparse._SubParsersAction") -> None:
    from .train.run import (
        DEFAULT_EPOCHS,
        DEFAULT_NUM_PROMPTS,
        DEFAULT_VAL_PROMPTS,
        LEARNING_RATE,
        TAU_PROMPTS,
    )

    r = _command(sub, "train")
    r.add_argument("method", choices=["eagle", "medusa"],
                   help="eagle: a one-layer feature-level head (EAGLE-2 tree drafting); "
                        "medusa: independent heads, one per draft position")
    r.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"alias, .gguf file or model directory of a natively computed model "
                        f"(default: {DEFAULT_MODEL})")
    r.add_argument("--prompts",
                   help="JSONL file of prompts with fields id, prompt and source (default: the "
                        "11,949 instructions shipped with the package, GSM8K train, Dolly, "
                        "self-instruct and Open-Assistant)")
    r.add_argument("--out", required=True,
                   help="directory for the answers, features, checkpoint and the head")
    r.add_argument("--num-prompts", type=int, default=DEFAULT_NUM_PROMPTS,
                   help=f"training prompts (default {DEFAULT_NUM_PROMPTS})")
    r.add_argument("--val-prompts", type=int, default=DEFAULT_VAL_PROMPTS,
                   help=f"held-out validation prompts (default {DEFAULT_VAL_PROMPTS}; validation "
                        f"τ runs on the first {TAU_PROMPTS})")
    r.add_argument("--max-new-tokens", type=int, default=128,
                   help="length limit of the model's answers (default 128)")
    r.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS, help=f"default {DEFAULT_EPOCHS}")
    r.add_argument("--draft-vocab", type=int, default=8192,
                   help="draft over the N most frequent tokens of the answers (default 8192; "
                        "0 = the full vocabulary)")
    r.add_argument("--medusa-heads", type=int, default=3,
                   help="medusa: heads, i.e. draft positions (default 3)")
    r.add_argument("--lr", type=float, default=LEARNING_RATE,
                   help=f"peak learning rate (default {LEARNING_RATE:g})")
    r.add_argument("--batch-size", type=int, default=8, help="sequences per step (default 8)")
    r.add_argument("--seed", type=int, default=0,
                   help="seed for prompt sampling, initial weights and batch order (default 0)")
    _switch(r, "--resume", "continue the run in --out (started with the same settings)")
    r.add_argument("--threads", type=int, help="CPU threads for torch (default: all cores)")

class _StderrHandler(logging.StreamHandler):
    """Writes to sys.stderr as it is when a message comes, not as it was when the handler was
    made: a caller that calls `main` again with stderr redirected (a test, a notebook) gets the
    messages where its errors go."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler sets it; the property reads stderr anew
        pass


def ray_app(config: dict[str, str]) -> Application:
    """`serve run specdecode.app.cli:ray_app args="--model M --replicas 2 --threads 2"`: Ray
    Serve's own command runs `serve --ray`'s deployments for these `serve` arguments on a cluster
    it manages."""
    from .server.ray_serve import deployment

    return deployment(build_parser().parse_args(["serve", *shlex.split(config.get("args", ""))]))


def main(argv: list[str] | None = None) -> int:
    logger = logging.getLogger("specdecode")  # ours only: libraries keep their own logging
    if not logger.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("specdecode: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    try:
        if args.threads is not None:
            if args.threads < 1:
                raise InvalidParameterError(f"--threads must be >= 1, got {args.threads}")
            import torch

            torch.set_num_threads(args.threads)
        from . import commands

        return getattr(commands, args.command.replace("-", "_"))(args)
    except SpecDecodeError as exc:
        print(f"specdecode: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("specdecode: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
