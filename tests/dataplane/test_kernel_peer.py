"""The Linux kernel's SRv6 endpoint as a real peer of the switch pipeline.

A namespace ``kp<id>r`` plays one switch of the small fabric at a time: it gets that switch's
uN route ``block:uSID::/48 encap seg6local action End flavors next-csid lblen 32 nflen 16``
and classic End route ``block:uSID::e/128 encap seg6local action End``; everything else in the
block is routed out of a second interface. (One switch at a time: a router holding the SIDs of
two consecutive hops would process both, as the kernel looks the shifted address up again.) The test namespace ``kp<id>t`` sends packets in
on ``kp<id>b0`` and captures what the kernel forwards on ``kp<id>b1``.

Two comparisons:

- every uSID hop of every path of the fabric: the kernel's new destination equals
  :func:`topologies.usid.shift` (the fabric model) of the old one;
- the SRv6 cases of the shared case table (uN shift, classic End, the hand-over from an
  exhausted carrier to the SRH, a carrier exhausted with no SRH): the IPv6 packet the kernel
  sends equals, byte for byte, the IPv6 packet the case expects from the switch (which the
  BMv2 and switchmodel targets are held to by test_cases.py), or the kernel drops it too.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from p4src.contract import Dscp, Opcode
from targets.lab import NetnsLab, PacketPort, netns_available, run
from topologies import Path, Switch
from topologies import usid as usidlib

from . import packets as pk
from .cases import case_by_name, fabric

pytestmark = pytest.mark.netns

LINK_NET = "fd00:6b70::/64"  # the router's out link (test plumbing, not fabric addressing)
ROUTER_ADDR = "fd00:6b70::1"
GATEWAY_ADDR = "fd00:6b70::2"
CAPTURE_TIMEOUT = 2.0
SILENCE = 0.5  # how long the capture port must stay quiet when the kernel should drop
_flow_labels = itertools.count(0x10000)  # one per packet sent, to find its copy


@dataclass
class KernelRouter:
    """The SRv6 router namespace and the test sockets around it."""

    netns: str
    tester: str
    in_mac: str  # the router's ingress interface: destination MAC of what we send
    sender: PacketPort
    capture: PacketPort
    in_intf: str
    next_csid: bool  # the kernel accepts seg6local End with the next-csid flavor

    @property
    def routes(self) -> str:
        """``ip -6 route show`` of the router, for messages."""
        return run("ip", "-6", "route", "show", netns=self.netns)

    @contextlib.contextmanager
    def playing(self, sw: Switch) -> Iterator[None]:
        """The router holds the uN and End SIDs of ``sw`` (and no other switch's) meanwhile."""
        sids = [[f"{sw.end_sid}/128", "encap", "seg6local", "action", "End", "dev", self.in_intf]]
        if self.next_csid:
            sids.append(
                [str(sw.usid_prefix), "encap", "seg6local", "action", "End", "flavors",
                 "next-csid", "lblen", "32", "nflen", "16", "dev", self.in_intf]
            )  # fmt: skip
        added = []
        try:
            for route in sids:
                run("ip", "-6", "route", "add", *route, netns=self.netns)
                added.append(route[0])
            yield
        finally:
            for prefix in added:
                run("ip", "-6", "route", "del", prefix, netns=self.netns)

    def _send(self, frame: bytes, flow_label: int, quiet: float) -> bytes | None:
        """Send ``frame`` to the router; the IPv6 packet with that flow label it forwards, or
        None once the capture stays quiet for ``quiet`` seconds."""
        self.capture.drain()
        self.sender.send(frame)
        while True:
            got = self.capture.recv(quiet)
            if got is None:
                return None
            packet = Ether(got)
            if packet.haslayer(IPv6) and packet[IPv6].fl == flow_label:
                return bytes(packet[IPv6])

    def forward(self, frame: bytes, flow_label: int) -> bytes | None:
        """Send ``frame`` to the router; the IPv6 packet it forwards with that flow label."""
        return self._send(frame, flow_label, CAPTURE_TIMEOUT)

    def silent(self, frame: bytes, flow_label: int) -> bool:
        """True when nothing with that flow label comes out after sending ``frame``."""
        return self._send(frame, flow_label, SILENCE) is None


@pytest.fixture(scope="module")
def router() -> Iterator[KernelRouter]:
    why = netns_available()
    if why:
        pytest.skip(f"kernel SRv6 peer {why}")
    fab = fabric()
    tag = os.getpid() % 100000
    ns_r, ns_t = f"kp{tag}r", f"kp{tag}t"
    a0, b0, a1, b1 = f"kp{tag}a0", f"kp{tag}b0", f"kp{tag}a1", f"kp{tag}b1"
    lab = NetnsLab()
    sockets: list[PacketPort] = []
    try:
        lab.add_netns(ns_r)
        lab.add_netns(ns_t)
        lab.add_veth(a0, b0, a_netns=ns_r, b_netns=ns_t)
        lab.add_veth(a1, b1, a_netns=ns_r, b_netns=ns_t)
        for key in ("all.forwarding=1", "all.seg6_enabled=1", f"{a0}.seg6_enabled=1"):
            run("sysctl", "-qw", f"net.ipv6.conf.{key}", netns=ns_r)
        for intf in (a0, a1):
            run("sysctl", "-qw", f"net.ipv6.conf.{intf}.accept_dad=0", netns=ns_r)
            run("sysctl", "-qw", f"net.ipv6.conf.{intf}.disable_ipv6=0", netns=ns_r)
        run("ip", "-6", "addr", "add", f"{ROUTER_ADDR}/64", "dev", a1, "nodad", netns=ns_r)
        run("ip", "-6", "neigh", "add", GATEWAY_ADDR, "lladdr", lab.mac(b1, ns_t), "dev", a1,
            "nud", "permanent", netns=ns_r)  # fmt: skip
        run("ip", "-6", "route", "add", str(fab.block), "via", GATEWAY_ADDR, "dev", a1, netns=ns_r)
        sender = PacketPort(b0, ns_t)
        sockets.append(sender)
        capture = PacketPort(b1, ns_t)
        sockets.append(capture)
        yield KernelRouter(
            netns=ns_r,
            tester=ns_t,
            in_mac=lab.mac(a0, ns_r),
            sender=sender,
            capture=capture,
            in_intf=a0,
            next_csid=_kernel_has_next_csid(ns_r, a0, str(fab.block)),
        )
    finally:
        for sock in sockets:
            sock.close()
        lab.cleanup()


def _kernel_has_next_csid(netns: str, intf: str, block: str) -> bool:
    """Whether this kernel and iproute2 accept ``End flavors next-csid`` (Linux 6.1 and later)."""
    probe = str(ipaddress.IPv6Network(block).network_address) + "/48"
    try:
        run("ip", "-6", "route", "add", probe, "encap", "seg6local", "action", "End", "flavors",
            "next-csid", "lblen", "32", "nflen", "16", "dev", intf, netns=netns)  # fmt: skip
    except RuntimeError:
        return False
    run("ip", "-6", "route", "del", probe, netns=netns)
    return True


def _require_next_csid(router: KernelRouter) -> None:
    if not router.next_csid:
        pytest.skip(
            f"kernel {os.uname().release} rejects 'seg6local action End flavors next-csid' "
            "(NEXT-C-SID needs Linux 6.1 or later): only classic End is compared"
        )


def all_paths() -> list[Path]:
    fab = fabric()
    return [p for a in fab.hosts for b in fab.hosts if a != b for p in fab.paths(a.name, b.name)]


def _frame(router: KernelRouter, path: Path, dst: ipaddress.IPv6Address, flow_label: int) -> bytes:
    return pk.ipv6_frame(
        src_mac=path.src_nic.mac, dst_mac=router.in_mac, src=path.src_nic.address, dst=dst,
        upper=pk.mrc_udp(Opcode.WRITE_ONLY, pk.payload_bytes(64)), dscp=Dscp.TRIMMABLE,
        flow_label=flow_label,
    )  # fmt: skip


@pytest.mark.parametrize("path", all_paths(), ids=lambda p: f"{p.src}-{p.dst}-{p.label}")
def test_kernel_next_csid_matches_the_fabric_model(router: KernelRouter, path: Path) -> None:
    """Walk the path: at each switch whose uSID is active, the kernel shifts like the model."""
    _require_next_csid(router)
    fab = fabric()
    dst = path.carrier
    shifts = 0
    for hop in path.hops:
        sw = fab.switch(hop.switch)
        if usidlib.active(dst) != sw.usid:
            continue  # source leaf: plain LPM on the next uSID, nothing to compare
        flow_label = next(_flow_labels)
        with router.playing(sw):
            got = router.forward(_frame(router, path, dst, flow_label), flow_label)
        assert got is not None, f"kernel forwarded nothing for {dst} at {sw.name}\n{router.routes}"
        new_dst = ipaddress.IPv6Address(IPv6(got).dst)
        assert new_dst == usidlib.shift(dst), f"{sw.name}: {dst} -> kernel {new_dst}"
        assert IPv6(got).hlim == 63
        dst = new_dst
        shifts += 1
    assert shifts == (2 if path.spine is not None else 1)
    assert dst == path.dst_nic.address


KERNEL_CASES = (
    "usid_shift_at_spine",
    "usid_shift_at_leaf_to_host",
    "usid_shift_within_rack",
    "exhausted_carrier_to_host",
    "srh_end_at_spine",
    "exhausted_carrier_hands_over_to_srh",
    "exhausted_carrier_without_srh_dropped",
    "srh_end_with_no_segment_left_dropped",
)


#: Cases that need only classic End (they still run on a kernel without NEXT-C-SID).
CLASSIC_END_CASES = ("srh_end_at_spine", "srh_end_with_no_segment_left_dropped")


@pytest.mark.parametrize("name", KERNEL_CASES)
def test_kernel_agrees_with_the_case_table(router: KernelRouter, name: str) -> None:
    """The kernel turns the case's frame into the case's expected IPv6 packet (or drops it)."""
    case = case_by_name(name)
    if name not in CLASSIC_END_CASES:
        _require_next_csid(router)
    sent = Ether(case.frame)
    sent.dst, sent.src = router.in_mac, "02:00:00:00:6b:70"
    flow_label = sent[IPv6].fl
    with router.playing(fabric().switch(case.switch)):
        if case.drop is not None:
            assert router.silent(bytes(sent), flow_label), f"{name}: the kernel forwarded it"
            return
        got = router.forward(bytes(sent), flow_label)
    ((_, expected_frame),) = case.out
    expected = bytes(Ether(expected_frame)[IPv6])
    assert got is not None, f"{name}: the kernel forwarded nothing\n{router.routes}"
    assert got == expected, (
        f"{name}: kernel and case disagree\nkernel:\n{IPv6(got).show2(dump=True)}\n"
        f"case:\n{IPv6(expected).show2(dump=True)}"
    )
