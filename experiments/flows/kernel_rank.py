"""One rank of a job's collectives over kernel TCP or MPTCP (runs in a host namespace).

``python -m experiments.flows.kernel_rank --rank R --addrs A0,A1,... --port P [--all-pairs]
[--proto mptcp]`` listens on ``P + R`` (rank ``d`` on ``P + d``), connects to the ranks it writes to (its right neighbour in
the ring, or every other rank with ``--all-pairs``), accepts the ranks that write to it, and
prints ``{"ready": T}``. Then, for every line ``run KIND SIZE TAG`` on its standard input, it
runs its :class:`~experiments.jobs.collectives.RankMachine` of that collective over the
connections and prints ``{"tag": TAG, "start": T0, "end": T1}`` once it is finished; ``quit``
ends it.

A kernel stream has no WRITE_IMM: a message is an 8-byte header (the immediate and the length)
and its bytes, and the receiving rank's immediate "arrives" when the last byte is read. A
message counts as sent when the socket took every byte (TCP acknowledges to the kernel, not to
the application); the driver waits for every rank, so a collective still ends when the last
byte arrived.
"""

from __future__ import annotations

import argparse
import json
import queue
import socket
import struct
import sys
import threading
import time

from experiments.flows.kernel_flow import _socket
from experiments.jobs.collectives import Collective, RankMachine

HEADER = struct.Struct("!II")  # immediate, length


def _emit(record: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def _read_exact(conn: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        data = conn.recv(min(left, 1 << 16))
        if not data:
            raise ConnectionError("the peer closed the connection")
        chunks.append(data)
        left -= len(data)
    return b"".join(chunks)


def _receive(conn: socket.socket, src: int, inbox: queue.Queue[tuple[int, int]]) -> None:
    """Read messages from rank ``src`` for ever; each one's immediate goes to ``inbox``."""
    try:
        while True:
            imm, size = HEADER.unpack(_read_exact(conn, HEADER.size))
            _read_exact(conn, size)
            inbox.put((src, imm))
    except (OSError, ConnectionError):
        inbox.put((src, -1))


def connect(args: argparse.Namespace) -> tuple[dict[int, socket.socket], list[socket.socket]]:
    """The connections to the ranks this one writes to, and those accepted from its writers."""
    n = len(args.addrs)
    writes_to = [d for d in range(n) if d != args.rank] if args.all_pairs else [(args.rank + 1) % n]
    expect = n - 1 if args.all_pairs else 1
    listener = _socket(args.proto)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("::", args.port + args.rank))
    listener.listen(n)
    deadline = time.monotonic() + args.timeout
    out: dict[int, socket.socket] = {}
    for dst in writes_to:
        while dst not in out:
            sock = _socket(args.proto)
            try:
                sock.connect((args.addrs[dst], args.port + dst))
                sock.sendall(HEADER.pack(args.rank, 0))
                out[dst] = sock
            except OSError:
                sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    listener.settimeout(max(1.0, deadline - time.monotonic()))
    accepted = [listener.accept()[0] for _ in range(expect)]
    return out, accepted


def main(argv: list[str] | None = None) -> int:
    """Entry point (``python -m experiments.flows.kernel_rank``)."""
    parser = argparse.ArgumentParser(prog="kernel_rank", description=__doc__)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--addrs", type=lambda v: v.split(","), required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--all-pairs", action="store_true")
    parser.add_argument("--proto", choices=["tcp", "mptcp"], default="tcp")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    out, accepted = connect(args)
    inbox: queue.Queue[tuple[int, int]] = queue.Queue()
    for conn in accepted:
        src, _ = HEADER.unpack(_read_exact(conn, HEADER.size))
        threading.Thread(target=_receive, args=(conn, src, inbox), daemon=True).start()
    payload = bytes(1 << 20)
    _emit({"ready": time.monotonic()})
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["quit"] or len(words) != 4:
            break
        collective = Collective(words[1], int(words[2]))
        machine = RankMachine(collective, args.rank, len(args.addrs), int(words[3]))
        start = time.monotonic()
        sends = machine.start()
        while not machine.finished:
            for s in sends:
                out[s.dst].sendall(HEADER.pack(s.imm, s.size))
                for at in range(0, s.size, len(payload)):
                    out[s.dst].sendall(payload[: min(len(payload), s.size - at)])
                machine.on_sent(s.imm)
            if machine.finished:
                break
            src, imm = inbox.get()
            if imm < 0:
                _emit({"error": f"rank {src} closed its connection"})
                return 1
            sends = machine.on_received(src, imm)
        _emit({"tag": int(words[3]), "start": start, "end": time.monotonic()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
