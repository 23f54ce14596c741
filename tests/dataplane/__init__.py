"""Packet-level tests of the switch pipeline (PTF style), shared by every switch target.

- ``cases``       the case table: entries, packet in, packets out or drop, counters that move;
                  and the burst table: frames into a shaped port, the order they must leave in;
- ``packets``     MRC packet builders (scapy), the only ones of the suite (the switchmodel
                  tests build their frames with them too);
- ``target``      the target interface every implementation offers (:class:`DataplaneTarget`);
- ``targets_pipeline`` switchmodel's pipeline in this process (no root); ``targets_sim`` the
                  sim's switch, in simulated time (no root); ``targets_p4rt``
                  a switch process on veth pairs (:mod:`targets.lab`), driven over P4Runtime:
                  ``targets_bmv2`` BMv2, ``targets_model`` mrc-switch.
"""
