"""The MRC host agent: the sans-IO transport core driven by raw sockets, timers and a control socket.

One :class:`Agent` runs per host (``mrc-host --topo FILE --host h0``). It takes everything it
needs from the fabric model -- the host's NICs (interface, MAC, address, gateway MAC) and every
path to every other host -- and never computes an address or a path itself. It then:

- prepares each plane NIC (:mod:`host.agent.nic_setup`) and opens one ``AF_PACKET`` socket on it
  (:mod:`host.agent.sockets`);
- creates a :class:`host.transport.api.Context` and, for every peer and every transport policy, a QP over
  ``Fabric.paths(host, peer)`` with a QP number both ends derive from the fabric
  (:func:`qp_number`), so no QP numbers need exchanging;
- runs one ``selectors`` loop: readable NIC sockets are read in batches until ``EAGAIN`` and fed
  to ``receive_frame``; the core's ``next_timer`` is the select timeout and ``handle_timer`` runs
  when it expires; after either, ``frames_to_send`` goes out on the NIC of each frame's plane and
  the core's events are drained. Nothing polls: an idle agent sleeps in ``select`` until a frame,
  a control request or a core timer;
- serves the control socket (:mod:`host.agent.control`; commands in :mod:`host.agent.commands`).

A frame reaches the core only when its IPv6 destination is the NIC's address (the carrier a
packet has once the switches consumed every uSID before the NIC's); anything else is counted as
``misaddressed`` on its plane and dropped. ``direct`` mode (testing and debugging back-to-back
hosts with no switch in between) also accepts a frame whose carrier still holds uSIDs, provided
the last one is this NIC's: the frame is handed to the core as it arrived.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import selectors
import signal
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from host.agent.commands import Commands
from host.agent.control import ControlServer, SocketInUse
from host.agent.data import Transfer
from host.agent.linkwatch import LinkWatch
from host.agent.nic_setup import NicSetup, SetupError, prepare_nic, require_interface
from host.agent.ocp import OcpProvider, ocp_socket_path
from host.agent.options import DEFAULT_CONTROL_DIR, AgentOptions, default_control_path
from host.agent.pacing import LagMeter, NicWire
from host.agent.sockets import BATCH, PlaneSocket
from host.transport import api
from host.transport.api import MemoryRegion
from host.transport.cc import CcProfile
from host.transport.cc import create as cc_create
from host.transport.cc.fabric import fabric_base_rtt, fabric_cc_profile
from host.transport.config import StackConfig
from host.transport.endpoint import SpineRoutes
from host.transport.events import (
    Completion,
    Event,
    EvStateChanged,
    PathProbeReplied,
    PathProbeTimedOut,
    PlacementFault,
    PortStatusChanged,
    PortStatusRefused,
    QpError,
    RetransmitTimeout,
    WriteImmReceived,
)
from host.transport.evs import EvFormatProfile, GeneratedEvProfile, format_profile
from host.transport.policy import HOST_POLICIES
from targets.delayline import PathLine
from targets.pcap import PcapWriter
from topologies import Fabric, Host, Nic
from topologies import usid as usidlib
from topologies.config import BASE_RTT_LINKS

log = logging.getLogger("mrc.host.agent.agent")

MAX_EVENT_LOG = 4096  # EV transitions, RTOs, probe results, receiver completions kept
READ_TURN = 8  # frames read from one plane before the next plane gets its turn
MIN_TIMER_WAIT = 50e-6  # never select shorter than this after a timer fired without progress
STATS_FINISHED = 32  # finished transfers listed in the statistics
#: data frames a plane NIC holds waiting for the wire before the core is asked for more: the
#: EV of a packet is chosen when a NIC has room, as a NIC's transmit scheduler does
NIC_QUEUE = 8
STATS_FILE_INTERVAL = 1.0  # seconds between --stats-file rewrites
IPV6_DST = slice(38, 54)
#: a frame's IPv6 destination up to its active uSID: the block and the node the path turns at or
#: ends on, all the agents' path latency needs (``_path_links``)
IPV6_DST_ACTIVE = slice(
    IPV6_DST.start, IPV6_DST.start + (usidlib.BLOCK_BITS + usidlib.USID_BITS) // 8
)

POLICY_NAMES = HOST_POLICIES
#: the policies whose QPs towards one peer share an EV profile (those that retire EVs)
SHARED_PROFILE_POLICIES = ("mrc", "no-trim-nack")


def _drain(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while sock.recv(4096):
            pass


def qp_number(local_index: int, peer_index: int, policy: str) -> int:
    """The QP number host ``local_index`` uses towards host ``peer_index`` for ``policy``.

    Every agent creates its QPs at start in one canonical order -- peers by host index, then
    the policies in :data:`host.transport.policy.HOST_POLICIES` order -- and the core numbers QPs in creation
    order from ``api.FIRST_QPN``. So both ends know each other's QP numbers from the fabric
    alone: host A's QP towards B connects to ``qp_number(B.index, A.index, policy)``. The agent
    checks at start that the core numbered its QPs so.
    """
    if local_index == peer_index:
        raise ValueError(f"no QP from host {local_index} to itself")
    position = peer_index - (1 if peer_index > local_index else 0)
    return api.FIRST_QPN + position * len(POLICY_NAMES) + POLICY_NAMES.index(policy)


@dataclass
class PlaneNic:
    """A plane NIC of this host: the fabric's view and the socket."""

    nic: Nic
    sock: PlaneSocket
    setup: NicSetup | None
    address: bytes  # the NIC address, 16 bytes
    mac: bytes  # the NIC MAC, 6 bytes
    ready: Callable[[int], None] | None = None  # the selector callback of the socket
    wire: NicWire | None = None  # the link-rate pacing of data frames (None: not paced)
    #: the path's latency before the socket (None: frames are sent at once)
    delay: PathLine[bytes | bytearray] | None = None
    #: the links of a frame's path by its destination's block and active uSID
    #: (``Fabric.links_to``), learnt as frames are sent: one entry per node of the plane
    links: dict[bytes, int] = field(default_factory=dict)


