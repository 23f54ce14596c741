"""Plain pcap files (libpcap format, Ethernet link type) written with struct, one per direction.

``mrc-switch --pcap DIR`` writes ``DIR/{interface}_in.pcap`` and ``DIR/{interface}_out.pcap``
for every port, like ``simple_switch --pcap``; tshark, tcpdump and scapy read them.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

PCAP_MAGIC = 0xA1B2C3D4  # microsecond timestamps
LINKTYPE_ETHERNET = 1
SNAPLEN = 65535

_GLOBAL = struct.Struct("<IHHiIII")
_RECORD = struct.Struct("<IIII")


class PcapWriter:
    """Appends frames to one pcap file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open(path, "wb")  # noqa: SIM115 - closed by close()
        self._file.write(_GLOBAL.pack(PCAP_MAGIC, 2, 4, 0, 0, SNAPLEN, LINKTYPE_ETHERNET))

    def write(self, frame: bytes | bytearray | memoryview, timestamp: float | None = None) -> None:
        """Append one frame captured at ``timestamp`` (seconds since the epoch; default now)."""
        when = time.time() if timestamp is None else timestamp
        seconds = int(when)
        length = len(frame)
        self._file.write(
            _RECORD.pack(seconds, int((when - seconds) * 1e6), min(length, SNAPLEN), length)
        )
        self._file.write(frame[:SNAPLEN])

    def flush(self) -> None:
        """Push buffered records to the file."""
        self._file.flush()

    def close(self) -> None:
        """Flush and close the file."""
        if not self._file.closed:
            self._file.close()
