"""EV profiles, EV format profiles and the EV tables of QPs: which entropy values exist, how
they appear on the wire, and their states.

An EV (entropy value) names one way through the fabric. How an EV reaches the wire is its
**format** (an :class:`EvFormatProfile`, after ``mrc_ctl_ev_fmt_profile_attr``):

- ``SRV6`` -- the EV is bound to a ``topologies.Path`` and the packet carries that path's uSID
  carrier as its destination (the agent passes the paths in; nothing here computes an
  address); the EV number itself rides in the flow label and UDP source port. With an SRH
  (``EvFormatProfile(SRV6, srh=True)``, fields up to 256 bits) the destination is the path's
  ``srh_carrier`` and a reduced SRH carries its single segment ``srh_segment`` (the path's
  split, computed by the fabric model);
- ``STEV`` -- the EV's bits are spread over the IPv6 flow label (low 20 bits) and the UDP source
  port (the bits above), the packet goes to the destination NIC's plain address and the
  switches pick the path by ECMP hash: the host knows no path, only its EVs;
- ``UDP`` -- the EV is carried in the UDP source port alone (flow label 0), ECMP as for STEV.

Profiles (after ``mrc_ctl_ev_profile_attr``):

- :class:`GeneratedEvProfile` -- ``count`` EVs. SRV6: spread evenly over the paths, value
  ``plane << 28 | (spine + 1) << 20 | n``; STEV / UDP: generated from :class:`EvField` s as the
  OCP API expands them (init value, mask, min/max), spread over the planes in turn;
- :class:`ExplicitEvProfile` -- given EVs: ``(ev, path_index)`` (SRV6) or ``(ev, plane)``
  (STEV / UDP); with ``carriers`` (SRV6) ``(carrier, plane)``, each EV a path's uSID carrier
  (with an SRH the 256-bit split, as for :class:`Srv6EvProfile`) that the QP's paths must hold:
  the slot takes the path the carrier is (:func:`carrier_path`). With fields, each EV is
  expanded through them as generated ones are (:func:`expand_ev`: a fixed locator field and
  16-bit uSID fields make compact EVs whole carriers); the wire carries the expanded form, the
  profile keeps the EVs as given;
- :class:`Srv6EvProfile` -- one EV per path, the EV *is* the path's 128-bit uSID carrier (its
  32-bit wire form is the CRC-32 of the carrier); with ``srh=True`` the 256-bit value
  ``srh_carrier << 128 | srh_segment`` (the OCP layout: the SRv6 address, then the SRH segment).

States: GOOD (in use), ASSUMED_BAD (lost a packet: not used, probed), DENIED (operator: not used,
not probed), UNKNOWN (not used, probed; GOOD on a probe reply). States belong to the profile
(:class:`ProfileStates`), not to a QP: every QP that uses a profile sees the same state of each
EV, so one QP's discovery of a failed path keeps the others off it until a probe reinstates it.
"""

from __future__ import annotations

import enum
import ipaddress
import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from topologies import Path


class EvState(str, enum.Enum):
    """The state of one EV."""

    GOOD = "good"
    ASSUMED_BAD = "assumed_bad"
    DENIED = "denied"
    UNKNOWN = "unknown"


class EvProfileError(ValueError):
    """An EV profile that cannot be applied to the given paths."""


class EvFormat(str, enum.Enum):
    """How an EV is carried (``mrc_ctl_ev_fmt_mode``)."""

    SRV6 = "srv6"  #: the path's uSID carrier as destination (EV number in flow label + port)
    STEV = "stev"  #: EV bits in the IPv6 flow label and the UDP source port; ECMP in the fabric
    UDP = "udp"  #: EV bits in the UDP source port only; ECMP in the fabric


#: the widest EV each format carries (bits): SRV6 a 128-bit carrier, STEV flow label (20) plus 12
#: bits of the UDP source port, UDP the source port
FORMAT_MAX_WIDTH = {EvFormat.SRV6: 128, EvFormat.STEV: 32, EvFormat.UDP: 16}
#: the widest SRV6 EV with an SRH: the 128-bit carrier and the SRH's 128-bit segment
SRV6_SRH_MAX_WIDTH = 256


#: how the SRV6 format with an SRH is spelt where a format is named by a string
SRV6_SRH_NAME = "srv6+srh"


def ev_format(value: object) -> EvFormat:
    """``value`` (an :class:`EvFormat` or its name, any case) as an :class:`EvFormat`."""
    if isinstance(value, EvFormat):
        return value
    try:
        return EvFormat(str(value).lower())
    except ValueError:
        raise EvProfileError(
            f"EV format {value!r}: expected one of {', '.join(f.value for f in EvFormat)}"
        ) from None


