"""Kernel flows: TCP on one SRv6 path and MPTCP with one subflow per plane, as baselines.

The hosts' NICs normally have IPv6 off (the MRC agent owns them). For a kernel phase,
:class:`KernelFlows` gives each NIC its fabric address and, towards every other host and plane,
a route with the kernel's SRv6 encapsulation::

    ip -6 route replace PEER_NIC/128 encap seg6 mode inline segs CARRIER dev hX-pP mtu lock M
    ip -6 route replace CARRIER/128 dev hX-pP
    ip -6 neigh replace CARRIER lladdr T0_PORT_MAC dev hX-pP nud permanent

``CARRIER`` is the uSID carrier of the first path of that plane (``Fabric.paths``; spine 0
between racks), so the switches forward the packets exactly like MRC's; the receiving kernel
(``seg6_enabled``) processes the inserted SRH and delivers to TCP. TCP connects to the peer's
plane-0 address (one path, like MRC's single-path policy). MPTCP does the same over
``IPPROTO_MPTCP``; the receiver announces its other plane addresses (``ip mptcp endpoint ...
signal``) and the sender's in-kernel path manager opens one subflow to each, so every plane
carries one subflow (the receiver listens on every address, so the joins find it). Afterwards IPv6 is turned off again, which removes addresses, routes and
neighbours, and the MPTCP endpoints are flushed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from experiments.flows.base import Flows, PhaseView
from experiments.metrics import Completion, Progress, flow_name
from experiments.testbed import HostHandle
from topologies import Fabric

BASE_PORT = 25000  # below the ephemeral ports (32768-60999), which outgoing connections take
SRH_ROOM = 80  # bytes left for the inserted SRH (two segments) and slack


def host_commands(fabric: Fabric, host: str, mptcp: bool) -> list[str]:
    """The shell commands that put ``host``'s kernel on the fabric (see the module docstring)."""
    h = fabric.host(host)
    mtu = fabric.topology.link_mtu - SRH_ROOM
    cmds = [
        "sysctl -qw net.ipv6.conf.all.seg6_enabled=1",
        "sysctl -qw net.ipv6.conf.all.accept_dad=0",
    ]
    for nic in h.nics:
        for key, value in (
            ("addr_gen_mode", 1),
            ("accept_dad", 0),
            ("router_solicitations", 0),
            ("accept_ra", 0),
            ("seg6_enabled", 1),
            ("disable_ipv6", 0),
        ):
            cmds.append(f"sysctl -qw net.ipv6.conf.{nic.intf}.{key}={value}")
        cmds.append(f"ip -6 addr add {nic.address}/128 dev {nic.intf} nodad")
    for peer in fabric.hosts:
        if peer.name == host:
            continue
        paths = fabric.paths(host, peer.name)
        for nic in h.nics:
            path = next(p for p in paths if p.plane == nic.plane)
            dst = peer.nic(nic.plane).address
            cmds += [
                f"ip -6 route replace {path.carrier}/128 dev {nic.intf}",
                f"ip -6 neigh replace {path.carrier} lladdr {nic.gateway_mac} dev {nic.intf} "
                "nud permanent",
                f"ip -6 route replace {dst}/128 encap seg6 mode inline segs {path.carrier} "
                f"dev {nic.intf} mtu lock {mtu}",
            ]
    if mptcp:
        cmds += ["ip mptcp endpoint flush", "ip mptcp limits set subflow 8 add_addr_accepted 8"]
        for nic in h.nics[1:]:
            cmds.append(f"ip mptcp endpoint add {nic.address} dev {nic.intf} signal")
    return cmds


def undo_commands(fabric: Fabric, host: str) -> list[str]:
    """Take the kernel off the NICs again."""
    cmds = ["ip mptcp endpoint flush"]
    for nic in fabric.host(host).nics:
        cmds.append(f"sysctl -qw net.ipv6.conf.{nic.intf}.disable_ipv6=1")
    return cmds


