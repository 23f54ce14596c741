"""Host preparation for the MRC agent: make a plane NIC fit for raw MRC traffic.

The agent owns its NICs' MRC addresses; the kernel of the host must neither use nor answer
them. For every plane NIC, :func:`prepare_nic`:

- checks that the interface exists (the error names it);
- sets the MAC address of the fabric model when the interface has another one;
- sets the interface MTU to the topology's ``link_mtu`` (a full MRC data packet);
- turns IPv6 router solicitation, DAD and autoconfiguration off, then turns IPv6 off on the
  interface altogether (``net.ipv6.conf.IF.disable_ipv6 = 1``): the kernel then drops every
  IPv6 packet arriving on the NIC before routing, so it never answers an MRC packet (no ICMPv6
  destination or port unreachable, no neighbour discovery), while the agent's ``AF_PACKET``
  socket, which sits below IP, still sees every frame;
- turns checksum and segmentation offloads off with ``ethtool -K`` (frames are built whole by
  the agent; offloads only matter to kernel traffic, which the fabric must not carry half-done);
- brings the link up.

Every failure raises :class:`SetupError` with one line that names the interface and the step.
See docs/host-agent.md ("Host preparation") for why the kernel is kept off the NIC rather than
given the address and fenced with a firewall rule.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SYS_NET = Path("/sys/class/net")
PROC_IPV6_CONF = Path("/proc/sys/net/ipv6/conf")

# ethtool -K features turned off on every plane NIC, in the order they are tried.
OFFLOADS = ("rx", "tx", "sg", "tso", "gso", "gro")

# Per-interface IPv6 settings, applied in this order (disable_ipv6 last).
IPV6_SYSCTLS = (
    ("accept_dad", "0"),
    ("dad_transmits", "0"),
    ("router_solicitations", "0"),
    ("accept_ra", "0"),
    ("autoconf", "0"),
    ("disable_ipv6", "1"),
)


class SetupError(RuntimeError):
    """A host preparation step failed; the message names the interface and the step."""


@dataclass
class NicSetup:
    """What :func:`prepare_nic` did to one interface."""

    intf: str
    mtu: int
    mac: str
    mac_changed: bool = False
    offloads_off: list[str] = field(default_factory=list)
    offloads_fixed: list[str] = field(default_factory=list)  # the driver cannot change them


def is_root() -> bool:
    """True when the process may configure interfaces and open AF_PACKET sockets."""
    return os.geteuid() == 0


def require_root(what: str = "mrc-host") -> None:
    """Raise :class:`SetupError` unless running as root."""
    if not is_root():
        raise SetupError(
            f"{what} needs root (AF_PACKET sockets, interface settings): run it with sudo "
            "or inside the testbed's host namespace"
        )


def interface_exists(intf: str) -> bool:
    """True when network interface ``intf`` exists in this namespace."""
    return (SYS_NET / intf).exists()


def require_interface(intf: str, host: str = "") -> None:
    """Raise :class:`SetupError` naming ``intf`` when it does not exist here."""
    if not interface_exists(intf):
        owner = f" (NIC of {host})" if host else ""
        present = sorted(p.name for p in SYS_NET.iterdir()) if SYS_NET.exists() else []
        raise SetupError(
            f"interface '{intf}'{owner} does not exist in this network namespace "
            f"(present: {', '.join(present) or 'none'}); start the agent inside the host's "
            "namespace of a running testbed"
        )


def read_interface(intf: str, attribute: str) -> str:
    """Read ``/sys/class/net/INTF/ATTRIBUTE`` (e.g. ``address``, ``mtu``)."""
    try:
        return (SYS_NET / intf / attribute).read_text().strip()
    except OSError as exc:
        raise SetupError(f"interface '{intf}': cannot read {attribute}: {exc.strerror}") from None


def run(argv: list[str], what: str) -> subprocess.CompletedProcess[str]:
    """Run a command; :class:`SetupError` says what failed and what the command printed."""
    if shutil.which(argv[0]) is None:
        raise SetupError(f"{what}: command '{argv[0]}' not found (install iproute2 and ethtool)")
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        detail = message[-1] if message else f"exit status {done.returncode}"
        raise SetupError(f"{what}: '{' '.join(argv)}' failed: {detail}")
    return done


def write_sysctl(intf: str, name: str, value: str) -> None:
    """Set ``net.ipv6.conf.INTF.NAME`` by writing its /proc/sys file."""
    path = PROC_IPV6_CONF / intf / name
    try:
        path.write_text(value)
    except FileNotFoundError:
        if name == "disable_ipv6" and not PROC_IPV6_CONF.exists():
            return  # IPv6 compiled out or disabled at boot: the kernel cannot answer anyway
        raise SetupError(f"interface '{intf}': no sysctl net.ipv6.conf.{intf}.{name}") from None
    except OSError as exc:
        raise SetupError(
            f"interface '{intf}': cannot set net.ipv6.conf.{intf}.{name}={value}: {exc.strerror}"
        ) from None


def read_sysctl(intf: str, name: str) -> str | None:
    """The value of ``net.ipv6.conf.INTF.NAME`` (None when it does not exist)."""
    try:
        return (PROC_IPV6_CONF / intf / name).read_text().strip()
    except OSError:
        return None


def kernel_quiet(intf: str) -> bool:
    """True when the kernel's IPv6 stack ignores ``intf`` (it can answer nothing on it)."""
    value = read_sysctl(intf, "disable_ipv6")
    if value is None:
        return not PROC_IPV6_CONF.exists()
    return value == "1"


