"""The data-plane case table: one line of intent per case, everything else from the fabric model.

A :class:`Case` says which switch of the small fabric the target plays, the table entries that
switch needs for the case (:class:`controller.entries.Entry`: the switch's SIDs and routes are
the controller's, :func:`controller.entries.sid_entries` and ``lpm_entries``; a case may add
entries and set default entries), the frame that comes in on a port, and either the exact frames that
must come out (port, bytes) or the drop reason that must be counted. ``counters`` lists further
counter cells and the packet count each must move by (0: must not move); ``port_in`` of the
ingress port, ``port_out`` of every output port and ``drops`` of the reason are implied.

Addresses, MACs, ports and paths come from :class:`topologies.Fabric` (paths ``h0 -> h2``
between racks and ``h0 -> h1`` within a rack, plane 0, spine 0); expected frames are built
with the same builders, with the rewrites the switch must make (uSID shift by
:func:`topologies.usid.shift`, hop limit, MACs, SRH segments left, trimming).

A :class:`Burst` (:func:`burst_cases`) is the table for what one frame cannot show, the
priority classes: frames sent back to back into a switch whose output port is shaped to a low
rate, and the order in which they must leave it (``test_priority.py``).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from functools import cache
from typing import Any

from support.fabric import small_fabric as fabric

from controller.entries import Entry, lpm_entries, sid_entries
from host.transport import wire
from p4src.contract import (
    DROP_NO_ROUTE,
    DROPS,
    DST_ADDR,
    ECN_MARKED,
    EGRESS_SPEC,
    IPV6_LPM,
    MY_SID,
    NO_ACTION,
    PORT_IN,
    PORT_OUT,
    PORT_QOS,
    QDEPTH_MAX,
    SET_NEXT_HOP,
    SET_PORT_QOS,
    SRV6_END,
    TRIMMED,
    DropReason,
    Dscp,
    Ecn,
    NextHopParams,
    Opcode,
    PortQosParams,
    params_of,
)
from topologies import Fabric, Path, Switch, Tier
from topologies import usid as usidlib

from . import packets as pk

# Drop reasons (index of MrcIngress.drops)
NOT_IPV6, PARSE_ERROR, SRH_INVALID, HOP_LIMIT, NO_ROUTE, SID_END = tuple(DropReason)[:6]

#: The largest threshold (bit<19>): never reached.
NEVER = QDEPTH_MAX
#: The switch's port numbers the cases use (the small fabric's T0 has 4, T1 has 2).
PORTS = (1, 2, 3, 4)


@dataclass(frozen=True)
class Case:
    """One packet in, what must come out (or the drop reason), and the counters that move."""

    name: str
    intent: str
    switch: str
    entries: tuple[Entry, ...]
    in_port: int
    frame: bytes
    out: tuple[tuple[int, bytes], ...] = ()
    drop: int | None = None
    counters: tuple[tuple[str, int, int], ...] = ()
    #: default entries the case sets (every other table keeps the program's default)
    defaults: tuple[Entry, ...] = ()

    def expected_counters(self) -> dict[tuple[str, int], int]:
        """(counter, index) -> packet delta, including the implied ones."""
        deltas = {(PORT_IN, self.in_port): 1}
        for port, _ in self.out:
            deltas[(PORT_OUT, port)] = deltas.get((PORT_OUT, port), 0) + 1
        if self.drop is not None:
            deltas[(DROPS, self.drop)] = 1
        for name, index, delta in self.counters:
            deltas[(name, index)] = delta
        return deltas

    def install(self, target: Any) -> None:
        """Make the case's entries and defaults the only ones of ``target`` (a DataplaneTarget)."""
        info = target.p4info
        target.install(
            [entry.to_proto(info) for entry in self.entries],
            [entry.to_proto(info) for entry in self.defaults],
        )

    def __str__(self) -> str:
        return self.name


# -- entries from the fabric model -----------------------------------------------------------


def qos(
    port: int | None,
    trim: int,
    ecn: int,
    ecn_max: int | None = None,
    slope: int = 0,
    last_hop: int = 0,
) -> Entry:
    """Thresholds of one egress port (ECN at a fixed threshold unless ``ecn_max`` is given);
    ``port`` None: the default entry of port_qos."""
    params = params_of(
        PortQosParams(trim, ecn, ecn if ecn_max is None else ecn_max, slope, last_hop)
    )
    if port is None:
        return Entry.default(PORT_QOS, SET_PORT_QOS, params)
    return Entry.make(PORT_QOS, {EGRESS_SPEC: port}, SET_PORT_QOS, params)


# -- the cases -------------------------------------------------------------------------------


def _path(src: str, dst: str) -> Path:
    return next(p for p in fabric().paths(src, dst) if p.plane == 0 and p.spine in (0, None))


def _hop_of(sw: Switch, path: Path) -> tuple[int, int]:
    """(in port, out port) of ``sw`` on ``path``."""
    hop = next(h for h in path.hops if h.switch == sw.name)
    return hop.in_port, hop.out_port


