"""Another process's memory, read and written in place with process_vm_readv / process_vm_writev.

The OCP API provider (:mod:`host.agent.ocp`) registers an application's ``ibv_reg_mr`` buffer
with the transport core as a :class:`AppMemory`: the core's receiver writes arriving payload
straight into the application's address space (``region.view[a:b] = payload``), and the sender
reads a work request's bytes from it when the request is posted. The agent keeps no copy of the
application's memory. Reading or writing another process needs ptrace access to it (the agent
runs as root, CAP_SYS_PTRACE).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from typing import Any

__all__ = ["AppMemory", "MemoryAccessError", "read_memory", "write_memory"]


class MemoryAccessError(OSError):
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


class AppMemory:
    """``length`` bytes at ``addr`` of process ``pid``, sliced like a bytearray.

    A placement target for :class:`host.transport.region.MemoryRegion`: the core writes with
    ``mem[a:b] = data`` (offsets into the region). A failed write (the process unmapped the
    buffer or exited) is counted in :attr:`write_errors` rather than raised into the core.
    """

    def __init__(self, pid: int, addr: int, length: int) -> None:
        self.pid = pid
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
        return bytes(read_memory(self.pid, self.addr + start, stop - start))

    def __setitem__(self, index: slice, data: Any) -> None:
        start, stop = self._span(index)
        if len(data) != stop - start:
            raise ValueError(f"AppMemory: {len(data)} bytes for a slice of {stop - start}")
        try:
            write_memory(self.pid, self.addr + start, data)
        except MemoryAccessError:
            self.write_errors += 1
            return
        self.bytes_written += stop - start
