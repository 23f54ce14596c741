"""The sender of a queue pair: posting WRITEs, cutting messages into packets sprayed over EVs,
and what ACKs and NACKs tell it (acknowledged packets, completions, RTT, congestion)."""

from __future__ import annotations

from host.transport import wire
from host.transport.balancers import Feedback
from host.transport.events import (
    STATUS_REMOTE_ACCESS_ERROR,
    STATUS_RETRY_EXCEEDED,
    QpError,
    WriteCompleted,
)
from host.transport.evs import EvSlot
from host.transport.qp_state import (
    _DATA_UDP_BASE,
    _EXT_DATA,
    _FLAG_ECN_ECHO,
    _FLAG_FIRST,
    _FLAG_LAST,
    _GOOD,
    _OP_WRITE_ONLY,
    EXPLORE_MASK,
    NS,
    PSN_MASK,
    RECYCLE_SCAN,
    SAME_PATH_REORDER,
    QpState,
    TxMessage,
    TxPacket,
    _weighted,
    entry_point,
)


class Sender(QpState):
    """The sender of a queue pair."""

    @entry_point
    def post_write(
        self, data: bytes | bytearray | memoryview, remote_addr: int, rkey: int, wr_id: int = 0
    ) -> int:
        """Post an RDMA WRITE of ``data`` to ``remote_addr`` (rkey ``rkey``); returns the message id."""
        return self._post(data, remote_addr, rkey, None, wr_id)

    @entry_point
    def post_write_imm(
        self,
        data: bytes | bytearray | memoryview,
        remote_addr: int,
        rkey: int,
        imm: int,
        wr_id: int = 0,
    ) -> int:
        """Post an RDMA WRITE with immediate ``imm`` (32 bits); returns the message id."""
        if not 0 <= imm < 1 << 32:
            raise ValueError(f"immediate {imm}: expected a 32-bit unsigned value")
        return self._post(data, remote_addr, rkey, imm, wr_id)

    def _post(
        self, data: bytes | bytearray | memoryview, remote_addr: int, rkey: int, imm: int | None,
        wr_id: int,
    ) -> int:  # fmt: skip
        if self.remote_qpn is None:
            raise RuntimeError(f"QP {self.qpn} is not connected: call connect(remote_qpn) first")
        if self.error is not None:
            raise RuntimeError(f"QP {self.qpn} is in error ({self.error}): create a new QP")
        view = memoryview(data).cast("B")
        if not len(view) < 1 << 32:
            raise ValueError(f"message of {len(view)} bytes: expected less than 4 GiB")
        if not remote_addr >= 0 and remote_addr + len(view) <= 1 << 64:
            raise ValueError(f"remote address {remote_addr:#x}: expected a 64-bit address")
        if not 0 <= rkey < 1 << 32:
            raise ValueError(f"rkey {rkey}: expected a 32-bit value")
        msg_id = self._next_msg_id
        self._next_msg_id = (msg_id + 1) & 0xFFFFFFFF or 1
        self._send_queue.append(TxMessage(msg_id, wr_id, imm, view, remote_addr, rkey))
        self._pending_messages += 1
        self._stats.messages_sent += 1
        return msg_id

    @property
    def outstanding(self) -> int:
        """Packets sent and not yet acknowledged."""
        return len(self._outstanding)

    @property
    def pending_messages(self) -> int:
        """Messages posted and not yet completed."""
        return self._pending_messages

    @entry_point
    def frames(
        self,
        now: float,
        out: list[tuple[int, bytes | bytearray]],
        budget: dict[int, int] | None = None,
    ) -> None:
        """Append the data frames the window allows now (retransmissions first).

        ``budget`` (plane -> frames its NIC takes now; None: no limit) makes the spraying a
        transmit-time choice, as a NIC makes it: new packets go only to EVs of planes with
        room, and each frame takes one from its plane's budget (retransmissions too, even
        beyond it: they are few and must not wait)."""
        if self.error is not None or self.remote_qpn is None:
            return
        if self._probes_backed_off and self._send_queue:
            self._wake_probes(now)
        table = self.ev_table
        if table.pinned is None and not table.good_count():
            # nowhere to send: the stall budget runs while there is work (LossRecovery)
            if self._stall_since is None and (self._retx or self._send_queue):
                self._stall_since = now
            return
        self._stall_since = None
        cwnd = self.cc.cwnd
        retx = self._retx
        outstanding = self._outstanding
        # a packet goes when the window has room for all of it (uet-htsim can_send_NSCC:
        # in flight + the packet <= cwnd), or when nothing is in flight
        room = cwnd - self._cfg.mtu
        while retx and (self.inflight <= room or not self.inflight):
            rec = retx[0]
            if rec.in_net or outstanding.get(rec.psn) is not rec:
                retx.popleft()
                continue
            if self._balancer is None:
                slot = table.next_other(rec.slot)
            else:
                slot = self._balanced(self._next_psn, now)
            if slot is None:
                return
            retx.popleft()
            rec.retx += 1
            if rec.losses > self._cfg.max_retransmits:
                self._fail(f"packet PSN {rec.psn} lost {rec.losses} times (trims not counted)", now)
                return
            del outstanding[rec.psn]
            outstanding[rec.psn] = rec
            self._transmit(rec, slot, now, out, True)
            if budget is not None:
                budget[slot.plane] = budget.get(slot.plane, 0) - 1
        queue = self._send_queue
        if not queue:
            return
        if budget is not None and not any(n > 0 for n in budget.values()):
            return
        # the hot path: new packets, state in locals, one timestamp and one stats update per call
        cfg = self._cfg
        mtu = cfg.mtu
        limit = min(cfg.max_outstanding, cfg.rx_window - 1)
        encode = wire.encode_data_split
        join = b"".join
        pack_len = wire.U16.pack
        pack_tail = wire.DATA_TAIL.pack
        append = out.append
        remote_qpn = self.remote_qpn
        ts32 = int(now * NS) & 0xFFFFFFFF
        inflight = self.inflight
        window_ar = self._ack_requests
        psn = self._next_psn
        tsn = self._tsn
        psn_limit = self._snd_una + limit
        sent = 0
        sent_bytes = 0
        payload_bytes = 0
        pinned = table.pinned
        if pinned is None:
            cycles, cursors = table.cycles, table.cursors
        else:
            cycles, cursors = [[pinned]], [0]
        count = len(cycles)  # planes taking turns
        turn = table.turn
        steer = self._steer
        weights = steer and self._weights
        skip = self._steer_skip
        recycle = self._recycle if pinned is None else None
        balanced = self._balancer is not None
        skipped = 0  # picks in a row that found their plane's NIC full
        # frames the NICs take now, all planes together (-1: no limit): the loop ends when
        # they are full, before a pick, so that no EV's turn is spent on a NIC without room
        room_left = -1 if budget is None else sum(n for n in budget.values() if n > 0)
        while (
            queue and (inflight <= room or not inflight) and psn < psn_limit and count and room_left
        ):
            if balanced:
                # UET's load balancer picks (the uet-* policies)
                found = self._balanced(psn, now)
                if found is None:
                    break
                slot = found
            elif recycle and psn & EXPLORE_MASK:
                # a path that just delivered a packet without congestion: each path gets new
                # packets at the rate it delivers them (every EXPLORE_EVERY-th packet follows
                # the cycle instead, so a path with new spare capacity gains share). When that
                # path's NIC is full, one of the next RECYCLE_SCAN whose NIC has room and whose
                # path is at full weight goes first; else the packet waits for a NIC. Sent on
                # whichever plane had room instead, it overloaded the one plane whose NIC a lost
                # uplink keeps from filling (docs/host-stack.md, "Multipath load balancing")
                if budget is not None and budget.get(recycle[0].plane, 0) <= 0:
                    if recycle[0].state is not _GOOD:
                        recycle.popleft()  # a retired path's turn goes with it: never waited for
                        continue
                    load = None
                    for i in range(1, min(len(recycle), RECYCLE_SCAN + 1)):
                        ahead = recycle[i]
                        if budget.get(ahead.plane, 0) > 0 and ahead.load.weight >= 1.0:
                            del recycle[i]
                            load = ahead.load
                            break
                    if load is None:
                        break
                else:
                    # the path of a packet just delivered, its next EV (inline of next_ev)
                    load = recycle.popleft().load
                evs = load.evs
                load.rr = n = load.rr + 1
                slot = evs[n % len(evs)]
                if slot.state is not _GOOD:
                    found = load.next_ev()
                    if found is None:
                        continue
                    slot = found
            else:
                turn += 1
                i = turn % count
                cycle = cycles[i]
                if budget is not None and budget.get(cycle[0].plane, 0) <= 0:
                    # this plane's NIC is full: the next plane takes the turn, and this one
                    # keeps its place in its own cycle
                    skipped += 1
                    if skipped > count:  # no plane with room has a GOOD EV: wait for a NIC
                        break
                    continue
                # the plane's place moves by one per turn: a pick a path passes goes to an EV
                # further along the cycle, whose own turn still comes
                n = len(cycle)
                cursors[i] = cursor = cursors[i] + 1
                slot = cycle[cursor % n]
                if weights:
                    slot = _weighted(slot, cycle, cursor, n)
                elif steer and slot.load.marked_until > now:
                    # ECN steering: every other pick of a marked path goes to the plane's next
                    # EV instead, halving that path's share while its queue drains
                    skip = not skip
                    if skip:
                        slot = cycle[(cursor + 1) % n]
            if budget is not None:
                # the picks above found room on the slot's plane; a balancer's pick may
                # overdraw it (with several planes), and the packet waits in that NIC, as a
                # retransmission does
                budget[slot.plane] = budget.get(slot.plane, 0) - 1
                room_left -= 1
                skipped = 0
            msg = queue[0]
            offset = msg.offset
            length = msg.length - offset
            if length > mtu:
                length = mtu
                last = False
                flags = 0 if offset else _FLAG_FIRST
            else:
                last = True
                flags = _FLAG_LAST if offset else _FLAG_LAST | _FLAG_FIRST
                msg.all_sent = True
                queue.popleft()
            end = offset + length
            msg.offset = end
            msg.unacked += 1
            outstanding[psn] = TxPacket(psn, msg, offset, length, last, slot, now, ts32, tsn)
            if last and msg.imm is not None:
                frame = encode(
                    slot.head, slot.mid, remote_qpn, psn, True, msg.remote_addr + offset, msg.rkey,
                    msg.imm, flags, slot.plane, slot.spine_hint, slot.wire, msg.msg_id,
                    msg.length, offset, ts32, msg.data[offset:end],
                )  # fmt: skip
            else:
                # inline of wire.encode_data_split for WRITE Only, the common packet (the IPv6
                # payload length counts the slot's SRH, if any). The ACK request bit: the
                # message's last packet, or the last the window lets out before an ACK frees
                # room (uet-htsim sendNewPacket: in flight + a packet >= cwnd; the receiver
                # ACKs it at once, not after ack_every packets a window-bound sender would
                # wait for)
                udp_len = _DATA_UDP_BASE + length
                frame = join((
                    slot.head, pack_len(udp_len + slot.ext_len), slot.mid,
                    pack_tail(
                        udp_len, 0, _OP_WRITE_ONLY, 0, 0xFFFF, remote_qpn,
                        (0x80000000 | (psn & PSN_MASK))
                        if last or (window_ar and inflight + length >= room)
                        else psn & PSN_MASK,
                        msg.remote_addr + offset, msg.rkey, length, _EXT_DATA, flags,
                        slot.plane, slot.spine_hint, slot.wire, msg.msg_id, msg.length, offset,
                        ts32,
                    ),
                    msg.data[offset:end],
                ))  # fmt: skip
            append((slot.plane, frame))
            psn += 1
            tsn += 1
            inflight += length
            sent += 1
            sent_bytes += len(frame)
            payload_bytes += length
        if pinned is None:
            table.turn = turn
        self._steer_skip = skip
        self.inflight = inflight
        self._next_psn = psn
        self._tsn = tsn
        if sent:
            stats = self._stats
            stats.data_packets_sent += sent
            stats.new_data_packets_sent += sent
            stats.packets_sent += sent
            stats.bytes_sent += sent_bytes
            self.cc.on_packet_sent(nbytes=payload_bytes, now=now)

    def _balanced(self, psn: int, now: float) -> EvSlot | None:
        """The EV UET's load balancer gives the packet sent now (``psn``: the QP's next new
        PSN); an EV that is not GOOD (its plane taken down) gives way to the cycle's next."""
        assert self._balancer is not None
        table = self.ev_table
        index = self._balancer.next(psn - self._psn_origin, int(self.cc.cwnd // self._cfg.mtu), now)
        slot = table.slots[index]
        return slot if slot.state is _GOOD else table.next()

    def _transmit(
        self,
        rec: TxPacket,
        slot: EvSlot,
        now: float,
        out: list[tuple[int, bytes | bytearray]],
        retx: bool,
    ) -> None:
        msg = rec.msg
        ts32 = int(now * NS) & 0xFFFFFFFF
        rec.slot = slot
        rec.sent = now
        rec.ts32 = ts32
        rec.tsn = self._tsn
        self._tsn += 1
        load = slot.load
        rec.path_sn = load.sent
        load.sent += 1
        rec.in_net = True
        self.inflight += rec.length
        flags = (wire.FLAG_FIRST if rec.offset == 0 else 0) | (wire.FLAG_RETX if retx else 0)
        if rec.last:
            flags |= wire.FLAG_LAST
        offset = rec.offset
        frame = wire.encode_data(
            slot.prefix, self.remote_qpn or 0, rec.psn, rec.last or retx, msg.remote_addr + offset,
            msg.rkey, msg.imm if rec.last else None, flags, slot.plane, slot.spine_hint,
            slot.wire, msg.msg_id, msg.length, offset, ts32, msg.data[offset : offset + rec.length],
        )  # fmt: skip
        out.append((slot.plane, frame))
        stats = self._stats
        stats.data_packets_sent += 1
        stats.packets_sent += 1
        stats.bytes_sent += len(frame)

    def _acked(self, rec: TxPacket, now: float) -> int:
        if rec.in_net:
            self.inflight -= rec.length
        # a retransmitted packet may have been acknowledged by its first copy: its latest send
        # order says nothing about what was delivered, so it does not advance loss detection
        if rec.tsn > self._highest_acked_tsn and rec.retx == 0:
            self._highest_acked_tsn = rec.tsn
        msg = rec.msg
        msg.unacked -= 1
        if msg.all_sent and msg.unacked == 0:
            self._complete(msg, now)
        return rec.length

    def _complete(self, msg: TxMessage, now: float) -> None:
        self._pending_messages -= 1
        self._stats.messages_completed += 1
        self._shared.complete(
            WriteCompleted(
                self.cq, self.qpn, msg.wr_id, "write" if msg.imm is None else "write_imm",
                msg.status, msg.length, msg.imm, msg.remote_addr, now,
            )
        )  # fmt: skip

    def _fail(self, reason: str, now: float) -> None:
        self.error = reason
        self._shared.events.append(QpError(self.qpn, reason, now))
        done: set[int] = set()
        for rec in self._outstanding.values():
            msg = rec.msg
            if msg.msg_id not in done:
                done.add(msg.msg_id)
                msg.status = STATUS_RETRY_EXCEEDED
                self._complete(msg, now)
        for msg in self._send_queue:
            if msg.msg_id not in done:
                msg.status = STATUS_RETRY_EXCEEDED
                self._complete(msg, now)
        self._outstanding.clear()
        self._probed.clear()
        self._send_queue.clear()
        self._retx.clear()
        self.inflight = 0
        self._stall_since = None

    @entry_point
    def on_ack(self, pkt: wire.AckPacket, now: float) -> None:
        """Process a parsed ACK/SACK (see :meth:`on_ack_fields`)."""
        self.on_ack_fields(
            (pkt.outer.dest_qp, pkt.cum_psn, pkt.sack_base, pkt.sack_bitmap, pkt.ts_echo,
             pkt.ce_count, pkt.pkt_count, pkt.flags, pkt.ev),
            now,
        )  # fmt: skip

    @entry_point
    def on_ack_fields(self, fields: wire.AckFields, now: float) -> None:
        """Free acknowledged packets, detect losses, feed congestion control."""
        _, cum_psn, sack_base, bitmap, ts_echo, ce_count, pkt_count, flags, ev = fields
        stats = self._stats
        stats.acks_received += 1
        una = self._snd_una
        d = (cum_psn - una) & PSN_MASK
        if d > self._next_psn - una:
            if (una - cum_psn) & PSN_MASK > self._rx_window:
                stats.drops["ack_out_of_window"] += 1
                return
            # an ACK overtaken by a later one (ACKs come back over every plane): its cumulative
            # PSN is old news, but its SACK bitmap may be the only word of the packets that
            # arrived since the ACK before it
            stats.stale_acks += 1
            d = 0
        outstanding = self._outstanding
        pop = outstanding.pop
        freed: list[TxPacket] = []
        if d:
            for psn in range(una, una + d):
                rec = pop(psn, None)
                if rec is not None:
                    freed.append(rec)
            self._snd_una = una = una + d
        if bitmap:
            behind = (una - sack_base) & PSN_MASK
            if 0 < behind < 64:  # a 64-bit bitmap that starts below una: its upper bits count
                bitmap >>= behind
                sack_base = una
            base = una + ((sack_base - una) & PSN_MASK)
            if base - una < self._rx_window:
                while bitmap:
                    low = bitmap & -bitmap
                    rec = pop(base + low.bit_length() - 1, None)
                    if rec is not None:
                        freed.append(rec)
                    bitmap ^= low
        acked = 0
        echoed = self.ev_table.by_wire.get(ev)  # the EV of the packet that triggered the ACK
        marked = flags & _FLAG_ECN_ECHO
        recycle = self._recycle
        if recycle is not None:
            if freed and len(freed) <= pkt_count:
                # every packet freed is one this ACK reports: all but the marked path's go back
                marked_load = echoed.load if marked and echoed is not None else None
                for rec in freed:
                    slot = rec.slot
                    if slot.load is not marked_load and rec.retx == 0:
                        recycle.append(slot)
            elif not marked and echoed is not None:
                # ACKs come back over every path: this one overtook an ACK still on its way
                # (freeing packets that ACK reports, whose marks are in it), or came after the
                # ACK that overtook it (freeing nothing). Only the packet it echoes is known
                # unmarked, and its path goes back, as REPS takes the one EV each ACK echoes,
                # late or not (uet-htsim UecSrc::processAck): each packet's path still goes back
                # once, on its own ACK's word
                recycle.append(echoed)
        balancer = self._balancer
        if balancer is not None and echoed is not None:
            # every ACK names the EV it echoes (uet-htsim UecSrc::processAck)
            balancer.feedback(echoed.index, Feedback.ECN if marked else Feedback.GOOD, now)
        if freed:
            # inline of _acked: free the packets, complete finished messages
            inflight = self.inflight
            top = self._highest_acked_tsn
            for rec in freed:
                length = rec.length
                acked += length
                if rec.in_net:
                    inflight -= length
                # a retransmitted packet may have been acknowledged by an earlier copy; only
                # when the ACK echoes this copy's timestamp does its send order count
                if rec.retx == 0 or rec.ts32 == ts_echo:
                    if rec.tsn > top:
                        top = rec.tsn
                    load = rec.slot.load
                    if rec.path_sn > load.acked:
                        load.acked = rec.path_sn
                msg = rec.msg
                msg.unacked -= 1
                if msg.all_sent and msg.unacked == 0:
                    self._complete(msg, now)
            self.inflight = inflight
            self._highest_acked_tsn = top
            if self._probed:
                self._repaired_by_probe(freed, ts_echo, now)
        rtt: float | None = ((int(now * NS) - ts_echo) & 0xFFFFFFFF) / NS
        if rtt is not None and rtt < 60.0:
            stats.rtt.append(rtt)
            srtt = self._srtt
            if srtt is None:
                self._srtt = rtt
                self._rttvar = rtt / 2
            else:
                self._rttvar = 0.75 * self._rttvar + 0.25 * abs(srtt - rtt)
                self._srtt = 0.875 * srtt + 0.125 * rtt
        else:
            rtt = None
        if ce_count:
            stats.ecn_marked_seen += ce_count
        if echoed is not None and rtt is not None:
            echoed.load.sample(rtt)
        if self._steer and echoed is not None:
            if marked:
                # the EV of a CE-marked packet: its path is congested
                self._path_congested(echoed, rtt, now)
            elif self._weights:
                self._path_feedback(echoed, rtt, now)
        if self._cap_delay and rtt is not None:
            # the stack profile testbed-2026: the window answers congestion common to every
            # path, its delay is the fastest path's; a path slower than that is the spraying
            # weights' business. By default the window gets the acknowledged packet's own RTT,
            # as uet-htsim's processAck takes it (raw_rtt of the acked PSN, no cap)
            fastest = self.ev_table.fastest_rtt()
            if fastest and rtt > fastest:
                rtt = fastest
        elif rtt is not None and self._cfg.cc_raw_delay:
            # the window takes the delay of the packet the ACK echoes only when this ACK is
            # the first word of it; an ACK overtaken by one that acknowledged its packet gives
            # the average delay instead (uet-htsim processAck: no send record, get_avg_delay)
            for rec in freed:
                if rec.ts32 == ts_echo and rec.slot.wire == ev:
                    break
            else:
                rtt = None
        self.cc.on_ack(acked_bytes=acked, rtt=rtt, ce_count=ce_count, pkt_count=pkt_count, now=now)
        if acked:
            self._backoff = 0
            self._timeouts = 0
            self._last_ack = now
        limit = self._highest_acked_tsn - self._cfg.reorder_threshold
        lost: list[tuple[TxPacket, str]] = []
        for rec in outstanding.values():
            if rec.tsn > limit:
                break
            if rec.in_net:
                # Overtaken by later packets. A path delivers in order, so SAME_PATH_REORDER
                # later packets of the same path acknowledged (counted in the path's own send
                # order: with 16 paths, one later packet of the path is 16 of the QP's, and one
                # ACK overtaken by another is enough to misjudge) mean this one is lost. Packets of other paths
                # overtake freely (a longer queue); without evidence from its own path (a path
                # that died acknowledges nothing) a packet is lost once it is older than its
                # path's RTT allows, with a margin (LATE_FACTOR: a queue that grows makes packets
                # older than the smoothed RTT says).
                # A path with no RTT sample yet is judged by the QP's.
                load = rec.slot.load
                if load.acked - rec.path_sn >= SAME_PATH_REORDER:
                    lost.append((rec, "sack"))  # evidence from its own path
                elif now - rec.sent >= self._late_bound(load):
                    lost.append((rec, "late"))  # no evidence: too old for its path
        if lost:
            nbytes = 0
            for rec, why in lost:
                nbytes += rec.length
                self._lose(rec, "sack", now, why)
            self.cc.on_loss(nbytes=nbytes, timeout=False, now=now)

    @entry_point
    def on_nack(self, pkt: wire.NackPacket, now: float) -> None:
        """A trimmed packet (retransmit at once, EV stays GOOD) or a refused one (fail the message)."""
        stats = self._stats
        stats.nacks_received += 1
        una = self._snd_una
        d = (pkt.psn - una) & PSN_MASK
        rec = self._outstanding.get(una + d) if d < self._next_psn - una else None
        if rec is None:
            stats.drops["nack_stale"] += 1
            return
        if pkt.flags & wire.FLAG_ACCESS:
            del self._outstanding[rec.psn]
            self._probed.pop(rec.psn, None)
            rec.msg.status = STATUS_REMOTE_ACCESS_ERROR
            self._acked(rec, now)
            return
        if not rec.in_net or rec.ts32 != pkt.ts_echo:
            stats.drops["nack_stale"] += 1
            return
        stats.trims_seen += 1
        # a trim at the receiver's own leaf is the receiver's congestion (an incast), the same
        # on every path: the window answers it, the path choice does not
        last_hop = bool(pkt.flags & wire.FLAG_LAST_HOP)
        if last_hop:
            stats.last_hop_trims_seen += 1
            self._last_hop_trim = now
        elif self._steer:
            self._path_congested(rec.slot, self._srtt, now)
        if self._balancer is not None:
            # trimmed in the fabric: the EV's path is congested; at the receiver's own leaf it
            # is not, unless an earlier hop marked the packet (uet-htsim UecSrc::processNack)
            if not last_hop:
                said = Feedback.NACK
            elif pkt.flags & wire.FLAG_NACK_CE:
                said = Feedback.ECN
            else:
                said = Feedback.GOOD
            self._balancer.feedback(rec.slot.index, said, now)
        self._lose(rec, "nack", now)
        self.cc.on_trim(nbytes=rec.length, now=now, last_hop=last_hop)