@dataclass(frozen=True)
class Builder:
    """Tables and frames around one switch, for packets from one source NIC address."""

    fabric: Fabric
    src: ipaddress.IPv6Address

    def tables(self, sw: Switch, *extra: Entry) -> tuple[Entry, ...]:
        """The switch's SIDs and static routes (:mod:`controller.entries`), then ``extra``."""
        return (*sid_entries(sw), *lpm_entries(self.fabric, sw), *extra)

    def frame_in(self, sw: Switch, in_port: int, dst: Any, upper: Any, **ip: Any) -> bytes:
        """A frame as the neighbour on ``in_port`` sends it to ``sw``."""
        port = sw.port(in_port)
        return pk.ipv6_frame(
            src_mac=port.peer_mac, dst_mac=port.mac, src=self.src, dst=dst, upper=upper, **ip
        )

    def frame_out(self, sw: Switch, out_port: int, dst: Any, upper: Any, **ip: Any) -> bytes:
        """The frame ``sw`` sends out of ``out_port``: next-hop MACs, hop limit 63."""
        port = sw.port(out_port)
        ip.setdefault("hop_limit", 63)
        return pk.ipv6_frame(
            src_mac=port.mac, dst_mac=port.peer_mac, src=self.src, dst=dst, upper=upper, **ip
        )


