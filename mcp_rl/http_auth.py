"""Who may reach the streamable HTTP transport: loopback freely, anything else with a token.

The rule (`bind_policy`): a loopback bind (127.0.0.0/8, ::1, localhost) may run without a
token; any other bind address needs `MCP_RL_TOKEN`, or the server refuses to start. Whenever a
token is set, every HTTP request must carry `Authorization: Bearer <token>`, loopback or not.

This is a plain ASGI middleware in front of the SDK's Starlette app rather than the SDK's
`token_verifier`/`AuthSettings`: those advertise an OAuth authorization server, and a static
shared token has none to advertise. The token is compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from mcp_rl.errors import UserError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TOKEN_ENV = "MCP_RL_TOKEN"
REALM = "mcp-rl"


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach. Unknown host names count as remote."""
    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_policy(host: str, token: str | None) -> str | None:
    """The token to require for serving on `host` (None: no token, loopback only).

    Raises:
        UserError: `host` is not loopback and no token is set.
    """
    token = (token or "").strip() or None
    if token is None and not is_loopback(host):
        raise UserError(
            f"Refusing to serve MCP over HTTP on {host!r} without a token: anyone who can reach "
            f"that address could start training runs. Set {TOKEN_ENV} to a long random secret "
            f"(e.g. `export {TOKEN_ENV}=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')`) "
            "and give clients the header `Authorization: Bearer <token>`, or bind to 127.0.0.1 (the default)."
        )
    return token


class BearerTokenMiddleware:
    """Rejects every HTTP request without `Authorization: Bearer <token>` (401)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        if not token:
            raise ValueError("BearerTokenMiddleware needs a non-empty token")
        self.app = app
        self._token = token.encode("utf-8")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Lifespan events carry no request: they start the SDK's session manager.
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        presented = _bearer(scope)
        if presented is not None and hmac.compare_digest(presented, self._token):
            await self.app(scope, receive, send)
            return
        await _unauthorized(send, missing=presented is None)


def _bearer(scope: Scope) -> bytes | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            scheme, _, credentials = value.partition(b" ")
            if scheme.lower() == b"bearer" and credentials.strip():
                return credentials.strip()
            return None
    return None


async def _unauthorized(send: Send, missing: bool) -> None:
    if missing:
        challenge = f'Bearer realm="{REALM}"'
        body = {"error": "invalid_request", "error_description": f"Missing bearer token: send Authorization: Bearer <{TOKEN_ENV}>."}
    else:
        challenge = f'Bearer realm="{REALM}", error="invalid_token"'
        body = {"error": "invalid_token", "error_description": "The bearer token is not valid for this server."}
    payload = json.dumps(body).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode("ascii")),
                (b"www-authenticate", challenge.encode("ascii")),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
