"""Forwarding rate of one switch: packets/s and Mbit/s at several MRC payload sizes, and its CPU.

A sender and a receiver run as separate processes in their own namespaces (``smbS<id>`` and
``smbR<id>``), each on one end of a veth pair whose other end is a port of the switch under test
in the root namespace. The switch plays spine ``t1-p0-s0`` of the small fabric with its whole
intended table set installed over P4Runtime (uN SID, End SID, routes, port_qos with thresholds
no queue reaches: trimming enabled but never triggered). The sender sends MRC WRITE packets
whose uSID carrier the spine shifts and routes from port 1 to port 2, as fast as it can for
``--seconds``; the receiver counts what arrives. The switch's CPU use comes from
``/proc/PID/stat``. Both targets run where they exist: switchmodel always, BMv2 when p4c and
simple_switch_grpc are on PATH::

    sudo .venv/bin/python benchmarks/switch_pps.py [--sizes 64 1500 4096] [--seconds 3]
        [--target model|bmv2|both] [--pin] [--profile FILE] [--out results.json]

``pps per core`` is the received rate divided by the fraction of one core the switch used: what
the switch forwards when a whole core is its own (the sender and the receiver share the
machine's cores with it during the run). ``sent``, ``sw in``, ``sw out`` and ``received`` show
where frames were lost: between sender and switch (the switch was not scheduled in time and its
socket overflowed), in the switch (queue drops), or towards the receiver.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from p4src import contract
from targets.interrupt import handle_termination

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SO_RCVBUFFORCE = 33
LINK_MTU = 9000
NEVER = contract.QDEPTH_MAX  # a threshold no bit<19> queue depth reaches

if TYPE_CHECKING:
    from targets.process import SwitchProcess


@dataclass
class Result:
    """One measurement."""

    target: str
    payload: int
    frame: int
    sent: int
    received: int
    seconds: float
    pps: float
    mbps: float
    cpu_percent: float
    pps_per_core: float
    switch_in: int = 0  # frames the switch's pipeline saw (port_in of the ingress port)
    switch_out: int = 0  # frames it sent (port_out of the egress port)


# -- sender and receiver (run in their namespaces as subprocesses of this script) -----------------


def _packet_socket(intf: str) -> socket.socket:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # nothing until bind()
    sock.bind((intf, ETH_P_ALL))
    return sock


def run_sender(intf: str, frame_hex: str, seconds: float) -> None:
    """Send one frame over and over for ``seconds``; print how many went out."""
    frame = bytes.fromhex(frame_hex)
    sock = _packet_socket(intf)
    send = sock.send
    sent = 0
    deadline = time.monotonic() + seconds
    monotonic = time.monotonic
    while monotonic() < deadline:
        for _ in range(64):
            try:
                send(frame)
                sent += 1
            except OSError:  # transmit queue full: let the switch catch up
                time.sleep(0.0001)
    print(json.dumps({"sent": sent}), flush=True)


def run_receiver(intf: str, seconds: float, ready_file: str) -> None:
    """Count frames and bytes arriving for ``seconds`` after the first one; print the totals."""
    sock = _packet_socket(intf)
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 32 << 20)
    buf = bytearray(65536)
    Path(ready_file).write_text("ready")
    sock.settimeout(seconds + 5)
    count = 0
    nbytes = 0
    try:
        n, address = sock.recvfrom_into(buf)
    except TimeoutError:
        print(json.dumps({"received": 0, "bytes": 0, "seconds": 0.0}), flush=True)
        return
    start = time.monotonic()
    last = start
    sock.settimeout(0.5)
    recv_into = sock.recvfrom_into
    while True:
        try:
            n, address = recv_into(buf)
        except TimeoutError:
            break
        if address[2] == PACKET_OUTGOING:
            continue
        count += 1
        nbytes += n
        last = time.monotonic()
    print(json.dumps({"received": count, "bytes": nbytes, "seconds": last - start}), flush=True)


# -- the bench --------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Bench:
    """Namespaces, veths and the spine's tables; one switch at a time between them."""

    def __init__(self) -> None:
        from controller.entries import Entry, switch_tables
        from p4src.contract import PORT_QOS, SET_PORT_QOS
        from targets.lab import NetnsLab
        from topologies import Fabric, load_topology
        from topologies import usid as usidlib
        from topologies.config import shipped_topology

        tag = os.getpid() % 10000
        self.traffic_cpu: int | None = None  # CPU of sender and receiver when pinned
        self.ns_send, self.ns_recv = f"smbS{tag}", f"smbR{tag}"
        self.sw_in, self.host_in = f"smb{tag}i", f"smb{tag}I"
        self.sw_out, self.host_out = f"smb{tag}o", f"smb{tag}O"
        self.lab = NetnsLab()
        fabric = Fabric(load_topology(shipped_topology("small")))
        self.fabric = fabric
        self.spine = fabric.switch("t1-p0-s0")
        path = next(p for p in fabric.paths("h0", "h2") if p.plane == 0 and p.spine == 0)
        hop = next(h for h in path.hops if h.switch == self.spine.name)
        self.in_port, self.out_port = hop.in_port, hop.out_port
        self.carrier = path.carrier
        self.src = path.src_nic.address
        self.in_peer = self.spine.port(self.in_port)
        tables = switch_tables(fabric, self.spine)
        self.entries = [e for e in tables.entries if e.table != PORT_QOS] + [
            Entry.make(PORT_QOS, {contract.EGRESS_SPEC: port.number}, SET_PORT_QOS,
                       contract.params_of(contract.PortQosParams(NEVER, NEVER, NEVER, 0, 0)))
            for port in self.spine.ports
        ]  # fmt: skip
        assert usidlib.active(self.carrier) == self.spine.usid

    def setup(self) -> None:
        """The sender's and the receiver's namespace, each joined to a switch port by a veth."""
        for sw_side, host_side, ns in (
            (self.sw_in, self.host_in, self.ns_send),
            (self.sw_out, self.host_out, self.ns_recv),
        ):
            self.lab.add_netns(ns)
            self.lab.add_veth(sw_side, host_side, b_netns=ns, mtu=LINK_MTU)

    def cleanup(self) -> None:
        self.lab.cleanup()

    def frame(self, payload: int) -> bytes:
        """An MRC WRITE (DSCP 10, ECT(0)) from the rack-0 leaf to the spine, as struct builds it."""
        import ipaddress
        import struct

        mac = lambda text: bytes.fromhex(text.replace(":", ""))  # noqa: E731
        body = (
            struct.pack(
                "!BBHII", contract.Opcode.WRITE_ONLY, 0, 0xFFFF, 0x12, 1
            )  # BTH: WRITE Only, QP 0x12, PSN 1
            + struct.pack("!QII", 0x10000, 0x55, payload)  # RETH
            + bytes([contract.ExtType.DATA])
            + bytes(23)  # MRC data extension
            + bytes(payload)
        )
        udp = struct.pack("!HHHH", 0xC000, contract.ROCEV2_UDP_PORT, 8 + len(body), 0) + body
        tc = contract.Dscp.TRIMMABLE << 2 | contract.Ecn.ECT0
        ipv6 = struct.pack(
            "!IHBB", 6 << 28 | tc << 20 | 0x12345, len(udp), contract.IP_PROTO_UDP, 64
        )
        ipv6 += ipaddress.IPv6Address(self.src).packed + ipaddress.IPv6Address(self.carrier).packed
        return (
            mac(self.in_peer.mac)
            + mac(self.in_peer.peer_mac)
            + contract.ETHERTYPE_IPV6.to_bytes(2, "big")
            + ipv6
            + udp
        )

    def measure(self, target: str, pid: int, payload: int, seconds: float) -> Result:
        frame = self.frame(payload)
        ready = Path(f"/tmp/smb-ready-{os.getpid()}")
        ready.unlink(missing_ok=True)
        me = [sys.executable, str(Path(__file__).resolve())]
        pin = ["taskset", "-c", str(self.traffic_cpu)] if self.traffic_cpu is not None else []
        receiver = subprocess.Popen(
            ["ip", "netns", "exec", self.ns_recv, *pin, *me, "--role", "receive", "--intf",
             self.host_out, "--seconds", str(seconds), "--ready-file", str(ready)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        ready.unlink(missing_ok=True)
        cpu_before, wall_before = cpu_seconds(pid), time.monotonic()
        sender = subprocess.run(
            ["ip", "netns", "exec", self.ns_send, *pin, *me, "--role", "send", "--intf", self.host_in,
             "--frame", frame.hex(), "--seconds", str(seconds)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        out, _ = receiver.communicate(timeout=seconds + 20)
        cpu = cpu_seconds(pid) - cpu_before
        wall = time.monotonic() - wall_before - 0.5  # the receiver's closing silence
        sent = json.loads(sender.stdout)["sent"]
        got = json.loads(out)
        span = got["seconds"] or seconds
        pps = got["received"] / span if span else 0.0
        share = cpu / wall if wall > 0 else 0.0
        return Result(
            target=target, payload=payload, frame=len(frame), sent=sent,
            received=got["received"], seconds=round(span, 3), pps=round(pps),
            mbps=round(got["bytes"] * 8 / span / 1e6, 1) if span else 0.0,
            cpu_percent=round(100 * share, 1),
            pps_per_core=round(pps / share) if share > 0.05 else 0,
        )  # fmt: skip


def start_switch(target: str, bench: Bench, workdir: Path, profile: Path | None) -> SwitchProcess:
    """The spine on ``target``, on the bench's two ports, unshaped, with deep queues; started."""
    from targets.factory import fabric_switch
    from targets.lab import free_port
    from targets.model import ModelSwitch, mrc_switch_command

    switch = fabric_switch(
        target, bench.fabric, bench.spine.name, ports={bench.in_port: bench.sw_in,
        bench.out_port: bench.sw_out}, grpc=f"127.0.0.1:{free_port()}", thrift_port=free_port(),
        quiet=True, shaped=False, queue_depth=1024, mtu=LINK_MTU, log_dir=workdir,
    )  # fmt: skip
    if profile is not None and isinstance(switch, ModelSwitch):
        switch.executable = [*mrc_switch_command(), "--profile", str(profile.resolve())]
    switch.start()
    switch.wait_ready(timeout=60)
    return switch


def push(bench: Bench, switch: SwitchProcess, device_config: bytes) -> None:
    from controller.client import SwitchClient
    from controller.p4info import P4Info
    from p4src.compile import committed_pipeline

    info = P4Info.load(committed_pipeline()[0])
    with SwitchClient(
        switch.grpc_addr, device_id=switch.device_id, p4info=info, name="bench"
    ) as client:
        client.set_pipeline(info, device_config=device_config)
        client.insert([e.to_proto(info) for e in bench.entries if not e.is_default])
        client.modify([e.to_proto(info) for e in bench.entries if e.is_default])


def switch_counts(bench: Bench, switch: SwitchProcess) -> tuple[int, int]:
    """port_in of the ingress port and port_out of the egress port (packets), over P4Runtime."""
    from controller.client import SwitchClient
    from controller.p4info import P4Info
    from p4src.compile import committed_pipeline

    info = P4Info.load(committed_pipeline()[0])
    with SwitchClient(
        switch.grpc_addr, device_id=switch.device_id, election_id=2, p4info=info, name="bench"
    ) as client:
        port_in = client.read_counter(contract.PORT_IN).get(bench.in_port, (0, 0))[0]
        port_out = client.read_counter(contract.PORT_OUT).get(bench.out_port, (0, 0))[0]
    return port_in, port_out


def print_table(results: Sequence[Result]) -> None:
    header = (
        f"{'target':<8} {'payload':>7} {'frame':>6} {'sent pps':>10} {'recv pps':>10} "
        f"{'Mbit/s':>8} {'switch CPU':>10} {'pps/core':>9} {'sent':>8} {'sw in':>8} "
        f"{'sw out':>8} {'received':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        sent_pps = r.sent / r.seconds if r.seconds else 0
        print(
            f"{r.target:<8} {r.payload:>7} {r.frame:>6} {sent_pps:>10.0f} {r.pps:>10.0f} "
            f"{r.mbps:>8.1f} {r.cpu_percent:>9.1f}% {r.pps_per_core:>9} {r.sent:>8} "
            f"{r.switch_in:>8} {r.switch_out:>8} {r.received:>8}"
        )


def main(argv: list[str] | None = None) -> int:
    handle_termination()  # SIGTERM cleans up as Ctrl-C does: nothing is left running
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[64, 1500, 4096],
        help="MRC payload bytes per packet",
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="sending time per size")
    parser.add_argument("--target", choices=("model", "bmv2", "both"), default="both")
    parser.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="switch on CPU 0, sender and receiver on CPU 1 (helps on an otherwise idle "
        "machine; on a shared one the switch then competes for CPU 0 with everything else)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        metavar="FILE",
        help="profile the switchmodel's data path into FILE (cProfile stats)",
    )
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument(
        "--role", choices=("bench", "send", "receive"), default="bench", help=argparse.SUPPRESS
    )
    parser.add_argument("--intf", help=argparse.SUPPRESS)
    parser.add_argument("--frame", help=argparse.SUPPRESS)
    parser.add_argument("--ready-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == "send":
        run_sender(args.intf, args.frame, args.seconds)
        return 0
    if args.role == "receive":
        run_receiver(args.intf, args.seconds, args.ready_file)
        return 0
    if os.geteuid() != 0:
        print("switch_pps: needs root (namespaces, veth pairs, raw sockets)", file=sys.stderr)
        return 1
    for size in args.sizes:
        if not 0 <= size <= LINK_MTU - 200:
            parser.error(f"--sizes {size}: expected 0..{LINK_MTU - 200} payload bytes")

    from p4src.compile import committed_pipeline
    from targets.bmv2 import missing_tools

    targets = ["model", "bmv2"] if args.target == "both" else [args.target]
    if "bmv2" in targets and missing_tools():
        print(f"bmv2: skipped ({', '.join(missing_tools())} not on PATH)")
        targets.remove("bmv2")
    bench = Bench()
    results: list[Result] = []
    workdir = Path(f"/tmp/smb-logs-{os.getpid()}")
    workdir.mkdir(exist_ok=True)
    try:
        bench.setup()
        for target in targets:
            switch = start_switch(target, bench, workdir, args.profile)
            pid = int(switch.pid or 0)
            # BMv2 is given p4c's JSON with the P4Info; switchmodel implements the program itself
            device_config = committed_pipeline()[1].read_bytes() if target == "bmv2" else b""
            if args.pin:
                subprocess.run(["taskset", "-a", "-cp", "0", str(pid)], check=True)  # core 0
                bench.traffic_cpu = 1
            try:
                push(bench, switch, device_config)
                for size in args.sizes:
                    print(f"{target}: {size}-byte payloads for {args.seconds:g} s ...", flush=True)
                    before = switch_counts(bench, switch)
                    result = bench.measure(target, pid, size, args.seconds)
                    after = switch_counts(bench, switch)
                    result.switch_in = after[0] - before[0]
                    result.switch_out = after[1] - before[1]
                    results.append(result)
            finally:
                switch.stop()
    finally:
        bench.cleanup()
    print()
    print_table(results)
    if args.out is not None:
        args.out.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
        print(f"\nresults written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