@cache
def all_cases() -> tuple[Case, ...]:
    """Every case, in table order."""
    fab = fabric()
    inter = _path("h0", "h2")  # t0-p0-r0 -> t1-p0-s0 -> t0-p0-r1
    intra = _path("h0", "h1")  # t0-p0-r0 only
    src_leaf = fab.switch(inter.hops[0].switch)
    spine = fab.switch(inter.hops[1].switch)
    dst_leaf = fab.switch(inter.hops[2].switch)
    assert spine.tier is Tier.T1 and dst_leaf.tier is Tier.T0
    src_nic, dst_nic = inter.src_nic, inter.dst_nic
    build = Builder(fab, src_nic.address)
    tables, frame_in, frame_out = build.tables, build.frame_in, build.frame_out

    data = pk.payload_bytes(256)
    write = pk.mrc_udp(Opcode.WRITE_ONLY, data)
    write_trimmed = pk.mrc_udp(Opcode.WRITE_ONLY, b"", dma_length=len(data))
    write_imm = pk.mrc_udp(Opcode.WRITE_ONLY_IMM, data, immediate=0x600D)
    write_imm_trimmed = pk.mrc_udp(
        Opcode.WRITE_ONLY_IMM, b"", immediate=0x600D, dma_length=len(data)
    )
    ack = pk.ack_udp()
    plain = pk.plain_udp(data)

    s_in, s_out = _hop_of(spine, inter)
    l_in, l_out = _hop_of(dst_leaf, inter)
    src_in, src_out = _hop_of(src_leaf, inter)
    i_in, i_out = _hop_of(src_leaf, intra)
    shifted = usidlib.shift(inter.carrier)  # what the spine sends on
    at_nic = usidlib.shift(shifted)  # what the destination leaf sends to the host
    exhausted_here = dst_leaf.usid_prefix.network_address  # block:uSID(leaf)::, nothing after
    classic = list(reversed(inter.segments))  # SRH segment list: [0] is the last segment
    tail = list(reversed(inter.segments[-2:]))  # [NIC address, End SID of the leaf]
    other_plane = fab.switch(Fabric.t0_name(1, 0)).usid_prefix.network_address
    spine_tables = tables(spine)
    trim_at_0 = tables(spine, qos(s_out, 0, NEVER))
    ecn_at_0 = tables(spine, qos(s_out, NEVER, 0))
    dscp = {"dscp": Dscp.TRIMMABLE}

    host_srh = _host_srh_cases(build, inter, intra)
    more = _table_cases(build, inter)
    return (
        # ---- SRv6 uSID forwarding ---------------------------------------------------------
        Case(
            "usid_lpm_at_source_leaf",
            "source T0 forwards on the /48 of the first uSID, carrier unchanged",
            src_leaf.name, tables(src_leaf), src_in,
            frame_in(src_leaf, src_in, inter.carrier, write, **dscp),
            out=((src_out, frame_out(src_leaf, src_out, inter.carrier, write, **dscp)),),
        ),
        Case(
            "usid_shift_at_spine",
            "spine shifts its uSID out of the carrier, then forwards to the destination leaf",
            spine.name, spine_tables, s_in, frame_in(spine, s_in, inter.carrier, write, **dscp),
            out=((s_out, frame_out(spine, s_out, shifted, write, **dscp)),),
        ),
        Case(
            "usid_shift_at_leaf_to_host",
            "destination T0 shifts its uSID; the NIC address goes out of the host port",
            dst_leaf.name, tables(dst_leaf), l_in, frame_in(dst_leaf, l_in, shifted, write),
            out=((l_out, frame_out(dst_leaf, l_out, at_nic, write)),),
        ),
        Case(
            "usid_shift_within_rack",
            "a same-rack carrier block|T0|NIC is shifted at the T0 and sent to the host",
            src_leaf.name, tables(src_leaf), i_in, frame_in(src_leaf, i_in, intra.carrier, write),
            out=((i_out, frame_out(src_leaf, i_out, intra.dst_nic.address, write)),),
        ),
        Case(
            "exhausted_carrier_to_host",
            "a carrier holding only the NIC uSID is not ours: LPM sends it to the host port",
            dst_leaf.name, tables(dst_leaf), l_in, frame_in(dst_leaf, l_in, dst_nic.address, write),
            out=((l_out, frame_out(dst_leaf, l_out, dst_nic.address, write)),),
        ),
        Case(
            "srh_end_at_spine",
            "classic End: SL 2 -> 1, destination = segment_list[1] (the leaf's End SID)",
            spine.name, spine_tables, s_in,
            frame_in(spine, s_in, spine.end_sid, write, segments=classic, segments_left=2),
            out=((s_out, frame_out(spine, s_out, classic[1], write, segments=classic,
                                   segments_left=1)),),
        ),
        Case(
            "exhausted_carrier_hands_over_to_srh",
            "carrier exhausted at our uSID with SRH SL 1: End takes segment_list[0] (the NIC)",
            dst_leaf.name, tables(dst_leaf), l_in,
            frame_in(dst_leaf, l_in, exhausted_here, write, segments=tail, segments_left=1),
            out=((l_out, frame_out(dst_leaf, l_out, tail[0], write, segments=tail,
                                   segments_left=0)),),
        ),
        Case(
            "exhausted_carrier_without_srh_dropped",
            "carrier exhausted at our uSID and no SRH: nothing left to do (SID_END)",
            dst_leaf.name, tables(dst_leaf), l_in, frame_in(dst_leaf, l_in, exhausted_here, write),
            drop=SID_END,
        ),
        Case(
            "srh_end_with_no_segment_left_dropped",
            "End SID with SRH segments left 0: SID_END",
            spine.name, spine_tables, s_in,
            frame_in(spine, s_in, spine.end_sid, write, segments=classic, segments_left=0),
            drop=SID_END,
        ),
        # ---- drops --------------------------------------------------------------------------
        Case(
            "hop_limit_expired",
            "hop limit 1 on arrival is dropped (HOP_LIMIT), not forwarded with 0",
            spine.name, spine_tables, s_in,
            frame_in(spine, s_in, inter.carrier, write, hop_limit=1),
            drop=HOP_LIMIT,
        ),
        Case(
            "unknown_destination",
            "a carrier for a node of another plane has no route here (NO_ROUTE)",
            spine.name, spine_tables, s_in, frame_in(spine, s_in, other_plane, write),
            drop=NO_ROUTE,
        ),
        Case(
            "not_ipv6",
            "an IPv4 frame is dropped (NOT_IPV6)",
            spine.name, spine_tables, s_in,
            pk.ipv4_frame(spine.port(s_in).peer_mac, spine.port(s_in).mac),
            drop=NOT_IPV6,
        ),
        Case(
            "truncated_ipv6_header",
            "ether type IPv6 with half an IPv6 header is dropped (PARSE_ERROR)",
            spine.name, spine_tables, s_in,
            pk.truncated_ipv6_frame(spine.port(s_in).peer_mac, spine.port(s_in).mac),
            drop=PARSE_ERROR,
        ),
        Case(
            "truncated_mrc_data_extension",
            "a WRITE whose data extension is cut short is dropped (PARSE_ERROR)",
            spine.name, spine_tables, s_in,
            frame_in(spine, s_in, inter.carrier, pk.truncated_mrc_udp(12 + 16 + 10)),
            drop=PARSE_ERROR,
        ),
        Case(
            "srh_lengths_disagree",
            "hdr_ext_len 5 disagrees with last_entry 2 (which needs 6): SRH_INVALID",
            spine.name, spine_tables, s_in,
            frame_in(spine, s_in, spine.end_sid, write, segments=classic, segments_left=2,
                     srh_len=5),
            drop=SRH_INVALID,
        ),
        Case(
            "srh_segments_left_beyond_last_entry",
            "segments_left 4 with last_entry 2 is dropped (SRH_INVALID; 3 would be a reduced SRH)",
            spine.name, spine_tables, s_in,
            frame_in(spine, s_in, spine.end_sid, write, segments=classic, segments_left=4),
            drop=SRH_INVALID,
        ),
        Case(
            "srh_too_many_segments",
            "an SRH of 5 segments exceeds the parser's stack of 4 (SRH_INVALID)",
            spine.name, spine_tables, s_in,
            frame_in(spine, s_in, spine.end_sid, write, segments=classic + classic[:2],
                     segments_left=4),
            drop=SRH_INVALID,
        ),
        # ---- trimming ---------------------------------------------------------------------------
        Case(
            "trim_at_threshold_0",
            "DSCP 10 WRITE with trim threshold 0: headers kept, payload cut, lengths fixed, DSCP 12",
            spine.name, trim_at_0, s_in, frame_in(spine, s_in, inter.carrier, write, **dscp),
            out=((s_out, frame_out(spine, s_out, shifted, write_trimmed,
                                   dscp=Dscp.TRIMMED)),),
            counters=((TRIMMED, s_out, 1),),
        ),
        Case(
            "trim_at_last_hop",
            "a port that faces a host (last_hop) trims with DSCP 13: the receiver's own downlink",
            dst_leaf.name, tables(dst_leaf, qos(l_out, 0, NEVER, last_hop=1)), l_in,
            frame_in(dst_leaf, l_in, shifted, write, **dscp),
            out=((l_out, frame_out(dst_leaf, l_out, at_nic, write_trimmed,
                                   dscp=Dscp.TRIMMED_LAST_HOP)),),
            counters=((TRIMMED, l_out, 1),),
        ),
        Case(
            "trim_keeps_srh",
            "a trimmed packet with an SRH keeps the whole SRH after End",
            spine.name, trim_at_0, s_in,
            frame_in(spine, s_in, spine.end_sid, write, segments=classic, segments_left=2, **dscp),
            out=((s_out, frame_out(spine, s_out, classic[1], write_trimmed, segments=classic,
                                   segments_left=1, dscp=Dscp.TRIMMED)),),
            counters=((TRIMMED, s_out, 1),),
        ),
        Case(
            "trim_write_with_immediate",
            "WRITE with immediate is trimmed after ImmDt + data extension (ImmDt kept)",
            spine.name, trim_at_0, s_in, frame_in(spine, s_in, inter.carrier, write_imm, **dscp),
            out=((s_out, frame_out(spine, s_out, shifted, write_imm_trimmed,
                                   dscp=Dscp.TRIMMED)),),
            counters=((TRIMMED, s_out, 1),),
        ),
        Case(
            "trimmed_packet_not_also_ecn_marked",
            "DSCP 10 ECT(0) WRITE at trim and ECN threshold 0: trimmed, its ECT(0) kept, not CE",
            spine.name, tables(spine, qos(s_out, 0, 0)), s_in,
            frame_in(spine, s_in, inter.carrier, write, ecn=Ecn.ECT0, **dscp),
            out=((s_out, frame_out(spine, s_out, shifted, write_trimmed, ecn=Ecn.ECT0,
                                   dscp=Dscp.TRIMMED)),),
            counters=((TRIMMED, s_out, 1), (ECN_MARKED, s_out, 0)),
        ),
        Case(
            "trimmed_packet_keeps_its_ce_mark",
            "DSCP 10 WRITE marked CE by an earlier hop, at trim threshold 0: trimmed, still CE "
            "(the receiver's NACK echoes the mark)",
            spine.name, trim_at_0, s_in,
            frame_in(spine, s_in, inter.carrier, write, ecn=Ecn.CE, **dscp),
            out=((s_out, frame_out(spine, s_out, shifted, write_trimmed, ecn=Ecn.CE,
                                   dscp=Dscp.TRIMMED)),),
            counters=((TRIMMED, s_out, 1), (ECN_MARKED, s_out, 0)),
        ),
        Case(
            "no_trim_for_dscp_0",
            "an ordinary (DSCP 0) WRITE is never trimmed, even at threshold 0",
            spine.name, trim_at_0, s_in, frame_in(spine, s_in, inter.carrier, write),
            out=((s_out, frame_out(spine, s_out, shifted, write)),),
            counters=((TRIMMED, s_out, 0),),
        ),
        Case(
            "no_trim_without_port_qos",
            "a port without thresholds never trims",
            spine.name, spine_tables, s_in, frame_in(spine, s_in, inter.carrier, write, **dscp),
            out=((s_out, frame_out(spine, s_out, shifted, write, **dscp)),),
            counters=((TRIMMED, s_out, 0),),
        ),
        # ---- ECN --------------------------------------------------------------------------------
        Case(
            "ecn_ce_for_ect0",
            "ECT(0) at ECN threshold 0 leaves marked CE and counted",
            spine.name, ecn_at_0, s_in,
            frame_in(spine, s_in, inter.carrier, write, ecn=Ecn.ECT0, **dscp),
            out=((s_out, frame_out(spine, s_out, shifted, write, ecn=Ecn.CE, **dscp)),),
            counters=((ECN_MARKED, s_out, 1), (TRIMMED, s_out, 0)),
        ),
        Case(
            "no_ecn_for_not_ect",
            "Not-ECT at ECN threshold 0 is left alone",
            spine.name, ecn_at_0, s_in,
            frame_in(spine, s_in, inter.carrier, plain, ecn=Ecn.NOT_ECT),
            out=((s_out, frame_out(spine, s_out, shifted, plain, ecn=Ecn.NOT_ECT)),),
            counters=((ECN_MARKED, s_out, 0),),
        ),
        # ---- control traffic ------------------------------------------------------------------
        Case(
            "control_never_trimmed",
            "an ACK (DSCP 48) is not trimmed at threshold 0 (its priority: burst cases below)",
            spine.name, trim_at_0, s_in,
            frame_in(spine, s_in, inter.carrier, ack, dscp=Dscp.CONTROL),
            out=((s_out, frame_out(spine, s_out, shifted, ack, dscp=Dscp.CONTROL)),),
            counters=((TRIMMED, s_out, 0),),
        ),
    ) + more + host_srh  # fmt: skip


