"""The agent side of the OCP MRC API (host/agent/ocp/) without sockets or namespaces.

Two providers (h0 and h1 of the small fabric) run on transport-core contexts joined by the
in-memory network; the "application" is this test process: its buffers (ctypes) are registered
with ibv_reg_mr semantics and read and written in place by process_vm_readv / _writev, which a
process may do on itself without privileges.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from host.agent.ocp import OcpProvider, abi
from host.transport.api import Context
from host.transport.cc import CcProfile
from host.transport.config import StackConfig
from host.transport.endpoint import SpineRoutes
from host.transport.events import WriteCompleted
from sim.network import SimNet
from topologies import Fabric, Host, load_topology
from topologies.config import shipped_topology

RESET, INIT, RTR, RTS, ERR = 0, 1, 2, 3, 6
ACCESS_RW = 1 | 2


@dataclass
class FakeConn:
    """What the provider uses of a connection: who it is, where pushes go."""

    pid: int = field(default_factory=os.getpid)
    uid: int = field(default_factory=os.geteuid)
    owner: Any = None
    pushed: list[dict[str, Any]] = field(default_factory=list)
    foreign_bytes: int = 0

    def push(self, message: dict[str, Any]) -> None:
        self.pushed.append(dict(message))


class FakeAgent:
    """A host agent reduced to what the provider needs, on an in-memory network."""

    def __init__(self, fabric: Fabric, name: str, sim: SimNet) -> None:
        self.fabric = fabric
        self.host: Host = fabric.host(name)
        self.sim = sim
        routes = SpineRoutes.from_paths(  # as the agent's: what endpoint requests may name
            path
            for peer in fabric.hosts
            if peer.name != name
            for path in fabric.paths(name, peer.name)
        )
        self.context = Context(name, self.host.nics, config=StackConfig(dilation=sim.dilation),
                               seed=self.host.index + 1, routes=routes)  # fmt: skip
        sim.attach(self.context)
        self.cc_profile = CcProfile("ecn-delay", {})
        self.waiters: list[tuple[Any, float | None]] = []

    def fit_cc(self, profile: CcProfile) -> CcProfile:
        return profile  # no fabric defaults under the CC profiles

    def add_waiter(self, check: Any, deadline: float | None) -> None:
        self.waiters.append((check, deadline))

    def now(self) -> float:
        return self.sim.now

    def after_core(self, now: float) -> None:
        self.sim.kick(self.host.name)


class Side:
    """One host: its agent, provider, session connection and helpers to call commands."""

    def __init__(self, fabric: Fabric, name: str, sim: SimNet, tmp: Any) -> None:
        self.agent = FakeAgent(fabric, name, sim)
        self.provider = OcpProvider(self.agent, tmp / f"{name}.ocp.sock")
        self.conn = FakeConn()
        self.hello = self.call("hello")
        self.buffers: list[Any] = []

    def call(self, cmd: str, conn: FakeConn | None = None, **fields: Any) -> dict[str, Any]:
        reply = self.provider.dispatch(conn or self.conn, {"cmd": cmd, **fields})  # type: ignore[arg-type]
        assert isinstance(reply, dict), f"{cmd} answered later"
        return reply

    def ok(self, cmd: str, **fields: Any) -> dict[str, Any]:
        reply = self.call(cmd, **fields)
        assert reply["ok"], reply
        return reply

    def fails(self, cmd: str, code: int, **fields: Any) -> dict[str, Any]:
        reply = self.call(cmd, **fields)
        assert not reply["ok"] and reply["errno"] == code, reply
        assert reply["error"]
        return reply

    def buffer(self, size: int, fill: int = 0) -> Any:
        buf = (ctypes.c_char * size)(*([bytes([fill])] * size))
        self.buffers.append(buf)
        return buf

    def reg(
        self, buf: Any, access: int = ACCESS_RW, offset: int = 0, length: int | None = None
    ) -> dict[str, Any]:
        addr = ctypes.addressof(buf) + offset
        reply = self.ok("reg_mr", addr=addr, length=length or len(buf) - offset, access=access)
        return {**reply, "addr": addr}

    def gid(self) -> str:
        return str(self.hello["ports"][0]["gid"])

    def drain(self) -> None:
        ctx = self.agent.context
        while (event := ctx.next_event()) is not None:
            self.provider.on_event(event)

    def poll(self, cq: int, n: int = 64) -> list[list[int]]:
        return list(self.ok("poll_cq", cq=cq, n=n)["wc"])

    def close(self) -> None:
        self.provider.server.close()


@pytest.fixture(scope="module")
def fabric() -> Fabric:
    return Fabric(load_topology(shipped_topology("small")))


@dataclass
class Pair:
    sim: SimNet
    h0: Side
    h1: Side

    def run(self, seconds: float = 2.0) -> None:
        self.sim.run(self.sim.now + seconds)
        for side in (self.h0, self.h1):
            side.drain()
            agent = side.agent
            agent.waiters = [(c, d) for c, d in agent.waiters if not c(agent.now())]


@pytest.fixture
def pair(fabric: Fabric, tmp_path: Any) -> Iterator[Pair]:
    sim = SimNet(fabric, seed=3)
    p = Pair(sim, Side(fabric, "h0", sim, tmp_path), Side(fabric, "h1", sim, tmp_path))
    yield p
    p.h0.close()
    p.h1.close()


def make_qp(side: Side, **caps: Any) -> tuple[int, int, int]:
    """A QP with its own send and receive CQs: (qpn, send_cq, recv_cq)."""
    scq = side.ok("create_cq", cqe=256)["cq"]
    rcq = side.ok("create_cq", cqe=256)["cq"]
    fields = {"max_send_wr": 64, "max_recv_wr": 16, "max_send_sge": 2, "max_recv_sge": 1, **caps}
    qpn = side.ok("create_qp", send_cq=scq, recv_cq=rcq, **fields)["qpn"]
    return qpn, scq, rcq


def connect(
    a: Side, qa: int, b: Side, qb: int, *, ev_profile: int = 0, cc_profile: int = 0, **rts: Any
) -> None:
    """Both QPs RESET -> INIT -> RTR -> RTS towards each other (``a``'s with the EV and CC
    profiles given, ``b``'s with the host's own)."""
    a.ok("modify_qp", qpn=qa, state=INIT, ev_profile=ev_profile, cc_profile=cc_profile)
    b.ok("modify_qp", qpn=qb, state=INIT, ev_profile=0, cc_profile=0)
    a.ok("modify_qp", qpn=qa, state=RTR, dgid=b.gid(), dest_qpn=qb)
    b.ok("modify_qp", qpn=qb, state=RTR, dgid=a.gid(), dest_qpn=qa)
    a.ok("modify_qp", qpn=qa, state=RTS, **rts)
    b.ok("modify_qp", qpn=qb, state=RTS, **rts)


def link(pair: Pair, **rts: Any) -> tuple[int, int, int, int]:
    """A QP of h0 connected to one of h1 (both at RTS): (h0's QP, its send CQ, h1's QP, its
    receive CQ)."""
    qa, scq, _ = make_qp(pair.h0)
    qb, _, rcq = make_qp(pair.h1)
    connect(pair.h0, qa, pair.h1, qb, **rts)
    return qa, scq, qb, rcq


def buffers(pair: Pair, size: int) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """A buffer of h0 registered and one of h1 registered remotely writable: (source,
    destination, h0's registration, h1's)."""
    src, dst = pair.h0.buffer(size), pair.h1.buffer(size)
    return src, dst, pair.h0.reg(src), pair.h1.reg(dst)


def write_arrives_intact(pair: Pair, qa: int, scq: int, size: int = 65536) -> None:
    """A WRITE of ``size`` random bytes on h0's QP ``qa`` completes and arrives intact."""
    src, dst, mr, remote = buffers(pair, size)
    ctypes.memmove(src, os.urandom(size), size)
    pair.h0.ok("post_send", qpn=qa, wrs=[write_wr(1, mr, remote, size)])
    pair.run(3.0)
    assert pair.h0.poll(scq)[0][1] == abi.WcStatus.SUCCESS
    assert bytes(dst) == bytes(src)


