"""The controller API of the OCP MRC provider (``mrc_ctl.h``), root only where it changes the
host: port administrative state, EV event CQs, endpoint requests (connectionless EV probes and
port status updates) and the EV format, EV and CC profiles QPs name at INIT.
:data:`COMMANDS` are its rows.

The host operations are the transport's (``Context.set_port_admin``,
``Context.ep_batch_send``, the profile stores of :mod:`.ev_profiles` and :mod:`.cc_profiles`):
this module reads the requests' fields, calls them and writes the replies.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Callable, Mapping
from typing import Any

from host.agent.control import Deferred, ep_batch_reply
from host.agent.ocp.abi import (
    EV_EVENT_MASK,
    U32_MAX,
    AsyncEvent,
    EpOp,
    EvFmtMode,
    EvStateBit,
    OcpError,
    Reply,
    field_int,
    field_list,
)
from host.agent.ocp.app_api import create_cq
from host.agent.ocp.ev_formats import ev_value
from host.agent.ocp.objects import EvEvent, Session
from host.agent.ocp.state import Command, Privilege, ProviderState
from host.transport import wire
from host.transport.endpoint import EndpointError, EpRequest
from host.transport.events import EndpointResponse, Event, EvStateChanged
from host.transport.evs import (
    EvFormat,
    EvFormatProfile,
    EvProfile,
    EvState,
    ExplicitEvProfile,
    Srv6EvProfile,
)


def modify_port(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply:
    """A port's administrative state (``Context.set_port_admin``: a disabled plane carries
    nothing)."""
    port = field_int(request, "port", 1, 255)
    enabled = bool(field_int(request, "enabled", 0, 1))
    context = p.agent.context
    if port - 1 not in context.nics:
        raise OcpError(errno.EINVAL, f"field 'port': no port {port} on {p.agent.host.name}")
    if context.port_admin(port - 1) == enabled:
        return {"ok": True, "port": port, "active": enabled, "evs": 0}
    count = context.set_port_admin(port - 1, enabled, p.agent.now())
    for other in p.sessions.values():
        p.push_async(other, AsyncEvent.PORT_ACTIVE if enabled else AsyncEvent.PORT_ERR, port=port)
    p.kick()
    return {"ok": True, "port": port, "active": enabled, "evs": count}


def create_ev_cq(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply:
    """A CQ of EV events (state changes of the host's EVs to GOOD or ASSUMED_BAD, on every
    QP); a full one drops events and counts them exactly."""
    reply = create_cq(p, session, request)
    session.cqs[reply["cq"]].kind = "ev"
    return reply


def _profile_call(
    p: ProviderState, request: Mapping[str, Any], handler: Callable[[Mapping[str, Any]], Reply]
) -> Reply:
    try:
        reply = handler(request)
    except OcpError as exc:
        raise exc.prefixed(request["cmd"]) from None
    if request.get("op") == "modify":  # EV states may have changed: probes, events, timer
        p.kick()
    return reply


def ev_fmt_profile(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply:
    """Modify or query an EV format profile (:mod:`.ev_formats`)."""
    return _profile_call(p, request, p.ev_profiles.formats.request)


def ev_profile(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply:
    """Modify or query an EV profile (:mod:`.ev_profiles`)."""
    return _profile_call(p, request, p.ev_profiles.request)


def cc_profile(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply:
    """Modify or query a CC profile (:mod:`.cc_profiles`)."""
    return _profile_call(p, request, p.cc_profiles.request)


def ep_probe(p: ProviderState, session: Session, request: Mapping[str, Any]) -> Reply | Deferred:
    """A batch of endpoint requests (``mrc_ctl_ep_batch_send_wait``): ``op`` 0 EV probes, 1
    port status updates, each ``[req_id, sgid, dgid, format, ev, port, port_status]`` (the
    last optional; GIDs and the ``mrc_ctl_ev_t`` in hex), in traffic class ``tc``. Answered
    when every request is answered or at ``timeout`` (ns of real-fabric time): the responses
    in arrival order (``ETIMEDOUT`` with those received if some are missing). What a request
    may name is the transport's to check (``Context.ep_batch_send``)."""
    op = EpOp(field_int(request, "op", 0, len(EpOp) - 1, default=0))
    tc = field_int(request, "tc", 0, 63, default=wire.DSCP_CONTROL)
    timeout = field_int(request, "timeout", 0, U32_MAX) * 1e-9
    requests = [_ep_request(i, req) for i, req in enumerate(field_list(request, "reqs"))]
    if not requests:
        return {"ok": True, "responses": []}

    def render(responses: list[EndpointResponse], complete: bool) -> Reply:
        out = [[r.req_id, r.port, r.rtt_ns, int(r.adj_svc_time)] for r in responses]
        if complete:
            return {"ok": True, "responses": out}
        missing = len(requests) - len(out)
        return {
            "ok": False, "errno": errno.ETIMEDOUT, "responses": out,
            "error": f"ep_probe: {missing} request(s) without a response in time",
        }  # fmt: skip

    try:
        return ep_batch_reply(p.agent, op.core_name, requests, dscp=tc, timeout=timeout,
                              render=render)  # fmt: skip
    except EndpointError as exc:
        where = "" if exc.index is None else f"request {exc.index}: "
        raise OcpError(errno.EINVAL, f"ep_probe: {where}{exc}", exc.index) from None