def format_profile(value: object, fields: Sequence[int] = ()) -> EvFormatProfile:
    """The format profile ``value`` names: an :class:`EvFormatProfile` as it is, else a format
    name (any case) -- ``srv6``, ``srv6+srh`` (SRV6 with an SRH), ``stev`` or ``udp``."""
    if isinstance(value, EvFormatProfile):
        return value
    if str(value).lower() == SRV6_SRH_NAME:
        return EvFormatProfile(EvFormat.SRV6, tuple(fields), srh=True)
    try:
        return EvFormatProfile(ev_format(value), tuple(fields))
    except EvProfileError as exc:
        if "expected one of" in str(exc):
            names = ", ".join([EvFormat.SRV6.value, SRV6_SRH_NAME, EvFormat.STEV.value,
                               EvFormat.UDP.value])  # fmt: skip
            raise EvProfileError(f"EV format {value!r}: expected one of {names}") from None
        raise


@dataclass(frozen=True)
class EvFormatProfile:
    """An EV format profile (``mrc_ctl_ev_fmt_profile_attr``): the mode and the widths of its
    format fields, most significant first; no fields means one field of the mode's width."""

    mode: EvFormat = EvFormat.SRV6
    fields: tuple[int, ...] = ()
    #: SRV6 with a Segment Routing Header: a carrier and one SRH segment (fields up to 256 bits)
    srh: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", ev_format(self.mode))
        object.__setattr__(self, "fields", tuple(int(w) for w in self.fields))
        if self.srh and self.mode is not EvFormat.SRV6:
            raise EvProfileError(
                f"EV format {self.mode.value} with an SRH: only the srv6 format carries one"
            )
        top = SRV6_SRH_MAX_WIDTH if self.srh else FORMAT_MAX_WIDTH[self.mode]
        if any(w < 1 for w in self.fields):
            raise EvProfileError(f"EV format field widths {self.fields}: expected widths >= 1")
        if sum(self.fields) > top:
            hint = " (an SRV6 format with an SRH carries up to 256)" if top == 128 else ""
            raise EvProfileError(
                f"EV format fields {self.fields} ({sum(self.fields)} bits): the {self.name} "
                f"format carries at most {top} bits{hint}"
            )

    @property
    def name(self) -> str:
        """The format's spelling: ``srv6``, ``srv6+srh``, ``stev`` or ``udp``."""
        return SRV6_SRH_NAME if self.srh else self.mode.value

    @property
    def widths(self) -> tuple[int, ...]:
        """The format fields' widths (one field of the mode's width when none were given)."""
        if self.fields:
            return self.fields
        return (128, 128) if self.srh else (FORMAT_MAX_WIDTH[self.mode],)

    @property
    def width(self) -> int:
        """The width of an expanded EV in bits."""
        return sum(self.widths)


SRV6_FORMAT = EvFormatProfile(EvFormat.SRV6)
SRV6_SRH_FORMAT = EvFormatProfile(EvFormat.SRV6, srh=True)
STEV_FORMAT = EvFormatProfile(EvFormat.STEV)
UDP_FORMAT = EvFormatProfile(EvFormat.UDP)


@dataclass(frozen=True)
class EvField:
    """One field of a generated EV profile (``mrc_ctl_ev_field``): its width, the value its
    bits start from, where generated bits go (``mask``, default every bit) and the range of the
    generated values (``max_val`` default: every value the mask allows)."""

    width: int
    init_val: int = 0
    min_val: int = 0
    max_val: int | None = None
    mask: int | None = None

    @property
    def gen_bits(self) -> int:
        """Bits generated for this field (the mask's set bits)."""
        return bin(self.effective_mask).count("1")

    @property
    def effective_mask(self) -> int:
        """The mask (every bit of the field when none was given)."""
        return (1 << self.width) - 1 if self.mask is None else self.mask

    @property
    def top(self) -> int:
        """The largest generated value."""
        if self.max_val is not None:
            return self.max_val
        return (1 << self.gen_bits) - 1 if self.gen_bits else 0

    def check(self, index: int, format_width: int) -> None:
        """Refuse a field the OCP API would refuse (naming it and the rule)."""
        name = f"EV field {index}"
        if not 1 <= self.width <= format_width:
            raise EvProfileError(
                f"{name}: width {self.width}, expected 1..{format_width} (its format field)"
            )
        if not 0 <= self.init_val < 1 << self.width:
            raise EvProfileError(
                f"{name}: init_val {self.init_val:#x} wider than {self.width} bits"
            )
        if not 0 <= self.effective_mask < 1 << self.width:
            raise EvProfileError(
                f"{name}: mask {self.effective_mask:#x} has bits outside the field"
            )
        if self.top >= 1 << self.gen_bits:
            raise EvProfileError(
                f"{name}: max_val {self.top} wider than the {self.gen_bits} mask bits"
            )
        if not 0 <= self.min_val <= self.top:
            raise EvProfileError(f"{name}: min_val {self.min_val}, expected 0..max_val {self.top}")

    def expand(self, value: int) -> int:
        """The field value with ``value``'s bits, most significant first, put where the mask's
        bits are (the OCP API's expansion steps)."""
        out = self.init_val
        mask = self.effective_mask
        k = self.gen_bits
        for bit in range(self.width - 1, -1, -1):
            if mask >> bit & 1:
                k -= 1
                if value >> k & 1:
                    out |= 1 << bit
                else:
                    out &= ~(1 << bit)
        return out


