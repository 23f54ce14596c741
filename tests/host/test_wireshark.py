"""The Wireshark dissector (tools/wireshark/mrc.lua) against the codec, field by field.

- frames built with :mod:`host.transport.wire` (data with and without immediate, a trimmed one,
  ACK with SACK bits and ECN echo, NACK, probe, probe reply, and truncated frames) written to a
  pcap and dissected by tshark with the script: every ``mrc.*`` field equals what the codec
  decodes from the same frame, a truncated frame is an expert error, and tshark reports no Lua
  error;
- a capture taken from two host agents in network namespaces moving a transfer: every frame of
  it dissected, checked against the codec the same way (root and namespaces needed).

Both skip, saying why, where tshark is not installed.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from host.transport import wire

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "wireshark" / "mrc.lua"
pytestmark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")

SRC = bytes.fromhex("fcbb0000000000000000000000000001")
DST = bytes.fromhex("fcbb0000000000000000000000000002")
MAC_A, MAC_B = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")


def prefix(dscp: int, ecn: int, ev: int) -> bytes:
    return wire.frame_prefix(
        src_mac=MAC_A, dst_mac=MAC_B, src=SRC, dst=DST, dscp=dscp, ecn=ecn, ev=ev
    )


def write_pcap(path: Path, frames: list[bytes]) -> None:
    """A classic pcap (Ethernet link type) of ``frames``, one per millisecond."""
    out = bytearray(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    for i, frame in enumerate(frames):
        out += struct.pack("<IIII", 1, i * 1000, len(frame), len(frame)) + frame
    path.write_bytes(bytes(out))


def dissect(pcap: Path) -> tuple[list[dict[str, Any]], str]:
    """tshark's JSON of every frame (the ``mrc`` layer flattened), and its stderr.

    tshark runs with a home folder of its own, so that a copy of the script the install step
    put in the personal plugin folder is not loaded a second time."""
    home = pcap.parent / "tshark-home"
    home.mkdir(exist_ok=True)
    done = subprocess.run(
        ["tshark", "-r", str(pcap), "-X", f"lua_script:{SCRIPT}", "-T", "json", "-V"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home)},
    )
    assert done.returncode == 0, done.stderr
    frames = json.loads(done.stdout or "[]")
    return [flatten(f["_source"]["layers"].get("mrc", {})) for f in frames], done.stderr


def flatten(tree: Any, out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every ``mrc.*`` field of a tshark JSON layer (subtrees included), and expert messages."""
    out = {} if out is None else out
    if isinstance(tree, dict):
        for key, value in tree.items():
            if key.startswith("mrc.") and not isinstance(value, dict | list):
                out.setdefault(key, value)
            if key == "_ws.expert":
                out.setdefault("experts", []).append(json.dumps(value))
            flatten(value, out)
    elif isinstance(tree, list):
        for item in tree:
            flatten(item, out)
    return out


def number(value: str) -> int:
    return int(value, 0)