def _ep_request(i: int, req: Any) -> EpRequest:
    """Request ``i`` of a batch as the transport's :class:`EpRequest`; EINVAL naming ``i``."""

    def bad(message: str) -> OcpError:
        return OcpError(errno.EINVAL, f"ep_probe: request {i}: {message}", i)

    if (
        not isinstance(req, list)
        or len(req) not in (6, 7)
        or not all(isinstance(req[k], str) for k in (1, 2, 4))
        or not all(
            isinstance(v, int) and not isinstance(v, bool)
            for k, v in enumerate(req)
            if k not in (1, 2, 4)
        )
    ):
        raise bad("expected [req_id, sgid, dgid, format, ev, port, port_status]")
    req_id, sgid, dgid, fmt, ev_hex, port = req[:6]
    status = req[6] if len(req) == 7 else 0
    try:
        src, dst, value = bytes.fromhex(sgid), bytes.fromhex(dgid), bytes.fromhex(ev_hex)
    except ValueError:
        raise bad("GIDs and EV must be hex") from None
    if len(src) != 16 or len(dst) != 16 or len(value) not in (16, 32):
        raise bad("GIDs are 16 bytes, the EV 16 or 32")
    if fmt not in [m.value for m in EvFmtMode]:
        raise bad(f"ev_fmt_mode {fmt}: expected STEV, SRV6 or UDP")
    mode = EvFmtMode(fmt).format
    # SRV6 with a segment after the carrier is SRV6+SRH; the EV as mrc_ctl_ev_t holds it
    fmt_profile = EvFormatProfile(mode, srh=mode is EvFormat.SRV6 and any(value[16:]))
    try:
        return EpRequest.parse(req_id, src, dst, ev_value(value.hex(), fmt_profile),
                               fmt_profile, port or None, status)  # fmt: skip
    except EndpointError as exc:
        raise bad(str(exc)) from None


# -- EV events -----------------------------------------------------------------------------------


def on_ev_state(p: ProviderState, event: Event) -> None:
    """An EV state change of the core, to the EV event CQs when its profile monitors it."""
    if not isinstance(event, EvStateChanged):
        return
    try:
        bit = EvStateBit.of(EvState(event.new))
    except ValueError:
        return
    profile_id = p.ev_profiles.ctl_id(event.profile)
    mask = p.ev_profiles.event_mask(event.profile) if profile_id else EV_EVENT_MASK
    if bit & mask:
        ev_hex = _event_ev(p, event.profile, event.ev)
        p.deliver_ev_event(EvEvent(profile_id, event.ev, event.plane + 1, 0, bit, ev_hex))


def _event_ev(p: ProviderState, core_id: int, ev: int) -> str:
    """An EV event's ``mrc_ctl_ev_t`` in hex (32 bytes): an EV that is a uSID carrier (an
    explicit SRV6 profile's, ``Srv6EvProfile``'s) in its 16 bytes, with an SRH the carrier
    and the segment; any other the 32-bit value in the first four bytes."""
    profile: EvProfile | None = None
    with contextlib.suppress(KeyError):
        profile = p.agent.context.ev_profile(core_id).profile
    if isinstance(profile, Srv6EvProfile) or (
        isinstance(profile, ExplicitEvProfile) and profile.carriers
    ):
        raw = ev.to_bytes(32 if profile.fmt.srh else 16, "big")
    else:
        raw = (ev & 0xFFFFFFFF).to_bytes(4, "big")
    return raw.ljust(32, b"\0").hex()


COMMANDS = (
    Command("modify_port", modify_port, Privilege.ROOT),
    Command("create_ev_cq", create_ev_cq, Privilege.ROOT),
    Command("ep_probe", ep_probe, Privilege.ROOT),
    Command("ev_fmt_profile", ev_fmt_profile, Privilege.ROOT_TO_MODIFY),
    Command("ev_profile", ev_profile, Privilege.ROOT_TO_MODIFY),
    Command("cc_profile", cc_profile, Privilege.ROOT_TO_MODIFY),
)
