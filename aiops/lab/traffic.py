"""Traffic generators for the lab and the eBPF tests, run as `python -m aiops.lab.traffic KIND ...` inside a
namespace (and cgroup). Every loop is bounded by a count and a deadline; results are one JSON line on stdout.

  udp          paced UDP datagrams (optional source port and TOS)
  vip-server   answers each length-prefixed message with an 8-byte ack (collective request/response)
  vip-client   ring all-reduce-like chunks over one TCP connection; per-message latency until the ack
  bulk-server  reads and discards; one JSON line per connection with the bytes and the receive window
  bulk-client  streams as fast as TCP allows over N connections until the deadline
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence

HEADER = struct.Struct("!I")
ACK = b"ackackac"
MAX_MESSAGE_BYTES = 64 << 20
MAX_CONNECTIONS = 64


def _recv_exact(conn: socket.socket, size: int) -> bytes | None:
    chunks, remaining = [], size
    while remaining > 0:
        chunk = conn.recv(min(remaining, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def udp(args: argparse.Namespace) -> dict[str, object]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if args.tos:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, args.tos)
    if args.sport:
        sock.bind(("0.0.0.0", args.sport))
    payload = b"x" * args.size
    deadline = time.monotonic() + args.max_s
    sent = 0
    while sent < args.count and time.monotonic() < deadline:
        try:
            sock.sendto(payload, (args.dst, args.dport))
            sent += 1
        except OSError:
            pass  # ICMP port unreachable from the peer surfaces here: the packet still left
        if args.interval_ms:
            time.sleep(args.interval_ms / 1000)
    return {"sent": sent, "sport": sock.getsockname()[1]}


def _serve(port: int, handler: Callable[[socket.socket], None], max_s: float) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port))
    server.listen(MAX_CONNECTIONS)
    server.settimeout(0.5)
    deadline = time.monotonic() + max_s
    print(json.dumps({"listening": port}), flush=True)
    accepted = 0
    while time.monotonic() < deadline and accepted < 10_000:
        try:
            conn, _ = server.accept()
        except TimeoutError:
            continue
        accepted += 1
        threading.Thread(target=handler, args=(conn,), daemon=True).start()


def _vip_handler(conn: socket.socket) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with conn:
        for _ in range(10_000_000):
            header = _recv_exact(conn, HEADER.size)
            if header is None:
                return
            (size,) = HEADER.unpack(header)
            if size > MAX_MESSAGE_BYTES or _recv_exact(conn, size) is None:
                return
            conn.sendall(ACK)


_print_lock = threading.Lock()


def _bulk_handler(conn: socket.socket) -> None:
    received, first_s, last_s = 0, 0.0, 0.0
    with conn:
        for _ in range(1 << 40):
            chunk = conn.recv(1 << 20)
            if not chunk:
                break
            now = time.monotonic()
            if not received:
                first_s = now
            received += len(chunk)
            last_s = now
    with _print_lock:
        print(json.dumps({"bytes": received, "first_s": first_s, "last_s": last_s}), flush=True)


def vip_client(args: argparse.Namespace) -> dict[str, object]:
    sizes = [int(s) for s in args.sizes.split(",")]
    conn = socket.create_connection((args.dst, args.port), timeout=10)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payloads = {size: HEADER.pack(size) + b"v" * size for size in sizes}
    period_s = 1.0 / args.rate_hz
    latencies_ms: list[float] = []
    sent_bytes = 0
    start = time.monotonic()
    deadline = start + args.duration_s
    next_s = start
    for index in range(args.max_messages):
        now = time.monotonic()
        if now >= deadline:
            break
        if next_s > now:
            time.sleep(next_s - now)
        size = sizes[index % len(sizes)]
        t0 = time.monotonic()
        conn.sendall(payloads[size])
        if _recv_exact(conn, len(ACK)) is None:
            break
        latencies_ms.append((time.monotonic() - t0) * 1000)
        sent_bytes += size
        next_s += period_s
        next_s = max(next_s, time.monotonic() - period_s)  # do not try to catch up more than one period
    elapsed_s = time.monotonic() - start
    conn.close()
    return {"latencies_ms": latencies_ms, "bytes": sent_bytes, "elapsed_s": elapsed_s}


def bulk_client(args: argparse.Namespace) -> dict[str, object]:
    deadline = time.monotonic() + args.duration_s
    totals = [0] * args.streams

    def stream(index: int) -> None:
        conn = socket.create_connection((args.dst, args.port), timeout=10)
        block = b"b" * (256 << 10)
        with conn:
            conn.settimeout(1.0)
            while time.monotonic() < deadline:
                try:
                    totals[index] += conn.send(block)
                except TimeoutError:
                    continue

    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(args.streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=args.duration_s + 10)
    return {"sent_bytes": sum(totals)}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="aiops.lab.traffic")
    sub = parser.add_subparsers(dest="kind", required=True)
    u = sub.add_parser("udp")
    u.add_argument("--dst", required=True)
    u.add_argument("--dport", type=int, required=True)
    u.add_argument("--sport", type=int, default=0)
    u.add_argument("--tos", type=int, default=0)
    u.add_argument("--size", type=int, default=200)
    u.add_argument("--count", type=int, default=100)
    u.add_argument("--interval-ms", type=float, default=0.0)
    u.add_argument("--max-s", type=float, default=30.0)
    for name in ("vip-server", "bulk-server"):
        s = sub.add_parser(name)
        s.add_argument("--port", type=int, required=True)
        s.add_argument("--max-s", type=float, default=300.0)
    c = sub.add_parser("vip-client")
    c.add_argument("--dst", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--sizes", default="16384,65536,131072")
    c.add_argument("--rate-hz", type=float, default=50.0)
    c.add_argument("--duration-s", type=float, default=10.0)
    c.add_argument("--max-messages", type=int, default=100_000)
    b = sub.add_parser("bulk-client")
    b.add_argument("--dst", required=True)
    b.add_argument("--port", type=int, required=True)
    b.add_argument("--streams", type=int, default=4)
    b.add_argument("--duration-s", type=float, default=10.0)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.kind == "vip-server":
        _serve(args.port, _vip_handler, args.max_s)
        return 0
    if args.kind == "bulk-server":
        _serve(args.port, _bulk_handler, args.max_s)
        return 0
    runners = {"udp": udp, "vip-client": vip_client, "bulk-client": bulk_client}
    print(json.dumps(runners[args.kind](args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
