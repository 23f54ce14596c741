"""Plain pcap files (libpcap format, Ethernet link type, microseconds) written with struct.

The one capture writer of the testbed: ``mrc-switch --pcap DIR`` writes
``DIR/{interface}_in.pcap`` and ``DIR/{interface}_out.pcap`` for every port, like
``simple_switch --pcap``, and the host agent's ``--pcap FILE`` every MRC frame it hands to or
gets from its NICs. tshark, tcpdump, Wireshark and scapy read them (RoCEv2 on UDP 4791 is
dissected as InfiniBand BTH by default). Writes are buffered; :meth:`PcapWriter.flush` and
:meth:`PcapWriter.close` push them to the file.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import BinaryIO

LINKTYPE_ETHERNET = 1
SNAPLEN = 65535
_GLOBAL = struct.Struct("<IHHiIII")
_RECORD = struct.Struct("<IIII")
_MAGIC = 0xA1B2C3D4


class PcapWriter:
    """Append Ethernet frames to a pcap file."""

    def __init__(self, path: str | Path, flush_every: int = 256) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: BinaryIO = open(self.path, "wb")  # noqa: SIM115 -- closed by close()
        self._file.write(_GLOBAL.pack(_MAGIC, 2, 4, 0, 0, SNAPLEN, LINKTYPE_ETHERNET))
        self._pending: list[bytes] = []
        self.flush_every = flush_every
        self.frames = 0

    def write(self, frame: bytes | bytearray | memoryview, when: float | None = None) -> None:
        """Record one frame captured at wall-clock time ``when`` (now by default)."""
        if when is None:
            when = time.time()
        seconds = int(when)
        micros = int((when - seconds) * 1e6)
        n = len(frame)
        kept = min(n, SNAPLEN)
        self._pending.append(_RECORD.pack(seconds, micros, kept, n) + bytes(frame[:kept]))
        self.frames += 1
        if len(self._pending) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        """Write buffered records to the file."""
        if self._pending:
            self._file.write(b"".join(self._pending))
            self._pending.clear()
            self._file.flush()

    def close(self) -> None:
        """Flush and close the file."""
        if not self._file.closed:
            self.flush()
            self._file.close()


__all__ = ["LINKTYPE_ETHERNET", "PcapWriter"]
