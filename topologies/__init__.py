"""The fabric model: the single source of truth for names, ports, uSIDs, addresses and paths.

A topology file (YAML) is loaded into an immutable :class:`~topologies.config.Topology`,
from which :class:`~topologies.fabric.Fabric` derives everything else exactly once:

- ``config``  -- the topology file schema, loading and validation (errors name the field);
- ``usid``    -- the 16-bit uSID encoding (plane | tier | index) and carrier arithmetic;
- ``fabric``  -- switches, hosts, NICs, links, port numbers, MACs, addresses and paths;
- ``scale``   -- the two-tier multi-plane scale arithmetic (``mrc-testbed topo scale``);
- ``operating`` -- the switches' operating point: the BDP, a 1-BDP queue with RED ECN between
  0.2 and 0.8 BDP as UET's reference simulator derives them, and the profiles ``uet`` and
  ``testbed-2026`` (shared by the emulated targets and the ``sim`` target).

This package is the fabric model alone: it runs nothing. The switch processes, the state file of
a running testbed and the namespace labs are in ``targets``; the Mininet network is built in
``experiments.fabricnet``. The controller's table entries, the Mininet network and the host
agents' path tables are all computed from a :class:`Fabric`; nothing else computes an address or
a path.
"""

from topologies.config import Topology, TopologyError, load_topology, parse_topology
from topologies.fabric import Fabric, Hop, Host, Link, Nic, Path, Port, Switch, Tier

__all__ = [
    "Fabric",
    "Hop",
    "Host",
    "Link",
    "Nic",
    "Path",
    "Port",
    "Switch",
    "Tier",
    "Topology",
    "TopologyError",
    "load_topology",
    "parse_topology",
]