def _checked_widths(fields: Sequence[EvField], fmt: EvFormatProfile) -> tuple[int, ...]:
    """The format field widths ``fields`` go into, after refusing fields the OCP API refuses
    (more fields than the format has, a field wider than its format field, bad values)."""
    widths = fmt.widths
    if len(fields) > len(widths):
        raise EvProfileError(
            f"{len(fields)} EV fields: the {fmt.mode.value} format profile has {len(widths)}"
        )
    for i, (field_, width) in enumerate(zip(fields, widths, strict=False)):
        field_.check(i, width)
    return widths


def _concat(fields: Sequence[EvField], widths: Sequence[int], values: Sequence[int]) -> int:
    """Each field's value expanded (:meth:`EvField.expand`) and placed in its format field,
    zero-filled when the format field is wider, the first field most significant; format
    fields with no profile field are zero."""
    ev = 0
    for i, (field_, value) in enumerate(zip(fields, values, strict=True)):
        ev |= field_.expand(value) << sum(widths[i + 1 :])
    return ev


def generate_evs(fields: Sequence[EvField], fmt: EvFormatProfile, count: int) -> list[int]:
    """The first ``count`` EVs a generated profile gives: every combination of the fields'
    values (the last field varying fastest), expanded and concatenated (:func:`_concat`)."""
    widths: tuple[int, ...] = (fmt.width,)
    if not fields:
        fields = (EvField(fmt.width, min_val=1),)
    else:
        widths = _checked_widths(fields, fmt)
    spans = [f.top - f.min_val + 1 for f in fields]
    total = 1
    for span in spans:
        total *= span
    if not 1 <= count <= total:
        raise EvProfileError(f"generated EV count {count}: the EV fields give 1..{total} EVs")
    out = []
    for n in range(count):
        values = [0] * len(fields)
        rest = n
        for i in range(len(fields) - 1, -1, -1):
            rest, digit = divmod(rest, spans[i])
            values[i] = fields[i].min_val + digit
        out.append(_concat(fields, widths, values))
    return out


def expand_ev(fields: Sequence[EvField], fmt: EvFormatProfile, ev: int) -> int:
    """An explicit EV as the wire carries it, expanded through its profile's ``fields`` as
    ``mrc_ctl.h`` defines: each field starts from its ``init_val`` and the bits set in its mask
    take the EV's next most significant bits (the EV is as wide as all the masks' bits
    together: the first field takes the top ones); the fields are then concatenated
    (:func:`_concat`). A fixed field (mask 0) takes none. No fields: the EV as it is (the
    identity expansion)."""
    if not fields:
        return ev
    widths = _checked_widths(fields, fmt)
    bits = sum(f.gen_bits for f in fields)
    if not 0 <= ev < 1 << bits:
        raise EvProfileError(
            f"EV {ev:#x}: wider than the {bits} bits its profile's field masks take"
        )
    values = []
    for field_ in fields:
        bits -= field_.gen_bits
        values.append(ev >> bits & ((1 << field_.gen_bits) - 1))
    return _concat(fields, widths, values)


@dataclass(frozen=True)
class GeneratedEvProfile:
    """``count`` EVs (None: the context's ``ev_count``). SRV6 (the default format): spread
    evenly over the paths; STEV / UDP: generated from ``fields`` and spread over the planes."""

    count: int | None = None
    fields: tuple[EvField, ...] = ()
    fmt: EvFormatProfile = SRV6_FORMAT
    min_active: int | None = None  #: ev_min_active (None: the context's)


