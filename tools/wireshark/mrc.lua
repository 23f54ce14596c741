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

-- Code points and sizes, under the names of p4src/contract.py (tests/test_contract_docs.py holds
-- every one of them to it): a table is the contract's enum of that name in capitals.
local ROCEV2_UDP_PORT = 4791
local OPCODE = { WRITE_ONLY = 0x0A, WRITE_ONLY_IMM = 0x0B, ACKNOWLEDGE = 0x11 }
local EXT_TYPE = { DATA = 1, ACK = 2, NACK = 3, PROBE = 4, PROBE_REPLY = 5, EP_REQUEST = 6,
    EP_RESPONSE = 7 }
local EP_OP = { EV_PROBE = 0, PORT_STATUS_UPDATE = 1 }
local SYNDROME = { ACK = 0x1F, NAK_SEQ = 0x60, NAK_ACCESS = 0x62 }
local DSCP = { TRIMMED = 12, TRIMMED_LAST_HOP = 13 }
local DATA_FLAG = { FIRST = 0x01, LAST = 0x02, RETX = 0x04 }
local ACK_FLAG = { ECN_ECHO = 0x01 }
local NACK_FLAG = { TRIMMED = 0x01, ACCESS = 0x02, LAST_HOP = 0x04, CE = 0x08 }
local EP_OP_MASK, EP_FLAG_SVC_TIME = 0x0F, 0x80
local BTH_BYTES, RETH_BYTES, IMMDT_BYTES, AETH_BYTES = 12, 16, 4, 4
local MRC_DATA_BYTES, MRC_CONTROL_BYTES = 24, 32

local function names_of(codes)
    local names = {}
    for name, code in pairs(codes) do names[code] = name end
    return names
end
local EXT_NAMES = names_of(EXT_TYPE)
local EP_OPS = names_of(EP_OP)
local OPCODE_NAMES = {
    [OPCODE.WRITE_ONLY] = "RDMA WRITE Only", [OPCODE.WRITE_ONLY_IMM] = "RDMA WRITE Only with Immediate",
    [OPCODE.ACKNOWLEDGE] = "Acknowledge",
}
local SYNDROME_NAMES = { [SYNDROME.ACK] = "ACK", [SYNDROME.NAK_SEQ] = "NAK (trimmed)",
    [SYNDROME.NAK_ACCESS] = "NAK (remote access)" }

