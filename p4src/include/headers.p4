/*
 * Headers, constants and metadata of the MRC switch.
 *
 * What the switch parses of an MRC packet (docs/wire-format.md owns the rest):
 *
 *   Ethernet / IPv6 / [SRH, at most 4 segments] / UDP (dst 4791) / BTH (12 bytes)
 *     opcode 0x0A (RDMA WRITE Only):           / RETH (16) / MRC data extension (24) / payload
 *     opcode 0x0B (RDMA WRITE Only with Imm):  / RETH (16) / ImmDt (4) / MRC data ext. (24) / payload
 *     any other opcode (ACK 0x11, ...):        parsed up to BTH only, never trimmed
 */
#ifndef MRC_HEADERS_P4
#define MRC_HEADERS_P4

typedef bit<48>  mac_addr_t;
typedef bit<128> ipv6_addr_t;
typedef bit<9>   port_t;
typedef bit<19>  qdepth_t;       // queue depth in packets, as standard_metadata.deq_qdepth
typedef bit<32>  counter_index_t;

const qdepth_t QDEPTH_MAX = 0x7FFFF;
const bit<16> ETHERTYPE_IPV6 = 0x86DD;
const bit<8>  IP_PROTO_ROUTING = 43;   // IPv6 Routing header
const bit<8>  IP_PROTO_UDP = 17;
const bit<8>  SRH_ROUTING_TYPE = 4;    // RFC 8754 Segment Routing Header
const bit<16> ROCEV2_UDP_PORT = 4791;
const bit<8>  BTH_OPCODE_WRITE_ONLY = 0x0A;      // RC RDMA WRITE Only
const bit<8>  BTH_OPCODE_WRITE_ONLY_IMM = 0x0B;  // RC RDMA WRITE Only with Immediate

#define SRH_MAX_SEGMENTS 4

// Header sizes in bytes, for trimming and length fixing.
const bit<16> ETHERNET_BYTES = 14;
const bit<16> IPV6_BYTES = 40;
const bit<16> SRH_FIXED_BYTES = 8;
const bit<16> UDP_BYTES = 8;
const bit<16> BTH_BYTES = 12;
const bit<16> RETH_BYTES = 16;
const bit<16> IMMDT_BYTES = 4;
const bit<16> MRC_DATA_BYTES = 24;

// DSCP code points (6 bits) and ECN code points (2 bits) of the IPv6 traffic class.
const bit<6> DSCP_DEFAULT = 0;     // ordinary traffic: never trimmed
const bit<6> DSCP_TRIMMABLE = 10;  // MRC data: the switch may trim it
const bit<6> DSCP_TRIMMED = 12;    // what a trimmed packet carries
const bit<6> DSCP_TRIMMED_LAST_HOP = 13;  // trimmed by the receiver's own leaf (its downlink)
const bit<6> DSCP_CONTROL = 48;    // MRC control: ACK, NACK, probes
const bit<2> ECN_NOT_ECT = 0b00;
const bit<2> ECN_ECT1 = 0b01;
const bit<2> ECN_ECT0 = 0b10;
const bit<2> ECN_CE = 0b11;

// Priorities (standard_metadata.priority): BMv2 serves the higher number first.
const bit<3> PRIORITY_LOW = 0;
const bit<3> PRIORITY_HIGH = 1;

// Drop reasons: the index of MrcIngress.drops.
const counter_index_t DROP_NOT_IPV6 = 1;
const counter_index_t DROP_PARSE_ERROR = 2;
const counter_index_t DROP_SRH_INVALID = 3;
const counter_index_t DROP_HOP_LIMIT = 4;
const counter_index_t DROP_NO_ROUTE = 5;
const counter_index_t DROP_SID_END = 6;
// 7 QUEUE_FULL and 8 OVERSIZE are counted by the target, not by this program.

// Parser errors of this program, besides the core ones (PacketTooShort, ...).
error {
    SrhBadRoutingType,     // a routing header of a type other than 4
    SrhTooManySegments,    // last_entry >= SRH_MAX_SEGMENTS
    SrhLengthMismatch,     // hdr_ext_len != 2 * (last_entry + 1) (TLVs are not accepted)
    SrhSegmentsLeftRange   // segments_left > last_entry + 1 (last_entry + 1: a reduced SRH)
}

header ethernet_t {
    mac_addr_t dst_addr;
    mac_addr_t src_addr;
    bit<16>    ether_type;
}

// The traffic class is split into its DSCP and ECN parts.
header ipv6_t {
    bit<4>      version;
    bit<6>      dscp;
    bit<2>      ecn;
    bit<20>     flow_label;
    bit<16>     payload_len;
    bit<8>      next_hdr;
    bit<8>      hop_limit;
    ipv6_addr_t src_addr;
    ipv6_addr_t dst_addr;
}

// RFC 8754 Segment Routing Header, fixed part (8 bytes); the segment list follows.
header srh_t {
    bit<8>  next_hdr;
    bit<8>  hdr_ext_len;     // in 8-byte units, not counting the first 8 bytes
    bit<8>  routing_type;
    bit<8>  segments_left;
    bit<8>  last_entry;      // index of the last element of the segment list
    bit<8>  flags;
    bit<16> tag;
}

header srh_segment_t {
    ipv6_addr_t sid;
}

header udp_t {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

// InfiniBand Base Transport Header (RoCEv2), 12 bytes.
header bth_t {
    bit<8>  opcode;
    bit<1>  solicited_event;
    bit<1>  mig_req;
    bit<2>  pad_count;
    bit<4>  tver;
    bit<16> pkey;
    bit<1>  fecn;
    bit<1>  becn;
    bit<6>  resv6;
    bit<24> dest_qp;
    bit<1>  ack_req;
    bit<7>  resv7;
    bit<24> psn;
}

// RDMA Extended Transport Header, 16 bytes: where the payload goes.
header reth_t {
    bit<64> virtual_address;
    bit<32> rkey;
    bit<32> dma_length;
}

// Immediate data, 4 bytes (WRITE with immediate).
header immdt_t {
    bit<32> immediate;
}

// The MRC data extension: exactly 24 bytes, first byte the extension type. The switch never
// looks inside; it keeps the extension when it trims.
header mrc_data_t {
    bit<8>   ext_type;
    bit<184> fields;
}

struct headers_t {
    ethernet_t                      ethernet;
    ipv6_t                          ipv6;
    srh_t                           srh;
    srh_segment_t[SRH_MAX_SEGMENTS] srh_segments;
    udp_t                           udp;
    bth_t                           bth;
    reth_t                          reth;
    immdt_t                         immdt;
    mrc_data_t                      mrc_data;
}

struct metadata_t {
    bit<8>   srh_segments_to_parse;  // parser loop counter over the segment list
    bool     qos_valid;              // port_qos matched the egress port
    qdepth_t trim_threshold;
    qdepth_t ecn_threshold;          // ECN: marks from here (RED: with a rising probability)
    qdepth_t ecn_max_threshold;      // ECN: marks every ECT packet from here
    bit<16>  ecn_slope;              // RED: marking probability per packet above ecn_threshold, /65536
    bit<1>   last_hop;               // the port faces a host: a trim here is the last hop's
    qdepth_t qdepth;                 // depth of the egress port's queue (port_qdepth + port_arrivals)
    bit<16>  ecmp_l4_src_port;       // UDP source port for the ECMP hash, 0 without UDP
}

#endif  // MRC_HEADERS_P4
