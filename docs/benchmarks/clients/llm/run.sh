#!/bin/bash
# Simon Willison's `llm` CLI against specdecode serve (the 1.5B): `llm --schema` as its users run
# it, with a schema that (like most a client generates) does not say additionalProperties: false.
# Run after `python -m venv /tmp/llmcli && /tmp/llmcli/bin/pip install llm==0.36`; prints the
# answer and its wall time.
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
export LLM_USER_PATH=/tmp/llmcli/home
mkdir -p "$LLM_USER_PATH"
cat > "$LLM_USER_PATH/extra-openai-models.yaml" <<YAML
- model_id: specdecode
  model_name: qwen2.5-coder-1.5b
  api_base: "http://127.0.0.1:8811/v1"
  supports_schema: true
YAML
.venv/bin/specdecode serve --model qwen2.5-coder-1.5b --port 8811 > /tmp/llm_server.log 2>&1 &
SERVER=$!
for i in $(seq 1 300); do curl -sf http://127.0.0.1:8811/health >/dev/null && break; sleep 1; done
/tmp/llmcli/bin/llm --version
for prompt in "Tell me about the largest city in Japan." "Describe a city in Brazil."; do
  start=$(date +%s.%N)
  /tmp/llmcli/bin/llm -m specdecode --schema 'name, country, population_millions float' \
    -o temperature 0 "$prompt"
  echo "exit $? after $(echo "$(date +%s.%N) - $start" | bc) s"
done
kill $SERVER; wait $SERVER
