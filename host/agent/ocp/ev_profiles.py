"""EV profiles of the OCP MRC controller API (``mrc_ctl_ev_profile_attr``), per host.

A controller configures them by id, through the life cycle of :mod:`.profiles`; when an EV
profile goes ONLINE it becomes a profile of the transport core (``Context.create_ev_profile``)
whose EV states every QP using it shares, and an application's QP names it at INIT
(``MRC_QP_EV_PROFILE_ID``). Id 0 is the host's own profile (the agent's generated EVs), which is
always ONLINE and cannot be changed. Its format is an EV format profile's
(:mod:`.ev_formats`, which also has the byte layout of the EVs requests and replies carry).

An explicit (EXP) SRV6 or SRV6+SRH profile holds uSID carriers: going ONLINE, each must be a
path of the fabric model from this host to another host on its port (plane), all to the same
host (one set per destination), and a QP using the profile must be towards that host.
docs/ocp-api.md has the rules this module enforces.
"""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from host.agent.ocp.abi import (
    EV_EVENT_MASK,
    EV_MAX_BYTES,
    MAX_EVS,
    U32_MAX,
    EvMask,
    EvMode,
    FieldsOp,
    OcpError,
    ProfileState,
    field_int,
)
from host.agent.ocp.ev_formats import (
    EvFormatStore,
    ev_raw,
    ev_value,
)
from host.agent.ocp.ev_ops import CtlEvProfile, EvOperations
from host.agent.ocp.profiles import check_usable, existing_or_new
from host.transport.api import Context
from host.transport.evs import (
    EvField,
    EvFormat,
    EvFormatProfile,
    EvProfile,
    EvProfileError,
    ExplicitEvProfile,
    GeneratedEvProfile,
    carrier_path,
)
from topologies import Path

UNPOPULATED = ("0" * 32, 0)


