"""EV format profiles and EV profiles of the OCP MRC controller API (``mrc_ctl.h``), per host.

CC profiles (``mrc_ctl_cc_profile_attr``) follow the same life cycle: an ONLINE one gives a QP
that names it at INIT its congestion control (for NSCC, the fields of ``mrc_ctl_cc_nscc_cfg``;
a field left 0 takes the fabric's default).

A controller configures them by id, through the life cycle ``mrc_ctl.h`` gives them (INIT ->
OFFLINE -> ONLINE -> OFFLINE -> INIT); when an EV profile goes ONLINE it becomes a profile of
the transport core (``Context.create_ev_profile``) whose EV states every QP using it shares,
and an application's QP names it at INIT (``MRC_QP_EV_PROFILE_ID``). Id 0 is the host's own
profile (the agent's generated EVs), which is always ONLINE and cannot be changed.

Numbers are ``mrc_ctl.h``'s (profile states, ``mrc_ctl_ev_fmt_mode`` and ``mrc_ctl_ev_mode``
bits, EV operations, EV state bits); EVs travel as hex strings of the bytes of ``mrc_ctl_ev_t``
(up to its 32; missing bytes are zero). Their layout follows the format: STEV and UDP EVs are a
32-bit value in network byte order in the first four bytes; an SRV6 EV is 16 bytes (a uSID
carrier, or a generated EV's number at the end); an SRV6+SRH EV is 32 bytes, the carrier then
the SRH's single segment. Replies give an EV in its format's bytes: 16 (STEV, UDP, SRV6) or 32
(SRV6+SRH).

An explicit (EXP) SRV6 or SRV6+SRH profile holds uSID carriers: going ONLINE, each must be a
path of the fabric model from this host to another host on its port (plane), all to the same
host (one set per destination), and a QP using the profile must be towards that host.
docs/ocp-api.md has the rules this module enforces.
"""

from __future__ import annotations

import errno
import ipaddress
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from host.transport.api import Context
from host.transport.cc import CcProfile
from host.transport.cc.base import CcProfileError
from host.transport.evs import (
    FORMAT_MAX_WIDTH,
    EvField,
    EvFormat,
    EvFormatProfile,
    EvProfile,
    EvProfileError,
    EvState,
    ExplicitEvProfile,
    GeneratedEvProfile,
    carrier_path,
    generate_evs,
)
from topologies import Path

PROFILE_INIT, PROFILE_OFFLINE, PROFILE_ONLINE = 0, 1, 2
STATE_NAMES = ("INIT", "OFFLINE", "ONLINE")
FMT_STEV, FMT_SRV6, FMT_UDP = 1 << 0, 1 << 1, 1 << 2
FORMATS = {FMT_STEV: EvFormat.STEV, FMT_SRV6: EvFormat.SRV6, FMT_UDP: EvFormat.UDP}
MODE_AUTO, MODE_EXP, MODE_GEN = 1 << 0, 1 << 1, 1 << 2
EV_OP_REPLACE, EV_OP_MODIFY_STATE, EV_OP_QUERY_STATE, EV_OP_QUERY_ARRAY = range(4)
FIELDS_MODIFY, FIELDS_QUERY = 0, 1
OP_F_ALL_COPIES = 1 << 0
STATE_BITS = {EvState.GOOD: 1 << 0, EvState.ASSUMED_BAD: 1 << 1, EvState.DENIED: 1 << 2,
              EvState.UNKNOWN: 1 << 31}  # fmt: skip
BIT_STATES = {bit: state for state, bit in STATE_BITS.items()}
EVENT_MASK_ALLOWED = STATE_BITS[EvState.GOOD] | STATE_BITS[EvState.ASSUMED_BAD]
# EV format profile attribute mask
FMT_M_STATE, FMT_M_CUR_STATE, FMT_M_MODE, FMT_M_OP = 1 << 0, 1 << 1, 1 << 2, 1 << 3
# EV profile attribute mask
EV_M_STATE, EV_M_CUR_STATE, EV_M_MODE, EV_M_FMT_ID, EV_M_COUNT = 1, 2, 4, 8, 16
EV_M_MIN_ACTIVE, EV_M_EVENT_MASK, EV_M_EV_OP, EV_M_FIELDS_OP = 32, 64, 128, 256
VENDOR_CFG = 1 << 31
MAX_PROFILES = 64
MAX_EVS = 4096
UNPOPULATED = ("0" * 32, 0)
EV_MAX_BYTES = 32  #: MRC_CTL_EV_MAX_BYTES: the bytes of an mrc_ctl_ev_t


