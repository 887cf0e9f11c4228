"""Service URLs in one canonical form, and the rules a URL from a config must pass.

A URL in a config (`tinker_base_url`, `ray_address`) is text an agent can write: it decides where
the Tinker key is sent and whether a run is billed, so it is compared only in canonical form
(scheme and host lower case, no trailing dot, IDNA, default port dropped, any IPv4 spelling as its
dotted quad) and checked against these rules:

- http or https only; no user name or password in it (keys travel in environment variables);
  no query or fragment;
- plain http only to a loopback host (127.0.0.0/8, ::1, localhost), or to a host the user listed
  with `http://` in the setting that allows that field's hosts;
- link-local (169.254.0.0/16, fe80::/10), cloud metadata hosts, private ranges (10/8, 172.16/12,
  192.168/16, fc00::/7, 100.64/10, `.internal`, `.local`, ...), unspecified and multicast
  addresses only when the user listed the host in that setting.

Names are not resolved here (a public name the user's DNS points at a private address is not
seen); the listed settings are the user's word, never the agent's.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

from mcp_rl.errors import UserError, clip

DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_URL_CHARS = 2048
# Names of cloud metadata services (their addresses are link-local and refused as such).
METADATA_HOSTS = frozenset(
    {"metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal"}
)
# Suffixes of names that only resolve inside a private network.
PRIVATE_SUFFIXES = (".internal", ".local", ".localdomain", ".lan", ".home.arpa", ".intranet", ".corp")
# Hosted Tinker's own domains: a run whose server is on one of them is billed by Thinking Machines.
HOSTED_TINKER_DOMAINS = ("thinkingmachines.dev", "thinkingmachines.ai")
HOSTED_TINKER_HOST = "tinker.thinkingmachines.dev"


class HostKind(StrEnum):
    LOOPBACK = "loopback"
    PUBLIC = "public"
    PRIVATE = "private"
    LINK_LOCAL = "link-local"
    METADATA = "metadata"
    UNSPECIFIED = "unspecified"
    MULTICAST = "multicast"


@dataclass(frozen=True)
class ServiceUrl:
    """A URL in canonical form."""

    scheme: str
    host: str  # lower case, no trailing dot, IDNA (ASCII); an IPv6 address without brackets
    port: int | None  # None: the scheme's default
    path: str  # no trailing slash

    @property
    def effective_port(self) -> int:
        return self.port if self.port is not None else DEFAULT_PORTS[self.scheme]

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}" if self.port is not None else host

    @property
    def text(self) -> str:
        return f"{self.scheme}://{self.netloc}{self.path}"

    @property
    def kind(self) -> HostKind:
        return host_kind(self.host)


def canonical_host(host: str) -> str:
    """`host` lower case, without brackets or a trailing dot, IDNA-encoded; an IPv4 address in any
    spelling the C library accepts (`2130706433`, `0x7f.1`) as its dotted quad. ValueError if it
    is not a host name."""
    host = host.strip().strip("[]").lower()
    if host.endswith("."):
        host = host[:-1]
    if not host or host.endswith("."):
        raise ValueError("no host")
    if ":" in host:  # IPv6
        return str(ipaddress.IPv6Address(host.split("%", 1)[0]))
    if all(c in "0123456789abcdefx." for c in host) and any(c.isdigit() for c in host):
        try:
            return socket.inet_ntoa(socket.inet_aton(host))
        except OSError:
            pass  # a name made of hex letters ("cafe.be"), not an address
    try:
        encoded = host.encode("idna").decode("ascii")
    except UnicodeError as exc:
        raise ValueError(f"not a valid host name ({exc})") from None
    if not all(c.isalnum() or c in "-._" for c in encoded):
        raise ValueError("not a valid host name")
    return encoded


def host_kind(host: str) -> HostKind:
    """What kind of host a canonical host is (names are not resolved)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if host == "localhost" or host.endswith(".localhost"):
            return HostKind.LOOPBACK
        if host in METADATA_HOSTS:
            return HostKind.METADATA
        if "." not in host or host.endswith(PRIVATE_SUFFIXES):
            return HostKind.PRIVATE  # a bare name resolves only on the local network
        return HostKind.PUBLIC
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return HostKind.LOOPBACK
    if address.is_unspecified:
        return HostKind.UNSPECIFIED
    if address.is_link_local:
        return HostKind.LINK_LOCAL
    if address.is_multicast:
        return HostKind.MULTICAST
    if address.is_private or not address.is_global:
        return HostKind.PRIVATE
    return HostKind.PUBLIC


