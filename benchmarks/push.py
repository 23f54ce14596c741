"""Controller push speed over real P4Runtime: a whole fabric from empty, and entries/s to one switch.

Starts one ``mrc-switch`` process per switch of a topology (no data-plane ports: only the
P4Runtime service is exercised) on free loopback ports, then measures:

1. the time to push the whole fabric from empty (pipeline + every table, all switches in
   parallel), then the time of a second push that finds nothing to change;
2. entries per second to one switch: ``--entries`` synthetic ``ipv6_lpm`` routes (distinct /64s)
   inserted in Write requests of each ``--batch`` size, then read back and deleted. The table
   is declared with 1,024 entries in the P4Info, so this part installs the same program with
   ``ipv6_lpm`` enlarged to hold them (switchmodel sizes its tables from the P4Info). Each rate
   is given per second of wall clock and per second of CPU (this process and the switch's
   together), the steadier figure on a machine shared with other work;

3. entries per second the controller alone sustains: the same inserts, sent to a P4Runtime sink
   that parses nothing.

Every figure depends on the protobuf runtime the P4Runtime classes run on (the first line says
which): docs/controller.md compares them.

Targets: the default fabric (16 switches) in under 1 s; at least 5,000 entries/s to one switch.

    python benchmarks/push.py [--topology default] [--entries 20000] [--batch 100,1000]
                              [--out results.json]
"""

from __future__ import annotations

import argparse
import functools
import ipaddress
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.protobuf import __version__ as protobuf_version
from google.protobuf.internal import api_implementation

from controller.client import P4RuntimeError, SwitchClient, SwitchUnreachable
from controller.entries import Entry, fabric_tables
from controller.p4info import P4Info
from controller.push import PushOptions, SwitchAddress, push_fabric
from p4src import contract
from p4src.contract import IPV6_LPM, SET_NEXT_HOP
from p4src.proto import p4r
from targets.lab import free_port
from targets.model import ModelSwitch
from targets.process import SwitchStartError
from topologies import Fabric, load_topology
from topologies.config import shipped_topology

FABRIC_TARGET_S = 1.0
RATE_TARGET = 5000.0


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
            {contract.DST_ADDR: ipaddress.IPv6Network((base | (i << 64), 64))},
            SET_NEXT_HOP,
            contract.params_of(
                contract.NextHopParams(1 + i % 32, "02:00:00:00:00:01", "02:00:00:00:00:02")
            ),
        )
        for i in range(count)
    ]


def cpu_seconds(pid: int | None = None) -> float:
    """CPU time (user and system, every thread) of this process, or of process ``pid``."""
    if pid is None:
        return time.process_time()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(run: Callable[[], None], pid: int | None) -> tuple[float, float]:
    """Wall-clock seconds of ``run()``, and the CPU seconds this process and the switch process
    ``pid`` spent on it: on a loaded machine the second is the steadier figure."""
    wall, cpu = time.perf_counter(), cpu_seconds() + (cpu_seconds(pid) if pid else 0.0)
    run()
    used = cpu_seconds() + (cpu_seconds(pid) if pid else 0.0) - cpu
    return time.perf_counter() - wall, max(used, 1e-3)


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
    switches = Switches([("bench", 1)], log_dir)
    results = []
    try:
        switches.wait_ready()
        target = switches.addresses[0]
        client = SwitchClient(target.address, 1, election_id=1, name="bench", p4info=bench_info)
        client.connect()
        client.set_pipeline(bench_info)
        print(
            f"one switch: {count} ipv6_lpm entries (per s of wall clock; per s of CPU)", flush=True
        )
        pid = switches.processes[0].pid

        def write(method: Callable[[list[Any]], None], batch: int) -> None:
            for i in range(0, count, batch):
                method([r.to_proto(bench_info) for r in routes[i : i + batch]])

        def read() -> None:
            found = client.read_table_entries(IPV6_LPM)
            if len(found) != count:
                raise SystemExit(f"read back {len(found)} entries, expected {count}")

        for batch in batches:
            figures: dict[str, Any] = {"batch": batch, "entries": count}
            line = f"  batch {batch:>5}:"
            for name, run in (
                ("insert", functools.partial(write, client.insert, batch)),
                ("read", read),
                ("delete", functools.partial(write, client.delete, batch)),
            ):
                wall, cpu = timed(run, pid)
                figures[f"{name}_per_s"] = count / wall
                figures[f"{name}_per_cpu_s"] = count / cpu
                line += f" {name} {count / wall:>7.0f}/s {count / cpu:>7.0f}/CPU-s,"
            rate = figures["insert_per_s"]
            print(
                f"{line} (target >= {RATE_TARGET:g}/s: {'ok' if rate >= RATE_TARGET else 'MISSED'})",
                flush=True,
            )
            results.append(figures)
        client.close()
    finally:
        switches.stop()
    return results


def bench_encoder_bound(info: P4Info, count: int, batch: int) -> float:
    """Entries/s the controller alone sustains: Writes to a P4Runtime sink that parses nothing."""
    from concurrent import futures

    import grpc

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
        send = channel.unary_unary(
            "/p4.v1.P4Runtime/Write", request_serializer=p4r.WriteRequest.SerializeToString
        )
        routes = synthetic_routes(count)

        def send_all() -> None:
            for i in range(0, count, batch):
                request = p4r.WriteRequest(device_id=1, election_id=p4r.Uint128(low=1))
                request.atomicity = p4r.WriteRequest.CONTINUE_ON_ERROR
                request.updates.extend(
                    SwitchClient.updates(
                        p4r.Update.INSERT, [r.to_proto(info) for r in routes[i : i + batch]]
                    )
                )
                send(request, timeout=30)

        seconds, cpu = timed(send_all, None)
        channel.close()
    finally:
        server.stop(0)
    rate = count / seconds
    print(
        f"controller alone (Writes to a sink that parses nothing), batch {batch}: "
        f"{rate:.0f} entries/s, {count / cpu:.0f}/CPU-s",
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
    runtime = f"protobuf {protobuf_version} ({api_implementation.Type()})"
    print(f"P4Runtime classes on {runtime}", flush=True)
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
        figures = {
            "protobuf": runtime,
            "fabric": fabric,
            "one_switch": one,
            "controller_alone_per_s": sink,
        }
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
        print(f"figures written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