@dataclass(frozen=True)
class ExplicitEvProfile:
    """Exactly these EVs: ``(ev, path_index)`` pairs (SRV6) or ``(ev, plane)`` pairs (STEV,
    UDP), EVs unique values of the format's width once expanded. With ``carriers`` (SRV6 only)
    the pairs are ``(carrier, plane)``: each EV expands to the uSID carrier of one of the QP's
    paths on that plane (with an SRH ``srh_carrier << 128 | srh_segment``, :func:`srv6_ev`),
    and its slot is that path's.

    With ``fields`` each EV is expanded through them (:func:`expand_ev`) into what the wire
    carries, as generated EVs are; the profile's EVs (its slots' ``ev``, its operations and
    events) stay as given. No fields: the EVs are already expanded (the identity)."""

    evs: tuple[tuple[int, int], ...]
    fmt: EvFormatProfile = SRV6_FORMAT
    min_active: int | None = None  #: ev_min_active (None: the context's)
    carriers: bool = False  #: SRV6: the EVs are the paths' carriers, not numbers bound to paths
    fields: tuple[EvField, ...] = ()  #: the profile's mrc_ctl_ev_fields (none: the identity)

    def expanded(self, ev: int) -> int:
        """``ev`` as the wire carries it (:func:`expand_ev` through :attr:`fields`)."""
        return expand_ev(self.fields, self.fmt, ev)


@dataclass(frozen=True)
class Srv6EvProfile:
    """One EV per path, whose value is the path's uSID carrier (``srh``: its split carrier
    and SRH segment, one 256-bit value)."""

    min_active: int | None = None  #: ev_min_active (None: the context's)
    srh: bool = False  #: send with an SRH (the SRV6+SRH format)

    @property
    def fmt(self) -> EvFormatProfile:
        """The SRV6 format, with an SRH when ``srh``."""
        return SRV6_SRH_FORMAT if self.srh else SRV6_FORMAT


EvProfile = GeneratedEvProfile | ExplicitEvProfile | Srv6EvProfile


def srv6_ev(path: Path, srh: bool = False) -> tuple[int, bytes]:
    """The SRV6 EV that is ``path``: its uSID carrier, with an SRH the 256-bit value
    ``srh_carrier << 128 | srh_segment``; and the same as bytes (16, or 32 with an SRH)."""
    packed = path.srh_carrier.packed + path.srh_segment.packed if srh else path.carrier.packed
    return int.from_bytes(packed, "big"), packed


def carrier_path(paths: Sequence[Path], ev: int, plane: int, srh: bool = False) -> int | None:
    """The index in ``paths`` of the path on ``plane`` whose SRV6 EV (:func:`srv6_ev`) is
    ``ev``, or None when no path is."""
    for index, path in enumerate(paths):
        if path.plane == plane and srv6_ev(path, srh)[0] == ev:
            return index
    return None


class PathLoad:
    """Congestion seen on one path, shared by all its EVs (congestion-steered spraying).

    ``weight`` is the path's share of the spraying cycle relative to an unloaded path (1.0):
    a pick of one of its EVs is taken when the path's ``credit`` (increased by ``weight`` at each
    pick) reaches one, else the pick moves on to the next EV of the cycle.
    """

    __slots__ = ("marked_until", "weight", "credit", "hold_until", "srtt", "rttvar", "evs", "rr",
                 "sent", "acked")  # fmt: skip

    def __init__(self) -> None:
        self.marked_until = 0.0  #: "halve" steering: an ACK echoed a CE mark; lighten until then
        self.weight = 1.0  #: "weights" steering: relative share, in [path_weight_min, 1]
        self.credit = 0.0  #: accumulated share of skipped picks
        self.hold_until = 0.0  #: no further decrease before this time (one per RTT)
        self.srtt = 0.0  #: smoothed RTT of the ACKs echoing this path's EVs (0: no sample yet)
        self.rttvar = 0.0  #: its mean deviation (RFC 6298)
        self.evs: list[EvSlot] = []  #: the path's EVs
        self.rr = 0  #: position in ``evs`` (recycled spraying takes them in turn)
        #: packets sent on this path so far: the next one's place in the path's own send order
        self.sent = 0
        #: the path's send order of the latest packet acknowledged on it (-1: none yet)
        self.acked = -1

    def next_ev(self) -> EvSlot | None:
        """The path's next GOOD EV in turn (None when none is GOOD)."""
        evs = self.evs
        n = len(evs)
        for _ in range(n):
            self.rr += 1
            slot = evs[self.rr % n]
            if slot.state is EvState.GOOD:
                return slot
        return None

    def sample(self, rtt: float) -> None:
        """Fold an RTT sample of this path into ``srtt`` and ``rttvar``."""
        if not self.srtt:
            self.srtt = rtt
            self.rttvar = rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt


class PlaneRtt:
    """The smoothed RTT of one plane's hashed (STEV / UDP) EVs, which their loads share."""

    __slots__ = ("srtt", "rttvar")

    def __init__(self) -> None:
        self.srtt = 0.0
        self.rttvar = 0.0


