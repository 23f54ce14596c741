"""The link state of the plane NICs, from the kernel's rtnetlink link messages (no polling).

A ``NETLINK_ROUTE`` socket subscribed to ``RTMGRP_LINK`` becomes readable whenever an
interface of the network namespace changes; :meth:`LinkWatch.changes` reads every message
waiting and returns the planes whose NIC went down or came up (up: administratively up with
its carrier, ``IFF_UP`` and ``IFF_LOWER_UP``). The agent tells the core
(``Context.set_port_state``), which retires the plane's EVs at once and tells the peers.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping

RTMGRP_LINK = 1
RTM_NEWLINK = 16
RTM_DELLINK = 17
IFF_UP = 0x1
IFF_LOWER_UP = 0x10000
_NLMSGHDR = struct.Struct("=IHHII")
_IFINFOMSG = struct.Struct("=BxHiII")


class LinkWatch:
    """Link up/down of the interfaces named in ``planes`` (interface -> plane)."""

    def __init__(self, planes: Mapping[str, int]) -> None:
        self.sock = socket.socket(
            socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK, socket.NETLINK_ROUTE
        )
        self.sock.bind((0, RTMGRP_LINK))
        self._plane_of: dict[int, int] = {}
        for intf, plane in planes.items():
            try:
                self._plane_of[socket.if_nametoindex(intf)] = plane
            except OSError:
                continue
        self.up: dict[int, bool] = dict.fromkeys(planes.values(), True)
        self.messages = 0

    def changes(self) -> list[tuple[int, bool]]:
        """Read every waiting message; ``(plane, up)`` for each NIC whose state changed."""
        out: list[tuple[int, bool]] = []
        while True:
            try:
                data = self.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:  # ENOBUFS: messages lost; the next one still tells the state
                continue
            if not data:
                break
            out += self._parse(data)
        return out

    def _parse(self, data: bytes) -> list[tuple[int, bool]]:
        out: list[tuple[int, bool]] = []
        off = 0
        while off + _NLMSGHDR.size <= len(data):
            length, kind, _, _, _ = _NLMSGHDR.unpack_from(data, off)
            if length < _NLMSGHDR.size:
                break
            if kind in (RTM_NEWLINK, RTM_DELLINK) and off + 16 + _IFINFOMSG.size <= len(data):
                self.messages += 1
                _, _, index, flags, _ = _IFINFOMSG.unpack_from(data, off + 16)
                plane = self._plane_of.get(index)
                if plane is not None:
                    up = kind == RTM_NEWLINK and bool(flags & IFF_UP and flags & IFF_LOWER_UP)
                    if self.up.get(plane) != up:
                        self.up[plane] = up
                        out.append((plane, up))
            off += (length + 3) & ~3
        return out

    def close(self) -> None:
        """Close the netlink socket."""
        self.sock.close()
