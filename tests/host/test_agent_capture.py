"""Captures of MRC frames are dissected by tshark as IPv6 / UDP / InfiniBand BTH (RoCEv2).

tshark's RoCEv2 dissector is registered on UDP port 4791 by default, so no ``-d`` option is
needed. The frames come from the transport core (two in-memory contexts) written with the
agent's pcap writer; the namespace tests check the agent's own ``--pcap`` capture the same way
(:func:`tshark_fields` is shared).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from host.transport import wire
from host.transport.api import Context
from p4src.contract import ROCEV2_UDP_PORT
from targets.pcap import PcapWriter
from topologies import Fabric

FIELDS = ("ipv6.dst", "udp.dstport", "infiniband.bth.opcode", "infiniband.bth.psn",
          "infiniband.bth.destqp", "infiniband.reth.r_key")  # fmt: skip


def tshark_fields(pcap: Path) -> list[dict[str, str]]:
    """One dict of :data:`FIELDS` per frame, as tshark dissects them."""
    argv = ["tshark", "-r", str(pcap), "-T", "fields", "-E", "separator=;"]
    for name in FIELDS:
        argv += ["-e", name]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return [dict(zip(FIELDS, line.split(";"), strict=True)) for line in done.stdout.splitlines()]


def read_pcap(pcap: Path) -> list[bytes]:
    """The frames of a pcap file (microsecond, little-endian, as PcapWriter writes)."""
    raw = pcap.read_bytes()
    frames, off = [], 24
    while off + 16 <= len(raw):
        _, _, incl, _ = struct.unpack_from("<IIII", raw, off)
        frames.append(raw[off + 16 : off + 16 + incl])
        off += 16 + incl
    return frames


def check_dissection(pcap: Path) -> int:
    """Every MRC frame of ``pcap`` dissects with the opcode, PSN and QP the codec put there."""
    ours = [wire.parse(frame) for frame in read_pcap(pcap)]
    theirs = tshark_fields(pcap)
    assert len(ours) == len(theirs) > 0
    data = 0
    for packet, fields in zip(ours, theirs, strict=True):
        assert fields["udp.dstport"] == str(ROCEV2_UDP_PORT)
        opcode = int(fields["infiniband.bth.opcode"], 0)
        assert int(fields["infiniband.bth.psn"], 0) == packet.outer.psn
        assert int(fields["infiniband.bth.destqp"], 0) == packet.outer.dest_qp
        if isinstance(packet, wire.DataPacket):
            data += 1
            assert opcode == packet.opcode in (wire.OP_WRITE_ONLY, wire.OP_WRITE_ONLY_IMM)
            assert int(fields["infiniband.reth.r_key"], 0) == packet.rkey
        else:
            assert opcode == wire.OP_ACKNOWLEDGE
    return data


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_tshark_dissects_core_frames_as_roce(fabric: Fabric, tmp_path: Path) -> None:
    h0 = Context("h0", fabric.host("h0").nics, seed=1)
    h1 = Context("h1", fabric.host("h1").nics, seed=2)
    region = h1.register_region(0x10000, 1 << 16)
    qa = h0.create_qp("h1", fabric.paths("h0", "h1"), cq=h0.create_cq())
    qb = h1.create_qp("h0", fabric.paths("h1", "h0"), cq=h1.create_cq())
    qa.connect(qb.qpn)
    qb.connect(qa.qpn)
    qa.post_write(bytes(range(256)) * 40, region.addr, region.rkey, wr_id=1)
    qa.post_write_imm(b"tail" * 100, region.addr + 20000, region.rkey, imm=77, wr_id=2)
    pcap = tmp_path / "core.pcap"
    writer = PcapWriter(pcap)
    now = 1.0
    sent = h0.frames_to_send(now)
    for plane, frame in sent:
        writer.write(frame, now)
        h1.receive_frame(plane, frame, now)
    h1.handle_timer(now + 0.01)  # the delayed ACK
    for _, frame in h1.frames_to_send(now + 0.01):
        writer.write(frame, now + 0.01)
    writer.close()
    data = check_dissection(pcap)
    assert data == len(sent) >= 3
    opcodes = {int(f["infiniband.bth.opcode"], 0) for f in tshark_fields(pcap)}
    assert {wire.OP_WRITE_ONLY, wire.OP_WRITE_ONLY_IMM} <= opcodes
