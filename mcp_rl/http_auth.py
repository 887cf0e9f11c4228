"""Who may reach the streamable HTTP transport.

Two checks, in this order, on every HTTP request:

1. Host and Origin (`HostOriginMiddleware`), on every bind. A browser page on another site can
   make a browser send requests to a loopback server (DNS rebinding: the attacker's name resolves
   to 127.0.0.1); such requests carry the attacker's name in `Host` and its site in `Origin`.
   `Host` must name an allowed host (421 otherwise) and `Origin`, when present, an allowed host
   over http(s) (403 otherwise). The SDK only switches its own check on for binds to exactly
   `127.0.0.1`, `localhost` and `::1`, so `--host 127.0.0.2` or `LOCALHOST` ran without any; this
   check does not depend on how the address is spelled.
2. The bearer token (`BearerTokenMiddleware`) whenever `MCP_RL_TOKEN` is set, loopback or not.

The bind rule (`bind_policy`): a loopback bind (127.0.0.0/8, ::1, localhost in any case) may run
without a token and accepts the loopback names. Any other bind needs `MCP_RL_TOKEN` and an
allow-list: the bind address itself (when it is one address) plus `MCP_RL_ALLOWED_HOSTS`; a
wildcard bind (0.0.0.0, ::) needs `MCP_RL_ALLOWED_HOSTS`, and accepts the loopback names too
(it listens on them). Otherwise the server refuses to start.

These are plain ASGI middlewares in front of the SDK's Starlette app rather than the SDK's
`token_verifier`/`AuthSettings`: those advertise an OAuth authorization server, and a static
shared token has none to advertise. The token is compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from mcp_rl.errors import UserError

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TOKEN_ENV = "MCP_RL_TOKEN"
ALLOWED_HOSTS_ENV = "MCP_RL_ALLOWED_HOSTS"
REALM = "mcp-rl"
# The names a loopback server answers to: what local clients put in Host.
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def normalize_host(host: str) -> str:
    """A host name or address as compared: lower case, no brackets, no trailing dot, no zone;
    IPv4-mapped IPv6 as IPv4; addresses in their canonical form."""
    name = host.strip().lower().rstrip(".")
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    try:
        address = ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return name
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address)


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(normalize_host(host))
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach. Unknown host names count as remote."""
    name = normalize_host(host)
    if name == "localhost":
        return True
    address = _address(name)
    return address is not None and address.is_loopback


def is_wildcard(host: str) -> bool:
    """0.0.0.0 or :: (every interface)."""
    address = _address(host)
    return address is not None and address.is_unspecified


class BindPolicy(BaseModel):
    """What the HTTP server requires of a request, decided once before it binds."""

    model_config = ConfigDict(frozen=True)

    token: str | None
    allowed_hosts: frozenset[str]  # normalized (normalize_host)

    @property
    def guard(self) -> str:
        hosts = ", ".join(sorted(self.allowed_hosts))
        return f"{'bearer token required' if self.token else 'no token (loopback only)'}; Host/Origin allowed: {hosts}"


def bind_policy(host: str, token: str | None, allowed_hosts: Iterable[str] = ()) -> BindPolicy:
    """The token and Host/Origin allow-list for serving on `host`.

    Raises:
        UserError: `host` is not loopback and no token is set, or a wildcard bind has no
            MCP_RL_ALLOWED_HOSTS. Nothing has been bound then.
    """
    token = (token or "").strip() or None
    extra = {normalize_host(h) for h in allowed_hosts if h.strip()}
    if any(not _valid_host_name(h) for h in extra):
        bad = ", ".join(sorted(h for h in extra if not _valid_host_name(h)))
        raise UserError(
            f"{ALLOWED_HOSTS_ENV} has entries that are not host names or addresses: {bad}. "
            "Give names without scheme, port or path, e.g. `mybox.example.org,10.0.0.5`."
        )
    if is_loopback(host):
        return BindPolicy(token=token, allowed_hosts=frozenset(LOOPBACK_NAMES | {normalize_host(host)} | extra))
    if token is None:
        raise UserError(
            f"Refusing to serve MCP over HTTP on {host!r} without a token: anyone who can reach "
            f"that address could start training runs. Set {TOKEN_ENV} to a long random secret "
            f"(e.g. `export {TOKEN_ENV}=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')`) "
            "and give clients the header `Authorization: Bearer <token>`, or bind to 127.0.0.1 (the default)."
        )
    if is_wildcard(host):
        if not extra:
            raise UserError(
                f"Refusing to serve MCP over HTTP on {host!r} (every interface) without {ALLOWED_HOSTS_ENV}: "
                "requests are only accepted when their Host header names this server, so say which names "
                f"clients use, e.g. `export {ALLOWED_HOSTS_ENV}=mybox.example.org,192.168.1.10` "
                "(comma-separated host names or addresses) or `--allow-host mybox.example.org`, or bind one "
                "address with --host."
            )
        return BindPolicy(token=token, allowed_hosts=frozenset(LOOPBACK_NAMES | extra))
    return BindPolicy(token=token, allowed_hosts=frozenset({normalize_host(host)} | extra))


