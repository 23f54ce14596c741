-- mrc.lua: Wireshark / tshark dissector for the MRC extension headers of mrc-testbed.
--
-- MRC packets are RoCEv2: IPv6 / UDP (destination port 4791) / InfiniBand BTH / RETH or AETH,
-- then an MRC extension that Wireshark does not know. This dissector takes UDP port 4791, hands
-- the packet to Wireshark's own RoCEv2 dissector (the one that had the port) for BTH, RETH,
-- ImmDt and AETH, and adds an
-- "MRC" tree for the extension after them (docs/wire-format.md; host/transport/wire.py is the
-- codec it follows):
--
--   data (BTH opcode 0x0A / 0x0B):  BTH 12 | RETH 16 | [ImmDt 4] | MRC data extension 24 | payload
--   control (BTH opcode 0x11):      BTH 12 | AETH 4 | MRC control extension 32
--
-- Every field is under the "mrc." prefix (mrc.ev, mrc.psn, mrc.msg.id, mrc.sack.bitmap, ...).
-- A truncated or inconsistent header is an expert-info error, never a Lua error.
--
-- Use:  tshark -X lua_script:tools/wireshark/mrc.lua -r capture.pcap -V
-- or copy the file into Wireshark's personal Lua plugin folder (scripts/install.sh does).

local mrc = Proto("mrc", "MRC (Multipath Reliable Connection) extension")

local EXT_NAMES = { [1] = "DATA", [2] = "ACK", [3] = "NACK", [4] = "PROBE", [5] = "PROBE_REPLY",
    [6] = "EP_REQUEST", [7] = "EP_RESPONSE" }
local EP_OPS = { [0] = "EV_PROBE", [1] = "PORT_STATUS_UPDATE" }
local OPCODE_NAMES = {
    [0x0A] = "RDMA WRITE Only", [0x0B] = "RDMA WRITE Only with Immediate",
    [0x11] = "Acknowledge",
}
local SYNDROME_NAMES = { [0x1F] = "ACK", [0x60] = "NAK (trimmed)", [0x62] = "NAK (remote access)" }
local DSCP_TRIMMED = 12
local OP_WRITE_ONLY, OP_WRITE_ONLY_IMM, OP_ACKNOWLEDGE = 0x0A, 0x0B, 0x11
local BTH_LEN, RETH_LEN, IMM_LEN, AETH_LEN = 12, 16, 4, 4
local DATA_EXT_LEN, CTRL_EXT_LEN = 24, 32