def canonical_url(text: object, argument: str) -> ServiceUrl:
    """`text` as a canonical http(s) URL; UserError naming `argument` and what to do otherwise."""
    if not isinstance(text, str):
        raise UserError(f"{argument} must be a URL as text, e.g. https://host:port (got {clip(text)}).")
    if len(text) > MAX_URL_CHARS:
        raise UserError(f"{argument} is {len(text)} characters long; a service URL is at most {MAX_URL_CHARS}.")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in text):
        raise UserError(f"{argument} {clip(text)} holds spaces or control characters: give the URL alone.")
    try:
        parts = urlsplit(text)
        scheme = parts.scheme.lower()
        port = parts.port
    except ValueError as exc:
        raise UserError(f"{argument} {clip(text)} is not a valid URL ({exc}).") from None
    if scheme not in DEFAULT_PORTS:
        raise UserError(f"{argument} {clip(text)} must start with https:// (or http:// for a server on this machine).")
    if "@" in parts.netloc:
        raise UserError(
            f"{argument} holds a user name or password (user@host): credentials never go in a URL. Give the URL "
            "without them; keys are read from the server's environment variables."
        )
    if parts.query or parts.fragment or text.endswith(("?", "#")):
        raise UserError(f"{argument} {clip(text)} has a query or fragment (?..., #...): give the base URL only.")
    try:
        host = canonical_host(parts.hostname or "")
    except ValueError as exc:
        raise UserError(f"{argument} {clip(text)} has no usable host ({exc}).") from None
    if port == DEFAULT_PORTS[scheme]:
        port = None
    return ServiceUrl(scheme=scheme, host=host, port=port, path=parts.path.rstrip("/"))


@dataclass(frozen=True)
class AllowedHost:
    """One entry of a user's list of allowed hosts: `host`, `host:port` or `http(s)://host[:port]`
    (`http://` also allows plain http to it)."""

    host: str
    port: int | None
    plain_http: bool

    @classmethod
    def parse(cls, entry: str, setting: str) -> AllowedHost:
        text = entry if "://" in entry else f"https://{entry}"
        url = canonical_url(text, f"{setting} entry {entry!r}")
        port = urlsplit(text).port  # the port as written: host:443 names 443, not "any"
        return cls(host=url.host, port=port, plain_http=url.scheme == "http")

    def admits(self, url: ServiceUrl) -> bool:
        return url.host == self.host and (self.port is None or self.port == url.effective_port)


def parse_allowed_hosts(entries: Iterable[str], setting: str) -> list[AllowedHost]:
    return [AllowedHost.parse(entry, setting) for entry in entries]


def checked_service_url(
    text: object, argument: str, *, allowed: Iterable[AllowedHost] = (), setting: str, path_allowed: bool = True
) -> ServiceUrl:
    """`text` canonical and passing the rules of this module; `allowed` are the hosts the user
    listed in `setting`. UserError naming the argument, the rule and what to do otherwise."""
    url = canonical_url(text, argument)
    if not path_allowed and url.path:
        raise UserError(f"{argument} {clip(text)} has a path ({url.path}): give scheme://host:port only.")
    listed = next((entry for entry in allowed if entry.admits(url)), None)
    kind = url.kind
    hint = (
        f"If it is your own server, add {url.netloc!r} to {setting} in the MCP server's environment (a comma "
        "separated list; restart the server), or give another URL."
    )
    if kind not in (HostKind.LOOPBACK, HostKind.PUBLIC) and listed is None:
        raise UserError(
            f"{argument} {url.text} is a {kind.value} address, refused unless you list it explicitly. {hint}"
        )
    if url.scheme == "http" and kind is not HostKind.LOOPBACK and not (listed and listed.plain_http):
        raise UserError(
            f"{argument} {url.text} is plain http to another machine: use https://, or for your own server list "
            f"'http://{url.netloc}' in {setting} in the MCP server's environment (restart the server)."
        )
    return url


def is_hosted_tinker(text: str | None) -> bool:
    """True when `text` is a URL on hosted Tinker's own domains (billed), in any spelling; an
    unreadable URL counts as hosted (priced, never free by accident)."""
    if not text:
        return False
    try:
        host = canonical_url(text, "tinker_base_url").host
    except UserError:
        return True
    return any(host == domain or host.endswith("." + domain) for domain in HOSTED_TINKER_DOMAINS)
