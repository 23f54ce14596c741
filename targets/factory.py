"""From a switch of the fabric to its switch process: the one mapping every runner uses.

The Mininet fabric (:mod:`experiments.fabricnet`), the namespace racks of the agent tests
(:mod:`experiments.hostnets`) and the benchmarks all start their switches with
:func:`fabric_switch`: the switch's name, device id and ports come from the fabric model, its
shaping (link rate, queue depth, MTU) from the topology, its P4Runtime address from
:func:`grpc_addr` (``127.0.0.1:`` :data:`GRPC_BASE_PORT` + device id) and, for BMv2, its Thrift
port from :data:`THRIFT_BASE_PORT` + device id. A caller overrides what it must (the ports it
wires, a free gRPC port, a deeper queue)::

    process = fabric_switch("model", fabric, "t0-p0-r0", log_dir=Path("logs"))
    process.start()
    process.wait_ready()

:func:`choose_target` resolves ``auto`` to ``bmv2`` when ``simple_switch_grpc`` and
``simple_switch_CLI`` are on PATH, else to ``model``.
"""

from __future__ import annotations

from collections.abc import Mapping

from p4src.contract import largest_data_packet
from targets.bmv2 import Bmv2Switch, missing_tools
from targets.model import ModelSwitch
from targets.process import StrPath, SwitchProcess
from topologies import Fabric
from topologies.config import control_queue_depth

#: the switch targets a fabric is emulated on (a switch process per switch)
SWITCH_TARGETS = ("auto", "bmv2", "model")
#: the virtual-time target: no switch process, the in-memory network of ``sim/`` in simulated
#: time (``mrc-testbed run --target sim``, :mod:`experiments.sim_target`)
SIM_TARGET = "sim"
#: every target a scenario runs on
TARGETS = (*SWITCH_TARGETS, SIM_TARGET)
#: switch with device id N serves P4Runtime on GRPC_BASE_PORT + N. Below Linux's ephemeral range
#: (32768-60999 by default): a server port inside it can be taken as the source port of any
#: outgoing connection of the root namespace (a gRPC client of another switch, say), and the
#: switch then fails to start with "Address already in use".
GRPC_BASE_PORT = 29000
THRIFT_BASE_PORT = 9190  # BMv2 runtime CLI port: THRIFT_BASE_PORT + device id
PRIORITY_QUEUES = 2  # control (ACKs, NACKs, probes, trimmed headers) above data


class TargetUnavailable(RuntimeError):
    """The requested switch target cannot run on this machine."""


def choose_target(target: str) -> str:
    """Resolve ``auto`` to ``bmv2`` or ``model``; check that an explicit choice can run.

    BMv2 needs ``simple_switch_grpc`` and ``simple_switch_CLI``; the program it runs is p4c's
    committed output, so p4c itself is not needed to run a fabric.
    """
    if target not in SWITCH_TARGETS:
        sim = " (sim runs scenarios without switches: mrc-testbed run --target sim)"
        raise ValueError(
            f"target {target!r}: expected one of {', '.join(SWITCH_TARGETS)}"
            + (sim if target == SIM_TARGET else "")
        )
    missing = missing_tools()
    if target == "auto":
        return "model" if missing else "bmv2"
    if target == "bmv2" and missing:
        raise TargetUnavailable(
            f"target bmv2: {' and '.join(missing)} must be on PATH "
            "(install them with 'scripts/install.sh --with-bmv2', or use --target model)"
        )
    return target


def grpc_addr(device_id: int, base_port: int = GRPC_BASE_PORT) -> str:
    """The P4Runtime address of the switch with ``device_id``."""
    return f"127.0.0.1:{base_port + device_id}"


