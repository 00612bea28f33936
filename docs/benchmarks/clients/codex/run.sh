#!/bin/bash
# The Codex CLI against specdecode serve (the 1.5B), one `codex exec` turn over the Responses API.
# Run after `npm install @openai/codex@0.171.0` in /tmp/codex and
# `mkdir /tmp/ccwork && printf "# hello\nsecond line\n" > /tmp/ccwork/README.md`; writes
# /tmp/codex_out.txt, /tmp/codex_server.log and /tmp/codex_metrics.txt.
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
mkdir -p /tmp/codexrun
cat > /tmp/codexrun/config.toml <<TOML
model = "qwen2.5-coder-1.5b"
model_provider = "specdecode"

[model_providers.specdecode]
name = "specdecode"
base_url = "http://127.0.0.1:8811/v1"
wire_api = "responses"
TOML
.venv/bin/specdecode serve --model qwen2.5-coder-1.5b --port 8811 --request-timeout 1500 \
  --prompt-cache 4G > /tmp/codex_server.log 2>&1 &
SERVER=$!
for i in $(seq 1 300); do curl -sf http://127.0.0.1:8811/health >/dev/null && break; sleep 1; done
echo "server up after ${i}s"
cd /tmp/ccwork
start=$(date +%s.%N)
CODEX_HOME=/tmp/codexrun timeout 1700 /tmp/codex/node_modules/.bin/codex exec \
  --skip-git-repo-check "${1:-print the first line of README.md}" > /tmp/codex_out.txt 2>&1
echo "codex exit $? after $(echo "$(date +%s.%N) - $start" | bc) s"
curl -s http://127.0.0.1:8811/metrics > /tmp/codex_metrics.txt
kill -TERM $SERVER; wait $SERVER