def _table_cases(build: Builder, inter: Path) -> tuple[Case, ...]:
    """At the spine of ``inter``: the corners of the parser and of the tables (End on every
    segment index, reduced and 4-segment SRHs, longest prefix, explicit drop routes, default
    entries, NoAction QoS entries, thresholds that leave a packet alone)."""
    fab = build.fabric
    spine = fab.switch(inter.hops[1].switch)
    dst_leaf = fab.switch(inter.hops[2].switch)
    s_in, s_out = _hop_of(spine, inter)
    tables, frame_in, frame_out = build.tables, build.frame_in, build.frame_out
    write = pk.mrc_udp(Opcode.WRITE_ONLY, pk.payload_bytes(256))
    shifted = usidlib.shift(inter.carrier)
    own = spine.usid_prefix.network_address  # a carrier exhausted at the spine
    other_nic = next(n for n in fab.host("h3").nics if n.plane == inter.plane)
    other_carrier = usidlib.carrier(fab.block, [spine.usid, dst_leaf.usid, other_nic.usid])
    unrouted = ipaddress.IPv6Address("2001:db8::1")
    dscp = {"dscp": Dscp.TRIMMABLE}
    spine_tables = tables(spine)
    back = spine.port(s_in)
    to_source = params_of(NextHopParams(s_in, back.mac, back.peer_mac))
    exact = Entry.make(
        IPV6_LPM,
        {DST_ADDR: ipaddress.IPv6Network((shifted, 128))},
        SET_NEXT_HOP,
        to_source,
    )
    three = [shifted, spine.end_sid, other_carrier]  # End SID at [1]
    four = [pk.SRC, other_carrier, shifted, spine.end_sid]  # End SID at [3]

    def untouched(name: str, why: str, upper: Any, dscp: int, ecn: int) -> Case:
        """A packet that thresholds 0 (trim and ECN) must leave exactly as it came."""
        return Case(
            f"untouched_at_thresholds_0_{name}",
            f"trim and ECN threshold 0: {why}",
            spine.name,
            tables(spine, qos(s_out, 0, 0)),
            s_in,
            frame_in(spine, s_in, inter.carrier, upper, dscp=dscp, ecn=ecn),
            out=((s_out, frame_out(spine, s_out, shifted, upper, dscp=dscp, ecn=ecn)),),
            counters=((TRIMMED, s_out, 0), (ECN_MARKED, s_out, 0)),
        )

    return (
        # ---- SRv6 End on every segment index ----------------------------------------------
        Case(
            "srh_end_takes_the_last_segment",
            "End SID with SRH segments left 1 of 3: SL 0, destination = segment_list[0]",
            spine.name, spine_tables, s_in,
            frame_in(spine, s_in, spine.end_sid, write, segments=three, segments_left=1),
            out=((s_out, frame_out(spine, s_out, shifted, write, segments=three,
                                   segments_left=0)),),
        ),
        Case(
            "srh_four_segments",
            "an SRH of 4 segments (the parser's stack) with SL 3: End takes segment_list[2]",
            spine.name, spine_tables, s_in,
            frame_in(spine, s_in, spine.end_sid, write, segments=four, segments_left=3),
            out=((s_out, frame_out(spine, s_out, shifted, write, segments=four,
                                   segments_left=2)),),
        ),
        Case(
            "reduced_srh_at_an_exhausted_carrier",
            "a reduced SRH (RFC 8754: SL 1, last entry 0) hands its one segment over where the "
            "carrier ends",
            spine.name, spine_tables, s_in,
            frame_in(spine, s_in, own, write, segments=[shifted], segments_left=1),
            out=((s_out, frame_out(spine, s_out, shifted, write, segments=[shifted],
                                   segments_left=0)),),
        ),
        Case(
            "srh_routing_type_not_4",
            "a routing header of type 3 is not an SRH the switch takes (SRH_INVALID)",
            spine.name, spine_tables, s_in,
            frame_in(spine, s_in, spine.end_sid, write, segments=three, segments_left=1,
                     routing_type=3),
            drop=SRH_INVALID,
        ),
        # ---- the parser's corners ---------------------------------------------------------
        Case(
            "hop_limit_0",
            "hop limit 0 on arrival is dropped (HOP_LIMIT)",
            spine.name, spine_tables, s_in,
            frame_in(spine, s_in, inter.carrier, write, hop_limit=0),
            drop=HOP_LIMIT,
        ),
        Case(
            "hop_limit_2_leaves_with_1",
            "hop limit 2 on arrival is forwarded with 1",
            spine.name, spine_tables, s_in,
            frame_in(spine, s_in, inter.carrier, write, hop_limit=2),
            out=((s_out, frame_out(spine, s_out, shifted, write, hop_limit=1)),),
        ),
        Case(
            "arp_is_not_ipv6",
            "an ARP frame is dropped (NOT_IPV6)",
            spine.name, spine_tables, s_in,
            pk.arp_frame(spine.port(s_in).peer_mac, spine.port(s_in).mac),
            drop=NOT_IPV6,
        ),
        Case(
            "ipv6_without_udp_forwarded",
            "IPv6 with no next header (59) is routed like any packet, payload untouched",
            spine.name, spine_tables, s_in,
            frame_in(spine, s_in, inter.carrier, b"hello" * 10),
            out=((s_out, frame_out(spine, s_out, shifted, b"hello" * 10)),),
        ),
        Case(
            "udp_to_another_port_not_parsed_further",
            "UDP to a port other than 4791 with no payload: no BTH is looked for, forwarded",
            spine.name, tables(spine, qos(s_out, 0, NEVER)), s_in,
            frame_in(spine, s_in, inter.carrier, pk.plain_udp(b"", dport=9), **dscp),
            out=((s_out, frame_out(spine, s_out, shifted, pk.plain_udp(b"", dport=9), **dscp)),),
            counters=((TRIMMED, s_out, 0),),
        ),
        # ---- routes -----------------------------------------------------------------------
        Case(
            "longest_prefix_wins",
            "a /128 route for one NIC's carrier beats the leaf's /48: out of the /128's port",
            spine.name, tables(spine, exact), s_in,
            frame_in(spine, s_in, inter.carrier, write),
            out=((s_in, frame_out(spine, s_in, shifted, write)),),
        ),
        Case(
            "shorter_prefix_for_the_other_addresses",
            "beside that /128, another NIC behind the same leaf still takes the leaf's /48",
            spine.name, tables(spine, exact), s_in,
            frame_in(spine, s_in, other_carrier, write),
            out=((s_out, frame_out(spine, s_out, usidlib.shift(other_carrier), write)),),
        ),
        Case(
            "explicit_drop_route",
            "an ipv6_lpm entry with drop_no_route drops what it matches (NO_ROUTE)",
            spine.name,
            tables(spine, Entry.make(IPV6_LPM,
                                {DST_ADDR: ipaddress.IPv6Network("2001:db8::/32")},
                                DROP_NO_ROUTE)),
            s_in, frame_in(spine, s_in, unrouted, write),
            drop=NO_ROUTE,
        ),
        # ---- default entries --------------------------------------------------------------
        Case(
            "default_route_forwards_without_priority_trim_or_ecn",
            "ipv6_lpm's default set to set_next_hop: a miss is forwarded there, and the program "
            "returns before trimming and ECN (thresholds 0 on that port leave it alone)",
            spine.name, tables(spine, qos(s_in, 0, 0)), s_in,
            frame_in(spine, s_in, unrouted, write, ecn=Ecn.ECT0, **dscp),
            out=((s_in, frame_out(spine, s_in, unrouted, write, ecn=Ecn.ECT0, **dscp)),),
            counters=((TRIMMED, s_in, 0), (ECN_MARKED, s_in, 0)),
            defaults=(Entry.default(IPV6_LPM, SET_NEXT_HOP, to_source),),
        ),
        Case(
            "my_sid_default_end",
            "my_sid's default set to srv6_end: any destination is an End SID (no SRH: SID_END)",
            spine.name, spine_tables, s_in, frame_in(spine, s_in, unrouted, write),
            drop=SID_END,
            defaults=(Entry.default(MY_SID, SRV6_END),),
        ),
        Case(
            "port_qos_default_for_unlisted_ports",
            "port_qos's default set to thresholds 0 applies to a port without an entry: trimmed",
            spine.name, spine_tables, s_in, frame_in(spine, s_in, inter.carrier, write, **dscp),
            out=((s_out, frame_out(spine, s_out, shifted, pk.mrc_udp(
                Opcode.WRITE_ONLY, b"", dma_length=256), dscp=Dscp.TRIMMED)),),
            counters=((TRIMMED, s_out, 1),),
            defaults=(qos(None, 0, 0),),
        ),
        # ---- thresholds that leave a packet alone -------------------------------------------
        Case(
            "no_action_qos_entry_never_trims",
            "a port_qos entry with NoAction: no thresholds on that port, never trimmed",
            spine.name,
            tables(spine, Entry.make(PORT_QOS, {EGRESS_SPEC: s_out},
                                NO_ACTION)),
            s_in, frame_in(spine, s_in, inter.carrier, write, **dscp),
            out=((s_out, frame_out(spine, s_out, shifted, write, **dscp)),),
            counters=((TRIMMED, s_out, 0),),
        ),
        Case(
            "ecn_ce_below_the_trim_threshold",
            "DSCP 10, ECT(1), depth 0: under trim threshold 1 but at ECN threshold 0: CE, whole",
            spine.name, tables(spine, qos(s_out, 1, 0)), s_in,
            frame_in(spine, s_in, inter.carrier, write, ecn=Ecn.ECT1, **dscp),
            out=((s_out, frame_out(spine, s_out, shifted, write, ecn=Ecn.CE, **dscp)),),
            counters=((ECN_MARKED, s_out, 1), (TRIMMED, s_out, 0)),
        ),
        untouched("ordinary", "an ordinary (DSCP 0) WRITE", write, Dscp.DEFAULT,
                  Ecn.NOT_ECT),
        untouched("control", "an ACK (DSCP 48)", pk.ack_udp(), Dscp.CONTROL, Ecn.NOT_ECT),
        untouched("ack_with_data_dscp", "an ACK with DSCP 10 has no data extension to trim",
                  pk.ack_udp(), Dscp.TRIMMABLE, Ecn.NOT_ECT),
        untouched("ce_not_recounted", "a packet already CE is not marked again",
                  write, Dscp.DEFAULT, Ecn.CE),
        untouched("already_trimmed", "a trimmed (DSCP 12) packet is not trimmed again",
                  pk.mrc_udp(Opcode.WRITE_ONLY, b"", dma_length=256), Dscp.TRIMMED,
                  Ecn.NOT_ECT),
    )  # fmt: skip


