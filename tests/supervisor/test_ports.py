from __future__ import annotations

import socket

from mcp_rl.ports import allocate_ports, port_is_free


def test_allocated_ports_are_free_distinct_and_avoid_given_ones() -> None:
    first = allocate_ports(2)
    assert len(set(first)) == 2 and all(port_is_free(p) for p in first)
    second = allocate_ports(4, avoid=first)
    assert not set(second) & set(first) and len(set(second)) == 4


def test_port_is_free_sees_a_listener() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert not port_is_free(port)
    assert port_is_free(port)
