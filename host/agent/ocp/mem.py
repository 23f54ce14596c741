"""Another process's memory, read and written in place with process_vm_readv / process_vm_writev.

The OCP API provider (:mod:`host.agent.ocp`) registers an application's ``ibv_reg_mr`` buffer
with the transport core as a :class:`AppMemory`: the core's receiver writes arriving payload
straight into the application's address space (``region.view[a:b] = payload``), and the sender
reads a work request's bytes from it when the request is posted. The agent keeps no copy of the
application's memory. Reading or writing another process needs ptrace access to it (the agent
runs as root, CAP_SYS_PTRACE).

A session's memory is that of one process, not of one process id: :class:`AppProcess` holds a
pidfd (``pidfd_open``) and the start time of the process that opened the session, and every
access first checks that this very process is still there. A process id seen once may belong
to another process later (the first exited and its id was reused); the pidfd never does.
A write that does not land whole raises :class:`MemoryAccessError`, which the transport core
answers as a NIC answers a protection fault (:class:`host.transport.region.PlacementError`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import select
from typing import Any

from host.transport.region import PlacementError

__all__ = ["AppMemory", "AppProcess", "MemoryAccessError", "read_memory", "write_memory"]


class MemoryAccessError(PlacementError):
    """A read or write of another process's memory failed (unmapped, gone, no permission)."""


class _Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_readv = _libc.process_vm_readv
_writev = _libc.process_vm_writev
for _fn in (_readv, _writev):
    _fn.argtypes = [
        ctypes.c_int, ctypes.POINTER(_Iovec), ctypes.c_ulong,
        ctypes.POINTER(_Iovec), ctypes.c_ulong, ctypes.c_ulong,
    ]  # fmt: skip
    _fn.restype = ctypes.c_ssize_t


def _fail(op: str, pid: int, addr: int, length: int, done: int) -> MemoryAccessError:
    code = ctypes.get_errno() or errno.EFAULT
    where = f"{length} bytes at {addr:#x} of process {pid}"
    if done >= 0:
        return MemoryAccessError(errno.EFAULT, f"{op} of {where}: only {done} bytes accessible")
    return MemoryAccessError(code, f"{op} of {where}: {os.strerror(code)}")


def read_memory(pid: int, addr: int, length: int) -> bytearray:
    """``length`` bytes at ``addr`` in process ``pid``; :class:`MemoryAccessError` if not all."""
    out = bytearray(length)
    if not length:
        return out
    local = _Iovec(ctypes.addressof((ctypes.c_char * length).from_buffer(out)), length)
    remote = _Iovec(addr, length)
    done = _readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if done != length:
        raise _fail("read", pid, addr, length, done)
    return out


