"""What one session may take of the agent through the OCP provider, and that nothing a client
sends on the OCP socket takes the agent down (docs/ocp-api.md, "Limits and isolation").

One provider (h0 of the small fabric) on a transport-core context that is not on any network:
its QPs reach RTS towards h1 and what they post stays posted. The "application" is this test
process (its buffers are read in place, as an application's are), or, for work request chains
through lib_mrc.so, a C program (tests/ocp/c/wr_chain.c) talking to the provider's socket.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.loop import SelectorLoop
from test_ocp_provider import FakeAgent, FakeConn, Side

from host.agent.ocp import OcpProvider, abi, provider, work
from host.agent.ocp.objects import Session
from host.transport.api import Context
from host.transport.cc import CcProfile
from host.transport.config import StackConfig
from topologies import Fabric, load_topology
from topologies.config import shipped_topology

ROOT = Path(__file__).resolve().parents[2]
MRC_H_PATH = Path(os.environ.get("MRC_H_PATH", str(ROOT.parent / "shared" / "ocp-mrc")))
RTS = 3


class LoneAgent(FakeAgent):
    """A test agent on no network: nothing it posts leaves, no time passes."""

    def __init__(self, fabric: Fabric, name: str) -> None:  # no network to attach to
        self.fabric = fabric
        self.host = fabric.host(name)
        self.context = Context(name, self.host.nics, config=StackConfig(), seed=7)
        self.cc_profile = CcProfile("ecn-delay", {})
        self.waiters = []

    def now(self) -> float:
        return 0.0

    def after_core(self, now: float) -> None:
        pass


class Device(Side):
    """The provider of h0 and a session of this process (``call``, ``ok``, ``fails``)."""

    def __init__(self, fabric: Fabric, tmp: Path) -> None:  # one host, no network
        self.agent = LoneAgent(fabric, "h0")
        self.provider = OcpProvider(self.agent, tmp / "h0.ocp.sock")
        self.conn = FakeConn()
        self.hello = self.call("hello")
        self.buffers: list[Any] = []
        self.peer_gid = fabric.host("h1").nics[0].address.packed.hex()

    @property
    def session(self) -> Session:
        assert isinstance(self.conn.owner, Session)
        return self.conn.owner

    def region(self, size: int) -> tuple[int, int]:
        """A registered buffer of this process: its address and lkey."""
        buf = ctypes.create_string_buffer(size)
        self.buffers.append(buf)
        addr = ctypes.addressof(buf)
        return addr, self.ok("reg_mr", addr=addr, length=size, access=1)["lkey"]

    def qp(self, **caps: Any) -> int:
        """A QP in RTS towards h1 (nothing answers it)."""
        cq = self.ok("create_cq", cqe=1024)["cq"]
        qpn = self.ok("create_qp", send_cq=cq, recv_cq=cq, **{"max_send_wr": 64, **caps})["qpn"]
        self.ok("modify_qp", qpn=qpn, state=1)
        self.ok("modify_qp", qpn=qpn, state=2, dgid=self.peer_gid, dest_qpn=0x4321)
        self.ok("modify_qp", qpn=qpn, state=RTS)
        return int(qpn)

    def close(self) -> None:
        self.provider.close()  # every session ended, the socket closed


@pytest.fixture(scope="module")
def fabric() -> Fabric:
    return Fabric(load_topology(shipped_topology("small")))


@pytest.fixture
def device(fabric: Fabric, tmp_path: Path) -> Iterator[Device]:
    dev = Device(fabric, tmp_path)
    yield dev
    dev.close()


def write(wr_id: int, sges: list[list[int]], flags: int = 0) -> list[Any]:
    return [wr_id, 0, flags, 0, 0x10000, 0x1234, sges]


def record_reads(device: Device, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The lengths of the session's reads of its process's memory, from now on."""
    reads: list[int] = []
    read = device.session.process.read

    def recorded(addr: int, length: int) -> bytearray:
        reads.append(length)
        return read(addr, length)

    monkeypatch.setattr(device.session.process, "read", recorded)
    return reads


