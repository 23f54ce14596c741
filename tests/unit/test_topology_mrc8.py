"""``topologies/mrc8.yaml``, MRC's eight planes: it loads and validates, derives the fabric the
file's header promises (32 switches, 4 hosts with 8 NICs, 16 paths between racks, interface
names that fit), the controller computes every switch's tables from it, ``topo draw`` draws it
(tests/unit/test_fabric_plot.py), and it is among the shipped topologies that
``mrc-testbed down`` sweeps after a crash."""

from __future__ import annotations

from collections import Counter

from controller.entries import fabric_tables
from topologies import Fabric, load_topology
from topologies.config import IFNAME_MAX, shipped_topologies, shipped_topology


def test_mrc8_loads_with_eight_planes_of_two_racks_and_two_spines() -> None:
    topo = load_topology(shipped_topology("mrc8"))
    assert (topo.name, topo.planes, topo.racks, topo.spines_per_plane) == ("mrc8", 8, 2, 2)
    assert topo.hosts == 4
    fabric = Fabric(topo)
    assert len(fabric.switches) == 32
    assert Counter(sw.plane for sw in fabric.switches) == dict.fromkeys(range(8), 4)
    assert len(fabric.hosts) == 4
    for host in fabric.hosts:
        assert sorted(nic.plane for nic in host.nics) == list(range(8))
    # 8 planes x (2 host links + 2 uplinks per leaf x 2 leaves) ... every host NIC and every
    # leaf-spine pair once
    assert len(fabric.links) == 8 * (4 + 2 * 2)


def test_mrc8_interface_names_fit_and_addresses_are_unique() -> None:
    fabric = Fabric(load_topology(shipped_topology("mrc8")))
    names = [port.intf for sw in fabric.switches for port in sw.ports]
    names += [nic.intf for host in fabric.hosts for nic in host.nics]
    assert all(len(name) <= IFNAME_MAX for name in names), max(names, key=len)
    assert len(set(names)) == len(names)
    addresses = [nic.address for host in fabric.hosts for nic in host.nics]
    assert len(set(addresses)) == 32


def test_mrc8_has_sixteen_paths_between_racks_one_per_plane_and_spine() -> None:
    fabric = Fabric(load_topology(shipped_topology("mrc8")))
    paths = fabric.paths("h0", "h3")
    assert len(paths) == 16
    assert {(p.plane, p.spine) for p in paths} == {(x, s) for x in range(8) for s in range(2)}
    assert len({p.carrier for p in paths}) == 16
    # within a rack: one path per plane, through the leaf alone
    assert len(fabric.paths("h0", "h1")) == 8


def test_mrc8_tables_for_every_switch() -> None:
    fabric = Fabric(load_topology(shipped_topology("mrc8")))
    tables = fabric_tables(fabric)
    assert list(tables) == [sw.name for sw in fabric.switches]
    assert all(t.entries for t in tables.values())


def test_mrc8_is_shipped_and_every_shipped_topology_loads() -> None:
    shipped = shipped_topologies()
    assert shipped_topology("mrc8") in shipped
    assert {p.stem for p in shipped} >= {"small", "default", "medium", "mrc8"}
    for path in shipped:
        assert Fabric(load_topology(path)).topology.name == path.stem
