"""An EV profile as the controller configured it, and the EV operations on its EVs
(``mrc_ctl_ev_op``): REPLACE_EV (an explicit profile's EVs, OFFLINE), MODIFY_EV_STATE and
QUERY_EV_STATE (the core's shared EV states, ONLINE), QUERY_EV_ARRAY.
"""

from __future__ import annotations

import errno
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from host.agent.ocp.abi import EvMode, EvOp, EvOpFlag, EvStateBit, OcpError, ProfileState
from host.agent.ocp.ev_formats import EvFormatStore, core_format, ev_bytes, ev_hex, ev_value
from host.transport.api import Context
from host.transport.evs import (
    EvFormat,
    EvFormatProfile,
    EvProfileError,
    EvState,
    GeneratedEvProfile,
    generate_evs,
)


@dataclass
class CtlEvProfile:
    """An EV profile as the controller configured it; ``core`` is the core's id when ONLINE."""

    state: int = ProfileState.INIT
    mode: int = 0
    fmt_id: int | None = None
    count: int = 0
    min_active: int = 1
    event_mask: int = 0
    fields: list[list[int]] | None = None  # [width, init_val, min_val, max_val, mask]
    entries: list[tuple[str, int]] = field(default_factory=list)  # explicit (EV hex, port)
    core: int | None = None
    dest: str | None = None  #: explicit SRV6, ONLINE: the host its carriers lead to


class EvOperations:
    """The EV operations of the EV profile store (:class:`.ev_profiles.EvProfileStore`)."""

    context: Context
    now: Callable[[], float]
    default_count: int
    formats: EvFormatStore

    def _fmt_of(self, profile: CtlEvProfile) -> EvFormatProfile:
        return self.formats.format_of(profile.fmt_id)

    def _ev_array(self, profile: CtlEvProfile) -> list[tuple[str, int]]:
        if profile.mode == EvMode.EXP:
            fmt = self._entry_fmt(profile)
            return [(ev_hex(h, fmt), port) for h, port in profile.entries]
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
            raise OcpError(errno.EINVAL, "EV_OP: expected entries")
        if op == EvOp.QUERY_ARRAY:
            array = self._ev_array(profile)
            capacity = request.get("capacity")
            if not isinstance(capacity, int):
                capacity = len(entries)
            if capacity < len(array):
                raise OcpError(
                    errno.E2BIG,
                    f"QUERY_EV_ARRAY: {len(array)} EVs, room for {capacity}",
                    extra={"needed": len(array)},
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
                raise OcpError(
                    errno.EINVAL,
                    f"EV_OP entry {i}: expected [ev, port, ev_new, port_new, state, flags]",
                )
            parsed.append(entry)
        if op == EvOp.REPLACE:
            if not modify or profile.mode != EvMode.EXP or profile.state != ProfileState.OFFLINE:
                raise OcpError(
                    errno.EINVAL, "REPLACE_EV: an explicit (EXP) profile, OFFLINE, in a modify"
                )
            fmt = self._entry_fmt(profile)
            for i, (ev, port, new, new_port, _state, flags) in enumerate(parsed):
                if not 1 <= new_port <= 255:
                    raise OcpError(
                        errno.EINVAL, f"REPLACE_EV entry {i}: port {new_port}, expected 1-based"
                    )
                old = (ev_hex(ev, fmt), port)
                hits = [k for k, (h, p) in enumerate(profile.entries) if (ev_hex(h, fmt), p) == old]
                if not hits:
                    raise OcpError(
                        errno.ENOENT,
                        f"REPLACE_EV entry {i}: EV {ev[:8]} (port {port}) not in profile {pid}",
                    )
                for k in hits if flags & EvOpFlag.ALL_COPIES else hits[:1]:
                    profile.entries[k] = (ev_hex(new, fmt), new_port)
            return {}
        if op in (EvOp.MODIFY_STATE, EvOp.QUERY_STATE):
            if profile.core is None:
                raise OcpError(
                    errno.EINVAL, f"EV profile {pid} is not ONLINE: its EVs have no state yet"
                )
            fmt = self._fmt_of(profile)
            core = self.context.ev_profile(profile.core)
            states = []
            for i, (ev, _port, _new, _new_port, state_bit, _flags) in enumerate(parsed):
                value = ev_value(ev, fmt)
                wire = self._wire(profile, value, fmt)
                if op == EvOp.QUERY_STATE:
                    states.append(int(EvStateBit.of(core.state(wire))))
                    continue
                if not modify:
                    raise OcpError(errno.EINVAL, "MODIFY_EV_STATE in a query")
                new_state = _bit_state(state_bit)
                if new_state is None or new_state is EvState.ASSUMED_BAD:
                    raise OcpError(
                        errno.EINVAL,
                        f"MODIFY_EV_STATE entry {i}: state {state_bit:#x}, expected GOOD, DENIED or UNKNOWN",
                    )
                known = self._ev_in(profile, value, fmt)  # by the profile: no QP need use it
                try:
                    self.context.set_profile_ev_state(
                        profile.core, value, new_state, self.now(), wire=wire if known else None
                    )
                except KeyError:
                    raise OcpError(
                        errno.ENOENT,
                        f"MODIFY_EV_STATE entry {i}: EV {value:#x} not in profile {pid}",
                    ) from None
            return {"states": states} if op == EvOp.QUERY_STATE else {}
        raise OcpError(
            errno.EINVAL,
            f"EV_OP {op!r}: expected REPLACE_EV, MODIFY_EV_STATE, QUERY_EV_STATE or QUERY_EV_ARRAY",
        )

    def _entry_fmt(self, profile: CtlEvProfile) -> EvFormatProfile:
        """The format of an explicit profile's entries (its format profile need not be ONLINE
        while they are replaced): SRV6 with an SRH when its fields pass 128 bits."""
        fmt = self.formats.fmts.get(profile.fmt_id or -1)
        if fmt is None or not fmt.mode:
            return EvFormatProfile(EvFormat.STEV)
        try:
            return core_format(fmt.mode, fmt.fields or ())
        except EvProfileError:
            return core_format(fmt.mode, ())

    @staticmethod
    def _wire(profile: CtlEvProfile, value: int, fmt: EvFormatProfile) -> int:
        """The 32-bit form the core knows an EV by: an explicit SRV6 EV (a carrier) by the
        CRC-32 of its bytes, any other EV by its value."""
        if profile.mode == EvMode.EXP and fmt.mode is EvFormat.SRV6:
            return zlib.crc32(value.to_bytes(ev_bytes(fmt), "big"))
        return value

    def _ev_in(self, profile: CtlEvProfile, value: int, fmt: EvFormatProfile) -> bool:
        if profile.mode == EvMode.EXP:
            return any(ev_value(h, fmt) == value for h, _ in profile.entries)
        if profile.core is None:
            return False
        core = self.context.ev_profile(profile.core).profile
        if fmt.mode is not EvFormat.SRV6 and isinstance(core, GeneratedEvProfile):
            count = core.count or self.default_count
            return value in generate_evs(core.fields, core.fmt, count)
        return False  # SRV6 EVs come from the paths: only the QPs' tables know them


def _bit_state(bit: object) -> EvState | None:
    """The EV state of one ``mrc_ctl_ev_state`` bit (None for anything else)."""
    for member in EvStateBit:
        if bit == member.value:
            return member.state
    return None
