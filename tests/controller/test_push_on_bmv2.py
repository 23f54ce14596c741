"""The controller against BMv2 (simple_switch_grpc): pipeline with BMv2 JSON, push, idempotence,
for a spine and for a leaf (whose ECMP members and group BMv2 reads back as written), and a
change of a leaf's ECMP group written in an order BMv2 accepts.

Runs where p4c and simple_switch_grpc exist and the tests run as root (the switch needs real
interfaces: a veth pair made and removed by the fixture); skips with the reason otherwise.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fabric import small_fabric

from controller.client import SwitchClient
from controller.entries import GROUP, MEMBER, Entry, SwitchTables, fabric_tables
from controller.p4info import P4Info
from controller.push import PushOptions, SwitchAddress, push_fabric, read_installed
from p4src.compile import committed_pipeline
from p4src.contract import ECMP_SELECTOR
from targets.bmv2 import Bmv2Switch, missing_tools
from targets.lab import free_port

MISSING = missing_tools()
pytestmark = [
    pytest.mark.bmv2,
    pytest.mark.skipif(bool(MISSING), reason=f"BMv2 tools not on PATH: {', '.join(MISSING)}"),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create the switch's veth ports"),
]
VETH = ("mctl-bm0", "mctl-bm1")  # interface names unique to the controller tests


@pytest.fixture(scope="module")
def veth() -> Iterator[tuple[str, str]]:
    subprocess.run(
        ["ip", "link", "add", VETH[0], "type", "veth", "peer", "name", VETH[1]], check=True
    )
    try:
        for name in VETH:
            subprocess.run(["ip", "link", "set", name, "up"], check=True)
        yield VETH
    finally:
        subprocess.run(["ip", "link", "del", VETH[0]], check=False)


@pytest.fixture(scope="module")
def build() -> tuple[P4Info, bytes]:
    p4info_path, json_path = committed_pipeline()
    return P4Info.load(p4info_path), Path(json_path).read_bytes()


def running(name: str, veth: tuple[str, str], log_dir: Path) -> Iterator[Bmv2Switch]:
    """BMv2 playing switch ``name`` of the small fabric (one port), stopped afterwards."""
    fabric = small_fabric()
    sw = fabric.switch(name)
    switch = Bmv2Switch(
        sw.name,
        {1: veth[0]},
        sw.device_id,
        f"127.0.0.1:{free_port()}",
        thrift_port=free_port(),
        log_dir=log_dir,
    )
    switch.start()
    try:
        switch.wait_ready()
        yield switch
    finally:
        switch.stop()


@pytest.fixture(params=["t1-p0-s0", "t0-p0-r0"])
def bmv2(
    veth: tuple[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Bmv2Switch]:
    yield from running(request.param, veth, tmp_path)


@pytest.fixture()
def bmv2_leaf(veth: tuple[str, str], tmp_path: Path) -> Iterator[Bmv2Switch]:
    yield from running("t0-p0-r0", veth, tmp_path)


def test_push_to_bmv2_installs_the_pipeline_and_entries_once(
    bmv2: Bmv2Switch, build: tuple[P4Info, bytes]
) -> None:
    info, device_config = build
    fabric = small_fabric()
    tables = fabric_tables(fabric, switches=[bmv2.name])
    target = SwitchAddress(bmv2.name, bmv2.grpc_addr, bmv2.device_id)
    options = PushOptions(device_config=device_config)
    (first,) = push_fabric([target], info, tables, options)
    assert first.ok, first.summary()
    assert first.pipeline_set
    assert first.added == len([e for e in tables[bmv2.name].entries if not e.is_default])
    (second,) = push_fabric([target], info, tables, options)
    assert second.ok and second.changes == 0, second.summary()
    client = SwitchClient(
        bmv2.grpc_addr, bmv2.device_id, election_id=99, name=bmv2.name, p4info=info
    )
    client.connect()
    try:
        installed = read_installed(client, info)
    finally:
        client.close()
    assert sorted(map(str, installed)) == sorted(map(str, tables[bmv2.name].entries))


def test_a_changed_ecmp_group_is_rewritten_in_order(
    bmv2_leaf: Bmv2Switch, build: tuple[P4Info, bytes]
) -> None:
    """A leaf loses an uplink from its group (the member goes, the group shrinks), then gets it
    back: each push succeeds, and the next one finds nothing to do."""
    info, device_config = build
    fabric = small_fabric()
    bmv2 = bmv2_leaf
    full = fabric_tables(fabric, switches=[bmv2.name])[bmv2.name]
    group = next(e for e in full.entries if e.kind == GROUP)
    dropped = group.members[-1]
    shrunk = SwitchTables(
        full.switch,
        tuple(
            Entry.group_of(ECMP_SELECTOR, group.number, group.members[:-1]) if e == group else e
            for e in full.entries
            if not (e.kind == MEMBER and e.number == dropped)
        ),
    )
    target = SwitchAddress(bmv2.name, bmv2.grpc_addr, bmv2.device_id)
    options = PushOptions(device_config=device_config)
    for intended, changes in ((full, None), (shrunk, (0, 1, 1)), (full, (1, 1, 0))):
        (report,) = push_fabric([target], info, {bmv2.name: intended}, options)
        assert report.ok, report.summary()
        if changes is not None:
            assert (report.added, report.modified, report.deleted) == changes, report.summary()
        (again,) = push_fabric([target], info, {bmv2.name: intended}, options)
        assert again.ok and again.changes == 0, again.summary()