def expected(frame: bytes) -> dict[str, int]:
    """The ``mrc.*`` fields the dissector must show, from the codec's decoding of ``frame``."""
    pkt = wire.parse(frame)
    fields = {
        "mrc.dest_qp": pkt.outer.dest_qp,
        "mrc.psn": pkt.outer.psn,
        "mrc.plane_hint": pkt.plane_hint,
        "mrc.spine_hint": getattr(pkt, "spine_hint", wire.NO_SPINE),
        "mrc.ev": pkt.ev,
    }
    if isinstance(pkt, wire.DataPacket):
        fields.update({
            "mrc.type": wire.EXT_DATA,
            "mrc.flags": pkt.flags,
            "mrc.reth.va": pkt.va,
            "mrc.reth.rkey": pkt.rkey,
            "mrc.reth.dma_length": pkt.dma_len,
            "mrc.msg.id": pkt.msg_id,
            "mrc.msg.length": pkt.msg_len,
            "mrc.msg.offset": pkt.msg_offset,
            "mrc.timestamp": pkt.timestamp,
        })  # fmt: skip
        if pkt.imm is not None:
            fields["mrc.imm"] = pkt.imm
    elif isinstance(pkt, wire.AckPacket):
        fields.update({
            "mrc.type": wire.EXT_ACK,
            "mrc.flags": pkt.flags,
            "mrc.timestamp": pkt.ts_echo,
            "mrc.aeth.msn": pkt.msn,
            "mrc.ack.cum_psn": pkt.cum_psn,
            "mrc.sack.base": pkt.sack_base,
            "mrc.sack.bitmap": pkt.sack_bitmap,
            "mrc.ack.ce_count": pkt.ce_count,
            "mrc.ack.pkt_count": pkt.pkt_count,
        })  # fmt: skip
    elif isinstance(pkt, wire.NackPacket):
        fields.update({
            "mrc.type": wire.EXT_NACK,
            "mrc.flags": pkt.flags,
            "mrc.timestamp": pkt.ts_echo,
            "mrc.aeth.syndrome": pkt.syndrome,
            "mrc.nack.psn": pkt.psn,
            "mrc.nack.cum_psn": pkt.cum_psn,
            "mrc.flags.last_hop": int(bool(pkt.flags & wire.FLAG_LAST_HOP)),
            "mrc.flags.ce": int(bool(pkt.flags & wire.FLAG_NACK_CE)),
        })  # fmt: skip
    elif isinstance(pkt, wire.EndpointPacket):
        fields.update({
            "mrc.type": wire.EXT_EP_RESPONSE if pkt.response else wire.EXT_EP_REQUEST,
            "mrc.timestamp": pkt.timestamp,
            "mrc.ep.op": pkt.op,
            "mrc.ep.req_id": pkt.req_id,
            "mrc.ep.port_status": pkt.port_status,
            "mrc.ep.svc_time": pkt.service_ns,
        })  # fmt: skip
    else:
        assert isinstance(pkt, wire.ProbePacket)
        fields.update({
            "mrc.type": wire.EXT_PROBE_REPLY if pkt.reply else wire.EXT_PROBE,
            "mrc.timestamp": pkt.timestamp,
            "mrc.probe.id": pkt.probe_id,
            "mrc.probe.src_qp": pkt.src_qp,
        })  # fmt: skip
    return fields


def check(frames: list[bytes], shown: list[dict[str, Any]]) -> None:
    assert len(shown) == len(frames)
    for i, (frame, fields) in enumerate(zip(frames, shown, strict=True)):
        for name, value in expected(frame).items():
            assert name in fields, f"frame {i}: {name} not dissected ({sorted(fields)})"
            assert number(fields[name]) == value, f"frame {i}: {name} {fields[name]} != {value}"


def built_frames() -> list[bytes]:
    data = prefix(wire.DSCP_TRIMMABLE, wire.ECN_ECT0, 0x1020_0003)
    control = prefix(wire.DSCP_CONTROL, wire.ECN_NOT_ECT, 0)
    payload = bytes(range(256)) * 4
    whole = wire.encode_data(
        data, 0x101, 77, True, 0x1_0000_2000, 0x2A2A2A2A, None, wire.FLAG_FIRST, 1, 0,
        0x1020_0003, 9, 8192, 1024, 123456789, payload,
    )  # fmt: skip
    with_imm = wire.encode_data(
        data, 0x101, 78, False, 0x1_0000_2400, 0x2A2A2A2A, 0xBEEF, wire.FLAG_LAST | wire.FLAG_RETX,
        1, 0, 0x1020_0004, 9, 8192, 2048, 123456999, payload,
    )  # fmt: skip
    # trimmed as a switch leaves it: headers only, DSCP 12, lengths fixed
    trimmed = bytearray(whole[: wire.DATA_HEADER_LEN])
    struct.pack_into("!H", trimmed, wire.OFF_IPV6 + 4, wire.DATA_HEADER_LEN - wire.OFF_UDP)
    struct.pack_into("!H", trimmed, wire.OFF_UDP + 4, wire.DATA_HEADER_LEN - wire.OFF_UDP)
    word = struct.unpack_from("!I", trimmed, wire.OFF_IPV6)[0]
    word = (word & 0xF00FFFFF) | ((wire.DSCP_TRIMMED << 2 | wire.ECN_ECT0) << 20)
    struct.pack_into("!I", trimmed, wire.OFF_IPV6, word)
    ack = wire.encode_ack(
        control, 0x102, 5, wire.FLAG_ECN_ECHO, 1, 0, 0x1020_0003, 123456789, 80, 80,
        0x8000_0000_0000_0005, 2, 4,
    )  # fmt: skip
    flags = wire.FLAG_TRIMMED | wire.FLAG_LAST_HOP | wire.FLAG_NACK_CE
    nack = wire.encode_nack(control, 0x102, flags, 1, 0, 0x1020_0003, 123456789, 77, 70)
    probe = wire.encode_probe(control, 0x103, False, 1, 1, 0x1030_0001, 42, 7, 0x104)
    reply = wire.encode_probe(control, 0x104, True, 1, 1, 0x1030_0001, 42, 7, 0x104)
    request = wire.encode_endpoint(control, False, wire.EP_OP_EV_PROBE, 1, 0x1234_5678, 42, 9)
    status = wire.encode_endpoint(control, True, wire.EP_OP_PORT_STATUS, 0, 5, 43, 0xFF01, 0b110,
                                  1500)  # fmt: skip
    return [bytes(f) for f in (whole, with_imm, trimmed, ack, nack, probe, reply, request, status)]


