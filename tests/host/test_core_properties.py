"""Property tests: any mix of loss, reordering, duplication and trimming delivers every message
intact; no frame, however malformed, raises out of receive_frame or writes outside a region."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from host.transport import wire
from host.transport.api import Context
from host.transport.config import StackConfig

BASE = 0x7F00_0000_0000


def pattern(n: int, seed: int) -> bytes:
    return bytes((i * 7 + seed * 13 + (i >> 8)) & 0xFF for i in range(n))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 1 << 16),
    loss=st.sampled_from([0.0, 0.01, 0.05]),
    duplicate=st.sampled_from([0.0, 0.02, 0.1]),
    reorder=st.sampled_from([0.0, 0.1, 0.5]),
    trim_threshold=st.integers(1, 10),
    sizes=st.lists(st.integers(30_000, 150_000) | st.integers(0, 5000), min_size=1, max_size=3),
    policy=st.sampled_from(["mrc", "mrc", "spray-no-failover", "single-path", "no-trim-nack"]),
    dst=st.sampled_from(["h2", "h3"]),
)
def test_any_fault_mix_delivers_every_message_intact(
    make_net: Any, seed: int, loss: float, duplicate: float, reorder: float, trim_threshold: int,
    sizes: list[int], policy: str, dst: str,
) -> None:  # fmt: skip
    config = StackConfig(ack_timeout_exp=4, max_retransmits=1000)
    net = make_net(seed=seed, config=config, trim_threshold=trim_threshold)
    net.sim.set_faults(loss=loss, duplicate=duplicate, reorder=reorder, reorder_delay=2e-3)
    # two senders into one receiver: its last hop queues, so trimming happens too
    flows = [net.connect(src, dst, policy=policy) for src in ("h0", "h1")]
    addr = BASE
    placed = []
    for k, flow in enumerate(flows):
        for n, size in enumerate(sizes):
            data = pattern(size, seed + n + k)
            flow.sender.post_write_imm(data, addr, flow.region.rkey, imm=k * 100 + n, wr_id=n)
            placed.append((addr, data))
            addr += size + 1
    net.kick_all()
    total = len(sizes)

    def done() -> bool:
        return (
            all(len(net.cqs[s]) == total for s in ("h0", "h1")) and len(net.cqs[dst]) == 2 * total
        )

    net.run(120.0, stop=done)
    for src in ("h0", "h1"):
        sent = net.cqs[src].poll(10)
        assert sorted((c.wr_id, c.status) for c in sent) == [(n, "ok") for n in range(total)]
    got = net.cqs[dst].poll(20)
    expected = sorted(k * 100 + n for k in range(2) for n in range(total))
    assert sorted(c.imm for c in got) == expected  # each WRITE_IMM completes exactly once
    for address, data in placed:
        assert flows[0].region.read(address, len(data)) == data
    for ctx in net.hosts.values():
        assert ctx.stats()["drops"].get("internal_error", 0) == 0


_CAPTURE: dict[str, Any] = {}


def _valid_frames(make_net: Any) -> tuple[Context, list[bytes], Any]:
    """Frames of one real WRITE_IMM exchange (captured once per session)."""
    if _CAPTURE:
        return _CAPTURE["receiver"], _CAPTURE["frames"], _CAPTURE["flow"]
    net = make_net(seed=1, trim_threshold=2)
    flow = net.connect("h0", "h2")
    frames: list[bytes] = []
    for ctx in net.hosts.values():
        inner = ctx.frames_to_send

        def capture(now: float, inner: Any = inner) -> list[tuple[int, bytes]]:
            out = inner(now)
            frames.extend(bytes(f) for _, f in out)
            return out

        ctx.frames_to_send = capture
    flow.sender.post_write_imm(pattern(20_000, 1), BASE, flow.region.rkey, imm=1)
    net.sim.kick("h0")
    net.run(1.0)
    _CAPTURE.update(receiver=net.hosts["h2"], frames=frames, flow=flow)
    return net.hosts["h2"], frames, flow


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_receive_frame_never_raises_nor_writes_outside_the_region(make_net: Any, data: Any) -> None:
    receiver, frames, flow = _valid_frames(make_net)
    fresh = Context("h2", receiver.nics.values(), seed=5)
    region = fresh.register_region(BASE, 64 * 1024)
    guard = fresh.register_region(BASE + 64 * 1024, 4096)
    guard.buffer[:] = b"\xa5" * 4096
    paths = flow.receiver.paths
    qp = fresh.create_qp("h0", paths, cq=fresh.create_cq(), qpn=flow.receiver.qpn)
    qp.connect(flow.sender.qpn)
    for _ in range(data.draw(st.integers(1, 20))):
        kind = data.draw(st.sampled_from(["random", "mutated", "forged"]))
        if kind == "random":
            frame = data.draw(st.binary(max_size=300))
        elif kind == "mutated":
            frame = bytearray(data.draw(st.sampled_from(frames)))
            for _ in range(data.draw(st.integers(1, 8))):
                pos = data.draw(st.integers(0, len(frame) - 1))
                frame[pos] = data.draw(st.integers(0, 255))
            cut = data.draw(st.integers(0, len(frame)))
            frame = frame[:cut] if data.draw(st.booleans()) else frame
        else:  # a well-formed data packet with hostile fields
            prefix = flow.sender.ev_table.slots[0].prefix
            va = data.draw(st.integers(BASE - 5000, BASE + 70 * 1024))
            payload = data.draw(st.binary(max_size=5000))
            frame = wire.encode_data(
                prefix, qp.qpn, data.draw(st.integers(0, wire.PSN_MASK)), data.draw(st.booleans()),
                va, data.draw(st.sampled_from([region.rkey, guard.rkey ^ 1, 0])),
                data.draw(st.one_of(st.none(), st.integers(0, 2**32 - 1))), 0, 0, 0, 1,
                data.draw(st.integers(0, 3)), data.draw(st.integers(len(payload), 2**32 - 1)),
                0, 0, payload,
            )  # fmt: skip
        fresh.receive_frame(data.draw(st.integers(0, 1)), bytes(frame), 1.0)
        fresh.frames_to_send(1.0)
        fresh.handle_timer(2.0)
    assert bytes(guard.buffer) == b"\xa5" * 4096
    stats = fresh.stats()
    assert stats["drops"].get("internal_error", 0) == 0
    assert stats["payload_bytes_placed"] <= stats["bytes_received"]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_forged_control_frames_never_break_a_sender(make_net: Any, data: Any) -> None:
    _, _, flow = _valid_frames(make_net)
    sender = Context("h0", [p.src_nic for p in flow.sender.paths[::2]], seed=3)
    qp = sender.create_qp("h2", flow.sender.paths, cq=sender.create_cq(), qpn=flow.sender.qpn)
    qp.connect(flow.receiver.qpn)
    qp.post_write(bytes(50_000), BASE, 1)
    sender.frames_to_send(0.0)
    prefix = flow.receiver.ev_table.slots[0].prefix
    now = 0.0
    for _ in range(data.draw(st.integers(1, 25))):
        now += data.draw(st.floats(0, 0.2))
        kind = data.draw(st.sampled_from(["ack", "nack", "probe"]))
        psn = data.draw(st.integers(0, wire.PSN_MASK))
        if kind == "ack":
            frame = wire.encode_ack(
                prefix, qp.qpn, 0, data.draw(st.integers(0, 255)), 0, 0, 0,
                data.draw(st.integers(0, 2**32 - 1)), psn, data.draw(st.integers(0, wire.PSN_MASK)),
                data.draw(st.integers(0, 2**64 - 1)), data.draw(st.integers(0, 0xFFFF)),
                data.draw(st.integers(0, 0xFFFF)),
            )  # fmt: skip
        elif kind == "nack":
            frame = wire.encode_nack(prefix, qp.qpn, data.draw(st.integers(0, 255)), 0, 0, 0,
                                     data.draw(st.integers(0, 2**32 - 1)), psn, psn)  # fmt: skip
        else:
            frame = wire.encode_probe(prefix, qp.qpn, data.draw(st.booleans()), 0, 0, 0, 0,
                                      data.draw(st.integers(0, 2**32 - 1)), qp.qpn)  # fmt: skip
        sender.receive_frame(0, frame, now)
        sender.frames_to_send(now)
        when = sender.next_timer()
        if when is not None and when <= now:
            sender.handle_timer(now)
    assert sender.stats()["drops"].get("internal_error", 0) == 0
