"""FAKE W&B at the wire: a loopback GraphQL endpoint (`POST /graphql`) answering the queries the
REAL `wandb.Api` (wandb 0.31, wandb/apis/public/) sends for what mcp-rl reads: the viewer (login
and default entity), `Runs` of a project with the group filter and the order applied server-side,
one `Run` (the full fragment: summary metrics, job type) and `RunSampledHistory` (rows that carry
every key asked for). The runs served are `FakeRun` records, in creation order; `recorded_group`
is the shape of a real mcp-rl run in W&B.

Every request must carry the API key (HTTP basic auth, user "api", as the client sends it);
others get 401. Every query is recorded (operation name and variables). Two failures of the
service can be switched on: `fail_runs_with` answers the `Runs` query with a GraphQL error (the
client raises at once with its message), `hang_runs` holds `Runs` queries until `release` is set.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, Self

from tests.kit.loopback import LoopbackServer

API_KEY = "f" * 40
ENTITY = "fake-entity"
# Longest a held query waits for `release` (a test that forgets to release still ends).
HANG_LIMIT_S = 30.0


@dataclass
class FakeRun:
    """One W&B run as the service stores it: what the GraphQL fragments and history read."""

    entity: str
    project: str
    id: str
    name: str
    group: str
    state: str = "finished"
    job_type: str | None = None
    tags: list[str] = field(default_factory=list)
    summary_metrics: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)


class WandbServer:
    """`with WandbServer(runs) as server:` then `wandb.Api(api_key=API_KEY, overrides={"base_url": server.base_url})`."""

    def __init__(self, runs: list[FakeRun], api_key: str = API_KEY) -> None:
        self.runs = runs
        self.api_key = api_key
        self.queries: list[tuple[str, dict[str, Any]]] = []
        self.unauthorized = 0
        self.fail_runs_with: str | None = None
        self.hang_runs = False
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's method name
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                status, answer = server.answer(self.path, self.headers.get("authorization", ""), body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._loopback = LoopbackServer("fake-wandb", handler=Handler)
        self.base_url = self._loopback.base_url

    def __enter__(self) -> Self:
        self._loopback.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()  # held handlers end before the server joins them
        self._loopback.stop()

    # --- GraphQL ------------------------------------------------------------------------------
    def answer(self, path: str, authorization: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        expected = "Basic " + base64.b64encode(f"api:{self.api_key}".encode()).decode()
        if authorization != expected:
            self.unauthorized += 1
            return 401, {"errors": [{"message": "invalid credentials"}]}
        if path.rstrip("/") != "/graphql":
            return 404, {"errors": [{"message": f"not served by the fake: {path}"}]}
        query = body.get("query", "")
        variables = body.get("variables") or {}
        match = re.search(r"\b(query|mutation)\s+(\w+)", query)
        name = match.group(2) if match else ""
        self.queries.append((name, variables))
        if "viewer" in query and name in ("Viewer", "GetDefaultEntity"):
            return 200, {
                "data": {
                    "viewer": {
                        "id": "u1",
                        "entity": ENTITY,
                        "username": "tester",
                        "email": "t@example.com",
                        "flags": "{}",
                        "teams": {"edges": []},
                    }
                }
            }
        if name == "Runs" and self.fail_runs_with is not None:
            return 400, {"errors": [{"message": self.fail_runs_with}]}
        if name == "Runs" and self.hang_runs:
            self.release.wait(HANG_LIMIT_S)
        if name == "Runs":
            # The listing asks for the lightweight fragment: no summary, config or history keys.
            return 200, {"data": {"project": self._runs(variables, light="LightweightRunFragment" in query)}}
        if name == "Run":
            run = self._find(variables)
            return 200, {"data": {"project": {"run": None if run is None else {"projectId": 1, **self._node(run)}}}}
        if name == "RunSampledHistory":
            run = self._find(variables)
            spec = json.loads(variables["specs"][0])
            keys, samples = spec["keys"], int(spec["samples"])
            rows = [{k: r[k] for k in keys} for r in (run.rows if run else []) if all(k in r for k in keys)]
            if len(rows) > samples:
                stride = len(rows) / samples
                rows = [rows[int(i * stride)] for i in range(samples)]
            return 200, {"data": {"project": {"run": {"sampledHistory": [rows]}}}}
        return 400, {"errors": [{"message": f"query {name or query[:60]!r} not served by the fake"}]}

    def _in_project(self, variables: dict[str, Any]) -> list[FakeRun]:
        return [r for r in self.runs if r.entity == variables.get("entity") and r.project == variables.get("project")]

    def _find(self, variables: dict[str, Any]) -> FakeRun | None:
        return next((r for r in self._in_project(variables) if r.id == variables.get("name")), None)

    def _runs(self, variables: dict[str, Any], light: bool) -> dict[str, Any]:
        runs = self._in_project(variables)
        for key, wanted in json.loads(variables.get("filters") or "{}").items():
            if key != "group":
                raise AssertionError(f"fake W&B: filter {key!r} not modelled")
            runs = [r for r in runs if r.group == wanted]
        order = variables.get("order") or "+created_at"
        if order not in ("+created_at", "-created_at"):
            raise AssertionError(f"fake W&B: order {order!r} not modelled")
        if order == "-created_at":
            runs = runs[::-1]
        heavy = ("config", "systemMetrics", "summaryMetrics", "historyKeys")
        nodes = [{k: v for k, v in self._node(r).items() if not (light and k in heavy)} for r in runs]
        edges = [{"node": {"projectId": 1, **node}, "cursor": f"c{i}"} for i, node in enumerate(nodes)]
        return {
            "internalId": "p1",
            "runCount": len(runs),
            "readOnly": False,
            "runs": {"edges": edges, "pageInfo": {"endCursor": None, "hasNextPage": False}},
        }

    def _node(self, run: FakeRun) -> dict[str, Any]:
        index = self.runs.index(run)
        return {
            "id": f"internal-{run.id}",
            "name": run.id,
            "displayName": run.name,
            "tags": run.tags,
            "sweepName": None,
            "state": run.state,
            "config": "{}",
            "group": run.group,
            "jobType": run.job_type,
            "commit": None,
            "readOnly": False,
            "createdAt": f"2026-11-24T10:{index:02d}:00",
            "heartbeatAt": f"2026-11-24T10:{index:02d}:30",
            "description": None,
            "notes": None,
            "systemMetrics": "{}",
            "summaryMetrics": json.dumps(run.summary_metrics),
            "historyLineCount": len(run.rows),
            "user": {"name": "tester", "username": "tester"},
            "historyKeys": None,
        }


def recorded_group(run_id: str, entity: str = ENTITY, project: str = "mcp-rl", steps: int = 20) -> list[FakeRun]:
    """The two runs one mcp-rl run leaves in W&B, plus a neighbour in another group.

    The trainer's run (job_type "trainer", keys `reward/mean`, `train/loss`, ...) and the Atropos
    environment's (keys prefixed `gsm8k_0_`, plus unprefixed `server/...` timings). Values follow
    one rule so tests can compute what to expect: reward/mean at step s is s/steps (best and final
    at the last step), train/loss is 1/s (best at the last step), the env's percent_correct peaks
    at step steps//2.
    """
    trainer_rows = [
        {"_step": s, "_runtime": 3.0 * s, "reward/mean": s / steps, "train/loss": 1.0 / s, "train/learning_rate": 4e-5}
        for s in range(1, steps + 1)
    ]
    peak = steps // 2
    env_rows: list[dict[str, Any]] = [
        {
            "_step": s,
            "gsm8k_0_train/percent_correct": 0.9 - abs(s - peak) * 0.01,
            "server/server_0_request_time_avg": 0.2,
        }
        for s in range(1, steps + 1)
    ]
    env_rows[-1]["gsm8k_0_eval/percent_correct"] = 0.5
    trainer = FakeRun(
        entity=entity,
        project=project,
        id="tr4in3r1",
        name=f"{run_id}-trainer",  # as mcp_rl.trainer names it (job_type "trainer", no tags)
        group=run_id,
        job_type="trainer",
        summary_metrics={
            "_step": steps,
            "_runtime": 3.0 * steps,
            "_timestamp": 1_790_000_000.0,
            "_wandb": {"runtime": 3 * steps},
            "reward/mean": trainer_rows[-1]["reward/mean"],
            "train/loss": trainer_rows[-1]["train/loss"],
            "train/learning_rate": 4e-5,
        },
        rows=trainer_rows,
    )
    env = FakeRun(
        entity=entity,
        project=project,
        id="env0run1",
        name="gsm8k-2026-11-22-qwerty",
        group=run_id,
        summary_metrics={
            "_step": steps,
            "gsm8k_0_train/percent_correct": env_rows[-1]["gsm8k_0_train/percent_correct"],
            "gsm8k_0_eval/percent_correct": 0.5,
            "gsm8k_0_train/rollouts": {"_type": "table-file", "path": "media/table/train/rollouts.json"},
            "server/server_0_request_time_avg": 0.2,
        },
        rows=env_rows,
    )
    neighbour = FakeRun(
        entity=entity,
        project=project,
        id="0ther0ne",
        name=f"{run_id}x-trainer",
        group=f"{run_id}x",
        tags=["trainer"],
        summary_metrics={"_step": 3, "reward/mean": 99.0, "train/loss": 0.0},
        rows=[{"_step": 3, "reward/mean": 99.0, "train/loss": 0.0}],
    )
    return [trainer, env, neighbour]