local f = {
    -- BTH
    opcode = ProtoField.uint8("mrc.opcode", "BTH opcode", base.HEX, OPCODE_NAMES),
    dest_qp = ProtoField.uint24("mrc.dest_qp", "Destination QP", base.HEX),
    psn = ProtoField.uint24("mrc.psn", "PSN", base.DEC),
    ack_req = ProtoField.bool("mrc.ack_req", "ACK requested"),
    -- RETH and ImmDt (data), AETH (control)
    va = ProtoField.uint64("mrc.reth.va", "Remote address (RETH)", base.HEX),
    rkey = ProtoField.uint32("mrc.reth.rkey", "Remote key (RETH)", base.HEX),
    dma_len = ProtoField.uint32("mrc.reth.dma_length", "DMA length (RETH)", base.DEC),
    imm = ProtoField.uint32("mrc.imm", "Immediate data", base.HEX),
    syndrome = ProtoField.uint8("mrc.aeth.syndrome", "AETH syndrome", base.HEX, SYNDROME_NAMES),
    msn = ProtoField.uint24("mrc.aeth.msn", "AETH MSN", base.DEC),
    -- the head of every MRC extension
    ext_type = ProtoField.uint8("mrc.type", "Extension type", base.DEC, EXT_NAMES),
    flags = ProtoField.uint8("mrc.flags", "Flags", base.HEX),
    plane = ProtoField.uint8("mrc.plane_hint", "Plane hint", base.DEC),
    spine = ProtoField.uint8("mrc.spine_hint", "Spine hint (255: within a rack)", base.DEC),
    ev = ProtoField.uint32("mrc.ev", "EV (entropy value)", base.HEX),
    ev_plane = ProtoField.uint32("mrc.ev.plane", "EV plane (bits 31-28)", base.DEC, nil, 0xF0000000),
    ev_path = ProtoField.uint32("mrc.ev.spine", "EV spine + 1 (bits 27-20)", base.DEC, nil, 0x0FF00000),
    ev_n = ProtoField.uint32("mrc.ev.n", "EV number (bits 19-0)", base.DEC, nil, 0x000FFFFF),
    -- the MRC data extension
    msg_id = ProtoField.uint32("mrc.msg.id", "Message id", base.DEC),
    msg_len = ProtoField.uint32("mrc.msg.length", "Message length", base.DEC),
    msg_off = ProtoField.uint32("mrc.msg.offset", "Message offset", base.DEC),
    timestamp = ProtoField.uint32("mrc.timestamp", "Timestamp (ns mod 2^32)", base.DEC),
    payload_len = ProtoField.uint32("mrc.payload_length", "Payload bytes present", base.DEC),
    trimmed = ProtoField.bool("mrc.trimmed", "Trimmed by a switch"),
    -- ACK
    cum_psn = ProtoField.uint32("mrc.ack.cum_psn", "Cumulative PSN (next expected)", base.DEC),
    sack_base = ProtoField.uint32("mrc.sack.base", "SACK base PSN", base.DEC),
    sack_bitmap = ProtoField.uint64("mrc.sack.bitmap", "SACK bitmap", base.HEX),
    ce_count = ProtoField.uint16("mrc.ack.ce_count", "CE-marked packets", base.DEC),
    pkt_count = ProtoField.uint16("mrc.ack.pkt_count", "Packets acknowledged", base.DEC),
    -- NACK, PROBE and PROBE_REPLY
    nack_psn = ProtoField.uint32("mrc.nack.psn", "NACKed PSN", base.DEC),
    nack_cum = ProtoField.uint32("mrc.nack.cum_psn", "Receiver's cumulative PSN", base.DEC),
    probe_id = ProtoField.uint32("mrc.probe.id", "Probe id", base.DEC),
    probe_src_qp = ProtoField.uint32("mrc.probe.src_qp", "Prober's QP", base.HEX),
    -- EP_REQUEST and EP_RESPONSE
    ep_op = ProtoField.uint8("mrc.ep.op", "Endpoint operation", base.DEC, EP_OPS, EP_OP_MASK),
    ep_svc_valid = ProtoField.bool("mrc.ep.svc_time_valid", "Service time set", 8, nil,
        EP_FLAG_SVC_TIME),
    ep_req_id = ProtoField.uint16("mrc.ep.req_id", "Request id", base.DEC),
    ep_port_status = ProtoField.uint32("mrc.ep.port_status", "Port status (bit N: port N up)",
        base.HEX),
    ep_svc_time = ProtoField.uint32("mrc.ep.svc_time", "Responder service time (ns)", base.DEC),
    reserved = ProtoField.bytes("mrc.reserved", "Reserved"),
}
-- one bit field per flag, under mrc.flags.<name>
local FLAG_TEXT = {
    FIRST = "first packet of the message", LAST = "last packet of the message",
    RETX = "a retransmission", ECN_ECHO = "the packet acknowledged arrived CE-marked",
    TRIMMED = "NACK of a trimmed packet", ACCESS = "NACK of a refused packet",
    LAST_HOP = "NACK of a packet trimmed at the last hop",
    CE = "NACK of a packet that arrived CE-marked",
}
for _, codes in ipairs({ DATA_FLAG, ACK_FLAG, NACK_FLAG }) do
    for name, mask in pairs(codes) do
        f["flag_" .. name:lower()] = ProtoField.bool("mrc.flags." .. name:lower(),
            name .. " (" .. FLAG_TEXT[name] .. ")", 8, nil, mask)
    end
end
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
local rroce = udp_port:get_dissector(ROCEV2_UDP_PORT)

local function truncated(tree, tvb, what)
    tree:add_proto_expert_info(e_truncated, what .. ": " .. tvb:len() .. " bytes")
end

-- The plane and spine hints and the EV, at the same place in every MRC extension.
local function hints_and_ev(sub, tvb, ext)
    sub:add(f.plane, tvb(ext + 2, 1))
    sub:add(f.spine, tvb(ext + 3, 1))
    local ev = sub:add(f.ev, tvb(ext + 4, 4))
    ev:add(f.ev_plane, tvb(ext + 4, 4))
    ev:add(f.ev_path, tvb(ext + 4, 4))
    ev:add(f.ev_n, tvb(ext + 4, 4))
end