def _host_srh_frame(
    path: Path, src_mac: str, dst_mac: str, dst: ipaddress.IPv6Address, hop_limit: int,
    segments_left: int,
) -> bytes:  # fmt: skip
    """A data frame of ``path``'s SRV6+SRH EV as the host stack builds it (its prefix and
    codec), with the MACs, destination, hop limit and segments left of one link of the path."""
    prefix = wire.frame_prefix(
        src_mac=wire.mac_bytes(src_mac), dst_mac=wire.mac_bytes(dst_mac),
        src=path.src_nic.address.packed, dst=dst.packed, dscp=Dscp.TRIMMABLE,
        ecn=Ecn.ECT0, ev=0x1234567, hop_limit=hop_limit, srh=path.srh_segment.packed,
    )  # fmt: skip
    frame = bytearray(wire.encode_data(
        prefix, 0x123, 5, True, 0x7F00_0000_1000, 0x1234, None, wire.FLAG_FIRST | wire.FLAG_LAST,
        path.plane, 0xFF if path.spine is None else path.spine, 0x1234567, 1, 256, 0, 42,
        pk.payload_bytes(256),
    ))  # fmt: skip
    frame[wire.OFF_UDP + 3] = segments_left  # the SRH's segments left
    return bytes(frame)


def _host_srh_cases(build: Builder, inter: Path, intra: Path) -> tuple[Case, ...]:
    """A host-built SRV6+SRH data frame hop by hop (what leaves one switch is what enters the
    next): uN route at the source leaf, End at the spine (the SRH segment becomes the
    destination), uN shift at the destination leaf; within a rack End at the leaf."""
    fab = build.fabric
    cases = []
    for path, name in ((inter, "srh_host_frame"), (intra, "srh_host_frame_within_rack")):
        dst, left, hop_limit = path.srh_carrier, 1, 64
        frame = b""
        for n, hop in enumerate(path.hops):
            sw = fab.switch(hop.switch)
            inp, out = sw.port(hop.in_port), sw.port(hop.out_port)
            role = ("spine" if sw.tier is Tier.T1 else "leaf" if len(path.hops) == 1
                    else "source_leaf" if n == 0 else "destination_leaf")  # fmt: skip
            if n == 0:
                frame = _host_srh_frame(path, inp.peer_mac, inp.mac, dst, hop_limit, left)
            if usidlib.active(dst) != sw.usid:
                action = "routes on the first uSID"
            elif usidlib.exhausted(dst):
                dst, left, action = path.srh_segment, 0, "End: the SRH segment is the destination"
            else:
                dst, action = usidlib.shift(dst), "uN shift"
            hop_limit -= 1
            sent = _host_srh_frame(path, out.mac, out.peer_mac, dst, hop_limit, left)
            cases.append(
                Case(
                    f"{name}_at_{role}",
                    f"a host-built SRV6+SRH frame ({path.label}) at {sw.name}: {action}, out to "
                    f"{out.peer} with destination {dst}",
                    sw.name, build.tables(sw), hop.in_port, frame,
                    out=((hop.out_port, sent),),
                )
            )  # fmt: skip
            frame = sent
        assert dst == path.dst_nic.address and left == 0
    return tuple(cases)


