"""The contract of the mrc_switch P4 program: its names, drop reasons, code points and ECMP hash.

Everything the controller, both switch targets (BMv2 running ``mrc_switch.p4``, switchmodel
running its Python twin), the host stack, the Wireshark dissector and the tests must agree on
is written here once, and nowhere else outside the P4 program:

- the P4Info names of the program's tables, match fields, actions and their parameters, action
  profile, counters and registers, with their widths and sizes (:data:`TABLES`,
  :data:`ACTIONS`, :data:`PROFILES`, :data:`COUNTERS`, :data:`REGISTERS`), and
  :func:`p4info_problems`, the one check that a P4Info is this program;
- the action data of the two actions with parameters as typed records (:class:`NextHopParams`,
  :class:`PortQosParams`) whose field names are the P4 parameter names;
- the drop reasons, the index of ``MrcIngress.drops`` (:class:`DropReason`);
- the code points: DSCP (:class:`Dscp`), ECN (:class:`Ecn`), queue priorities
  (:class:`Priority`), ethertype, IP protocols, the SRH, the RoCEv2 UDP port, the BTH opcodes
  (:class:`Opcode`), AETH syndromes (:class:`Syndrome`), the MRC extension types
  (:class:`ExtType`), flags and endpoint operations that switch and hosts share;
- the ECMP hash of ``MrcIngress.ipv6_ecmp`` as BMv2 computes it (:func:`ecmp_hash`,
  :func:`member_index`), which switchmodel runs and the host simulation and the tests use to
  predict a flow's uplink.

The P4 program's ``const`` declarations (``p4src/include/headers.p4``) are :data:`P4_CONSTANTS`;
``tests/test_contract.py`` holds this module against them and against p4c's committed P4Info, and
``tests/test_contract_docs.py`` holds the Wireshark dissector and the docs against it.

This module imports nothing of the project and nothing outside the standard library: every
floor of the house may import it.
"""

from __future__ import annotations

import enum
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

# -- P4Info names ---------------------------------------------------------------------------------

#: tables
MY_SID = "MrcIngress.my_sid"
IPV6_LPM = "MrcIngress.ipv6_lpm"
IPV6_ECMP = "MrcIngress.ipv6_ecmp"
PORT_QOS = "MrcIngress.port_qos"
#: the action selector of ``ipv6_ecmp`` (its members and groups are written over P4Runtime)
ECMP_SELECTOR = "MrcIngress.ecmp_selector"

#: actions
NO_ACTION = "NoAction"
USID_UN = "MrcIngress.usid_un"
SRV6_END = "MrcIngress.srv6_end"
SET_NEXT_HOP = "MrcIngress.set_next_hop"
DROP_NO_ROUTE = "MrcIngress.drop_no_route"
SET_PORT_QOS = "MrcIngress.set_port_qos"

#: match fields
DST_ADDR = "hdr.ipv6.dst_addr"
EGRESS_SPEC = "standard_metadata.egress_spec"

#: counters (indirect, packets and bytes)
PORT_IN = "MrcIngress.port_in"
TRIMMED = "MrcIngress.trimmed"
ECN_MARKED = "MrcIngress.ecn_marked"
DROPS = "MrcIngress.drops"
PORT_OUT = "MrcEgress.port_out"

#: registers (declared at top level, so P4Info names them without a control)
PORT_QDEPTH = "port_qdepth"
PORT_ARRIVALS = "port_arrivals"

PORT_BITS = 9  #: ``port_t``: bit<9> port numbers
PORT_COUNT = 1 << PORT_BITS  #: counters and registers indexed by port have this many cells
QDEPTH_BITS = 19  #: ``qdepth_t``, as ``standard_metadata.deq_qdepth``
DROP_REASON_SLOTS = 16  #: the size of ``MrcIngress.drops`` (indexed by :class:`DropReason`)


class MatchKind(enum.IntEnum):
    """The match kinds of the program's tables, numbered as P4Info's ``MatchField.MatchType``."""

    EXACT = 2
    LPM = 3


class Field(NamedTuple):
    """A match field (with its match kind) or an action parameter (kind None): name and width."""

    name: str
    bitwidth: int
    kind: MatchKind | None = None


@dataclass(frozen=True)
class Action:
    """An action and its parameters, in declaration order."""

    name: str
    params: tuple[Field, ...] = ()


