"""Predicted outputs (OpenAI's `prediction`) on the 1.5B, greedy: does text the answer is expected
to repeat make the drafters faster, and does it change the answer (it must not)?

Two kinds of request, six each:
- edit: OpenAI's documented use. The code is in the prompt with an instruction to change it, and
  the prediction is that code. `lookup` and `draft`'s n-gram matches already copy from the
  prompt, so the prediction adds what the prompt does not have.
- regenerate: the prompt asks for a function by its description only, and the prediction is the
  answer a first request got (a client asking again, or one that holds a near-final text): the
  most a prediction can give.

Each method with and without the prediction, wall seconds (prefill + decoding) summed over the
requests, median of REPEATS, ratios to plain decoding (`ar`) of the same run; every output is
compared with plain's tokens.

    cd docs/benchmarks/prediction && ../../../.venv/bin/python prediction.py > prediction.txt
"""

from __future__ import annotations

import inspect
import platform
import statistics

from specdecode.app.bench.run import machine_info
from specdecode.drafters.lookup import MatchEvidence
from specdecode.drafters.ngrams import AcceptanceRecord, NgramIndex
from specdecode.pipeline import SpecDecoder

MAX_NEW = 320
REPEATS = 3
EDITS = [  # (code of our own, instruction)
    (inspect.getsource(NgramIndex.continuation), "Rename the parameter `k` to `limit`."),
    (inspect.getsource(NgramIndex.continuations), "Rename the local variable `counts` to `seen`."),
    (inspect.getsource(AcceptanceRecord.add), "Add type hints to the local variables."),
    (inspect.getsource(MatchEvidence.chances), "Rename `chance` to `joint` everywhere."),
    (inspect.getsource(MatchEvidence.record), "Rename the parameter `scored` to `looked_at`."),
    (inspect.getsource(NgramIndex._count), "Rename the parameter `sign` to `delta`."),
]
DESCRIPTIONS = [
    "a function `median(xs)` returning the median of a list of numbers",
    "a function `is_prime(n)` that tests primality by trial division up to the square root",
    "a function `chunks(xs, n)` yielding successive n-sized chunks of a list",
    "a class `Stack` with push, pop, peek and `__len__`",
    "a function `word_counts(text)` returning a dict of each lower-cased word's count",
    "a function `binary_search(xs, target)` returning the index or -1",
]


def edit_prompt(code: str, instruction: str) -> str:
    return (f"{instruction}\n\n```python\n{code}```\n\nRespond with the whole changed code in "
            "one ```python block and nothing else.")


def regenerate_prompt(description: str) -> str:
    return f"Write {description} in Python. Respond with the code in one ```python block only."


def run(decoder: SpecDecoder, requests: list[tuple[str, str | None]]) -> tuple[list, float, float]:
    """(token ids per request, wall seconds summed, tau over them)."""
    outputs, seconds, tokens, forwards = [], 0.0, 0, 0
    for prompt, prediction in requests:
        r = decoder.generate(prompt, max_new_tokens=MAX_NEW, prediction=prediction)
        outputs.append(r.token_ids)
        seconds += r.stats.wall_seconds
        tokens += r.stats.confirmed_tokens
        forwards += r.stats.target_forwards
    return outputs, seconds, tokens / max(forwards, 1)


def main() -> None:
    machine = machine_info()
    plain = SpecDecoder.load("qwen2.5-coder-1.5b", "ar")
    decoders = {"ar": plain, "lookup": SpecDecoder(plain.model, "lookup"),
                "draft": SpecDecoder(plain.model, "draft")}
    print(f"# commit {machine['commit']}; {machine['cpu']}; {platform.machine()}; "
          f"{plain.model.kernels}; greedy, "
          f"max {MAX_NEW} new tokens; median of {REPEATS} repeats")
    edits = [edit_prompt(code, instruction) for code, instruction in EDITS]
    edit_predictions = [f"```python\n{code}```" for code, _ in EDITS]
    asks = [regenerate_prompt(d) for d in DESCRIPTIONS]
    first = run(plain, [(a, None) for a in asks])[0]  # the answers a first request got
    answers = [plain.model.decode(ids) for ids in first]
    kinds = {"edit": (edits, edit_predictions), "regenerate": (asks, answers)}
    for kind, (prompts, predictions) in kinds.items():
        rows = {"ar": ("ar", None)}
        for method in ("lookup", "draft"):
            rows[method] = (method, None)
            rows[method + " + prediction"] = (method, predictions)
        run(decoders["draft"], [(prompts[0], None)])  # warm-up
        times: dict[str, list[float]] = {name: [] for name in rows}
        results = {}
        for _ in range(REPEATS):
            for name, (method, preds) in rows.items():
                requests = list(zip(prompts, preds or [None] * len(prompts)))
                outputs, seconds, tau = run(decoders[method], requests)
                times[name].append(seconds)
                results[name] = (outputs, tau)
        reference = results["ar"][0]
        base = statistics.median(times["ar"])
        print(f"\n## {kind}: {len(prompts)} requests, "
              f"{sum(len(o) for o in reference)} tokens of plain output")
        print(f"{'method':24} {'seconds':>8} {'x ar':>6} {'tau':>6}  identical")
        for name in rows:
            outputs, tau = results[name]
            same = sum(o == r for o, r in zip(outputs, reference))
            seconds = statistics.median(times[name])
            print(f"{name:24} {seconds:8.2f} {base / seconds:6.2f} {tau:6.2f}  "
                  f"{same}/{len(reference)}")


if __name__ == "__main__":
    main()
