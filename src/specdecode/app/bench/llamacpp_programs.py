"""llama.cpp's own programs as peers: `llama-completion` for its plain decoding,
`llama-speculative-simple` for its draft-model speculation (`draft-simple`, with the target's
drafter) and its n-gram speculation (`ngram-simple`), and `llama-bench` for tg128 / pp512. They are
built with cmake from the llama.cpp tree that the llama-cpp-python sdist vendors (`make peers`),
so no Python runs per token: the peer for a user who would run llama.cpp itself.

Each run is one process on one prompt. Its time is what the program measures itself (prompt
encoding plus decoding, model loading left out), as ours is. The prompt goes in as our chat-
templated text (`-p`, escapes off: a file would lose its final newline), which llama.cpp
tokenizes with its special tokens parsed; its quantized arithmetic is not the fp32 target's, so
its output stays out of the equality audit.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ...errors import SpecDecodeError
from ...storage import cache_dir

# method -> llama-speculative-simple's --spec-type (None: plain decoding by llama-completion)
SPEC_TYPES = {"llamacpp-bin": None, "llamacpp-bin-draft": "draft-simple",
              "llamacpp-bin-ngram": "ngram-simple"}
# --spec-draft-n-max: llama-speculative-simple's default for a draft model, and the value
# llama.cpp's docs/speculative.md gives for ngram-simple
DEFAULT_DRAFT_MAX = {"draft-simple": 3, "ngram-simple": 64}
TIMEOUT_SECONDS = 600  # one prompt; a hung peer must not hang the benchmark


def programs_dir() -> Path:
    """`SPECDECODE_LLAMA_CPP_BIN`, else where `make peers` builds them."""
    default = cache_dir() / "llama.cpp" / "build" / "bin"
    return Path(os.environ.get("SPECDECODE_LLAMA_CPP_BIN", default))


def program(name: str) -> Path | None:
    path = programs_dir() / name
    return path if os.access(path, os.X_OK) else None


def missing_reason() -> str | None:
    """None when the programs are there, else why not and what to do."""
    missing = [p for p in ("llama-completion", "llama-speculative-simple", "llama-bench")
               if program(p) is None]
    if missing:
        return (f"llama.cpp's {missing[0]} is not in {programs_dir()}: run `make peers` or set "
                "SPECDECODE_LLAMA_CPP_BIN")
    return None


@dataclass
class ProgramRun:
    text: str  # the generated text
    new_tokens: int  # without a final end-of-text token
    seconds: float  # prompt encoding + decoding, as the program timed them
    prefill_seconds: float
    drafted: int = 0
    accepted: int = 0


def _number(pattern: str, log: str, program_name: str, what: str) -> re.Match:
    m = re.search(pattern, log, re.M)
    if not m:
        raise SpecDecodeError(f"{program_name} printed no {what} line")
    return m


def parse_speculative_simple(log: str) -> dict[str, float]:
    """The counts and times `llama-speculative-simple` prints when it finishes."""
    found: dict[str, float] = {}
    for key in ("encoded", "decoded"):
        m = _number(rf"{key}\s+(\d+) tokens in\s+([\d.]+) seconds", log,
                    "llama-speculative-simple", f"'{key} ... tokens'")
        found[f"{key}_tokens"], found[f"{key}_seconds"] = int(m[1]), float(m[2])
    for key in ("n_drafted", "n_accept"):
        m = re.search(rf"{key}\s*=\s*(\d+)", log)
        found[key] = int(m[1]) if m else 0
    return found


def parse_completion(log: str) -> dict[str, float]:
    """`llama-completion`'s performance lines: prompt and total milliseconds, decoding runs."""
    name = "llama-completion"
    prompt = _number(r"prompt eval time =\s+([\d.]+) ms", log, name, "'prompt eval time'")
    runs = _number(r"(?<!prompt) eval time =\s+[\d.]+ ms /\s+(\d+) runs", log, name,
                   "'eval time'")
    total = _number(r"total time =\s+([\d.]+) ms", log, name, "'total time'")
    return dict(prompt_seconds=float(prompt[1]) / 1e3, runs=int(runs[1]),
                total_seconds=float(total[1]) / 1e3)


def new_tokens(decoded: int, max_new: int) -> int:
    """Our count of new tokens from `llama-speculative-simple`'s `decoded` count (run with
    -n max_new - 1): fewer than max_new means an end-of-text token ended the answer, and the
    program counted it; more means its last draft ran past the budget, in the time it took."""
    return decoded if decoded >= max_new else max(decoded - 1, 0)


