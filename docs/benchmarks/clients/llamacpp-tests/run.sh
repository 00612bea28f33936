#!/usr/bin/env bash
# Run llama.cpp's server test suite (tools/server/tests) against `specdecode serve` through shim.py.
#
#   docs/benchmarks/clients/llamacpp-tests/run.sh                    # the files below
#   docs/benchmarks/clients/llamacpp-tests/run.sh unit/test_basic.py # other files / pytest args
#
# Environment: LLAMACPP_TESTS (the tests dir), OUT (where the log, junit xml and shim report go),
# VENV (default: the repo's .venv), LOG (default $OUT/run1.log), PYTEST_MARK (default "not slow":
# the slow tests download multi-GB models), SPECDECODE_REV (default HEAD: the servers run a copy of
# that commit's src/, exported under $OUT, so edits in progress in the working tree do not change the
# run; "worktree": the working tree as installed), plus the SHIM_* variables documented in shim.py.
set -uo pipefail

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd -- "$HERE/../../../.." && pwd)
LLAMACPP_TESTS=${LLAMACPP_TESTS:-/tmp/lcpp/llama_cpp_python-0.3.36/vendor/llama.cpp/tools/server/tests}
OUT=${OUT:-/tmp/lcpp}
VENV=${VENV:-$REPO/.venv}
LOG=${LOG:-$OUT/run1.log}
JUNIT=${JUNIT:-$OUT/junit.xml}
PYTEST_MARK=${PYTEST_MARK:-not slow}
PY="$VENV/bin/python"
mkdir -p "$OUT"

[ -d "$LLAMACPP_TESTS/unit" ] || { echo "no llama.cpp tests at $LLAMACPP_TESTS" >&2; exit 2; }
[ -x "$PY" ] || { echo "no python at $PY (set VENV)" >&2; exit 2; }

# The suite's requirements (tests/requirements.txt): only what is missing is installed; versions
# already in the venv are left alone.
for req in "wget~=3.2" "filelock" "aiohttp" "prometheus-client" "requests" "openai" "pytest" "numpy"; do
    name=${req%%[~=<>]*}
    if ! "$PY" -m pip show -q "$name" >/dev/null 2>&1; then
        echo "installing missing $req into $VENV"
        "$PY" -m pip install -q "$req" || exit 2
    fi
done

SPECDECODE_REV=${SPECDECODE_REV:-HEAD}
if [ "$SPECDECODE_REV" = worktree ]; then
    SERVED="working tree $(git -C "$REPO" rev-parse --short HEAD) + $(git -C "$REPO" status --short -- src | wc -l) changed paths in src"
    unset SHIM_SERVER_PYTHONPATH
else
    sha=$(git -C "$REPO" rev-parse --short "$SPECDECODE_REV") || exit 2
    SNAP="$OUT/specdecode-$sha"
    if [ ! -d "$SNAP/src/specdecode" ]; then
        mkdir -p "$SNAP" && git -C "$REPO" archive "$sha" src | tar -x -C "$SNAP" || exit 2
    fi
    export SHIM_SERVER_PYTHONPATH="$SNAP/src"
    SERVED="commit $sha ($SNAP/src)"
fi

# The acceptance files, then the informational ones.
FILES=(
    test_chat_completion.py test_completion.py test_infill.py test_tool_call.py
    test_compat_oai_responses.py test_compat_anthropic.py test_tokenize.py test_security.py
    test_basic.py test_stream.py test_template.py
)
if [ $# -gt 0 ]; then
    ARGS=("$@")
else
    ARGS=()
    for f in "${FILES[@]}"; do ARGS+=("unit/$f"); done
fi

{
    echo "# $(date -Is) specdecode served: $SERVED"
    echo "# tests: $LLAMACPP_TESTS   model: ${SHIM_MODEL:-smollm2-135m}   threads: ${SHIM_THREADS:-2}"
} | tee "$LOG"

# Run from the tests dir (the tests use paths relative to it) without writing into it:
# no .pytest_cache, no __pycache__, pytest's tmp dirs under $OUT.
cd "$LLAMACPP_TESTS"
PYTHONDONTWRITEBYTECODE=1 \
PYTHONPATH="$HERE:$LLAMACPP_TESTS${PYTHONPATH:+:$PYTHONPATH}" \
SHIM_REPORT=${SHIM_REPORT:-$OUT/shim-report.json} \
SHIM_LOG_DIR=${SHIM_LOG_DIR:-$OUT/shim-servers} \
    "$PY" -m pytest -p shim -p no:cacheprovider -p no:random_order \
        -m "$PYTEST_MARK" -v -rfE --durations=20 \
        --basetemp="$OUT/pytest-tmp" --junitxml="$JUNIT" -o junit_family=xunit1 \
        "${ARGS[@]}" 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}

"$PY" - "$JUNIT" <<'EOF' | tee -a "$LOG"
import collections, sys, xml.etree.ElementTree as ET
counts = collections.defaultdict(collections.Counter)
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    f = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
    f = f.split("/")[-1]
    kinds = {child.tag for child in case}
    kind = ("failed" if "failure" in kinds else "errors" if "error" in kinds
            else "skipped" if "skipped" in kinds else "passed")
    counts[f][kind] += 1
cols = ("passed", "failed", "skipped", "errors")
print(f"\n{'file':32s} " + " ".join(f"{c:>7s}" for c in cols) + "   total")
total = collections.Counter()
for f in sorted(counts):
    total.update(counts[f])
    print(f"{f:32s} " + " ".join(f"{counts[f][c]:7d}" for c in cols) + f"   {sum(counts[f].values()):5d}")
print(f"{'TOTAL':32s} " + " ".join(f"{total[c]:7d}" for c in cols) + f"   {sum(total.values()):5d}")
EOF
exit $rc