#: switch ports are shaped this much faster than the link rate the host NICs pace at. A port
#: fed at exactly its own rate (a permutation's last hop: one sender's NIC) has no slack, and
#: the emulation's processes wake a fraction of a frame late now and then: at zero slack each
#: such jitter stays in the queue, which RED then marks and NSCC answers by slowing down (the
#: default fabric's permutation: 3,572 ECN marks and 0.87 of capacity, against 71 and 0.93 in
#: the sim, which has no jitter; 59 and 0.94 with this). A testbed choice: where a switch port
#: is the bottleneck (an incast, a failed link) the emulated fabric is this much faster than
#: the real one (docs/experiments.md, "Switch ports 2 % faster than the NICs").
PORT_SPEEDUP = 0.02


def port_links(fabric: Fabric, name: str) -> dict[int, int]:
    """The links switch ``name``'s delay line stands for on each port, so that every path
    gets each of its links once: a port facing a switch one, a port facing a host two (that
    link both ways: hosts send at once)."""
    return {port.number: 2 if port.peer_port == 0 else 1 for port in fabric.switch(name).ports}


def port_latencies(fabric: Fabric, name: str, delay_us: float) -> dict[int, float]:
    """The latency (us) switch ``name``'s delay lines apply on each port, so that every path
    gets ``delay_us`` per link (:func:`port_links` of them)."""
    return {number: delay_us * links for number, links in port_links(fabric, name).items()}


def fabric_switch(
    target: str,
    fabric: Fabric,
    name: str,
    *,
    ports: Mapping[int, str] | None = None,
    grpc: str | None = None,
    thrift_port: int | None = None,
    shaped: bool = True,
    queue_depth: int | None = None,
    mtu: int | None = None,
    quiet: bool = False,
    log_dir: StrPath | None = None,
    pcap_dir: StrPath | None = None,
) -> SwitchProcess:
    """The process (not started) that runs fabric switch ``name`` on ``target``.

    ``ports`` (default: every port of the switch, by its fabric interface name) says which
    interfaces it gets; ``grpc`` (default :func:`grpc_addr`) and ``thrift_port`` (BMv2 only,
    default :data:`THRIFT_BASE_PORT` + device id) where it serves. Every port is shaped to the
    topology's link rate unless not ``shaped``; ``queue_depth`` and ``mtu`` replace the
    topology's. ``quiet`` logs warnings and errors only.
    """
    switch = fabric.switch(name)
    topo = fabric.topology
    if ports is None:
        ports = {port.number: port.intf for port in switch.ports}
    identity = (name, ports, switch.device_id, grpc or grpc_addr(switch.device_id))
    rate_bps = int(topo.link_rate_mbps * 1_000_000 * (1 + PORT_SPEEDUP)) if shaped else None
    queue_depth = queue_depth or topo.queue_depth
    mtu = mtu or topo.link_mtu
    control_depth = control_queue_depth(queue_depth, mtu)
    if target == "bmv2":
        return Bmv2Switch(
            *identity,
            thrift_port=thrift_port or THRIFT_BASE_PORT + switch.device_id,
            log_level="warn" if quiet else "info",
            priority_queues=PRIORITY_QUEUES, rate_bps=rate_bps, queue_depth=queue_depth,
            control_queue_depth=control_depth, mtu=mtu, log_dir=log_dir, pcap_dir=pcap_dir,
            paced_packet_bytes=largest_data_packet(topo.mtu),
        )  # fmt: skip
    if target == "model":
        return ModelSwitch(
            *identity,
            log_level="warning" if quiet else "info",
            priority_queues=PRIORITY_QUEUES, rate_bps=rate_bps, queue_depth=queue_depth,
            control_queue_depth=control_depth, mtu=mtu, log_dir=log_dir, pcap_dir=pcap_dir,
        )  # fmt: skip
    raise ValueError(f"target {target!r}: expected 'bmv2' or 'model'")


__all__ = [
    "GRPC_BASE_PORT",
    "PORT_SPEEDUP",
    "SIM_TARGET",
    "SWITCH_TARGETS",
    "TARGETS",
    "THRIFT_BASE_PORT",
    "TargetUnavailable",
    "choose_target",
    "fabric_switch",
    "grpc_addr",
    "port_latencies",
]
