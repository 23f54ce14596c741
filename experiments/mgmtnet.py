"""The management network: the front-end LAN every testbed host is on besides the fabric.

Applications written for real MRC NICs exchange their QP numbers, PSNs, rkeys and GIDs with the
peer over TCP on the cluster's management network, naming the peer by host name. The testbed
gives them one: a Linux bridge (:data:`BRIDGE`) in a network namespace of its own (held by the
node :data:`SWITCH_NODE`, a Mininet node outside the fabric) with one veth pair per host, the
host's end ``mgmt0`` carrying an IPv4 address of :data:`IPV4_NET` (private) and an IPv6 one of
:data:`IPV6_NET` (unique local), and a hosts file bind-mounted on ``/etc/hosts`` in each host's
mount namespace, so that every host resolves every host's name (in ``mrc-testbed exec``, in the
Mininet CLI and in any process of the host).

It is a LAN of its own and nothing else:

- separate from the fabric planes: the agents' ``AF_PACKET`` sockets are bound to the plane
  NICs, so no MRC frame is ever sent on it;
- closed: no end of it is in the root namespace (the veth pairs are made in their namespaces
  directly), the bridge has no address, the hosts have no default route (only the LAN's own
  prefixes), and nothing forwards or translates it: nothing on it reaches the machine's own
  networks or beyond; two testbeds on one machine have a LAN each;
- up whenever the fabric is: :class:`experiments.fabricnet.FabricNet` builds it with the hosts
  and stops it with them; ending the switch node's shell removes the bridge and every veth.
"""

from __future__ import annotations

import contextlib
import ipaddress
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from mininet.node import Node

#: the node whose namespace holds the bridge (its shell is ``mininet:mrc-mgmt``)
SWITCH_NODE = "mrc-mgmt"
#: the bridge, in the switch node's namespace
BRIDGE = "mgmt"
#: the host's end of its veth pair, in the host's namespace
HOST_INTF = "mgmt0"
#: the LAN's IPv4 prefix (RFC 1918); host N of the fabric's list is .N+1
IPV4_NET = ipaddress.IPv4Network("10.213.0.0/16")
#: the LAN's IPv6 prefix (a unique local address, RFC 4193)
IPV6_NET = ipaddress.IPv6Network("fd6d:7263:7462:1::/64")
#: the file bind-mounted on each host's /etc/hosts, in the run directory
HOSTS_FILE = "mgmt-hosts"


class MgmtHost(Protocol):
    """A host node as the management network uses it (a Mininet host: its shell runs in the
    host's network and mount namespaces)."""

    @property
    def pid(self) -> int: ...
    def cmd(self, command: str) -> str: ...


@dataclass(frozen=True)
class MgmtAddress:
    """A host's addresses on the management network."""

    host: str
    ipv4: ipaddress.IPv4Address
    ipv6: ipaddress.IPv6Address


def addresses(hosts: Iterable[str]) -> list[MgmtAddress]:
    """The management addresses of ``hosts``, in their order (the fabric's)."""
    out = []
    for index, name in enumerate(hosts):
        if index + 2 >= IPV4_NET.num_addresses:
            raise ValueError(f"{index + 1} hosts do not fit the management network {IPV4_NET}")
        out.append(MgmtAddress(name, IPV4_NET[index + 1], IPV6_NET[index + 1]))
    return out


def hosts_file(entries: Iterable[MgmtAddress]) -> str:
    """The ``/etc/hosts`` of every testbed host: loopback, then each host's two addresses."""
    lines = [
        "# mrc-testbed: the management network (experiments/mgmtnet.py)",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
    ]
    for entry in entries:
        lines += [f"{entry.ipv4}\t{entry.host}", f"{entry.ipv6}\t{entry.host}"]
    return "\n".join(lines) + "\n"


class ManagementNet:
    """The management network of a set of hosts (see the module docstring)."""

    def __init__(self, hosts: Mapping[str, MgmtHost], run_dir: Path) -> None:
        self.hosts = dict(hosts)
        self.entries = addresses(self.hosts)
        self.hosts_path = run_dir / HOSTS_FILE
        self.switch: Node | None = None

    @property
    def switch_pid(self) -> int:
        """The process holding the bridge's namespace (for a capture on :data:`BRIDGE`)."""
        assert self.switch is not None, "the management network is not up"
        return int(self.switch.pid)

    def up(self) -> None:
        """The bridge, each host's veth with its addresses, and each host's /etc/hosts."""
        self.switch = switch = Node(SWITCH_NODE, inNamespace=True)
        _run(switch, "switch", f"ip link add {BRIDGE} type bridge && ip link set {BRIDGE} up")
        self.hosts_path.parent.mkdir(parents=True, exist_ok=True)
        self.hosts_path.write_text(hosts_file(self.entries))
        for entry in self.entries:
            node = self.hosts[entry.host]
            # both ends made in their namespaces: the root namespace never holds one
            subprocess.run(
                ["ip", "link", "add", "name", entry.host, "netns", str(switch.pid), "type",
                 "veth", "peer", "name", HOST_INTF, "netns", str(node.pid)],
                check=True, capture_output=True,
            )  # fmt: skip
            _run(switch, entry.host, f"ip link set {entry.host} master {BRIDGE} up")
            v4, v6 = IPV4_NET.prefixlen, IPV6_NET.prefixlen
            _run(
                node, entry.host,
                f"sysctl -qw net.ipv6.conf.{HOST_INTF}.disable_ipv6=0 "
                f"net.ipv6.conf.{HOST_INTF}.accept_dad=0 net.ipv6.conf.{HOST_INTF}.accept_ra=0 && "
                f"ip addr add {entry.ipv4}/{v4} dev {HOST_INTF} && "
                f"ip -6 addr add {entry.ipv6}/{v6} dev {HOST_INTF} nodad && "
                f"ip link set {HOST_INTF} up && mount --bind -o ro {self.hosts_path} /etc/hosts",
            )  # fmt: skip

    def down(self) -> None:
        """End the switch node: its namespace, the bridge and every veth go with it."""
        if self.switch is not None:
            with contextlib.suppress(Exception):
                self.switch.terminate()
            self.switch = None


def _run(node: MgmtHost, what: str, command: str) -> None:
    out = node.cmd(f"{command}; echo mgmt-rc=$?")
    if "mgmt-rc=0" not in out:
        raise RuntimeError(f"management network, {what}: {command!r} failed: {out.strip()}")


__all__ = [
    "BRIDGE",
    "HOST_INTF",
    "IPV4_NET",
    "IPV6_NET",
    "ManagementNet",
    "MgmtAddress",
    "addresses",
    "hosts_file",
    "SWITCH_NODE",
]
