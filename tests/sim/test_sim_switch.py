"""The sim switch's tables: from the fabric model they are the controller's entries.

The sim builds every switch's tables from the fabric model (:meth:`SwitchTables.of_fabric`),
fast enough for fabrics of thousands of hosts; the controller computes the entries it
installs on BMv2 and switchmodel (:func:`controller.entries.switch_tables`). Read back through
:meth:`SwitchTables.of_entries`, the two must be the same tables, switch by switch. How the sim
decides on them is the data-plane case table's business (``tests/dataplane``, target ``sim``).
"""

from __future__ import annotations

import ipaddress

import pytest

from controller.entries import Entry, switch_tables
from p4src.contract import IPV6_LPM, PORT_QOS, SET_NEXT_HOP, PortQosParams
from sim.switch import END, NO_ROUTE, UN, Hop, SwitchTables
from topologies import Fabric, load_topology
from topologies.config import shipped_topology


@pytest.mark.parametrize("name", ["small", "medium"])
def test_fabric_tables_are_the_controllers(name: str) -> None:
    fabric = Fabric(load_topology(shipped_topology(name)))
    for sw in fabric.switches:
        intended = switch_tables(fabric, sw).entries
        from_entries = SwitchTables.of_entries(intended)
        assert len(from_entries.port_qos) == len(sw.ports)  # the controller's thresholds
        from_entries.port_qos = {}
        assert SwitchTables.of_fabric(fabric, sw) == from_entries, sw.name


def test_entries_and_defaults_become_tables() -> None:
    fabric = Fabric(load_topology(shipped_topology("small")))
    sw = fabric.switch("t1-p0-s0")
    hop = {"port": 2, "smac": "02:00:00:00:00:01", "dmac": "02:00:00:00:00:02"}
    entries = [
        *switch_tables(fabric, sw).entries,
        Entry.default(IPV6_LPM, SET_NEXT_HOP, hop),
        Entry.default(
            PORT_QOS, "MrcIngress.set_port_qos", dict(PortQosParams(1, 2, 3, 4, 1)._asdict())
        ),
    ]
    tables = SwitchTables.of_entries(entries)
    assert tables.ipv6_lpm_default == Hop(2, bytes.fromhex("020000000002020000000001"))
    assert tables.qos(99) == PortQosParams(1, 2, 3, 4, 1)
    assert tables.my_sid.lookup(int(sw.end_sid)) == END
    assert tables.my_sid.lookup(int(sw.usid_prefix.network_address) | 1 << 64) == UN
    assert SwitchTables.of_entries([]).ipv6_lpm_default == NO_ROUTE


def test_an_entry_of_another_program_is_refused() -> None:
    bad = Entry.make(
        "MrcIngress.no_such_table", {"hdr.ipv6.dst_addr": ipaddress.IPv6Network("::/0")}, "NoAction"
    )
    with pytest.raises(ValueError, match="not an entry of the mrc_switch program"):
        SwitchTables.of_entries([bad])
