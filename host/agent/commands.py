"""The control commands of the host agent (one method per command; the protocol is in docs/host-agent.md).

:class:`Commands` turns a decoded request (``{"cmd": ..., fields}``) into an action on the
:class:`host.agent.Agent` and a JSON reply. Every field is validated before anything happens;
a bad one raises :class:`host.agent.control.BadRequest` naming it, which the control server turns
into ``{"ok": false, "error": "...", "field": "..."}``.
"""

from __future__ import annotations

import ipaddress
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from host.agent.control import (
    BadRequest,
    CoreDriver,
    Deferred,
    Reply,
    deferred_until,
    ep_batch_reply,
    get_float,
    get_int,
    get_int_list,
    get_str,
    reject_unknown,
    require_int,
    require_str,
)
from host.agent.data import (
    DEFAULT_MESSAGE_SIZE,
    DEFAULT_SEED,
    MAX_TRANSFER,
    Transfer,
    pattern,
    sha256_hex,
    verify_bytes,
)
from host.agent.options import AgentOptions
from host.transport.api import MemoryRegion, operator_state
from host.transport.cc import CcProfile, CcProfileError
from host.transport.cc.base import PROFILE_KEYS
from host.transport.endpoint import EndpointError, EpRequest
from host.transport.events import EndpointResponse
from host.transport.evs import (
    SRV6_SRH_NAME,
    EvFormatProfile,
    EvProfileError,
    format_profile,
)
from host.transport.policy import HOST_POLICIES
from topologies import Host, Nic, Topology


class PlaneView(Protocol):
    """What the commands read of a plane NIC of the agent."""

    @property
    def nic(self) -> Nic: ...


class AgentView(CoreDriver, Protocol):
    """What the commands use of the agent (:class:`host.agent.agent.Agent`): its transport
    (:class:`host.agent.control.CoreDriver`) and the rest below."""

    transfers: dict[int, Transfer]
    regions: dict[str, MemoryRegion]
    region_cursor: int
    qps: dict[tuple[str, str], Any]

    @property
    def options(self) -> AgentOptions: ...
    @property
    def host(self) -> Host: ...
    @property
    def peers(self) -> list[Host]: ...
    @property
    def control_path(self) -> Path: ...
    @property
    def topology(self) -> Topology: ...
    @property
    def planes(self) -> Sequence[PlaneView]: ...
    def start_transfer(self, transfer: Transfer) -> None: ...
    def stats(self) -> dict[str, Any]: ...
    def counters(self) -> dict[str, int]: ...
    def fidelity(self) -> dict[str, float]: ...
    def stop(self) -> None: ...
    @property
    def cc_profile(self) -> CcProfile: ...
    def set_cc_profile(self, profile: CcProfile) -> CcProfile: ...
    @property
    def ev_format(self) -> EvFormatProfile: ...
    def set_ev_format(self, fmt: EvFormatProfile) -> EvFormatProfile: ...
    @property
    def ev_events(self) -> Sequence[Mapping[str, Any]]: ...
    @property
    def received_imm(self) -> Sequence[Mapping[str, Any]]: ...
    @property
    def received_seq(self) -> int: ...


REGION_ALIGN = 1 << 16  # regions are placed at 64 KiB-aligned virtual addresses
MAX_REGION = 1 << 31  # bytes: a region is a zeroed bytearray in the agent