def write_wr(wr_id: int, mr: dict[str, Any], remote: dict[str, Any], length: int, *,
             imm: int | None = None, offset: int = 0, remote_offset: int = 0) -> list[Any]:  # fmt: skip
    opcode = abi.WrOpcode.RDMA_WRITE if imm is None else abi.WrOpcode.RDMA_WRITE_WITH_IMM
    return [
        wr_id, opcode, abi.SendFlag.SIGNALED, imm or 0, remote["addr"] + remote_offset,
        remote["rkey"], [[mr["addr"] + offset, length, mr["lkey"]]],
    ]  # fmt: skip


# -- sessions, device ----------------------------------------------------------------------------


def test_hello_gives_ports_with_plane_addresses(pair: Pair, fabric: Fabric) -> None:
    ports = pair.h0.hello["ports"]
    assert [p["port"] for p in ports] == [1, 2]
    for port, nic in zip(ports, fabric.host("h0").nics, strict=True):
        assert bytes.fromhex(port["gid"]) == nic.address.packed
        assert port["active"] is True
    device = pair.h0.ok("query_device")
    assert device["max_wimm"] == abi.MAX_WIMM and device["protocol_version"] == 1


def test_commands_need_a_session_and_name_bad_fields(pair: Pair) -> None:
    stranger = FakeConn()
    reply = pair.h0.call("create_cq", conn=stranger, cqe=4)
    assert not reply["ok"] and "hello" in reply["error"]
    pair.h0.fails("create_cq", errno.EINVAL, cqe=0)
    reply = pair.h0.fails("create_qp", errno.EINVAL, send_cq=99, recv_cq=99, max_send_wr=1)
    assert "send_cq" in reply["error"]
    pair.h0.fails("nonsense", errno.EOPNOTSUPP)
    pair.h0.fails("attach", errno.EINVAL, session=1, token=0, role="channel")


def test_reg_mr_refuses_unmapped_memory(pair: Pair) -> None:
    reply = pair.h0.fails("reg_mr", errno.EFAULT, addr=8, length=4096, access=ACCESS_RW)
    assert "process" in reply["error"]
    pair.h0.fails("dereg_mr", errno.EINVAL, lkey=12345)


# -- the QP state machine ------------------------------------------------------------------------


def test_qp_state_machine(pair: Pair) -> None:
    h0, h1 = pair.h0, pair.h1
    qa, _, _ = make_qp(h0)
    qb, _, _ = make_qp(h1)
    assert h0.ok("query_qp", qpn=qa)["state"] == RESET
    h0.fails("modify_qp", errno.EINVAL, qpn=qa, state=RTR, dgid=h1.gid(), dest_qpn=qb)
    reply = h0.ok("modify_qp", qpn=qa, state=INIT)  # no profile ids: profile 0 of each
    assert (reply["ev_profile"], reply["cc_profile"]) == (0, 0)
    h0.fails("modify_qp", errno.EINVAL, qpn=qa, state=INIT, ev_profile=7, cc_profile=0)
    h0.fails("modify_qp", errno.EINVAL, qpn=qa, state=INIT, ev_profile=0, cc_profile=0, timeout=3)
    h0.fails(
        "modify_qp", errno.EINVAL, qpn=qa, state=INIT, cur_state=RTS, ev_profile=0, cc_profile=0
    )
    h0.ok("modify_qp", qpn=qa, state=INIT, ev_profile=0, cc_profile=0)
    h0.fails("post_send", errno.EINVAL, qpn=qa, wrs=[])
    reply = h0.fails("modify_qp", errno.EINVAL, qpn=qa, state=RTR)
    assert "IBV_QP_AV" in reply["error"]
    h0.fails("modify_qp", errno.EINVAL, qpn=qa, state=RTR, dgid="00" * 16, dest_qpn=qb)
    h0.fails("modify_qp", errno.EINVAL, qpn=qa, state=RTR, dgid=h0.gid(), dest_qpn=qb)
    h0.fails("modify_qp", errno.EINVAL, qpn=qa, state=RTR, dgid=h1.gid(), dest_qpn=qb,
             max_wimm_dest=abi.MAX_WIMM + 1)  # fmt: skip
    h0.fails("modify_qp", errno.EINVAL, qpn=qa, state=RTR, dgid=h1.gid(), dest_qpn=qb,
             cap=abi.QpCap.DYNAMIC_MPR)  # fmt: skip
    h0.ok("modify_qp", qpn=qa, state=RTR, dgid=h1.gid(), dest_qpn=qb, max_wimm_dest=8)
    h0.fails("modify_qp", errno.EINVAL, qpn=qa, state=4)  # SQD
    h0.fails("modify_qp", errno.EINVAL, qpn=qa, state=INIT)
    described = h0.ok("modify_qp", qpn=qa, state=RTS, max_wimm=4, timeout=12, retry_linear=7,
                      retry_exp=25)  # fmt: skip
    assert (described["state"], described["max_wimm"], described["max_wimm_dest"]) == (RTS, 4, 8)
    assert described["remote_host"] == "h1" and described["dest_qpn"] == qb
    h0.fails("modify_qp", errno.EINVAL, qpn=qa, state=RTS, timeout=25)
    assert h0.ok("modify_qp", qpn=qa, state=ERR)["state"] == ERR
    assert h0.ok("modify_qp", qpn=qa, state=RESET)["state"] == RESET
    assert qa in h0.ok("query_qp", qpn=qa).values()
    h0.ok("destroy_qp", qpn=qa)
    h0.fails("query_qp", errno.EINVAL, qpn=qa)


def core_config(side: Side, qpn: int) -> StackConfig:
    """The transport-core config of ``side``'s QP ``qpn``."""
    _, qp = side.provider.qps[qpn]
    assert qp.core is side.agent.context.qp(qpn)
    return qp.core.config