def test_the_device_reports_its_limits(device: Device) -> None:
    reply = device.ok("query_device")
    assert reply["max_mr"] == abi.MAX_MR and reply["max_qp"] == abi.MAX_QP
    assert reply["max_cq"] == abi.MAX_CQ and reply["max_mr_size"] == abi.MAX_MR_SIZE
    assert reply["max_inline_data"] == abi.MAX_INLINE and reply["max_msg_sz"] == abi.MAX_MESSAGE
    assert reply["max_qp_wr"] == abi.MAX_WR


@pytest.mark.parametrize(
    ("cmd", "kind"), [("reg_mr", "mrs"), ("create_cq", "cqs"), ("create_qp", "qps")]
)
def test_regions_cqs_and_qps_are_capped_per_session(
    device: Device, monkeypatch: pytest.MonkeyPatch, cmd: str, kind: str, fabric: Fabric,
    tmp_path: Path,
) -> None:  # fmt: skip
    _, attribute, _ = provider.QUOTAS[cmd]
    monkeypatch.setitem(provider.QUOTAS, cmd, (kind, attribute, 3))
    buf = ctypes.create_string_buffer(4096)
    cq = device.ok("create_cq", cqe=16)["cq"] if cmd == "create_qp" else 0
    fields = {
        "reg_mr": {"addr": ctypes.addressof(buf), "length": 4096, "access": 0},
        "create_cq": {"cqe": 16},
        "create_qp": {"send_cq": cq, "recv_cq": cq, "max_send_wr": 4},
    }[cmd]
    while len(getattr(device.session, kind)) < 3:
        device.ok(cmd, **fields)
    reply = device.fails(cmd, errno.ENOMEM, **fields)
    assert f"{attribute} is 3" in reply["error"]
    # another session is not held back by this one
    other = Device(fabric, tmp_path / "other")
    try:
        other_cq = other.ok("create_cq", cqe=16)["cq"]
        other.ok(cmd, **{**fields, **({"send_cq": other_cq, "recv_cq": other_cq} if cq else {})})
    finally:
        other.close()
    assert device.ok("query_device")  # the session goes on


def test_a_region_is_at_most_max_mr_size(device: Device) -> None:
    buf = ctypes.create_string_buffer(64)
    reply = device.fails(
        "reg_mr", errno.EINVAL, addr=ctypes.addressof(buf), length=abi.MAX_MR_SIZE + 1, access=0
    )
    assert "'length'" in reply["error"]


