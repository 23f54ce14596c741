/*
 * MrcIngress: validity checks, SRv6 (uN shift / End), static LPM forwarding, then
 * trimming or ECN marking against the per-port thresholds.
 *
 * In order:
 *   1. count the packet on its ingress port (port_in);
 *   2. drop parser errors: SRH_INVALID for the SRH checks, PARSE_ERROR for anything else;
 *   3. drop anything that is not IPv6 (NOT_IPV6);
 *   4. drop hop limit <= 1 (HOP_LIMIT), else decrement it;
 *   5. my_sid: usid_un shifts the carrier (or, when the carrier is exhausted, does End);
 *      srv6_end does End. End: with an SRH and segments_left > 0, segments_left -= 1 and
 *      dst = segment_list[segments_left]; without one the packet is dropped (SID_END);
 *   6. ipv6_ecmp: a plain host NIC address of another rack (on a leaf) goes to one of the
 *      equal-cost uplinks, chosen by a hash of (IPv6 source, IPv6 destination, flow label,
 *      UDP source port); anything else: ipv6_lpm picks port and MACs, or drops (NO_ROUTE);
 *   7. priority: control and trimmed DSCPs high (a header trimmed upstream), else low;
 *   8. the depth of the egress port's data queue: port_qdepth (left by the last departure)
 *      plus port_arrivals (packets queued there since);
 *   9. port_qos: trim an MRC data packet with DSCP 10 when that depth is >= the trim threshold
 *      (the controller puts it at the queue's capacity for trimming only when full), else mark
 *      CE on an ECT packet: always at or above the ECN maximum threshold, and between the ECN
 *      threshold and it with a probability rising with the depth (RED-like; both thresholds
 *      equal: a fixed threshold);
 *  10. a packet that goes to the data queue (priority 0) counts itself in port_arrivals.
 */
#ifndef MRC_INGRESS_P4
#define MRC_INGRESS_P4