def test_timeout_retry_and_mpr_reach_the_core_qp(pair: Pair) -> None:
    h0, h1 = pair.h0, pair.h1
    host = h0.agent.context.config
    qa, _, _ = make_qp(h0)
    qb, _, _ = make_qp(h1)
    # until the application sets them: the host's timeout and retry counts, the device's mpr
    described = h0.ok("query_qp", qpn=qa)
    assert (described["timeout"], described["retry_linear"], described["retry_exp"]) == (
        host.ack_timeout_exp, host.retry_linear_cnt, host.retry_exp_cnt,
    )  # fmt: skip
    assert (described["mpr"], described["mpr_dest"]) == (abi.MAX_MPR, abi.MAX_MPR)
    for side, qpn in ((h0, qa), (h1, qb)):
        side.ok("modify_qp", qpn=qpn, state=INIT, ev_profile=0, cc_profile=0)
    rtr = {"state": RTR, "dgid": h1.gid(), "dest_qpn": qb}
    reply = h0.fails("modify_qp", errno.EINVAL, qpn=qa, **rtr, mpr_dest=0)
    assert "mpr_dest" in reply["error"]
    assert h0.ok("query_qp", qpn=qa)["state"] == INIT and h0.provider.qps[qa][1].core is None
    # RTR: mpr_dest 2 is a receive window of 256 PSNs, mpr 1 at most 128 PSNs in flight
    h0.ok("modify_qp", qpn=qa, **rtr, mpr_dest=2, mpr=1)
    config = core_config(h0, qa)
    assert (config.rx_window, config.max_outstanding) == (256, 128)
    assert (config.ack_timeout_exp, config.retry_linear_cnt) == (
        host.ack_timeout_exp,
        host.retry_linear_cnt,
    )
    assert config.dilation == host.dilation and config.mtu == host.mtu
    # RTS: 1.024 us x 2^12, one retry at that interval and two backed off; the backoff ceiling
    # keeps the host's doublings above the timeout
    h0.ok("modify_qp", qpn=qa, state=RTS, timeout=12, retry_linear=1, retry_exp=2)
    config = core_config(h0, qa)
    doublings = host.max_backoff_exp - host.ack_timeout_exp
    assert (config.ack_timeout_exp, config.max_backoff_exp) == (12, 12 + doublings)
    assert (config.retry_linear_cnt, config.retry_exp_cnt) == (1, 2)
    assert config.ack_timeout == pytest.approx(1.024e-6 * 4096)
    # RTS -> RTS: a running QP takes new values; mpr 3 is within the receive window less one
    described = h0.ok("modify_qp", qpn=qa, state=RTS, timeout=3, mpr=3, retry_exp=25)
    config = core_config(h0, qa)
    assert (config.ack_timeout_exp, config.max_backoff_exp) == (3, host.max_backoff_exp)
    assert (config.retry_exp_cnt, config.rx_window, config.max_outstanding) == (25, 256, 255)
    assert (described["timeout"], described["mpr"], described["mpr_dest"]) == (3, 3, 2)
    # a refused value changes nothing
    h0.fails("modify_qp", errno.EINVAL, qpn=qa, state=RTS, timeout=abi.MAX_TIMEOUT + 1)
    h0.fails("modify_qp", errno.EINVAL, qpn=qa, state=RTS, mpr=0)
    assert core_config(h0, qa) == config
    # back to RESET: the host's values again
    h0.ok("modify_qp", qpn=qa, state=RESET)
    assert h0.ok("query_qp", qpn=qa)["timeout"] == host.ack_timeout_exp


def test_retry_counts_of_modify_qp_end_a_write_on_a_dead_network(pair: Pair) -> None:
    h0 = pair.h0
    qa, scq, qb, _ = link(pair)
    src, dst, mr, remote = buffers(pair, 20000)
    pair.sim.set_faults(loss=1.0)
    h0.ok("post_send", qpn=qa, wrs=[write_wr(1, mr, remote, 20000)])
    # the host's counts (exp 25: no limit): the write waits out the dead network
    pair.run(1.0)
    assert h0.poll(scq) == []
    # 1.024 us x 2^0, one retry at that interval and one backed off, then the QP gives up
    h0.ok("modify_qp", qpn=qa, state=RTS, timeout=0, retry_linear=1, retry_exp=1)
    pair.run(1.0)
    [wc] = h0.poll(scq)
    assert wc[:2] == [1, abi.WcStatus.RETRY_EXC_ERR]
    assert h0.ok("query_qp", qpn=qa)["state"] == ERR


def test_send_ops_and_opcodes_are_write_and_write_imm_only(pair: Pair) -> None:
    h0 = pair.h0
    scq = h0.ok("create_cq", cqe=4)["cq"]
    h0.fails("create_qp", errno.EOPNOTSUPP, send_cq=scq, recv_cq=scq, max_send_wr=1,
             send_ops=1 << 2)  # fmt: skip
    h0.fails("create_qp", errno.EINVAL, send_cq=scq, recv_cq=scq, max_send_wr=1,
             protocol_version=2)  # fmt: skip
    busy = h0.ok("create_qp", send_cq=scq, recv_cq=scq, max_send_wr=1)["qpn"]
    h0.fails("destroy_cq", errno.EBUSY, cq=scq)
    h0.ok("destroy_qp", qpn=busy)
    h0.ok("destroy_cq", cq=scq)


# -- data: WRITE_IMM, receives, order, errors ----------------------------------------------------


def test_write_imm_consumes_a_posted_receive(pair: Pair) -> None:
    h0, h1 = pair.h0, pair.h1
    qa, scq, qb, rcq = link(pair)
    src, dst = h0.buffer(20000, 0), h1.buffer(20000, 0)
    ctypes.memmove(src, os.urandom(20000), 20000)
    mr, remote = h0.reg(src, access=1), h1.reg(dst)
    h1.ok("post_recv", qpn=qb, wrs=[[71, []], [72, []]])
    h0.ok("post_send", qpn=qa, wrs=[write_wr(5, mr, remote, 12345, imm=0xABCD1234, offset=100,
                                               remote_offset=200)])  # fmt: skip
    pair.run()
    assert h0.poll(scq) == [[5, abi.WcStatus.SUCCESS, abi.WcOpcode.RDMA_WRITE, 12345, 0, qa, 0]]
    assert h1.poll(rcq) == [
        [
            71,
            abi.WcStatus.SUCCESS,
            abi.WcOpcode.RECV_RDMA_WITH_IMM,
            12345,
            0xABCD1234,
            qb,
            abi.WcFlag.WITH_IMM,
        ]
    ]
    assert bytes(dst[200 : 200 + 12345]) == bytes(src[100 : 100 + 12345])
    assert bytes(dst[:200]) == bytes(200) and bytes(dst[200 + 12345 :]) == bytes(20000 - 12545)
    assert h1.ok("query_qp", qpn=qb)["recvs_posted"] == 1


def test_write_imm_without_a_receive_is_a_fatal_qp_error(pair: Pair) -> None:
    h0, h1 = pair.h0, pair.h1
    qa, scq, qb, rcq = link(pair)
    async_conn = FakeConn()
    reply = h1.call("attach", conn=async_conn, session=h1.hello["session"],
                    token=h1.hello["token"], role="async")  # fmt: skip
    assert reply["ok"], reply
    src, dst, mr, remote = buffers(pair, 4096)
    h0.ok("post_send", qpn=qa, wrs=[write_wr(9, mr, remote, 64, imm=7)])
    pair.run()
    [wc] = h1.poll(rcq)
    assert wc[1] == abi.WcStatus.LOC_QP_OP_ERR and wc[4] == 7
    assert h1.ok("query_qp", qpn=qb)["state"] == ERR
    assert async_conn.pushed == [{"event": "async", "type": abi.AsyncEvent.QP_FATAL, "qpn": qb}]
    assert h1.provider.counters["recv_without_buffer"] == 1
    # a QP in ERR flushes what is posted to it
    h1.ok("post_recv", qpn=qb, wrs=[[3, []]])
    assert h1.poll(rcq) == [
        [3, abi.WcStatus.WR_FLUSH_ERR, abi.WcOpcode.RECV_RDMA_WITH_IMM, 0, 0, qb, 0]
    ]


