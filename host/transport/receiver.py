"""The receiver of a queue pair: placing data at its RETH address after checking the region,
tracking PSNs, coalescing ACKs with SACK bits and ECN echoes, NACKing trimmed packets.

A packet the region check refuses (unknown rkey, another protection domain's region, an
address outside the region) is answered with an access-error NACK and consumes nothing: no
PSN, no message state, so a forged packet cannot take the place of the genuine one at its PSN.
A write the region's memory cannot take (:class:`host.transport.region.PlacementError`) is a
protection fault: the packet is NACKed the same way, a :class:`PlacementFault` event tells the
driver, and the receiver refuses every later packet (the QP is in error, as a NIC's is)."""

from __future__ import annotations

from host.transport import wire
from host.transport.events import STATUS_OK, PlacementFault, WriteImmReceived
from host.transport.qp_state import (
    _ECN_CE,
    _FLAG_ECN_ECHO,
    MAX_RX_MESSAGES,
    PSN_HALF,
    PSN_MASK,
    QpState,
    RxMessage,
    entry_point,
)
from host.transport.region import MemoryRegion, PlacementError


class Receiver(QpState):
    """The receiver of a queue pair."""

    @entry_point
    def on_data(self, pkt: wire.DataPacket, now: float) -> None:
        """Place a parsed data packet (or NACK it when trimmed) and schedule the ACK."""
        out = pkt.outer
        self.on_data_fields(
            (
                out.dest_qp, out.psn, out.ack_req, out.ecn, pkt.opcode, pkt.va, pkt.rkey,
                pkt.dma_len, pkt.imm, pkt.plane_hint, pkt.spine_hint, pkt.ev, pkt.msg_id,
                pkt.msg_len, pkt.msg_offset, pkt.timestamp, pkt.payload, pkt.trimmed,
            ),
            now,
        )  # fmt: skip

    @entry_point
    def on_data_fields(self, fields: wire.DataFields, now: float) -> None:
        """The receiver's data path on the fields of :func:`host.transport.wire.decode_data`."""
        (
            _, psn24, ack_req, ecn, _, va, rkey, dma_len, imm, plane, spine, ev, msg_id, msg_len,
            msg_offset, ts, payload, trimmed,
        ) = fields  # fmt: skip
        stats = self._stats
        cum = self._rcv_cum
        d = (psn24 - cum) & PSN_MASK
        if d >= PSN_HALF:
            stats.drops["duplicate"] += 1
            self._note_ack(ev, ts, plane, spine, ecn, now, True)
            return
        if d >= self._rx_window:
            stats.drops["psn_out_of_window"] += 1
            return
        psn = cum + d
        rcv = self._rcv_set
        if psn in rcv:
            stats.drops["duplicate"] += 1
            self._note_ack(ev, ts, plane, spine, ecn, now, True)
            return
        if trimmed:
            stats.trims_seen += 1
            if self.policy.trim_nack:
                flags = wire.FLAG_TRIMMED
                if trimmed == wire.TRIM_LAST_HOP:
                    flags |= wire.FLAG_LAST_HOP
                if ecn == _ECN_CE:
                    # the header keeps the mark an earlier hop gave the packet (uet-htsim
                    # UecSink::processTrimmed: the NACK echoes it)
                    flags |= wire.FLAG_NACK_CE
                self._nack(flags, plane, spine, ev, ts, psn24, now)
            else:
                stats.drops["trimmed_no_nack"] += 1
            return
        region = self._regions.get(rkey)
        # the region check: refused, the packet consumes nothing (no PSN, no message state)
        if (
            region is None or region.domain != self.domain or not region.addr <= va
            or va + dma_len > region.end or self.rx_fault is not None
        ):  # fmt: skip
            stats.drops[self._refusal(region)] += 1
            self._nack(wire.FLAG_ACCESS, plane, spine, ev, ts, psn24, now)
            return
        msgs = self._rx_msgs
        msg = msgs.get(msg_id)
        if msg is None:
            if len(msgs) >= MAX_RX_MESSAGES:
                stats.drops["too_many_messages"] += 1
                return
            msg = msgs[msg_id] = RxMessage(msg_len, va - msg_offset)
        elif msg.length != msg_len:
            stats.drops["inconsistent_message"] += 1
            return
        # then the copy: the only write the receiver ever makes
        start = va - region.addr
        try:
            region.view[start : start + dma_len] = payload
        except PlacementError as exc:
            self._fault(region.rkey, va, dma_len, exc, now)
            msg.failed = True
            self._nack(wire.FLAG_ACCESS, plane, spine, ev, ts, psn24, now)
            return
        stats.payload_bytes_placed += dma_len
        if not self._rx_started:
            # the first packet is acknowledged at once: the sender's first RTT sample and
            # window feedback come a packet after it started (uet-htsim UecSink::processData)
            self._rx_started = True
            ack_req = ack_req or self._ack_requests
        if ack_req and self._ack_requests:
            self._ack_requested = True
        if d == 0:
            cum += 1
            while cum in rcv:
                rcv.remove(cum)
                cum += 1
            self._rcv_cum = cum
            if not rcv and self._ack_requested:
                # every PSN up to the newest is in: the ACK a request asked for is answered
                # again now that it is cumulative (uet-htsim UecSink::processData, _ack_request)
                self._ack_requested = False
                ack_req = True
        else:
            rcv.add(psn)
            if psn > self._rcv_max:
                self._rcv_max = psn
            if psn < self._ack_lo:
                self._ack_lo = psn
            if psn > self._ack_hi:
                self._ack_hi = psn
        if imm is not None:
            msg.imm = imm
        msg.received += dma_len
        if msg.received >= msg.length:
            del msgs[msg_id]
            self._msn += 1
            if not msg.failed:
                stats.messages_received += 1
                if msg.imm is not None:
                    self._shared.complete(
                        WriteImmReceived(
                            self.cq, self.qpn, 0, "recv_write_imm", STATUS_OK, msg.length,
                            msg.imm, msg.base, now,
                        )
                    )  # fmt: skip
        # inline of _note_ack for the common case
        pending = self._ack_pending + 1
        self._ack_pending = pending
        self._ack_echo = (ev, ts, plane, spine)
        if ecn == _ECN_CE:
            self._ack_ce += 1
            self._ack_ce_ev = ev
            # a CE-marked packet is acknowledged at once (uet-htsim UecSink::processData), so
            # its RTT and its mark reach congestion control without waiting for the next ones
            ack_req = ack_req or self._ack_ce_now
        if ack_req or pending >= self._ack_every:
            self._send_ack(now)
        elif self._ack_deadline is None:
            self._ack_deadline = now + self._ack_delay

    def _refusal(self, region: MemoryRegion | None) -> str:
        """Why the region check refused a packet (its drop counter)."""
        if self.rx_fault is not None:
            return "receiver_faulted"
        if region is None:
            return "bad_rkey"
        return "other_domain" if region.domain != self.domain else "out_of_region"

    def _fault(self, rkey: int, va: int, length: int, exc: PlacementError, now: float) -> None:
        """A write the region's memory did not take: a protection fault (see the module)."""
        self.rx_fault = exc.strerror or str(exc)
        self._stats.drops["placement_fault"] += 1
        self._shared.events.append(PlacementFault(self.qpn, rkey, va, length, self.rx_fault, now))

    def _note_ack(
        self, ev: int, ts: int, plane: int, spine: int, ecn: int, now: float, urgent: bool
    ) -> None:
        self._ack_pending += 1
        self._ack_echo = (ev, ts, plane, spine)
        if urgent or self._ack_pending >= self._cfg.ack_every:
            self._send_ack(now)
        elif self._ack_deadline is None:
            self._ack_deadline = now + self._cfg.ack_delay

    def _send_ack(self, now: float) -> None:
        if self.remote_qpn is None:
            self._stats.drops["not_connected"] += 1
            return
        ev, ts, plane, spine = self._ack_echo
        flags = 0
        if self._ack_ce:
            # echo the EV of a CE-marked packet, so the sender knows which path is loaded
            flags = _FLAG_ECN_ECHO
            ev = self._ack_ce_ev
        cum = self._rcv_cum
        rcv = self._rcv_set
        bases = [cum]
        if rcv and self._rcv_max - cum >= 64:
            # the bitmap covers 64 PSNs: start at the cumulative PSN when that reaches the newest,
            # else at the oldest PSN received since the previous ACK; when that one lies more
            # than 64 below the newest (a retransmission of an old PSN beside new ones), a
            # second ACK covers the newest 64 of them, so every PSN received is reported
            newest = self._rcv_max - 63
            bases = [max(cum, min(self._ack_lo, newest))]
            if self._ack_hi - bases[0] >= 64:
                bases.append(self._ack_hi - 63)
        out_plane, prefix = self._reply_path(plane, spine, ev)
        stats = self._stats
        for base in bases:
            bitmap = 0
            for p in rcv:
                i = p - base
                if 0 <= i < 64:
                    bitmap |= 1 << i
            frame = wire.encode_ack(
                prefix, self.remote_qpn, self._msn, flags, plane, spine, ev, ts, cum, base,
                bitmap, self._ack_ce, self._ack_pending,
            )  # fmt: skip
            self._shared.outbox.append((out_plane, frame))
            stats.acks_sent += 1
            stats.packets_sent += 1
            stats.bytes_sent += len(frame)
        self._ack_pending = 0
        self._ack_ce = 0
        self._ack_deadline = None
        self._ack_lo = 1 << 62
        self._ack_hi = -1

    def _nack(
        self, flags: int, plane: int, spine: int, ev: int, ts: int, psn24: int, now: float
    ) -> None:
        if self.remote_qpn is None:
            self._stats.drops["not_connected"] += 1
            return
        out_plane, prefix = self._reply_path(plane, spine, ev)
        frame = wire.encode_nack(
            prefix, self.remote_qpn, flags, plane, spine, ev, ts, psn24, self._rcv_cum
        )
        self._shared.outbox.append((out_plane, frame))
        stats = self._stats
        stats.nacks_sent += 1
        stats.packets_sent += 1
        stats.bytes_sent += len(frame)

    # -- timers ----------------------------------------------------------------------------------
