"""Every place in mcp_rl that starts a process, found by reading the code (not by running it):
each one that runs user code gets its environment from `Settings.user_code_env` (the allow-list
plus what the task names), and each one that does not is on a list below with its reason.

A new `subprocess.Popen`, `os.fork`, `processes.spawn`, ... anywhere in the package fails this
test until it is routed through `user_code_env` or added to `OUR_CODE` with why it may carry keys.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mcp_rl.settings import Settings

PACKAGE = Path(__file__).resolve().parents[2] / "mcp_rl"

# Calls that start a process (the last part of the called name, with what may precede it).
STARTERS = {
    ("subprocess", "run"),
    ("subprocess", "Popen"),
    ("subprocess", "call"),
    ("subprocess", "check_call"),
    ("subprocess", "check_output"),
    ("asyncio", "create_subprocess_exec"),
    ("asyncio", "create_subprocess_shell"),
    ("os", "fork"),
    ("os", "forkpty"),
    ("os", "system"),
    ("os", "popen"),
    ("os", "posix_spawn"),
    ("os", "posix_spawnp"),
    ("multiprocessing", "Process"),
    ("pty", "spawn"),
    # mcp-rl's own starters (processes.spawn, background.start_worker) and the runner of children
    ("processes", "spawn"),
    (None, "spawn"),
    (None, "start_worker"),
    (None, "run_child"),
}
OS_EXEC_PREFIXES = ("exec", "spawn")  # os.execv*, os.spawnv* ...

# Functions whose environment is built right there from the allow-list.
USER_CODE_ENV_CALLS = ("user_code_env", "introspection_env")

# Process starts that run only mcp-rl's own code (or a program we chose), so they may carry keys,
# or whose environment was already filtered when their process was started: why, each.
OUR_CODE = {
    "mcp_rl/processes.py:spawn": "the generic starter; each caller is checked here by its own site",
    "mcp_rl/background.py:start_worker": "the generic job starter; each caller is checked by its own site",
    "mcp_rl/environments/child.py:run_json_child": "passes user_code_env() or a caller's introspection_env",
    "mcp_rl/environments/child.py:run_child": "THE runner of user-code children; env comes from its callers "
    "(validate, item_stats, run_json_child, uv_setup.check_sync), each checked here",
    "mcp_rl/environments/introspect_worker.py:IntrospectionWorker._ensure_started": "introspection_env(...)",
    "mcp_rl/environments/introspect_child.py:_serve_one": "a fork of the introspection worker, which was "
    "started with introspection_env: nothing more to filter",
    "mcp_rl/environments/uv_setup.py:pip_settings": "pip config list with the caller's env (harness_env: "
    "inside the verifiers environment process, already the user-code environment)",
    "mcp_rl/environments/validate_atropos.py:LocalModel.__init__": "mcp-rl's model server, started inside "
    "the validation child (already the user-code environment; in its process group)",
    "mcp_rl/environments/families.py:_run": "venv/pip of the family builder, started with user_code_env()",
    "mcp_rl/environments/bundled/openenv_env.py:OpenEnvEnv._serve_folder": "inside the environment "
    "process, whose environment is already the user-code one",
    "mcp_rl/environments/bundled/verifiers_env.py:Worker.__init__": "inside the environment process "
    "(already the user-code environment)",
    "mcp_rl/proof/env_eval.py:run_environment_evaluate": "its env is a parameter: each caller (the "
    "evaluation worker, the trainer's evaluate()) is held to user_code_env by the test below",
    "mcp_rl/inference_test/runner.py:TestWorker._start": "child_env() of that module, built on user_code_env",
    "mcp_rl/inference_test/runner.py:LocalServer.spawn": "mcp-rl's own model server (serve_model), no user code",
    "mcp_rl/evaluation/serving.py:start": "mcp-rl's own model server (serve_model), no user code",
    "mcp_rl/evaluation/checkpoint_eval.py:start_planned": "the evaluation worker (mcp-rl's code; it needs the "
    "Tinker/OpenRouter keys); the environment it runs gets user_code_env",
    "mcp_rl/inference_test/service.py:start_test": "the smoke-test worker (mcp-rl's code; it holds the OpenRouter "
    "key for its gateway); the environment it runs gets user_code_env",
    "mcp_rl/weights/jobs.py:start": "the export worker (mcp-rl's code; it needs the Hub token)",
    "mcp_rl/supervisor/start.py:_launch_supervisor": "the run's supervisor (mcp-rl's code): the trainer needs "
    "the keys; the environment process it starts gets user_code_env (supervisor/launch.py)",
    "mcp_rl/supervisor/reconcile.py:launch_stopper": "the detached stopper of a run (mcp-rl's code; it runs no user code)",
    "mcp_rl/supervisor/supervisor.py:RunSupervisor._spawn": "the run's three processes, each with the env "
    "supervisor/launch.py built (user_code_env for the environment and run-api)",
    "mcp_rl/supervisor/launchers/slurm.py:_run": "sbatch/squeue/scancel: the scheduler's own commands",
    "mcp_rl/supervisor/launchers/slurm.py:SlurmLauncher.dry_run": "sbatch --test-only (the scheduler)",
    "mcp_rl/supervisor/tinker_sdk.py:sdk_path": "pip installing the pinned Tinker SDK for our trainer",
}


def _name_parts(func: ast.expr) -> tuple[str | None, str]:
    if isinstance(func, ast.Attribute):
        value = func.value
        owner = value.id if isinstance(value, ast.Name) else value.attr if isinstance(value, ast.Attribute) else None
        return owner, func.attr
    if isinstance(func, ast.Name):
        return None, func.id
    return None, ""


def _is_start(call: ast.Call) -> bool:
    owner, name = _name_parts(call.func)
    if (owner, name) in STARTERS or (None, name) in STARTERS and owner in (None, "processes", "background"):
        return True
    return owner == "os" and name.startswith(OS_EXEC_PREFIXES)


def process_starts() -> dict[str, list[str]]:
    """'path:Class.function' of every function that starts a process -> the source of that function."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        rel = path.relative_to(PACKAGE.parent).as_posix()

        def visit(node: ast.AST, scope: list[str], top: ast.AST | None) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    inner = [*scope, child.name]
                    # a site is named by its outermost function (nested helpers belong to it)
                    visit(child, inner, top if top is not None or isinstance(child, ast.ClassDef) else child)
                    continue
                if isinstance(child, ast.Call) and _is_start(child):
                    owner = top or child
                    name = ".".join(scope[: _depth(scope, node, top)]) if top is not None else "<module>"
                    found.setdefault(f"{rel}:{name}", []).append(ast.get_source_segment(source, owner) or "")
                visit(child, scope, top)

        visit(tree, [], None)
    return found