def test_send_completions_come_in_posting_order(pair: Pair) -> None:
    h0 = pair.h0
    qa, scq, qb, _ = link(pair)
    src, dst, mr, remote = buffers(pair, 8192)
    h0.ok("post_send", qpn=qa, wrs=[write_wr(i, mr, remote, 100) for i in (1, 2, 3)])
    _, qp = h0.provider.qps[qa]
    tokens = list(qp.by_token)
    core_cq = h0.provider.core_cq.number

    def done(token: int) -> None:
        h0.provider.on_event(WriteCompleted(core_cq, qa, token, "write", "ok", 100, None, 0, 0.0))

    done(tokens[2])
    assert h0.poll(scq) == []
    done(tokens[0])
    assert [wc[0] for wc in h0.poll(scq)] == [1]
    done(tokens[1])
    assert [wc[0] for wc in h0.poll(scq)] == [2, 3]


def test_many_writes_complete_in_order_over_the_network(pair: Pair) -> None:
    h0 = pair.h0
    qa, scq, qb, _ = link(pair)
    src, dst, mr, remote = buffers(pair, 1 << 20)
    ctypes.memmove(src, os.urandom(1 << 20), 1 << 20)
    sizes = [200_000, 100, 50_000, 7, 300_000, 1]
    offset, wrs = 0, []
    for i, size in enumerate(sizes):
        wrs.append(write_wr(i, mr, remote, size, offset=offset, remote_offset=offset))
        offset += size
    h0.ok("post_send", qpn=qa, wrs=wrs)
    pair.run(5.0)
    assert [wc[0] for wc in h0.poll(scq)] == list(range(len(sizes)))
    assert bytes(dst[:offset]) == bytes(src[:offset])


def test_post_send_refuses_bad_memory_and_writes_nothing(pair: Pair) -> None:
    h0, h1 = pair.h0, pair.h1
    qa, scq, qb, _ = link(pair)
    src, dst = h0.buffer(8192, 0x11), h1.buffer(8192, 0x22)
    mr, remote = h0.reg(src, offset=0, length=4096), h1.reg(dst, offset=0, length=4096)
    bad_lkey = {**mr, "lkey": 999}
    reply = h0.fails("post_send", errno.EINVAL, qpn=qa,
                     wrs=[write_wr(1, mr, remote, 10), write_wr(2, bad_lkey, remote, 10)])  # fmt: skip
    assert reply["bad"] == 1 and "not a registered memory region" in reply["error"]
    reply = h0.fails("post_send", errno.EINVAL, qpn=qa,
                     wrs=[write_wr(3, mr, remote, 100, offset=4000)])  # fmt: skip
    assert reply["bad"] == 0 and "outside memory region" in reply["error"]
    wr = write_wr(4, mr, remote, 10)
    wr[1] = 2  # IBV_WR_SEND
    h0.fails("post_send", errno.EINVAL, qpn=qa, wrs=[wr])
    # remote address outside the peer's region, and a wrong rkey: remote access errors
    h0.ok("post_send", qpn=qa, wrs=[write_wr(5, mr, remote, 100, remote_offset=4050)])
    pair.run()
    wcs = h0.poll(scq)
    assert [wc[0] for wc in wcs] == [1, 5]
    assert wcs[0][1] == abi.WcStatus.SUCCESS and wcs[1][1] == abi.WcStatus.REM_ACCESS_ERR
    assert bytes(dst[10:]) == b"\x22" * (8192 - 10)  # only WR 1's ten bytes landed
    assert h0.ok("query_qp", qpn=qa)["state"] == ERR


def test_write_imm_limit_and_receive_limit(pair: Pair) -> None:
    h0, h1 = pair.h0, pair.h1
    qa, _, _ = make_qp(h0)
    qb, _, _ = make_qp(h1, max_recv_wr=2)
    connect(h0, qa, h1, qb, max_wimm=2)
    src, dst, mr, remote = buffers(pair, 4096)
    reply = h1.fails("post_recv", errno.ENOMEM, qpn=qb, wrs=[[1, []], [2, []], [3, []]])
    assert reply["bad"] == 2
    reply = h0.fails("post_send", errno.ENOMEM, qpn=qa,
                     wrs=[write_wr(i, mr, remote, 8, imm=i) for i in range(3)])  # fmt: skip
    assert reply["bad"] == 2 and "max_wimm" in reply["error"]


def test_completion_channel_gets_an_event(pair: Pair) -> None:
    h0, h1 = pair.h0, pair.h1
    channel_conn = FakeConn()
    reply = h0.call("attach", conn=channel_conn, session=h0.hello["session"],
                    token=h0.hello["token"], role="channel")  # fmt: skip
    channel = reply["channel"]
    scq = h0.ok("create_cq", cqe=8, channel=channel)["cq"]
    h0.fails("req_notify_cq", errno.EINVAL, cq=h0.ok("create_cq", cqe=8)["cq"])
    qa = h0.ok("create_qp", send_cq=scq, recv_cq=scq, max_send_wr=4)["qpn"]
    qb, _, _ = make_qp(h1)
    connect(h0, qa, h1, qb)
    src, dst, mr, remote = buffers(pair, 4096)
    h0.ok("req_notify_cq", cq=scq)
    h0.ok("post_send", qpn=qa, wrs=[write_wr(1, mr, remote, 8), write_wr(2, mr, remote, 8)])
    pair.run()
    assert channel_conn.pushed == [{"event": "cq", "cq": scq}]  # once per arming
    assert len(h0.poll(scq)) == 2


def test_closing_the_session_frees_everything(pair: Pair) -> None:
    h0 = pair.h0
    qa, _, qb, _ = link(pair)
    dst = h0.buffer(4096)
    rkey = h0.reg(dst)["rkey"]
    ctx = h0.agent.context
    assert qa in {qp.qpn for qp in ctx.qps} and ctx.region(rkey)
    h0.provider.closed(h0.conn)  # type: ignore[arg-type]
    assert qa not in {qp.qpn for qp in ctx.qps}
    with pytest.raises(KeyError):
        ctx.region(rkey)
    assert not h0.provider.sessions and not h0.provider.qps


def test_port_admin_state_denies_the_plane(pair: Pair) -> None:
    h0 = pair.h0
    qa, _, qb, _ = link(pair)
    if os.geteuid() != 0:
        h0.fails("modify_port", errno.EPERM, port=1, enabled=0)
        return
    h0.fails("modify_port", errno.EINVAL, port=9, enabled=0)
    reply = h0.ok("modify_port", port=1, enabled=0)
    assert reply["evs"] > 0 and h0.ok("query_port", port=1)["active"] is False
    core = h0.agent.context.qp(qa)
    states = {info.state.value for info in core.ev_table.evs() if info.plane == 0}
    assert states == {"denied"}
    h0.ok("modify_port", port=1, enabled=1)
    assert h0.ok("query_port", port=1)["active"] is True


