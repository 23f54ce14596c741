"""EV format profiles of the OCP MRC controller API (``mrc_ctl_ev_fmt_profile_attr``), per
host, and the byte layout of an EV (``mrc_ctl_ev_t``) in each format.

EVs travel as hex strings of the bytes of ``mrc_ctl_ev_t`` (up to its 32; missing bytes are
zero). Their layout follows the format: STEV and UDP EVs are a 32-bit value in network byte
order in the first four bytes; an SRV6 EV is 16 bytes (a uSID carrier, or a generated EV's
number at the end); an SRV6+SRH EV is 32 bytes, the carrier then the SRH's single segment.
Replies give an EV in its format's bytes: 16 (STEV, UDP, SRV6) or 32 (SRV6+SRH). An SRV6 format
whose fields pass 128 bits is SRV6 with an SRH.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from host.agent.ocp.abi import (
    EV_MAX_BYTES,
    U32_MAX,
    EvFmtMode,
    FieldsOp,
    FmtMask,
    OcpError,
    ProfileState,
    field_int,
)
from host.agent.ocp.profiles import existing_or_new
from host.transport.evs import FORMAT_MAX_WIDTH, EvFormat, EvFormatProfile, EvProfileError


@dataclass
class FmtProfile:
    """An EV format profile."""

    state: int = ProfileState.INIT
    mode: int = 0
    fields: list[int] | None = None


def core_format(mode: int, widths: list[int] | tuple[int, ...]) -> EvFormatProfile:
    """The core format profile of an OCP one: SRV6 fields beyond 128 bits are SRV6 with an
    SRH (the carrier, then the SRH segment; up to 256 bits)."""
    fmt = EvFmtMode(mode).format
    srh = fmt is EvFormat.SRV6 and sum(widths) > FORMAT_MAX_WIDTH[EvFormat.SRV6]
    return EvFormatProfile(fmt, tuple(widths), srh=srh)


def ev_bytes(fmt: EvFormatProfile) -> int:
    """The bytes of ``mrc_ctl_ev_t`` an EV of ``fmt`` fills: 32 for SRV6+SRH, else 16."""
    return EV_MAX_BYTES if fmt.srh else 16


def ev_raw(hex_value: str) -> bytes:
    """An EV's hex string as the 32 bytes of ``mrc_ctl_ev_t`` (zero-filled)."""
    try:
        raw = bytes.fromhex(hex_value)
    except ValueError:
        raw = b""
    else:
        if len(raw) <= EV_MAX_BYTES:
            return raw.ljust(EV_MAX_BYTES, b"\0")
    raise OcpError(
        errno.EINVAL, f"EV {hex_value[:16]!r}: expected up to {EV_MAX_BYTES} bytes in hex"
    )


def ev_hex(hex_value: str, fmt: EvFormatProfile) -> str:
    """An EV's hex string in the bytes its format fills (:func:`ev_bytes`)."""
    return ev_raw(hex_value)[: ev_bytes(fmt)].hex()


def ev_value(hex_value: str, fmt: EvFormatProfile) -> int:
    """The EV an ``mrc_ctl_ev_t`` holds: STEV / UDP the first four bytes, SRV6 the first 16,
    SRV6+SRH all 32 (the carrier, then the SRH segment)."""
    raw = ev_raw(hex_value)
    if fmt.mode is EvFormat.SRV6:
        return int.from_bytes(raw[: ev_bytes(fmt)], "big")
    return int.from_bytes(raw[:4], "big")


