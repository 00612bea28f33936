"""Acceptance checks for logprobs and n on the 1.5B, through `specdecode serve` started as a
user starts it and the official `openai` client:

1. `top_logprobs` (5) of the default method equal plain decoding's (`ar`, same server, same
   requests) within 1e-4 on 20 Spec-Bench prompts (the first turn of every fourth question):
   the same tokens, every token's and every alternative's log-probability.
2. `n=4`: plain sampling (temperature 0.8, seed 11): 4 choices, each the same as the request
   made alone with n=1 and seed 11 + i, and the four decoded together against one after the
   other (seconds); the default method: greedy choices all plain greedy's, sampled ones distinct.
3. lm-evaluation-harness (`lm-eval[api]==0.4.13` in its own venv, LMEVAL) runs a 10-question
   multiple-choice task on local JSON (lmeval_task.jsonl) through `local-completions` against
   the server with the default method and with `--method ar`: accuracy and every per-choice
   log-likelihood compared.

    LMEVAL=/work/lmeval-venv/bin/lm_eval .venv/bin/python docs/benchmarks/logprobs/check.py \\
        > docs/benchmarks/logprobs/check.txt
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import openai

import specdecode
from specdecode.app.bench.load import Server as Child
from specdecode.models.loader import resolve_source

MODEL = "qwen2.5-coder-1.5b"
HERE = Path(__file__).parent
DATA = Path(specdecode.__file__).parent / "data" / "specbench_question.jsonl"
TASK = """task: tiny_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: answer
target_delimiter: " "
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


class Server:
    """`specdecode serve --model MODEL` in a child process (`bench --load`'s), the `openai`
    client on it."""

    def __init__(self, *args: str) -> None:
        self.child = Child(["--model", MODEL, *args])

    def __enter__(self) -> openai.OpenAI:
        self.child.wait()
        self.url = self.child.url
        return openai.OpenAI(base_url=self.url + "/v1", api_key="x", max_retries=0, timeout=900)

    def __exit__(self, *exc) -> None:
        self.child.stop()


def prompts() -> list[str]:
    questions = [json.loads(line) for line in DATA.read_text().splitlines()]
    return [q["turns"][0] for q in questions[::4][:20]]


def logprobs_equal(client: openai.OpenAI) -> None:
    worst, tokens, accepted, drafted, differ = 0.0, 0, 0, 0, 0
    for prompt in prompts():
        answers = {}
        for method in ("draft", "ar"):
            answers[method] = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=48,
                temperature=0, logprobs=True, top_logprobs=5,
                extra_body={"speculative": {"method": method}})
        spec, plain = answers["draft"], answers["ar"]
        stats = spec.usage.model_dump()["speculative"]
        accepted, drafted = accepted + stats["accepted"], drafted + stats["drafted"]
        a, b = spec.choices[0].logprobs.content, plain.choices[0].logprobs.content
        if [x.bytes for x in a] != [x.bytes for x in b]:
            differ += 1
            continue
        for x, y in zip(a, b):
            tokens += 1
            worst = max(worst, abs(x.logprob - y.logprob))
            assert [t.bytes for t in x.top_logprobs] == [t.bytes for t in y.top_logprobs]
            worst = max([worst] + [abs(s.logprob - t.logprob)
                                   for s, t in zip(x.top_logprobs, y.top_logprobs)])
    print(f"1. logprobs, 20 prompts x 48 tokens, top_logprobs 5: {tokens} tokens compared, "
          f"prompts whose tokens differ {differ}, largest |difference| {worst:.3g} "
          f"(draft accepted {accepted} of {drafted} drafted)")


def n_choices(client: openai.OpenAI) -> None:
    prompt = "Write a Python function that checks whether a number is prime."
    ask = dict(model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=64)

    def texts(response) -> list[str]:
        return [c.message.content for c in response.choices]

    plain = {"speculative": {"method": "ar"}}
    t0 = time.perf_counter()
    together = client.chat.completions.create(n=4, seed=11, temperature=0.8, extra_body=plain,
                                              **ask)
    t1 = time.perf_counter()
    alone = [client.chat.completions.create(seed=11 + i, temperature=0.8, extra_body=plain,
                                            **ask) for i in range(4)]
    t2 = time.perf_counter()
    same = [t == a.choices[0].message.content for t, a in zip(texts(together), alone)]
    print(f"2. n=4, ar, temperature 0.8, seed 11: {len(together.choices)} choices, each equal to "
          f"its run alone with seed 11 + i: {same}; distinct texts {len(set(texts(together)))}; "
          f"together {t1 - t0:.1f} s, one after the other {t2 - t1:.1f} s "
          f"({(t2 - t1) / (t1 - t0):.2f}x)")
    greedy = client.chat.completions.create(n=4, temperature=0, **ask)
    reference = client.chat.completions.create(temperature=0, extra_body=plain, **ask)
    print(f"   n=4, default method, greedy: every choice equal to plain greedy: "
          f"{[t == reference.choices[0].message.content for t in texts(greedy)]}")
    sampled = client.chat.completions.create(n=4, seed=11, temperature=0.8, **ask)
    print(f"   n=4, default method, temperature 0.8: {len(set(texts(sampled)))} distinct texts")


def lm_eval(label: str, workdir: Path, url: str) -> dict[str, list[float]]:
    """Run the task; per question, the choices' log-likelihoods (and print the accuracy)."""
    out = workdir / label
    args = (f"model={MODEL},base_url={url}/v1/completions,"
            f"tokenizer_backend=huggingface,tokenizer={resolve_source(MODEL)[0]},"
            f"num_concurrent=1,max_retries=1,timeout=900")
    subprocess.run([os.environ["LMEVAL"], "run", "--model", "local-completions", "--model_args",
                    args, "--include_path", str(workdir), "--tasks", "tiny_mc", "--batch_size",
                    "1", "--log_samples", "--output_path", str(out)], check=True,
                   env={**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
                        "OPENAI_API_KEY": "x"}, capture_output=True)
    samples = next(out.rglob("samples_tiny_mc_*.jsonl"))
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    acc = sum(r["acc"] for r in rows) / len(rows)
    print(f"   {label}: accuracy {acc:.2f} on {len(rows)} questions")
    return {r["doc"]["question"]: [float(x[0][0]) for x in r["resps"]] for r in rows}


def main() -> None:
    print(f"model {MODEL}; server default method (draft) and ar")
    with Server() as client:
        logprobs_equal(client)
        n_choices(client)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "tiny_mc.yaml").write_text(TASK.format(data=HERE / "lmeval_task.jsonl"))
        print("3. lm-evaluation-harness, local-completions, tiny_mc (10 questions x 4 choices)")
        with (server := Server()):
            spec = lm_eval("default method", workdir, server.url)
        with (server := Server("--method", "ar")):
            plain = lm_eval("ar", workdir, server.url)
        worst = max(abs(a - b) for q in spec for a, b in zip(spec[q], plain[q], strict=True))
        print(f"   per-choice log-likelihoods, largest |difference| {worst:.3g} over "
              f"{sum(map(len, spec.values()))} choices")


if __name__ == "__main__":
    main()
