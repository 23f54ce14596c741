"""Isolation of the OCP provider's sessions (docs/ocp-api.md, "Limits and isolation"): what is
reported delivered is delivered, a region is reachable through its protection domain's QPs
only, rkeys and QP numbers cannot be guessed, and a session's memory is its process's.

The applications are real processes' memory: this test process's pages (mapped, protected and
unmapped with mmap, mprotect and munmap), a child process's, and a C program that forks
(tests/ocp/c/fork_check.c, through the testbed's libibverbs.so.1).
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import ctypes.util
import errno
import json
import mmap
import os
import selectors
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_ocp_provider as provider_tests
from test_ocp_provider import (
    ACCESS_RW,
    ERR,
    FakeConn,
    Pair,
    Side,
    buffers,
    connect,
    link,
    make_qp,
    write_wr,
)

from host.agent.ocp import abi
from sim.network import SimNet
from topologies import Fabric

fabric = provider_tests.fabric  # the fixtures: the small fabric, two in-memory hosts
pair = provider_tests.pair

PAGE = mmap.PAGESIZE
PROT_NONE = 0  # mmap has PROT_READ and PROT_WRITE only
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]  # fmt: skip
_libc.mprotect.argtypes = _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


class Pages:
    """``count`` pages of this process, mapped read-write, unmapped at :meth:`close`."""

    def __init__(self, count: int) -> None:
        self.count = count
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
        addr = _libc.mmap(None, count * PAGE, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        self.addr: int = addr

    def protect(self, page: int, prot: int) -> None:
        assert _libc.mprotect(self.addr + page * PAGE, PAGE, prot) == 0

    def unmap(self, page: int) -> None:
        assert _libc.munmap(self.addr + page * PAGE, PAGE) == 0

    def close(self) -> None:
        _libc.munmap(self.addr, self.count * PAGE)


@pytest.fixture
def pages() -> Iterator[Pages]:
    mapped = Pages(3)
    yield mapped
    mapped.close()


def async_events(side: Side) -> FakeConn:
    """A connection attached to ``side``'s session as its asynchronous events."""
    conn = FakeConn()
    hello = side.hello
    reply = side.call("attach", conn=conn, session=hello["session"], token=hello["token"],
                      role="async")  # fmt: skip
    assert reply["ok"], reply
    return conn


def another_session(side: Side) -> Side:
    """A second session of ``side``'s provider (another device context)."""
    other = copy.copy(side)
    other.conn = FakeConn()
    other.hello = other.call("hello")
    other.buffers = []
    return other


# -- data that is reported delivered is delivered ----------------------------------------------


def test_reg_mr_checks_every_page(pair: Pair, pages: Pages) -> None:
    h1 = pair.h1
    pages.unmap(1)  # the first and last bytes are mapped, the middle page is not
    reply = h1.fails("reg_mr", errno.EFAULT, addr=pages.addr, length=3 * PAGE, access=ACCESS_RW)
    assert f"{pages.addr + PAGE:#x} is not" in reply["error"], reply
    h1.ok("reg_mr", addr=pages.addr, length=PAGE, access=ACCESS_RW)


def test_reg_mr_for_remote_writes_needs_writable_pages(pair: Pair, pages: Pages) -> None:
    h1 = pair.h1
    pages.protect(2, mmap.PROT_READ)
    reply = h1.fails("reg_mr", errno.EFAULT, addr=pages.addr, length=3 * PAGE, access=ACCESS_RW)
    assert "writable" in reply["error"], reply
    h1.ok("reg_mr", addr=pages.addr, length=3 * PAGE, access=1)  # no remote write: readable