control MrcIngress(inout headers_t hdr,
                   inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {

    counter(512, CounterType.packets_and_bytes) port_in;     // by ingress port
    counter(512, CounterType.packets_and_bytes) trimmed;     // by egress port
    counter(512, CounterType.packets_and_bytes) ecn_marked;  // by egress port
    counter(16, CounterType.packets_and_bytes) drops;        // by drop reason

    // Drop the packet and count why (called from the apply block, not a table action).
    @hidden
    action drop(counter_index_t reason) {
        drops.count(reason);
        mark_to_drop(standard_metadata);
    }

    // ---- my_sid: the SIDs of this switch ------------------------------------------------
    // The actions only say which behaviour matched; the apply block below performs it.

    // uN (NEXT-C-SID, 32-bit block, 16-bit uSIDs): entry block:uSID::/48.
    action usid_un() { }

    // Classic End (RFC 8986): entry block:uSID::e/128.
    action srv6_end() { }

    table my_sid {
        key = {
            hdr.ipv6.dst_addr: lpm;
        }
        actions = {
            usid_un;
            srv6_end;
            NoAction;
        }
        default_action = NoAction();
        size = 64;
    }

    // ---- ipv6_lpm: static routes, /48 per uSID -------------------------------------------

    action set_next_hop(port_t port, mac_addr_t smac, mac_addr_t dmac) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.src_addr = smac;
        hdr.ethernet.dst_addr = dmac;
    }

    action drop_no_route() {
        drops.count(DROP_NO_ROUTE);
        mark_to_drop(standard_metadata);
    }

    table ipv6_lpm {
        key = {
            hdr.ipv6.dst_addr: lpm;
        }
        actions = {
            set_next_hop;
            drop_no_route;
        }
        default_action = drop_no_route();
        size = 1024;
    }

    // ---- ipv6_ecmp: plain NIC addresses of other racks, spread over the uplinks ------------
    // An EV that is not a path (the STEV and UDP formats) travels to the destination NIC's
    // plain address, block:uSID(NIC)::, and the leaf picks the uplink. The entry's /48 points
    // at a group of set_next_hop members (one per uplink). BMv2 packs the selector fields in
    // this order with no padding between them (128 + 128 + 20 + 16 = 292 bits, zero-filled at
    // the end to 37 bytes), hashes them with CRC-32 and takes the member (hash mod group size)
    // in the order of the members' handles. switchmodel computes the same (switchmodel/ecmp.py).

    action_selector(HashAlgorithm.crc32, 32w1024, 32w32) ecmp_selector;

    table ipv6_ecmp {
        key = {
            hdr.ipv6.dst_addr: lpm;
            hdr.ipv6.src_addr: selector;
            hdr.ipv6.dst_addr: selector;
            hdr.ipv6.flow_label: selector;
            meta.ecmp_l4_src_port: selector;
        }
        actions = {
            set_next_hop;
            NoAction;
        }
        default_action = NoAction();   // not a plain NIC address of another rack: ipv6_lpm
        implementation = ecmp_selector;
        size = 1024;
    }

    // ---- port_qos: trim and ECN thresholds of each egress port ---------------------------

    // Thresholds in packets of the data queue. ECN marks every ECT packet at a depth of at least
    // ecn_max_threshold and, between ecn_threshold and it, with probability
    // (depth - ecn_threshold) * ecn_slope / 65536 (RED-like); ecn_max_threshold ==
    // ecn_threshold is a fixed threshold. The controller computes the slope.
    // last_hop: the port faces a host, so a packet trimmed here was trimmed at the last hop (the
    // receiver's downlink, as in an incast) and says so with DSCP 13 instead of 12.
    action set_port_qos(qdepth_t trim_threshold, qdepth_t ecn_threshold,
                        qdepth_t ecn_max_threshold, bit<16> ecn_slope, bit<1> last_hop) {
        meta.qos_valid = true;
        meta.trim_threshold = trim_threshold;
        meta.ecn_threshold = ecn_threshold;
        meta.ecn_max_threshold = ecn_max_threshold;
        meta.ecn_slope = ecn_slope;
        meta.last_hop = last_hop;
    }

    table port_qos {
        key = {
            standard_metadata.egress_spec: exact;
        }
        actions = {
            set_port_qos;
            NoAction;
        }
        default_action = NoAction();   // no trimming, no ECN marking on that port
        size = 512;
    }

    apply {
        port_in.count((counter_index_t) standard_metadata.ingress_port);

        // -- 2, 3: what did not parse, or is not IPv6 --
        if (standard_metadata.parser_error != error.NoError) {
            if (standard_metadata.parser_error == error.SrhBadRoutingType ||
                standard_metadata.parser_error == error.SrhTooManySegments ||
                standard_metadata.parser_error == error.SrhLengthMismatch ||
                standard_metadata.parser_error == error.SrhSegmentsLeftRange) {
                drop(DROP_SRH_INVALID);
            } else {
                drop(DROP_PARSE_ERROR);   // truncated or malformed header
            }
            return;
        }
        if (!hdr.ipv6.isValid()) {
            drop(DROP_NOT_IPV6);
            return;
        }

        // -- 4: hop limit --
        if (hdr.ipv6.hop_limit <= 1) {
            drop(DROP_HOP_LIMIT);
            return;
        }
        hdr.ipv6.hop_limit = hdr.ipv6.hop_limit - 1;

        // -- 5: SRv6 --
        bool do_end = false;
        switch (my_sid.apply().action_run) {
            usid_un: {
                if (hdr.ipv6.dst_addr[79:0] == 0) {
                    // Nothing follows our uSID: the carrier is exhausted here.
                    do_end = true;
                } else {
                    // Drop our uSID: shift the 96 bits after the block left by 16, zero fill.
                    hdr.ipv6.dst_addr = hdr.ipv6.dst_addr[127:96] ++ hdr.ipv6.dst_addr[79:0] ++ 16w0;
                }
            }
            srv6_end: {
                do_end = true;
            }
        }
        if (do_end) {
            if (hdr.srh.isValid() && hdr.srh.segments_left > 0) {
                hdr.srh.segments_left = hdr.srh.segments_left - 1;
                // The parser guarantees segments_left <= last_entry + 1 (a reduced SRH), so the
                // decremented value is <= last_entry < SRH_MAX_SEGMENTS, and that segments
                // 0..last_entry are valid; constant indices keep this portable.
                if (hdr.srh.segments_left == 0) {
                    hdr.ipv6.dst_addr = hdr.srh_segments[0].sid;
                } else if (hdr.srh.segments_left == 1) {
                    hdr.ipv6.dst_addr = hdr.srh_segments[1].sid;
                } else if (hdr.srh.segments_left == 2) {
                    hdr.ipv6.dst_addr = hdr.srh_segments[2].sid;
                } else {
                    hdr.ipv6.dst_addr = hdr.srh_segments[3].sid;
                }
            } else {
                drop(DROP_SID_END);
                return;
            }
        }

        // -- 6: forwarding --
        if (hdr.udp.isValid()) {
            meta.ecmp_l4_src_port = hdr.udp.src_port;
        } else {
            meta.ecmp_l4_src_port = 0;
        }
        if (!ipv6_ecmp.apply().hit) {
            if (!ipv6_lpm.apply().hit) {
                return;   // drop_no_route counted it
            }
        }

        // -- 7: priority class: control, and headers trimmed by an earlier switch --
        if (hdr.ipv6.dscp == DSCP_CONTROL || hdr.ipv6.dscp == DSCP_TRIMMED ||
                hdr.ipv6.dscp == DSCP_TRIMMED_LAST_HOP) {
            standard_metadata.priority = PRIORITY_HIGH;
        } else {
            standard_metadata.priority = PRIORITY_LOW;
        }

        // -- 8: the depth of the egress port's data queue --
        qdepth_t left;
        qdepth_t arrivals;
        port_qdepth.read(left, (counter_index_t) standard_metadata.egress_spec);
        port_arrivals.read(arrivals, (counter_index_t) standard_metadata.egress_spec);
        meta.qdepth = left + arrivals;

        // -- 9: trimming and ECN against that depth (ports with thresholds only) --
        meta.qos_valid = false;
        port_qos.apply();
        if (meta.qos_valid && hdr.mrc_data.isValid() && hdr.ipv6.dscp == DSCP_TRIMMABLE &&
                meta.qdepth >= meta.trim_threshold) {
            // Keep every header up to and including the MRC data extension; cut the payload.
            bit<16> l4_bytes = UDP_BYTES + BTH_BYTES + RETH_BYTES + MRC_DATA_BYTES;
            if (hdr.immdt.isValid()) {
                l4_bytes = l4_bytes + IMMDT_BYTES;
            }
            bit<16> srh_bytes = 0;
            if (hdr.srh.isValid()) {
                srh_bytes = SRH_FIXED_BYTES + (((bit<16>) hdr.srh.hdr_ext_len) << 3);
            }
            hdr.udp.length = l4_bytes;
            hdr.ipv6.payload_len = srh_bytes + l4_bytes;
            hdr.ipv6.dscp = meta.last_hop == 1 ? DSCP_TRIMMED_LAST_HOP : DSCP_TRIMMED;
            standard_metadata.priority = PRIORITY_HIGH;
            truncate((bit<32>) (ETHERNET_BYTES + IPV6_BYTES + hdr.ipv6.payload_len));
            trimmed.count((counter_index_t) standard_metadata.egress_spec);
        } else if (meta.qos_valid && (hdr.ipv6.ecn == ECN_ECT0 || hdr.ipv6.ecn == ECN_ECT1) &&
                meta.qdepth >= meta.ecn_threshold) {
            bool mark = meta.qdepth >= meta.ecn_max_threshold;
            if (!mark) {
                // RED: mark with probability (depth - ecn_threshold) * ecn_slope / 65536
                bit<32> above = (bit<32>) (meta.qdepth - meta.ecn_threshold);
                bit<32> chance = above * (bit<32>) meta.ecn_slope;
                bit<16> dice;
                random(dice, 16w0, 16w0xFFFF);
                mark = (bit<32>) dice < chance;
            }
            if (mark) {
                hdr.ipv6.ecn = ECN_CE;
                ecn_marked.count((counter_index_t) standard_metadata.egress_spec);
            }
        }

        // -- 10: this packet's place in the data queue --
        if (standard_metadata.priority == PRIORITY_LOW && arrivals != QDEPTH_MAX) {
            port_arrivals.write((counter_index_t) standard_metadata.egress_spec, arrivals + 1);
        }
    }
}

#endif  // MRC_INGRESS_P4