@dataclass(frozen=True)
class Table:
    """A table: its key (every table of the program has exactly one match field in P4Info), the
    actions it offers, its default action, its size and its action profile, if indirect."""

    name: str
    key: Field
    actions: tuple[str, ...]
    default_action: str
    size: int
    profile: str = ""


class NextHopParams(NamedTuple):
    """The action data of ``set_next_hop``: field names are the P4 parameter names."""

    port: int
    smac: Any  #: MAC text or 6 bytes
    dmac: Any  #: MAC text or 6 bytes


class PortQosParams(NamedTuple):
    """The action data of ``set_port_qos`` (thresholds in packets of the data queue;
    ``ecn_slope``: RED's marking probability per packet above ``ecn_threshold``, in 1/65536;
    ``last_hop`` 1: the port faces a host, so a trim there is the last hop's)."""

    trim_threshold: int
    ecn_threshold: int
    ecn_max_threshold: int
    ecn_slope: int
    last_hop: int = 0


def params_of(data: NamedTuple) -> dict[str, Any]:
    """Action data as P4Runtime parameters: P4 parameter name -> value."""
    return dict(data._asdict())


_DST = Field(DST_ADDR, 128, MatchKind.LPM)

ACTIONS: tuple[Action, ...] = (
    Action(NO_ACTION),
    Action(USID_UN),
    Action(SRV6_END),
    Action(SET_NEXT_HOP, (Field("port", PORT_BITS), Field("smac", 48), Field("dmac", 48))),
    Action(DROP_NO_ROUTE),
    Action(
        SET_PORT_QOS,
        tuple(
            Field(name, width)
            for name, width in zip(PortQosParams._fields, (19, 19, 19, 16, 1), strict=True)
        ),
    ),
)
TABLES: tuple[Table, ...] = (
    Table(MY_SID, _DST, (USID_UN, SRV6_END, NO_ACTION), NO_ACTION, 64),
    Table(IPV6_LPM, _DST, (SET_NEXT_HOP, DROP_NO_ROUTE), DROP_NO_ROUTE, 1024),
    Table(IPV6_ECMP, _DST, (SET_NEXT_HOP, NO_ACTION), NO_ACTION, 1024, ECMP_SELECTOR),
    Table(
        PORT_QOS,
        Field(EGRESS_SPEC, PORT_BITS, MatchKind.EXACT),
        (SET_PORT_QOS, NO_ACTION),
        NO_ACTION,
        512,
    ),
)
#: action profile -> size (its table names it: :attr:`Table.profile`)
PROFILES: Mapping[str, int] = {ECMP_SELECTOR: 1024}
#: counter -> size
COUNTERS: Mapping[str, int] = {
    PORT_IN: PORT_COUNT,
    TRIMMED: PORT_COUNT,
    ECN_MARKED: PORT_COUNT,
    DROPS: DROP_REASON_SLOTS,
    PORT_OUT: PORT_COUNT,
}
#: register -> (cell width, size)
REGISTERS: Mapping[str, tuple[int, int]] = {
    PORT_QDEPTH: (QDEPTH_BITS, PORT_COUNT),
    PORT_ARRIVALS: (QDEPTH_BITS, PORT_COUNT),
}


def action(name: str) -> Action:
    """The action called ``name`` (KeyError when the program has none)."""
    for found in ACTIONS:
        if found.name == name:
            return found
    raise KeyError(name)


def table(name: str) -> Table:
    """The table called ``name`` (KeyError when the program has none)."""
    for found in TABLES:
        if found.name == name:
            return found
    raise KeyError(name)


# -- drop reasons and code points ----------------------------------------------------------------


class DropReason(enum.IntEnum):
    """Index of ``MrcIngress.drops``: why a packet was dropped."""

    NOT_IPV6 = 1
    PARSE_ERROR = 2
    SRH_INVALID = 3
    HOP_LIMIT = 4
    NO_ROUTE = 5
    SID_END = 6
    QUEUE_FULL = 7  #: counted by the target's queue, not by the program
    OVERSIZE = 8  #: counted by the target: a frame larger than the port MTU


class Dscp(enum.IntEnum):
    """DSCP code points (the upper 6 bits of the IPv6 traffic class)."""

    DEFAULT = 0  #: ordinary traffic, and data of a QP with trimming off: never trimmed
    TRIMMABLE = 10  #: MRC data: the switch may trim it
    TRIMMED = 12  #: what a switch writes into a packet it trimmed
    TRIMMED_LAST_HOP = 13  #: trimmed at a port that faces a host (the receiver's own leaf)
    CONTROL = 48  #: MRC control: ACK, NACK, probes, endpoint requests