def case_by_name(name: str) -> Case:
    for case in all_cases():
        if case.name == name:
            return case
    raise KeyError(f"no data-plane case {name!r}")


# -- bursts: priority, checked by the order frames leave a shaped port ------------------------

#: The rate the burst cases' output port is shaped to: a full frame of the burst takes ~18 ms,
#: so a burst sent back to back queues up and the queue drains in ~0.3 s.
SHAPED_RATE_BPS = 500_000
#: Ordinary packets queued ahead of the frame that must overtake them.
BURST = 16
BURST_PAYLOAD = 1000
#: Trim threshold of the trimming burst (packets of queue depth).
TRIM_AT = 2


@dataclass(frozen=True)
class Send:
    """One frame of a burst: a label, the frame sent in, the exact frame that must leave.

    ``after``: the frame is sent once that many frames of the burst have left the output port
    (0: at once, back to back with the frames before it). Waiting for departures, not for time,
    is how a burst makes sure the queue (and the depth the switch recorded) has built up.
    """

    label: str
    frame: bytes
    out: bytes
    after: int = 0


@dataclass(frozen=True)
class Burst:
    """Frames into a switch whose output port is shaped to :data:`SHAPED_RATE_BPS`, and the
    order they must leave in.

    Every frame leaves ``out_port`` exactly as its :attr:`Send.out`; the frames not named first
    in ``overtakes`` share one FIFO class and leave in the order sent; for each ``(a, b)`` of
    ``overtakes``, ``a`` (sent after ``b``) leaves before ``b``: it went into the high-priority
    queue. Only order is asserted, never time. ``counters`` as in :class:`Case`.
    """

    name: str
    intent: str
    switch: str
    entries: tuple[Entry, ...]
    in_port: int
    out_port: int
    sends: tuple[Send, ...]
    overtakes: tuple[tuple[str, str], ...]
    counters: tuple[tuple[str, int, int], ...] = ()

    def fifo(self) -> list[str]:
        """Labels of the low-priority frames, in the order they are sent (and must leave)."""
        high = {a for a, _ in self.overtakes}
        return [s.label for s in self.sends if s.label not in high]

    def expected_counters(self) -> dict[tuple[str, int], int]:
        """(counter, index) -> packet delta, including port_in and port_out of every frame."""
        deltas = {
            (PORT_IN, self.in_port): len(self.sends),
            (PORT_OUT, self.out_port): len(self.sends),
        }
        for name, index, delta in self.counters:
            deltas[(name, index)] = delta
        return deltas

    def __str__(self) -> str:
        return self.name


