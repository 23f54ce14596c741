/*
 * mrc_switch.p4 -- the switch of the MRC testbed fabric (P4_16, v1model, BMv2 simple_switch).
 *
 * Static SRv6 forwarding and congestion trimming:
 *   - uN (NEXT-C-SID) shift of 16-bit uSIDs after a 32-bit block, and classic End (RFC 8986)
 *     with an SRH when the uSID carrier is exhausted;
 *   - static LPM forwarding to a port and next-hop MACs (no routing protocol);
 *   - ECMP for plain host NIC addresses of other racks (EVs that are not paths: the STEV and
 *     UDP formats): the leaf hashes the flow over its uplinks with an action selector;
 *   - per-port thresholds: MRC data packets above the trim threshold lose their payload and
 *     go out re-marked at high priority; ECN-capable packets above the ECN threshold get CE;
 *   - counters per port and per drop reason.
 *
 * Table, action, counter and register names are the contract with the controller and with
 * switchmodel: see p4src/mrc_switch.p4info.txtpb and docs/p4-pipeline.md.
 */
#include <core.p4>
#include <v1model.p4>

#include "include/headers.p4"
#include "include/parser.p4"

// The depth of each port's data queue (priority 0; index: port number), as ingress estimates
// it: BMv2 reveals queue depth only in egress, and per priority queue, so egress records the
// depth a departing data packet leaves behind (port_qdepth = deq_qdepth) and clears
// port_arrivals, which ingress then counts up for every packet it queues there. Depth now =
// port_qdepth + port_arrivals. Declared at top level because both controls use them.
register<qdepth_t>(512) port_qdepth;
register<qdepth_t>(512) port_arrivals;

#include "include/ingress.p4"
#include "include/egress.p4"
#include "include/deparser.p4"

V1Switch(
    MrcParser(),
    MrcVerifyChecksum(),
    MrcIngress(),
    MrcEgress(),
    MrcComputeChecksum(),
    MrcDeparser()
) main;