#: the DSCPs the program queues at high priority (step 7 of ``MrcIngress``): control, and headers
#: trimmed here or by an earlier switch; every other packet goes to the data queue
HIGH_PRIORITY_DSCPS = frozenset((Dscp.CONTROL, Dscp.TRIMMED, Dscp.TRIMMED_LAST_HOP))


class Ecn(enum.IntEnum):
    """ECN code points (the lower 2 bits of the IPv6 traffic class)."""

    NOT_ECT = 0b00  #: not ECN-capable: MRC control
    ECT1 = 0b01
    ECT0 = 0b10  #: ECN-capable: MRC data
    CE = 0b11  #: congestion experienced: set by a switch


class Priority(enum.IntEnum):
    """Queue priorities (``standard_metadata.priority``): BMv2 serves the higher first."""

    LOW = 0  #: the data queue
    HIGH = 1  #: control and trimmed packets


class Opcode(enum.IntEnum):
    """BTH opcodes MRC uses (RC)."""

    WRITE_ONLY = 0x0A  #: RDMA WRITE Only
    WRITE_ONLY_IMM = 0x0B  #: RDMA WRITE Only with Immediate
    ACKNOWLEDGE = 0x11  #: ACK, NACK, probes and endpoint requests


class Syndrome(enum.IntEnum):
    """AETH syndromes of MRC control packets."""

    ACK = 0x1F  #: ACK (credits not used), probes, endpoint requests
    NAK_SEQ = 0x60  #: NAK, PSN sequence error: a trimmed packet
    NAK_ACCESS = 0x62  #: NAK, remote access error: a refused packet


class ExtType(enum.IntEnum):
    """The first byte of an MRC extension."""

    DATA = 1
    ACK = 2
    NACK = 3
    PROBE = 4
    PROBE_REPLY = 5
    EP_REQUEST = 6  #: endpoint request (``mrc_ctl_ep_req``): an EV probe or a port status update
    EP_RESPONSE = 7  #: its response (``mrc_ctl_ep_rsp``)


class EpOp(enum.IntEnum):
    """Endpoint operations (the low nibble of an EP_REQUEST's flags; ``mrc_ctl_ep_op_type``)."""

    EV_PROBE = 0
    PORT_STATUS_UPDATE = 1


class DataFlag(enum.IntFlag):
    """Flags of the MRC data extension."""

    FIRST = 0x01  #: first packet of its message
    LAST = 0x02  #: last packet of its message
    RETX = 0x04  #: a retransmission


class AckFlag(enum.IntFlag):
    """Flags of an ACK extension."""

    ECN_ECHO = 0x01  #: the packet that triggered the ACK arrived CE-marked


class NackFlag(enum.IntFlag):
    """Flags of a NACK extension."""

    TRIMMED = 0x01  #: the NACKed packet arrived trimmed
    ACCESS = 0x02  #: the NACKed packet was refused (rkey / address outside the region)
    LAST_HOP = 0x04  #: the NACKed packet was trimmed by the receiver's own leaf
    CE = 0x08  #: the NACKed packet arrived CE-marked (a trimmed header keeps its ECN field)


EP_FLAG_SVC_TIME = 0x80  #: EP_RESPONSE flags: the service time field is valid
EP_OP_MASK = 0x0F  #: EP_REQUEST / EP_RESPONSE flags: the operation

ETHERTYPE_IPV6 = 0x86DD
IP_PROTO_ROUTING = 43  #: IPv6 Routing header
IP_PROTO_UDP = 17
SRH_ROUTING_TYPE = 4  #: RFC 8754 Segment Routing Header
SRH_MAX_SEGMENTS = 4  #: the segments a switch parses (``#define`` in the program)
ROCEV2_UDP_PORT = 4791
QDEPTH_MAX = (1 << QDEPTH_BITS) - 1

# header sizes in bytes
ETHERNET_BYTES = 14
IPV6_BYTES = 40
SRH_FIXED_BYTES = 8
SRH_SEGMENT_BYTES = 16
UDP_BYTES = 8
BTH_BYTES = 12
RETH_BYTES = 16
IMMDT_BYTES = 4
AETH_BYTES = 4
MRC_DATA_BYTES = 24  #: the MRC data extension
MRC_CONTROL_BYTES = 32  #: an MRC control extension