@cache
def burst_cases() -> tuple[Burst, ...]:
    """The priority cases: on the spine of path ``h0 -> h2``, towards the destination leaf."""
    fab = fabric()
    inter = _path("h0", "h2")
    spine = fab.switch(inter.hops[1].switch)
    s_in, s_out = _hop_of(spine, inter)
    build = Builder(fab, inter.src_nic.address)
    shifted = usidlib.shift(inter.carrier)
    data = pk.payload_bytes(BURST_PAYLOAD)
    write = pk.mrc_udp(Opcode.WRITE_ONLY, data)
    write_trimmed = pk.mrc_udp(Opcode.WRITE_ONLY, b"", dma_length=len(data))
    flow_labels = iter(range(0x1B000, 0x1C000))  # one per frame: tells the frames apart

    def through(
        label: str,
        upper: Any,
        out_upper: Any = None,
        out_dscp: int | None = None,
        *,
        after: int = 0,
        dscp: int = Dscp.DEFAULT,
    ) -> Send:
        """``upper`` in from the source leaf, out (uSID shifted) towards the destination leaf."""
        fl = next(flow_labels)
        return Send(
            label,
            build.frame_in(spine, s_in, inter.carrier, upper, dscp=dscp, flow_label=fl),
            build.frame_out(
                spine,
                s_out,
                shifted,
                upper if out_upper is None else out_upper,
                dscp=dscp if out_dscp is None else out_dscp,
                flow_label=fl,
            ),
            after,
        )

    def queued(after: int) -> tuple[Send, ...]:
        """:data:`BURST` ordinary (DSCP 0, never trimmed) WRITEs, back to back."""
        return tuple(through(f"data{i}", write, after=after) for i in range(BURST))

    last = f"data{BURST - 1}"
    return (
        Burst(
            "control_overtakes_queued_data",
            f"an ACK (DSCP 48) sent right behind {BURST} ordinary packets leaves before the last "
            "of them: control goes in the high-priority queue",
            spine.name, build.tables(spine, qos(s_out, NEVER, NEVER)), s_in, s_out,
            sends=(*queued(0), through("ack", pk.ack_udp(), dscp=Dscp.CONTROL)),
            overtakes=(("ack", last),),
            counters=((TRIMMED, s_out, 0), (ECN_MARKED, s_out, 0)),
        ),
        Burst(
            "trimmed_header_overtakes_queued_data",
            f"trim threshold {TRIM_AT}: a DSCP 10 WRITE at the idle port leaves whole; one sent "
            "once the queue has built is trimmed and its header leaves before the last queued "
            "packet: trimmed packets go in the high-priority queue",
            spine.name, build.tables(spine, qos(s_out, TRIM_AT, NEVER)), s_in, s_out,
            sends=(
                # alone through the idle port: the depth the port recorded is 0 again
                through("lone", write),
                through("early", write, dscp=Dscp.TRIMMABLE, after=1),
                *queued(1),
                # burst frame k (0 = early) saw >= k - 1 queued; once frame k = TRIM_AT + 2
                # left, the recorded depth is >= TRIM_AT (one frame to spare)
                through("late", write, write_trimmed, Dscp.TRIMMED,
                        dscp=Dscp.TRIMMABLE, after=TRIM_AT + 4),
            ),
            overtakes=(("late", last),),
            counters=((TRIMMED, s_out, 1), (ECN_MARKED, s_out, 0)),
        ),
        Burst(
            "header_trimmed_upstream_overtakes_queued_data",
            f"headers trimmed by an earlier switch (DSCP 12, and 13 as a last hop writes it) sent "
            f"right behind {BURST} ordinary packets leave before the last of them, not trimmed "
            "again: a trimmed header stays in the high-priority queue at every hop",
            spine.name, build.tables(spine, qos(s_out, 0, NEVER)), s_in, s_out,
            sends=(
                *queued(0),
                through("fabric", write_trimmed, dscp=Dscp.TRIMMED),
                through("last_hop", write_trimmed, dscp=Dscp.TRIMMED_LAST_HOP),
            ),
            overtakes=(("fabric", last), ("last_hop", last)),
            counters=((TRIMMED, s_out, 0), (ECN_MARKED, s_out, 0)),
        ),
    )  # fmt: skip


def shaped_ports() -> dict[int, int]:
    """Port -> rate (bit/s) a target must be shaped with to run :func:`burst_cases`."""
    return {burst.out_port: SHAPED_RATE_BPS for burst in burst_cases()}
