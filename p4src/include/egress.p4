/*
 * MrcEgress: BMv2 reveals the queue depth only here, and per priority queue, so a departing
 * data packet (priority 0) records the depth it leaves behind in its queue (deq_qdepth) in
 * port_qdepth and clears port_arrivals; ingress adds the packets it has queued there since (see
 * mrc_switch.p4). Then every packet is counted out.
 */
#ifndef MRC_EGRESS_P4
#define MRC_EGRESS_P4

control MrcEgress(inout headers_t hdr,
                  inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {

    counter(512, CounterType.packets_and_bytes) port_out;   // by egress port

    apply {
        if (standard_metadata.priority == PRIORITY_LOW) {
            port_qdepth.write((counter_index_t) standard_metadata.egress_port,
                              standard_metadata.deq_qdepth);
            port_arrivals.write((counter_index_t) standard_metadata.egress_port, 0);
        }
        port_out.count((counter_index_t) standard_metadata.egress_port);
    }
}

#endif  // MRC_EGRESS_P4