local f = {
    opcode = ProtoField.uint8("mrc.opcode", "BTH opcode", base.HEX, OPCODE_NAMES),
    dest_qp = ProtoField.uint24("mrc.dest_qp", "Destination QP", base.HEX),
    psn = ProtoField.uint24("mrc.psn", "PSN", base.DEC),
    ack_req = ProtoField.bool("mrc.ack_req", "ACK requested"),
    va = ProtoField.uint64("mrc.reth.va", "Remote address (RETH)", base.HEX),
    rkey = ProtoField.uint32("mrc.reth.rkey", "Remote key (RETH)", base.HEX),
    dma_len = ProtoField.uint32("mrc.reth.dma_length", "DMA length (RETH)", base.DEC),
    imm = ProtoField.uint32("mrc.imm", "Immediate data", base.HEX),
    syndrome = ProtoField.uint8("mrc.aeth.syndrome", "AETH syndrome", base.HEX, SYNDROME_NAMES),
    msn = ProtoField.uint24("mrc.aeth.msn", "AETH MSN", base.DEC),
    ext_type = ProtoField.uint8("mrc.type", "Extension type", base.DEC, EXT_NAMES),
    flags = ProtoField.uint8("mrc.flags", "Flags", base.HEX),
    flag_first = ProtoField.bool("mrc.flags.first", "FIRST (first packet of the message)", 8, nil, 0x01),
    flag_last = ProtoField.bool("mrc.flags.last", "LAST (last packet of the message)", 8, nil, 0x02),
    flag_retx = ProtoField.bool("mrc.flags.retx", "RETX (a retransmission)", 8, nil, 0x04),
    flag_ecn_echo = ProtoField.bool("mrc.flags.ecn_echo", "ECN echo", 8, nil, 0x01),
    flag_trimmed = ProtoField.bool("mrc.flags.trimmed", "TRIMMED (NACK of a trimmed packet)", 8, nil, 0x01),
    flag_access = ProtoField.bool("mrc.flags.access", "ACCESS (NACK of a refused packet)", 8, nil, 0x02),
    plane = ProtoField.uint8("mrc.plane_hint", "Plane hint", base.DEC),
    spine = ProtoField.uint8("mrc.spine_hint", "Spine hint (255: within a rack)", base.DEC),
    ev = ProtoField.uint32("mrc.ev", "EV (entropy value)", base.HEX),
    ev_plane = ProtoField.uint32("mrc.ev.plane", "EV plane (bits 31-28)", base.DEC, nil, 0xF0000000),
    ev_path = ProtoField.uint32("mrc.ev.spine", "EV spine + 1 (bits 27-20)", base.DEC, nil, 0x0FF00000),
    ev_n = ProtoField.uint32("mrc.ev.n", "EV number (bits 19-0)", base.DEC, nil, 0x000FFFFF),
    msg_id = ProtoField.uint32("mrc.msg.id", "Message id", base.DEC),
    msg_len = ProtoField.uint32("mrc.msg.length", "Message length", base.DEC),
    msg_off = ProtoField.uint32("mrc.msg.offset", "Message offset", base.DEC),
    timestamp = ProtoField.uint32("mrc.timestamp", "Timestamp (ns mod 2^32)", base.DEC),
    payload_len = ProtoField.uint32("mrc.payload_length", "Payload bytes present", base.DEC),
    trimmed = ProtoField.bool("mrc.trimmed", "Trimmed by a switch"),
    cum_psn = ProtoField.uint32("mrc.ack.cum_psn", "Cumulative PSN (next expected)", base.DEC),
    sack_base = ProtoField.uint32("mrc.sack.base", "SACK base PSN", base.DEC),
    sack_bitmap = ProtoField.uint64("mrc.sack.bitmap", "SACK bitmap", base.HEX),
    ce_count = ProtoField.uint16("mrc.ack.ce_count", "CE-marked packets", base.DEC),
    pkt_count = ProtoField.uint16("mrc.ack.pkt_count", "Packets acknowledged", base.DEC),
    nack_psn = ProtoField.uint32("mrc.nack.psn", "NACKed PSN", base.DEC),
    nack_cum = ProtoField.uint32("mrc.nack.cum_psn", "Receiver's cumulative PSN", base.DEC),
    probe_id = ProtoField.uint32("mrc.probe.id", "Probe id", base.DEC),
    probe_src_qp = ProtoField.uint32("mrc.probe.src_qp", "Prober's QP", base.HEX),
    ep_op = ProtoField.uint8("mrc.ep.op", "Endpoint operation", base.DEC, EP_OPS, 0x0F),
    ep_svc_valid = ProtoField.bool("mrc.ep.svc_time_valid", "Service time set", 8, nil, 0x80),
    ep_req_id = ProtoField.uint16("mrc.ep.req_id", "Request id", base.DEC),
    ep_port_status = ProtoField.uint32("mrc.ep.port_status", "Port status (bit N: port N up)",
        base.HEX),
    ep_svc_time = ProtoField.uint32("mrc.ep.svc_time", "Responder service time (ns)", base.DEC),
    reserved = ProtoField.bytes("mrc.reserved", "Reserved"),
}
local field_list = {}
for _, field in pairs(f) do table.insert(field_list, field) end
mrc.fields = field_list

local e_truncated = ProtoExpert.new("mrc.truncated", "MRC header truncated",
    expert.group.MALFORMED, expert.severity.ERROR)
local e_bad = ProtoExpert.new("mrc.malformed", "Malformed MRC packet",
    expert.group.MALFORMED, expert.severity.ERROR)
local e_trimmed = ProtoExpert.new("mrc.trimmed.note", "Trimmed by a switch (payload cut)",
    expert.group.SEQUENCE, expert.severity.NOTE)
mrc.experts = { e_truncated, e_bad, e_trimmed }

local ipv6_dscp = Field.new("ipv6.tclass.dscp")
-- Wireshark's RoCEv2 dissector (BTH first), as registered on UDP 4791 before this script
local udp_port = DissectorTable.get("udp.port")
local rroce = udp_port:get_dissector(4791)