@pytest.mark.parametrize("prot", [PROT_NONE, mmap.PROT_READ], ids=["unmapped", "read-only"])
def test_a_write_the_memory_cannot_take_fails_on_both_sides(
    pair: Pair, pages: Pages, prot: int
) -> None:
    h0, h1 = pair.h0, pair.h1
    qa, scq, qb, _ = link(pair)
    events = async_events(h1)
    remote = {**h1.ok("reg_mr", addr=pages.addr, length=3 * PAGE, access=ACCESS_RW),
              "addr": pages.addr}  # fmt: skip
    src = h0.buffer(3 * PAGE, 0x5A)
    mr = h0.reg(src)
    pages.protect(1, prot)  # registered, then taken away from under the region
    h0.ok("post_send", qpn=qa, wrs=[write_wr(4, mr, remote, 3 * PAGE)])
    pair.run()
    [wc] = h0.poll(scq)
    assert wc[:2] == [4, abi.WcStatus.REM_ACCESS_ERR], wc
    assert h1.ok("query_qp", qpn=qb)["state"] == ERR
    assert events.pushed == [{"event": "async", "type": abi.AsyncEvent.QP_ACCESS_ERR, "qpn": qb}]
    assert h1.provider.counters["access_faults"] == 1
    assert h1.ok("stats")["write_errors"] >= 1


# -- one process cannot reach another's memory ---------------------------------------------------


def test_a_qp_of_another_session_cannot_write_a_region(pair: Pair) -> None:
    h0, h1 = pair.h0, pair.h1
    intruder = another_session(h1)
    qa, scq, _ = make_qp(h0)
    qb, _, _ = make_qp(intruder)
    connect(h0, qa, intruder, qb)
    src, dst, mr, remote = buffers(pair, 4096)  # dst: a region of h1's first session
    ctypes.memset(src, 0x77, 4096)
    h0.ok("post_send", qpn=qa, wrs=[write_wr(1, mr, remote, 4096)])
    pair.run()
    assert h0.poll(scq)[0][1] == abi.WcStatus.REM_ACCESS_ERR
    assert bytes(dst) == bytes(4096)


def test_protection_domains_of_one_session_are_apart(pair: Pair) -> None:
    h0, h1 = pair.h0, pair.h1
    qa, scq, _ = make_qp(h0)
    qb, _, _ = make_qp(h1, pd=2)
    connect(h0, qa, h1, qb)
    src, dst = h0.buffer(4096, 0x33), h1.buffer(4096)
    mr = h0.reg(src)
    other_pd = {**h1.ok("reg_mr", addr=ctypes.addressof(dst), length=4096, access=ACCESS_RW,
                        pd=1), "addr": ctypes.addressof(dst)}  # fmt: skip
    h0.ok("post_send", qpn=qa, wrs=[write_wr(1, mr, other_pd, 4096)])
    pair.run()
    assert h0.poll(scq)[0][1] == abi.WcStatus.REM_ACCESS_ERR
    assert bytes(dst) == bytes(4096)
    # the QP's own domain is reachable
    qa, scq, _ = make_qp(h0)
    qb, _, _ = make_qp(h1, pd=1)
    connect(h0, qa, h1, qb)
    h0.ok("post_send", qpn=qa, wrs=[write_wr(2, mr, other_pd, 4096)])
    pair.run()
    assert h0.poll(scq)[0][1] == abi.WcStatus.SUCCESS
    assert bytes(dst) == bytes(src)


def test_rkeys_and_qp_numbers_differ_after_a_restart(fabric: Fabric, tmp_path: Any) -> None:
    firsts = []
    for run in range(2):  # the same host started twice (same seed, same fabric)
        (tmp_path / str(run)).mkdir()
        side = Side(fabric, "h1", SimNet(fabric, seed=3), tmp_path / str(run))
        qpn = make_qp(side)[0]
        rkey = side.reg(side.buffer(4096))["rkey"]
        side.ok("destroy_qp", qpn=qpn)
        assert make_qp(side)[0] != qpn  # not reused while the agent runs
        firsts.append((qpn, rkey))
        side.close()
    (qpn0, rkey0), (qpn1, rkey1) = firsts
    assert qpn0 != qpn1 and rkey0 != rkey1


