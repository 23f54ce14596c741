"""The mrc-switch command line: one clear line for every mistake, and the launcher's argv."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from switchmodel.cli import build_parser
from targets.model import ModelSwitch, mrc_switch_command
from targets.process import SwitchConfigError


def run_switch(*args: str, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*mrc_switch_command(), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-i", "eth0"], "expected PORT@INTERFACE"),
        (["-i", "600@eth0"], "port 600 outside 0..510"),
        (["-i", "1@a", "-i", "1@b"], "port 1 given twice"),
        (["-i", "1@a", "-i", "2@a"], "interface 'a' given twice"),
        (["-i", "1@a", "--queue-depth", "0"], "expected a depth in packets"),
        (["-i", "1@a", "--port-rate-bps", "fast"], "expected a rate in bits per second"),
        (["-i", "1@a", "--port-rate-bps-of", "3=1000"], "port 3 is not one of the -i ports"),
        (["-i", "1@a", "--port-latency-us-of", "3=1"], "port 3 is not one of the -i ports"),
        (["-i", "1@a", "--port-latency-us", "-1"], "expected a latency >= 0"),
        (["-i", "1@a", "--grpc-addr", "nowhere"], "expected HOST:PORT"),
    ],
)
def test_bad_flags_are_named(args: list[str], needle: str) -> None:
    result = run_switch(*args)
    assert result.returncode == 2
    assert needle in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_interface_is_named() -> None:
    result = run_switch("-i", "1@smnosuch0", "--grpc-addr", "127.0.0.1:1")
    assert result.returncode == 1
    assert "interface 'smnosuch0' does not exist" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (raw socket on lo)")
def test_grpc_address_in_use_is_named() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        result = run_switch("-i", "1@lo", "--grpc-addr", address)
    assert result.returncode == 1
    assert f"cannot listen on {address}" in result.stderr
    assert "Traceback" not in result.stderr


def test_defaults_match_simple_switch_grpc_shape() -> None:
    args = build_parser().parse_args(["-i", "1@a"])
    assert args.grpc_addr == "127.0.0.1:9559"
    assert args.priority_queues == 2 and args.queue_depth == 64 and args.port_rate_bps == 0


def test_model_switch_command_line() -> None:
    switch = ModelSwitch(
        "t0-p0-r0",
        {2: "t0-p0-r0-eth2", 1: "t0-p0-r0-eth1"},
        device_id=1,
        grpc_addr="127.0.0.1:50001",
        rate_bps=100_000_000,
        queue_depth=64,
        port_rates={2: 10_000_000},
        port_latency_us={1: 2000.0, 2: 1000.0},
        mtu=4282,
        pcap_dir="caps",
        netns="smx",
    )
    argv = switch.command()
    assert argv[:4] == ["ip", "netns", "exec", "smx"]
    text = " ".join(argv)
    for part in (
        "-i 1@t0-p0-r0-eth1 -i 2@t0-p0-r0-eth2",
        "--device-id 1",
        "--grpc-addr 127.0.0.1:50001",
        "--priority-queues 2",
        "--port-rate-bps 100000000",
        "--port-rate-bps-of 2=10000000",
        "--port-latency-us-of 1=2000 --port-latency-us-of 2=1000",
        "--queue-depth 64",
        "--mtu 4282",
        "--pcap caps",
    ):
        assert part in text
    parsed = build_parser().parse_args(argv[4 + len(mrc_switch_command()) :])
    assert parsed.interface == [(1, "t0-p0-r0-eth1"), (2, "t0-p0-r0-eth2")]
    assert parsed.port_latency_us_of == [(1, 2000.0), (2, 1000.0)]


def test_model_switch_rejects_bad_options() -> None:
    with pytest.raises(SwitchConfigError, match="port_rates: port 9"):
        ModelSwitch("s", {1: "a"}, 1, "127.0.0.1:1", port_rates={9: 1})
    with pytest.raises(SwitchConfigError, match="log_level"):
        ModelSwitch("s", {1: "a"}, 1, "127.0.0.1:1", log_level="loud")


def test_module_entry_point_runs() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "switchmodel.cli", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0 and "PORT@IFACE" in result.stdout


def test_the_stats_file_is_rewritten_in_place(tmp_path: Path) -> None:
    """The stats file keeps its inode (no temporary file renamed over it ten times a second)
    and holds the latest figures as JSON."""
    import json
    import threading
    import time

    from switchmodel.cli import _write_stats
    from switchmodel.dataplane import DataPlane

    plane = DataPlane({})
    plane._served_late(0.123456789)
    path = tmp_path / "s.stats.json"
    stop = threading.Event()
    writer = threading.Thread(target=_write_stats, args=(plane, path, stop))
    writer.start()
    deadline = time.monotonic() + 5.0
    while not (path.exists() and path.stat().st_size) and time.monotonic() < deadline:
        time.sleep(0.01)
    inode = path.stat().st_ino
    time.sleep(0.35)
    stop.set()
    writer.join()
    assert path.stat().st_ino == inode
    assert not list(tmp_path.glob("*.tmp"))
    figures = json.loads(path.read_text())
    assert figures["service_lag_total_s"] == 0.123456789 and len(figures["windows"]) >= 3