def _depth(scope: list[str], node: ast.AST, top: ast.AST | None) -> int:
    assert top is not None
    name = getattr(top, "name", "")
    return scope.index(name) + 1 if name in scope else len(scope)


def test_every_process_start_is_known_and_user_code_gets_the_allow_list() -> None:
    starts = process_starts()
    assert len(starts) > 15, f"the scan found too few process starts to be right: {sorted(starts)}"
    unknown = {
        site: "does not build its env with user_code_env and is not on OUR_CODE"
        for site, bodies in starts.items()
        if site not in OUR_CODE and not any(call in body for body in bodies for call in USER_CODE_ENV_CALLS)
    }
    assert unknown == {}, (
        "a process start that neither uses Settings.user_code_env nor is listed (with why) in OUR_CODE"
    )
    stale = sorted(set(OUR_CODE) - set(starts))
    assert stale == [], f"OUR_CODE names sites that start no process any more: {stale}"


# Starters whose environment comes from their caller: every call of one must build that
# environment with user_code_env (or leave it to the starter's own default, `env` omitted).
ENV_FROM_CALLER = {"run_environment_evaluate": "child_env", "run_child": "env", "run_json_child": "env"}


def test_every_caller_of_a_starter_that_takes_its_env_passes_the_allow_list() -> None:
    calls: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        rel = path.relative_to(PACKAGE.parent).as_posix()
        for top in ast.walk(ast.parse(source)):
            if not isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef) or top.name in ENV_FROM_CALLER:
                continue
            body = ast.get_source_segment(source, top) or ""
            for call in ast.walk(top):
                if not isinstance(call, ast.Call):
                    continue
                name = _name_parts(call.func)[1]
                if name not in ENV_FROM_CALLER:
                    continue
                keyword = next((k for k in call.keywords if k.arg == ENV_FROM_CALLER[name]), None)
                passed = ast.get_source_segment(source, keyword.value) if keyword is not None else None
                calls.setdefault(f"{rel}:{top.name} -> {name}", []).append(passed or "")
                if name == "run_json_child" and keyword is None:
                    continue  # its default is user_code_env()
                assert passed is not None, f"{rel}:{top.name} calls {name} without its environment"
                built_here = any(c in passed for c in USER_CODE_ENV_CALLS) or any(
                    f"{passed} = {c}" in body.replace("settings.", "").replace("self.", "")
                    or (f"{passed} = " in body and c in body)
                    for c in USER_CODE_ENV_CALLS
                )
                assert built_here, f"{rel}:{top.name} passes {name} an environment not built by user_code_env: {passed}"
    # the scan saw the callers it must (validate, item counts, introspection, config checks,
    # the GEM catalog, the evaluation worker and the trainer's evaluate())
    assert len(calls) >= 7, sorted(calls)