def test_the_session_is_bound_to_the_process_not_its_id(pair: Pair) -> None:
    """The process that opened a session exits and its process id comes to name another
    process (here: this one, by giving the connection this process's id): the session reaches
    neither."""
    h1 = pair.h1
    # the child says when it runs: until the loader has finished, a writable mapping of the
    # binary may still become read-only (RELRO)
    code = "import sys, time; print('ready', flush=True); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        conn = FakeConn(pid=child.pid)
        assert h1.call("hello", conn=conn)["ok"]
        with open(f"/proc/{child.pid}/maps") as maps:
            line = next(row for row in maps if row.split()[1].startswith("rw"))
        addr = int(line.split("-")[0], 16)
        reply = h1.call("reg_mr", conn=conn, addr=addr, length=PAGE, access=ACCESS_RW)
        assert reply["ok"], reply
    finally:
        child.kill()
        child.wait()
    conn.pid = h1.conn.pid  # the id now names another process
    mine = h1.buffer(PAGE, 1)
    reply = h1.call("reg_mr", conn=conn, addr=ctypes.addressof(mine), length=PAGE, access=1)
    assert not reply["ok"] and reply["errno"] == errno.ESRCH, reply
    assert "exited" in reply["error"]


ROOT = Path(__file__).resolve().parents[2]
HAVE_C = (
    shutil.which("make") is not None and shutil.which("cc") is not None
    and Path("/usr/include/infiniband/verbs.h").is_file()
)  # fmt: skip


@contextlib.contextmanager
def served(side: Side) -> Iterator[None]:
    """``side``'s provider socket answered from a thread while the block runs."""
    stop = threading.Event()

    def serve() -> None:
        with selectors.DefaultSelector() as selector:
            side.provider.server.register(selector)
            while not stop.is_set():
                for key, mask in selector.select(0.02):
                    key.data(mask)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


def test_what_another_process_writes_on_a_session_is_ignored(pair: Pair) -> None:
    """A process the connection's descriptor was passed to (or a forked child) asks on it:
    the agent does not act for it on the session of the process that connected."""
    with served(pair.h0), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(pair.h0.provider.path))
        stream = sock.makefile("rwb")

        def call(**request: Any) -> Any:
            stream.write(json.dumps(request).encode() + b"\n")
            stream.flush()
            return json.loads(stream.readline())

        assert call(cmd="hello")["ok"]
        line = b'{"cmd":"create_cq","cqe":4}\n'
        # the other process stays alive until the answer: the kernel names the writer of
        # bytes by its process id, and a writer that has exited has none (pid 0)
        other = (
            f"import socket, sys; socket.socket(fileno={sock.fileno()}).sendall({line!r}); "
            "print('sent', flush=True); sys.stdin.read()"
        )
        child = subprocess.Popen([sys.executable, "-c", other], pass_fds=[sock.fileno()],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "sent"
            reply = call(cmd="stats")  # answered first: the other process's request was dropped
        finally:
            child.communicate(timeout=30)
        assert reply["ok"] and reply["session"]["cqs"] == 0, reply
        assert reply["foreign_bytes"] == len(line)


@pytest.mark.skipif(not HAVE_C, reason="needs make, a C compiler and libibverbs-dev")
@pytest.mark.skipif(os.geteuid() != 0, reason="the provider reads a child's memory: needs root")
def test_a_forked_child_gets_a_clear_error_or_a_device_of_its_own(
    pair: Pair, tmp_path: Path
) -> None:
    build = tmp_path / "capi"
    subprocess.run(["make", "-C", str(ROOT / "capi"), f"BUILD={build}", "verbs"],
                   capture_output=True, timeout=300, check=True)  # fmt: skip
    program = tmp_path / "fork_check"
    subprocess.run(["cc", "-Wall", "-Wextra", "-Werror", "-o", str(program),
                    str(ROOT / "tests" / "ocp" / "c" / "fork_check.c"), "-libverbs"],
                   capture_output=True, timeout=300, check=True)  # fmt: skip
    env = dict(os.environ, LD_LIBRARY_PATH=str(build / "verbs"), MRC_TESTBED_HOST="h0",
               MRC_TESTBED_OCP_SOCKET=str(pair.h0.provider.path))  # fmt: skip
    with served(pair.h0):
        done = subprocess.run([str(program)], env=env, capture_output=True, text=True,
                              timeout=120, check=False)  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "ALL OK" in out, out
