/*
 * Checksum controls and deparser: headers are emitted in parse order; invalid ones are skipped,
 * and whatever the parser did not extract (the payload) follows unchanged.
 */
#ifndef MRC_DEPARSER_P4
#define MRC_DEPARSER_P4

control MrcVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }   // IPv6 has no header checksum; MRC sends UDP checksum 0
}

control MrcComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

control MrcDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv6);
        pkt.emit(hdr.srh);
        pkt.emit(hdr.srh_segments);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.bth);
        pkt.emit(hdr.reth);
        pkt.emit(hdr.immdt);
        pkt.emit(hdr.mrc_data);
    }
}

#endif  // MRC_DEPARSER_P4
