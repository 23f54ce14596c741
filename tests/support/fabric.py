"""The shipped small fabric (2 planes x 2 racks x 2 spines, hosts h0..h3), built once."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from topologies import Fabric, load_topology
from topologies.config import shipped_topology

#: The small fabric's topology file (what ``--topo`` and the namespace labs are given).
SMALL_TOPOLOGY: Path = shipped_topology("small")


@cache
def small_fabric() -> Fabric:
    """The small fabric at its shipped link rates (one shared, immutable instance)."""
    return Fabric(load_topology(SMALL_TOPOLOGY))