def largest_data_packet(payload: int) -> int:
    """The largest IPv6 packet an MRC NIC sends with ``payload`` bytes of data: IPv6, a reduced
    SRH of one segment, UDP, BTH, RETH, ImmDt and the MRC data extension around it."""
    if payload <= 0:
        raise ValueError(f"payload {payload} B: expected a positive size")
    return (
        IPV6_BYTES + SRH_FIXED_BYTES + SRH_SEGMENT_BYTES + UDP_BYTES + BTH_BYTES + RETH_BYTES
        + IMMDT_BYTES + MRC_DATA_BYTES + payload
    )  # fmt: skip


#: The ``const`` declarations of the P4 program under their P4 names (and ``SRH_MAX_SEGMENTS``,
#: a ``#define`` there): the values are this module's.
P4_CONSTANTS: Mapping[str, int] = {
    "QDEPTH_MAX": QDEPTH_MAX,
    "ETHERTYPE_IPV6": ETHERTYPE_IPV6,
    "IP_PROTO_ROUTING": IP_PROTO_ROUTING,
    "IP_PROTO_UDP": IP_PROTO_UDP,
    "SRH_ROUTING_TYPE": SRH_ROUTING_TYPE,
    "SRH_MAX_SEGMENTS": SRH_MAX_SEGMENTS,
    "ROCEV2_UDP_PORT": ROCEV2_UDP_PORT,
    "BTH_OPCODE_WRITE_ONLY": Opcode.WRITE_ONLY,
    "BTH_OPCODE_WRITE_ONLY_IMM": Opcode.WRITE_ONLY_IMM,
    "ETHERNET_BYTES": ETHERNET_BYTES,
    "IPV6_BYTES": IPV6_BYTES,
    "SRH_FIXED_BYTES": SRH_FIXED_BYTES,
    "UDP_BYTES": UDP_BYTES,
    "BTH_BYTES": BTH_BYTES,
    "RETH_BYTES": RETH_BYTES,
    "IMMDT_BYTES": IMMDT_BYTES,
    "MRC_DATA_BYTES": MRC_DATA_BYTES,
    **{f"DSCP_{d.name}": d for d in Dscp},
    **{f"ECN_{e.name}": e for e in Ecn},
    **{f"PRIORITY_{p.name}": p for p in Priority},
    **{f"DROP_{r.name}": r for r in DropReason if r < DropReason.QUEUE_FULL},
}


# -- the ECMP hash of ipv6_ecmp --------------------------------------------------------------------

#: The selector fields of ``ipv6_ecmp`` in key order, with their widths.
ECMP_SELECTOR_FIELDS: tuple[tuple[str, int], ...] = (
    ("hdr.ipv6.src_addr", 128),
    (DST_ADDR, 128),
    ("hdr.ipv6.flow_label", 20),
    ("meta.ecmp_l4_src_port", 16),
)
#: bits of the selector input: source, destination, flow label, UDP source port
SELECTOR_BITS = sum(width for _, width in ECMP_SELECTOR_FIELDS)
#: bytes of the selector input (the last 4 bits are zero padding)
SELECTOR_BYTES = (SELECTOR_BITS + 7) // 8
_PAD = SELECTOR_BYTES * 8 - SELECTOR_BITS


def selector_input(src: int, dst: int, flow_label: int, l4_src_port: int) -> bytes:
    """The bytes BMv2 hashes for these field values.

    BMv2 packs the selector fields one after the other, most significant bit first and with no
    padding between them (the 20-bit flow label straddles byte boundaries), and fills the last
    byte with zero bits: 292 bits in 37 bytes.
    """
    values = (src, dst, flow_label, l4_src_port)
    packed = 0
    for (name, width), value in zip(ECMP_SELECTOR_FIELDS, values, strict=True):
        if not 0 <= value < 1 << width:
            raise ValueError(
                f"ECMP selector field {name}={value:#x}: expected 0..{(1 << width) - 1:#x}"
            )
        packed = packed << width | value
    return (packed << _PAD).to_bytes(SELECTOR_BYTES, "big")


