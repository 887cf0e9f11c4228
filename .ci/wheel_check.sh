#!/usr/bin/env bash
# CI: the wheel stands on its own. Build it from the checkout, install it with all its declared
# dependencies into a fresh virtual environment (nothing from .venv or the checkout), then start
# that environment's `mcp-rl serve` over stdio from outside the checkout and check that it answers
# initialize, tools/list, prompts/list and a tool call that reads the bundled environments.
#
# A full install (~150 packages, ~1.2 GB) takes 2.5-3.5 min on the 2-core CI machine with a warm
# pip cache; it is the only way to prove the wheel's own metadata is enough (an overlay of .venv
# would let packages the wheel forgot to declare, and the checkout's editable install, answer).
# The versions are pinned to the ones .venv was tested with (constraints only pin, they add no
# package): a release published since bootstrap cannot fail this check, and pip resolves faster.
# MCP_RL_PYTHON overrides the interpreter the venv is made from (default: the one behind .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BASE=${MCP_RL_PYTHON:-$("$ROOT/.venv/bin/python" -c "import sys; print(sys._base_executable)")}

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
start=$(date +%s)

echo "Wheel: build"
# pip warns about every package missing from this machine's extra local indexes: noise. A failure
# of pip still fails the pipeline (pipefail); only grep's "nothing left to print" is ignored.
quiet() { grep -v "^WARNING: Location" || true; }
"$BASE" -m pip wheel --no-deps --quiet --wheel-dir "$WORK/dist" "$ROOT" 2>&1 | quiet
WHEEL=$(ls "$WORK"/dist/mcp_rl-*.whl)
echo "  built $(basename "$WHEEL")"

echo "Wheel: install into a fresh venv (with its dependencies)"
CONSTRAINTS=()
if [ -x "$ROOT/.venv/bin/pip" ]; then
    "$ROOT/.venv/bin/pip" freeze --exclude-editable 2>/dev/null | grep -v -e ' @ ' -e '^mcp-rl==' >"$WORK/constraints.txt" || true
    CONSTRAINTS=(--constraint "$WORK/constraints.txt")
fi
"$BASE" -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install --quiet "${CONSTRAINTS[@]}" "$WHEEL" 2>&1 | quiet
"$WORK/venv/bin/pip" check >/dev/null
echo "  installed in $(( $(date +%s) - start )) s"

echo "Wheel: mcp-rl serve answers over stdio"
# From an empty folder, with no PYTHONPATH: only the installed wheel can answer.
mkdir -p "$WORK/elsewhere"
cd "$WORK/elsewhere"
env -u PYTHONPATH MCP_RL_HOME="$WORK/home" "$WORK/venv/bin/python" - "$WORK/venv" "$WHEEL" <<'EOF'
import subprocess, sys
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

venv, wheel = Path(sys.argv[1]), Path(sys.argv[2])
import mcp_rl

assert Path(mcp_rl.__file__).resolve().is_relative_to(venv.resolve()), f"mcp_rl imported from {mcp_rl.__file__}"
version = wheel.name.split("-")[1]
shown = subprocess.run([venv / "bin" / "mcp-rl", "--version"], capture_output=True, text=True, check=True).stdout.strip()
assert shown == f"mcp-rl {version}", shown


async def main() -> None:
    import os

    params = StdioServerParameters(command=str(venv / "bin" / "mcp-rl"), args=["serve"],
                                   env={"MCP_RL_HOME": os.environ["MCP_RL_HOME"]})
    with anyio.fail_after(120):
        async with Client(params, mode="legacy") as client:
            assert client.server_info.version == version, client.server_info
            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"rl_list_environments", "rl_start_training", "rl_get_results"} <= tools, tools
            prompts = {p.name for p in (await client.list_prompts()).prompts}
            assert "train_environment" in prompts, prompts
            listed = await client.call_tool("rl_list_environments", {})
            assert not listed.is_error, listed.content
            names = [e["name"] for e in listed.structured_content["environments"]]
            assert "arithmetic" in names, names  # the bundled environments are in the wheel
            print(f"  tools/list: {len(tools)} tools; prompts/list: {len(prompts)} prompts; environments: {', '.join(names)}")


anyio.run(main)
EOF
echo "Wheel check passed in $(( $(date +%s) - start )) s"