class HashedLoad(PathLoad):
    """The load of one STEV / UDP EV: congestion, weights and the evidence of later packets
    acknowledged are the EV's own (the host cannot tell which EVs share a path), its RTT
    estimate is its plane's. An EV alone sees an RTT sample once in every few hundred packets
    (an ACK echoes one EV of the four packets it covers), too seldom to follow queues that grow;
    the plane's estimate follows them."""

    __slots__ = ("plane_rtt",)

    def __init__(self, plane_rtt: PlaneRtt) -> None:
        self.plane_rtt = plane_rtt
        super().__init__()

    @property
    def srtt(self) -> float:
        return self.plane_rtt.srtt

    @srtt.setter
    def srtt(self, value: float) -> None:
        if value:
            self.plane_rtt.srtt = value

    @property
    def rttvar(self) -> float:
        return self.plane_rtt.rttvar

    @rttvar.setter
    def rttvar(self, value: float) -> None:
        if value:
            self.plane_rtt.rttvar = value


class EvSlot:
    """One EV of a QP and what the sender needs to use it."""

    __slots__ = ("index", "ev", "wire", "path_index", "path", "state", "since", "prefix",
                 "head", "mid", "plane", "spine_hint", "load", "dst", "group", "label",
                 "mode", "srh", "ext_len")  # fmt: skip

    def __init__(
        self, index: int, ev: int, wire: int, path_index: int, path: Path, load: PathLoad,
        mode: EvFormat = EvFormat.SRV6, srh: bool = False,
    ) -> None:  # fmt: skip
        self.index = index
        self.mode = mode
        routed = mode is EvFormat.SRV6
        #: the packets' IPv6 destination: the path's carrier (SRV6), its first carrier (SRV6 with
        #: an SRH) or the NIC's plain address
        self.dst = (path.srh_carrier if srh else path.carrier) if routed else path.dst_nic.address
        #: the single segment of the SRH the packets carry (SRV6 with an SRH), else None
        self.srh = path.srh_segment if routed and srh else None
        #: bytes of IPv6 extension headers between IPv6 and UDP (the SRH: 24), filled by the QP
        self.ext_len = 0
        #: what a loss retires with ``retire_path``: the path (SRV6), else the EV alone (the host
        #: knows nothing of the paths ECMP gives its EVs)
        self.group = path_index if routed else -1 - index
        #: the path's label (SRV6), or the plane's followed by ``ecmp``
        self.label = path.label if routed else f"p{path.plane}-ecmp"
        self.ev = ev  #: the EV value (up to 128 bits for the SRv6 profile, 256 with an SRH)
        self.wire = wire  #: the 32-bit form carried in packets
        self.path_index = path_index
        self.path = path
        self.state = EvState.GOOD
        self.since = 0.0
        self.prefix = b""  #: the data frame prefix (filled by the QP)
        self.head = b""  #: the prefix up to the IPv6 payload length
        self.mid = b""  #: the prefix after the IPv6 payload length
        self.plane = path.plane
        self.spine_hint = 0xFF if path.spine is None or not routed else path.spine
        self.load = load


@dataclass(frozen=True)
class EvInfo:
    """What the host controller sees of one EV."""

    ev: int
    wire: int
    path: str
    plane: int
    state: EvState
    since: float