def _read_lines(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    try:
        text = path.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def netstat(node: HostHandle) -> dict[str, float]:
    """TCP retransmission timeouts and retransmitted segments of a namespace."""
    out: dict[str, float] = {}
    text = node.cmd("cat /proc/net/netstat /proc/net/snmp")
    lines = text.splitlines()
    for head, values in zip(lines[::2], lines[1::2], strict=False):
        keys, nums = head.split(), values.split()
        if not keys or not nums or keys[0] != nums[0]:
            continue
        for k, v in zip(keys[1:], nums[1:], strict=False):
            if k in ("TCPTimeouts", "RetransSegs") and v.lstrip("-").isdigit():
                out[k] = float(v)
    return out


class KernelFlows(Flows):
    """The workload as kernel TCP or MPTCP connections over SRv6 routes."""

    def __init__(self, phase: PhaseView) -> None:
        super().__init__(phase)
        self.fabric = phase.testbed.fabric
        self.proto = phase.transport.kind  # "tcp" or "mptcp"
        self.dir = self.testbed.run_dir / f"kernel-{phase.transport.name}"
        self.processes: list[subprocess.Popen[bytes]] = []
        self.netstat_before: dict[str, dict[str, float]] = {}
        self.started = False

    def node(self, host: str) -> HostHandle:
        return self.testbed.host(host)

    def prepare(self) -> None:
        """Stop the agents, give the kernel the NICs, set the SRv6 routes."""
        self.testbed.stop_agents()
        scenario = self.phase.scenario
        self.testbed.set_trimming(
            self.phase.transport.trimming, scenario.trim_threshold, scenario.ecn_threshold
        )
        self.dir.mkdir(parents=True, exist_ok=True)
        for host in self.fabric.hosts:
            node = self.node(host.name)
            for cmd in host_commands(self.fabric, host.name, self.proto == "mptcp"):
                out = node.cmd(cmd).strip()
                if out and "rror" in out:
                    raise RuntimeError(f"{host.name}: '{cmd}' failed: {out}")
            self.netstat_before[host.name] = netstat(node)

    def threads(self) -> list[threading.Thread]:
        """One thread starting the flows at their times."""
        return [threading.Thread(target=self._start_flows, daemon=True, name="kernel-flows")]

    def _start_flows(self) -> None:
        phase = self.phase
        py = sys.executable
        order = sorted(
            range(len(self.flows)), key=lambda i: phase.scenario.workloads[self.flows[i][0]].start_s
        )
        for i in order:
            w_index, src, dst = self.flows[i]
            workload = phase.scenario.workloads[w_index]
            if phase.stop.wait(max(0.0, workload.start_s - phase.now())):
                return
            timeout = max(1.0, phase.scenario.duration_s - phase.now())
            common = [
                "--proto",
                self.proto,
                "--port",
                str(BASE_PORT + i),
                "--total",
                str(workload.total_bytes),
                "--message",
                str(workload.message_bytes),
                "--timeout",
                f"{timeout:.1f}",
                "--interval",
                f"{phase.scenario.sample_interval_s / 2:g}",
            ]
            address = str(self.fabric.host(dst).nic(0).address)
            rx_out = open(self.dir / f"rx{i}.jsonl", "wb")  # noqa: SIM115 -- owned by the child
            self.processes.append(
                self.node(dst).popen(
                    [py, "-m", "experiments.flows.kernel_flow", "serve", "--bind", "::", *common],
                    stdout=rx_out,
                    stderr=subprocess.DEVNULL,
                )
            )
            tx_out = open(self.dir / f"tx{i}.jsonl", "wb")  # noqa: SIM115
            self.processes.append(
                self.node(src).popen(
                    [py, "-m", "experiments.flows.kernel_flow", "send", "--dst", address, *common],
                    stdout=tx_out,
                    stderr=subprocess.DEVNULL,
                )
            )
            rx_out.close()
            tx_out.close()
        self.started = True

    def sample(self) -> None:
        """Received bytes of every flow, from the receivers' reports."""
        phase = self.phase
        progress = []
        for i, (_, src, dst) in enumerate(self.flows):
            for rec in _read_lines(self.dir / f"rx{i}.jsonl"):
                if "bytes" in rec:
                    progress.append(
                        Progress(float(rec["t"]) - phase.t0, flow_name(src, dst), int(rec["bytes"]))
                    )
        with phase.lock:
            phase.result.progress = progress

    def finished(self) -> bool:
        """True when every sender has exited."""
        return self.started and all(p.poll() is not None for p in self.processes)

    def finish(self) -> None:
        """Stop what still runs; record completions and TCP retransmission counters."""
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(3.0)
            except subprocess.TimeoutExpired:
                process.kill()
        self.sample()
        phase = self.phase
        for i, (w_index, src, dst) in enumerate(self.flows):
            workload = phase.scenario.workloads[w_index]
            done: dict[int, dict[str, Any]] = {
                int(r["message"]): r
                for r in _read_lines(self.dir / f"tx{i}.jsonl")
                if "message" in r
            }
            for k, size in enumerate(workload.message_sizes()):
                rec = done.get(k)
                phase.result.completions.append(
                    Completion(
                        flow_name(src, dst),
                        k,
                        size,
                        float(rec["start"]) - phase.t0 if rec else phase.now(),
                        float(rec["end"]) - phase.t0 if rec else None,
                    )
                )
        for host in self.fabric.hosts:
            after = netstat(self.node(host.name))
            before = self.netstat_before.get(host.name, {})
            phase.result.hosts[host.name] = {
                "rtos": after.get("TCPTimeouts", 0.0) - before.get("TCPTimeouts", 0.0),
                "retransmitted_segments": after.get("RetransSegs", 0.0)
                - before.get("RetransSegs", 0.0),
            }

    def cleanup(self) -> None:
        """Take the kernel off the NICs and start the agents again."""
        for host in self.fabric.hosts:
            node = self.node(host.name)
            for cmd in undo_commands(self.fabric, host.name):
                node.cmd(cmd)
        if self.testbed.with_agents:
            self.testbed.start_agents()
