"""The BMv2 target, the factory of fabric switches and P4 compilation: command lines, queue
settings and p4c's errors everywhere; start/stop where BMv2 exists."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from host.agent.pacing import PREAMBLE_AND_GAP
from host.transport.wire import DATA_HEADER_LEN
from p4src.compile import P4BuildError, ToolMissing, compile_p4
from p4src.contract import largest_data_packet
from targets.bmv2 import CONTROL_BYTES, Bmv2Switch, missing_tools, queue_rate_pps
from targets.factory import GRPC_BASE_PORT, PORT_SPEEDUP, THRIFT_BASE_PORT, fabric_switch
from targets.lab import NetnsLab, free_port
from targets.model import ModelSwitch
from targets.process import SwitchConfigError, SwitchStartError
from topologies import Fabric
from topologies.config import CONTROL_FRAME_BYTES
from topologies.operating import header_queue_depth


def switch_for(fabric: Fabric, name: str, tmp_path: Path, **kwargs: object) -> Bmv2Switch:
    sw = fabric.switch(name)
    return Bmv2Switch(
        sw.name,
        {p.number: p.intf for p in sw.ports},
        sw.device_id,
        "127.0.0.1:50001",
        thrift_port=9091,
        log_dir=tmp_path,
        **kwargs,  # type: ignore[arg-type]
    )


def test_command_line_has_ports_device_and_target_options(fabric: Fabric, tmp_path: Path) -> None:
    sw = fabric.switch("t0-p0-r0")
    switch = switch_for(fabric, sw.name, tmp_path, pcap_dir=tmp_path / "pcap")
    argv = switch.command()
    assert argv[0] == "simple_switch_grpc"
    general, target = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    for port in sw.ports:
        assert f"{port.number}@{port.intf}" in general
        assert general[general.index(f"{port.number}@{port.intf}") - 1] == "-i"
    assert general[general.index("--device-id") + 1] == str(sw.device_id)
    assert general[general.index("--thrift-port") + 1] == "9091"
    assert general[general.index("--pcap") + 1] == str(tmp_path / "pcap")
    assert general[general.index("--log-file") + 1] == str(switch.bmv2_log_path)
    assert "--no-p4" in general
    assert target[target.index("--grpc-server-addr") + 1] == "127.0.0.1:50001"
    assert target[target.index("--priority-queues") + 1] == "2"
    assert "--cpu-port" not in target


def test_json_replaces_no_p4_and_cpu_port_is_a_target_option(
    fabric: Fabric, tmp_path: Path
) -> None:
    switch = switch_for(fabric, "t1-p1-s0", tmp_path, json_path=tmp_path / "x.json", cpu_port=64)
    argv = switch.command()
    general, target = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    assert "--no-p4" not in argv
    assert general[-1] == str(tmp_path / "x.json")
    assert target[target.index("--cpu-port") + 1] == "64"


def test_queue_commands_per_port(fabric: Fabric, tmp_path: Path) -> None:
    topo = fabric.topology
    rate = int(topo.link_rate_mbps * 1_000_000)
    control_depth = header_queue_depth(topo.queue_depth, topo.link_mtu + 14, CONTROL_FRAME_BYTES)
    switch = switch_for(
        fabric,
        "t0-p0-r1",
        tmp_path,
        rate_bps=rate,
        queue_depth=topo.queue_depth,
        control_queue_depth=control_depth,
        mtu=topo.link_mtu,
    )
    data_pps = queue_rate_pps(rate, topo.link_mtu)
    control_pps = queue_rate_pps(rate, CONTROL_BYTES)
    # the high-priority queue holds twice the data queue's bytes of control-size packets
    assert control_depth * CONTROL_FRAME_BYTES >= 2 * topo.queue_depth * (topo.link_mtu + 14)
    expected = []
    for port in fabric.switch("t0-p0-r1").ports:
        expected += [
            f"set_queue_depth {topo.queue_depth} {port.number} 0",
            f"set_queue_depth {control_depth} {port.number} 1",
            f"set_queue_rate {data_pps} {port.number} 0",
            f"set_queue_rate {control_pps} {port.number} 1",
        ]
    assert switch.queue_commands() == expected
    assert control_pps > data_pps
    assert switch_for(fabric, "t0-p0-r1", tmp_path).queue_commands() == []


@pytest.mark.parametrize("target", ["bmv2", "model"])
def test_factory_maps_a_fabric_switch_to_its_process(fabric: Fabric, target: str) -> None:
    """One mapping for both targets: fabric ports and device id, the topology's shaping, one
    gRPC port base (and BMv2's Thrift port base)."""
    sw = fabric.switch("t1-p1-s0")
    topo = fabric.topology
    process = fabric_switch(target, fabric, sw.name)
    assert isinstance(process, Bmv2Switch if target == "bmv2" else ModelSwitch)
    assert process.name == sw.name and process.device_id == sw.device_id
    assert process.ports == {p.number: p.intf for p in sw.ports}
    assert process.grpc_addr == f"127.0.0.1:{GRPC_BASE_PORT + sw.device_id}"
    # shaped a little faster than the hosts' NICs pace (targets.factory.PORT_SPEEDUP)
    assert process.rate_bps == int(topo.link_rate_mbps * 1_000_000 * (1 + PORT_SPEEDUP))
    assert process.rate_bps > topo.link_rate_mbps * 1_000_000
    assert (process.queue_depth, process.mtu, process.priority_queues) == (
        topo.queue_depth,
        topo.link_mtu,
        2,
    )
    # headers, ACKs and NACKs get the reference's bytes, in control-size packets
    assert process.control_queue_depth == header_queue_depth(
        topo.queue_depth, topo.link_mtu + 14, CONTROL_FRAME_BYTES
    )
    if isinstance(process, Bmv2Switch):
        assert process.thrift_port == THRIFT_BASE_PORT + sw.device_id
    bench = fabric_switch(target, fabric, sw.name, ports={1: "x1"}, shaped=False, quiet=True)
    assert bench.ports == {1: "x1"} and bench.rate_bps is None
    with pytest.raises(ValueError, match="target 'tofino'"):
        fabric_switch("tofino", fabric, sw.name)


def test_data_queue_keeps_ahead_of_the_nics_full_data_frames(fabric: Fabric) -> None:
    """BMv2 paces in packets a second: its data queue is paced for the largest packet the NICs
    send, not the interface MTU, so that it sends their full data frames (a NIC paces them with
    preamble and gap) faster than a NIC by the ports' speed-up, give or take the rounding."""
    topo = fabric.topology
    process = fabric_switch("bmv2", fabric, "t0-p0-r0")
    assert isinstance(process, Bmv2Switch) and process.rate_bps is not None
    assert process.frame_mtu == largest_data_packet(topo.mtu) < topo.link_mtu
    port_pps = queue_rate_pps(process.rate_bps, process.frame_mtu)
    nic_pps = topo.link_rate_mbps * 1e6 / (8 * (DATA_HEADER_LEN + topo.mtu + PREAMBLE_AND_GAP))
    assert port_pps / nic_pps >= 1 + PORT_SPEEDUP * 0.8
    # the MTU (an SRH of four segments no NIC sends) left 0.6 % of the 2 %
    mtu_pps = process.rate_bps / (8 * (topo.link_mtu + 18))
    assert mtu_pps / nic_pps < 1 + PORT_SPEEDUP / 2
    # a smaller MTU than that packet is what is paced for
    small = fabric_switch("bmv2", fabric, "t0-p0-r0", mtu=1500)
    assert isinstance(small, Bmv2Switch) and small.frame_mtu == 1500


def test_queue_rate_is_the_rate_asked_rounded_up_to_a_whole_packet() -> None:
    for rate, mtu in [
        (100_000_000, 1500),
        (100_000_000, 4200),
        (10_000, 9000),
        (1_000_000_000, 64),
        (479_400, 4272),  # 0.47 Mb/s with the ports' 2 % speed-up: 13.98 packets a second
    ]:
        pps = queue_rate_pps(rate, mtu)
        frame_bits = 8 * (mtu + 18)
        assert pps >= 1
        assert pps * frame_bits >= rate > (pps - 1) * frame_bits  # never slower than asked
    assert queue_rate_pps(479_400, 4272) == 14
    with pytest.raises(ValueError, match="expected positive"):
        queue_rate_pps(0, 1500)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"thrift_port": 0}, "thrift_port 0"),
        ({"cpu_port": 1}, "cpu_port 1"),
        ({"log_level": "loud"}, "log_level 'loud'"),
        ({"priority_queues": 0}, "priority_queues 0"),
        ({"rate_bps": -1}, "rate_bps -1"),
        ({"mtu": 10}, "mtu 10"),
        ({"grpc_addr": "localhost"}, "grpc_addr 'localhost'"),
        ({"ports": {0: "x"}}, "port 0"),
        ({"ports": {1: "a-name-longer-than-15"}}, "interface"),
    ],
)
def test_bad_configuration_names_the_input(change: dict[str, object], message: str) -> None:
    args: dict[str, object] = {
        "name": "s",
        "ports": {1: "s-eth1", 2: "s-eth2"},
        "device_id": 1,
        "grpc_addr": "127.0.0.1:50001",
        "thrift_port": 9091,
    }
    args.update(change)
    with pytest.raises(SwitchConfigError, match=message):
        Bmv2Switch(**args)  # type: ignore[arg-type]