def write_memory(pid: int, addr: int, data: Any) -> None:
    """Write ``data`` (bytes-like) at ``addr`` in process ``pid``; :class:`MemoryAccessError`
    unless every byte was written."""
    raw = data if isinstance(data, bytes) else bytes(data)
    length = len(raw)
    if not length:
        return
    local = _Iovec(ctypes.cast(ctypes.c_char_p(raw), ctypes.c_void_p).value, length)
    remote = _Iovec(addr, length)
    done = _writev(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if done != length:
        raise _fail("write", pid, addr, length, done)


def start_time(pid: int) -> int:
    """When process ``pid`` started (clock ticks after boot, field 22 of ``/proc/PID/stat``);
    :class:`MemoryAccessError` (ESRCH) when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        raise MemoryAccessError(errno.ESRCH, f"process {pid}: no such process") from None
    # the command name (field 2) is in parentheses and may hold anything: count after it
    return int(text[text.rindex(b")") + 2 :].split()[19])


class AppProcess:
    """The process a session belongs to, held by a pidfd: its memory, and whether it is still
    the process that opened the session (:meth:`check`, before every access)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.started = start_time(pid)
        try:
            self._pidfd = os.pidfd_open(pid)
        except OSError as exc:
            raise MemoryAccessError(exc.errno or errno.ESRCH, f"process {pid}: {exc}") from None
        if start_time(pid) != self.started:  # the id changed hands while the pidfd was opened
            os.close(self._pidfd)
            raise MemoryAccessError(errno.ESRCH, f"process {pid} exited")
        self._poll = select.poll()
        self._poll.register(self._pidfd, select.POLLIN)

    @property
    def alive(self) -> bool:
        """True while the process has not exited (its pidfd turns readable when it does)."""
        return self._pidfd >= 0 and not self._poll.poll(0)

    def check(self) -> None:
        """:class:`MemoryAccessError` (ESRCH) unless the session's process is still there."""
        if not self.alive:
            raise MemoryAccessError(
                errno.ESRCH,
                f"process {self.pid} (the session's) exited: its memory is no longer reachable",
            )

    def read(self, addr: int, length: int) -> bytearray:
        """``length`` bytes at ``addr`` of the process (:func:`read_memory`, after
        :meth:`check`)."""
        self.check()
        return read_memory(self.pid, addr, length)

    def write(self, addr: int, data: Any) -> None:
        """Write ``data`` at ``addr`` of the process (:func:`write_memory`, after
        :meth:`check`)."""
        self.check()
        write_memory(self.pid, addr, data)

    def check_mapped(self, addr: int, length: int, writable: bool) -> None:
        """:class:`MemoryAccessError` (EFAULT) unless every byte of ``[addr, addr + length)``
        is mapped readable (and writable when ``writable``) in the process: the whole range,
        from ``/proc/PID/maps``, as a NIC pins every page of a registration."""
        self.check()
        try:
            with open(f"/proc/{self.pid}/maps", "rb") as maps:
                lines = maps.read().splitlines()
        except OSError:
            raise MemoryAccessError(errno.ESRCH, f"process {self.pid}: no such process") from None
        need = b"rw" if writable else b"r"
        at, end = addr, addr + length
        for line in lines:
            span, perms = line.split(None, 2)[:2]
            low, high = (int(v, 16) for v in span.split(b"-"))
            if high <= at:
                continue
            if low > at:  # a hole
                break
            if perms[: len(need)] != need:
                break
            at = high
            if at >= end:
                self.check()  # the maps read were this process's
                return
        kind = "readable and writable" if writable else "readable"
        raise MemoryAccessError(
            errno.EFAULT,
            f"{length} bytes at {addr:#x} of process {self.pid}: {at - addr} bytes from the "
            f"start are mapped {kind}, then {at:#x} is not",
        )

    def close(self) -> None:
        if self._pidfd >= 0:
            self._poll.unregister(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1


class AppMemory:
    """``length`` bytes at ``addr`` of a process, sliced like a bytearray.

    A placement target for :class:`host.transport.region.MemoryRegion`: the core writes with
    ``mem[a:b] = data`` (offsets into the region). A write that does not land whole (the
    process unmapped or write-protected the buffer, or exited) is counted in
    :attr:`write_errors` and raised (:class:`MemoryAccessError`): the core refuses the packet
    and the QP fails, as on a NIC's protection fault.
    """

    def __init__(self, process: AppProcess, addr: int, length: int) -> None:
        self.process = process
        self.addr = addr
        self.length = length
        self.write_errors = 0
        self.bytes_written = 0

    def __len__(self) -> int:
        return self.length

    def _span(self, index: slice) -> tuple[int, int]:
        start, stop, step = index.indices(self.length)
        if step != 1:
            raise ValueError("AppMemory: only contiguous slices")
        return start, max(stop, start)

    def __getitem__(self, index: slice) -> bytes:
        start, stop = self._span(index)
        return bytes(self.process.read(self.addr + start, stop - start))

    def __setitem__(self, index: slice, data: Any) -> None:
        start, stop = self._span(index)
        if len(data) != stop - start:
            raise ValueError(f"AppMemory: {len(data)} bytes for a slice of {stop - start}")
        try:
            self.process.write(self.addr + start, data)
        except MemoryAccessError:
            self.write_errors += 1
            raise
        self.bytes_written += stop - start
