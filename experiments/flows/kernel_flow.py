"""A small TCP / MPTCP sender and receiver for the kernel baselines (runs in a host namespace).

``python -m experiments.flows.kernel_flow serve --bind ADDR --port P --total N --message M``
accepts one connection, reads ``N`` bytes, answers one byte per complete message and prints
JSON lines ``{"t": MONOTONIC, "bytes": RECEIVED}`` every ``--interval`` seconds and at the end.

``python -m experiments.flows.kernel_flow send --dst ADDR --port P --total N --message M``
connects, writes the messages back to back and prints ``{"message": K, "start": T0, "end": T1}`` when the
receiver acknowledges message ``K``. ``--proto mptcp`` opens ``IPPROTO_MPTCP`` sockets (the
kernel's path manager adds one subflow per announced plane address).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time

IPPROTO_MPTCP = getattr(socket, "IPPROTO_MPTCP", 262)
CHUNK = 1 << 16


def _socket(proto: str) -> socket.socket:
    number = IPPROTO_MPTCP if proto == "mptcp" else socket.IPPROTO_TCP
    return socket.socket(socket.AF_INET6, socket.SOCK_STREAM, number)


def _emit(record: dict[str, float]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def serve(args: argparse.Namespace) -> int:
    """Receive one flow; acknowledge each message with one byte."""
    listener = _socket(args.proto)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((args.bind, args.port))
    listener.listen(1)
    listener.settimeout(args.timeout)
    conn, _ = listener.accept()
    conn.settimeout(args.interval)
    received = 0
    acked = 0
    next_report = time.monotonic() + args.interval
    deadline = time.monotonic() + args.timeout
    _emit({"t": time.monotonic(), "bytes": 0})
    while received < args.total and time.monotonic() < deadline:
        try:
            data = conn.recv(CHUNK)
        except TimeoutError:
            data = None
        if data == b"":
            break
        if data:
            received += len(data)
            complete = min(received, args.total) // args.message
            if received >= args.total:
                complete = -(-args.total // args.message)
            if complete > acked:
                conn.sendall(b"a" * (complete - acked))
                acked = complete
        if time.monotonic() >= next_report:
            _emit({"t": time.monotonic(), "bytes": received})
            next_report += args.interval
    _emit({"t": time.monotonic(), "bytes": received})
    time.sleep(0.2)
    conn.close()
    return 0


def send(args: argparse.Namespace) -> int:
    """Send one flow of messages and report each one's completion."""
    deadline = time.monotonic() + args.timeout
    while True:
        sock = _socket(args.proto)
        try:
            sock.connect((args.dst, args.port))
            break
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    count = -(-args.total // args.message)
    starts: list[float] = []

    def writer() -> None:
        for k in range(count):
            size = min(args.message, args.total - k * args.message)
            starts.append(time.monotonic())
            sock.sendall(b"\0" * size)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    sock.settimeout(max(1.0, deadline - time.monotonic()))
    done = 0
    while done < count:
        try:
            data = sock.recv(count - done)
        except (TimeoutError, OSError):
            break
        if not data:
            break
        end = time.monotonic()
        for k in range(done, done + len(data)):
            _emit({"message": k, "start": starts[k] if k < len(starts) else end, "end": end})
        done += len(data)
    sock.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point (``python -m experiments.flows.kernel_flow``)."""
    parser = argparse.ArgumentParser(prog="kernel_flow", description=__doc__)
    sub = parser.add_subparsers(dest="role", required=True)
    for role in ("serve", "send"):
        p = sub.add_parser(role)
        p.add_argument("--proto", choices=["tcp", "mptcp"], default="tcp")
        p.add_argument("--port", type=int, required=True)
        p.add_argument("--total", type=int, required=True)
        p.add_argument("--message", type=int, required=True)
        p.add_argument("--timeout", type=float, default=60.0)
        p.add_argument("--interval", type=float, default=0.1)
        if role == "serve":
            p.add_argument("--bind", required=True)
        else:
            p.add_argument("--dst", required=True)
    args = parser.parse_args(argv)
    return serve(args) if args.role == "serve" else send(args)


if __name__ == "__main__":
    sys.exit(main())