def test_keys_reach_a_child_only_where_our_own_code_runs() -> None:
    """`Settings.child_env` (our keys) is used only by the starts of mcp-rl's own programs."""
    allowed = {
        "mcp_rl/supervisor/start.py",  # the supervisor, and a cluster job that runs it
        "mcp_rl/supervisor/reconcile.py",  # a supervisor restarted
        "mcp_rl/supervisor/launch.py",  # the trainer (not the environment, not run-api)
        "mcp_rl/evaluation/serving.py",  # our model server
        "mcp_rl/evaluation/checkpoint_eval.py",  # the evaluation worker
        "mcp_rl/inference_test/service.py",  # the smoke-test worker
        "mcp_rl/inference_test/runner.py",  # our local model server (keys stripped)
        "mcp_rl/weights/jobs.py",  # the export worker
        "mcp_rl/settings.py",  # where it is defined
    }
    users = {
        path.relative_to(PACKAGE.parent).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "child_env(" in path.read_text(encoding="utf-8").replace("def child_env(", "")
        and ".child_env(" in path.read_text(encoding="utf-8")
    }
    assert users - allowed == set(), "settings.child_env (with keys) used where user code may run"


FAKE = {
    "TINKER_API_KEY": "tml-FAKEtinkerKEY0123456789abcdef",
    "OPENROUTER_API_KEY": "sk-or-v1-FAKEopenrouterKEY0123456789",
    "WANDB_API_KEY": "FAKEwandbKEY0123456789abcdef0123456789ab",
    "HF_TOKEN": "hf_FAKEhubTOKEN0123456789abcdefXYZ",
    "HUGGING_FACE_HUB_TOKEN": "hf_FAKEhubALIAS0123456789abcdefXYZ",
    "MCP_RL_TOKEN": "FAKEhttpTOKEN0123456789abcdef",
}