local function truncated(tree, tvb, what)
    tree:add_proto_expert_info(e_truncated, what .. ": " .. tvb:len() .. " bytes")
end

local function data_extension(tvb, pinfo, tree, opcode)
    local ext = BTH_LEN + RETH_LEN + (opcode == OP_WRITE_ONLY_IMM and IMM_LEN or 0)
    tree:add(f.va, tvb(BTH_LEN, 8))
    tree:add(f.rkey, tvb(BTH_LEN + 8, 4))
    tree:add(f.dma_len, tvb(BTH_LEN + 12, 4))
    if opcode == OP_WRITE_ONLY_IMM then
        tree:add(f.imm, tvb(BTH_LEN + RETH_LEN, 4))
    end
    if tvb:len() < ext + DATA_EXT_LEN then
        truncated(tree, tvb, "MRC data extension cut short")
        return
    end
    local ext_type = tvb(ext, 1):uint()
    local sub = tree:add(mrc, tvb(ext, DATA_EXT_LEN), "MRC data extension")
    sub:add(f.ext_type, tvb(ext, 1))
    if ext_type ~= 1 then
        sub:add_proto_expert_info(e_bad, "data packet with extension type " .. ext_type)
        return
    end
    local flags = sub:add(f.flags, tvb(ext + 1, 1))
    flags:add(f.flag_first, tvb(ext + 1, 1))
    flags:add(f.flag_last, tvb(ext + 1, 1))
    flags:add(f.flag_retx, tvb(ext + 1, 1))
    sub:add(f.plane, tvb(ext + 2, 1))
    sub:add(f.spine, tvb(ext + 3, 1))
    local ev = sub:add(f.ev, tvb(ext + 4, 4))
    ev:add(f.ev_plane, tvb(ext + 4, 4))
    ev:add(f.ev_path, tvb(ext + 4, 4))
    ev:add(f.ev_n, tvb(ext + 4, 4))
    sub:add(f.msg_id, tvb(ext + 8, 4))
    sub:add(f.msg_len, tvb(ext + 12, 4))
    sub:add(f.msg_off, tvb(ext + 16, 4))
    sub:add(f.timestamp, tvb(ext + 20, 4))
    local present = tvb:len() - ext - DATA_EXT_LEN
    local dma_len = tvb(BTH_LEN + 12, 4):uint()
    tree:add(f.payload_len, present):set_generated()
    local dscp = ipv6_dscp()
    local cut = (dscp ~= nil and dscp.value == DSCP_TRIMMED) or present < dma_len
    tree:add(f.trimmed, cut):set_generated()
    if present > dma_len then
        tree:add_proto_expert_info(e_bad, "payload longer than the RETH DMA length")
    elseif cut then
        tree:add_proto_expert_info(e_trimmed)
    end
    local kind = cut and "DATA (trimmed)" or "DATA"
    pinfo.cols.info:append(string.format(" MRC %s EV=0x%08x msg=%d off=%d", kind,
        tvb(ext + 4, 4):uint(), tvb(ext + 8, 4):uint(), tvb(ext + 16, 4):uint()))
end