def test_sges_are_checked_before_anything_is_read(
    device: Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    addr, lkey = device.region(4096)
    qpn = device.qp(max_inline=64, max_send_sge=2)
    reads = record_reads(device, monkeypatch)
    inline = 1 << 3
    # inline data over max_inline_data: refused before it is read
    reply = device.fails(
        "post_send", errno.EINVAL, qpn=qpn, wrs=[write(1, [[addr, 40, 0], [addr, 40, 0]], inline)]
    )
    assert "max_inline_data is 64" in reply["error"] and reads == []
    # an SGE of a negative or out-of-range length, address or lkey names the WR
    for sge in ([addr, -5, lkey], [-1, 8, lkey], [addr, 8, 1 << 32], [addr, 1 << 32, lkey]):
        reply = device.fails("post_send", errno.EINVAL, qpn=qpn, wrs=[write(7, [sge])])
        assert reply["bad"] == 0 and "WR 0" in reply["error"], sge
    # an SGE longer than max_msg_sz, inline so that no region bounds it
    reply = device.fails(
        "post_send", errno.EINVAL, qpn=qpn, wrs=[write(1, [[addr, abi.MAX_MESSAGE + 1, 0]], inline)]
    )
    assert "max_msg_sz" in reply["error"] and reads == []
    device.fails("post_recv", errno.EINVAL, qpn=qpn, wrs=[[1, [[addr, -5, lkey]]]])
    device.ok("post_send", qpn=qpn, wrs=[write(2, [[addr, 64, 0]], inline)])
    assert reads == [64]


def test_a_message_is_read_in_pieces(device: Device, monkeypatch: pytest.MonkeyPatch) -> None:
    addr, lkey = device.region(20000)
    qpn = device.qp()
    monkeypatch.setattr(work, "READ_CHUNK", 4096)
    reads = record_reads(device, monkeypatch)
    device.ok("post_send", qpn=qpn, wrs=[write(1, [[addr, 20000, lkey]])])
    assert reads == [4096] * 4 + [20000 - 4 * 4096]


def test_bytes_held_until_completion_are_capped_per_qp_and_session(
    device: Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(work, "MAX_HELD_QP", 64 << 10)
    monkeypatch.setattr(work, "MAX_HELD_SESSION", 96 << 10)
    addr, lkey = device.region(16 << 10)
    first, second = device.qp(), device.qp()
    sge = [[addr, 16 << 10, lkey]]
    # per QP: four 16 KiB WRITEs fit, the fifth of the same post does not (posted: four)
    reply = device.fails(
        "post_send", errno.ENOMEM, qpn=first, wrs=[write(i, sge) for i in range(5)]
    )
    assert reply["bad"] == 4 and "this QP's sends" in reply["error"]
    assert device.ok("query_qp", qpn=first)["sends_outstanding"] == 4
    # per session: the other QP gets what the session has left
    device.ok("post_send", qpn=second, wrs=[write(10, sge), write(11, sge)])
    reply = device.fails("post_send", errno.ENOMEM, qpn=second, wrs=[write(12, sge)])
    assert reply["bad"] == 0 and "this context's sends" in reply["error"]
    # a QP in ERR flushes what it held: the session may post again
    device.ok("modify_qp", qpn=first, state=6)
    third = device.qp()
    device.ok("post_send", qpn=third, wrs=[write(20, sge), write(21, sge)])


def test_a_long_chain_is_posted_and_one_past_the_queue_is_enomem(device: Device) -> None:
    addr, lkey = device.region(64)
    qpn = device.qp(max_send_wr=abi.MAX_WR)
    sge = [[addr, 8, lkey]]
    device.ok("post_send", qpn=qpn, wrs=[write(i, sge) for i in range(13000)])
    reply = device.fails(
        "post_send", errno.ENOMEM, qpn=qpn, wrs=[write(i, sge) for i in range(4000)]
    )
    assert reply["bad"] == abi.MAX_WR - 13000
    assert device.ok("query_qp", qpn=qpn)["sends_outstanding"] == abi.MAX_WR


# -- fuzzing the OCP socket's request parser and the provider --------------------------------

COMMANDS = ["hello", "attach", "query_device", "query_port", "stats", "reg_mr", "dereg_mr",
            "create_cq", "destroy_cq", "poll_cq", "req_notify_cq", "create_qp", "destroy_qp",
            "query_qp", "modify_qp", "post_send", "post_recv", "ev_profile", "cc_profile",
            "ep_batch", "nope", ""]  # fmt: skip
FIELDS = ["qpn", "cq", "send_cq", "recv_cq", "wrs", "addr", "length", "lkey", "access", "cqe",
          "n", "state", "dgid", "dest_qpn", "max_send_wr", "max_inline", "port", "session",
          "token", "role", "op", "id", "mask", "channel", "max_send_sge"]  # fmt: skip


def values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(-3, 70_000), st.text(max_size=8),
        st.sampled_from([-(1 << 63), 1 << 32, 1 << 64, abi.MAX_MESSAGE + 1, abi.U64_MAX]),
        st.floats(allow_nan=False, allow_infinity=False, width=32),
    )  # fmt: skip
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4), max_leaves=12)


requests = st.fixed_dictionaries(
    {"cmd": st.sampled_from(COMMANDS)}, optional={f: values() for f in FIELDS}
)


@pytest.fixture(scope="module")
def fuzzed(fabric: Fabric, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Device]:
    dev = Device(fabric, tmp_path_factory.mktemp("fuzz"))
    dev.region(4096)
    dev.qp(max_inline=64, max_send_sge=2)
    yield dev
    dev.close()