local function data_extension(tvb, pinfo, tree, opcode)
    local ext = BTH_BYTES + RETH_BYTES + (opcode == OPCODE.WRITE_ONLY_IMM and IMMDT_BYTES or 0)
    tree:add(f.va, tvb(BTH_BYTES, 8))
    tree:add(f.rkey, tvb(BTH_BYTES + 8, 4))
    tree:add(f.dma_len, tvb(BTH_BYTES + 12, 4))
    if opcode == OPCODE.WRITE_ONLY_IMM then
        tree:add(f.imm, tvb(BTH_BYTES + RETH_BYTES, 4))
    end
    if tvb:len() < ext + MRC_DATA_BYTES then
        truncated(tree, tvb, "MRC data extension cut short")
        return
    end
    local ext_type = tvb(ext, 1):uint()
    local sub = tree:add(mrc, tvb(ext, MRC_DATA_BYTES), "MRC data extension")
    sub:add(f.ext_type, tvb(ext, 1))
    if ext_type ~= EXT_TYPE.DATA then
        sub:add_proto_expert_info(e_bad, "data packet with extension type " .. ext_type)
        return
    end
    local flags = sub:add(f.flags, tvb(ext + 1, 1))
    flags:add(f.flag_first, tvb(ext + 1, 1))
    flags:add(f.flag_last, tvb(ext + 1, 1))
    flags:add(f.flag_retx, tvb(ext + 1, 1))
    hints_and_ev(sub, tvb, ext)
    sub:add(f.msg_id, tvb(ext + 8, 4))
    sub:add(f.msg_len, tvb(ext + 12, 4))
    sub:add(f.msg_off, tvb(ext + 16, 4))
    sub:add(f.timestamp, tvb(ext + 20, 4))
    local present = tvb:len() - ext - MRC_DATA_BYTES
    local dma_len = tvb(BTH_BYTES + 12, 4):uint()
    tree:add(f.payload_len, present):set_generated()
    local dscp = ipv6_dscp()
    local cut = (dscp ~= nil and (dscp.value == DSCP.TRIMMED or dscp.value == DSCP.TRIMMED_LAST_HOP))
        or present < dma_len
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
    local ext = BTH_BYTES + AETH_BYTES
    tree:add(f.syndrome, tvb(BTH_BYTES, 1))
    tree:add(f.msn, tvb(BTH_BYTES + 1, 3))
    if tvb:len() < ext + MRC_CONTROL_BYTES then
        truncated(tree, tvb, "MRC control extension cut short")
        return
    end
    local ext_type = tvb(ext, 1):uint()
    local name = EXT_NAMES[ext_type]
    local sub = tree:add(mrc, tvb(ext, MRC_CONTROL_BYTES), "MRC control extension")
    sub:add(f.ext_type, tvb(ext, 1))
    if name == nil or ext_type == EXT_TYPE.DATA then
        sub:add_proto_expert_info(e_bad, "control packet with extension type " .. ext_type)
        return
    end
    local flags = sub:add(f.flags, tvb(ext + 1, 1))
    if ext_type == EXT_TYPE.ACK then
        flags:add(f.flag_ecn_echo, tvb(ext + 1, 1))
    elseif ext_type == EXT_TYPE.NACK then
        flags:add(f.flag_trimmed, tvb(ext + 1, 1))
        flags:add(f.flag_access, tvb(ext + 1, 1))
        flags:add(f.flag_last_hop, tvb(ext + 1, 1))
        flags:add(f.flag_ce, tvb(ext + 1, 1))
    elseif ext_type >= EXT_TYPE.EP_REQUEST then
        flags:add(f.ep_op, tvb(ext + 1, 1))
        flags:add(f.ep_svc_valid, tvb(ext + 1, 1))
    end
    hints_and_ev(sub, tvb, ext)
    sub:add(f.timestamp, tvb(ext + 8, 4))
    local detail
    if ext_type == EXT_TYPE.ACK then
        sub:add(f.cum_psn, tvb(ext + 12, 4))
        sub:add(f.sack_base, tvb(ext + 16, 4))
        sub:add(f.sack_bitmap, tvb(ext + 20, 8))
        sub:add(f.ce_count, tvb(ext + 28, 2))
        sub:add(f.pkt_count, tvb(ext + 30, 2))
        detail = string.format("cum=%d sack=%d/0x%s", tvb(ext + 12, 4):uint(),
            tvb(ext + 16, 4):uint(), tostring(tvb(ext + 20, 8):bytes():tohex()))
    elseif ext_type == EXT_TYPE.NACK then
        sub:add(f.nack_psn, tvb(ext + 12, 4))
        sub:add(f.nack_cum, tvb(ext + 16, 4))
        sub:add(f.reserved, tvb(ext + 20, 12))
        detail = string.format("psn=%d", tvb(ext + 12, 4):uint())
    elseif ext_type >= EXT_TYPE.EP_REQUEST then
        sub:add(f.ep_req_id, tvb(ext + 12, 2))
        sub:add(f.ep_port_status, tvb(ext + 16, 4))
        sub:add(f.ep_svc_time, tvb(ext + 20, 4))
        sub:add(f.reserved, tvb(ext + 24, 8))
        local op = EP_OPS[bit.band(tvb(ext + 1, 1):uint(), EP_OP_MASK)] or "?"
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
    if tvb:len() < BTH_BYTES then
        truncated(root, tvb, "BTH cut short")
        return tvb:len()
    end
    local opcode = tvb(0, 1):uint()
    root:add(f.opcode, tvb(0, 1))
    root:add(f.dest_qp, tvb(5, 3))
    root:add(f.ack_req, tvb(8, 1):bitfield(0, 1) == 1)
    root:add(f.psn, tvb(9, 3))
    if opcode == OPCODE.WRITE_ONLY or opcode == OPCODE.WRITE_ONLY_IMM then
        local need = BTH_BYTES + RETH_BYTES + (opcode == OPCODE.WRITE_ONLY_IMM and IMMDT_BYTES or 0)
        if tvb:len() < need then
            truncated(root, tvb, "RETH cut short")
            return tvb:len()
        end
        data_extension(tvb, pinfo, root, opcode)
    elseif opcode == OPCODE.ACKNOWLEDGE then
        if tvb:len() < BTH_BYTES + AETH_BYTES then
            truncated(root, tvb, "AETH cut short")
            return tvb:len()
        end
        control_extension(tvb, pinfo, root)
    else
        root:add_proto_expert_info(e_bad, string.format("BTH opcode 0x%02x is not MRC", opcode))
    end
    return tvb:len()
end

udp_port:add(ROCEV2_UDP_PORT, mrc)
