"""The mrc_switch P4 program (p4src/mrc_switch.p4) as pure functions: bytes in, verdict out.

No I/O and no clock: the data path hands :func:`ingress` a frame, its ingress port and the
:class:`~switchmodel.tables.PipelineState`, and gets back either a :class:`Forward` (egress port,
priority, rewritten frame) or the :class:`~switchmodel.tables.DropReason` it counted. When the
traffic manager dequeues a packet it calls :func:`egress`, which records the queue depth the
packet leaves behind in ``port_qdepth``, clears ``port_arrivals`` and counts ``port_out``. The stages follow the program:

parser   Ethernet; IPv6 if ether type 0x86DD; SRH if next header 43 (routing type 4, at most four
         segments, hdr_ext_len == 2 * (last_entry + 1), segments_left <= last_entry + 1, the
         bound of a reduced SRH that leaves out its first segment: otherwise SRH_INVALID); UDP
         if next header 17; BTH if UDP destination port 4791; RETH (+ ImmDt) and the 24-byte
         MRC data extension for BTH opcodes 0x0A / 0x0B. A header cut short is a
         PARSE_ERROR. The parser is total: any byte string gives a verdict, never an exception.
ingress  count port_in; parser error -> drop; no IPv6 -> NOT_IPV6; hop limit <= 1 -> HOP_LIMIT,
         else decrement; my_sid (uN shift or End; End without a segment left -> SID_END);
         ipv6_ecmp (a group's member picked by BMv2's hash, :func:`p4src.contract.ecmp_hash`), on a
         miss ipv6_lpm (set_next_hop or drop_no_route -> NO_ROUTE); priority (control DSCP high);
         depth of the egress port's data queue = port_qdepth + port_arrivals; port_qos -> trim
         (DSCP 10 MRC data, depth >= trim threshold) or ECN CE (ECT: depth >= ECN maximum
         threshold, or depth >= ECN threshold and a 16-bit random draw below
         (depth - ECN threshold) x slope);
         a packet that goes to the data queue (priority 0) then increments port_arrivals.
deparser the headers as rewritten; a trimmed packet ends after its MRC data extension, with
         DSCP 12, IPv6 payload length and UDP length fixed and high priority.
egress   a data packet (priority 0): port_qdepth[egress port] = deq_qdepth (its queue, after it)
         and port_arrivals[egress port] = 0; every packet: count port_out.

Counters count bytes as BMv2 does: the length of the frame as it arrived at the switch.
"""

from __future__ import annotations

import random
import struct
from typing import NamedTuple

from p4src.contract import (
    BTH_BYTES,
    ETHERNET_BYTES,
    ETHERTYPE_IPV6,
    HIGH_PRIORITY_DSCPS,
    IMMDT_BYTES,
    IP_PROTO_ROUTING,
    IP_PROTO_UDP,
    IPV6_BYTES,
    MRC_DATA_BYTES,
    QDEPTH_MAX,
    RETH_BYTES,
    ROCEV2_UDP_PORT,
    SRH_FIXED_BYTES,
    SRH_MAX_SEGMENTS,
    SRH_ROUTING_TYPE,
    SRH_SEGMENT_BYTES,
    UDP_BYTES,
    DropReason,
    Dscp,
    Ecn,
    Opcode,
    Priority,
    ecmp_hash,
)
from switchmodel.tables import NO_QOS, EcmpGroup, NextHop, PipelineState, SidAction

# the code points the per-packet path compares, bound once (looking up an enum member costs more)
_WRITE_ONLY, _WRITE_ONLY_IMM = Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_IMM
_TRIMMABLE, _CE = Dscp.TRIMMABLE, Ecn.CE
_TRIMMED, _TRIMMED_LAST_HOP = Dscp.TRIMMED, Dscp.TRIMMED_LAST_HOP
PRIORITY_LOW, PRIORITY_HIGH = Priority.LOW, Priority.HIGH
_dice = random.Random()  # RED's draws, as BMv2's random(): not for security


# version|tc|flow label, payload length, next header, hop limit, (source), destination
_IPV6 = struct.Struct("!IHBB16xQQ")
_ADDR = struct.Struct("!QQ")
_SRH_FIXED = struct.Struct("!BBBBBBH")  # next hdr, hdr ext len, type, SL, last entry, flags, tag
_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")

_LOW80 = (1 << 80) - 1
_LOW96 = (1 << 96) - 1
_LOW64 = (1 << 64) - 1

_NO_ACTION = SidAction.NO_ACTION
_USID_UN = SidAction.USID_UN
_NO_QOS = NO_QOS