def test_ev_events_report_evs_coming_back(pair: Pair) -> None:
    h0 = pair.h0
    qa, _, qb, _ = link(pair)
    if os.geteuid() != 0:
        h0.fails("create_ev_cq", errno.EPERM, cqe=8)
        return
    small = h0.ok("create_ev_cq", cqe=2)["cq"]
    big = h0.ok("create_ev_cq", cqe=4096)["cq"]
    h0.fails("create_qp", errno.EINVAL, send_cq=big, recv_cq=big, max_send_wr=1)
    h0.ok("modify_port", port=2, enabled=0)  # DENIED: not an event of profile 0's mask
    assert h0.poll(big) == []
    h0.ok("modify_port", port=2, enabled=1)  # UNKNOWN, probed, GOOD on the replies
    pair.run(1.0)
    events = h0.poll(big, 4096)
    assert events and all(e[0] == 0 and e[2] == 2 and e[4] == 1 for e in events), events
    evs = {info.ev for info in h0.agent.context.qp(qa).ev_table.evs() if info.plane == 1}
    assert evs <= {e[1] for e in events}
    first, second = h0.poll(small)
    assert first[3] == 0 and second[3] == 0  # the rest were dropped, and counted
    assert h0.provider.sessions[h0.hello["session"]].cqs[small].dropped == len(events) - 2


def ev_hex(value: int) -> str:
    """An STEV / UDP EV as mrc_ctl_ev_t's first 16 bytes: 32 bits, network order, then zeros."""
    return value.to_bytes(4, "big").hex() + "00" * 12


def test_ev_profiles_after_mrc_ctl(pair: Pair) -> None:
    from host.agent.ocp import abi as P

    h0, h1 = pair.h0, pair.h1
    if os.geteuid() != 0:
        h0.fails("ev_profile", errno.EPERM, op="modify", id=7, mask=P.EvMask.STATE, state=1)
        return
    fmt = {"op": "modify", "id": 5}
    h0.fails(
        "ev_fmt_profile", errno.EINVAL, **fmt, mask=P.FmtMask.STATE, state=P.ProfileState.OFFLINE
    )
    h0.ok("ev_fmt_profile", **fmt, mask=P.FmtMask.MODE | P.FmtMask.STATE, mode=P.EvFmtMode.STEV,
          state=P.ProfileState.OFFLINE)  # fmt: skip
    h0.fails(
        "ev_fmt_profile", errno.EINVAL, **fmt, mask=P.FmtMask.STATE, state=P.ProfileState.ONLINE
    )
    h0.fails("ev_fmt_profile", errno.E2BIG, **fmt, mask=P.FmtMask.OP, fields_op=P.FieldsOp.MODIFY,
             fields=[30, 30])  # fmt: skip
    h0.ok("ev_fmt_profile", **fmt, mask=P.FmtMask.OP | P.FmtMask.STATE, fields_op=P.FieldsOp.MODIFY,
          fields=[16, 16], state=P.ProfileState.ONLINE)  # fmt: skip
    queried = h0.ok(
        "ev_fmt_profile", op="query", id=5, mask=P.FmtMask.OP, fields_op=P.FieldsOp.QUERY
    )
    assert (queried["state"], queried["mode"], queried["fields"]) == (2, P.EvFmtMode.STEV, [16, 16])

    ev = {"op": "modify", "id": 7}
    fields = [[16, 0x1234, 0, 0, 0], [16, 0, 1, 16, 0xFFFF]]
    h0.fails("ev_profile", errno.EINVAL, **ev, mask=P.EvMask.STATE, state=P.ProfileState.OFFLINE)
    h0.ok("ev_profile", **ev, state=P.ProfileState.OFFLINE, mode=P.EvMode.GEN, fmt_id=5, count=16,
          fields_op=P.FieldsOp.MODIFY, fields=fields,
          mask=P.EvMask.STATE | P.EvMask.MODE | P.EvMask.FMT_ID | P.EvMask.COUNT | P.EvMask.FIELDS_OP)  # fmt: skip
    h0.fails("ev_profile", errno.EINVAL, **ev, mask=P.EvMask.EVENT_MASK, event_mask=4)
    qa, scq, _ = make_qp(h0)
    h0.fails("modify_qp", errno.EINVAL, qpn=qa, state=INIT, ev_profile=7, cc_profile=0)
    h0.ok("ev_profile", **ev, mask=P.EvMask.MIN_ACTIVE | P.EvMask.EVENT_MASK | P.EvMask.STATE,
          min_active=2, event_mask=3, state=P.ProfileState.ONLINE)  # fmt: skip
    h0.fails("ev_profile", errno.EINVAL, **ev, mask=P.EvMask.COUNT, count=8)  # ONLINE
    h0.fails(
        "ev_fmt_profile", errno.EBUSY, **fmt, mask=P.FmtMask.STATE, state=P.ProfileState.OFFLINE
    )

    # a QP on profile 7 carries data with its STEV EVs
    qb, _, _ = make_qp(h1)
    connect(h0, qa, h1, qb, ev_profile=7, cc_profile=0)
    core_evs = {info.ev for info in h0.agent.context.qp(qa).ev_table.evs()}
    assert core_evs == {0x1234_0000 | n for n in range(1, 17)}
    write_arrives_intact(pair, qa, scq)

    # EV operations: the array, states
    query = {"op": "query", "id": 7, "mask": P.EvMask.EV_OP}
    reply = h0.fails("ev_profile", errno.E2BIG, **query, ev_op=P.EvOp.QUERY_ARRAY, entries=[])
    assert reply["needed"] == 16
    array = h0.ok("ev_profile", **query, ev_op=P.EvOp.QUERY_ARRAY, entries=[0] * 16)["array"]
    assert {int(h[:8], 16) for h, _ in array} == core_evs and {p for _, p in array} == {1, 2}
    one = [ev_hex(0x1234_0003), 0, "", 0, P.EvStateBit.of(ocp_evstate("denied")), 0]
    h0.ok("ev_profile", **ev, mask=P.EvMask.EV_OP, ev_op=P.EvOp.MODIFY_STATE, entries=[one])
    states = h0.ok("ev_profile", **query, ev_op=P.EvOp.QUERY_STATE, entries=[one])["states"]
    assert states == [P.EvStateBit.of(ocp_evstate("denied"))]
    assert h0.agent.context.qp(qa).ev_table.state(0x1234_0003).value == "denied"
    missing = [ev_hex(0x9999_0000), 0, "", 0, 1, 0]
    h0.fails("ev_profile", errno.ENOENT, **ev, mask=P.EvMask.EV_OP, ev_op=P.EvOp.MODIFY_STATE,
             entries=[missing])  # fmt: skip

    # OFFLINE only without QPs; profile 0 is the host's own
    h0.fails("ev_profile", errno.EBUSY, **ev, mask=P.EvMask.STATE, state=P.ProfileState.OFFLINE)
    h0.ok("destroy_qp", qpn=qa)
    h0.ok("ev_profile", **ev, mask=P.EvMask.STATE, state=P.ProfileState.OFFLINE)
    h0.fails("ev_profile", errno.EBUSY, op="modify", id=0, mask=P.EvMask.STATE, state=1)
    own = h0.ok("ev_profile", op="query", id=0, mask=P.EvMask.MODE | P.EvMask.COUNT)
    assert own["state"] == P.ProfileState.ONLINE and own["mode"] == P.EvMode.GEN


