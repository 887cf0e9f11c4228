"""The tasks extension's rules, in memory (fast tier): who gets a task, what `tasks/get` reads
from a job's folder, and `tasks/cancel` through the background-job module. An export job is
made by hand here (a real sleeping worker, its status and spec as mcp_rl.weights.jobs writes
them); the smoke-test path end to end is tests/server/test_e2e_tasks.py."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError
from mcp.types import INVALID_PARAMS, METHOD_NOT_FOUND, MISSING_REQUIRED_CLIENT_CAPABILITY

from mcp_rl import background, processes
from mcp_rl.evaluation import checkpoint_eval
from mcp_rl.evaluation.checkpoint_models import RESULT_FILE, SPEC_FILE, CheckpointInfo, EvalState, EvaluationResult
from mcp_rl.server import build_server
from mcp_rl.settings import Settings
from mcp_rl.weights import jobs
from mcp_rl.weights.export import ExportResult, ExportSpec
from tests.kit.mcp_tasks import TasksClient, tasks_request

pytestmark = pytest.mark.anyio

SLEEPER = [sys.executable, "-c", "import time; time.sleep(300)"]


def export_job(settings: Settings, export_id: str, state: jobs.ExportState) -> Path:
    """An export as rl_export_weights leaves it: spec, status and (while running) its worker."""
    job_dir = settings.exports_dir / export_id
    job_dir.mkdir(parents=True)
    dest = settings.home / "out" / export_id
    spec = ExportSpec(
        run_id="r1",
        run_dir=settings.runs_dir / "r1",
        step=2,
        weights=str(settings.runs_dir / "r1" / "checkpoints" / "step_2"),
        format="adapter",
        dest=dest,
        base_model="base",
        environment="arithmetic",
    )
    (job_dir / jobs.SPEC_FILE).write_text(spec.model_dump_json(), encoding="utf-8")
    status = jobs.ExportStatus(
        export_id=export_id, run_id="r1", state=state, phase="merging", started_at=time.time(), dest=str(dest)
    )
    if state == jobs.ExportState.DONE:
        status.result = ExportResult(dest=str(dest), format="adapter", files=["a"], size_bytes=10, seconds=1.0)
    else:
        status.marker = processes.marker_for("export", job_dir)
        env = {"PATH": os.environ.get("PATH", "")}
        worker = background.start_worker(SLEEPER, job_dir, job_dir / jobs.LOG_FILE, env, marker=status.marker)
        status.pid = worker.pid
    jobs.write_status(job_dir, status)
    return job_dir


def evaluation(settings: Settings, eval_id: str, state: EvalState) -> Path:
    """An evaluation as rl_evaluate_checkpoint leaves it: spec, result and (running) its worker."""
    folder = checkpoint_eval.evaluations_dir(settings) / eval_id
    folder.mkdir(parents=True)
    (folder / SPEC_FILE).write_text("{}", encoding="utf-8")  # its presence names the evaluation
    now = time.time()
    result = EvaluationResult(
        eval_id=eval_id,
        state=state,
        run_id="r1",
        step=2,
        environment="arithmetic",
        items=10,
        held_out="the environment's held-out items",
        checkpoint=CheckpointInfo(model="run:r1@2", weights="/w", backend="local", base_model="base", final=True),
        models=[],
        started_at=now,
        updated_at=now,
        elapsed_s=0.0,
        message=f"Evaluation {eval_id}: {state}.",
    )
    (folder / RESULT_FILE).write_text(result.model_dump_json(), encoding="utf-8")
    if state == "running":
        env = {"PATH": os.environ.get("PATH", "")}
        background.start_worker(
            SLEEPER, folder, folder / "worker.log", env, marker=processes.marker_for("eval", folder)
        )
    return folder


async def test_tasks_follow_an_evaluation_the_same_way(home: Path) -> None:
    settings = Settings.from_env({"MCP_RL_HOME": str(home)})
    running = evaluation(settings, "ev-running", "running")
    evaluation(settings, "ev-done", "completed")
    worker = background.read_worker(running)
    assert worker is not None
    async with Client(build_server(settings), extensions=[TasksClient()]) as client:
        working = await tasks_request(client, "tasks/get", "eval:ev-running")
        done = await tasks_request(client, "tasks/get", "eval:ev-done")
        collected = await client.call_tool("rl_get_evaluation", {"eval_id": "ev-done"})
        await tasks_request(client, "tasks/cancel", "eval:ev-running")
        cancelled = await tasks_request(client, "tasks/get", "eval:ev-running")
    assert working.status == "working" and done.status == "completed"
    assert done.result is not None and done.result["structuredContent"] == collected.structured_content
    # This worker could not say "cancelled" itself (a sleeper, killed): the recorded cancel does.
    assert cancelled.status == "cancelled"
    assert not processes.is_alive(worker.pid, worker.create_time)


async def error_code(client: Client, method: str, task_id: str) -> int:
    with pytest.raises(MCPError) as raised:
        await tasks_request(client, method, task_id)
    return raised.value.code


async def test_tasks_get_follows_an_export_and_tasks_cancel_ends_it(home: Path) -> None:
    settings = Settings.from_env({"MCP_RL_HOME": str(home)})
    running = export_job(settings, "exp-running", jobs.ExportState.RUNNING)
    export_job(settings, "exp-done", jobs.ExportState.DONE)
    worker = background.read_worker(running)
    assert worker is not None
    async with Client(build_server(settings), extensions=[TasksClient()]) as client:
        working = await tasks_request(client, "tasks/get", "export:exp-running")
        done = await tasks_request(client, "tasks/get", "export:exp-done")
        collected_done = await client.call_tool("rl_get_export_result", {"export_id": "exp-done"})
        await tasks_request(client, "tasks/cancel", "export:exp-running")
        cancelled = await tasks_request(client, "tasks/get", "export:exp-running")
        collected_cancelled = await client.call_tool("rl_get_export_result", {"export_id": "exp-running"})
        await tasks_request(client, "tasks/cancel", "export:exp-done")  # an ended job: left as it is
        still_done = await tasks_request(client, "tasks/get", "export:exp-done")
    assert working.status == "working" and working.result is None and "running" in (working.status_message or "")
    assert working.model_extra["createdAt"].endswith("Z") and working.model_extra["ttlMs"] is None
    assert done.status == "completed" and done.result is not None
    assert done.result["structuredContent"] == collected_done.structured_content
    assert cancelled.status == "cancelled" and cancelled.result is None
    assert collected_cancelled.structured_content["state"] == "failed"  # the export's own view
    assert not processes.is_alive(worker.pid, worker.create_time)
    assert still_done.status == "completed"


async def test_unknown_tasks_are_not_found_and_undeclared_clients_are_refused(home: Path) -> None:
    settings = Settings.from_env({"MCP_RL_HOME": str(home)})
    server = build_server(settings)
    async with Client(server, extensions=[TasksClient()]) as client:
        codes = [
            await error_code(client, "tasks/get", task_id)
            for task_id in ("test:20990101-000000-abcdef", "export:nope", "eval:../x", "run:abc", "nothing")
        ]
        assert await error_code(client, "tasks/cancel", "test:20990101-000000-abcdef") == INVALID_PARAMS
    assert codes == [INVALID_PARAMS] * 5
    async with Client(server) as client:  # 2026-07-28, the extension not declared
        assert await error_code(client, "tasks/get", "export:nope") == MISSING_REQUIRED_CLIENT_CAPABILITY
    async with Client(server, mode="legacy", extensions=[TasksClient()]) as client:  # no tasks before 2026-07-28
        assert await error_code(client, "tasks/get", "export:nope") == METHOD_NOT_FOUND


async def test_a_declaring_client_gets_the_tools_own_answer_when_no_job_starts(home: Path) -> None:
    settings = Settings.from_env({"MCP_RL_HOME": str(home)})
    async with Client(build_server(settings), extensions=[TasksClient()]) as client:
        # No environment selected: nothing starts, so there is no task, only the tool's answer.
        answer: Any = await client.session.call_tool("rl_test_inference", {}, allow_claimed=True)
        missing: Any = await client.session.call_tool("rl_export_weights", {"run_id": "nope"}, allow_claimed=True)
    assert type(answer).__name__ == "CallToolResult" and "rl_select_environment" in answer.content[0].text
    assert type(missing).__name__ == "CallToolResult"