class EvProfileStore(EvOperations):
    """The EV profiles of one host (and its EV format profiles, :attr:`formats`)."""

    def __init__(
        self, context: Context, now: Callable[[], float], default_count: int,
        peers: Callable[[], Mapping[str, Sequence[Path]]] | None = None,
    ) -> None:  # fmt: skip
        self.context = context
        self.now = now
        self.default_count = default_count
        #: the fabric model's paths from this host to each other host (explicit SRV6 EVs)
        self.peers = peers or dict
        self.evs: dict[int, CtlEvProfile] = {}
        self.formats = EvFormatStore(self._online_with)

    # -- what QPs use ------------------------------------------------------------------------

    def check_usable(self, profile_id: int) -> None:
        """Refuse a QP's EV profile id unless it is 0 or an ONLINE profile."""
        check_usable("EV", self.evs, profile_id)

    def _online_with(self, fmt_id: int) -> list[int]:
        """The EV profiles ONLINE with format profile ``fmt_id``."""
        return [
            i for i, p in self.evs.items() if p.fmt_id == fmt_id and p.state == ProfileState.ONLINE
        ]

    def check_destination(self, profile_id: int, remote_host: str) -> None:
        """Refuse a QP towards ``remote_host`` on an explicit SRV6 profile whose carriers lead
        to another host."""
        profile = self.evs.get(profile_id)
        if profile is not None and profile.dest is not None and profile.dest != remote_host:
            raise OcpError(
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
        return EV_EVENT_MASK

    # -- EV format profiles --------------------------------------------------------------------

    def request(self, request: Mapping[str, Any]) -> dict[str, Any]:
        pid = field_int(request, "id")
        mask = field_int(request, "mask", 0, U32_MAX)
        modify = request.get("op") == "modify"
        if mask & EvMask.EV_OP and mask & EvMask.FIELDS_OP:
            raise OcpError(errno.EINVAL, "EV_OP and EV_FIELDS_OP are mutually exclusive")
        if mask & EvMask.VENDOR_CFG and request.get("vendor_cfg"):
            raise OcpError(
                errno.EINVAL, "the testbed has no vendor-specific EV profile configuration"
            )
        if pid == 0:
            if modify:
                raise OcpError(errno.EBUSY, "EV profile 0 is the host's own and in use")
            return self._query_own(mask)
        profile = existing_or_new("EV", self.evs, pid, modify, CtlEvProfile)
        out: dict[str, Any] = {"ok": True}
        if modify:
            out.update(self._modify_ev(pid, profile, request, mask))
            self.evs[pid] = profile
            if profile.state == ProfileState.INIT and not profile.mode:
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
        if mask & (EvMask.EV_OP | EvMask.FIELDS_OP):
            raise OcpError(
                errno.EINVAL,
                "EV profile 0 (the host's own) answers STATE, MODE, COUNT, MIN_ACTIVE and EVENT_MASK only",
            )
        return {"ok": True, "state": ProfileState.ONLINE, "mode": EvMode.GEN, "fmt_id": 0,
                "count": self.default_count, "min_active": self.context.config.min_active,
                "event_mask": EV_EVENT_MASK}  # fmt: skip

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
        if mask & EvMask.CUR_STATE and field_int(request, "cur_state", 0, 2) != state:
            raise OcpError(errno.EINVAL, f"EV profile {pid} is {ProfileState(state).name}")
        online = state == ProfileState.ONLINE
        if online and mask & (
            EvMask.MODE
            | EvMask.FMT_ID
            | EvMask.COUNT
            | EvMask.MIN_ACTIVE
            | EvMask.EVENT_MASK
            | EvMask.FIELDS_OP
        ):
            raise OcpError(errno.EINVAL, f"EV profile {pid} is ONLINE: set it OFFLINE to change it")
        if mask & EvMask.MODE:
            mode = field_int(request, "mode", 0, U32_MAX)
            if mode not in (EvMode.AUTO, EvMode.EXP, EvMode.GEN):
                raise OcpError(
                    errno.EINVAL, f"EV mode {mode:#x}: expected AUTO, EXP or GEN (one bit)"
                )
            profile.mode = mode
        if mask & EvMask.FMT_ID:
            fmt_id = field_int(request, "fmt_id")
            if fmt_id not in self.formats.fmts:
                raise OcpError(errno.EINVAL, f"EV format profile {fmt_id} does not exist")
            profile.fmt_id = fmt_id
        if mask & EvMask.COUNT:
            count = field_int(request, "count", 0, MAX_EVS)
            if count < 1:
                raise OcpError(errno.EINVAL, "EV count: expected at least 1")
            profile.count = count
            if profile.mode == EvMode.EXP:
                profile.entries = [UNPOPULATED] * count
        if mask & EvMask.MIN_ACTIVE:
            profile.min_active = field_int(request, "min_active", 0, MAX_EVS)
        if mask & EvMask.EVENT_MASK:
            event_mask = field_int(request, "event_mask", 0, U32_MAX)
            if event_mask & ~int(EV_EVENT_MASK):
                raise OcpError(
                    errno.EINVAL, "EV event mask: only GOOD and ASSUMED_BAD can be monitored"
                )
            profile.event_mask = event_mask
        if mask & EvMask.FIELDS_OP:
            op = request.get("fields_op")
            if op == FieldsOp.MODIFY:
                fields = request.get("fields")
                if not isinstance(fields, list) or not all(
                    isinstance(f, list)
                    and len(f) == 5
                    and all(isinstance(v, int) and v >= 0 for v in f)
                    for f in fields
                ):
                    raise OcpError(
                        errno.EINVAL,
                        "EV fields: expected [width, init_val, min_val, max_val, mask] lists",
                    )
                profile.fields = [list(f) for f in fields]
        out: dict[str, Any] = {}
        if mask & EvMask.EV_OP:
            out = self._ev_op(pid, profile, request, modify=True)
        if mask & EvMask.STATE:
            self._transition(pid, profile, field_int(request, "state", 0, 2))
        elif mask & EvMask.FIELDS_OP and request.get("fields_op") == FieldsOp.QUERY:
            out["fields"] = profile.fields or []
        return out

    def _transition(self, pid: int, profile: CtlEvProfile, new: int) -> None:
        state = profile.state
        if new == state:
            return
        if new == ProfileState.OFFLINE and state == ProfileState.INIT:
            if not profile.mode or profile.fmt_id is None or not profile.count:
                raise OcpError(
                    errno.EINVAL, f"EV profile {pid}: INIT -> OFFLINE needs MODE, FMT_ID and COUNT"
                )
            if profile.mode == EvMode.EXP and len(profile.entries) != profile.count:
                profile.entries = [UNPOPULATED] * profile.count
        elif new == ProfileState.ONLINE and state == ProfileState.OFFLINE:
            if profile.min_active > profile.count:
                raise OcpError(
                    errno.EINVAL,
                    f"EV profile {pid}: ev_min_active {profile.min_active} exceeds ev_count {profile.count}",
                )
            core = self._core_profile(pid, profile)
            try:
                profile.core = self.context.create_ev_profile(core)
            except (EvProfileError, ValueError) as exc:
                raise OcpError(errno.EINVAL, f"EV profile {pid}: {exc}") from None
        elif new == ProfileState.OFFLINE and state == ProfileState.ONLINE:
            users = self._users(profile)
            if users:
                raise OcpError(errno.EBUSY, f"EV profile {pid}: {users} QP(s) use it")
            if profile.core is not None:
                self.context.destroy_ev_profile(profile.core)
                profile.core = None
            profile.dest = None
        elif new == ProfileState.INIT and state == ProfileState.OFFLINE:
            profile.mode, profile.fmt_id, profile.count, profile.fields = 0, None, 0, None
            profile.entries = []
        else:
            raise OcpError(
                errno.EINVAL,
                f"EV profile {pid}: {ProfileState(state).name} -> {ProfileState(new).name} (INIT -> OFFLINE -> ONLINE -> OFFLINE -> INIT)",
            )
        profile.state = new

    def _core_profile(self, pid: int, profile: CtlEvProfile) -> EvProfile:
        fmt = self._fmt_of(profile)
        fields = tuple(EvField(w, init_val=i, min_val=lo, max_val=hi, mask=m)
                       for w, i, lo, hi, m in (profile.fields or []))  # fmt: skip
        if profile.mode == EvMode.AUTO:
            return GeneratedEvProfile(
                count=profile.count,
                fmt=EvFormatProfile(fmt.mode, srh=fmt.srh),
                min_active=profile.min_active,
            )
        if profile.mode == EvMode.GEN:
            if fmt.mode is EvFormat.SRV6 and fields:
                raise OcpError(
                    errno.EINVAL,
                    f"EV profile {pid}: generated SRV6 EVs come from the paths; give no fields",
                )
            return GeneratedEvProfile(
                count=profile.count, fields=fields, fmt=fmt, min_active=profile.min_active
            )
        if any(ev_raw(h) == bytes(EV_MAX_BYTES) and port == 0 for h, port in profile.entries):
            raise OcpError(
                errno.EINVAL,
                f"EV profile {pid}: replace every unpopulated EV (REPLACE_EV) before ONLINE",
            )
        evs = tuple((ev_value(hex_value, fmt), port - 1) for hex_value, port in profile.entries)
        explicit = ExplicitEvProfile(
            evs=evs, fmt=fmt, min_active=profile.min_active, fields=fields,
            carriers=fmt.mode is EvFormat.SRV6,
        )  # fmt: skip
        wires = [self._expanded(pid, explicit, i) for i in range(len(evs))]
        if explicit.carriers:
            carriers = [(wire, plane) for wire, (_, plane) in zip(wires, evs, strict=True)]
            profile.dest = self._carrier_dest(pid, carriers, fmt)
        return explicit

    @staticmethod
    def _expanded(pid: int, profile: ExplicitEvProfile, index: int) -> int:
        """EV ``index`` of ``profile`` as the wire carries it (EINVAL naming it if its fields
        cannot expand it)."""
        try:
            return profile.expanded(profile.evs[index][0])
        except EvProfileError as exc:
            raise OcpError(
                errno.EINVAL, f"EV profile {pid}: EV {index}: {exc}", extra={"index": index}
            ) from None

    def _carrier_dest(self, pid: int, evs: Sequence[tuple[int, int]], fmt: EvFormatProfile) -> str:
        """The host the explicit SRV6 EVs ``evs`` ((carrier, plane) pairs, the carriers
        expanded) lead to: each must be a path of the fabric model from this host on its plane,
        all to one host."""
        peers = self.peers()
        dest: str | None = None
        for i, (ev, plane) in enumerate(evs):
            found = next(
                (host for host, paths in peers.items()
                 if carrier_path(paths, ev, plane, fmt.srh) is not None),
                None,
            )  # fmt: skip
            if found is None:
                raise OcpError(
                    errno.EINVAL,
                    f"EV profile {pid}: EV {i} ({_srv6_text(ev, fmt.srh)}) on port {plane + 1}: "
                    f"no path from this host on that port has it as its "
                    f"{'carrier and SRH segment' if fmt.srh else 'uSID carrier'}",
                    extra={"index": i},
                )
            if dest is not None and found != dest:
                raise OcpError(
                    errno.EINVAL,
                    f"EV profile {pid}: EV {i} is a path to {found}, the EVs before it to "
                    f"{dest} (explicit SRV6 EVs are one set per destination)",
                    extra={"index": i},
                )
            dest = found
        assert dest is not None
        return dest

    def _query_ops(
        self, pid: int, profile: CtlEvProfile, request: Mapping[str, Any], mask: int
    ) -> dict[str, Any]:
        if mask & EvMask.FIELDS_OP:
            if request.get("fields_op") != FieldsOp.QUERY:
                raise OcpError(errno.EINVAL, "a query takes QUERY_FIELDS only")
            return {"fields": profile.fields or []}
        if mask & EvMask.EV_OP:
            return self._ev_op(pid, profile, request, modify=False)
        return {}


def _srv6_text(ev: int, srh: bool) -> str:
    """An SRV6 EV for messages: the carrier, with an SRH the segment after it."""
    low = ipaddress.IPv6Address(ev & ((1 << 128) - 1))
    return f"{ipaddress.IPv6Address(ev >> 128)} + SRH {low}" if srh else str(low)