def test_srv6_format_beyond_128_bits_sends_with_an_srh(pair: Pair) -> None:
    from host.agent.ocp import abi as P

    h0, h1 = pair.h0, pair.h1
    if os.geteuid() != 0:
        return
    fmt = {"op": "modify", "id": 6}
    srv6 = [32] + [16] * 6  # the SRv6 address: locator and six uSIDs
    segment = [32] + [16] * 4  # the SRH segment: locator and four uSIDs (224 bits in all)
    h0.ok("ev_fmt_profile", **fmt, mask=P.FmtMask.MODE | P.FmtMask.STATE, mode=P.EvFmtMode.SRV6,
          state=P.ProfileState.OFFLINE)  # fmt: skip
    h0.fails("ev_fmt_profile", errno.E2BIG, **fmt, mask=P.FmtMask.OP, fields_op=P.FieldsOp.MODIFY,
             fields=[128, 129])  # fmt: skip
    h0.ok("ev_fmt_profile", **fmt, mask=P.FmtMask.OP | P.FmtMask.STATE, fields_op=P.FieldsOp.MODIFY,
          fields=srv6 + segment, state=P.ProfileState.ONLINE)  # fmt: skip
    queried = h0.ok(
        "ev_fmt_profile", op="query", id=6, mask=P.FmtMask.OP, fields_op=P.FieldsOp.QUERY
    )
    assert queried["fields"] == srv6 + segment
    ev = {"op": "modify", "id": 8}
    h0.ok("ev_profile", **ev, state=P.ProfileState.OFFLINE, mode=P.EvMode.GEN, fmt_id=6, count=8,
          mask=P.EvMask.STATE | P.EvMask.MODE | P.EvMask.FMT_ID | P.EvMask.COUNT)  # fmt: skip
    h0.ok("ev_profile", **ev, mask=P.EvMask.STATE, state=P.ProfileState.ONLINE)
    qa, scq, _ = make_qp(h0)
    qb, _, _ = make_qp(h1)
    connect(h0, qa, h1, qb, ev_profile=8, cc_profile=0)
    slots = h0.agent.context.qp(qa).ev_table.slots
    assert len(slots) == 8
    assert all(s.srh == s.path.srh_segment and s.dst == s.path.srh_carrier for s in slots)
    write_arrives_intact(pair, qa, scq)


def ocp_evstate(name: str) -> Any:
    from host.transport.evs import EvState

    return EvState(name)


def test_explicit_ev_profile_is_replaced_then_online(pair: Pair) -> None:
    from host.agent.ocp import abi as P

    h0 = pair.h0
    if os.geteuid() != 0:
        return
    h0.ok("ev_fmt_profile", op="modify", id=6, mask=P.FmtMask.MODE | P.FmtMask.STATE | P.FmtMask.OP,
          mode=P.EvFmtMode.UDP, state=P.ProfileState.OFFLINE, fields_op=P.FieldsOp.MODIFY, fields=[16])  # fmt: skip
    h0.ok("ev_fmt_profile", op="modify", id=6, mask=P.FmtMask.STATE, state=P.ProfileState.ONLINE)
    ev = {"op": "modify", "id": 8}
    h0.ok("ev_profile", **ev, state=P.ProfileState.OFFLINE, mode=P.EvMode.EXP, fmt_id=6, count=2,
          mask=P.EvMask.STATE | P.EvMask.MODE | P.EvMask.FMT_ID | P.EvMask.COUNT)  # fmt: skip
    reply = h0.fails(
        "ev_profile", errno.EINVAL, **ev, mask=P.EvMask.STATE, state=P.ProfileState.ONLINE
    )
    assert "unpopulated" in reply["error"]
    unpopulated = "00" * 16
    for value, port in ((0x0101, 1), (0x0202, 2)):
        entry = [unpopulated, 0, ev_hex(value), port, 0, 0]
        h0.ok("ev_profile", **ev, mask=P.EvMask.EV_OP, ev_op=P.EvOp.REPLACE, entries=[entry])
    h0.fails("ev_profile", errno.ENOENT, **ev, mask=P.EvMask.EV_OP, ev_op=P.EvOp.REPLACE,
             entries=[[unpopulated, 0, ev_hex(3), 1, 0, 0]])  # fmt: skip
    h0.ok("ev_profile", **ev, mask=P.EvMask.STATE, state=P.ProfileState.ONLINE)
    array = h0.ok("ev_profile", op="query", id=8, mask=P.EvMask.EV_OP, ev_op=P.EvOp.QUERY_ARRAY,
                  entries=[0, 0])["array"]  # fmt: skip
    assert array == [[ev_hex(0x0101), 1], [ev_hex(0x0202), 2]]
    h0.fails("ev_profile", errno.EINVAL, **ev, mask=P.EvMask.EV_OP, ev_op=P.EvOp.REPLACE,
             entries=[[ev_hex(0x0101), 1, ev_hex(5), 1, 0, 0]])  # ONLINE: no replacing  # fmt: skip


def test_cc_profiles_after_mrc_ctl(pair: Pair) -> None:
    from host.agent.ocp import abi as P

    h0, h1 = pair.h0, pair.h1
    if os.geteuid() != 0:
        h0.fails("cc_profile", errno.EPERM, op="modify", id=3, mask=P.CcMask.ALGORITHM,
                 algorithm="fixed")  # fmt: skip
        return
    cc = {"op": "modify", "id": 3}
    h0.fails("cc_profile", errno.EINVAL, **cc, mask=P.CcMask.STATE, state=P.ProfileState.OFFLINE)
    h0.fails("cc_profile", errno.EINVAL, **cc, mask=P.CcMask.ALGORITHM, algorithm="vegas")
    h0.fails("cc_profile", errno.EINVAL, **cc, mask=P.CcMask.ALGORITHM, algorithm="")
    h0.ok("cc_profile", **cc, mask=P.CcMask.ALGORITHM | P.CcMask.STATE, algorithm="nscc",
          state=P.ProfileState.OFFLINE)  # fmt: skip
    h0.fails("cc_profile", errno.EINVAL, **cc, mask=P.CcMask.STATE, state=P.ProfileState.ONLINE)
    h0.fails("cc_profile", errno.EINVAL, **cc, mask=P.CcMask.CONFIG, config={"gamma": -1.0})
    config = {"max_cwnd": 300_000, "base_rtt": 0, "disable_qa": 1}  # 0: the fabric's default
    h0.ok("cc_profile", **cc, mask=P.CcMask.CONFIG | P.CcMask.STATE, config=config,
          state=P.ProfileState.ONLINE)  # fmt: skip
    queried = h0.ok("cc_profile", op="query", id=3, mask=P.CcMask.CONFIG)
    assert queried["algorithm"] == "nscc" and queried["config"] == {"max_cwnd": 300_000,
                                                                     "disable_qa": 1}  # fmt: skip
    assert h0.ok("cc_profile", op="query", id=0, mask=P.CcMask.ALGORITHM)["state"] == 2
    h0.fails("cc_profile", errno.EBUSY, op="modify", id=0, mask=P.CcMask.STATE, state=1)
    qa, _, _ = make_qp(h0)
    qb, _, _ = make_qp(h1)
    h0.fails("modify_qp", errno.EINVAL, qpn=qa, state=INIT, ev_profile=0, cc_profile=4)
    h0.ok("modify_qp", qpn=qa, state=INIT, ev_profile=0, cc_profile=3)
    h1.ok("modify_qp", qpn=qb, state=INIT, ev_profile=0, cc_profile=0)
    h0.ok("modify_qp", qpn=qa, state=RTR, dgid=h1.gid(), dest_qpn=qb)
    core = h0.agent.context.qp(qa).cc
    assert type(core).__name__.lower().startswith("nscc")
    assert core.params["max_cwnd"] == 300_000 and core.params["disable_qa"] == 1
    h0.fails("cc_profile", errno.EBUSY, **cc, mask=P.CcMask.STATE, state=P.ProfileState.OFFLINE)
    h0.ok("destroy_qp", qpn=qa)
    h0.ok("cc_profile", **cc, mask=P.CcMask.STATE, state=P.ProfileState.OFFLINE)
    h0.ok("cc_profile", **cc, mask=P.CcMask.STATE, state=P.ProfileState.INIT)
    h0.fails("cc_profile", errno.EINVAL, op="query", id=3, mask=P.CcMask.STATE)