def quiet_kernel(intf: str) -> None:
    """Keep the kernel's IPv6 stack off ``intf``: no RS, no DAD, no addresses, no answers."""
    for name, value in IPV6_SYSCTLS:
        write_sysctl(intf, name, value)


def set_mac(intf: str, mac: str) -> bool:
    """Give ``intf`` the MAC ``mac``; returns True when it had to change."""
    if read_interface(intf, "address").lower() == mac.lower():
        return False
    run(["ip", "link", "set", "dev", intf, "address", mac], f"interface '{intf}': set MAC {mac}")
    return True


def set_mtu(intf: str, mtu: int) -> None:
    """Set the MTU of ``intf`` (the topology's link_mtu)."""
    if read_interface(intf, "mtu") == str(mtu):
        return
    run(["ip", "link", "set", "dev", intf, "mtu", str(mtu)], f"interface '{intf}': set MTU {mtu}")


def offloads_off(intf: str) -> tuple[list[str], list[str]]:
    """Turn :data:`OFFLOADS` off; returns (turned off, fixed by the driver)."""
    argv = ["ethtool", "-K", intf]
    for feature in OFFLOADS:
        argv += [feature, "off"]
    if shutil.which("ethtool") is None:
        raise SetupError(f"interface '{intf}': ethtool not found (apt install ethtool)")
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode == 0:
        return list(OFFLOADS), []
    # Some drivers refuse a feature as a whole ("[fixed]"); set the others one by one.
    switched: list[str] = []
    fixed: list[str] = []
    for feature in OFFLOADS:
        one = subprocess.run(
            ["ethtool", "-K", intf, feature, "off"], capture_output=True, text=True, check=False
        )
        (switched if one.returncode == 0 else fixed).append(feature)
    if "rx" in fixed and "tx" in fixed:
        listed = subprocess.run(
            ["ethtool", "-k", intf], capture_output=True, text=True, check=False
        )
        if "No such device" in listed.stderr:
            raise SetupError(f"interface '{intf}': ethtool says the device does not exist")
    return switched, fixed


def link_up(intf: str) -> None:
    """Bring ``intf`` administratively up."""
    run(["ip", "link", "set", "dev", intf, "up"], f"interface '{intf}': set link up")


def prepare_nic(intf: str, *, mac: str, mtu: int, host: str = "") -> NicSetup:
    """Prepare one plane NIC for the agent (see the module docstring for the steps)."""
    require_interface(intf, host)
    quiet_kernel(intf)
    changed = set_mac(intf, mac)
    set_mtu(intf, mtu)
    switched, fixed = offloads_off(intf)
    link_up(intf)
    return NicSetup(intf, mtu, mac, changed, switched, fixed)


__all__ = [
    "IPV6_SYSCTLS",
    "OFFLOADS",
    "NicSetup",
    "SetupError",
    "interface_exists",
    "is_root",
    "kernel_quiet",
    "prepare_nic",
    "quiet_kernel",
    "read_interface",
    "read_sysctl",
    "require_interface",
    "require_root",
]
