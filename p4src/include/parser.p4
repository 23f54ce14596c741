/*
 * Parser and deparser.
 *
 * The parser extracts Ethernet, IPv6, an optional SRH (bounded segment list), UDP, and for
 * UDP/4791 the BTH and, for RDMA WRITE (with immediate), RETH [+ ImmDt] + MRC data extension.
 * It rejects malformed SRHs with verify(); in v1model a rejected packet still enters ingress,
 * with standard_metadata.parser_error set, and MrcIngress drops and counts it by reason.
 * Packets of other protocols are accepted as far as they were parsed (ingress decides).
 */
#ifndef MRC_PARSER_P4
#define MRC_PARSER_P4

parser MrcParser(packet_in pkt,
                 out headers_t hdr,
                 inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {

    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV6: parse_ipv6;
            default: accept;   // not IPv6: ingress drops it as NOT_IPV6
        }
    }

    state parse_ipv6 {
        pkt.extract(hdr.ipv6);
        transition select(hdr.ipv6.next_hdr) {
            IP_PROTO_ROUTING: parse_srh;
            IP_PROTO_UDP: parse_udp;
            default: accept;
        }
    }

    state parse_srh {
        pkt.extract(hdr.srh);
        verify(hdr.srh.routing_type == SRH_ROUTING_TYPE, error.SrhBadRoutingType);
        verify(hdr.srh.last_entry < SRH_MAX_SEGMENTS, error.SrhTooManySegments);
        verify(hdr.srh.hdr_ext_len == ((hdr.srh.last_entry + 1) << 1), error.SrhLengthMismatch);
        // segments_left may be last_entry + 1: a reduced SRH (RFC 8754 section 4.1.1) leaves
        // out the first segment, which is the destination address when the packet is sent.
        verify(hdr.srh.segments_left <= hdr.srh.last_entry + 1, error.SrhSegmentsLeftRange);
        meta.srh_segments_to_parse = hdr.srh.last_entry + 1;
        transition parse_srh_segment;
    }

    // Runs last_entry + 1 times (1..SRH_MAX_SEGMENTS, checked above).
    state parse_srh_segment {
        pkt.extract(hdr.srh_segments.next);
        meta.srh_segments_to_parse = meta.srh_segments_to_parse - 1;
        transition select(meta.srh_segments_to_parse) {
            0: parse_after_srh;
            default: parse_srh_segment;
        }
    }

    state parse_after_srh {
        transition select(hdr.srh.next_hdr) {
            IP_PROTO_UDP: parse_udp;
            default: accept;
        }
    }

    state parse_udp {
        pkt.extract(hdr.udp);
        transition select(hdr.udp.dst_port) {
            ROCEV2_UDP_PORT: parse_bth;
            default: accept;
        }
    }

    state parse_bth {
        pkt.extract(hdr.bth);
        transition select(hdr.bth.opcode) {
            BTH_OPCODE_WRITE_ONLY: parse_reth;
            BTH_OPCODE_WRITE_ONLY_IMM: parse_reth;
            default: accept;   // ACK and anything else: parsed up to BTH
        }
    }

    state parse_reth {
        pkt.extract(hdr.reth);
        transition select(hdr.bth.opcode) {
            BTH_OPCODE_WRITE_ONLY_IMM: parse_immdt;
            default: parse_mrc_data;
        }
    }

    state parse_immdt {
        pkt.extract(hdr.immdt);
        transition parse_mrc_data;
    }

    state parse_mrc_data {
        pkt.extract(hdr.mrc_data);
        transition accept;
    }
}

#endif  // MRC_PARSER_P4
