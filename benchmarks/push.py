"""Controller push speed over real P4Runtime: a whole fabric from empty, and entries/s to one switch.

Starts one ``mrc-switch`` process per switch of a topology (no data-plane ports: only the
P4Runtime service is exercised) on free loopback ports, then measures:

1. the time to push the whole fabric from empty (pipeline + every table, all switches in
   parallel), then the time of a second push that finds nothing to change;
2. entries per second to one switch: ``--entries`` synthetic ``ipv6_lpm`` routes (distinct /64s)
   inserted in Write requests of each ``--batch`` size, then read back and deleted. The table
   is declared with 1,024 entries in the P4Info, so this part installs the same program with
   ``ipv6_lpm`` enlarged to hold them (switchmodel sizes its tables from the P4Info).

Targets: the default fabric (16 switches) in under 1 s; at least 5,000 entries/s to one switch.

    python benchmarks/push.py [--topology default] [--entries 20000] [--batch 100,1000]
                              [--out results.json]
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from controller.encode import UpdateEncoder
from p4.v1 import p4runtime_pb2 as p4r

from controller.client import P4RuntimeError, SwitchClient, SwitchUnreachable
from controller.entries import IPV6_LPM, SET_NEXT_HOP, Entry, fabric_tables
from controller.p4info import P4Info
from controller.push import PushOptions, SwitchAddress, push_fabric
from targets.model import ModelSwitch
from targets.process import SwitchStartError
from topologies import Fabric, load_topology
from topologies.config import shipped_topology

FABRIC_TARGET_S = 1.0
RATE_TARGET = 5000.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Switches:
    """mrc-switch processes (:class:`ModelSwitch`, no data-plane ports) on free loopback ports."""

    def __init__(self, devices: list[tuple[str, int]], log_dir: Path) -> None:
        self.addresses = [
            SwitchAddress(name, f"127.0.0.1:{free_port()}", device_id)
            for name, device_id in devices
        ]
        self.processes = [
            ModelSwitch(a.name, {}, a.device_id, a.address, log_dir=log_dir, log_level="warning")
            for a in self.addresses
        ]
        try:
            for process in self.processes:
                process.start()
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, timeout: float = 30.0) -> None:
        for process in self.processes:
            process.wait_ready(timeout)

    def stop(self) -> None:
        for process in self.processes:
            process.stop()


def bench_fabric(topology: str, info: P4Info, log_dir: Path) -> dict[str, Any]:
    fabric = Fabric(load_topology(shipped_topology(topology)))
    tables = fabric_tables(fabric)
    switches = Switches([(s.name, s.device_id) for s in fabric.switches], log_dir)
    try:
        switches.wait_ready()
        print(f"{fabric.summary()}", flush=True)
        start = time.perf_counter()
        first = push_fabric(switches.addresses, info, tables, PushOptions())
        first_s = time.perf_counter() - start
        start = time.perf_counter()
        second = push_fabric(switches.addresses, info, tables, PushOptions())
        second_s = time.perf_counter() - start
    finally:
        switches.stop()
    failures = [r.summary() for r in first + second if not r.ok]
    if failures:
        raise SystemExit("push failed:\n" + "\n".join(failures))
    entries = sum(r.added + r.modified for r in first)
    print(
        f"  push from empty: {len(first)} switches, {entries} entries, {first_s:.3f} s "
        f"(target < {FABRIC_TARGET_S:g} s: {'ok' if first_s < FABRIC_TARGET_S else 'MISSED'})"
    )
    print(f"  second push:     {sum(r.changes for r in second)} changes, {second_s:.3f} s")
    return {
        "topology": topology,
        "switches": len(first),
        "entries": entries,
        "push_from_empty_s": first_s,
        "second_push_s": second_s,
        "second_push_changes": sum(r.changes for r in second),
        "slowest_switch_s": max(r.seconds for r in first),
    }


def synthetic_routes(count: int) -> list[Entry]:
    """``count`` distinct /64 routes under 2001:db8::/32 (never used by the fabric)."""
    base = int(ipaddress.IPv6Address("2001:db8::"))
    return [
        Entry.make(
            IPV6_LPM,
            {"hdr.ipv6.dst_addr": ipaddress.IPv6Network((base | (i << 64), 64))},
            SET_NEXT_HOP,
            {"port": 1 + i % 32, "smac": "02:00:00:00:00:01", "dmac": "02:00:00:00:00:02"},
        )
        for i in range(count)
    ]


def bench_one_switch(
    info: P4Info, count: int, batches: list[int], log_dir: Path
) -> list[dict[str, Any]]:
    big = type(info.proto)()
    big.CopyFrom(info.proto)
    for table in big.tables:
        if table.preamble.name == IPV6_LPM:
            table.size = max(table.size, count + 1024)
    bench_info = P4Info(big, "mrc_switch with a large ipv6_lpm")
    routes = synthetic_routes(count)
    encoder = UpdateEncoder(bench_info)
    switches = Switches([("bench", 1)], log_dir)
    results = []
    try:
        switches.wait_ready()
        target = switches.addresses[0]
        client = SwitchClient(target.address, 1, election_id=1, name="bench", p4info=bench_info)
        client.connect()
        client.set_pipeline(bench_info)
        print(f"one switch: {count} ipv6_lpm entries", flush=True)
        for batch in batches:
            start = time.perf_counter()
            for i in range(0, count, batch):
                client.write_encoded(
                    [encoder.update(p4r.Update.INSERT, r) for r in routes[i : i + batch]]
                )
            insert_s = time.perf_counter() - start
            start = time.perf_counter()
            read = client.read_table_entries(IPV6_LPM)
            read_s = time.perf_counter() - start
            if len(read) != count:
                raise SystemExit(f"read back {len(read)} entries, expected {count}")
            start = time.perf_counter()
            for i in range(0, count, batch):
                client.write_encoded(
                    [encoder.update(p4r.Update.DELETE, r) for r in routes[i : i + batch]]
                )
            delete_s = time.perf_counter() - start
            rate = count / insert_s
            print(
                f"  batch {batch:>5}: insert {rate:>8.0f} entries/s ({insert_s:.2f} s), "
                f"read {count / read_s:>8.0f}/s, delete {count / delete_s:>8.0f}/s "
                f"(target >= {RATE_TARGET:g}/s: {'ok' if rate >= RATE_TARGET else 'MISSED'})",
                flush=True,
            )
            results.append(
                {
                    "batch": batch,
                    "entries": count,
                    "insert_per_s": rate,
                    "read_per_s": count / read_s,
                    "delete_per_s": count / delete_s,
                }
            )
        client.close()
    finally:
        switches.stop()
    return results


def bench_encoder_bound(info: P4Info, count: int, batch: int) -> float:
    """Entries/s the controller alone sustains: Writes to a P4Runtime sink that parses nothing."""
    from concurrent import futures

    import grpc
    from controller.encode import write_request

    def write(request: bytes, context: Any) -> bytes:
        return b""  # an empty p4.v1.WriteResponse

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.method_handlers_generic_handler(
        "p4.v1.P4Runtime", {"Write": grpc.unary_unary_rpc_method_handler(write)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        send = channel.unary_unary("/p4.v1.P4Runtime/Write")
        routes = synthetic_routes(count)
        encoder = UpdateEncoder(info)
        start = time.perf_counter()
        for i in range(0, count, batch):
            updates = [encoder.update(p4r.Update.INSERT, r) for r in routes[i : i + batch]]
            send(write_request(1, 1, updates), timeout=30)
        seconds = time.perf_counter() - start
        channel.close()
    finally:
        server.stop(0)
    rate = count / seconds
    print(
        f"controller alone (Writes to a sink that parses nothing), batch {batch}: "
        f"{rate:.0f} entries/s",
        flush=True,
    )
    return rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--topology", default="default", help="shipped topology (default: default)")
    parser.add_argument("--entries", type=int, default=20000, help="synthetic entries (20000)")
    parser.add_argument(
        "--batch",
        default="100,1000",
        help="Write batch sizes to try, comma-separated (100,1000)",
    )
    parser.add_argument("--out", type=Path, help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    try:
        batches = [int(b) for b in args.batch.split(",") if b]
    except ValueError:
        parser.error(f"--batch {args.batch!r}: expected sizes such as 100,1000")
    if not batches or min(batches) < 1 or args.entries < 1:
        parser.error("--batch sizes and --entries must be positive")
    info = P4Info.load()
    with tempfile.TemporaryDirectory(prefix="mrc-bench-push-") as tmp:
        try:
            fabric = bench_fabric(args.topology, info, Path(tmp))
            one = bench_one_switch(info, args.entries, batches, Path(tmp))
        except (SwitchUnreachable, P4RuntimeError, SwitchStartError) as exc:
            print(f"benchmarks/push.py: {exc}", file=sys.stderr)
            return 1
    sink = bench_encoder_bound(info, args.entries, max(batches))
    if args.out:
        figures = {"fabric": fabric, "one_switch": one, "controller_alone_per_s": sink}
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
        print(f"figures written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