@dataclass
class Waiter:
    """Something waiting on the loop: ``check(now)`` is called after every step until it
    returns True; ``deadline`` (monotonic seconds) makes the loop wake up for it."""

    check: Callable[[float], bool]
    deadline: float | None = None


class AgentError(RuntimeError):
    """The agent cannot start (one line that says why and what to do)."""


class Agent:
    """One host's MRC transport on real NICs."""

    def __init__(self, fabric: Fabric, options: AgentOptions) -> None:
        self.fabric = fabric
        self.options = options
        try:
            self.host: Host = fabric.host(options.host)
        except KeyError as exc:
            raise AgentError(str(exc.args[0])) from None
        self.peers = [h for h in fabric.hosts if h.name != self.host.name]
        self.control_path = options.control or default_control_path(self.host.name)
        self.topology = fabric.topology
        # protocol time is real-fabric time: the core's clock runs `dilation` times slower
        self.config = StackConfig.profile(
            options.stack_profile,
            mtu=self.topology.mtu, ev_count=options.ev_count, dilation=self.topology.dilation,
            cc_base_rtt_floor=fabric_base_rtt(self.topology),
        )  # fmt: skip
        self.cc_profile = fabric_cc_profile(
            self.topology, CcProfile(options.cc, dict(options.cc_params)), self.config
        )
        self.selector = selectors.DefaultSelector()
        self.planes: list[PlaneNic] = []
        self.started = time.monotonic()
        self.wall_at_start = time.time()
        self.stopping = False
        self.exit_code = 0
        self.transfers: dict[int, Transfer] = {}
        self._next_transfer = 1
        self._wr_transfer: dict[int, int] = {}  # wr_id -> transfer id
        self._finished: deque[int] = deque(maxlen=STATS_FINISHED)  # latest finished transfers
        self._posting: dict[int, Transfer] = {}  # transfers with messages not yet posted
        self._next_wr = 1
        self.waiters: list[Waiter] = []
        self.event_log: deque[dict[str, Any]] = deque(maxlen=MAX_EVENT_LOG)
        #: EV state changes (profile, EV, old, new) for the ev-events command, numbered from 1
        self.ev_events: deque[dict[str, Any]] = deque(maxlen=MAX_EVENT_LOG)
        self.ev_event_seq = 0
        #: WRITE_IMMs received (the receiver's completions), numbered from 1, for ``received``
        self.received_imm: deque[dict[str, Any]] = deque(maxlen=MAX_EVENT_LOG)
        self.received_seq = 0
        self.loop_wakeups = 0
        self.loop_gap = LagMeter()  # wake-ups later than the select timeout asked for
        self.timer_runs = 0
        self.core_errors = 0
        self.direct_accepted = 0  # frames accepted with uSIDs left (direct mode)
        self._direct_ok: dict[bytes, bool] = {}  # destination -> accepted, per carrier seen
        self.regions: dict[str, MemoryRegion] = {}
        self.region_cursor = 1 << 32  # virtual address of the next region
        self._timer: float | None = None
        self._readable: list[PlaneNic] = []  # NIC sockets found readable in this step
        self._stats_written = 0.0
        self.pcap = PcapWriter(options.pcap) if options.pcap else None
        self.control: ControlServer | None = None
        self.ocp: OcpProvider | None = None  # the OCP MRC API provider (docs/ocp-api.md)

        self.context = api.Context(
            self.host.name,
            self.host.nics,
            config=self.config,
            seed=options.seed if options.seed is not None else self.host.index + 1,
            routes=SpineRoutes.from_paths(
                path
                for peer in self.fabric.hosts
                if peer.name != self.host.name
                for path in self.fabric.paths(self.host.name, peer.name)
            ),
        )
        self.cq = self.context.create_cq()
        self.qps: dict[tuple[str, str], Any] = {}
        #: the EV format of every QP (mrc-host --ev-format, the ev-format command)
        self.ev_format = format_profile(options.ev_format)
        self._peer_profiles: dict[str, int] = {}  # peer -> the EV profile its QPs share
        self._rebuilding = False  # set_ev_format: QPs re-created with their fabric numbers
        for peer in self.peers:
            paths = fabric.paths(self.host.name, peer.name)
            for policy in POLICY_NAMES:
                qp = self._create_qp(peer, paths, policy)
                self.qps[(peer.name, policy)] = qp

    # -- set-up -------------------------------------------------------------------------------

    def _require_idle(self) -> None:
        """Raise ValueError, naming them, if any QP has messages in flight."""
        busy = [
            f"{peer}/{policy}"
            for (peer, policy), qp in self.qps.items()
            if qp.describe()["pending_messages"] or qp.describe()["outstanding"]
        ]
        if busy:
            raise ValueError(f"QPs with messages in flight ({', '.join(busy[:4])}): wait first")

    def fit_cc(self, profile: CcProfile) -> CcProfile:
        """``profile`` as this host's QPs run it: the NSCC fields it leaves unset come from the
        fabric (the agent's own profile, and the OCP controller API's CC profiles)."""
        return fabric_cc_profile(self.topology, profile, self.config)

    def set_cc_profile(self, profile: CcProfile) -> CcProfile:
        """Use ``profile`` on every QP from now on (NSCC fields it leaves unset come from the
        fabric) and return the effective one. Refused while any QP has messages in flight: a
        window is not handed from one algorithm to another mid-transfer."""
        self._require_idle()
        effective = self.fit_cc(profile)
        for qp in self.qps.values():
            qp.cc = cc_create(effective, mtu=self.config.mtu, config=qp.config)
        self.cc_profile = effective
        return effective

    def _ev_profile(self, peer: Host, policy: str) -> GeneratedEvProfile | int:
        """The EV profile of the QP to ``peer`` for ``policy``: the QPs of the failover
        policies towards one peer share one profile (what one finds failed, the other avoids);
        the baselines keep their own."""
        profile = GeneratedEvProfile(count=self.options.ev_count, fmt=self.ev_format)
        if policy not in SHARED_PROFILE_POLICIES:
            return profile
        found = self._peer_profiles.get(peer.name)
        if found is None:
            found = self.context.create_ev_profile(profile)
            self._peer_profiles[peer.name] = found
        return found

    def set_ev_format(self, fmt: EvFormatProfile) -> EvFormatProfile:
        """Rebuild every QP of the agent with EVs of format ``fmt`` (same QP numbers, new EV
        profiles, every EV GOOD). Refused while any QP has messages in flight."""
        self._require_idle()
        for qp in self.qps.values():
            self.context.destroy_qp(qp.qpn)
        for profile in self._peer_profiles.values():
            self.context.destroy_ev_profile(profile)
        self._peer_profiles.clear()
        self.ev_format = fmt
        self._rebuilding = True
        try:
            for peer in self.peers:
                paths = self.fabric.paths(self.host.name, peer.name)
                for policy in POLICY_NAMES:
                    self.qps[(peer.name, policy)] = self._create_qp(peer, paths, policy)
        finally:
            self._rebuilding = False
        return fmt

    def _create_qp(self, peer: Host, paths: list[Any], policy: str) -> Any:
        expected = qp_number(self.host.index, peer.index, policy)
        qp = self.context.create_qp(
            peer.name,
            paths,
            cq=self.cq,
            policy=policy,
            cc=self.cc_profile,
            ev_profile=self._ev_profile(peer, policy),
            remote_qpn=qp_number(peer.index, self.host.index, policy),
            qpn=expected if self._rebuilding else None,
        )
        if qp.qpn != expected:
            raise AgentError(
                f"the transport core numbered the QP to {peer.name} ({policy}) {qp.qpn:#x}, "
                f"expected {expected:#x}: QP numbering no longer matches host.agent.qp_number"
            )
        return qp

    def open(self) -> None:
        """Prepare the NICs, open their sockets and the control socket."""
        for nic in self.host.nics:
            if self.options.setup:
                try:
                    done: NicSetup | None = prepare_nic(
                        nic.intf, mac=nic.mac, mtu=self.topology.link_mtu, host=self.host.name
                    )
                except SetupError as exc:
                    raise AgentError(str(exc)) from None
            else:
                try:
                    require_interface(nic.intf, self.host.name)
                except SetupError as exc:
                    raise AgentError(str(exc)) from None
                done = None
            try:
                sock = PlaneSocket(
                    nic.plane,
                    nic.intf,
                    ring=self.options.rx_ring,
                    max_frame=self.topology.link_mtu + 14,
                )
            except PermissionError:
                raise AgentError(
                    "mrc-host needs root (CAP_NET_RAW) for AF_PACKET sockets: run it with sudo"
                ) from None
            except OSError as exc:
                raise AgentError(f"plane {nic.plane}: {exc.strerror or exc}") from None
            plane = PlaneNic(
                nic, sock, done, nic.address.packed, bytes.fromhex(nic.mac.replace(":", ""))
            )
            if self.options.link_latency_us > 0:
                # each link's latency, and a frame's serialisation on each (BMv2's ports, like
                # the NIC's pacing, let a frame go whole when it may start); each frame by its
                # own time: a NIC's frames to different hosts share one link only
                plane.delay = PathLine(
                    self.options.link_latency_us * 1e-6,
                    8 / (self.topology.link_rate_mbps * 1e6),
                )
            if self.options.pace:
                plane.wire = NicWire(
                    self.topology.link_rate_mbps * 1e6, self.topology.link_mtu + 14
                )
            self.planes.append(plane)
            self.selector.register(sock.sock, selectors.EVENT_READ, self._make_reader(plane))
        try:
            self.links: LinkWatch | None = LinkWatch({p.nic.intf: p.nic.plane for p in self.planes})
        except OSError as exc:  # no netlink: NIC failures are found by losses only
            log.warning("no link state of the NICs (%s): NIC failures found by losses", exc)
            self.links = None
        if self.links is not None:
            self.selector.register(self.links.sock, selectors.EVENT_READ, self._on_links)
        try:
            self.control = ControlServer(self.control_path, Commands(self).handle)
        except SocketInUse as exc:
            raise AgentError(str(exc)) from None
        except OSError as exc:
            raise AgentError(f"control socket {self.control_path}: {exc.strerror or exc}") from None
        self.control.register(self.selector)
        try:
            self.ocp = OcpProvider(self, ocp_socket_path(self.control_path))
        except SocketInUse as exc:
            raise AgentError(str(exc)) from None
        except OSError as exc:
            raise AgentError(f"OCP API socket: {exc.strerror or exc}") from None
        self.ocp.server.register(self.selector)
        log.info(
            "%s ready: planes %s, control %s%s",
            self.host.name,
            ", ".join(f"{p.nic.intf}={p.nic.address}" for p in self.planes),
            self.control_path,
            " (direct mode)" if self.options.direct else "",
        )

    def _on_links(self, mask: int) -> None:
        """A NIC's link went down or came up: the core retires its plane's EVs at once (or
        probes them back) and tells the peers (port status update)."""
        assert self.links is not None
        changes = self.links.changes()
        if not changes:
            return
        now = self.now()
        for plane, up in changes:  # logged and listed as PortStatusChanged events
            self.context.set_port_state(plane, up, now)
        self.after_core(now)

    def _make_reader(self, plane: PlaneNic) -> Callable[[int], None]:
        def ready(mask: int) -> None:
            if mask & selectors.EVENT_READ:
                if plane.sock.has_frames():
                    self._readable.append(plane)
                else:
                    # readable with nothing to read: a socket error (the link went down) that
                    # would wake select() forever unless it is taken
                    error = plane.sock.take_error()
                    if error:
                        log.warning("%s: %s", plane.nic.intf, os.strerror(error))
            if mask & selectors.EVENT_WRITE and plane.sock.drain():
                self.selector.modify(plane.sock.sock, selectors.EVENT_READ, ready)

        plane.ready = ready
        return ready

    # -- the loop -----------------------------------------------------------------------------

    def now(self) -> float:
        """The core's clock: CLOCK_MONOTONIC seconds (the same for every agent of a machine)."""
        return time.monotonic()

    def run(self) -> int:
        """Serve until ``quit`` or a signal; returns the exit code."""
        # A signal only sets a flag; the wake-up socket makes select() return so the loop sees
        # it (Python restarts an interrupted select with the remaining timeout).
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        self.selector.register(wake_r, selectors.EVENT_READ, lambda mask: _drain(wake_r))
        old_fd = -1
        try:
            old_fd = signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._on_signal)
        except ValueError:  # not the main thread (embedded use): no signal handling
            pass
        try:
            while not self.stopping:
                self.step()
        finally:
            with contextlib.suppress(ValueError):
                signal.set_wakeup_fd(old_fd)
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(wake_r)
            wake_r.close()
            wake_w.close()
            self.close()
        return self.exit_code

    def _on_signal(self, signum: int, frame: object) -> None:
        log.info("%s: signal %d, stopping", self.host.name, signum)
        self.stopping = True

    def step(self) -> None:
        """Wait for one round of readiness or the next timer, then run the core on it."""
        timeout = self._select_timeout()
        due = None if timeout is None else self.now() + timeout
        try:
            ready = self.selector.select(timeout)
        except InterruptedError:
            ready = []
        self.loop_wakeups += 1
        if due is not None:
            self.loop_gap.add(self.now() - due)  # woke later than it asked: not scheduled
        self._readable.clear()
        for key, mask in ready:
            key.data(mask)
        if self._readable:
            self._receive()
        now = self.now()
        self._release(now)
        if self._timer is not None and now >= self._timer:
            self.timer_runs += 1
            try:
                self.context.handle_timer(now)
            except Exception:
                self.core_errors += 1
                log.exception("core: handle_timer failed")
        self.after_core(now)
        if self.pcap is not None:
            self.pcap.flush()  # a capture is readable while the agent runs

    def _select_timeout(self) -> float | None:
        timer = self._timer
        for plane in self.planes:
            due = plane.wire.next_release() if plane.wire is not None else None
            if due is not None and (timer is None or due < timer):
                timer = due
            due = plane.delay.next_due() if plane.delay is not None else None
            if due is not None and (timer is None or due < timer):
                timer = due
        timeout = None if timer is None else max(timer - self.now(), 0.0)
        if self.options.stats_file is not None:
            left = self._stats_written + STATS_FILE_INTERVAL - self.now()
            timeout = max(left, 0.0) if timeout is None else min(timeout, max(left, 0.0))
        for waiter in self.waiters:
            if waiter.deadline is not None:
                left = max(waiter.deadline - self.now(), 0.0)
                timeout = left if timeout is None else min(timeout, left)
        return timeout

    def _receive(self) -> None:
        """Read every plane in turns of :data:`READ_TURN` frames until a round finds nothing.

        Reading the planes in small turns, not one plane to exhaustion (nor only the planes that
        were readable when select returned), keeps the order in which the core sees packets of
        different planes close to their arrival order: a long run of one plane before the
        other looks like reordering and triggers SACK-inferred losses. With the receive ring a
        turn on an empty plane costs no system call. What the core has to send goes out after
        every round; events, transfers and the timer are looked at after every :data:`BATCH`
        frames and when the planes are empty.
        """
        ctx = self.context
        pcap = self.pcap
        planes = self.planes
        now = self.now()
        while True:
            taken = 0
            while taken < BATCH:
                got = 0
                for plane in planes:
                    frames, _ = plane.sock.receive_batch(READ_TURN)
                    if not frames:
                        continue
                    # a frame's arrival time is when it is read, not when the batch began: a
                    # batch takes milliseconds of Python, longer than the dilated RTT it would
                    # take off an ACK read late (the RTT is measured to "the time the ACK is
                    # received", RFC 6298 section 3; a timestamp echo gives the send time)
                    now = self.now()
                    got += len(frames)
                    if pcap is not None:
                        wall = self.wall_at_start + (now - self.started)
                        for frame in frames:
                            pcap.write(frame, wall)
                    index = plane.nic.plane
                    address = plane.address
                    for frame in frames:
                        if frame[IPV6_DST] != address and not self._other_destination(plane, frame):
                            continue
                        try:
                            ctx.receive_frame(index, frame, now)
                        except Exception:
                            self.core_errors += 1
                            if self.core_errors <= 10:
                                log.exception("core: receive_frame raised (%d bytes)", len(frame))
                if not got:
                    break
                taken += got
                # ACKs leave without waiting for the batch; what goes now is stamped now
                now = self.now()
                self._send(ctx.frames_to_send(now, self._budget()))
            if taken:
                self.after_core(now)
            if taken < BATCH:  # the last round found every plane empty
                return

    def _other_destination(self, plane: PlaneNic, frame: bytes) -> bool:
        """A frame not addressed to the NIC: accepted in direct mode when its carrier ends
        with the NIC's uSID, else counted as misaddressed (returns False: drop it)."""
        if self.options.direct:
            dst = frame[IPV6_DST]
            ok = self._direct_ok.get(dst)
            if ok is None:
                address = ipaddress.IPv6Address(dst)
                left = usidlib.usids(address)
                ok = bool(left) and left[-1] == plane.nic.usid and address in self.fabric.block
                if len(self._direct_ok) < 4096:
                    self._direct_ok[dst] = ok
            if ok:
                self.direct_accepted += 1
                return True
        plane.sock.misaddressed += 1
        return False

    def after_core(self, now: float) -> None:
        """Send what the core has, drain its events, advance transfers, re-arm the timer."""
        ctx = self.context
        self._send(ctx.frames_to_send(now, self._budget()))
        while True:
            event = ctx.next_event()
            if event is None:
                break
            self._on_event(event, now)
        if self._feed_transfers():  # posting messages takes time (about 10 ms per MiB)
            self._send(ctx.frames_to_send(self.now(), self._budget()))
        before = self._timer
        self._timer = ctx.next_timer()
        if self._timer is not None and before is not None and self._timer <= now and before <= now:
            # the core kept a timer in the past: do not spin on it
            self._timer = now + MIN_TIMER_WAIT
        if self.waiters:
            self.waiters = [w for w in self.waiters if not w.check(now)]
        if self.options.stats_file is not None and now - self._stats_written >= STATS_FILE_INTERVAL:
            self.write_stats_file(now)

    def _send(self, frames: list[tuple[int, bytes | bytearray]]) -> None:
        if not frames:
            return
        planes = self.planes
        now = self.now()
        for index, frame in frames:
            try:
                plane = planes[index]
            except IndexError:
                self.core_errors += 1
                continue
            if plane.wire is None or plane.wire.offer(frame, now):
                self._transmit(plane, frame)

    def _budget(self) -> dict[int, int] | None:
        """Data frames each plane NIC takes now (None when NICs are not paced): the core
        chooses an EV only for a packet a NIC can put on the wire soon (frames_to_send)."""
        if not self.options.pace:
            return None
        return {
            p.nic.plane: NIC_QUEUE - len(p.wire.waiting) if p.wire is not None else NIC_QUEUE
            for p in self.planes
        }

    def _release(self, now: float) -> None:
        """Put on the wire the data frames whose turn has come (link-rate pacing)."""
        for plane in self.planes:
            if plane.wire is not None and plane.wire.waiting:
                for frame in plane.wire.release(now):
                    self._transmit(plane, frame)
            if plane.delay is not None:
                while (late := plane.delay.pop(now)) is not None:
                    self._send_now(plane, late)

    def _transmit(self, plane: PlaneNic, frame: bytes | bytearray) -> None:
        if plane.delay is not None:  # the path's latency first (options.link_latency_us)
            plane.delay.put(frame, self.now(), self._path_links(plane, frame))
            return
        self._send_now(plane, frame)

    def _path_links(self, plane: PlaneNic, frame: bytes | bytearray) -> int:
        """The links ``frame`` crosses to its last NIC, from its IPv6 destination's block and
        active uSID: within the rack or between racks (``Fabric.links_to``)."""
        key = bytes(frame[IPV6_DST_ACTIVE])
        links = plane.links.get(key)
        if links is None:
            if len(key) < IPV6_DST_ACTIVE.stop - IPV6_DST_ACTIVE.start:  # no IPv6 header: the
                return BASE_RTT_LINKS  # longest path bounds it
            destination = ipaddress.IPv6Address(key + bytes(16 - len(key)))
            links = plane.links[key] = self.fabric.links_to(plane.nic, destination)
        return links

    def _send_now(self, plane: PlaneNic, frame: bytes | bytearray) -> None:
        if self.pcap is not None:
            self.pcap.write(frame, time.time())
        if not plane.sock.send(frame) and len(plane.sock.backlog) == 1:
            self.selector.modify(
                plane.sock.sock,
                selectors.EVENT_READ | selectors.EVENT_WRITE,
                plane.ready,
            )

    # -- events and transfers -------------------------------------------------------------------

    def _on_event(self, event: Event, now: float) -> None:
        if self.ocp is not None and self.ocp.on_event(event):
            return
        if isinstance(event, Completion):
            self._on_completion(event)
            return
        record: dict[str, Any] = {"event": type(event).__name__}
        record.update({k: (v.value if hasattr(v, "value") else v) for k, v in vars(event).items()})
        if isinstance(event, EvStateChanged):
            self.ev_event_seq += 1
            self.ev_events.append({"seq": self.ev_event_seq, **record})
            log.debug(
                "EV %#x (%s, qp %#x): %s -> %s (%s)",
                event.ev, event.path, event.qpn, event.old, event.new, event.reason,
            )  # fmt: skip
        elif isinstance(event, (RetransmitTimeout, QpError)):
            log.info("%s", record)
        elif isinstance(event, PortStatusChanged):
            log.info(
                "port status: %s plane %d %s (%d EVs)",
                event.host, event.plane, "up" if event.up else "down", event.evs,
            )  # fmt: skip
        elif isinstance(event, PortStatusRefused):
            # an update that would take every EV towards its sender away is the operator's
            # to act on (mrc-ctl port / ev commands), not the peer's
            log.warning(
                "port status update from %s on plane %d refused (%s): mask %#x",
                event.source, event.plane, event.reason, event.mask,
            )  # fmt: skip
        elif isinstance(event, PlacementFault):
            log.warning("QP %#x: write into rkey %#x refused: %s", event.qpn, event.rkey,
                        event.error)  # fmt: skip
        elif not isinstance(event, (PathProbeReplied, PathProbeTimedOut)):
            return  # probe sends are frequent and in the core's counters
        self.event_log.append(record)

    def _on_completion(self, done: Completion) -> None:
        if isinstance(done, WriteImmReceived) or done.opcode == "recv_write_imm":
            self.received_seq += 1
            self.received_imm.append(
                {
                    "seq": self.received_seq,
                    "peer": self._peer_of(done.qpn),
                    "qpn": done.qpn,
                    "imm": done.imm,
                    "byte_len": done.byte_len,
                    "addr": done.remote_addr,
                    "status": done.status,
                    "time": done.time,
                }
            )
            return
        transfer_id = self._wr_transfer.pop(done.wr_id, None)
        if transfer_id is None:
            return
        transfer = self.transfers[transfer_id]
        transfer.wr_ids.discard(done.wr_id)
        if done.status != "ok":
            if transfer.error is None:
                transfer.error = (
                    f"message at offset {done.remote_addr - transfer.addr}: {done.status}"
                )
                transfer.finished = done.time
                transfer.data = b""  # the core keeps what it still needs of posted messages
                self._finished.append(transfer.id)
            return
        transfer.messages_completed += 1
        transfer.completed_bytes += done.byte_len
        if transfer.messages_completed >= transfer.messages and transfer.error is None:
            transfer.finished = done.time
            transfer.data = b""
            self._finished.append(transfer.id)
            log.debug(
                "transfer %d to %s done: %d bytes in %.3f s",
                transfer.id, transfer.peer, transfer.size, transfer.finished - transfer.started,
            )  # fmt: skip

    def _peer_of(self, qpn: int) -> str | None:
        """The host at the other end of local QP ``qpn`` (None: the QP is gone)."""
        try:
            return self.context.qp(qpn).remote_host
        except KeyError:
            return None

    def start_transfer(self, transfer: Transfer) -> None:
        """Register a transfer and post its first window of messages."""
        transfer.id = self._next_transfer
        self._next_transfer += 1
        qp = self.qps[(transfer.peer, transfer.policy)]
        transfer.qpn = qp.qpn
        self.transfers[transfer.id] = transfer
        self._posting[transfer.id] = transfer
        self._post(transfer)
        now = self.now()
        self._send(self.context.frames_to_send(now, self._budget()))
        self._timer = self.context.next_timer()

    def _post(self, transfer: Transfer) -> bool:
        qp = self.qps[(transfer.peer, transfer.policy)]
        posted = False
        while (
            transfer.error is None
            and not transfer.all_posted
            and len(transfer.wr_ids) < self.options.window
        ):
            offset, data, last = transfer.next_message()
            wr_id = self._next_wr
            self._next_wr += 1
            addr = transfer.addr + offset
            if last and transfer.imm is not None:
                qp.post_write_imm(data, addr, transfer.rkey, transfer.imm, wr_id=wr_id)
            else:
                qp.post_write(data, addr, transfer.rkey, wr_id=wr_id)
            transfer.wr_ids.add(wr_id)
            self._wr_transfer[wr_id] = transfer.id
            transfer.next_offset = offset + len(data)
            transfer.messages_posted += 1
            posted = True
        return posted

    def _feed_transfers(self) -> bool:
        """Post more messages of the transfers that have some left (after every loop step:
        only those are looked at, not every transfer the agent ever ran)."""
        if not self._posting:
            return False
        posted = False
        for transfer in list(self._posting.values()):
            if transfer.finished is None and not transfer.all_posted:
                posted |= self._post(transfer)
            if transfer.finished is not None or transfer.all_posted:
                del self._posting[transfer.id]
        return posted

    def add_waiter(self, check: Callable[[float], bool], deadline: float | None) -> None:
        """Call ``check(now)`` after every loop step until it returns True; wake up by ``deadline``."""
        self.waiters.append(Waiter(check, deadline))

    # -- statistics -----------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Everything the agent and the core count (JSON-ready)."""
        now = self.now()
        cpu = os.times()
        core = self.context.stats()
        return {
            "host": self.host.name,
            "time": now,
            "uptime": now - self.started,
            "clock": {"monotonic_at_start": self.started, "wall_at_start": self.wall_at_start},
            "cpu_seconds": {"user": cpu.user, "system": cpu.system},
            "planes": {
                str(p.nic.plane): {
                    "intf": p.nic.intf,
                    **p.sock.counters(),
                    "paced_held": p.wire.held if p.wire is not None else 0,
                    "paced_waiting": len(p.wire.waiting) if p.wire is not None else 0,
                }
                for p in self.planes
            },
            "core": core,
            "agent": {
                "loop_wakeups": self.loop_wakeups,
                "timer_runs": self.timer_runs,
                "core_errors": self.core_errors,
                "direct_accepted": self.direct_accepted,
                "control_requests": self.control.requests if self.control else 0,
                "control_errors": self.control.errors if self.control else 0,
                # connections refused by a cap, and dropped for not reading their replies
                "control_refused": self.control.refused if self.control else 0,
                "control_dropped": self.control.dropped if self.control else 0,
                "pcap_frames": self.pcap.frames if self.pcap else 0,
            },
            "fidelity": {
                "loop_gap": self.loop_gap.as_dict(),
                "pacing_lag": {
                    str(p.nic.plane): p.wire.lag.as_dict()
                    for p in self.planes
                    if p.wire is not None
                },
            },
            "events": list(self.event_log),
            "received_imm": list(self.received_imm),
            "transfer_totals": self._transfer_totals(),
            # running transfers and the last finished ones ("wait" answers for any of them)
            "transfers": {
                str(i): self.transfers[i].summary(now)
                for i in sorted(self._running_ids() | set(self._finished))
            },
        }

    def counters(self) -> dict[str, int]:
        """The core's integer counters alone (a sampler's cheap ``stats``)."""
        return self.context.counters()

    def fidelity(self) -> dict[str, float]:
        """The largest loop scheduling gap and pacing lag since the previous call (a sampler's
        window, see experiments.fidelity), with the CPU seconds the agent used so far."""
        cpu = os.times()
        wires = [p.wire for p in self.planes if p.wire is not None]
        return {
            "time": self.now(),
            "cpu_s": cpu.user + cpu.system,
            "loop_gap_max_s": self.loop_gap.take(),
            "pacing_lag_max_s": max((w.lag.take() for w in wires), default=0.0),
            "pacing_late": sum(w.lag.late for w in wires),
            "loop_late": self.loop_gap.late,
        }

    def _running_ids(self) -> set[int]:
        return {i for i, t in self.transfers.items() if t.finished is None}

    def _transfer_totals(self) -> dict[str, int]:
        totals = {"started": len(self.transfers), "running": 0, "done": 0, "failed": 0,
                  "bytes_completed": 0}  # fmt: skip
        for t in self.transfers.values():
            totals[t.state] += 1
            totals["bytes_completed"] += t.completed_bytes
        return totals

    def write_stats_file(self, now: float | None = None) -> None:
        """Rewrite the ``--stats-file`` atomically."""
        path = self.options.stats_file
        if path is None:
            return
        self._stats_written = self.now() if now is None else now
        try:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(self.stats(), default=str) + "\n")
            tmp.replace(path)
        except OSError as exc:
            log.warning("stats file %s: %s", path, exc.strerror)

    # -- shutdown -------------------------------------------------------------------------------

    def stop(self) -> None:
        """Leave the loop after the current step."""
        self.stopping = True

    def close(self) -> None:
        """Flush captures and statistics, close every socket."""
        if self.options.stats_file is not None:
            self.write_stats_file()
        if self.control is not None:
            self.control.close()
            self.control = None
        if self.ocp is not None:
            self.ocp.close()
            self.ocp = None
        for plane in self.planes:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(plane.sock.sock)
            plane.sock.close()
        self.planes = []
        links = getattr(self, "links", None)
        if links is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(links.sock)
            links.close()
            self.links = None
        if self.pcap is not None:
            self.pcap.close()
        self.selector.close()


__all__ = [
    "Agent",
    "AgentError",
    "AgentOptions",
    "Waiter",
    "DEFAULT_CONTROL_DIR",
    "default_control_path",
    "qp_number",
]
