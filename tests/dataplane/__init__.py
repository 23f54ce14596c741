"""Packet-level tests of the switch pipeline (PTF style), shared by the BMv2 and switchmodel targets.

- ``cases``       the case table: entries, packet in, packets out or drop, counters that move;
                  and the burst table: frames into a shaped port, the order they must leave in;
- ``packets``     MRC packet builders (scapy) used by the cases and the kernel peer test;
- ``target``      the target interface every implementation offers (:class:`DataplaneTarget`);
- ``netns``       network namespaces, veth pairs and AF_PACKET sockets inside a namespace;
- ``targets_bmv2`` the BMv2 target; ``targets_model`` (switchmodel's) the switchmodel target.
"""