def ecmp_hash(src: int, dst: int, flow_label: int, l4_src_port: int) -> int:
    """The 32-bit hash BMv2's ``crc32`` gives for these field values: the CRC-32 of zlib
    (polynomial 0x04C11DB7 reflected, initial value and final XOR 0xFFFFFFFF)."""
    return zlib.crc32(selector_input(src, dst, flow_label, l4_src_port))


def member_index(src: int, dst: int, flow_label: int, l4_src_port: int, members: int) -> int:
    """Which of a group's ``members`` carries this flow: BMv2 picks member ``hash mod n``, the
    members ordered by the handle BMv2 gave them (the smallest free handle: creation order on
    a fresh switch)."""
    if members < 1:
        raise ValueError(f"ECMP group of {members} members: expected at least 1")
    return ecmp_hash(src, dst, flow_label, l4_src_port) % members


# -- checking a P4Info -----------------------------------------------------------------------------


def _bitwidth(type_spec: Any) -> int | None:
    """The width of a P4Info ``P4DataTypeSpec`` of a bit string (None for anything else)."""
    if type_spec.HasField("bitstring"):
        bits = type_spec.bitstring
        for kind in ("bit", "int", "varbit"):
            if bits.HasField(kind):
                return int(getattr(bits, kind).bitwidth)
    return None


def _by_name(objects: Iterable[Any]) -> dict[str, Any]:
    return {obj.preamble.name: obj for obj in objects}


def p4info_problems(info: Any) -> list[str]:
    """What keeps the P4Info message ``info`` (``p4.config.v1.P4Info``) from being this
    program, one readable phrase each (empty: it is the program).

    Names, widths, match kinds, the actions each table offers, the action profile, counter and
    register sizes are checked; ids are whatever ``info`` assigns. A missing object is named
    alone (``table MrcIngress.my_sid``), so that "the P4Info lacks ..." reads right.
    """
    problems: list[str] = []
    actions = _by_name(info.actions)
    action_names = {a.preamble.id: name for name, a in actions.items()}
    for spec in ACTIONS:
        found = actions.get(spec.name)
        if found is None:
            problems.append(f"action {spec.name}")
            continue
        got = [(p.name, p.bitwidth) for p in found.params]
        for at, param in enumerate(spec.params):
            have = got[at] if at < len(got) else None
            if have != (param.name, param.bitwidth):
                problems.append(
                    f"action {spec.name} parameter '{param.name}' of bit<{param.bitwidth}> "
                    f"in place {at + 1} (it has {'none' if have is None else have})"
                )
        if len(got) > len(spec.params):
            problems.append(f"action {spec.name} without parameters {got[len(spec.params) :]}")
    tables = _by_name(info.tables)
    for tspec in TABLES:
        found = tables.get(tspec.name)
        if found is None:
            problems.append(f"table {tspec.name}")
            continue
        key = tspec.key
        got_key = [(m.name, m.bitwidth, m.match_type) for m in found.match_fields]
        if got_key != [(key.name, key.bitwidth, key.kind)]:
            problems.append(
                f"table {tspec.name} matching {getattr(key.kind, 'name', '')} "
                f"bit<{key.bitwidth}> {key.name} alone (it has {got_key})"
            )
        offered = {action_names.get(ref.id) for ref in found.action_refs}
        problems.extend(
            f"action {name} in table {tspec.name}" for name in tspec.actions if name not in offered
        )
    profiles = _by_name(info.action_profiles)
    for tspec in TABLES:
        if not tspec.profile:
            continue
        found = profiles.get(tspec.profile)
        owner = tables.get(tspec.name)
        if found is None or not found.with_selector:
            problems.append(f"action profile {tspec.profile} with a selector")
        elif owner is not None and owner.implementation_id != found.preamble.id:
            problems.append(f"table {tspec.name} implemented by {tspec.profile}")
    counters = _by_name(info.counters)
    for name, size in COUNTERS.items():
        found = counters.get(name)
        if found is None:
            problems.append(f"counter {name}")
        elif found.size != size:
            problems.append(f"counter {name} of size {size} (it has {found.size})")
    registers = _by_name(info.registers)
    for name, (width, size) in REGISTERS.items():
        found = registers.get(name)
        if found is None:
            problems.append(f"register {name}")
            continue
        shape = (_bitwidth(found.type_spec), int(found.size))
        if shape != (width, size):
            problems.append(
                f"register {name} of bit<{width}>[{size}] (it has bit<{shape[0]}>[{shape[1]}])"
            )
    return problems