STEV, SRV6, UDP = 1, 2, 4  # mrc_ctl_ev_fmt_mode


def gid(host: Host, plane: int) -> str:
    return str(host.nic(plane).address.packed.hex())


def ep_batch(side: Side, reqs: list[list[Any]], **fields: Any) -> Any:
    """Start an ``ep_probe`` batch (root); the Deferred that answers it."""
    from host.agent.control import Deferred

    side.conn.uid = 0
    deferred = side.provider.dispatch(side.conn, {"cmd": "ep_probe", "reqs": reqs, **fields})  # type: ignore[arg-type]
    assert isinstance(deferred, Deferred) and not deferred.done, deferred
    return deferred


def answer(pair: Pair, deferred: Any, seconds: float = 0.5) -> dict[str, Any]:
    got: list[dict[str, Any]] = []
    deferred.add_listener(got.append)
    pair.run(seconds)
    assert got, "no answer"
    return got[0]


def test_ev_probes_are_connectionless(pair: Pair, fabric: Fabric) -> None:
    h0, h1 = pair.h0, pair.h1
    a, b = fabric.host("h0"), fabric.host("h1")
    assert not list(h0.agent.context.qps)  # no QP: any EV, to any host
    carrier = next(p.carrier for p in fabric.paths("h0", "h1") if p.plane == 1)
    reqs = [
        [7, gid(a, 0), gid(b, 0), STEV, ev_hex(0x12345678), 1],
        [8, "00" * 16, gid(b, 1), UDP, ev_hex(0xBEEF), 0],  # no sgid: the NIC of dgid's plane
        [9, gid(a, 1), gid(b, 1), SRV6, carrier.packed.hex(), 2],
    ]
    reply = answer(pair, ep_batch(h0, reqs, tc=46, timeout=10**6))
    assert reply["ok"], reply
    by_id = {r[0]: r for r in reply["responses"]}
    assert sorted(by_id) == [7, 8, 9]
    assert by_id[7][1] == 1 and by_id[8][1] == 2 and by_id[9][1] == 2
    # RTT in ns of real-fabric time, the responder's service time taken off
    assert all(0 < r[2] < 10**6 and r[3] == 1 for r in reply["responses"])
    stats = h1.agent.context.stats()
    assert stats["ep_requests_answered"] == 3
    assert stats["drops"].get("unknown_qp", 0) == 0


def test_ep_request_errors_name_the_request(pair: Pair, fabric: Fabric) -> None:
    h0 = pair.h0
    a, b = fabric.host("h0"), fabric.host("h1")
    h0.conn.uid = 1000
    h0.fails("ep_probe", errno.EPERM, timeout=10**6, reqs=[])
    h0.conn.uid = 0
    good = [1, gid(a, 0), gid(b, 0), STEV, ev_hex(1), 0]
    bad = {
        "unknown destination": [2, gid(a, 0), "fd00" + "00" * 14, STEV, ev_hex(1), 0],
        "destination is the host": [2, gid(a, 1), gid(a, 0), STEV, ev_hex(1), 0],
        "foreign sgid": [2, gid(b, 1), gid(b, 0), STEV, ev_hex(1), 0],
        "planes differ": [2, gid(a, 1), gid(b, 0), STEV, ev_hex(1), 0],
        "port not sgid's": [2, gid(a, 0), gid(b, 0), STEV, ev_hex(1), 2],
        "format": [2, gid(a, 0), gid(b, 0), 3, ev_hex(1), 0],
        "UDP EV wider than 16 bits": [2, gid(a, 0), gid(b, 0), UDP, ev_hex(0x10000), 0],
        "req_id twice": [1, gid(a, 0), gid(b, 0), STEV, ev_hex(2), 0],
        "req_id reserved": [0xFF00, gid(a, 0), gid(b, 0), STEV, ev_hex(2), 0],
        "shape": [2, gid(a, 0), gid(b, 0), STEV, ev_hex(2)],
    }
    for why, req in bad.items():
        reply = h0.fails("ep_probe", errno.EINVAL, timeout=10**6, reqs=[good, req])
        assert reply["bad"] == 1 and "request 1" in reply["error"], (why, reply)
    h0.fails("ep_probe", errno.EINVAL, op=2, timeout=10**6, reqs=[good])
    h0.fails("ep_probe", errno.EINVAL, tc=64, timeout=10**6, reqs=[good])
    status = [*good, 1 << 3]  # port 3: the host has ports 1 and 2
    reply = h0.fails("ep_probe", errno.EINVAL, op=1, timeout=10**6, reqs=[good, status])
    assert reply["bad"] == 1
    assert h0.ok("ep_probe", timeout=10**6, reqs=[]) == {"ok": True, "responses": []}
    assert h0.agent.context.stats()["ep_requests_sent"] == 0


def test_ep_probe_without_a_response_times_out(pair: Pair, fabric: Fabric) -> None:
    a, b = fabric.host("h0"), fabric.host("h1")
    pair.sim.fail_link("h1", b.nic(0).switch, start=0.0)  # h1's plane 0 drops everything
    reqs = [[1, gid(a, 0), gid(b, 0), STEV, ev_hex(5), 0],
            [2, gid(a, 1), gid(b, 1), STEV, ev_hex(5), 0]]  # fmt: skip
    deferred = ep_batch(pair.h0, reqs, timeout=100_000)  # 100 us, 0.1 s dilated
    reply = answer(pair, deferred, 0.2)
    assert not reply["ok"] and reply["errno"] == errno.ETIMEDOUT, reply
    assert [r[0] for r in reply["responses"]] == [2]
    # the batch is over: its request id may be used again at once
    deferred = ep_batch(pair.h0, reqs[1:], timeout=100_000)
    assert answer(pair, deferred, 0.2)["ok"]


def test_port_status_update_retires_the_peers_evs(pair: Pair, fabric: Fabric) -> None:
    h0, h1 = pair.h0, pair.h1
    qa, _, qb, _ = link(pair)
    a, b = fabric.host("h0"), fabric.host("h1")
    h1.conn.uid = 0
    events = h1.ok("create_ev_cq", cqe=4096)["cq"]
    # h0 says its port 2 is down: h1 stops using the EVs of that plane towards h0
    req = [[3, gid(a, 0), gid(b, 0), STEV, ev_hex(9), 1, 1 << 1]]
    reply = answer(pair, ep_batch(h0, req, op=1, timeout=10**6))
    assert reply["ok"] and [r[:2] for r in reply["responses"]] == [[3, 1]], reply
    got = h1.poll(events, 4096)
    first: dict[int, int] = {}
    for e in got:
        first.setdefault(e[1], e[4])
    assert first and {e[2] for e in got} == {2}, got  # port 2's EVs only
    assert set(first.values()) == {abi.EvStateBit.ASSUMED_BAD}, got
    # a later update with both ports up is answered too
    req = [[4, gid(a, 1), gid(b, 1), STEV, ev_hex(9), 2, 0b110]]
    reply = answer(pair, ep_batch(h0, req, op=1, timeout=10**6))
    assert reply["ok"] and [r[:2] for r in reply["responses"]] == [[4, 2]], reply


