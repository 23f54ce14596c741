"""Loss recovery of a queue pair: declaring packets lost, the adaptive ACK timeout, the tail-loss
probe, and the QP's timers."""

from __future__ import annotations

import collections

from host.transport import wire
from host.transport.balancers import Feedback
from host.transport.events import RetransmitTimeout
from host.transport.evs import EvState, PathLoad
from host.transport.qp_state import (
    LATE_FACTOR,
    NS,
    RETRY_EXP_UNLIMITED,
    TLP_PACKETS,
    QpState,
    TxPacket,
    entry_point,
)


class LossRecovery(QpState):
    """Loss recovery of a queue pair."""

    def _lose(self, rec: TxPacket, cause: str, now: float, reason: str | None = None) -> None:
        """Declare ``rec`` lost: counted as a retransmission of ``cause`` ("nack", "sack",
        "rto"); other than a NACK, a loss retires the EV (or its path) for ``reason`` (default
        ``cause``; a SACK loss says "sack" when later packets of its own path were
        acknowledged, "late" when it is only too old for its path)."""
        rec.in_net = False
        self.inflight -= rec.length
        self._retx.append(rec)
        self._stats.retransmits[cause] += 1
        self._probed.pop(rec.psn, None)
        if cause != "nack":
            rec.losses += 1
            self._path_failed(rec, reason or cause, cause, now)

    def _path_failed(self, rec: TxPacket, reason: str, cause: str, now: float) -> None:
        """``rec`` was lost on its path: retire its EV (or path) for ``reason``; what is still
        in flight on the EVs retired is lost with it, resent now (counted under ``cause``) on
        the paths left rather than one ACK timeout per packet."""
        if not self.policy.failover or rec.slot.state is not EvState.GOOD:
            return
        if self._last_hop_trim >= rec.sent:
            # the receiver's own leaf trimmed this QP's packets while ``rec`` was in flight: it
            # is congested (an incast), every path crosses it, and a packet lost there (a
            # trimmed header its high-priority queue could not hold) says nothing of the path
            self._stats.last_hop_losses += 1
            return
        self._retire(rec.slot, reason, now)
        if rec.slot.state is EvState.GOOD:
            return
        for other in list(self._outstanding.values()):
            if other.in_net and other.slot.state is not EvState.GOOD:
                other.in_net = False
                other.losses += 1
                self.inflight -= other.length
                self._retx.append(other)
                self._stats.retransmits[cause] += 1

    def _late_bound(self, load: PathLoad) -> float:
        """How long a packet of ``load``'s path may stay unacknowledged before it is late:
        ``LATE_FACTOR`` x (srtt + 4 rttvar) of its path. While the path has no RTT sample
        of its own, the other paths' RTTs say nothing of its queue (a slower link, a deeper
        queue): at least the QP's ACK timeout before backoff (a testbed choice,
        docs/host-stack.md; 0 without any sample at all: every packet is late)."""
        if load.srtt:
            return LATE_FACTOR * (load.srtt + 4.0 * load.rttvar)
        srtt = self._srtt
        if not srtt:
            return 0.0
        return max(LATE_FACTOR * (srtt + 4.0 * self._rttvar), self._base_timeout())

    def _repaired_by_probe(self, freed: list[TxPacket], ts_echo: int, now: float) -> None:
        """Packets acknowledged by the ACK of their tail-loss probe's copy (it echoes the
        copy's timestamp) that a later packet had overtaken, and whose original is late on
        its path, were lost there: the probe repaired a loss, which is still a loss (RFC 8985,
        7.4.2), and a loss retires the path ("late"). Without this a window too small for
        ``reorder_threshold`` packets to overtake a lost one hides a failed path behind
        probes, one packet at a time. A tail (nothing sent after it acknowledged) repaired by
        its probe is not judged: the probe is there for it."""
        probed = self._probed
        for rec in freed:
            if (
                probed.pop(rec.psn, None) is rec
                and rec.ts32 == ts_echo
                and now - rec.sent >= self._late_bound(rec.slot.load)
            ):
                self._path_failed(rec, "late", "sack", now)

    def _first_in_net(self) -> TxPacket | None:
        for rec in self._outstanding.values():
            if rec.in_net:
                return rec
        return None

    def _base_timeout(self) -> float:
        """The ACK timeout before backoff: RFC 6298's srtt + 4 x rttvar, at least ``rto_min``
        (default: the MRC ACK timeout 1.024 us x 2^t, also used before any RTT sample), at most
        1.024 us x 2^max_backoff_exp. Queues that grow the RTT beyond the configured timeout
        (slow emulated links, descheduled agents) stretch it instead of firing it spuriously."""
        srtt = self._srtt
        if srtt is None:
            return self._rto_floor
        rto = srtt + 4.0 * self._rttvar
        if rto < self._rto_floor:
            return self._rto_floor
        return rto if rto < self._rto_max else self._rto_max

    def _timeout(self) -> float:
        return min(self._base_timeout() * (1 << self._backoff), self._rto_max)

    def _stall_budget(self) -> float:
        """How long work may wait with no GOOD EV to go on (every EV DENIED or ASSUMED_BAD and
        nothing in flight, so no ACK timeout fires) before the QP fails: the time of the ACK
        timeouts its retry counters allow, ``retry_linear_cnt`` + 1 at the base timeout, then
        ``retry_exp_cnt`` doubled ones; with 25 ("no limit", which bounds only timeouts of
        packets in flight) ``max_retransmits`` doubled ones, the count after which a packet
        resent over and over fails its message (a testbed choice: docs/host-agent.md)."""
        cfg = self._cfg
        exp = cfg.max_retransmits if cfg.retry_exp_cnt >= RETRY_EXP_UNLIMITED else cfg.retry_exp_cnt
        timeout = self._base_timeout()
        total = timeout * (cfg.retry_linear_cnt + 1)
        for _ in range(exp):
            timeout = min(timeout * 2, self._rto_max)
            total += timeout
        return total

    def _check_stall(self, now: float) -> None:
        """Fail the QP when its work has waited its stall budget with no EV to go on."""
        since = self._stall_since
        if since is None:
            return
        if not (self._retx or self._send_queue):
            self._stall_since = None
        elif now >= since + self._stall_budget():
            states = collections.Counter(s.state.value for s in self.ev_table.slots)
            which = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
            self._fail(f"no EV to send on for {(now - since) * 1e3:.4g} ms (EVs: {which})", now)

    def _tlp_due(self, first: TxPacket) -> float | None:
        """When the tail-loss probe fires (None without an RTT estimate): when the oldest packet
        in flight has waited two smoothed RTTs and is late on its path (:meth:`_late_bound`),
        plus the receiver's ACK delay, at most once per smoothed RTT. Not before it is late,
        so that the copy's ACK finds the original lost (:meth:`_repaired_by_probe`)."""
        srtt = self._srtt
        if not self._cfg.tlp or srtt is None:
            return None
        wait = max(2.0 * srtt, srtt + 4.0 * self._rttvar, self._late_bound(first.slot.load))
        due = first.sent + wait + self._cfg.ack_delay
        return due if due > self._tlp_next else self._tlp_next

    def _send_tlp(self, now: float) -> None:
        """Tail-loss probe: re-send the oldest packets still unacknowledged after the probe
        timeout (at most ``TLP_PACKETS``). Not a loss in itself: the window is unchanged, the
        originals stay in flight; the copy's ACK (or the duplicate ACK it provokes when only
        ACKs were lost) frees them before the ACK timeout would. A packet that a later one had
        overtaken is copied on another EV and judged when its copy's ACK arrives
        (:meth:`_repaired_by_probe`); a tail (nothing sent after it acknowledged) is copied on
        its own EV, so that a path that lost it is found by the ACK timeout, not hidden by
        copies on other paths (with a window of one packet every packet is a tail)."""
        srtt = self._srtt or 0.0
        self._tlp_next = now + srtt
        if self.remote_qpn is None:
            return
        due = now - 2.0 * srtt
        out = self._shared.outbox
        stats = self._stats
        count = 0
        for rec in self._outstanding.values():
            if count >= TLP_PACKETS:
                break
            if not rec.in_net or rec.sent > due:
                continue
            overtaken = rec.tsn < self._highest_acked_tsn
            if overtaken or rec.slot.state is not EvState.GOOD:
                found = self.ev_table.next_other(rec.slot)
                if found is None:
                    return
                slot = found
            else:
                # a tail (nothing sent after it acknowledged): its copy tests its own path;
                # delivered, the original was a single drop and the path stays GOOD; lost too,
                # the ACK timeout judges the path
                slot = rec.slot
            msg = rec.msg
            ts32 = int(now * NS) & 0xFFFFFFFF
            rec.ts32 = ts32  # the copy's ACK echoes this; the original's is accepted too
            if overtaken:
                # not a tail: a loss for the rules to judge when the copy repairs it
                # (_repaired_by_probe)
                self._probed[rec.psn] = rec
            flags = (wire.FLAG_FIRST if rec.offset == 0 else 0) | wire.FLAG_RETX
            if rec.last:
                flags |= wire.FLAG_LAST
            offset = rec.offset
            frame = wire.encode_data(
                slot.prefix, self.remote_qpn, rec.psn, True, msg.remote_addr + offset, msg.rkey,
                msg.imm if rec.last else None, flags, slot.plane, slot.spine_hint, slot.wire,
                msg.msg_id, msg.length, offset, ts32, msg.data[offset : offset + rec.length],
            )  # fmt: skip
            out.append((slot.plane, frame))
            count += 1
            stats.data_packets_sent += 1
            stats.packets_sent += 1
            stats.bytes_sent += len(frame)
        stats.tail_loss_probes += count

    def next_timer(self) -> float | None:
        """The earliest time this QP needs handle_timer."""
        when: float | None = self._ack_deadline
        # a receiver's QP has nothing outstanding: no call for it (asked after every event)
        first = self._first_in_net() if self._outstanding else None
        if first is not None:
            rto = max(first.sent, self._last_ack) + self._timeout()
            when = rto if when is None else min(when, rto)
            tlp = self._tlp_due(first)
            if tlp is not None and tlp < rto:
                when = tlp if when is None else min(when, tlp)
        if self._probe_due:
            due = min(self._probe_due.values())
            when = due if when is None else min(when, due)
        if self._probes:
            due = min(sent for _, sent in self._probes.values()) + self._cfg.probe_timeout
            when = due if when is None else min(when, due)
        if self._stall_since is not None:
            due = self._stall_since + self._stall_budget()
            when = due if when is None else min(when, due)
        return when

    @entry_point
    def handle_timer(self, now: float) -> None:
        """Delayed ACK, ACK timeout, probes."""
        if self._ack_deadline is not None and self._ack_deadline <= now:
            self._send_ack(now)
        first = self._first_in_net()
        if first is not None:
            # the timer restarts on every ACK that acknowledges data (RFC 6298, 5.3)
            expiry = max(first.sent, self._last_ack) + self._timeout()
            tlp = self._tlp_due(first)
            if tlp is not None and tlp <= now < expiry:
                self._send_tlp(now)
            elif expiry <= now:
                # every packet older than the un-backed-off timeout is lost, not just the oldest:
                # else each packet of a lost window would cost one more doubled timeout
                base = self._base_timeout()
                lost = [r for r in self._outstanding.values() if r.in_net and r.sent + base <= now]
                nbytes = 0
                for rec in lost:
                    nbytes += rec.length
                    # once: an earlier one's retired EV may have taken it along (_path_failed)
                    if rec.in_net:
                        self._lose(rec, "rto", now)
                self.cc.on_loss(nbytes=nbytes, timeout=True, now=now)
                if self._balancer is not None:
                    # one word per timeout, of the oldest packet's EV (uet-htsim names EV 0: it
                    # keeps no EV per packet)
                    self._balancer.feedback(first.slot.index, Feedback.TIMEOUT, now)
                self._stats.rtos += 1
                cfg = self._cfg
                # mrc.h's retry counters: retry_linear_cnt timeouts at the fixed interval, then
                # retry_exp_cnt doubled ones (25: no limit); an ACK of new data starts over
                self._timeouts += 1
                give_up = (
                    cfg.retry_exp_cnt < RETRY_EXP_UNLIMITED
                    and self._timeouts > cfg.retry_linear_cnt + cfg.retry_exp_cnt
                )
                if self._timeouts > cfg.retry_linear_cnt and not give_up:
                    self._backoff = min(
                        self._backoff + 1, cfg.max_backoff_exp - cfg.ack_timeout_exp
                    )
                self._shared.events.append(
                    RetransmitTimeout(self.qpn, len(lost), cfg.ack_timeout_exp + self._backoff, now)
                )
                if give_up:
                    self._fail(f"{self._timeouts} ACK timeouts in a row (retry limit)", now)
                    return
        if self._probe_due or self._probes:
            self._run_probes(now)
        self._check_stall(now)