def test_every_field_of_built_frames(tmp_path: Path) -> None:
    frames = built_frames()
    pcap = tmp_path / "built.pcap"
    write_pcap(pcap, frames)
    shown, stderr = dissect(pcap)
    assert "Lua" not in stderr and "error" not in stderr.lower(), stderr
    check(frames, shown)
    assert number(shown[2]["mrc.trimmed"]) == 1 and number(shown[0]["mrc.trimmed"]) == 0
    assert number(shown[2]["mrc.payload_length"]) == 0
    assert number(shown[0]["mrc.payload_length"]) == len(frames[0]) - wire.DATA_HEADER_LEN


def test_truncated_frames_are_expert_errors(tmp_path: Path) -> None:
    whole = built_frames()[0]
    ack = built_frames()[3]
    cut = []
    for frame, keep in ((whole, wire.OFF_BTH + 20), (ack, wire.OFF_BTH + 30)):
        short = bytearray(frame[:keep])
        struct.pack_into("!H", short, wire.OFF_IPV6 + 4, keep - wire.OFF_UDP)
        struct.pack_into("!H", short, wire.OFF_UDP + 4, keep - wire.OFF_UDP)
        cut.append(bytes(short))
    pcap = tmp_path / "cut.pcap"
    write_pcap(pcap, cut)
    shown, stderr = dissect(pcap)
    assert "Lua" not in stderr, stderr
    assert len(shown) == 2
    for fields in shown:
        assert any("truncated" in e for e in fields.get("experts", [])), fields


@pytest.mark.netns
def test_capture_from_host_agents(tmp_path: Path) -> None:
    """Two agents back to back move 1 MiB over both planes; h0 captures every MRC frame it
    sends and receives, and every frame of that capture dissects as the codec decodes it."""
    from experiments.hostnets import BackToBack, netns_available
    from topologies import Fabric, load_topology
    from topologies.config import shipped_topology

    why = netns_available()
    if why:
        pytest.skip(why)
    topo = shipped_topology("small")
    capture = tmp_path / "h0.pcap"
    net = BackToBack(Fabric(load_topology(topo)), topo, ("h0", "h1"), prefix="ws", workdir=tmp_path)
    try:
        net.create()
        net.start_agent("h0", "--pcap", str(capture))
        net.start_agent("h1")
        size = 1 << 20
        with net.client("h0") as h0, net.client("h1") as h1:
            region = h1.register("capture", size)
            started = h0.transfer("h1", region["addr"], region["rkey"], size, seed=5, imm=0x77)
            done = h0.wait([started["transfer"]], timeout=60)
            assert done["complete"], done
    finally:
        net.close()  # stops the agents: the capture is complete
    frames = read_pcap(capture)
    kinds = {type(wire.parse(f)).__name__ for f in frames}
    assert {"DataPacket", "AckPacket"} <= kinds, kinds
    assert len(frames) >= size // 4096
    shown, stderr = dissect(capture)
    assert "Lua" not in stderr, stderr
    check(frames, shown)


def read_pcap(path: Path) -> list[bytes]:
    """The frames of a classic pcap file (either byte order, micro- or nanosecond stamps)."""
    data = path.read_bytes()
    magic = data[:4]
    order = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    frames, at = [], 24
    while at + 16 <= len(data):
        _, _, caplen, _ = struct.unpack_from(order + "IIII", data, at)
        frames.append(data[at + 16 : at + 16 + caplen])
        at += 16 + caplen
    return frames