local function control_extension(tvb, pinfo, tree)
    local ext = BTH_LEN + AETH_LEN
    tree:add(f.syndrome, tvb(BTH_LEN, 1))
    tree:add(f.msn, tvb(BTH_LEN + 1, 3))
    if tvb:len() < ext + CTRL_EXT_LEN then
        truncated(tree, tvb, "MRC control extension cut short")
        return
    end
    local ext_type = tvb(ext, 1):uint()
    local name = EXT_NAMES[ext_type]
    local sub = tree:add(mrc, tvb(ext, CTRL_EXT_LEN), "MRC control extension")
    sub:add(f.ext_type, tvb(ext, 1))
    if name == nil or ext_type == 1 then
        sub:add_proto_expert_info(e_bad, "control packet with extension type " .. ext_type)
        return
    end
    local flags = sub:add(f.flags, tvb(ext + 1, 1))
    if ext_type == 2 then
        flags:add(f.flag_ecn_echo, tvb(ext + 1, 1))
    elseif ext_type == 3 then
        flags:add(f.flag_trimmed, tvb(ext + 1, 1))
        flags:add(f.flag_access, tvb(ext + 1, 1))
    elseif ext_type >= 6 then
        flags:add(f.ep_op, tvb(ext + 1, 1))
        flags:add(f.ep_svc_valid, tvb(ext + 1, 1))
    end
    sub:add(f.plane, tvb(ext + 2, 1))
    sub:add(f.spine, tvb(ext + 3, 1))
    local ev = sub:add(f.ev, tvb(ext + 4, 4))
    ev:add(f.ev_plane, tvb(ext + 4, 4))
    ev:add(f.ev_path, tvb(ext + 4, 4))
    ev:add(f.ev_n, tvb(ext + 4, 4))
    sub:add(f.timestamp, tvb(ext + 8, 4))
    local detail
    if ext_type == 2 then
        sub:add(f.cum_psn, tvb(ext + 12, 4))
        sub:add(f.sack_base, tvb(ext + 16, 4))
        sub:add(f.sack_bitmap, tvb(ext + 20, 8))
        sub:add(f.ce_count, tvb(ext + 28, 2))
        sub:add(f.pkt_count, tvb(ext + 30, 2))
        detail = string.format("cum=%d sack=%d/0x%s", tvb(ext + 12, 4):uint(),
            tvb(ext + 16, 4):uint(), tostring(tvb(ext + 20, 8):bytes():tohex()))
    elseif ext_type == 3 then
        sub:add(f.nack_psn, tvb(ext + 12, 4))
        sub:add(f.nack_cum, tvb(ext + 16, 4))
        sub:add(f.reserved, tvb(ext + 20, 12))
        detail = string.format("psn=%d", tvb(ext + 12, 4):uint())
    elseif ext_type >= 6 then
        sub:add(f.ep_req_id, tvb(ext + 12, 2))
        sub:add(f.ep_port_status, tvb(ext + 16, 4))
        sub:add(f.ep_svc_time, tvb(ext + 20, 4))
        sub:add(f.reserved, tvb(ext + 24, 8))
        local op = EP_OPS[bit.band(tvb(ext + 1, 1):uint(), 0x0F)] or "?"
        detail = string.format("%s id=%d ports=0x%x", op, tvb(ext + 12, 2):uint(),
            tvb(ext + 16, 4):uint())
    else
        sub:add(f.probe_id, tvb(ext + 12, 4))
        sub:add(f.probe_src_qp, tvb(ext + 16, 4))
        sub:add(f.reserved, tvb(ext + 20, 12))
        detail = string.format("id=%d", tvb(ext + 12, 4):uint())
    end
    pinfo.cols.info:append(string.format(" MRC %s EV=0x%08x %s", name, tvb(ext + 4, 4):uint(), detail))
end

function mrc.dissector(tvb, pinfo, tree)
    -- BTH, RETH, ImmDt and AETH as Wireshark knows them
    if rroce ~= nil then
        pcall(function() rroce:call(tvb, pinfo, tree) end)
    end
    local root = tree:add(mrc, tvb(), "MRC")
    if tvb:len() < BTH_LEN then
        truncated(root, tvb, "BTH cut short")
        return tvb:len()
    end
    local opcode = tvb(0, 1):uint()
    root:add(f.opcode, tvb(0, 1))
    root:add(f.dest_qp, tvb(5, 3))
    root:add(f.ack_req, tvb(8, 1):bitfield(0, 1) == 1)
    root:add(f.psn, tvb(9, 3))
    if opcode == OP_WRITE_ONLY or opcode == OP_WRITE_ONLY_IMM then
        local need = BTH_LEN + RETH_LEN + (opcode == OP_WRITE_ONLY_IMM and IMM_LEN or 0)
        if tvb:len() < need then
            truncated(root, tvb, "RETH cut short")
            return tvb:len()
        end
        data_extension(tvb, pinfo, root, opcode)
    elseif opcode == OP_ACKNOWLEDGE then
        if tvb:len() < BTH_LEN + AETH_LEN then
            truncated(root, tvb, "AETH cut short")
            return tvb:len()
        end
        control_extension(tvb, pinfo, root)
    else
        root:add_proto_expert_info(e_bad, string.format("BTH opcode 0x%02x is not MRC", opcode))
    end
    return tvb:len()
end

udp_port:add(4791, mrc)
