"""Packets per second through the MRC transport core: one sender and one receiver in memory.

No network and no sockets: every frame the sender's context produces is handed straight to the
receiver's context and every ACK back, with a simulated clock. What is measured is the Python
cost of the protocol: building data frames, parsing them, bounds-checked placement, SACK
coalescing and ACK processing (plus EV choice and congestion control on the sender).
Both cores run in this one process, so the rate is packets through sender *and* receiver per
CPU second of the process (``time.process_time``: robust against other load on the machine);
the wall-clock rate is printed too.

    python benchmarks/engine.py                     # default: 4096-byte payloads
    python benchmarks/engine.py --payload 1024 --packets 200000 --out engine.json
    python benchmarks/engine.py --profile           # where the time goes
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import struct
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from host.transport.api import Context  # noqa: E402
from host.transport.config import StackConfig  # noqa: E402
from topologies import Fabric, load_topology  # noqa: E402
from topologies.config import shipped_topology  # noqa: E402

BASE = 0x10_0000_0000


def run(packets: int, payload: int, message_packets: int, window: int, cc: str) -> dict[str, Any]:
    """Move ``packets`` data packets from h0 to h2; returns the figures."""
    fabric = Fabric(load_topology(shipped_topology("small")))
    config = StackConfig(mtu=payload, ack_every=4)
    sender = Context("h0", fabric.host("h0").nics, config=config, seed=1)
    receiver = Context("h2", fabric.host("h2").nics, config=config, seed=2)
    message = message_packets * payload
    region = receiver.register_region(BASE, message * 4)
    cq_s, cq_r = sender.create_cq(), receiver.create_cq()
    params = {"window": window} if cc == "fixed" else {"max_cwnd": window, "init_cwnd": window}
    from host.transport.cc import CcProfile  # noqa: PLC0415

    qs = sender.create_qp("h2", fabric.paths("h0", "h2"), cq=cq_s, cc=CcProfile(cc, params))
    qr = receiver.create_qp("h0", fabric.paths("h2", "h0"), cq=cq_r, cc=CcProfile(cc, params))
    qs.connect(qr.qpn)
    qr.connect(qs.qpn)
    data = bytes(range(256)) * (message // 256 + 1)
    data = data[:message]
    messages = max(1, packets // message_packets)
    for n in range(messages):
        qs.post_write_imm(data, BASE + (n % 4) * message, region.rkey, imm=n, wr_id=n)
    now = 0.0
    step = 1e-6
    completed = 0
    to_receiver = 0
    start = time.perf_counter()
    cpu_start = time.process_time()
    while completed < messages:
        now += step
        frames = sender.frames_to_send(now)
        to_receiver += len(frames)
        for plane, frame in frames:
            receiver.receive_frame(plane, frame, now)
        now += step
        for plane, frame in receiver.frames_to_send(now):
            sender.receive_frame(plane, frame, now)
        for ctx in (sender, receiver):
            when = ctx.next_timer()
            if when is not None and when <= now:
                ctx.handle_timer(now)
        completed += len(cq_s.poll(1 << 20))
        cq_r.poll(1 << 20)
        if not frames:
            now += 50e-6  # let the delayed ACK fire
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    s, r = sender.stats(), receiver.stats()
    data_packets = s["data_packets_sent"]
    return {
        "payload_bytes": payload,
        "data_packets": data_packets,
        "acks": r["acks_sent"],
        "messages": messages,
        "wall_seconds": elapsed,
        "cpu_seconds": cpu,
        "packets_per_second": data_packets / cpu,
        "packets_per_wall_second": data_packets / elapsed,
        "gbit_per_second": data_packets * payload * 8 / cpu / 1e9,
        "us_per_packet": cpu / data_packets * 1e6,
        "retransmits": s["retransmits"],
        "drops": {"sender": s["drops"], "receiver": r["drops"]},
        "python": sys.version.split()[0],
    }


def reference_ns() -> float:
    """Nanoseconds per ``struct.pack_into`` of a data-packet tail: how fast this machine is now."""
    tail = struct.Struct("!HHBBHIIQIIBBBBIIIII")
    buf = bytearray(256)
    args = tuple(range(19))
    n = 200_000
    start = time.process_time()
    for _ in range(n):
        tail.pack_into(buf, 58, *args)
    return (time.process_time() - start) / n * 1e9


def loop_ns() -> float:
    """Nanoseconds per iteration of ``for i in range(n): x += i``: the interpreter's speed now."""
    n = 1_000_000
    x = 0
    start = time.process_time()
    for i in range(n):
        x += i
    return (time.process_time() - start) / n * 1e9


def main(argv: list[str] | None = None) -> int:
    """Command line: run, print, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packets", type=int, default=100_000, help="data packets to move")
    parser.add_argument("--payload", type=int, nargs="+", default=[4096, 1024, 64],
                        help="payload bytes per packet (one run per value)")  # fmt: skip
    parser.add_argument("--message-packets", type=int, default=64, help="packets per message")
    parser.add_argument("--window", type=int, default=256, help="congestion window (packets)")
    parser.add_argument("--cc", default="fixed", help="congestion control (fixed, nscc)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--profile", action="store_true", help="print the 25 costliest functions")
    args = parser.parse_args(argv)
    results = []
    reference = reference_ns()
    loop = loop_ns()
    load = os.getloadavg()[0]
    print(f"machine: a data-packet struct.pack_into takes {reference:.0f} ns, a bare loop "
          f"iteration {loop:.0f} ns; load average {load:.1f} on {os.cpu_count()} CPUs")  # fmt: skip
    for payload in args.payload:
        print(f"engine: {args.packets} packets of {payload} B, h0 -> h2, cc {args.cc} ...",
              flush=True)  # fmt: skip
        if args.profile:
            profiler = cProfile.Profile()
            figures = profiler.runcall(
                run, args.packets, payload, args.message_packets, args.window, args.cc
            )
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        else:
            figures = run(args.packets, payload, args.message_packets, args.window, args.cc)
        figures["reference_pack_into_ns"] = reference
        figures["reference_loop_ns"] = loop
        figures["load_average"] = load
        results.append(figures)
        print(
            f"  {figures['packets_per_second']:>10,.0f} packets per CPU second  "
            f"{figures['us_per_packet']:.2f} us/packet  {figures['gbit_per_second']:.2f} Gb/s  "
            f"(wall: {figures['packets_per_wall_second']:,.0f}/s; {figures['data_packets']} "
            f"packets, {figures['acks']} ACKs, {figures['cpu_seconds']:.2f} CPU s, "
            f"retransmits {sum(figures['retransmits'].values())})"
        )
    if args.out:
        args.out.write_text(json.dumps({"engine": results}, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
