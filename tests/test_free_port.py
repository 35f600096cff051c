"""The loopback ports the live tests and benches tell their servers (aiops/lab/loopback.py `free_port`): never the
same one twice in a process. The kernel hands a port it just released out again (about 150 times in 2,000 calls in a
row here), and a fresh clone's suite once told two of a benchmark's three fleet shards the same port: one could not
listen, the test failed (tests/fleet/test_fleet_shards_at_once.py, session #21)."""

from __future__ import annotations

import socket

from aiops.lab.loopback import free_port
from bench import victoria


def test_ports_handed_out_one_after_another_are_all_different_and_bindable() -> None:
    ports = [free_port() for _ in range(1500)] + [victoria.free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports), len(ports) - len(set(ports))
    with socket.socket() as s:  # free a moment ago: a server can listen on it
        s.bind(("127.0.0.1", ports[-1]))
        s.listen()
