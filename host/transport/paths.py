"""Path choice of a queue pair: EV states, probing retired EVs back, congestion steering of the
spraying (per-path weights), and the mirror path replies take. See docs/host-stack.md."""

from __future__ import annotations

from host.transport import wire
from host.transport.events import EvStateChanged, PathProbeReplied, PathProbeSent, PathProbeTimedOut
from host.transport.evs import EvFormat, EvSlot, EvState
from host.transport.qp_state import LATE_PROBE_FACTOR, NS, QpState, entry_point

REPLY_CACHE = 1 << 14  # STEV / UDP reply prefixes kept (one per plane and EV echoed)
#: a QP with nothing to send probes an EV group that stays unanswered ever less often: the gap
#: doubles per probe that timed out, up to 2^PROBE_BACKOFF_MAX probe intervals (a peer that is
#: gone must not keep an idle host awake); a QP with work probes every probe_interval, and one
#: that gets work again brings its backed-off probes forward (:meth:`PathChoice._wake_probes`)
PROBE_BACKOFF_MAX = 8


class PathChoice(QpState):
    """Path choice of a queue pair."""

    def _group_of(self, slot: EvSlot) -> int:
        return slot.group if self._cfg.retire_path else -1 - slot.index

    # -- public API ------------------------------------------------------------------------------

    @entry_point
    def set_ev_state(self, slot: EvSlot, new: EvState, reason: str, now: float) -> None:
        """Change an EV's state, with event and statistics; schedules probing when needed."""
        old = self.ev_table.set_state(slot, new, now)
        if old is None:
            return
        profile = self.ev_profile.profile_id
        event = EvStateChanged(
            self.qpn, slot.ev, slot.label, old.value, new.value, reason, now, profile, slot.plane
        )
        self._shared.events.append(event)
        self._stats.ev_transitions.append(
            {"time": now, "qpn": self.qpn, "profile": profile, "ev": slot.ev, "path": slot.label,
             "plane": slot.plane, "old": old.value, "new": new.value, "reason": reason}
        )  # fmt: skip
        if new is EvState.GOOD and self._recycle is not None:
            self._recycle.clear()  # a path is back: spray over the whole cycle again
        if new in (EvState.ASSUMED_BAD, EvState.UNKNOWN):
            key = self._group_of(slot)
            if new is EvState.UNKNOWN:  # probe it now, whatever came before
                self._probe_misses.pop(key, None)
                self._probe_due[key] = now
            elif key not in self._probe_due:
                self._probe_due[key] = now

    def _retire(self, slot: EvSlot, reason: str, now: float) -> None:
        if slot.state is not EvState.GOOD:
            return
        group = [slot]
        if self._cfg.retire_path:
            group += [s for s in self._groups[self._group_of(slot)]
                      if s is not slot and s.state is EvState.GOOD]  # fmt: skip
        allowed = self.ev_table.good_count() - self.ev_profile.min_active
        for n, member in enumerate(group):
            if n >= allowed:
                self._stats.retire_suppressed += 1
                break
            self.set_ev_state(member, EvState.ASSUMED_BAD, reason if n == 0 else "path", now)

    @entry_point
    def set_plane(self, plane: int, up: bool, reason: str, now: float) -> int:
        """A port of this host or of the peer on ``plane`` went down (every GOOD EV of the plane
        ASSUMED_BAD at once, whatever ``ev_min_active`` says: nothing can cross a port that is
        down; what is in flight there is resent on the other planes) or came up (its
        ASSUMED_BAD EVs become UNKNOWN: probed, GOOD on a reply; GOOD at once for a QP that
        never carried traffic). Returns the EVs changed."""
        changed = 0
        if up:
            # probed back; a QP that never carried traffic has no other evidence against these
            # EVs than the port, which is up: GOOD at once (no probes to a peer that may not
            # exist)
            back = EvState.UNKNOWN if self.carried_traffic else EvState.GOOD
            for slot in self.ev_table.slots:
                if slot.plane == plane and slot.state is EvState.ASSUMED_BAD:
                    self.set_ev_state(slot, back, reason, now)
                    changed += 1
            return changed
        for slot in self.ev_table.slots:
            if slot.plane == plane and slot.state in (EvState.GOOD, EvState.UNKNOWN):
                self.set_ev_state(slot, EvState.ASSUMED_BAD, reason, now)
                changed += 1
        for rec in list(self._outstanding.values()):
            if rec.in_net and rec.slot.plane == plane:
                rec.in_net = False
                self.inflight -= rec.length
                self._retx.append(rec)
                rec.losses += 1
                self._stats.port_retransmits += 1
        return changed

    @entry_point
    def probe(self, slot: EvSlot, now: float) -> int:
        """Send a connectionless probe on ``slot``'s path; returns the probe id."""
        probe_id = self._next_probe_id
        self._next_probe_id = (probe_id + 1) & 0xFFFFFFFF or 1
        if self.remote_qpn is None:
            return probe_id
        prefix = self._slot_prefix(slot, wire.DSCP_CONTROL, wire.ECN_NOT_ECT)
        frame = wire.encode_probe(
            prefix, self.remote_qpn, False, slot.plane, slot.spine_hint, slot.wire,
            int(now * NS), probe_id, self.qpn,
        )  # fmt: skip
        self._shared.outbox.append((slot.plane, frame))
        self._probes[probe_id] = (slot, now)
        stats = self._stats
        stats.probes_sent += 1
        stats.packets_sent += 1
        stats.bytes_sent += len(frame)
        self._shared.events.append(PathProbeSent(self.qpn, slot.ev, probe_id, now))
        return probe_id

    @entry_point
    def on_probe_reply(self, pkt: wire.ProbePacket, now: float) -> None:
        """A probe came back: reinstate its EV (and path)."""
        found = self._probes.pop(pkt.probe_id, None)
        if found is None:
            found = self._late_probes.pop(pkt.probe_id, None)
            # past its lateness whenever the QP's timers last ran (they prune these lazily)
            if found is not None and found[1] + LATE_PROBE_FACTOR * self._cfg.probe_timeout <= now:
                found = None
        if found is None:
            self._stats.drops["unknown_probe"] += 1
            return
        slot, sent = found
        self._stats.probe_replies_received += 1
        self._shared.events.append(
            PathProbeReplied(self.qpn, slot.ev, pkt.probe_id, now - sent, now)
        )
        if slot.state not in (EvState.ASSUMED_BAD, EvState.UNKNOWN):
            return
        key = self._group_of(slot)
        for member in self._groups[key]:
            if member.state in (EvState.ASSUMED_BAD, EvState.UNKNOWN):
                self.set_ev_state(member, EvState.GOOD, "probe_reply", now)
        self._probe_due.pop(key, None)
        self._probe_misses.pop(key, None)
        # other probes of the group are moot now: no timeout events for them
        for probe_id, (other, _) in list(self._probes.items()):
            if self._group_of(other) == key:
                self._late_probes[probe_id] = self._probes.pop(probe_id)

    @entry_point
    def answer_probe(self, pkt: wire.ProbePacket, now: float) -> None:
        """Answer a peer's probe on the mirror path of the one it probed."""
        plane, prefix = self._reply_path(pkt.plane_hint, pkt.spine_hint, pkt.ev)
        frame = wire.encode_probe(
            prefix, pkt.src_qp, True, pkt.plane_hint, pkt.spine_hint, pkt.ev, pkt.timestamp,
            pkt.probe_id, self.qpn,
        )  # fmt: skip
        self._shared.outbox.append((plane, frame))
        stats = self._stats
        stats.probe_replies_sent += 1
        stats.packets_sent += 1
        stats.bytes_sent += len(frame)

    def _run_probes(self, now: float) -> None:
        cfg = self._cfg
        late = self._late_probes
        for probe_id, (_, sent) in list(late.items()):
            if sent + LATE_PROBE_FACTOR * cfg.probe_timeout <= now:
                del late[probe_id]
        for probe_id, (slot, sent) in list(self._probes.items()):
            if sent + cfg.probe_timeout <= now:
                late[probe_id] = self._probes.pop(probe_id)
                key = self._group_of(slot)
                self._probe_misses[key] = self._probe_misses.get(key, 0) + 1
                self._stats.probes_timed_out += 1
                self._shared.events.append(PathProbeTimedOut(self.qpn, slot.ev, probe_id, now))
        for key, due in list(self._probe_due.items()):
            if due > now:
                continue
            waiting = [s for s in self._groups[key]
                       if s.state in (EvState.ASSUMED_BAD, EvState.UNKNOWN)]  # fmt: skip
            if not waiting:
                del self._probe_due[key]
                continue
            if waiting[0].plane in self._shared.ports_down:
                # the NIC is down: no probe and no timer until it is up (set_plane makes the
                # EVs UNKNOWN then, which schedules their probes again)
                del self._probe_due[key]
                continue
            self.probe(waiting[self._next_probe_id % len(waiting)], now)
            gap = cfg.probe_interval
            if not (self._send_queue or self._outstanding or self._retx):
                gap *= 1 << min(self._probe_misses.get(key, 0), PROBE_BACKOFF_MAX)
                self._probes_backed_off = True
            self._probe_due[key] = now + gap

    def _wake_probes(self, now: float) -> None:
        """The QP has work again: a probe backed off while it was idle is due within one
        probe interval, as a QP with work probes. Else a path that came back during the idle
        time (a rebooted spine) stayed retired for up to 2^PROBE_BACKOFF_MAX intervals of the
        work: 20 s of a training job's steps on the default fabric at 10 Mb/s."""
        self._probes_backed_off = False
        soon = now + self._cfg.probe_interval
        due = self._probe_due
        for key, when in due.items():
            if when > soon:
                due[key] = soon

    # -- sender ----------------------------------------------------------------------------------

    def _path_feedback(self, slot: EvSlot, rtt: float | None, now: float) -> None:
        """An unmarked ACK echoing ``slot``: the path's delay decides between decrease (its
        smoothed RTT exceeds the fastest path's by ``path_delay_excess`` of it: its queue is
        longer than the others') and additive recovery of its share."""
        load = slot.load
        if rtt is not None:
            fastest = self.ev_table.fastest_rtt()
            if fastest and load.srtt > fastest * self._w_excess:
                self._path_congested(slot, load.srtt, now)
                return
        if load.weight < 1.0:
            load.weight = min(1.0, load.weight + self._w_inc)

    def _path_congested(self, slot: EvSlot, rtt: float | None, now: float) -> None:
        """A CE echo or a trim from ``slot``'s path: lighten it (congestion, never failure)."""
        load = slot.load
        hold = rtt if rtt is not None else self._steer_hold
        if not self._weights:
            load.marked_until = now + hold
            return
        if now < load.hold_until:
            return
        # multiplicative decrease, at most once per RTT per path
        load.weight = max(self._w_min, load.weight * self._w_dec)
        load.hold_until = now + hold
        self.ev_table.normalise_weights()

    # -- receiver --------------------------------------------------------------------------------

    def _reply_path(self, plane: int, spine: int, ev: int = 0) -> tuple[int, bytes]:
        if self._ev_mode is not EvFormat.SRV6:
            key = (plane, ev)
            found = self._reply_ev.get(key)
            if found is None:
                path = self._plane_path.get(plane) or self.paths[0]
                prefix = self._prefix(
                    path, wire.DSCP_CONTROL, wire.ECN_NOT_ECT, ev, path.dst_nic.address,
                    self._ev_mode,
                )  # fmt: skip
                found = (path.plane, prefix)
                if len(self._reply_ev) >= REPLY_CACHE:
                    self._reply_ev.clear()
                self._reply_ev[key] = found
            return found
        entry = self._reply.get((plane, spine))
        if entry is None:
            entry = self._reply_plane.get(plane, self._reply_any)
        return entry