def srv6_ev_hex(path: Any, srh: bool) -> str:
    """An SRV6 EV as the C library sends it (the whole 32-byte mrc_ctl_ev_t): the carrier, with
    an SRH the carrier then the segment, zeros after."""
    raw = path.srh_carrier.packed + path.srh_segment.packed if srh else path.carrier.packed
    return raw.ljust(32, b"\0").hex()


def explicit_srv6(side: Side, fmt_id: int, pid: int, entries: list[tuple[str, int]]) -> None:
    """EV profile ``pid``: EXP on format ``fmt_id``, OFFLINE, every EV replaced."""
    from host.agent.ocp import abi as P

    ev = {"op": "modify", "id": pid}
    side.ok("ev_profile", **ev, state=P.ProfileState.OFFLINE, mode=P.EvMode.EXP, fmt_id=fmt_id,
            count=len(entries), mask=P.EvMask.STATE | P.EvMask.MODE | P.EvMask.FMT_ID | P.EvMask.COUNT)  # fmt: skip
    for value, port in entries:
        unpopulated = ["00" * 32, 0, value, port, 0, 0]
        side.ok(
            "ev_profile", **ev, mask=P.EvMask.EV_OP, ev_op=P.EvOp.REPLACE, entries=[unpopulated]
        )


@pytest.mark.parametrize("srh", [False, True], ids=["srv6", "srv6+srh"])
def test_explicit_srv6_evs_are_paths(pair: Pair, fabric: Fabric, srh: bool) -> None:
    from host.agent.ocp import abi as P

    h0, h1 = pair.h0, pair.h1
    if os.geteuid() != 0:
        return
    fields = [32] + [16] * 6 + ([32] + [16] * 4 if srh else [])  # beyond 128 bits: an SRH
    h0.ok("ev_fmt_profile", op="modify", id=4, mask=P.FmtMask.MODE | P.FmtMask.STATE | P.FmtMask.OP,
          mode=P.EvFmtMode.SRV6, state=P.ProfileState.OFFLINE, fields_op=P.FieldsOp.MODIFY, fields=fields)  # fmt: skip
    h0.ok("ev_fmt_profile", op="modify", id=4, mask=P.FmtMask.STATE, state=P.ProfileState.ONLINE)
    to_h1, to_h2 = fabric.paths("h0", "h1"), fabric.paths("h0", "h2")
    nbytes = 32 if srh else 16

    # not a path from h0 on its port: EINVAL naming the EV
    wrong_port = (srv6_ev_hex(to_h1[1], srh), to_h1[1].plane + 1)
    wrong_port = (wrong_port[0], 3 - wrong_port[1])
    half = (srv6_ev_hex(to_h1[0], not srh), to_h1[0].plane + 1)  # the other format's bytes
    mixed = (srv6_ev_hex(to_h2[0], srh), to_h2[0].plane + 1)  # a path to another host
    good = (srv6_ev_hex(to_h1[0], srh), to_h1[0].plane + 1)
    for pid, bad, words in ((10, wrong_port, "EV 1 "), (11, half, "EV 1 "),
                            (12, mixed, "EV 1 is a path to h2")):  # fmt: skip
        explicit_srv6(h0, 4, pid, [good, bad])
        reply = h0.fails("ev_profile", errno.EINVAL, op="modify", id=pid, mask=P.EvMask.STATE,
                         state=P.ProfileState.ONLINE)  # fmt: skip
        assert words in reply["error"] and reply["index"] == 1, reply
        assert h0.ok("ev_profile", op="query", id=pid, mask=P.EvMask.STATE)["state"] == 1

    # every path to h1: ONLINE, the array gives the EVs' full bytes back
    entries = [(srv6_ev_hex(p, srh), p.plane + 1) for p in to_h1]
    explicit_srv6(h0, 4, 8, entries)
    h0.ok("ev_profile", op="modify", id=8, mask=P.EvMask.STATE | P.EvMask.EVENT_MASK,
          state=P.ProfileState.ONLINE, event_mask=3)  # fmt: skip
    array = h0.ok("ev_profile", op="query", id=8, mask=P.EvMask.EV_OP,
                  ev_op=P.EvOp.QUERY_ARRAY, entries=[0] * len(entries))["array"]  # fmt: skip
    assert array == [[h[: 2 * nbytes], port] for h, port in entries]

    # a QP towards another host than the carriers lead to: EINVAL naming the profile
    qc, _, _ = make_qp(h0)
    h0.ok("modify_qp", qpn=qc, state=INIT, ev_profile=8, cc_profile=0)
    h2_gid = fabric.host("h2").nic(0).address.packed.hex()
    reply = h0.fails("modify_qp", errno.EINVAL, qpn=qc, state=RTR, dgid=h2_gid, dest_qpn=300)
    assert "EV profile 8" in reply["error"] and "h1" in reply["error"], reply
    h0.ok("destroy_qp", qpn=qc)

    # a QP towards h1 moves data on exactly those paths
    evq = h0.ok("create_ev_cq", cqe=64)["cq"]
    qa, scq, _ = make_qp(h0)
    qb, _, _ = make_qp(h1)
    connect(h0, qa, h1, qb, ev_profile=8, cc_profile=0)
    slots = h0.agent.context.qp(qa).ev_table.slots
    assert [s.path for s in slots] == to_h1
    for slot in slots:
        assert slot.dst == (slot.path.srh_carrier if srh else slot.path.carrier)
        assert slot.srh == (slot.path.srh_segment if srh else None)
        assert slot.label == slot.path.label
    write_arrives_intact(pair, qa, scq)

    # EV states by the EV's bytes; an event gives them back in full
    one = [entries[1][0], entries[1][1], "", 0, P.EvStateBit.of(ocp_evstate("unknown")), 0]
    h0.ok("ev_profile", op="modify", id=8, mask=P.EvMask.EV_OP, ev_op=P.EvOp.MODIFY_STATE,
          entries=[one])  # fmt: skip
    pair.run(1.0)  # probed, GOOD on the reply
    states = h0.ok("ev_profile", op="query", id=8, mask=P.EvMask.EV_OP,
                   ev_op=P.EvOp.QUERY_STATE, entries=[one])["states"]  # fmt: skip
    assert states == [P.EvStateBit.of(ocp_evstate("good"))]
    events = [e for e in h0.poll(evq) if e[0] == 8]
    assert events and all(e[5] == entries[1][0] and e[2] == entries[1][1] for e in events)
    assert events[-1][4] == P.EvStateBit.of(ocp_evstate("good"))


def test_ev_probe_with_an_srh(pair: Pair, fabric: Fabric) -> None:
    h0 = pair.h0
    a, b = fabric.host("h0"), fabric.host("h1")
    path = next(p for p in fabric.paths("h0", "h1") if p.plane == 1)
    reqs = [
        [3, gid(a, 1), gid(b, 1), SRV6, srv6_ev_hex(path, True), 2],
        [4, gid(a, 1), gid(b, 1), SRV6, srv6_ev_hex(path, False), 2],  # the segment zero: no SRH
    ]
    reply = answer(pair, ep_batch(h0, reqs, tc=46, timeout=10**6))
    assert reply["ok"], reply
    assert sorted(r[0] for r in reply["responses"]) == [3, 4]
    assert pair.h1.agent.context.stats()["ep_requests_answered"] == 2
    assert pair.sim.counters.get("drop_sid_end", 0) == 0
