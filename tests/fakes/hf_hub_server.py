"""FAKE Hugging Face Hub at the wire: a loopback server speaking the endpoints the REAL
`huggingface_hub.HfApi` calls for whoami (the pre-export check), create_repo and upload_folder (preupload + commit), reached
through HF_ENDPOINT. Every file arrives as a "regular" (base64 in the commit) upload, so no LFS
or Xet transfer is needed. Records every request's headers and body so a test can check where
the token appears."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Self

from tests.kit.loopback import LoopbackServer


@dataclass
class HubWire:
    token: str
    repos: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    unauthorized: int = 0
    validated: list[str] = field(default_factory=list)
    # Refuse the commit with an error body that echoes the request's headers, as some Hubs and
    # proxies do: the token then sits in the error text the client raises.
    echo_on_commit: bool = False
    # Who the token belongs to (/api/whoami-v2) and its role ("write", "read", "fineGrained").
    user: str = "someone"
    orgs: list[str] = field(default_factory=list)
    role: str = "write"
    # huggingface_hub >= 2.4 fetches its agent-harness registry once per process and day,
    # unauthenticated, from the same endpoint; kept apart so `requests` holds the export's calls.
    registry_fetches: list[dict[str, Any]] = field(default_factory=list)


def build_app(wire: HubWire) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    async def handle(request: Request) -> Response:
        raw = await request.body()
        if request.url.path == "/api/agent-harnesses":
            wire.registry_fetches.append({"headers": dict(request.headers), "query": str(request.url.query)})
            # Unavailable, as offline: the client then detects no agent and caches nothing in HF_HOME.
            return JSONResponse({"error": "not served by the fake"}, status_code=404)
        wire.requests.append(
            {
                "method": request.method,
                "path": request.url.path,
                "query": str(request.url.query),
                "headers": dict(request.headers),
                "body": raw,
            }
        )
        if request.headers.get("authorization") != f"Bearer {wire.token}":
            wire.unauthorized += 1
            return JSONResponse({"error": "Invalid credentials"}, status_code=401)
        path = request.url.path
        if path == "/api/whoami-v2" and request.method == "GET":
            return JSONResponse(
                {
                    "type": "user",
                    "name": wire.user,
                    "orgs": [{"name": org} for org in wire.orgs],
                    "auth": {"type": "access_token", "accessToken": {"displayName": "t", "role": wire.role}},
                }
            )
        if path == "/api/repos/create" and request.method == "POST":
            data = json.loads(raw)
            repo = f"{data['organization']}/{data['name']}" if data.get("organization") else data["name"]
            wire.repos.setdefault(
                repo, {"private": data.get("private", data.get("visibility") == "private"), "type": data.get("type")}
            )
            wire.files.setdefault(repo, {})
            return JSONResponse({"url": f"{request.base_url}{repo}", "name": repo})
        if path == "/api/validate-yaml" and request.method == "POST":  # the README's metadata
            wire.validated.append(json.loads(raw)["content"])
            return JSONResponse({"warnings": []})
        parts = path.strip("/").split("/")
        if len(parts) in (4, 6) and parts[:2] == ["api", "models"] and request.method == "GET":  # repo_info
            repo = f"{parts[2]}/{parts[3]}"
            if repo not in wire.repos:
                return JSONResponse(
                    {"error": "Repository not found"}, status_code=404, headers={"X-Error-Code": "RepoNotFound"}
                )
            return JSONResponse({"id": repo, "private": wire.repos[repo]["private"], "siblings": []})
        if len(parts) >= 6 and parts[:2] == ["api", "models"] and parts[4] == "commit" and wire.echo_on_commit:
            echoed = json.dumps(dict(request.headers))
            return JSONResponse({"error": f"Bad request for {request.url}: headers {echoed}"}, status_code=400)
        if len(parts) >= 6 and parts[:2] == ["api", "models"] and parts[4] == "preupload":
            data = json.loads(raw)
            return JSONResponse(
                {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in data["files"]]}
            )
        if len(parts) >= 6 and parts[:2] == ["api", "models"] and parts[4] == "commit":
            repo = f"{parts[2]}/{parts[3]}"
            for line in raw.decode().splitlines():
                item = json.loads(line)
                if item.get("key") == "file":
                    value = item["value"]
                    wire.files.setdefault(repo, {})[value["path"]] = base64.b64decode(value["content"])
            return JSONResponse(
                {"commitUrl": f"{request.base_url}{repo}/commit/abc123", "commitOid": "a" * 40, "pullRequestUrl": None}
            )
        return JSONResponse({"error": f"not served by the fake: {request.method} {path}"}, status_code=404)

    return Starlette(routes=[Route("/{path:path}", handle, methods=["GET", "POST", "PUT", "HEAD", "DELETE"])])


class HubServer:
    """`with HubServer(token) as hub:`; point HF_ENDPOINT at hub.base_url."""

    def __init__(self, token: str) -> None:
        self.wire = HubWire(token=token)
        self._loopback = LoopbackServer("fake-hub", asgi=build_app(self.wire))
        self.base_url = self._loopback.base_url

    def __enter__(self) -> Self:
        self._loopback.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._loopback.stop()