class Commands:
    """Handlers of every control command of one agent."""

    def __init__(self, agent: AgentView) -> None:
        self.agent: AgentView = agent
        self.table: dict[str, Callable[[Mapping[str, Any]], Reply | Deferred]] = {
            "info": self.info,
            "register": self.register,
            "regions": self.regions,
            "transfer": self.transfer,
            "write": self.transfer,
            "wait": self.wait,
            "stats": self.stats,
            "fidelity": self.fidelity,
            "paths": self.paths,
            "set-ev": self.set_ev,
            "cc-profile": self.cc_profile,
            "ev-format": self.ev_format,
            "ev-profiles": self.ev_profiles,
            "ev-events": self.ev_events,
            "received": self.received,
            "ep-probe": self.ep_probe,
            "verify": self.verify,
            "quit": self.quit,
        }

    def handle(self, request: Mapping[str, Any]) -> Reply | Deferred:
        """Dispatch one request (``cmd`` is a string, checked by the server)."""
        handler = self.table.get(request["cmd"])
        if handler is None:
            raise BadRequest(
                f"field 'cmd': unknown command {request['cmd']!r} "
                f"(commands: {', '.join(sorted(self.table))})",
                "cmd",
            )
        return handler(request)

    # -- information --------------------------------------------------------------------------

    def info(self, request: Mapping[str, Any]) -> Reply:
        """Who this agent is: host, topology, NICs, peers, QP numbers, options."""
        reject_unknown(request, set())
        agent = self.agent
        return {
            "ok": True,
            "host": agent.host.name,
            "topology": agent.topology.name,
            "pid": os.getpid(),
            "control": str(agent.control_path),
            "direct": agent.options.direct,
            "cc": agent.cc_profile.name,
            "dilation": agent.topology.dilation,
            "nominal_rate_gbps": agent.topology.nominal_rate_gbps,
            "ev_count": agent.options.ev_count,
            "mtu": agent.topology.mtu,
            "link_mtu": agent.topology.link_mtu,
            "planes": [
                {
                    "plane": p.nic.plane,
                    "intf": p.nic.intf,
                    "address": str(p.nic.address),
                    "mac": p.nic.mac,
                    "gateway_mac": p.nic.gateway_mac,
                }
                for p in agent.planes
            ],
            "peers": [peer.name for peer in agent.peers],
            "policies": list(HOST_POLICIES),
            "qpns": {f"{peer}/{policy}": qp.qpn for (peer, policy), qp in agent.qps.items()},
        }

    def cc_profile(self, request: Mapping[str, Any]) -> Reply:
        """The CC profile of the agent's QPs (``{"algorithm", "config"}``, for NSCC the fields of
        mrc_ctl_cc_nscc_cfg in its units); with ``algorithm`` and/or ``config`` given, set it
        first (only while no message is in flight)."""
        reject_unknown(request, set(PROFILE_KEYS))
        agent = self.agent
        if any(key in request for key in PROFILE_KEYS):
            try:
                profile = CcProfile.from_dict(
                    {k: request[k] for k in PROFILE_KEYS if k in request}, mtu=agent.topology.mtu
                )
            except CcProfileError as exc:
                raise BadRequest(f"field '{exc.field}': {exc}", exc.field) from None
            try:
                agent.set_cc_profile(profile)
            except ValueError as exc:
                raise BadRequest(str(exc)) from None
        return {"ok": True, **agent.cc_profile.as_dict()}

    def ev_format(self, request: Mapping[str, Any]) -> Reply:
        """The EV format of the agent's QPs (``format``: srv6, srv6+srh (SRV6 with an SRH),
        stev or udp; ``fields``: the format fields' widths); with ``format`` given, rebuild every QP with EVs of that format
        first (only while no message is in flight; every EV starts GOOD)."""
        reject_unknown(request, {"format", "fields"})
        agent = self.agent
        if "format" in request:
            raw = request.get("fields", [])
            if not isinstance(raw, list) or not all(
                isinstance(w, int) and not isinstance(w, bool) for w in raw
            ):
                raise BadRequest(
                    f"field 'fields': expected a list of field widths in bits, got {raw!r}",
                    "fields",
                )
            try:
                fmt = format_profile(require_str(request, "format"), raw)
            except EvProfileError as exc:
                field = "fields" if raw else "format"
                raise BadRequest(f"field '{field}': {exc}", field) from None
            try:
                agent.set_ev_format(fmt)
            except (ValueError, EvProfileError) as exc:
                raise BadRequest(str(exc)) from None
        fmt = agent.ev_format
        return {"ok": True, "format": fmt.name, "fields": list(fmt.widths)}

    def ev_profiles(self, request: Mapping[str, Any]) -> Reply:
        """The EV profiles of the core: format, ev_min_active, EVs per state, the QPs using
        each (a profile's EV states are shared by its QPs)."""
        reject_unknown(request, set())
        agent = self.agent
        users: dict[int, list[str]] = {}
        for (peer, policy), qp in agent.qps.items():
            users.setdefault(qp.ev_profile.profile_id, []).append(f"{peer}/{policy}")
        out = {}
        for pid, profile in agent.context.ev_profiles.items():
            fmt = profile.profile.fmt
            out[str(pid)] = {
                "format": fmt.mode.value,
                "fields": list(fmt.widths),
                "min_active": profile.min_active,
                "counts": profile.counts(),
                "qps": users.get(pid, []),
            }
        return {"ok": True, "profiles": out}

    def received(self, request: Mapping[str, Any]) -> Reply | Deferred:
        """WRITE_IMMs received (the receiver's completions, numbered from 1) after ``since``;
        with none yet, answers when one comes or ``timeout`` seconds pass (0: at once)."""
        reject_unknown(request, {"since", "timeout"})
        agent = self.agent
        since = get_int(request, "since", low=0) or 0
        timeout = get_float(request, "timeout", default=0.0)
        deadline = agent.now() + timeout

        def reply() -> Reply:
            got = [dict(r) for r in agent.received_imm if int(r["seq"]) > since]
            return {"ok": True, "received": got, "last": agent.received_seq}

        if agent.received_seq > since or timeout == 0:
            return reply()
        return deferred_until(
            agent, lambda now: reply() if now >= deadline or agent.received_seq > since else None,
            deadline,
        )  # fmt: skip

    def ev_events(self, request: Mapping[str, Any]) -> Reply:
        """EV state changes (profile, EV, old and new state, why, when) numbered from 1; those
        after ``since`` (default 0: every one kept, the last 4096)."""
        reject_unknown(request, {"since"})
        since = get_int(request, "since", low=0) or 0
        events = [dict(e) for e in self.agent.ev_events if int(e["seq"]) > since]
        last = events[-1]["seq"] if events else since
        return {"ok": True, "events": events, "last": last}

    def ep_probe(self, request: Mapping[str, Any]) -> Reply | Deferred:
        """EV probes after ``mrc_ctl_ep_batch_send_wait``: send every request of ``requests``
        (each ``req_id``, ``ev``, ``format`` srv6|srv6+srh|stev|udp, and either ``sgid``/``dgid``
        or ``peer``/``plane``; an SRV6 EV may be given as its carrier address, an SRV6+SRH one
        as its carrier address with the SRH's single segment in ``segment``) in traffic class
        ``dscp``, and answer with the responses in arrival order (``rtt`` in ns of real-fabric
        time, the responder's service time taken off) when all came back or ``timeout_ns``
        (real-fabric ns) passed."""
        reject_unknown(request, {"requests", "dscp", "timeout_ns"})
        raw = request.get("requests")
        if not isinstance(raw, list) or not raw or not all(isinstance(r, dict) for r in raw):
            raise BadRequest("field 'requests': expected a non-empty list of objects", "requests")
        requests = [self._ep_request(i, r) for i, r in enumerate(raw)]
        dscp = get_int(request, "dscp", default=48, low=0, high=63)
        timeout_ns = get_int(request, "timeout_ns", default=2_000_000, low=1, high=1 << 32)
        assert dscp is not None and timeout_ns is not None

        def render(responses: list[EndpointResponse], complete: bool) -> Reply:
            return {
                "ok": True,
                "complete": complete,
                "responses": [
                    {"req_id": r.req_id, "port": r.port, "rtt": r.rtt_ns,
                     "adj_svc_time": r.adj_svc_time}
                    for r in responses
                ],
            }  # fmt: skip

        try:
            return ep_batch_reply(
                self.agent, "ev_probe", requests, dscp=dscp, timeout=timeout_ns * 1e-9,
                render=render,
            )  # fmt: skip
        except EndpointError as exc:
            field = "requests" if exc.index is None else f"requests[{exc.index}]"
            raise BadRequest(f"field '{field}': {exc}", field) from None

    def _ep_request(self, i: int, r: Mapping[str, Any]) -> EpRequest:
        agent = self.agent
        name = f"requests[{i}]"
        allowed = {"req_id", "ev", "segment", "format", "sgid", "dgid", "peer", "plane", "port"}
        for key in r:
            if key not in allowed:
                raise BadRequest(f"field '{name}.{key}': unknown field", f"{name}.{key}")
        req_id = get_int(r, "req_id", low=0, high=0xFEFF, required=True)
        fmt = str(r.get("format", "stev")).lower()
        if fmt not in ("srv6", SRV6_SRH_NAME, "stev", "udp"):
            raise BadRequest(
                f"field '{name}.format': expected srv6, {SRV6_SRH_NAME}, stev or udp",
                f"{name}.format",
            )
        if "segment" in r and fmt != SRV6_SRH_NAME:
            raise BadRequest(
                f"field '{name}.segment': only an {SRV6_SRH_NAME} EV has an SRH segment",
                f"{name}.segment",
            )
        ev_raw = r.get("ev")
        if fmt in ("srv6", SRV6_SRH_NAME) and isinstance(ev_raw, str):
            ev = _address(ev_raw, f"{name}.ev", "a carrier address")
            if fmt == SRV6_SRH_NAME:
                segment = r.get("segment")
                if not isinstance(segment, str):
                    raise BadRequest(
                        f"field '{name}.segment': expected the SRH segment's address",
                        f"{name}.segment",
                    )
                ev = ev << 128 | _address(segment, f"{name}.segment", "the SRH segment's address")
        else:
            ev_int = get_int(r, "ev", low=0, required=True)
            assert ev_int is not None
            ev = ev_int
        if "peer" in r:
            peer = next((h for h in agent.peers if h.name == r["peer"]), None)
            plane = get_int(r, "plane", low=0, high=len(agent.host.nics) - 1, default=0)
            if peer is None or plane is None:
                raise BadRequest(f"field '{name}.peer': expected another host", f"{name}.peer")
            sgid: object = agent.host.nic(plane).address
            dgid: object = peer.nic(plane).address
        else:
            sgid, dgid = r.get("sgid"), r.get("dgid")
            if not isinstance(sgid, str) or not isinstance(dgid, str):
                raise BadRequest(
                    f"field '{name}': give sgid and dgid (addresses) or peer and plane", name
                )
        port = get_int(r, "port", low=1, high=32)
        assert req_id is not None
        try:
            return EpRequest.parse(req_id, sgid, dgid, ev, fmt, port)
        except EndpointError as exc:
            raise BadRequest(f"field '{name}': {exc}", name) from None

    def stats(self, request: Mapping[str, Any]) -> Reply:
        """All statistics of the agent and the core; with ``counters`` true only the core's
        integer counters (``{"core": {...}}``), which a sampler reads every interval."""
        reject_unknown(request, {"counters"})
        counters = request.get("counters", False)
        if not isinstance(counters, bool):
            raise BadRequest(
                f"field 'counters': expected true or false, got {counters!r}", "counters"
            )
        if counters:
            return {"ok": True, "stats": {"core": self.agent.counters()}}
        return {"ok": True, "stats": self.agent.stats()}

    def fidelity(self, request: Mapping[str, Any]) -> Reply:
        """The largest loop scheduling gap and pacing lag since the previous ``fidelity``
        request, and the agent's CPU seconds (read every interval by a run's sampler)."""
        reject_unknown(request, set())
        return {"ok": True, **self.agent.fidelity()}

    # -- regions ------------------------------------------------------------------------------

    def register(self, request: Mapping[str, Any]) -> Reply:
        """Register a named region of ``size`` bytes; returns its ``addr`` and ``rkey``."""
        reject_unknown(request, {"name", "size"})
        name = require_str(request, "name")
        size = require_int(request, "size", low=1, high=MAX_REGION)
        agent = self.agent
        if name in agent.regions:
            raise BadRequest(
                f"field 'name': region {name!r} is already registered (choose another name)",
                "name",
            )
        addr = agent.region_cursor
        region = agent.context.register_region(addr, size)
        agent.region_cursor = addr + -(-size // REGION_ALIGN) * REGION_ALIGN + REGION_ALIGN
        agent.regions[name] = region
        return {"ok": True, "name": name, "addr": region.addr, "rkey": region.rkey, "size": size}

    def regions(self, request: Mapping[str, Any]) -> Reply:
        """Every registered region."""
        reject_unknown(request, set())
        return {
            "ok": True,
            "regions": {
                name: {"addr": r.addr, "rkey": r.rkey, "size": r.length}
                for name, r in self.agent.regions.items()
            },
        }

    # -- transfers ----------------------------------------------------------------------------

    def transfer(self, request: Mapping[str, Any]) -> Reply:
        """Start writing pattern data (or a file) to a peer's region."""
        reject_unknown(
            request,
            {"peer", "addr", "rkey", "size", "policy", "message_size", "imm", "seed", "file"},
        )
        agent = self.agent
        peers = [p.name for p in agent.peers]
        peer = require_str(request, "peer")
        if peer not in peers:
            raise BadRequest(
                f"field 'peer': {peer!r} is not another host of {agent.topology.name} "
                f"(peers: {', '.join(peers)})",
                "peer",
            )
        addr = require_int(request, "addr", low=0, high=(1 << 64) - 1)
        rkey = require_int(request, "rkey", low=0, high=(1 << 32) - 1)
        policy = get_str(request, "policy", default="mrc", choices=HOST_POLICIES)
        assert policy is not None
        message_size = get_int(
            request, "message_size", default=DEFAULT_MESSAGE_SIZE, low=1, high=1 << 30
        )
        assert message_size is not None
        imm = get_int(request, "imm", low=0, high=(1 << 32) - 1)
        file = get_str(request, "file")
        seed: int | None
        if file is not None:
            if "seed" in request and request["seed"] is not None:
                raise BadRequest("field 'seed': give either 'seed' or 'file', not both", "seed")
            data = self._read_file(file)
            size = get_int(request, "size", default=len(data), low=1, high=len(data))
            assert size is not None
            data = data[:size]
            seed = None
            source = file
        else:
            size = require_int(request, "size", low=1, high=MAX_TRANSFER)
            seed = get_int(request, "seed", default=DEFAULT_SEED, low=0)
            assert seed is not None
            data = pattern(seed, size)
            source = "pattern"
        qp = agent.qps[(peer, policy)]
        if qp.error is not None:
            raise BadRequest(
                f"field 'policy': the {policy} QP to {peer} failed earlier ({qp.error}) and "
                "cannot send any more: restart the agent or use another policy",
                "policy",
            )
        transfer = Transfer(
            id=0,
            peer=peer,
            addr=addr,
            rkey=rkey,
            size=size,
            message_size=message_size,
            policy=policy,
            imm=imm,
            seed=seed,
            source=source,
            data=data,
            sha256=sha256_hex(data),
            started=agent.now(),
        )
        agent.start_transfer(transfer)
        return {
            "ok": True,
            "transfer": transfer.id,
            "size": size,
            "messages": transfer.messages,
            "seed": seed,
            "sha256": transfer.sha256,
            "qpn": transfer.qpn,
        }

    @staticmethod
    def _read_file(name: str) -> bytes:
        path = Path(name)
        try:
            info = path.stat()
            if not stat.S_ISREG(info.st_mode):
                raise BadRequest(f"field 'file': {name} is not a regular file", "file")
            if info.st_size > MAX_TRANSFER:
                raise BadRequest(
                    f"field 'file': {name} has {info.st_size} bytes, more than {MAX_TRANSFER}",
                    "file",
                )
            data = path.read_bytes()
        except FileNotFoundError:
            raise BadRequest(f"field 'file': no file {name}", "file") from None
        except OSError as exc:
            raise BadRequest(f"field 'file': cannot read {name}: {exc.strerror}", "file") from None
        if not data:
            raise BadRequest(f"field 'file': {name} is empty (nothing to transfer)", "file")
        return data[:MAX_TRANSFER]

    def wait(self, request: Mapping[str, Any]) -> Reply | Deferred:
        """Answer when the transfers are done or failed, or when ``timeout`` seconds pass."""
        reject_unknown(request, {"transfers", "timeout"})
        agent = self.agent
        ids = get_int_list(request, "transfers")
        if ids is None:
            ids = list(agent.transfers)
        for transfer_id in ids:
            if transfer_id not in agent.transfers:
                raise BadRequest(
                    f"field 'transfers': no transfer {transfer_id} on {agent.host.name} "
                    f"(transfers: {sorted(agent.transfers) or 'none'})",
                    "transfers",
                )
        timeout = get_float(request, "timeout", default=60.0)
        deadline = agent.now() + timeout

        def reply(now: float) -> Reply:
            summaries = {str(i): agent.transfers[i].summary(now) for i in ids}
            return {
                "ok": True,
                "complete": all(s["state"] != "running" for s in summaries.values()),
                "failed": [int(i) for i, s in summaries.items() if s["state"] == "failed"],
                "transfers": summaries,
            }

        if all(agent.transfers[i].state != "running" for i in ids) or timeout == 0:
            return reply(agent.now())
        deferred = Deferred()

        def check(now: float) -> bool:
            if deferred.done:
                return True
            if now >= deadline or all(agent.transfers[i].state != "running" for i in ids):
                deferred.resolve(reply(now))
                return True
            return False

        agent.add_waiter(check, deadline)
        return deferred

    # -- paths and EVs ------------------------------------------------------------------------

    def _peer_policy(self, request: Mapping[str, Any], required: bool) -> tuple[list[str], str]:
        agent = self.agent
        peers = [p.name for p in agent.peers]
        peer = get_str(request, "peer", required=required)
        if peer is not None and peer not in peers:
            raise BadRequest(
                f"field 'peer': {peer!r} is not another host of {agent.topology.name} "
                f"(peers: {', '.join(peers)})",
                "peer",
            )
        policy = get_str(request, "policy", default="mrc", choices=HOST_POLICIES)
        assert policy is not None
        return ([peer] if peer is not None else peers), policy

    def paths(self, request: Mapping[str, Any]) -> Reply:
        """The EV -> path -> state table of the QPs towards each peer (one policy)."""
        reject_unknown(request, {"peer", "policy"})
        peers, policy = self._peer_policy(request, required=False)
        out: dict[str, Any] = {}
        for peer in peers:
            qp = self.agent.qps[(peer, policy)]
            evs = qp.ev_table.evs()
            by_path: dict[str, dict[str, Any]] = {}
            for info in evs:
                entry = by_path.setdefault(info.path, {"plane": info.plane, "evs": 0, "states": {}})
                entry["evs"] += 1
                entry["states"][info.state.value] = entry["states"].get(info.state.value, 0) + 1
            out[peer] = {
                "qpn": qp.qpn,
                "remote_qpn": qp.remote_qpn,
                "policy": policy,
                "paths": by_path,
                "evs": [
                    {
                        "ev": info.ev,
                        "wire": info.wire,
                        "path": info.path,
                        "plane": info.plane,
                        "state": info.state.value,
                        "since": info.since,
                    }
                    for info in evs
                ],
            }
        return {"ok": True, "paths": out}

    def set_ev(self, request: Mapping[str, Any]) -> Reply:
        """Operator action: set one EV, or every EV of a path, DENIED, GOOD or UNKNOWN."""
        reject_unknown(request, {"peer", "policy", "state", "ev", "path"})
        peers, policy = self._peer_policy(request, required=True)
        try:
            state = operator_state(require_str(request, "state").lower())
        except ValueError:
            raise BadRequest(
                f"field 'state': expected DENIED, GOOD or UNKNOWN, got {request['state']!r}",
                "state",
            ) from None
        agent = self.agent
        qp = agent.qps[(peers[0], policy)]
        evs = qp.ev_table.evs()
        ev = get_int(request, "ev", low=0)
        label = get_str(request, "path")
        if (ev is None) == (label is None):
            raise BadRequest("give exactly one of the fields 'ev' and 'path'", "ev")
        if ev is not None:
            chosen = [info.ev for info in evs if info.ev == ev]
            if not chosen:
                raise BadRequest(
                    f"field 'ev': {ev:#x} is not an EV of the {policy} QP to {peers[0]} "
                    "(see the 'paths' command)",
                    "ev",
                )
        else:
            chosen = [info.ev for info in evs if info.path == label]
            if not chosen:
                labels = sorted({info.path for info in evs})
                raise BadRequest(
                    f"field 'path': no path {label!r} to {peers[0]} (paths: {', '.join(labels)})",
                    "path",
                )
        now = agent.now()
        agent.context.set_ev_states(qp.qpn, chosen, state, now)
        agent.after_core(now)
        return {
            "ok": True,
            "peer": peers[0],
            "policy": policy,
            "state": state.value,
            "evs": len(chosen),
            "counts": qp.ev_table.counts(),
        }

    # -- integrity ----------------------------------------------------------------------------

    def verify(self, request: Mapping[str, Any]) -> Reply:
        """Check a region's bytes against pattern ``seed`` or a ``sha256`` digest."""
        reject_unknown(request, {"region", "offset", "size", "seed", "sha256"})
        agent = self.agent
        name = require_str(request, "region")
        region = agent.regions.get(name)
        if region is None:
            raise BadRequest(
                f"field 'region': no region {name!r} on {agent.host.name} "
                f"(regions: {', '.join(sorted(agent.regions)) or 'none'})",
                "region",
            )
        offset = get_int(request, "offset", default=0, low=0, high=region.length - 1)
        assert offset is not None
        size = get_int(
            request, "size", default=region.length - offset, low=1, high=region.length - offset
        )
        assert size is not None
        seed = get_int(request, "seed", low=0)
        digest = get_str(request, "sha256")
        if (seed is None) == (digest is None):
            raise BadRequest("give exactly one of the fields 'seed' and 'sha256'", "seed")
        if digest is not None and (
            len(digest) != 64 or any(c not in "0123456789abcdefABCDEF" for c in digest)
        ):
            raise BadRequest("field 'sha256': expected 64 hex digits", "sha256")
        data = region.view[offset : offset + size]
        result = verify_bytes(data, seed=seed, sha256=digest)
        return {"ok": True, "region": name, "offset": offset, **result.as_dict()}

    # -- lifetime -----------------------------------------------------------------------------

    def quit(self, request: Mapping[str, Any]) -> Reply:
        """Stop the agent after answering."""
        reject_unknown(request, set())
        self.agent.stop()
        return {"ok": True, "host": self.agent.host.name, "stopping": True}


def _address(text: str, field: str, expected: str) -> int:
    """An IPv6 address given as text, as an integer (BadRequest naming ``field`` else)."""
    try:
        return int(ipaddress.IPv6Address(text))
    except ValueError:
        raise BadRequest(f"field '{field}': expected {expected}", field) from None


__all__ = ["Commands"]