def answers(dev: Device, line: bytes) -> None:
    """One request line through the socket's decoder and the provider: an answer, never an
    internal error."""
    reply, _ = dev.provider.server.dispatch(line, dev.conn)  # type: ignore[arg-type]
    if not isinstance(reply, dict):
        return  # a deferred reply (endpoint requests)
    assert isinstance(reply["ok"], bool) and isinstance(reply.get("errno", 0), int)
    if not reply["ok"]:
        assert reply["error"] and "internal error" not in reply["error"], (line, reply)
    json.dumps(reply)


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(request=requests)
def test_random_requests_get_answers(fuzzed: Device, request: dict[str, Any]) -> None:
    answers(fuzzed, json.dumps(request).encode())


VALID = [
    b'{"cmd":"post_send","qpn":QPN,"wrs":[[1,0,0,0,65536,4660,[[ADDR,16,LKEY]]]]}',
    b'{"cmd":"post_recv","qpn":QPN,"wrs":[[1,[[ADDR,16,LKEY]]]]}',
    b'{"cmd":"reg_mr","addr":ADDR,"length":4096,"access":3}',
    b'{"cmd":"modify_qp","qpn":QPN,"state":3,"timeout":14}',
    b'{"cmd":"poll_cq","cq":1,"n":4}',
]


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    base=st.sampled_from(VALID),
    cuts=st.lists(st.tuples(st.integers(0, 200), st.binary(max_size=6)), max_size=4),
)
def test_mutated_request_lines_get_answers(
    fuzzed: Device, base: bytes, cuts: list[tuple[int, bytes]]
) -> None:
    session = fuzzed.session
    mr = next(iter(session.mrs.values()))
    line = (
        base.replace(b"QPN", str(next(iter(session.qps))).encode())
        .replace(b"ADDR", str(mr.addr).encode())
        .replace(b"LKEY", str(mr.lkey).encode())
    )
    for at, insert in cuts:  # overwrite a few bytes here and there
        at %= len(line) + 1
        line = line[:at] + insert + line[at + len(insert) :]
    answers(fuzzed, line)


# -- a long chain through lib_mrc.so ------------------------------------------------------------

HAVE_C = (
    shutil.which("make") is not None and shutil.which("cc") is not None
    and Path("/usr/include/infiniband/verbs.h").is_file() and (MRC_H_PATH / "mrc.h").is_file()
)  # fmt: skip


@pytest.mark.skipif(
    not HAVE_C, reason="needs make, a C compiler, libibverbs-dev and the OCP headers (MRC_H_PATH)"
)
@pytest.mark.skipif(os.geteuid() != 0, reason="the provider reads a child's memory: needs root")
def test_a_chain_longer_than_a_request_line_goes_through_lib_mrc(
    device: Device, tmp_path: Path
) -> None:
    build = tmp_path / "capi"
    run = {"capture_output": True, "text": True, "timeout": 300, "check": True}
    subprocess.run(["make", "-C", str(ROOT / "capi"), f"BUILD={build}",
                    f"MRC_H_PATH={MRC_H_PATH}", str(build / "lib_mrc.so"),
                    str(build / "verbs" / "libibverbs.so.1")], **run)  # type: ignore[call-overload]  # fmt: skip
    program = tmp_path / "wr_chain"
    subprocess.run(["cc", "-Wall", "-Wextra", "-Werror", f"-I{MRC_H_PATH}", "-o", str(program),
                    str(ROOT / "tests" / "ocp" / "c" / "wr_chain.c"), f"-L{build}", "-l_mrc",
                    f"-Wl,-rpath,{build}", "-libverbs"], **run)  # type: ignore[call-overload]  # fmt: skip
    serving = SelectorLoop(device.provider.server)
    try:
        env = dict(os.environ, LD_LIBRARY_PATH=f"{build}/verbs:{build}",
                   MRC_TESTBED_OCP_SOCKET=str(device.provider.path), MRC_TESTBED_HOST="h0")  # fmt: skip
        done = subprocess.run(
            [str(program), device.peer_gid], env=env, capture_output=True, text=True,
            timeout=240, check=False,
        )  # fmt: skip
    finally:
        serving.close()
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "ALL OK" in out, out
    assert out.count("ok ") >= 4