def _generated(paths: Sequence[Path], count: int, rng: random.Random) -> list[tuple[int, int, int]]:
    """(ev, wire, path index) of ``count`` generated SRV6 EVs: given to the planes in turn
    (split evenly across planes), and each plane's EVs spread evenly over its paths -- every
    path once before any twice, and with fewer EVs than paths, evenly spaced over the spines
    (k EVs over S spines: one every S / k). Where the EVs do not divide evenly (planes or
    spines), which ones get the extra EV, or which spines an evenly spaced set starts from, is
    drawn from ``rng`` per QP, so that the QPs of a fabric together load every path alike."""
    by_plane: dict[int, list[int]] = {}
    for index, path in enumerate(paths):
        by_plane.setdefault(path.plane, []).append(index)
    planes = sorted(by_plane)
    if count % len(planes):
        shift = rng.randrange(len(planes))
        planes = planes[shift:] + planes[:shift]
    per_plane = {p: count // len(planes) + (i < count % len(planes)) for i, p in enumerate(planes)}
    offset = {}
    for p in planes:
        spines = len(by_plane[p])
        offset[p] = rng.randrange(spines) if per_plane[p] % spines else 0
    out = []
    for n in range(count):
        plane = planes[n % len(planes)]
        j = n // len(planes)
        members = by_plane[plane]
        spines, k = len(members), per_plane[plane]
        place = j if k >= spines else j * spines // k
        index = members[(offset[plane] + place) % spines]
        path = paths[index]
        spine = 0 if path.spine is None else path.spine + 1
        ev = (path.plane << 28) | (spine << 20) | (n + 1)
        out.append((ev, ev, index))
    return out


def _plane_paths(paths: Sequence[Path]) -> dict[int, int]:
    """The first path of each plane (index into ``paths``): an ECMP EV's source and
    destination NICs, which every path of the plane shares."""
    out: dict[int, int] = {}
    for index, path in enumerate(paths):
        out.setdefault(path.plane, index)
    return out


def _hashed_triples(paths: Sequence[Path], profile: EvProfile, default_count: int
                    ) -> list[tuple[int, int, int]]:  # fmt: skip
    """(ev, wire, path index) of an STEV or UDP profile: EVs bound to planes, not paths."""
    fmt = profile.fmt
    planes = _plane_paths(paths)
    order = sorted(planes)
    top = 1 << fmt.width
    if isinstance(profile, GeneratedEvProfile):
        count = default_count if profile.count is None else profile.count
        values = generate_evs(profile.fields, fmt, count)
        return [(ev, ev, planes[order[n % len(order)]]) for n, ev in enumerate(values)]
    if isinstance(profile, ExplicitEvProfile):
        if not profile.evs:
            raise EvProfileError("explicit EV profile with no EVs: expected (ev, plane) pairs")
        out = []
        for ev, plane in profile.evs:
            wire = profile.expanded(ev)
            if not 0 <= wire < top:
                raise EvProfileError(
                    f"EV {ev:#x}: expected a {fmt.width}-bit value ({fmt.mode.value} format)"
                )
            if plane not in planes:
                raise EvProfileError(f"EV {ev:#x} on plane {plane}: expected one of {order}")
            out.append((ev, wire, planes[plane]))
        return out
    raise EvProfileError(f"EV profile {profile!r}: the {fmt.mode.value} format needs a "
                         "generated or explicit profile")  # fmt: skip


def _carrier_triples(paths: Sequence[Path], profile: ExplicitEvProfile
                     ) -> list[tuple[int, int, int]]:  # fmt: skip
    """(ev, wire, path index) of an explicit SRV6 profile whose EVs are carriers: each found
    among ``paths`` (the wire form is the CRC-32 of the carrier's bytes, as for
    :class:`Srv6EvProfile`)."""
    if not profile.evs:
        raise EvProfileError("explicit EV profile with no EVs: expected (carrier, plane) pairs")
    srh = profile.fmt.srh
    width = SRV6_SRH_MAX_WIDTH if srh else FORMAT_MAX_WIDTH[EvFormat.SRV6]
    out = []
    for i, (ev, plane) in enumerate(profile.evs):
        carrier = profile.expanded(ev)
        if not 0 <= carrier < 1 << width:
            raise EvProfileError(f"EV {i}: expected a {width}-bit value ({profile.fmt.name})")
        index = carrier_path(paths, carrier, plane, srh)
        if index is None:
            dst = paths[0].dst
            raise EvProfileError(
                f"EV {i} ({_srv6_text(carrier, srh)}) on plane {plane}: no path to {dst} has it "
                f"as its {'carrier and SRH segment' if srh else 'carrier'}"
            )
        out.append((ev, zlib.crc32(srv6_ev(paths[index], srh)[1]), index))
    return out


def _srv6_text(ev: int, srh: bool) -> str:
    """An SRV6 EV for messages: the carrier, and with an SRH the segment after it."""
    if not srh:
        return str(ipaddress.IPv6Address(ev & ((1 << 128) - 1)))
    first = ipaddress.IPv6Address(ev >> 128 & ((1 << 128) - 1))
    return f"{first} + SRH {ipaddress.IPv6Address(ev & ((1 << 128) - 1))}"


def build_slots(
    paths: Sequence[Path], profile: EvProfile, default_count: int, rng: random.Random
) -> list[EvSlot]:
    """The EV slots of a profile applied to ``paths`` (ordered: planes interleaved); ``rng``
    draws what a generated profile's uneven split leaves open (:func:`_generated`)."""
    if not paths:
        raise EvProfileError("no paths given: a QP needs at least one path to its peer")
    mode = profile.fmt.mode
    triples: list[tuple[int, int, int]]
    if isinstance(profile, ExplicitEvProfile) and profile.carriers and mode is not EvFormat.SRV6:
        raise EvProfileError(
            f"explicit EVs as carriers in the {mode.value} format: only SRV6 EVs are carriers"
        )
    if mode is not EvFormat.SRV6:
        triples = _hashed_triples(paths, profile, default_count)
    elif isinstance(profile, GeneratedEvProfile):
        if profile.fields:
            raise EvProfileError(
                "generated SRV6 EVs with fields: this stack generates SRV6 EVs from the paths "
                "(give no fields, or use the STEV / UDP format)"
            )
        count = default_count if profile.count is None else profile.count
        if not 1 <= count < 1 << 20:
            raise EvProfileError(f"generated EV count {count}: expected 1..1048575")
        triples = _generated(paths, count, rng)
    elif isinstance(profile, ExplicitEvProfile) and profile.carriers:
        triples = _carrier_triples(paths, profile)
    elif isinstance(profile, ExplicitEvProfile):
        if not profile.evs:
            raise EvProfileError("explicit EV profile with no EVs: expected (ev, path_index) pairs")
        triples = []
        for ev, index in profile.evs:
            wire = profile.expanded(ev)
            if not 0 <= wire < 1 << 32:
                raise EvProfileError(f"EV {ev:#x}: expected a 32-bit value")
            if not 0 <= index < len(paths):
                raise EvProfileError(f"EV {ev:#x} on path {index}: expected 0..{len(paths) - 1}")
            triples.append((ev, wire, index))
    elif isinstance(profile, Srv6EvProfile):
        triples = []
        for index, path in enumerate(paths):
            ev, packed = srv6_ev(path, profile.srh)
            triples.append((ev, zlib.crc32(packed), index))
    else:
        raise EvProfileError(f"EV profile {profile!r}: expected Generated, Explicit or Srv6")
    wires = [w for _, w, _ in triples]
    if len(set(wires)) != len(wires):
        raise EvProfileError("EV profile gives two EVs the same 32-bit value: expected unique EVs")
    if mode is EvFormat.SRV6:
        loads = [PathLoad() for _ in paths]
        srh = profile.fmt.srh
        slots = [
            EvSlot(i, ev, w, idx, paths[idx], loads[idx], mode, srh)
            for i, (ev, w, idx) in enumerate(triples)
        ]
    else:
        # congestion and losses are per EV: the host cannot tell which EVs share a path; the
        # RTT estimate is the plane's (HashedLoad)
        plane_rtt: dict[int, PlaneRtt] = {}
        slots = [
            EvSlot(i, ev, w, idx, paths[idx],
                   HashedLoad(plane_rtt.setdefault(paths[idx].plane, PlaneRtt())), mode)
            for i, (ev, w, idx) in enumerate(triples)
        ]  # fmt: skip
    for slot in slots:
        slot.load.evs.append(slot)
    return slots


class ProfileStates:
    """The EV states of one EV profile, shared by every QP that uses it.

    An EV is known by its 32-bit wire value. Changing a state here changes it in the EV table
    of every QP attached (their spraying cycles are rebuilt), so a QP never sends on an EV
    another QP found bad.
    """

    def __init__(self, profile_id: int, profile: EvProfile, min_active: int | None) -> None:
        self.profile_id = profile_id
        self.profile = profile
        #: GOOD EVs never retired below; None given: a quarter of the profile's EVs, as the
        #: OCP MRC API's examples set ev_min_active (known once a QP attaches)
        self.min_active = 0 if min_active is None else min_active
        self._quarter = min_active is None
        self.tables: list[EvTable] = []
        self.states: dict[int, tuple[EvState, float]] = {}  #: wire -> (state, since)

    @property
    def mode(self) -> EvFormat:
        """The profile's EV format."""
        return self.profile.fmt.mode

    def attach(self, table: EvTable) -> None:
        """Share this profile's states with ``table`` (which takes the states known so far)."""
        if self._quarter and not self.tables:
            self.min_active = len(table.slots) // 4
        self.tables.append(table)
        table.profile = self
        for slot in table.slots:
            known = self.states.get(slot.wire)
            if known is not None:
                slot.state, slot.since = known
        table.refresh()

    def detach(self, table: EvTable) -> None:
        """``table``'s QP is gone."""
        if table in self.tables:
            self.tables.remove(table)

    def state(self, wire: int) -> EvState:
        """The state of the EV whose wire value is ``wire`` (GOOD if never changed)."""
        known = self.states.get(wire)
        return EvState.GOOD if known is None else known[0]

    def set_state(self, wire: int, new: EvState, now: float) -> EvState | None:
        """Change an EV's state in every attached table; returns the old state (None when
        unchanged)."""
        old = self.state(wire)
        if old is new:
            return None
        self.states[wire] = (new, now)
        for table in self.tables:
            slot = table.by_wire.get(wire)
            if slot is not None and slot.state is not new:
                slot.state = new
                slot.since = now
                table.refresh()
        return old

    def counts(self) -> dict[str, int]:
        """EVs per state over the union of the attached tables' EVs."""
        seen: dict[int, EvState] = {}
        for table in self.tables:
            for slot in table.slots:
                seen[slot.wire] = slot.state
        out = {state.value: 0 for state in EvState}
        for state in seen.values():
            out[state.value] += 1
        return out


class EvTable:
    """The EVs of one QP: states and the spraying order."""

    def __init__(self, slots: list[EvSlot], rng: random.Random) -> None:
        self.slots = slots
        self.by_wire = {s.wire: s for s in slots}
        self._by_ev = {s.ev: s for s in slots}
        self._rng = rng
        self._good: list[EvSlot] = []
        self._good_loads: list[PathLoad] = []  #: paths with a GOOD EV
        #: the spraying cycle: the planes with a GOOD EV take turns, and each plane's GOOD EVs
        #: take turns within the plane (each plane keeps its own place, so a plane whose NIC
        #: is full when its turn comes skips the turn without skipping one of its EVs)
        self.cycles: list[list[EvSlot]] = []
        self.cursors: list[int] = []  #: each plane's place in its cycle
        self.turn = rng.randrange(1 << 30)  #: whose turn it is (random start)
        self._cursor_of: dict[int, int] = {}  #: plane -> place, kept while a plane has no GOOD EV
        self._fixed: EvSlot | None = None
        #: the per-path congestion state, one object per path (shared by the path's EVs)
        self.loads: list[PathLoad] = list({id(s.load): s.load for s in slots}.values())
        self.profile: ProfileStates | None = None  #: the profile whose states this table shares
        self.refresh()

    def refresh(self) -> None:
        """Rebuild the spraying cycle after states changed."""
        self._good = [s for s in self.slots if s.state is EvState.GOOD]
        self._good_loads = list({id(s.load): s.load for s in self._good}.values())
        planes: dict[int, list[EvSlot]] = {}
        for s in self._good:
            planes.setdefault(s.plane, []).append(s)
        # planes in turn, each plane's GOOD EVs in turn, so every plane (every NIC) carries
        # the same share however many of its EVs are GOOD
        for plane, cursor in zip((c[0].plane for c in self.cycles), self.cursors, strict=True):
            self._cursor_of[plane] = cursor
        for p in sorted(planes):
            if p not in self._cursor_of:
                self._cursor_of[p] = self._rng.randrange(1 << 30)  # a random start
        self.cycles = [planes[p] for p in sorted(planes)]
        self.cursors = [self._cursor_of[p] for p in sorted(planes)]

    def fastest_rtt(self) -> float:
        """The smallest smoothed RTT of the paths in use (0.0 when none has a sample)."""
        best = 0.0
        for load in self._good_loads:
            rtt = load.srtt
            if rtt and (not best or rtt < best):
                best = rtt
        return best

    def normalise_weights(self) -> None:
        """Scale the weights of the paths in use so that the largest is 1 (they are relative)."""
        top = max((load.weight for load in self._good_loads), default=1.0)
        if 0.0 < top < 1.0:
            for load in self.loads:
                load.weight = min(1.0, load.weight / top)

    def pin(self, slot: EvSlot) -> None:
        """Use only ``slot`` from now on, whatever its state (single-path and ECMP policies)."""
        self._fixed = slot

    @property
    def pinned(self) -> EvSlot | None:
        """The one EV used, when pinned."""
        return self._fixed

    def good_count(self) -> int:
        """Number of GOOD EVs."""
        return len(self._good)

    def next(self) -> EvSlot | None:
        """The EV for the next packet (None if none is GOOD): the next one of the cycle."""
        if self._fixed is not None:
            return self._fixed
        cycles = self.cycles
        if not cycles:
            return None
        self.turn = turn = self.turn + 1
        i = turn % len(cycles)
        cycle = cycles[i]
        self.cursors[i] = cursor = self.cursors[i] + 1
        return cycle[cursor % len(cycle)]

    def next_other(self, avoid: EvSlot) -> EvSlot | None:
        """Like :meth:`next` but not ``avoid`` when another GOOD EV exists (retransmissions)."""
        slot = self.next()
        if slot is avoid and self._fixed is None and len(self._good) > 1:
            slot = self.next()
        return slot

    def slot(self, ev: int) -> EvSlot:
        """The slot of EV value ``ev``."""
        try:
            return self._by_ev[ev]
        except KeyError:
            raise KeyError(f"EV {ev:#x} is not in this QP's EV set") from None

    def state(self, ev: int) -> EvState:
        """The state of EV ``ev``."""
        return self.slot(ev).state

    def set_state(self, slot: EvSlot, new: EvState, now: float) -> EvState | None:
        """Change a slot's state (in every table of its profile); returns the old state (None
        when unchanged)."""
        if self.profile is not None:
            return self.profile.set_state(slot.wire, new, now)
        old = slot.state
        if old is new:
            return None
        slot.state = new
        slot.since = now
        self.refresh()
        return old

    def evs(self) -> list[EvInfo]:
        """Every EV with its path and state."""
        return [EvInfo(s.ev, s.wire, s.label, s.plane, s.state, s.since) for s in self.slots]

    def counts(self) -> dict[str, int]:
        """Number of EVs in each state."""
        # list.count compares by identity first: no enum attribute lookup per EV (the
        # statistics read every QP's counts at every sample of a run)
        states = [s.state for s in self.slots]
        return {state.value: states.count(state) for state in EvState}
