/*
 * MrcEgress: BMv2 reveals the queue depth only here, so egress records the depth it observed
 * when the packet was enqueued (all priority queues of the port together) in port_qdepth,
 * where ingress reads it for the next packets to that port. Then it counts the packet out.
 */
#ifndef MRC_EGRESS_P4
#define MRC_EGRESS_P4

control MrcEgress(inout headers_t hdr,
                  inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {

    counter(512, CounterType.packets_and_bytes) port_out;   // by egress port

    apply {
        port_qdepth.write((counter_index_t) standard_metadata.egress_port,
                          standard_metadata.enq_qdepth);
        port_out.count((counter_index_t) standard_metadata.egress_port);
    }
}

#endif  // MRC_EGRESS_P4
