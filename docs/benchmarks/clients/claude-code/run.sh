#!/bin/bash
# Claude Code against specdecode serve (the 1.5B), one non-interactive turn.
# Run from the repository root after `npm install @anthropic-ai/claude-code@2.1.337` in /tmp/cc and
# `mkdir /tmp/ccwork && printf "# hello\nsecond line\n" > /tmp/ccwork/README.md`; writes
# /tmp/cc_out.txt, /tmp/cc_err.txt, /tmp/cc_server.log and /tmp/cc_metrics.txt.
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
.venv/bin/specdecode serve --model qwen2.5-coder-1.5b --port 8811 --request-timeout 1500 \
  --prompt-cache 4G > /tmp/cc_server.log 2>&1 &
SERVER=$!
for i in $(seq 1 300); do curl -sf http://127.0.0.1:8811/health >/dev/null && break; sleep 1; done
echo "server up after ${i}s"
cd /tmp/ccwork
start=$(date +%s.%N)
ANTHROPIC_BASE_URL=http://127.0.0.1:8811 ANTHROPIC_API_KEY=x ANTHROPIC_MODEL=qwen2.5-coder-1.5b \
ANTHROPIC_SMALL_FAST_MODEL=qwen2.5-coder-1.5b ANTHROPIC_DEFAULT_HAIKU_MODEL=qwen2.5-coder-1.5b \
CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 API_TIMEOUT_MS=1500000 \
  timeout 1700 /tmp/cc/node_modules/.bin/claude -p "${1:-print the first line of README.md}" \
  > /tmp/cc_out.txt 2> /tmp/cc_err.txt
echo "claude exit $? after $(echo "$(date +%s.%N) - $start" | bc) s"
curl -s http://127.0.0.1:8811/metrics > /tmp/cc_metrics.txt
kill -TERM $SERVER; wait $SERVER
