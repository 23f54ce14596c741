"""Topology files: every validation error names the file, the field and what is expected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from topologies import Fabric, TopologyError, load_topology, parse_topology
from topologies.config import shipped_topology

BASE: dict[str, Any] = {
    "name": "t",
    "planes": 2,
    "racks": 2,
    "spines_per_plane": 2,
    "hosts_per_rack": 2,
}


def test_defaults_fill_optional_sections() -> None:
    topo = parse_topology(BASE)
    assert topo.mtu == 4096
    assert str(topo.usid_block) == "fcbb:bb00::/32"
    # the uet profile's: a 1-BDP data queue in priority queues of four times that
    assert (topo.bdp_queue.packets, topo.bdp_packets, topo.queue_depth) == (28, 28, 112)
    assert parse_topology({**BASE, "profile": "testbed-2026"}).queue_depth == 64
    assert topo.link_mtu > topo.mtu


def test_with_returns_a_validated_copy() -> None:
    topo = load_topology(shipped_topology("small"))
    wider = topo.with_(planes=4)
    assert (topo.planes, wider.planes) == (2, 4)
    with pytest.raises(TopologyError, match="planes"):
        topo.with_(planes=0)


@pytest.mark.parametrize(
    ("change", "field", "expected"),
    [
        ({"planes": 0}, "planes", "between 1 and 16"),
        ({"planes": 17}, "planes", "between 1 and 16"),
        ({"planes": "two"}, "planes", "an integer"),
        ({"planes": True}, "planes", "an integer"),
        ({"racks": 0}, "racks", "at least 1"),
        ({"racks": 1025}, "racks", "uSID space overflow"),
        ({"spines_per_plane": 2000}, "spines_per_plane", "uSID space overflow"),
        ({"racks": 64, "hosts_per_rack": 32}, "hosts_per_rack", "uSID space overflow"),
        ({"usid_block": "fcbb:bb00::/48"}, "usid_block", "/32 locator block"),
        ({"usid_block": "fcbb:bb00::1/32"}, "usid_block", "host bits zero"),
        ({"usid_block": "10.0.0.0/8"}, "usid_block", "IPv6 /32"),
        ({"mtu": 100}, "mtu", "between 256"),
        ({"link": {"rate_mbps": 0}}, "link.rate_mbps", "> 0"),
        ({"link": {"delay_us": -1}}, "link.delay_us", ">= 0"),
        ({"link": {"latency_us": -1}}, "link.latency_us", ">= 0"),
        ({"link": {"latency_us": 1, "delay_us": 50}}, "link.delay_us", "beside"),
        ({"profile": "fast"}, "profile", "uet or testbed-2026"),
        ({"link": {"speed": 1}}, "link.speed", "one of"),
        ({"link": 5}, "link", "a mapping"),
        ({"switch": {"queue_depth": 0}}, "switch.queue_depth", "between 1"),
        ({"colour": "blue"}, "colour", "one of"),
        ({"name": "bad name!"}, "name", "letters, digits"),
    ],
)
def test_validation_errors_name_the_field(
    change: dict[str, Any], field: str, expected: str
) -> None:
    with pytest.raises(TopologyError) as info:
        parse_topology({**BASE, **change}, "my.yaml")
    assert info.value.field == field
    assert expected in str(info.value)
    assert str(info.value).startswith("my.yaml: ")


def test_missing_required_field() -> None:
    data = dict(BASE)
    del data["racks"]
    with pytest.raises(TopologyError, match="'racks'.*required"):
        parse_topology(data, "x.yaml")


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="no such file"):
        load_topology(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("planes: [1\n")
    with pytest.raises(TopologyError, match="valid YAML"):
        load_topology(bad)
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(TopologyError, match="a list: expected a mapping"):
        load_topology(bad)


def test_name_defaults_to_the_file_stem(tmp_path: Path) -> None:
    path = tmp_path / "lab.yaml"
    path.write_text("planes: 1\nracks: 1\nspines_per_plane: 1\nhosts_per_rack: 2\n")
    assert load_topology(path).name == "lab"


def test_interface_names_that_do_not_fit_are_rejected() -> None:
    topo = parse_topology({**BASE, "planes": 16, "racks": 1000, "hosts_per_rack": 1}, "big.yaml")
    with pytest.raises(TopologyError, match="15 characters"):
        Fabric(topo)