class ProgramPeer:
    """One of `SPEC_TYPES`' methods through llama.cpp's programs."""

    def __init__(self, method: str, gguf: Path, threads: int, drafter_gguf: Path | None = None,
                 draft_max: int | None = None) -> None:
        self.spec_type = SPEC_TYPES[method]
        if self.spec_type == "draft-simple" and drafter_gguf is None:
            raise SpecDecodeError(f"{method} needs a drafter GGUF file (--draft-model)")
        self.gguf, self.threads, self.drafter_gguf = gguf, threads, drafter_gguf
        self.draft_max = draft_max or DEFAULT_DRAFT_MAX.get(self.spec_type)

    @property
    def program(self) -> str:
        return "llama-speculative-simple" if self.spec_type else "llama-completion"

    def describe(self) -> str:
        how = (f" --spec-type {self.spec_type}" if self.spec_type else "")
        how += f" with {self.drafter_gguf.name}" if self.spec_type == "draft-simple" else ""
        how += f", --spec-draft-n-max {self.draft_max}" if self.draft_max else ""
        return (f"llama.cpp's {self.program}{how} on {self.gguf.name}, {self.threads} threads: "
                "its quantized kernels, not in the equality audit")

    def command(self, prompt: str, prompt_tokens: int, max_new: int, temperature: float,
                seed: int) -> list[str]:
        context = prompt_tokens + max_new + 256
        cmd = [str(programs_dir() / self.program), "-m", str(self.gguf), "-p", prompt,
               "--no-escape", "-t", str(self.threads), "-tb", str(self.threads),
               "-c", str(context), "-b", str(context), "--seed", str(seed)]
        cmd += (["--temp", str(temperature), "--top-k", "0", "--top-p", "1", "--min-p", "0"]
                if temperature > 0 else ["--temp", "0"])
        if not self.spec_type:
            return cmd + ["-n", str(max_new), "-no-cnv", "--no-display-prompt"]
        # -n max_new - 1: this program decodes its prompt's last token in its loop and counts
        # the token that follows it, so it then runs as many target steps as max_new tokens take
        cmd += ["-n", str(max(max_new - 1, 1)), "--spec-type", self.spec_type,
                "--spec-draft-n-max", str(self.draft_max)]
        if self.spec_type == "draft-simple":
            cmd += ["-md", str(self.drafter_gguf), "-td", str(self.threads)]
        return cmd

    def generate(self, prompt: str, prompt_tokens: int, max_new: int, temperature: float,
                 seed: int) -> ProgramRun:
        """prompt: the chat-templated text; prompt_tokens: its length in our tokens (sizes the
        context)."""
        cmd = self.command(prompt, prompt_tokens, max_new, temperature, seed)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                                  timeout=TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            raise SpecDecodeError(f"{self.program} ran past {TIMEOUT_SECONDS} s") from None
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise SpecDecodeError(
                f"{self.program} failed ({exit_reason(done.returncode)}): {last}")
        log = done.stdout + done.stderr
        if not self.spec_type:
            found = parse_completion(log)
            # a run that reached the budget evaluated all but its last token
            tokens = max_new if found["runs"] >= max_new - 1 else found["runs"]
            # it ends what it prints with " [end of text]" when the model stops, then newlines
            text = done.stdout.rstrip("\n").removesuffix(" [end of text]")
            return ProgramRun(text, tokens, found["total_seconds"], found["prompt_seconds"])
        found = parse_speculative_simple(log)
        echo = "\n\n" + prompt
        text = done.stdout[len(echo):].rstrip("\n") if done.stdout.startswith(echo) else ""
        return ProgramRun(text, new_tokens(found["decoded_tokens"], max_new),
                          found["encoded_seconds"] + found["decoded_seconds"],
                          found["encoded_seconds"], found["n_drafted"], found["n_accept"])


def exit_reason(returncode: int) -> str:
    """A program's exit status in words: subprocess gives a signal's death as its negative."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def llama_bench(gguf: Path, threads: int, prompts: Sequence[int] = (512,), generate: int = 128,
                repetitions: int | None = None) -> dict[str, float]:
    """`llama-bench` on the file: {'pp512': tok/s, 'tg128': tok/s} for each prompt length and the
    generation length (0: none), `repetitions` each (None: its default)."""
    exe = program("llama-bench")
    if exe is None:
        raise SpecDecodeError(missing_reason() or f"llama-bench is not in {programs_dir()}")
    command = [str(exe), "-m", str(gguf), "-t", str(threads), "-p", ",".join(map(str, prompts)),
               "-n", str(generate), "-o", "json"]
    if repetitions is not None:
        command += ["-r", str(repetitions)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
    if done.returncode != 0:
        raise SpecDecodeError(f"llama-bench failed ({exit_reason(done.returncode)}): "
                              f"{(done.stderr.strip().splitlines() or ['no output'])[-1]}")
    rates = {}
    for test in json.loads(done.stdout):
        name = f"pp{test['n_prompt']}" if test["n_prompt"] else f"tg{test['n_gen']}"
        rates[name] = float(test["avg_ts"])
    return rates