def test_switch_without_data_plane_ports_serves_only_p4runtime() -> None:
    """No ports is a valid switch (simple_switch_grpc runs with none): no ``-i`` at all."""
    switch = Bmv2Switch("s", {}, 1, "127.0.0.1:50001", thrift_port=9091, rate_bps=10**8)
    assert switch.ports == {}
    assert "-i" not in switch.command()
    assert switch.queue_commands() == []


def test_compile_without_p4c_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with no p4c on it
    with pytest.raises(ToolMissing, match="p4c is not on PATH"):
        compile_p4(tmp_path / "build")


def test_compile_errors_carry_p4cs_output(tmp_path: Path) -> None:
    if shutil.which("p4c") is None:
        pytest.skip("p4c is not on PATH")
    bad = tmp_path / "bad.p4"
    bad.write_text("#include <core.p4>\ncontrol C() { apply { undefined_thing(); } }\n")
    with pytest.raises(P4BuildError, match="undefined_thing"):
        compile_p4(tmp_path / "build", source=bad)


def test_missing_executable_fails_with_a_clear_error(fabric: Fabric, tmp_path: Path) -> None:
    switch = switch_for(fabric, "t0-p0-r0", tmp_path, executable=str(tmp_path / "no-such-switch"))
    with pytest.raises(SwitchStartError, match="cannot run"):
        switch.start()
    assert not switch.alive