class Forward(NamedTuple):
    """Ingress verdict: send ``frame`` out of ``port`` in the queue of ``priority``."""

    port: int
    priority: int
    frame: bytearray


Verdict = Forward | DropReason


def usid_shift(dst: int) -> int:
    """uN: drop the active uSID, shift the 80 bits after it left by 16, zero-fill."""
    return (dst >> 96 << 96) | ((dst << 16) & _LOW96)


def ingress(frame: bytes | bytearray | memoryview, in_port: int, state: PipelineState) -> Verdict:
    """Parse, match-action and deparse one frame that arrived on ``in_port``.

    Updates the ingress counters (``port_in``, ``drops``, ``trimmed``, ``ecn_marked``) of
    ``state`` and returns the verdict; ``frame`` itself is never modified.
    """
    n = len(frame)
    counters = state.counters
    c = counters.port_in
    if 0 <= in_port < c.size:
        c.packets[in_port] += 1
        c.bytes[in_port] += n

    # -- parser ----------------------------------------------------------------------------
    if n < ETHERNET_BYTES:
        return _drop(state, DropReason.PARSE_ERROR, n)
    if (frame[12] << 8 | frame[13]) != ETHERTYPE_IPV6:
        return _drop(state, DropReason.NOT_IPV6, n)
    if n < ETHERNET_BYTES + IPV6_BYTES:
        return _drop(state, DropReason.PARSE_ERROR, n)
    vtf, _plen, next_hdr, hop_limit, hi, lo = _IPV6.unpack_from(frame, ETHERNET_BYTES)
    dst = hi << 64 | lo
    off = ETHERNET_BYTES + IPV6_BYTES
    srh_off = -1
    segments_left = 0
    if next_hdr == IP_PROTO_ROUTING:
        if n < off + SRH_FIXED_BYTES:
            return _drop(state, DropReason.PARSE_ERROR, n)
        next_hdr, ext_len, rtype, segments_left, last_entry, _f, _t = _SRH_FIXED.unpack_from(
            frame, off
        )
        if (
            rtype != SRH_ROUTING_TYPE
            or last_entry >= SRH_MAX_SEGMENTS
            or ext_len != 2 * (last_entry + 1)
            or segments_left > last_entry + 1  # last_entry + 1: a reduced SRH (RFC 8754)
        ):
            return _drop(state, DropReason.SRH_INVALID, n)
        srh_off = off
        off += SRH_FIXED_BYTES + SRH_SEGMENT_BYTES * (last_entry + 1)
        if n < off:
            return _drop(state, DropReason.PARSE_ERROR, n)
    udp_off = -1
    headers_end = -1  # end of the MRC data extension when the packet is MRC data
    if next_hdr == IP_PROTO_UDP:
        if n < off + UDP_BYTES:
            return _drop(state, DropReason.PARSE_ERROR, n)
        udp_off = off
        if (frame[off + 2] << 8 | frame[off + 3]) == ROCEV2_UDP_PORT:
            bth = off + UDP_BYTES
            if n < bth + BTH_BYTES:
                return _drop(state, DropReason.PARSE_ERROR, n)
            opcode = frame[bth]
            if opcode in (_WRITE_ONLY, _WRITE_ONLY_IMM):
                end = bth + BTH_BYTES + RETH_BYTES + MRC_DATA_BYTES
                if opcode == _WRITE_ONLY_IMM:
                    end += IMMDT_BYTES
                if n < end:
                    return _drop(state, DropReason.PARSE_ERROR, n)
                headers_end = end

    # -- ingress ---------------------------------------------------------------------------
    if hop_limit <= 1:
        return _drop(state, DropReason.HOP_LIMIT, n)
    hop_limit -= 1

    new_dst = dst
    end_done = False
    action = None
    for shift, bucket in state.my_sid.probes:  # LpmTable.lookup, inlined
        action = bucket.get(dst >> shift)
        if action is not None:
            break
    else:
        action = state.my_sid_default
    if action is not _NO_ACTION:
        if action is _USID_UN and dst & _LOW80:
            new_dst = (dst >> 96 << 96) | ((dst << 16) & _LOW96)  # usid_shift()
        elif srh_off >= 0 and segments_left > 0:  # End behaviour
            segments_left -= 1
            seg = srh_off + SRH_FIXED_BYTES + SRH_SEGMENT_BYTES * segments_left
            shi, slo = _ADDR.unpack_from(frame, seg)
            new_dst = shi << 64 | slo
            end_done = True
        else:
            return _drop(state, DropReason.SID_END, n)

    hop: NextHop | None = None
    if state.ipv6_ecmp.probes:
        group: EcmpGroup | None = state.ipv6_ecmp.lookup(new_dst)
        if group is not None and group.hops:  # an empty group is a miss
            src = int.from_bytes(frame[ETHERNET_BYTES + 8 : ETHERNET_BYTES + 24], "big")
            sport = (frame[udp_off] << 8 | frame[udp_off + 1]) if udp_off >= 0 else 0
            hops = group.hops
            hop = hops[ecmp_hash(src, new_dst, vtf & 0xFFFFF, sport) % len(hops)]
    if hop is None:
        for shift, routes in state.ipv6_lpm.probes:  # LpmTable.lookup, inlined
            hop = routes.get(new_dst >> shift)
            if hop is not None:
                break
    hit = hop is not None
    if hop is None:
        hop = state.ipv6_lpm_default
    port = hop.port
    if port < 0:
        return _drop(state, DropReason.NO_ROUTE, n)

    tc = tc_in = (vtf >> 20) & 0xFF
    dscp = tc >> 2
    ecn = tc & 3
    trim = False
    if not hit:
        # The program returns when ipv6_lpm misses: a default action changed to set_next_hop
        # forwards with the priority left at 0 and no trimming or marking.
        qos = _NO_QOS
        priority = PRIORITY_LOW
    else:
        # control, and a header trimmed by an earlier switch, go to the high-priority queue
        priority = PRIORITY_HIGH if dscp in HIGH_PRIORITY_DSCPS else PRIORITY_LOW
        qos = state.port_qos.entries.get(port, state.port_qos_default)
    in_range = hit and port < len(state.port_arrivals)
    arrivals = state.port_arrivals[port] if in_range else 0
    if qos is not _NO_QOS:
        depth = (state.port_qdepth[port] + arrivals) & QDEPTH_MAX if in_range else 0
        if headers_end >= 0 and dscp == _TRIMMABLE and depth >= qos.trim_threshold:
            trim = True
            tc = (_TRIMMED_LAST_HOP if qos.last_hop else _TRIMMED) << 2 | ecn
            priority = PRIORITY_HIGH
            counters.trimmed.count(port, n)
        # ECT(1) or ECT(0): every one from ecn_max_threshold on; below it, RED-like with
        # probability (depth - ecn_threshold) * ecn_slope / 65536, as the program's random()
        elif (
            0 < ecn < _CE
            and depth >= qos.ecn_threshold
            and (
                depth >= qos.ecn_max_threshold
                or _dice.getrandbits(16) < (depth - qos.ecn_threshold) * qos.ecn_slope
            )
        ):
            tc = tc | _CE
            counters.ecn_marked.count(port, n)
    if in_range and priority == PRIORITY_LOW and arrivals != QDEPTH_MAX:
        state.port_arrivals[port] = arrivals + 1

    # -- deparser --------------------------------------------------------------------------
    out = bytearray(frame[:headers_end]) if trim else bytearray(frame)
    out[0:12] = hop.macs
    if tc != tc_in:
        _U32.pack_into(out, ETHERNET_BYTES, (vtf & 0xF00FFFFF) | (tc << 20))
    out[21] = hop_limit
    if new_dst != dst:
        _ADDR.pack_into(out, 38, new_dst >> 64, new_dst & _LOW64)
    if end_done:
        out[srh_off + 3] = segments_left
    if trim:
        _U16.pack_into(out, 18, headers_end - ETHERNET_BYTES - IPV6_BYTES)
        _U16.pack_into(out, udp_off + 4, headers_end - udp_off)
    return Forward(port, priority, out)


def _drop(state: PipelineState, reason: DropReason, length: int) -> DropReason:
    state.counters.drops.count(reason, length)
    return reason


def count_drop(state: PipelineState, reason: DropReason, length: int) -> None:
    """Count a drop decided by the target rather than the program (QUEUE_FULL, OVERSIZE)."""
    state.counters.drops.count(reason, length)


def egress(state: PipelineState, port: int, priority: int, deq_qdepth: int, length: int) -> None:
    """The egress control: a data packet (priority 0) records the depth it leaves behind in its
    queue (``deq_qdepth``, as BMv2 reports it: that priority queue only) and clears
    ``port_arrivals``; every packet is counted in ``port_out``.

    ``length`` is the packet's length as it arrived at the switch (BMv2 counts that).
    """
    if 0 <= port < len(state.port_qdepth):
        if priority == PRIORITY_LOW:
            state.port_qdepth[port] = deq_qdepth & QDEPTH_MAX
            state.port_arrivals[port] = 0
        out = state.counters.port_out
        out.packets[port] += 1
        out.bytes[port] += length
