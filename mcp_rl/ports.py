"""Free TCP ports on 127.0.0.1, so any number of runs can share one machine."""

from __future__ import annotations

import socket
from collections.abc import Collection

HOST = "127.0.0.1"


def port_is_free(port: int, host: str = HOST) -> bool:
    """True if no live socket holds `port`: a server could bind it now.

    SO_REUSEADDR, as servers set it, so connections of an ended process lingering in
    TIME_WAIT do not count as held.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def allocate_ports(count: int, avoid: Collection[int] = (), host: str = HOST, attempts: int = 64) -> list[int]:
    """`count` distinct ports the kernel reports free, none of them in `avoid`.

    `avoid` holds ports recorded for other live runs: one of their processes may not have bound
    its port yet (a trainer binds after loading its model), so the kernel alone cannot tell.
    """
    chosen: list[int] = []
    for _ in range(attempts):
        if len(chosen) == count:
            break
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port not in avoid and port not in chosen:
            chosen.append(port)
    if len(chosen) < count:
        raise RuntimeError(f"could not find {count} free ports on {host} after {attempts} attempts")
    return chosen