def test_process_that_exits_reports_its_log(tmp_path: Path) -> None:
    """The launcher machinery with a stand-in program that prints and exits."""
    script = tmp_path / "fake_switch"
    script.write_text('#!/bin/sh\necho "fake switch: cannot open interface $2" >&2\nexit 3\n')
    script.chmod(0o755)
    switch = Bmv2Switch(
        "fake", {1: "fake-eth1"}, 1, "127.0.0.1:1", thrift_port=9, log_dir=tmp_path,
        executable=str(script),
    )  # fmt: skip
    switch.start()
    with pytest.raises(SwitchStartError) as info:
        switch.wait_ready(timeout=5.0)
    assert "exited with status 3" in str(info.value)
    assert "cannot open interface 1@fake-eth1" in str(info.value)
    switch.stop()
    assert not switch.alive


needs_bmv2 = pytest.mark.skipif(
    bool(missing_tools()),
    reason=f"BMv2 tests need {', '.join(missing_tools()) or 'nothing'} on PATH",
)


@pytest.fixture
def veth_end() -> Iterator[str]:
    """One end of a veth pair of this test (name prefix dpb), removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("creating an interface needs root")
    name = f"dpbt{os.getpid() % 100000}"
    with NetnsLab() as lab:
        lab.add_veth(name, f"{name}p")
        yield name


@pytest.mark.bmv2
@needs_bmv2
def test_bmv2_starts_serves_grpc_and_stops(tmp_path: Path, veth_end: str) -> None:
    switch = Bmv2Switch(
        "dpbt", {1: veth_end}, 1, f"127.0.0.1:{free_port()}", thrift_port=free_port(),
        rate_bps=10_000_000, queue_depth=16, log_dir=tmp_path,
    )  # fmt: skip
    switch.start()
    try:
        switch.wait_ready(timeout=20.0)
        assert switch.alive and switch.pid
    finally:
        switch.stop()
    assert not switch.alive
