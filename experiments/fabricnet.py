"""Build a Mininet network from a fabric model: the switches, hosts and links of the testbed.

Every name, port number and MAC comes from :class:`topologies.Fabric`; this module only turns
them into Mininet nodes and veth pairs. Classes:

- :class:`FabricIntf` -- a link end configured for the fabric: IPv6 off (no DAD, router
  solicitation or MLD noise), checksum and segmentation offloads off, the topology's MTU and,
  when the topology has a link delay, a ``netem`` delay line (see "Link delay" below);
- :class:`FabricSwitch` -- a Mininet ``Switch`` in the root namespace that runs the switch
  process of its target on its interfaces (:func:`targets.factory.fabric_switch`: BMv2's
  ``simple_switch_grpc`` or the switchmodel's ``mrc-switch``);
- :class:`FabricHost` -- a Mininet ``Host`` with one NIC per plane (``h0-p0``, ``h0-p1``...)
  and no IPv4 address on them (the host agent owns the NICs), and ``mgmt0`` on the management
  network (:mod:`experiments.mgmtnet`: IPv4 and IPv6, every host's name in its /etc/hosts);
- :class:`FabricNet` -- the network: :meth:`FabricNet.build` makes it from a fabric,
  :meth:`FabricNet.start` starts every switch and waits until they serve P4Runtime, and
  :meth:`FabricNet.link_down` / :meth:`FabricNet.reboot` are the fault primitives (a failed
  link's ends go down, except those of a switch whose process an interface down would stall,
  BMv2's, which drop everything instead: see :meth:`FabricSwitch.set_port_link`).

Links are plain veth pairs with no traffic-control buffer: rate and queue depth are enforced
inside the switch (the process's ``rate_bps`` and ``queue_depth``), because a qdisc on a link is
a queue the switch cannot see, and trimming and ECN marking would never fire.

Link delay (the topology's per-link latency, dilated: :attr:`topologies.Topology.link_delay_us`)
is applied by one of three mechanisms, named by :attr:`FabricNet.latency_by`:

- ``netem``: a ``netem delay`` on each end of a link (each end delays what it sends). ``netem``
  is given no rate and a limit far above what the delay line ever holds (rate x delay is a few
  packets): it delays, it never queues behind a bottleneck and never drops;
- ``switch``: a kernel without ``sch_netem`` and the switchmodel: the switches' own delay lines
  (:func:`targets.factory.port_latencies`: one link's delay on a port facing a switch, two on a
  port facing a host, so that every path has its links' latency, and as many serialisations
  of each frame: :mod:`targets.delayline`);
- ``agents``: a kernel without ``sch_netem`` and BMv2, which cannot delay: the host agents add
  the whole path's latency (:attr:`FabricNet.path_delay_us`) and each frame's serialisation on
  every link of the path to what they send;
- ``none``: the topology has no link delay.

``targets.factory.choose_target("auto")`` resolves the target before the network is built.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mininet.link import Intf, Link
from mininet.net import Mininet
from mininet.node import Host
from mininet.node import Switch as MnSwitch

from experiments.mgmtnet import ManagementNet
from targets.factory import GRPC_BASE_PORT, fabric_switch, grpc_addr, port_latencies, port_links
from targets.model import ModelSwitch
from targets.process import SwitchProcess
from topologies import Fabric

NETEM_LIMIT = 100_000  # packets: never reached by a delay line (see the module docstring)
#: the qdisc of a failed BMv2 link end: it holds nothing, so it drops every frame sent on it
BLACKHOLE = "pfifo limit 0"


# -- interfaces ------------------------------------------------------------------------------


def delay_qdisc(delay_us: float) -> str | None:
    """The root qdisc that delays what a link end sends by ``delay_us``, or None for none."""
    if delay_us <= 0 or not FabricIntf.netem_available:
        return None
    return f"netem delay {delay_us:g}us limit {NETEM_LIMIT}"


class FabricIntf(Intf):
    """A link end of the fabric: kernel IPv6 off, offloads off, fabric MTU, optional delay."""

    #: False once ``tc`` said the kernel has no netem (links then have no added delay)
    netem_available = True

    def config(
        self, mtu: int | None = None, delay_us: float = 0.0, **params: Any
    ) -> dict[str, Any]:
        """Configure before the link comes up (``Intf.config`` brings it up last)."""
        up = params.pop("up", True)
        # No IPv6 on a fabric port: the kernel must send nothing (no RS, DAD, MLD) and answer
        # nothing; the switch process and the host agent use AF_PACKET below IP.
        self.cmd(f"sysctl -qw net.ipv6.conf.{self.name}.disable_ipv6=1")
        if mtu is not None:
            self.cmd(f"ip link set dev {self.name} mtu {mtu}")
        self.cmd(f"ethtool -K {self.name} rx off tx off sg off tso off gso off gro off")
        qdisc = delay_qdisc(delay_us)
        if qdisc is not None:
            out = self.cmd(f"tc qdisc replace dev {self.name} root {qdisc}")
            if "rror" in out:
                FabricIntf.netem_available = False  # kernel without sch_netem: no delay line
        result: dict[str, Any] = super().config(up=up, **params)
        return result


# -- switches --------------------------------------------------------------------------------


class FabricSwitch(MnSwitch):
    """A fabric switch: a Mininet node in the root namespace running a switch process."""

    def __init__(
        self,
        name: str,
        fabric: Fabric | None = None,
        target: str = "model",
        log_dir: Path | None = None,
        pcap_dir: Path | None = None,
        grpc_base_port: int = GRPC_BASE_PORT,
        **params: Any,
    ) -> None:
        if fabric is None:
            raise ValueError(f"switch {name}: the fabric of the switch is required")
        self.model = fabric.switch(name)
        params.setdefault("dpid", f"{self.model.device_id:x}")
        params["inNamespace"] = False
        super().__init__(name, **params)
        self.process: SwitchProcess = fabric_switch(
            target,
            fabric,
            name,
            grpc=grpc_addr(self.model.device_id, grpc_base_port),
            log_dir=log_dir,
            pcap_dir=pcap_dir,
        )

    @property
    def grpc_addr(self) -> str:
        """The P4Runtime address of the switch process."""
        return self.process.grpc_addr

    def set_port_link(self, intf: str, up: bool, qdisc: str | None = None) -> None:
        """Fail or repair the link of this switch's interface ``intf``.

        The interface goes administratively down or up, as a cable pulled out of a port would
        take it (``qdisc``, the link's delay line, stays on it). A process that an interface
        down would stall (BMv2: ``interface_down_stalls``) keeps its interface up instead, and
        a failed link drops everything the switch sends on it (a ``pfifo`` of length 0,
        :data:`BLACKHOLE`); repaired, the link gets its delay line back, or no qdisc at all.
        """
        if not self.process.interface_down_stalls:
            self.cmd(f"ip link set dev {intf} {'up' if up else 'down'}")
        elif not up:
            out = self.cmd(f"tc qdisc replace dev {intf} root {BLACKHOLE}")
            if out.strip():
                raise RuntimeError(f"switch {self.name}: cannot fail the link of {intf}: {out}")
        elif qdisc is not None:
            self.cmd(f"tc qdisc replace dev {intf} root {qdisc}")
        else:
            self.cmd(f"tc qdisc del dev {intf} root")

    def start(self, controllers: Iterable[object]) -> None:
        """Start the switch process (it gets no OpenFlow controller)."""
        self.process.start()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until the switch serves P4Runtime (raises the process's start error)."""
        self.process.wait_ready(timeout=timeout)

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 -- Mininet's signature
        """Stop the process, then let Mininet remove the interfaces."""
        self.process.stop()
        super().stop(deleteIntfs)

    def kill(self) -> None:
        """Kill the switch process only (the interfaces stay): the first half of a reboot.
        At once, as a switch that crashes or loses power: it forwards nothing from then on."""
        self.process.kill()

    def restart(self, timeout: float = 30.0) -> None:
        """Start the process again with the same command line and wait until it serves."""
        self.process.start()
        self.process.wait_ready(timeout=timeout)

    @property
    def pid_of_process(self) -> int | None:
        """The switch process id while it runs."""
        return self.process.pid


# -- hosts -----------------------------------------------------------------------------------


class FabricHost(Host):
    """A fabric host: its own network namespace, one NIC per plane, no IPv4 address."""

    def __init__(self, name: str, **params: Any) -> None:
        params["inNamespace"] = True
        super().__init__(name, **params)
        # Interfaces made later in this namespace start with IPv6 off (no noise on the
        # fabric); kernel baselines turn it on for their NICs while they run.
        self.cmd("sysctl -qw net.ipv6.conf.default.disable_ipv6=1")
        self.cmd("sysctl -qw net.ipv6.conf.default.accept_dad=0")
        self.cmd("sysctl -qw net.ipv6.conf.default.router_solicitations=0")
        self.cmd("sysctl -qw net.ipv6.conf.default.accept_ra=0")

    def popen(self, *args: Any, **kwargs: Any) -> Any:
        """A process in this host's namespaces, like Mininet's popen, but under the root
        directory of the host's shell: a plain setns() into a mount namespace resets the root,
        which would move the process out of a chroot the testbed runs in."""
        kwargs.setdefault(
            "mncmd",
            [
                "mnexec",
                "-d",
                "nsenter",
                f"--target={self.pid}",
                "--net",
                "--mount",
                "--root",
                "--wd",
            ],
        )
        return super().popen(*args, **kwargs)

    def config(self, **params: Any) -> dict[str, Any]:
        """Bring loopback up; the NICs were configured by their :class:`FabricIntf`."""
        params.pop("ip", None)
        result: dict[str, Any] = super().config(**params)
        return result


# -- the network -----------------------------------------------------------------------------


@dataclass(frozen=True)
class NetOptions:
    """How to run the fabric (immutable)."""

    target: str = "model"  # "bmv2" or "model" (resolve "auto" with choose_target first)
    run_dir: Path = Path("/run/mrc-testbed")
    grpc_base_port: int = GRPC_BASE_PORT
    pcap: bool = False
    ready_timeout: float = 60.0


class FabricNet:
    """A Mininet network built from a fabric, with the fault primitives of the testbed."""

    def __init__(self, fabric: Fabric, options: NetOptions) -> None:
        if options.target not in ("bmv2", "model"):
            raise ValueError(f"target {options.target!r}: expected 'bmv2' or 'model'")
        self.fabric = fabric
        self.options = options
        self.net = Mininet(
            topo=None, controller=None, build=False, autoSetMacs=False, waitConnected=False
        )
        self.switches: dict[str, FabricSwitch] = {}
        self.hosts: dict[str, FabricHost] = {}
        #: what applies the links' latency: "netem", "switch", "agents" or "none" (after build)
        self.latency_by = "none"
        #: the hosts' management network (after build)
        self.mgmt: ManagementNet | None = None

    def grpc_addr(self, name: str) -> str:
        """P4Runtime address of switch ``name``."""
        return grpc_addr(self.fabric.switch(name).device_id, self.options.grpc_base_port)

    @property
    def log_dir(self) -> Path:
        """Where switch logs go."""
        return self.options.run_dir / "logs"

    def build(self) -> None:
        """Create every node and link (switch processes are not started yet)."""
        topo = self.fabric.topology
        pcap_dir = self.options.run_dir / "pcap" if self.options.pcap else None
        for model in self.fabric.switches:
            node = self.net.addSwitch(
                model.name,
                cls=FabricSwitch,
                fabric=self.fabric,
                target=self.options.target,
                log_dir=self.log_dir,
                pcap_dir=pcap_dir,
                grpc_base_port=self.options.grpc_base_port,
            )
            self.switches[model.name] = node
        for host in self.fabric.hosts:
            self.hosts[host.name] = self.net.addHost(host.name, cls=FabricHost, ip=None)
        params = {"mtu": topo.link_mtu, "delay_us": topo.link_delay_us}
        for link in self.fabric.links:
            a_mac = self._mac_of(link.a, link.a_port, link.a_intf)
            b_mac = self._mac_of(link.b, link.b_port, link.b_intf)
            self.net.addLink(
                link.a,
                link.b,
                port1=link.a_port if link.a_port else link.plane,
                port2=link.b_port,
                intfName1=link.a_intf,
                intfName2=link.b_intf,
                addr1=a_mac,
                addr2=b_mac,
                cls=Link,
                intf=FabricIntf,
                params1=dict(params),
                params2=dict(params),
            )
        self.net.build()
        self.mgmt = ManagementNet(self.hosts, self.options.run_dir)
        self.mgmt.up()
        self.latency_by = self._apply_latency()

    def _apply_latency(self) -> str:
        """Give the links' latency to the switches where netem could not (see the module
        docstring); the mechanism that applies it."""
        delay = self.fabric.topology.link_delay_us
        if delay <= 0:
            return "none"
        if FabricIntf.netem_available:
            return "netem"
        if self.options.target != "model":
            return "agents"
        for name, node in self.switches.items():
            if isinstance(node.process, ModelSwitch):
                node.process.port_latency_us = port_latencies(self.fabric, name, delay)
                node.process.port_links = port_links(self.fabric, name)
        return "switch"

    @property
    def delay_applied(self) -> bool:
        """False when the topology asks for a link delay that netem could not apply (the
        switches or the agents then apply it: :attr:`latency_by`)."""
        return self.fabric.topology.link_delay_us <= 0 or FabricIntf.netem_available

    def _mac_of(self, node: str, port: int, intf: str) -> str:
        if self.fabric.node_kind(node) == "host":
            for nic in self.fabric.host(node).nics:
                if nic.intf == intf:
                    return nic.mac
            raise KeyError(f"host {node} has no NIC {intf}")
        return self.fabric.switch(node).port(port).mac

    def start(self, progress: Callable[[str], None] | None = None) -> None:
        """Start every switch process and wait until all serve P4Runtime."""
        for switch in self.switches.values():
            switch.start([])
        deadline = time.monotonic() + self.options.ready_timeout
        for name, switch in self.switches.items():
            switch.wait_ready(timeout=max(1.0, deadline - time.monotonic()))
            if progress is not None:
                progress(name)

    def stop(self) -> None:
        """Stop every switch process and remove every node and interface."""
        for switch in self.switches.values():
            with contextlib.suppress(Exception):
                switch.process.stop()
        if self.mgmt is not None:
            self.mgmt.down()
        self.net.stop()

    # -- faults ------------------------------------------------------------------------------

    def _link_ends(self, a: str, b: str) -> tuple[tuple[str, int, str], tuple[str, int, str]]:
        for link in self.fabric.links:
            if {link.a, link.b} == {a, b}:
                return (link.a, link.a_port, link.a_intf), (link.b, link.b_port, link.b_intf)
        raise KeyError(f"no link between {a} and {b} in fabric {self.fabric.topology.name}")

    def set_link(self, a: str, b: str, up: bool) -> None:
        """Take the cable between nodes ``a`` and ``b`` down or bring it up (both ends; a
        switch end as its target allows, :meth:`FabricSwitch.set_port_link`)."""
        qdisc = delay_qdisc(self.fabric.topology.link_delay_us)
        for node, _, intf in self._link_ends(a, b):
            if node in self.switches:
                self.switches[node].set_port_link(intf, up, qdisc)
            else:
                self.net[node].cmd(f"ip link set dev {intf} {'up' if up else 'down'}")

    def link_down(self, a: str, b: str) -> None:
        """Fail the link between ``a`` and ``b``."""
        self.set_link(a, b, up=False)

    def link_up(self, a: str, b: str) -> None:
        """Repair the link between ``a`` and ``b``."""
        self.set_link(a, b, up=True)

    def kill_switch(self, name: str) -> None:
        """Stop switch ``name``'s process (its tables are lost)."""
        self.switches[name].kill()

    def start_switch(self, name: str) -> None:
        """Start switch ``name``'s process again (empty, like a rebooted switch)."""
        self.switches[name].restart(timeout=self.options.ready_timeout)

    def reboot(self, name: str, down_s: float = 0.0) -> None:
        """Kill switch ``name`` and start it again ``down_s`` seconds later."""
        self.kill_switch(name)
        if down_s > 0:
            time.sleep(down_s)
        self.start_switch(name)

    # -- what the state file records ---------------------------------------------------------

    def node_pids(self) -> dict[str, int]:
        """The pid of every Mininet node shell (hosts hold their namespace)."""
        pids = {name: h.pid for name, h in self.hosts.items()}
        pids.update({name: s.pid for name, s in self.switches.items()})
        return pids


def fabric_interfaces(fabric: Fabric) -> list[str]:
    """Every interface name the fabric's switches have in the root namespace."""
    return [port.intf for sw in fabric.switches for port in sw.ports]


__all__ = [
    "FabricHost",
    "FabricIntf",
    "FabricNet",
    "FabricSwitch",
    "NetOptions",
    "fabric_interfaces",
]
