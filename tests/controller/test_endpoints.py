"""Where mrc-ctl finds its switches (state file or flags) and how it reports bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller import cli
from controller.endpoints import EndpointsError, resolve
from controller.qos import OVERRIDES_FILE, QosError, QosOverrides, default_qos
from targets import state as testbed_state
from topologies import load_topology
from topologies.config import shipped_topology


def write_state(path: Path, topology: str, target: str = "model") -> None:
    testbed_state.TestbedState(
        topology=topology,
        target=target,
        switches={
            "t0-p0-r0": testbed_state.SwitchState(grpc="127.0.0.1:50001", device_id=1),
            "t1-p0-s0": testbed_state.SwitchState(grpc="127.0.0.1:50003", device_id=3),
        },
    ).save(path)


def test_state_file_gives_fabric_target_addresses_and_overrides_path(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    write_state(state, str(shipped_topology("small")), target="switchmodel")
    endpoints = resolve(state=state)
    assert endpoints.fabric.topology.name == "small"
    assert endpoints.target == "model"
    assert [(s.name, s.address, s.device_id) for s in endpoints.switches] == [
        ("t0-p0-r0", "127.0.0.1:50001", 1),
        ("t1-p0-s0", "127.0.0.1:50003", 3),
    ]
    assert endpoints.overrides_path == tmp_path / OVERRIDES_FILE
    assert [s.name for s in endpoints.select(["t1-p0-s0"])] == ["t1-p0-s0"]
    with pytest.raises(EndpointsError, match="no address for switch t0-p1-r0"):
        endpoints.select(["t0-p1-r0"])
    with pytest.raises(KeyError, match="no switch 't9'"):
        endpoints.select(["t9"])


def test_relative_topology_in_state_is_found_from_the_repository(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    write_state(state, "topologies/default.yaml")
    assert resolve(state=state).fabric.topology.name == "default"


def test_flags_give_addresses_with_device_ids_from_the_fabric(tmp_path: Path) -> None:
    endpoints = resolve(
        topo=str(shipped_topology("small")),
        switch_flags=["t1-p1-s1=127.0.0.1:6000", "t0-p0-r0=[::1]:6001"],
        target="bmv2",
        state=tmp_path / "absent.json",
    )
    assert endpoints.target == "bmv2"
    assert [(s.name, s.device_id) for s in endpoints.switches] == [("t0-p0-r0", 1), ("t1-p1-s1", 8)]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["nonsense"], "expected NAME=HOST:PORT"),
        (["t0-p0-r0=127.0.0.1"], "expected NAME=HOST:PORT"),
        (["t7-p0-r0=127.0.0.1:1"], "no switch 't7-p0-r0'"),
    ],
)
def test_bad_switch_flags_are_named(tmp_path: Path, flags: list[str], message: str) -> None:
    with pytest.raises(EndpointsError, match=message):
        resolve(topo=str(shipped_topology("small")), switch_flags=flags, state=tmp_path / "x")


def test_missing_state_file_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(EndpointsError, match="no running testbed.*--switch NAME=HOST:PORT"):
        resolve(state=tmp_path / "state.json")


def test_cli_usage_errors_exit_2_and_failures_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = ["--state", str(tmp_path / "none.json")]
    assert cli.main(["push", *state, "--switch", "t0-p0-r0=127.0.0.1:1"]) == 2
    assert "--switch needs --topo" in capsys.readouterr().err
    assert cli.main(["diff", *state]) == 1
    err = capsys.readouterr().err
    assert "no running testbed" in err and len(err.strip().splitlines()) <= 2
    topo = ["--topo", str(shipped_topology("small"))]
    assert cli.main(["show", *topo, *state, "t9-p0-r0", "--dry-run"]) == 2
    assert "no switch 't9-p0-r0'" in capsys.readouterr().err
    assert cli.main(["set-qos", *topo, *state, "t0-p0-r0", "--no-push"]) == 2
    assert "give --trim, --ecn" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        cli.main(["push", "--target", "tofino"])
    assert exited.value.code == 2


def test_set_qos_saves_without_a_switch_and_rejects_bad_thresholds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--topo", str(shipped_topology("small")), "--overrides", str(tmp_path / "q.json")]
    assert cli.main(["set-qos", *flags, "t0-p0-r0", "--trim", "9", "--no-push"]) == 0
    saved = QosOverrides.load(tmp_path / "q.json")
    default = default_qos(load_topology(shipped_topology("small")))
    # only the trim threshold changes; ECN is kept at its default
    assert saved.lookup("t0-p0-r0", 4) == default.with_(trim=9, trim_mode="threshold")
    assert cli.main(["set-qos", *flags, "t0-p0-r0", "--ecn", "-1", "--no-push"]) == 2
    assert "ecn threshold -1: expected 0..524287" in capsys.readouterr().err
    assert cli.main(["set-qos", *flags, "t0-p0-r0", "--trim", "lots", "--no-push"]) == 2
    assert "--trim lots: expected a number of packets or 'full'" in capsys.readouterr().err
    red = ["--ecn-mode", "red", "--ecn-max", "2", "--no-push"]
    assert cli.main(["set-qos", *flags, "t0-p0-r0", *red]) == 2
    assert "ecn_max 2: expected more than the ECN threshold" in capsys.readouterr().err
    args = ["--trim", "full", "--ecn-mode", "threshold", "--ecn", "5"]
    assert cli.main(["set-qos", *flags, "t0-p0-r0", "--port", "3", *args, "--no-push"]) == 0
    port3 = QosOverrides.load(tmp_path / "q.json").lookup("t0-p0-r0", 3)
    assert port3 is not None and (port3.trim_mode, port3.ecn_mode, port3.ecn) == (
        "full",
        "threshold",
        5,
    )
    (tmp_path / "bad.json").write_text('{"t0-p0-r0": {"x": {"trim": 1, "ecn": 1}}}')
    with pytest.raises(QosError, match=r"bad.json: 't0-p0-r0' port 'x'"):
        QosOverrides.load(tmp_path / "bad.json")