class ProfileError(Exception):
    """A request the profile store refuses: ``errno`` and a message naming the input."""

    def __init__(self, code: int, message: str, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.extra = extra or {}


@dataclass
class FmtProfile:
    """An EV format profile."""

    state: int = PROFILE_INIT
    mode: int = 0
    fields: list[int] | None = None


@dataclass
class CtlEvProfile:
    """An EV profile as the controller configured it; ``core`` is the core's id when ONLINE."""

    state: int = PROFILE_INIT
    mode: int = 0
    fmt_id: int | None = None
    count: int = 0
    min_active: int = 1
    event_mask: int = 0
    fields: list[list[int]] | None = None  # [width, init_val, min_val, max_val, mask]
    entries: list[tuple[str, int]] = field(default_factory=list)  # explicit (EV hex, port)
    core: int | None = None
    dest: str | None = None  #: explicit SRV6, ONLINE: the host its carriers lead to


def _int(req: Mapping[str, Any], name: str, high: int = (1 << 64) - 1) -> int:
    value = req.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise ProfileError(
            errno.EINVAL, f"field '{name}': expected an integer in 0..{high}, got {value!r}"
        )
    return value


def _format(mode: int, widths: list[int] | tuple[int, ...]) -> EvFormatProfile:
    """The core format profile of an OCP one: SRV6 fields beyond 128 bits are SRV6 with an
    SRH (the carrier, then the SRH segment; up to 256 bits)."""
    fmt = FORMATS[mode]
    srh = fmt is EvFormat.SRV6 and sum(widths) > FORMAT_MAX_WIDTH[EvFormat.SRV6]
    return EvFormatProfile(fmt, tuple(widths), srh=srh)


def ev_bytes(fmt: EvFormatProfile) -> int:
    """The bytes of ``mrc_ctl_ev_t`` an EV of ``fmt`` fills: 32 for SRV6+SRH, else 16."""
    return EV_MAX_BYTES if fmt.srh else 16


def _raw(hex_value: str) -> bytes:
    """An EV's hex string as the 32 bytes of ``mrc_ctl_ev_t`` (zero-filled)."""
    try:
        raw = bytes.fromhex(hex_value)
    except ValueError:
        raw = b""
    else:
        if len(raw) <= EV_MAX_BYTES:
            return raw.ljust(EV_MAX_BYTES, b"\0")
    raise ProfileError(
        errno.EINVAL, f"EV {hex_value[:16]!r}: expected up to {EV_MAX_BYTES} bytes in hex"
    )


def _ev_hex(hex_value: str, fmt: EvFormatProfile) -> str:
    """An EV's hex string in the bytes its format fills (:func:`ev_bytes`)."""
    return _raw(hex_value)[: ev_bytes(fmt)].hex()


def ev_value(hex_value: str, fmt: EvFormatProfile) -> int:
    """The EV an ``mrc_ctl_ev_t`` holds: STEV / UDP the first four bytes, SRV6 the first 16,
    SRV6+SRH all 32 (the carrier, then the SRH segment)."""
    raw = _raw(hex_value)
    if fmt.mode is EvFormat.SRV6:
        return int.from_bytes(raw[: ev_bytes(fmt)], "big")
    return int.from_bytes(raw[:4], "big")


class _Profile(Protocol):
    state: int


P = TypeVar("P", bound=_Profile)


def _check_usable(kind: str, profiles: Mapping[int, _Profile], profile_id: int) -> None:
    """Refuse a QP's ``kind`` profile id unless it is 0 or an ONLINE profile."""
    if profile_id == 0:
        return
    profile = profiles.get(profile_id)
    if profile is None or profile.state != PROFILE_ONLINE:
        state = "does not exist" if profile is None else f"is {STATE_NAMES[profile.state]}"
        raise ProfileError(
            errno.EINVAL, f"{kind} profile {profile_id} {state}: a QP needs an ONLINE one (or 0)"
        )


def _existing_or_new(
    kind: str, profiles: Mapping[int, P], pid: int, modify: bool, new: Callable[[], P]
) -> P:
    """Profile ``pid``, or for a modification of a free id a new one (not stored yet)."""
    profile = profiles.get(pid)
    if profile is None:
        if not modify:
            raise ProfileError(errno.EINVAL, f"{kind} profile {pid} does not exist")
        if len(profiles) >= MAX_PROFILES:
            raise ProfileError(errno.EINVAL, f"at most {MAX_PROFILES} {kind} profiles")
        profile = new()
    return profile


class ProfileStore:
    """The EV format and EV profiles of one host."""

    def __init__(
        self, context: Context, now: Callable[[], float], default_count: int,
        peers: Callable[[], Mapping[str, Sequence[Path]]] | None = None,
    ) -> None:  # fmt: skip
        self.context = context
        self.now = now
        self.default_count = default_count
        #: the fabric model's paths from this host to each other host (explicit SRV6 EVs)
        self.peers = peers or dict
        self.fmts: dict[int, FmtProfile] = {}
        self.evs: dict[int, CtlEvProfile] = {}

    # -- what QPs use ------------------------------------------------------------------------

    def check_usable(self, profile_id: int) -> None:
        """Refuse a QP's EV profile id unless it is 0 or an ONLINE profile."""
        _check_usable("EV", self.evs, profile_id)

    def check_destination(self, profile_id: int, remote_host: str) -> None:
        """Refuse a QP towards ``remote_host`` on an explicit SRV6 profile whose carriers lead
        to another host."""
        profile = self.evs.get(profile_id)
        if profile is not None and profile.dest is not None and profile.dest != remote_host:
            raise ProfileError(
                errno.EINVAL,
                f"EV profile {profile_id}: its SRV6 EVs are paths to {profile.dest}, "
                f"not to {remote_host} (explicit SRV6 EVs are one set per destination)",
            )

    def core_profile(self, profile_id: int) -> int | None:
        """The core's id of a controller profile (None for profile 0, the QP's own)."""
        if profile_id == 0:
            return None
        return self.evs[profile_id].core

    def ctl_id(self, core_id: int) -> int:
        """The controller's id of a core profile (0: the host's own)."""
        for pid, profile in self.evs.items():
            if profile.core == core_id:
                return pid
        return 0

    def event_mask(self, core_id: int) -> int:
        """Which EV states profile ``core_id``'s events report."""
        for profile in self.evs.values():
            if profile.core == core_id:
                return profile.event_mask
        return EVENT_MASK_ALLOWED

    # -- EV format profiles --------------------------------------------------------------------

    def fmt_profile(self, request: Mapping[str, Any]) -> dict[str, Any]:
        pid = _int(request, "id")
        mask = _int(request, "mask", (1 << 32) - 1)
        modify = request.get("op") == "modify"
        if pid == 0:
            raise ProfileError(errno.EINVAL, "EV format profile 0 is reserved (the host's own)")
        profile = _existing_or_new("EV format", self.fmts, pid, modify, FmtProfile)
        if mask & VENDOR_CFG and request.get("vendor_cfg"):
            raise ProfileError(
                errno.EINVAL, "the testbed has no vendor-specific EV format configuration"
            )
        if modify:
            self._modify_fmt(pid, profile, request, mask)
            self.fmts[pid] = profile
            if profile.state == PROFILE_INIT and profile.mode == 0:
                self.fmts.pop(pid, None)
        out: dict[str, Any] = {"ok": True, "state": profile.state, "mode": profile.mode}
        if mask & FMT_M_OP and request.get("fields_op") == FIELDS_QUERY:
            fields = profile.fields or []
            out["fields"] = fields
        return out

    def _modify_fmt(
        self, pid: int, profile: FmtProfile, request: Mapping[str, Any], mask: int
    ) -> None:
        state = profile.state
        if mask & FMT_M_CUR_STATE and _int(request, "cur_state", 2) != state:
            raise ProfileError(
                errno.EINVAL,
                f"EV format profile {pid} is {STATE_NAMES[state]}, not {STATE_NAMES[request['cur_state']]}",
            )
        fields_op = request.get("fields_op") if mask & FMT_M_OP else None
        if state == PROFILE_ONLINE and (mask & FMT_M_MODE or fields_op == FIELDS_MODIFY):
            raise ProfileError(
                errno.EINVAL, f"EV format profile {pid} is ONLINE: set it OFFLINE to change it"
            )
        if mask & FMT_M_MODE:
            mode = _int(request, "mode", (1 << 32) - 1)
            if mode not in FORMATS:
                raise ProfileError(
                    errno.EINVAL,
                    f"EV format mode {mode:#x}: expected one of STEV, SRV6, UDP (one bit)",
                )
            profile.mode = mode
        if fields_op == FIELDS_MODIFY:
            widths = request.get("fields")
            if not isinstance(widths, list) or not all(
                isinstance(w, int) and w > 0 for w in widths
            ):
                raise ProfileError(errno.EINVAL, "format fields: expected widths >= 1")
            if not profile.mode:
                raise ProfileError(errno.EINVAL, "format fields before a MODE: set the mode first")
            try:
                _format(profile.mode, widths)
            except EvProfileError as exc:
                raise ProfileError(errno.E2BIG, str(exc)) from None
            profile.fields = list(widths)
        if mask & FMT_M_STATE:
            new = _int(request, "state", 2)
            if new == state:
                return
            if new == PROFILE_OFFLINE and state == PROFILE_INIT and not profile.mode:
                raise ProfileError(
                    errno.EINVAL, f"EV format profile {pid}: INIT -> OFFLINE needs its MODE"
                )
            if new == PROFILE_ONLINE and (state != PROFILE_OFFLINE or profile.fields is None):
                raise ProfileError(
                    errno.EINVAL,
                    f"EV format profile {pid}: ONLINE from OFFLINE with its fields set "
                    "(MODIFY_FIELDS)",
                )
            if state == PROFILE_ONLINE and new == PROFILE_OFFLINE:
                users = [
                    i for i, p in self.evs.items() if p.fmt_id == pid and p.state == PROFILE_ONLINE
                ]
                if users:
                    raise ProfileError(
                        errno.EBUSY,
                        f"EV format profile {pid}: EV profile(s) {users} are ONLINE with it",
                    )
            if new == PROFILE_INIT:
                if state != PROFILE_OFFLINE:
                    raise ProfileError(
                        errno.EINVAL, f"EV format profile {pid}: INIT only from OFFLINE"
                    )
                profile.mode, profile.fields = 0, None
            if state == PROFILE_INIT and new == PROFILE_ONLINE:
                raise ProfileError(
                    errno.EINVAL, f"EV format profile {pid}: INIT -> OFFLINE -> ONLINE"
                )
            profile.state = new

    # -- EV profiles -----------------------------------------------------------------------------

    def ev_profile(self, request: Mapping[str, Any]) -> dict[str, Any]:
        pid = _int(request, "id")
        mask = _int(request, "mask", (1 << 32) - 1)
        modify = request.get("op") == "modify"
        if mask & EV_M_EV_OP and mask & EV_M_FIELDS_OP:
            raise ProfileError(errno.EINVAL, "EV_OP and EV_FIELDS_OP are mutually exclusive")
        if mask & VENDOR_CFG and request.get("vendor_cfg"):
            raise ProfileError(
                errno.EINVAL, "the testbed has no vendor-specific EV profile configuration"
            )
        if pid == 0:
            if modify:
                raise ProfileError(errno.EBUSY, "EV profile 0 is the host's own and in use")
            return self._query_own(mask)
        profile = _existing_or_new("EV", self.evs, pid, modify, CtlEvProfile)
        out: dict[str, Any] = {"ok": True}
        if modify:
            out.update(self._modify_ev(pid, profile, request, mask))
            self.evs[pid] = profile
            if profile.state == PROFILE_INIT and not profile.mode:
                self.evs.pop(pid, None)
        else:
            out.update(self._query_ops(pid, profile, request, mask))
        out.update({
            "state": profile.state, "mode": profile.mode, "fmt_id": profile.fmt_id or 0,
            "count": profile.count, "min_active": profile.min_active,
            "event_mask": profile.event_mask,
        })  # fmt: skip
        return out

    def _query_own(self, mask: int) -> dict[str, Any]:
        if mask & (EV_M_EV_OP | EV_M_FIELDS_OP):
            raise ProfileError(
                errno.EINVAL,
                "EV profile 0 (the host's own) answers STATE, MODE, COUNT, MIN_ACTIVE and EVENT_MASK only",
            )
        return {"ok": True, "state": PROFILE_ONLINE, "mode": MODE_GEN, "fmt_id": 0,
                "count": self.default_count, "min_active": self.context.config.ev_min_active,
                "event_mask": EVENT_MASK_ALLOWED}  # fmt: skip

    def _fmt_of(self, profile: CtlEvProfile) -> EvFormatProfile:
        fmt = self.fmts.get(profile.fmt_id or -1)
        if fmt is None or fmt.state != PROFILE_ONLINE:
            raise ProfileError(errno.EINVAL, f"EV format profile {profile.fmt_id} is not ONLINE")
        return _format(fmt.mode, fmt.fields or ())

    def _users(self, profile: CtlEvProfile) -> int:
        if profile.core is None:
            return 0
        try:
            return len(self.context.ev_profile(profile.core).tables)
        except KeyError:
            return 0

    def _modify_ev(
        self, pid: int, profile: CtlEvProfile, request: Mapping[str, Any], mask: int
    ) -> dict[str, Any]:
        state = profile.state
        if mask & EV_M_CUR_STATE and _int(request, "cur_state", 2) != state:
            raise ProfileError(errno.EINVAL, f"EV profile {pid} is {STATE_NAMES[state]}")
        online = state == PROFILE_ONLINE
        if online and mask & (
            EV_M_MODE
            | EV_M_FMT_ID
            | EV_M_COUNT
            | EV_M_MIN_ACTIVE
            | EV_M_EVENT_MASK
            | EV_M_FIELDS_OP
        ):
            raise ProfileError(
                errno.EINVAL, f"EV profile {pid} is ONLINE: set it OFFLINE to change it"
            )
        if mask & EV_M_MODE:
            mode = _int(request, "mode", (1 << 32) - 1)
            if mode not in (MODE_AUTO, MODE_EXP, MODE_GEN):
                raise ProfileError(
                    errno.EINVAL, f"EV mode {mode:#x}: expected AUTO, EXP or GEN (one bit)"
                )
            profile.mode = mode
        if mask & EV_M_FMT_ID:
            fmt_id = _int(request, "fmt_id")
            if fmt_id not in self.fmts:
                raise ProfileError(errno.EINVAL, f"EV format profile {fmt_id} does not exist")
            profile.fmt_id = fmt_id
        if mask & EV_M_COUNT:
            count = _int(request, "count", MAX_EVS)
            if count < 1:
                raise ProfileError(errno.EINVAL, "EV count: expected at least 1")
            profile.count = count
            if profile.mode == MODE_EXP:
                profile.entries = [UNPOPULATED] * count
        if mask & EV_M_MIN_ACTIVE:
            profile.min_active = _int(request, "min_active", MAX_EVS)
        if mask & EV_M_EVENT_MASK:
            event_mask = _int(request, "event_mask", (1 << 32) - 1)
            if event_mask & ~EVENT_MASK_ALLOWED:
                raise ProfileError(
                    errno.EINVAL, "EV event mask: only GOOD and ASSUMED_BAD can be monitored"
                )
            profile.event_mask = event_mask
        if mask & EV_M_FIELDS_OP:
            op = request.get("fields_op")
            if op == FIELDS_MODIFY:
                fields = request.get("fields")
                if not isinstance(fields, list) or not all(
                    isinstance(f, list)
                    and len(f) == 5
                    and all(isinstance(v, int) and v >= 0 for v in f)
                    for f in fields
                ):
                    raise ProfileError(
                        errno.EINVAL,
                        "EV fields: expected [width, init_val, min_val, max_val, mask] lists",
                    )
                profile.fields = [list(f) for f in fields]
        out: dict[str, Any] = {}
        if mask & EV_M_EV_OP:
            out = self._ev_op(pid, profile, request, modify=True)
        if mask & EV_M_STATE:
            self._transition(pid, profile, _int(request, "state", 2))
        elif mask & EV_M_FIELDS_OP and request.get("fields_op") == FIELDS_QUERY:
            out["fields"] = profile.fields or []
        return out

    def _transition(self, pid: int, profile: CtlEvProfile, new: int) -> None:
        state = profile.state
        if new == state:
            return
        if new == PROFILE_OFFLINE and state == PROFILE_INIT:
            if not profile.mode or profile.fmt_id is None or not profile.count:
                raise ProfileError(
                    errno.EINVAL, f"EV profile {pid}: INIT -> OFFLINE needs MODE, FMT_ID and COUNT"
                )
            if profile.mode == MODE_EXP and len(profile.entries) != profile.count:
                profile.entries = [UNPOPULATED] * profile.count
        elif new == PROFILE_ONLINE and state == PROFILE_OFFLINE:
            if profile.min_active > profile.count:
                raise ProfileError(
                    errno.EINVAL,
                    f"EV profile {pid}: ev_min_active {profile.min_active} exceeds ev_count {profile.count}",
                )
            core = self._core_profile(pid, profile)
            try:
                profile.core = self.context.create_ev_profile(core)
            except (EvProfileError, ValueError) as exc:
                raise ProfileError(errno.EINVAL, f"EV profile {pid}: {exc}") from None
        elif new == PROFILE_OFFLINE and state == PROFILE_ONLINE:
            users = self._users(profile)
            if users:
                raise ProfileError(errno.EBUSY, f"EV profile {pid}: {users} QP(s) use it")
            if profile.core is not None:
                self.context.destroy_ev_profile(profile.core)
                profile.core = None
            profile.dest = None
        elif new == PROFILE_INIT and state == PROFILE_OFFLINE:
            profile.mode, profile.fmt_id, profile.count, profile.fields = 0, None, 0, None
            profile.entries = []
        else:
            raise ProfileError(
                errno.EINVAL,
                f"EV profile {pid}: {STATE_NAMES[state]} -> {STATE_NAMES[new]} (INIT -> OFFLINE -> ONLINE -> OFFLINE -> INIT)",
            )
        profile.state = new

    def _core_profile(self, pid: int, profile: CtlEvProfile) -> EvProfile:
        fmt = self._fmt_of(profile)
        fields = tuple(EvField(w, init_val=i, min_val=lo, max_val=hi, mask=m)
                       for w, i, lo, hi, m in (profile.fields or []))  # fmt: skip
        if profile.mode == MODE_AUTO:
            return GeneratedEvProfile(
                count=profile.count,
                fmt=EvFormatProfile(fmt.mode, srh=fmt.srh),
                min_active=profile.min_active,
            )
        if profile.mode == MODE_GEN:
            if fmt.mode is EvFormat.SRV6 and fields:
                raise ProfileError(
                    errno.EINVAL,
                    f"EV profile {pid}: generated SRV6 EVs come from the paths; give no fields",
                )
            return GeneratedEvProfile(
                count=profile.count, fields=fields, fmt=fmt, min_active=profile.min_active
            )
        if any(_raw(h) == bytes(EV_MAX_BYTES) and port == 0 for h, port in profile.entries):
            raise ProfileError(
                errno.EINVAL,
                f"EV profile {pid}: replace every unpopulated EV (REPLACE_EV) before ONLINE",
            )
        evs = tuple((ev_value(hex_value, fmt), port - 1) for hex_value, port in profile.entries)
        if fmt.mode is EvFormat.SRV6:
            profile.dest = self._carrier_dest(pid, evs, fmt)
            return ExplicitEvProfile(evs=evs, fmt=fmt, min_active=profile.min_active, carriers=True)
        return ExplicitEvProfile(evs=evs, fmt=fmt, min_active=profile.min_active)

    def _carrier_dest(self, pid: int, evs: Sequence[tuple[int, int]], fmt: EvFormatProfile) -> str:
        """The host the explicit SRV6 EVs ``evs`` ((carrier, plane) pairs) lead to: each must
        be a path of the fabric model from this host on its plane, all to one host."""
        peers = self.peers()
        dest: str | None = None
        for i, (ev, plane) in enumerate(evs):
            found = next(
                (host for host, paths in peers.items()
                 if carrier_path(paths, ev, plane, fmt.srh) is not None),
                None,
            )  # fmt: skip
            if found is None:
                raise ProfileError(
                    errno.EINVAL,
                    f"EV profile {pid}: EV {i} ({_srv6_text(ev, fmt.srh)}) on port {plane + 1}: "
                    f"no path from this host on that port has it as its "
                    f"{'carrier and SRH segment' if fmt.srh else 'uSID carrier'}",
                    {"index": i},
                )
            if dest is not None and found != dest:
                raise ProfileError(
                    errno.EINVAL,
                    f"EV profile {pid}: EV {i} is a path to {found}, the EVs before it to "
                    f"{dest} (explicit SRV6 EVs are one set per destination)",
                    {"index": i},
                )
            dest = found
        assert dest is not None
        return dest

    def _query_ops(
        self, pid: int, profile: CtlEvProfile, request: Mapping[str, Any], mask: int
    ) -> dict[str, Any]:
        if mask & EV_M_FIELDS_OP:
            if request.get("fields_op") != FIELDS_QUERY:
                raise ProfileError(errno.EINVAL, "a query takes QUERY_FIELDS only")
            return {"fields": profile.fields or []}
        if mask & EV_M_EV_OP:
            return self._ev_op(pid, profile, request, modify=False)
        return {}

    def _ev_array(self, profile: CtlEvProfile) -> list[tuple[str, int]]:
        if profile.mode == MODE_EXP:
            fmt = self._entry_fmt(profile)
            return [(_ev_hex(h, fmt), port) for h, port in profile.entries]
        if profile.core is None:
            return []
        fmt = self._fmt_of(profile)
        core = self.context.ev_profile(profile.core)
        generated = core.profile
        if fmt.mode is not EvFormat.SRV6 and isinstance(generated, GeneratedEvProfile):
            # STEV / UDP: the EVs are known without a QP, spread over the planes in turn
            planes = sorted(self.context.nics)
            values = generate_evs(
                generated.fields, generated.fmt, generated.count or self.default_count
            )
            return [
                (ev.to_bytes(4, "big").ljust(16, b"\0").hex(), planes[n % len(planes)] + 1)
                for n, ev in enumerate(values)
            ]
        seen: dict[int, int] = {}
        for table in core.tables:
            for slot in table.slots:
                seen.setdefault(slot.ev, slot.plane + 1)
        width = ev_bytes(fmt) if fmt.mode is EvFormat.SRV6 else 4
        return [
            (ev.to_bytes(width, "big").ljust(16, b"\0").hex(), port) for ev, port in seen.items()
        ]

    def _ev_op(
        self, pid: int, profile: CtlEvProfile, request: Mapping[str, Any], modify: bool
    ) -> dict[str, Any]:
        op = request.get("ev_op")
        entries = request.get("entries")
        if not isinstance(entries, list):
            raise ProfileError(errno.EINVAL, "EV_OP: expected entries")
        if op == EV_OP_QUERY_ARRAY:
            array = self._ev_array(profile)
            capacity = request.get("capacity")
            if not isinstance(capacity, int):
                capacity = len(entries)
            if capacity < len(array):
                raise ProfileError(
                    errno.E2BIG,
                    f"QUERY_EV_ARRAY: {len(array)} EVs, room for {capacity}",
                    {"needed": len(array)},
                )
            return {"array": [[h, p] for h, p in array], "needed": len(array)}
        parsed = []
        for i, entry in enumerate(entries):
            ok = (
                isinstance(entry, list)
                and len(entry) == 6
                and isinstance(entry[0], str)
                and isinstance(entry[2], str)
            )
            if not ok:
                raise ProfileError(
                    errno.EINVAL,
                    f"EV_OP entry {i}: expected [ev, port, ev_new, port_new, state, flags]",
                )
            parsed.append(entry)
        if op == EV_OP_REPLACE:
            if not modify or profile.mode != MODE_EXP or profile.state != PROFILE_OFFLINE:
                raise ProfileError(
                    errno.EINVAL, "REPLACE_EV: an explicit (EXP) profile, OFFLINE, in a modify"
                )
            fmt = self._entry_fmt(profile)
            for i, (ev, port, new, new_port, _state, flags) in enumerate(parsed):
                if not 1 <= new_port <= 255:
                    raise ProfileError(
                        errno.EINVAL, f"REPLACE_EV entry {i}: port {new_port}, expected 1-based"
                    )
                old = (_ev_hex(ev, fmt), port)
                hits = [
                    k for k, (h, p) in enumerate(profile.entries) if (_ev_hex(h, fmt), p) == old
                ]
                if not hits:
                    raise ProfileError(
                        errno.ENOENT,
                        f"REPLACE_EV entry {i}: EV {ev[:8]} (port {port}) not in profile {pid}",
                    )
                for k in hits if flags & OP_F_ALL_COPIES else hits[:1]:
                    profile.entries[k] = (_ev_hex(new, fmt), new_port)
            return {}
        if op in (EV_OP_MODIFY_STATE, EV_OP_QUERY_STATE):
            if profile.core is None:
                raise ProfileError(
                    errno.EINVAL, f"EV profile {pid} is not ONLINE: its EVs have no state yet"
                )
            fmt = self._fmt_of(profile)
            core = self.context.ev_profile(profile.core)
            states = []
            for i, (ev, _port, _new, _new_port, state_bit, _flags) in enumerate(parsed):
                value = ev_value(ev, fmt)
                wire = self._wire(profile, value, fmt)
                if op == EV_OP_QUERY_STATE:
                    states.append(STATE_BITS[core.state(wire)])
                    continue
                if not modify:
                    raise ProfileError(errno.EINVAL, "MODIFY_EV_STATE in a query")
                new_state = BIT_STATES.get(state_bit)
                if new_state is None or new_state is EvState.ASSUMED_BAD:
                    raise ProfileError(
                        errno.EINVAL,
                        f"MODIFY_EV_STATE entry {i}: state {state_bit:#x}, expected GOOD, DENIED or UNKNOWN",
                    )
                try:
                    self.context.set_profile_ev_state(profile.core, value, new_state, self.now())
                except KeyError:
                    if not self._ev_in(profile, value, fmt):
                        raise ProfileError(
                            errno.ENOENT,
                            f"MODIFY_EV_STATE entry {i}: EV {value:#x} not in profile {pid}",
                        ) from None
                    core.set_state(wire, new_state, self.now())  # no QP uses it yet
            return {"states": states} if op == EV_OP_QUERY_STATE else {}
        raise ProfileError(
            errno.EINVAL,
            f"EV_OP {op!r}: expected REPLACE_EV, MODIFY_EV_STATE, QUERY_EV_STATE or QUERY_EV_ARRAY",
        )

    def _entry_fmt(self, profile: CtlEvProfile) -> EvFormatProfile:
        """The format of an explicit profile's entries (its format profile need not be ONLINE
        while they are replaced): SRV6 with an SRH when its fields pass 128 bits."""
        fmt = self.fmts.get(profile.fmt_id or -1)
        if fmt is None or not fmt.mode:
            return EvFormatProfile(EvFormat.STEV)
        try:
            return _format(fmt.mode, fmt.fields or ())
        except EvProfileError:
            return EvFormatProfile(FORMATS[fmt.mode])

    @staticmethod
    def _wire(profile: CtlEvProfile, value: int, fmt: EvFormatProfile) -> int:
        """The 32-bit form the core knows an EV by: an explicit SRV6 EV (a carrier) by the
        CRC-32 of its bytes, any other EV by its value."""
        if profile.mode == MODE_EXP and fmt.mode is EvFormat.SRV6:
            return zlib.crc32(value.to_bytes(ev_bytes(fmt), "big"))
        return value

    def _ev_in(self, profile: CtlEvProfile, value: int, fmt: EvFormatProfile) -> bool:
        if profile.mode == MODE_EXP:
            return any(ev_value(h, fmt) == value for h, _ in profile.entries)
        if profile.core is None:
            return False
        core = self.context.ev_profile(profile.core).profile
        if fmt.mode is not EvFormat.SRV6 and isinstance(core, GeneratedEvProfile):
            count = core.count or self.default_count
            return value in generate_evs(core.fields, core.fmt, count)
        return False  # SRV6 EVs come from the paths: only the QPs' tables know them


def _srv6_text(ev: int, srh: bool) -> str:
    """An SRV6 EV for messages: the carrier, with an SRH the segment after it."""
    low = ipaddress.IPv6Address(ev & ((1 << 128) - 1))
    return f"{ipaddress.IPv6Address(ev >> 128)} + SRH {low}" if srh else str(low)


# -- CC profiles ---------------------------------------------------------------------------------

CC_M_STATE, CC_M_CUR_STATE, CC_M_ALGORITHM, CC_M_CONFIG = 1, 2, 4, 8
#: nscc fields where 0 is a setting, not "unset" (the others take the fabric's default at 0)
NSCC_ZERO_MEANINGFUL = ("disable_qa", "qa_gate")


@dataclass
class CtlCcProfile:
    """A CC profile as the controller configured it."""

    state: int = PROFILE_INIT
    algorithm: str | None = None
    config: dict[str, float] | None = None


class CcProfileStore:
    """The CC profiles of one host; profile 0 is the agent's own congestion control."""

    def __init__(
        self,
        own: Callable[[], CcProfile],
        fit: Callable[[CcProfile], CcProfile],
        mtu: int,
        users: Callable[[int], int],
    ) -> None:
        self.own = own
        self.fit = fit
        self.mtu = mtu
        self.users = users  #: QPs (at INIT or later) naming a profile
        self.profiles: dict[int, CtlCcProfile] = {}

    def check_usable(self, profile_id: int) -> None:
        """Refuse a QP's CC profile id unless it is 0 or an ONLINE profile."""
        _check_usable("CC", self.profiles, profile_id)

    def profile_for(self, profile_id: int) -> CcProfile:
        """The congestion control of a QP that names ``profile_id``."""
        if profile_id == 0:
            return self.own()
        profile = self.profiles[profile_id]
        return self.fit(CcProfile(profile.algorithm or "", dict(profile.config or {})))

    def request(self, request: Mapping[str, Any]) -> dict[str, Any]:
        pid = _int(request, "id")
        mask = _int(request, "mask", (1 << 32) - 1)
        modify = request.get("op") == "modify"
        if pid == 0:
            if modify:
                raise ProfileError(
                    errno.EBUSY,
                    "CC profile 0 is the host's own and in use (the agent's cc-profile command "
                    "changes it)",
                )
            own = self.own()
            return {"ok": True, "state": PROFILE_ONLINE, "algorithm": own.name,
                    "config": dict(own.params)}  # fmt: skip
        profile = _existing_or_new("CC", self.profiles, pid, modify, CtlCcProfile)
        if modify:
            self._modify(pid, profile, request, mask)
            self.profiles[pid] = profile
            if profile.state == PROFILE_INIT and profile.algorithm is None:
                self.profiles.pop(pid, None)
        return {"ok": True, "state": profile.state, "algorithm": profile.algorithm or "",
                "config": dict(profile.config or {})}  # fmt: skip

    def _modify(
        self, pid: int, profile: CtlCcProfile, request: Mapping[str, Any], mask: int
    ) -> None:
        state = profile.state
        if mask & CC_M_CUR_STATE and _int(request, "cur_state", 2) != state:
            raise ProfileError(errno.EINVAL, f"CC profile {pid} is {STATE_NAMES[state]}")
        if state == PROFILE_ONLINE and mask & (CC_M_ALGORITHM | CC_M_CONFIG):
            raise ProfileError(
                errno.EBUSY if self.users(pid) else errno.EINVAL,
                f"CC profile {pid} is ONLINE: set it OFFLINE to change it",
            )
        if mask & CC_M_ALGORITHM:
            name = request.get("algorithm")
            if not isinstance(name, str) or not name:
                raise ProfileError(
                    errno.EINVAL,
                    "CC algorithm NULL: the testbed's transport always runs a congestion "
                    "control (choose fixed for a fixed window)",
                )
            try:
                CcProfile.from_dict({"algorithm": name}, mtu=self.mtu)
            except CcProfileError as exc:
                raise ProfileError(errno.EINVAL, str(exc)) from None
            if name != profile.algorithm:
                profile.config = None
            profile.algorithm = name
        if mask & CC_M_CONFIG:
            config = request.get("config")
            if not isinstance(config, dict):
                raise ProfileError(errno.EINVAL, "CC config: expected the algorithm's fields")
            if profile.algorithm is None:
                raise ProfileError(errno.EINVAL, f"CC profile {pid}: set the algorithm first")
            given = {k: v for k, v in config.items() if v or k in NSCC_ZERO_MEANINGFUL}
            try:
                fitted = self.fit(CcProfile(profile.algorithm, given))
                CcProfile.from_dict(fitted.as_dict(), mtu=self.mtu)
            except CcProfileError as exc:
                raise ProfileError(errno.EINVAL, f"CC profile {pid}: {exc}") from None
            profile.config = given
        if mask & CC_M_STATE:
            new = _int(request, "state", 2)
            if new == state:
                return
            if state == PROFILE_INIT and new == PROFILE_OFFLINE:
                if profile.algorithm is None:
                    raise ProfileError(
                        errno.EINVAL, f"CC profile {pid}: INIT -> OFFLINE needs the ALGORITHM"
                    )
            elif state == PROFILE_OFFLINE and new == PROFILE_ONLINE:
                if profile.config is None:
                    raise ProfileError(
                        errno.EINVAL, f"CC profile {pid}: OFFLINE -> ONLINE needs the CONFIG"
                    )
            elif state == PROFILE_ONLINE and new == PROFILE_OFFLINE:
                if self.users(pid):
                    raise ProfileError(
                        errno.EBUSY, f"CC profile {pid}: {self.users(pid)} QP(s) use it"
                    )
            elif state == PROFILE_OFFLINE and new == PROFILE_INIT:
                profile.algorithm, profile.config = None, None
            else:
                raise ProfileError(
                    errno.EINVAL,
                    f"CC profile {pid}: {STATE_NAMES[state]} -> {STATE_NAMES[new]} (INIT -> OFFLINE -> ONLINE -> OFFLINE -> INIT)",
                )
            profile.state = new
