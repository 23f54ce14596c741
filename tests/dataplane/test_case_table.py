"""The case table itself: complete, consistent with the contract and with the fabric model.

These run everywhere (no target needed) and keep the shared cases honest: every drop reason the
program counts is exercised, names are unique, each expected trimmed frame is exactly the
input's headers with the contract's rewrites, and every burst can be run to its end and
really puts a high-priority frame behind low-priority ones.
"""

from __future__ import annotations

import ipaddress

from scapy.layers.inet6 import UDP, IPv6, IPv6ExtHdrSegmentRouting
from scapy.layers.l2 import Ether

from p4src.contract import HIGH_PRIORITY_DSCPS, TRIMMED, Dscp
from topologies import usid as usidlib

from .cases import (
    BURST,
    BURST_PAYLOAD,
    HOP_LIMIT,
    NO_ROUTE,
    NOT_IPV6,
    PARSE_ERROR,
    SID_END,
    SRH_INVALID,
    all_cases,
    burst_cases,
    case_by_name,
    shaped_ports,
)
from .packets import MRC_DATA_EXT


def test_names_are_unique_and_every_drop_reason_is_exercised() -> None:
    names = [c.name for c in all_cases()]
    assert len(names) == len(set(names))
    reasons = {c.drop for c in all_cases() if c.drop is not None}
    assert reasons == {NOT_IPV6, PARSE_ERROR, SRH_INVALID, HOP_LIMIT, NO_ROUTE, SID_END}
    for case in all_cases():
        assert (case.drop is None) != (not case.out), f"{case.name}: a drop or frames out, not both"


def test_entries_and_default_entries_are_kept_apart() -> None:
    for case in all_cases():
        assert not any(e.is_default for e in case.entries), f"{case.name}: a default in entries"
        assert all(e.is_default for e in case.defaults), f"{case.name}: an entry in defaults"
        assert len({e.table for e in case.defaults}) == len(case.defaults), case.name


def test_the_reduced_srh_case_sends_a_reduced_srh() -> None:
    """RFC 8754's reduced SRH leaves out the first segment: segments left 1, last entry 0."""
    srh = Ether(case_by_name("reduced_srh_at_an_exhausted_carrier").frame)[IPv6ExtHdrSegmentRouting]
    assert (srh.segleft, srh.lastentry, len(srh.addresses)) == (1, 0, 1)


def test_trimmed_frames_are_the_input_headers_with_lengths_fixed() -> None:
    trimmed = [c for c in all_cases() if any(n == TRIMMED and d == 1 for n, _, d in c.counters)]
    assert len(trimmed) >= 3
    for case in trimmed:
        ((_, out_frame),) = case.out
        sent, out = Ether(case.frame), Ether(out_frame)
        assert sent[IPv6].tc >> 2 == Dscp.TRIMMABLE
        assert out[IPv6].tc >> 2 in (Dscp.TRIMMED, Dscp.TRIMMED_LAST_HOP)
        assert out[IPv6].tc & 3 == sent[IPv6].tc & 3, "ECN bits survive trimming"
        srh_bytes = (
            len(out[IPv6ExtHdrSegmentRouting]) - len(out[UDP])
            if out.haslayer(IPv6ExtHdrSegmentRouting)
            else 0
        )
        assert out[IPv6].plen == len(out_frame) - 14 - 40
        assert out[UDP].len == out[IPv6].plen - srh_bytes
        kept = bytes(out[UDP].payload)
        assert kept.endswith(MRC_DATA_EXT), f"{case.name}: data extension is the last thing kept"
        assert bytes(sent[UDP].payload).startswith(kept), f"{case.name}: headers kept byte for byte"
        assert len(case.frame) - len(out_frame) == 256


def test_shift_cases_follow_the_fabric_model() -> None:
    """Each uSID case's destination out is the fabric model's shift of the destination in."""
    for name in ("usid_shift_at_spine", "usid_shift_at_leaf_to_host", "usid_shift_within_rack"):
        case = case_by_name(name)
        ((_, frame),) = case.out
        sent = ipaddress.IPv6Address(Ether(case.frame)[IPv6].dst)
        assert ipaddress.IPv6Address(Ether(frame)[IPv6].dst) == usidlib.shift(sent), name


def _dscp(frame: bytes) -> int:
    return int(Ether(frame)[IPv6].tc) >> 2


def test_bursts_can_run_and_put_high_priority_behind_a_queue() -> None:
    names = [b.name for b in burst_cases()] + [c.name for c in all_cases()]
    assert len(names) == len(set(names))
    for burst in burst_cases():
        labels = [s.label for s in burst.sends]
        assert len(labels) == len(set(labels)), burst.name
        assert len({s.out for s in burst.sends}) == len(burst.sends), f"{burst.name}: frames alike"
        for sent_before, send in enumerate(burst.sends):
            # a frame can only wait for departures of frames sent before it
            assert send.after <= sent_before, f"{burst.name}: {send.label} would wait forever"
        assert [s.after for s in burst.sends] == sorted(s.after for s in burst.sends)
        assert shaped_ports().get(burst.out_port), f"{burst.name}: output port not shaped"
        fifo = burst.fifo()
        for first, then in burst.overtakes:
            assert labels.index(first) > labels.index(then), f"{burst.name}: {first} sent last"
            assert first not in fifo and then in fifo
        ordinary = [s for s in burst.sends if s.label.startswith("data")]
        assert len(ordinary) == BURST
        assert all(_dscp(s.frame) == _dscp(s.out) == Dscp.DEFAULT for s in ordinary)
        high = {_dscp(s.out) for s in burst.sends if s.label not in fifo}
        assert high <= HIGH_PRIORITY_DSCPS, f"{burst.name}: high class by the contract"


def test_trimming_burst_trims_only_behind_a_queue() -> None:
    trimming = next(b for b in burst_cases() if any(n == TRIMMED and d for n, _, d in b.counters))
    sends = {s.label: s for s in trimming.sends}
    early, late = sends["early"], sends["late"]
    assert _dscp(early.frame) == _dscp(early.out) == Dscp.TRIMMABLE
    assert len(early.out) == len(early.frame), "the early frame leaves whole"
    assert _dscp(late.frame) == Dscp.TRIMMABLE and _dscp(late.out) == Dscp.TRIMMED
    assert len(late.frame) - len(late.out) == BURST_PAYLOAD, "the late frame loses its payload"
    assert late.after > 1, "the late frame waits until the queue has built"