def _valid_host_name(name: str) -> bool:
    if _address(name) is not None:
        return True
    labels = name.split(".")
    return all(label and len(label) <= 63 and all(c.isalnum() or c == "-" for c in label) for label in labels)


def host_of_header(value: str) -> str | None:
    """The host of a Host header (`name`, `name:port`, `[v6]:port`), normalized; None if malformed."""
    value = value.strip()
    if not value or any(c in value for c in "/@?# \t"):
        return None
    try:
        parts = urlsplit(f"http://{value}")
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError:
        return None
    return normalize_host(parts.hostname) if parts.hostname else None


def host_of_origin(value: str) -> str | None:
    """The host of an Origin header (`http(s)://name[:port]`), normalized; None if it is not one."""
    try:
        parts = urlsplit(value.strip())
        parts.port  # noqa: B018
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        return None
    return normalize_host(parts.hostname)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


class HostOriginMiddleware:
    """Refuses requests whose Host (421) or Origin (403) is not an allowed host."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str]) -> None:
        self.app = app
        self.allowed = frozenset(normalize_host(h) for h in allowed_hosts)
        if not self.allowed:
            raise ValueError("HostOriginMiddleware needs at least one allowed host")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan events carry no request
            await self.app(scope, receive, send)
            return
        raw_host = _header(scope, b"host") or ""
        if host_of_header(raw_host) not in self.allowed:
            # The allowed names go to the server's log, not to whoever sent the request.
            log.warning("refused a request with Host %r (allowed: %s)", raw_host[:200], ", ".join(sorted(self.allowed)))
            await _refuse(
                send,
                421,
                "invalid_host",
                f"The Host header does not name this server (its {ALLOWED_HOSTS_ENV} lists the names it answers to).",
            )
            return
        origin = _header(scope, b"origin")
        if origin is not None and host_of_origin(origin) not in self.allowed:
            log.warning("refused a request with Origin %r", origin[:200])
            await _refuse(send, 403, "invalid_origin", "Requests from this Origin are not accepted.")
            return
        await self.app(scope, receive, send)


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


def guarded(app: ASGIApp, policy: BindPolicy) -> ASGIApp:
    """`app` behind the Host/Origin check and, with a token, the bearer check."""
    inner = BearerTokenMiddleware(app, policy.token) if policy.token else app
    return HostOriginMiddleware(inner, policy.allowed_hosts)


def _bearer(scope: Scope) -> bytes | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            scheme, _, credentials = value.partition(b" ")
            if scheme.lower() == b"bearer" and credentials.strip():
                return bytes(credentials.strip())
            return None
    return None


async def _refuse(
    send: Send, status: int, error: str, description: str, extra: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    payload = json.dumps({"error": error, "error_description": description}).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode("ascii")),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


async def _unauthorized(send: Send, missing: bool) -> None:
    if missing:
        challenge = f'Bearer realm="{REALM}"'
        error, description = "invalid_request", f"Missing bearer token: send Authorization: Bearer <{TOKEN_ENV}>."
    else:
        challenge = f'Bearer realm="{REALM}", error="invalid_token"'
        error, description = "invalid_token", "The bearer token is not valid for this server."
    await _refuse(send, 401, error, description, ((b"www-authenticate", challenge.encode("ascii")),))