@pytest.mark.parametrize("named", [(), ("MY_SERVICE_KEY",), ("HF_TOKEN", "MY_SERVICE_KEY")])
def test_user_code_env_is_the_allow_list_plus_what_is_named(tmp_path: Path, named: tuple[str, ...]) -> None:
    server_env = {
        **FAKE,
        "MCP_RL_HOME": str(tmp_path),
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PIP_INDEX_URL": "https://mirror.example/simple",
        "PIP_PASSWORD": "no-credentials-by-prefix",
        "HF_HUB_OFFLINE": "1",
        "AWS_SECRET_ACCESS_KEY": "FAKEawsSECRET0123456789",
        "OPENAI_API_KEY": "sk-FAKEopenai0123456789",
        "DATABASE_URL": "postgres://user:pw@db/x",
        "MY_SERVICE_KEY": "FAKEmyservice0123456789",
    }
    settings = Settings.from_env(server_env)
    env = settings.user_code_env(named, base=server_env)
    for name in ("PATH", "HOME", "LANG", "LC_ALL", "PIP_INDEX_URL", "HF_HUB_OFFLINE"):
        assert env[name] == server_env[name], name
    for name in ("PIP_PASSWORD", "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY", "DATABASE_URL", *FAKE):
        if name not in named:
            assert name not in env, name
    for name in named:
        assert env[name] == server_env[name]
    values = "\n".join(env.values())
    for name, value in FAKE.items():
        assert (value in values) == (name in named), name


def test_a_placeholder_key_is_never_passed_even_when_named(tmp_path: Path) -> None:
    server_env = {"MCP_RL_HOME": str(tmp_path), "HF_TOKEN": "${HF_TOKEN}", "PATH": "/bin"}
    env = Settings.from_env(server_env).user_code_env(["HF_TOKEN"], base=server_env)
    assert "HF_TOKEN" not in env


def test_a_task_names_its_variables_in_env_vars_read_without_importing_it(tmp_path: Path) -> None:
    from mcp_rl.environments.discovery import declared_env_vars, parse_file

    path = tmp_path / "judged.py"
    path.write_text(
        "raise SystemExit('never imported')\n"
        "from mcp_rl.task import Task\n"
        "NAMES = ('FROM_A_NAME',)\n"
        "class Judged(Task):\n"
        "    env_vars = ('JUDGE_API_KEY', 'JUDGE_URL', 'not a name', 3)\n"
        "class Indirect(Task):\n"
        "    env_vars = NAMES  # not a literal: nothing is granted\n",
        encoding="utf-8",
    )
    found = {env.class_name: env.env_vars for env in parse_file(path)}
    assert found == {"Judged": ["JUDGE_API_KEY", "JUDGE_URL"], "Indirect": []}
    assert declared_env_vars(path, "Judged") == ["JUDGE_API_KEY", "JUDGE_URL"]
    assert declared_env_vars(path, "Missing") == [] and declared_env_vars(tmp_path / "gone.py", "Judged") == []


def test_task_code_run_in_process_does_not_see_the_keys_our_clients_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trainer and the evaluation worker make a task's held-out items in-process: its code
    finds no Tinker or OpenRouter key in os.environ unless it names it."""
    from mcp_rl.proof.heldout import held_out_set
    from mcp_rl.runconfig import EnvironmentRef

    path = tmp_path / "peek.py"
    path.write_text(
        "import os\n"
        "from mcp_rl.task import Task\n"
        "class Peek(Task):\n"
        "    env_vars = ('OPENROUTER_API_KEY',)\n"
        "    held_out_seeds = range(3)\n"
        "    def item(self, seed):\n"
        "        seen = sorted(n for n in ('TINKER_API_KEY', 'OPENROUTER_API_KEY') if os.environ.get(n))\n"
        "        return {'q': f'{seed}: ' + ','.join(seen), 'answer': '1'}\n"
        "    def prompt(self, item):\n"
        "        return item['q']\n"
        "    def score(self, completion, item):\n"
        "        return 1.0\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("TINKER_API_KEY", FAKE["TINKER_API_KEY"])
    monkeypatch.setenv("OPENROUTER_API_KEY", FAKE["OPENROUTER_API_KEY"])
    ref = EnvironmentRef(name="peek", class_name="Peek", file_path=path, project_root=tmp_path)
    items = held_out_set(ref, {})
    seen = {item.messages[-1]["content"].split(": ", 1)[1] for item in items.items}
    assert seen == {"OPENROUTER_API_KEY"}, seen