class EvFormatStore:
    """The EV format profiles of one host."""

    def __init__(self, users: Callable[[int], list[int]]) -> None:
        #: the EV profiles ONLINE with a format profile
        self.users = users
        self.fmts: dict[int, FmtProfile] = {}

    def format_of(self, fmt_id: int | None, online: bool = True) -> EvFormatProfile:
        """The core format of format profile ``fmt_id`` (EINVAL unless ONLINE, when ``online``)."""
        fmt = self.fmts.get(fmt_id or -1)
        if fmt is None or (online and fmt.state != ProfileState.ONLINE):
            raise OcpError(errno.EINVAL, f"EV format profile {fmt_id} is not ONLINE")
        return core_format(fmt.mode, fmt.fields or ())

    def request(self, request: Mapping[str, Any]) -> dict[str, Any]:
        pid = field_int(request, "id")
        mask = field_int(request, "mask", 0, U32_MAX)
        modify = request.get("op") == "modify"
        if pid == 0:
            raise OcpError(errno.EINVAL, "EV format profile 0 is reserved (the host's own)")
        profile = existing_or_new("EV format", self.fmts, pid, modify, FmtProfile)
        if mask & FmtMask.VENDOR_CFG and request.get("vendor_cfg"):
            raise OcpError(
                errno.EINVAL, "the testbed has no vendor-specific EV format configuration"
            )
        if modify:
            self._modify_fmt(pid, profile, request, mask)
            self.fmts[pid] = profile
            if profile.state == ProfileState.INIT and profile.mode == 0:
                self.fmts.pop(pid, None)
        out: dict[str, Any] = {"ok": True, "state": profile.state, "mode": profile.mode}
        if mask & FmtMask.OP and request.get("fields_op") == FieldsOp.QUERY:
            fields = profile.fields or []
            out["fields"] = fields
        return out

    def _modify_fmt(
        self, pid: int, profile: FmtProfile, request: Mapping[str, Any], mask: int
    ) -> None:
        state = profile.state
        if mask & FmtMask.CUR_STATE and field_int(request, "cur_state", 0, 2) != state:
            raise OcpError(
                errno.EINVAL,
                f"EV format profile {pid} is {ProfileState(state).name}, not {ProfileState(request['cur_state']).name}",
            )
        fields_op = request.get("fields_op") if mask & FmtMask.OP else None
        if state == ProfileState.ONLINE and (mask & FmtMask.MODE or fields_op == FieldsOp.MODIFY):
            raise OcpError(
                errno.EINVAL, f"EV format profile {pid} is ONLINE: set it OFFLINE to change it"
            )
        if mask & FmtMask.MODE:
            mode = field_int(request, "mode", 0, U32_MAX)
            if mode not in list(EvFmtMode):
                raise OcpError(
                    errno.EINVAL,
                    f"EV format mode {mode:#x}: expected one of STEV, SRV6, UDP (one bit)",
                )
            profile.mode = mode
        if fields_op == FieldsOp.MODIFY:
            widths = request.get("fields")
            if not isinstance(widths, list) or not all(
                isinstance(w, int) and w > 0 for w in widths
            ):
                raise OcpError(errno.EINVAL, "format fields: expected widths >= 1")
            if not profile.mode:
                raise OcpError(errno.EINVAL, "format fields before a MODE: set the mode first")
            try:
                core_format(profile.mode, widths)
            except EvProfileError as exc:
                raise OcpError(errno.E2BIG, str(exc)) from None
            profile.fields = list(widths)
        if mask & FmtMask.STATE:
            new = field_int(request, "state", 0, 2)
            if new == state:
                return
            if new == ProfileState.OFFLINE and state == ProfileState.INIT and not profile.mode:
                raise OcpError(
                    errno.EINVAL, f"EV format profile {pid}: INIT -> OFFLINE needs its MODE"
                )
            if new == ProfileState.ONLINE and (
                state != ProfileState.OFFLINE or profile.fields is None
            ):
                raise OcpError(
                    errno.EINVAL,
                    f"EV format profile {pid}: ONLINE from OFFLINE with its fields set "
                    "(MODIFY_FIELDS)",
                )
            if state == ProfileState.ONLINE and new == ProfileState.OFFLINE:
                users = self.users(pid)
                if users:
                    raise OcpError(
                        errno.EBUSY,
                        f"EV format profile {pid}: EV profile(s) {users} are ONLINE with it",
                    )
            if new == ProfileState.INIT:
                if state != ProfileState.OFFLINE:
                    raise OcpError(errno.EINVAL, f"EV format profile {pid}: INIT only from OFFLINE")
                profile.mode, profile.fields = 0, None
            if state == ProfileState.INIT and new == ProfileState.ONLINE:
                raise OcpError(errno.EINVAL, f"EV format profile {pid}: INIT -> OFFLINE -> ONLINE")
            profile.state = new

    # -- EV profiles -----------------------------------------------------------------------------
