"""Pushing the fabric's tables to real mrc-switch processes over P4Runtime, and mrc-ctl on them."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from ctl_model import ModelFabric, requires_model
from google.protobuf import text_format

from controller import cli
from controller.client import P4RuntimeError, SwitchClient, SwitchUnreachable
from controller.counters import read_counters
from controller.entries import GROUP, MEMBER, Entry, fabric_tables
from controller.p4info import P4Info, default_p4info_path
from controller.push import PushOptions, SwitchAddress, push_fabric, read_installed
from controller.qos import QosOverrides
from p4src import contract
from p4src.contract import ECMP_SELECTOR, IPV6_ECMP, IPV6_LPM, MY_SID, PORT_QOS
from targets.lab import free_port

pytestmark = requires_model


@pytest.fixture(scope="module")
def info() -> P4Info:
    return P4Info.load()


def targets(model: ModelFabric) -> list[SwitchAddress]:
    return [SwitchAddress(n, p.address, p.device_id) for n, p in model.switches.items()]


def connect(model: ModelFabric, name: str, info: P4Info) -> SwitchClient:
    proc = model.switches[name]
    return SwitchClient(
        proc.address,
        proc.device_id,
        election_id=int(time.time() * 1000) + 7,
        timeout=5.0,
        name=name,
        p4info=info,
    ).connect()


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def push_all(model: ModelFabric, info: P4Info) -> list:  # type: ignore[type-arg]
    return push_fabric(targets(model), info, fabric_tables(model.fabric), PushOptions())


def test_push_installs_everything_then_a_second_push_changes_nothing(
    model_fabric: ModelFabric, info: P4Info
) -> None:
    intended = fabric_tables(model_fabric.fabric)
    first = push_all(model_fabric, info)
    assert [r.switch for r in first] == [s.name for s in model_fabric.fabric.switches]
    for report in first:
        assert report.ok, report.summary()
    # every switch now holds exactly its intended entries
    for name, tables in intended.items():
        client = connect(model_fabric, name, info)
        try:
            installed = read_installed(client, info)
        finally:
            client.close()
        assert sorted(map(str, installed)) == sorted(map(str, tables.entries))
    second = push_all(model_fabric, info)
    assert [r.changes for r in second] == [0] * len(second)
    assert all(r.ok and not r.pipeline_set for r in second)


def test_cli_push_reports_each_switch_and_is_idempotent(
    model_fabric: ModelFabric, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(["push", *model_fabric.state_flags()], capsys)
    assert code == 0
    code, out, _ = run_cli(["push", *model_fabric.state_flags()], capsys)
    assert code == 0
    for switch in model_fabric.fabric.switches:
        assert f"{switch.name}: +0 ~0 -0, 0 errors" in out
    assert "8 switches, 0 changes, 0 errors, 0 failed" in out


def test_diff_names_a_manually_changed_entry_and_push_repairs_it(
    model_fabric: ModelFabric, info: P4Info, capsys: pytest.CaptureFixture[str]
) -> None:
    push_all(model_fabric, info)
    flags = model_fabric.switch_flags()
    assert run_cli(["diff", *flags], capsys)[0] == 0
    name = "t1-p1-s0"
    route = next(
        e for e in fabric_tables(model_fabric.fabric)[name].by_table(IPV6_LPM) if not e.is_default
    )
    sid = fabric_tables(model_fabric.fabric)[name].by_table(MY_SID)[0]
    client = connect(model_fabric, name, info)
    try:
        client.delete([route.to_proto(info)])
        changed = Entry.make(
            MY_SID, dict(sid.match), contract.SRV6_END
        )  # uN SID turned into an End SID by hand
        client.modify([changed.to_proto(info)])
    finally:
        client.close()
    code, out, _ = run_cli(["diff", *flags], capsys)
    assert code == 1
    prefix = dict(route.match)[contract.DST_ADDR]
    assert f"{name}: 2 entries differ" in out
    assert f"+ ipv6_lpm [hdr.ipv6.dst_addr={prefix}]" in out
    assert "~ my_sid" in out and "(installed: srv6_end())" in out
    code, out, _ = run_cli(["push", *flags, name], capsys)
    assert code == 0 and f"{name}: +1 ~1 -0" in out
    assert run_cli(["diff", *flags], capsys)[0] == 0


def test_push_deletes_entries_that_are_not_intended(
    model_fabric: ModelFabric, info: P4Info
) -> None:
    push_all(model_fabric, info)
    stray = Entry.make(
        IPV6_LPM,
        {contract.DST_ADDR: "fcbb:bb00:ffff::/48"},
        contract.SET_NEXT_HOP,
        contract.params_of(contract.NextHopParams(1, "02:00:00:00:00:01", "02:00:00:00:00:02")),
    )
    client = connect(model_fabric, "t0-p0-r1", info)
    try:
        client.insert([stray.to_proto(info)])
    finally:
        client.close()
    reports = push_all(model_fabric, info)
    changed = {r.switch: (r.added, r.modified, r.deleted) for r in reports if r.changes}
    assert changed == {"t0-p0-r1": (0, 0, 1)}


def test_duplicate_insert_is_decoded_per_entry(model_fabric: ModelFabric, info: P4Info) -> None:
    push_all(model_fabric, info)
    tables = fabric_tables(model_fabric.fabric)["t0-p1-r0"]
    route = next(e for e in tables.by_table(IPV6_LPM) if not e.is_default)
    fresh = Entry.make(
        IPV6_LPM,
        {contract.DST_ADDR: "fcbb:bb00:eeee::/48"},
        route.action,
        dict(route.params),
    )
    client = connect(model_fabric, "t0-p1-r0", info)
    try:
        with pytest.raises(P4RuntimeError) as caught:
            client.insert([route.to_proto(info), fresh.to_proto(info)])
        client.delete([fresh.to_proto(info)])
    finally:
        client.close()
    error = caught.value
    assert error.switch == "t0-p1-r0"
    assert len(error.errors) == 1  # the fresh entry went in, the duplicate did not
    only = error.errors[0]
    assert only.index == 0
    assert only.code_name == "ALREADY_EXISTS"
    assert only.update_type == "INSERT"
    assert dict(route.match)[contract.DST_ADDR] in only.entry
    assert contract.SET_NEXT_HOP in only.entry
    assert "ALREADY_EXISTS" in str(error)


def test_a_large_refused_batch_still_names_every_entry(
    model_fabric: ModelFabric, info: P4Info
) -> None:
    push_all(model_fabric, info)
    route = next(
        e
        for e in fabric_tables(model_fabric.fabric)["t1-p1-s1"].by_table(IPV6_LPM)
        if not e.is_default
    )
    absent = [
        Entry.make(
            IPV6_LPM,
            {contract.DST_ADDR: f"fcbb:bb00:e{i:03x}::/48"},
            route.action,
            dict(route.params),
        ).to_proto(info)
        for i in range(400)
    ]
    client = connect(model_fabric, "t1-p1-s1", info)
    try:
        with pytest.raises(P4RuntimeError) as caught:
            client.delete(absent)  # none of them is installed
    finally:
        client.close()
    assert len(caught.value.errors) == 400
    assert {e.code_name for e in caught.value.errors} == {"NOT_FOUND"}
    assert [e.index for e in caught.value.errors] == list(range(400))


def test_counters_are_read_per_port_and_drop_reason(
    model_fabric: ModelFabric, info: P4Info, capsys: pytest.CaptureFixture[str]
) -> None:
    push_all(model_fabric, info)
    switch = model_fabric.fabric.switch("t0-p0-r0")
    client = connect(model_fabric, switch.name, info)
    try:
        counters = read_counters(client, [p.number for p in switch.ports])
        depths = client.read_register(contract.PORT_QDEPTH)
    finally:
        client.close()
    assert [row.port for row in counters.ports] == [p.number for p in switch.ports]
    assert all(row.rx_packets == 0 and row.trimmed == 0 for row in counters.ports)  # no traffic
    assert counters.drops == {}
    assert depths and set(depths) <= set(range(512)) and set(depths.values()) == {0}
    code, out, _ = run_cli(["counters", *model_fabric.state_flags(), switch.name], capsys)
    assert code == 0
    assert "t0-p0-r0 counters" in out and "t1-p0-s0" in out and "drops:" in out


def test_show_prints_prefixes_macs_ports_and_action_names(
    model_fabric: ModelFabric, info: P4Info, capsys: pytest.CaptureFixture[str]
) -> None:
    push_all(model_fabric, info)
    switch = model_fabric.fabric.switch("t0-p0-r0")
    code, out, _ = run_cli(["show", *model_fabric.state_flags(), switch.name], capsys)
    assert code == 0
    up = switch.port_to("t1-p0-s0")
    assert f"{model_fabric.fabric.switch('t1-p0-s0').usid_prefix}" in out
    assert f"port={up.number} (t1-p0-s0)" in out and up.peer_mac in out
    actions = (contract.USID_UN, contract.SRV6_END, contract.DROP_NO_ROUTE)
    assert all(a.split(".")[-1] in out for a in actions)
    code, out, _ = run_cli(
        ["show", *model_fabric.state_flags(), switch.name, "--table", contract.PORT_QOS], capsys
    )
    short = {a: a.split(".")[-1] for a in (contract.SET_PORT_QOS, contract.SET_NEXT_HOP)}
    assert code == 0 and short[contract.SET_PORT_QOS] in out
    assert short[contract.SET_NEXT_HOP] not in out
    # the ECMP group, its members and the routes pointing at it
    code, out, _ = run_cli(
        ["show", *model_fabric.state_flags(), switch.name, "--table", "ecmp_selector"], capsys
    )
    assert code == 0 and "member 3" in out and "group 1" in out and "members 3, 4" in out
    code, out, _ = run_cli(
        ["show", *model_fabric.state_flags(), switch.name, "--table", "ipv6_ecmp"], capsys
    )
    assert code == 0 and "fcbb:bb00:c02::/48" in out and "group 1" in out


def test_diff_and_push_cover_the_ecmp_groups(
    model_fabric: ModelFabric, info: P4Info, capsys: pytest.CaptureFixture[str]
) -> None:
    """A leaf whose group lost a member and whose ECMP routes were deleted by hand: diff names
    them, push writes them back in an order the switch accepts, and nothing differs after."""
    push_all(model_fabric, info)
    flags = model_fabric.switch_flags()
    name = "t0-p1-r0"
    intended = fabric_tables(model_fabric.fabric)[name]
    group = next(e for e in intended.by_table(ECMP_SELECTOR) if e.kind == GROUP)
    last = next(e for e in intended.by_table(ECMP_SELECTOR) if e.number == group.members[-1])
    assert last.kind == MEMBER
    routes = intended.by_table(IPV6_ECMP)
    client = connect(model_fabric, name, info)
    try:
        client.delete([r.to_proto(info) for r in routes])
        client.modify(
            [Entry.group_of(ECMP_SELECTOR, group.number, group.members[:-1]).to_proto(info)]
        )
        client.delete([last.to_proto(info)])
    finally:
        client.close()
    code, out, _ = run_cli(["diff", *flags, name], capsys)
    assert code == 1
    assert f"{name}: {len(routes) + 2} entries differ" in out
    assert f"+ {last}" in out and f"~ {group}  (installed: members" in out
    assert f"+ {routes[0]}" in out
    code, out, _ = run_cli(["push", *flags, name], capsys)
    assert code == 0 and f"{name}: +{len(routes) + 1} ~1 -0, 0 errors" in out
    assert run_cli(["diff", *flags], capsys)[0] == 0


def test_set_qos_is_persisted_and_kept_by_later_pushes(
    model_fabric: ModelFabric, info: P4Info, capsys: pytest.CaptureFixture[str]
) -> None:
    push_all(model_fabric, info)
    flags = model_fabric.state_flags()
    code, out, _ = run_cli(
        ["set-qos", *flags, "t1-p0-s1", "--port", "2", "--trim", "7", "--ecn", "3"], capsys
    )
    assert code == 0 and "t1-p0-s1: +0 ~1 -0" in out
    overrides = QosOverrides.load(model_fabric.directory / "qos-overrides.json")
    qos = overrides.lookup("t1-p0-s1", 2)
    assert qos is not None and (qos.trim, qos.ecn) == (7, 3)
    code, out, _ = run_cli(["push", *flags], capsys)
    assert code == 0 and "0 changes" in out
    client = connect(model_fabric, "t1-p0-s1", info)
    try:
        entries = [Entry.from_proto(info, e) for e in client.read_table_entries(PORT_QOS)]
    finally:
        client.close()
    port2 = next(e for e in entries if dict(e.match)[contract.EGRESS_SPEC] == "2")
    assert contract.PortQosParams(**dict(port2.params))[:2] == ("7", "3")
    # back to the defaults for the tests that follow
    (model_fabric.directory / "qos-overrides.json").unlink()
    assert run_cli(["push", *flags, "t1-p0-s1"], capsys)[0] == 0


def test_set_qos_rejects_a_port_the_switch_does_not_have(
    model_fabric: ModelFabric, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(
        ["set-qos", *model_fabric.state_flags(), "t1-p0-s1", "--port", "9", "--trim", "1"],
        capsys,
    )
    assert code == 2 and "--port 9" in err and "t1-p0-s1 has ports 1, 2" in err


def test_restarted_switch_gets_everything_reinstalled(
    model_fabric: ModelFabric, info: P4Info
) -> None:
    push_all(model_fabric, info)
    model_fabric.restart("t0-p1-r1")
    reports = {r.switch: r for r in push_all(model_fabric, info)}
    restarted = reports.pop("t0-p1-r1")
    expected = [e for e in fabric_tables(model_fabric.fabric)["t0-p1-r1"].entries]
    assert restarted.pipeline_set
    assert restarted.added == len([e for e in expected if not e.is_default])
    assert restarted.ok
    assert all(r.changes == 0 for r in reports.values())


def test_watch_restores_a_restarted_and_an_emptied_switch(
    model_fabric: ModelFabric, info: P4Info, capsys: pytest.CaptureFixture[str]
) -> None:
    log_path = model_fabric.directory / "watch.log"
    with open(log_path, "wb") as log:
        watcher = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "controller.cli",
                "watch",
                *model_fabric.state_flags(),
                "--interval",
                "0.2",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_in_sync(model_fabric, capsys)
        model_fabric.restart("t1-p0-s0")
        wait_in_sync(model_fabric, capsys)
        # empty another switch's tables by hand
        client = connect(model_fabric, "t0-p0-r0", info)
        try:
            client.delete(
                [e.to_proto(info) for e in read_installed(client, info) if not e.is_default]
            )
        finally:
            client.close()
        wait_in_sync(model_fabric, capsys)
        # an override saved without pushing is applied by watch (diff reads the same file)
        flags = model_fabric.state_flags()
        assert run_cli(["set-qos", *flags, "t0-p1-r1", "--trim", "5", "--no-push"], capsys)[0] == 0
        wait_in_sync(model_fabric, capsys)
        (model_fabric.directory / "qos-overrides.json").unlink()
        wait_in_sync(model_fabric, capsys)
    finally:
        watcher.terminate()
        code = watcher.wait(timeout=15)
    text = log_path.read_text()
    assert code == 0, text
    assert "t1-p0-s0: connected -> pipeline set" in text
    assert "t0-p0-r0: " in text and "entries differ" in text
    assert "t0-p1-r1: 4 entries differ -> +0 ~4 -0" in text  # the override, then back
    assert "watch stopped" in text


def wait_in_sync(
    model: ModelFabric, capsys: pytest.CaptureFixture[str], limit: float = 30.0
) -> None:
    """Poll ``mrc-ctl diff`` until every switch is in sync (fails after ``limit`` seconds)."""
    deadline = time.monotonic() + limit
    while True:
        code, out, err = run_cli(["diff", *model.state_flags(), "--timeout", "2"], capsys)
        if code == 0:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"switches not restored by watch:\n{out}{err}")
        time.sleep(0.2)


def test_unreachable_switch_is_named_with_its_address(
    model_fabric: ModelFabric, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = f"127.0.0.1:{free_port()}"
    flags = ["--topo", str(model_fabric.topo_path), "--switch", f"t0-p0-r0={dead}"]
    code, out, _ = run_cli(["push", *flags, "--timeout", "0.5"], capsys)
    assert code == 1
    assert f"t0-p0-r0: FAILED: switch t0-p0-r0 at {dead} is unreachable" in out
    code, out, _ = run_cli(["diff", *flags, "--timeout", "0.5"], capsys)
    assert code == 1
    assert (
        out.strip()
        == f"t0-p0-r0: cannot compare: switch t0-p0-r0 at {dead} is unreachable: "
        + ("no P4Runtime server answered within 0.5 s")
    )
    with pytest.raises(SwitchUnreachable) as caught:
        SwitchClient(dead, 1, timeout=0.5, name="t0-p0-r0").connect()
    assert caught.value.address == dead and "t0-p0-r0" in str(caught.value)


def test_p4info_lacking_a_table_is_reported_by_name(
    model_fabric: ModelFabric, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proto = P4Info.load().proto
    kept = [t for t in proto.tables if t.preamble.name != contract.PORT_QOS]
    del proto.tables[:]
    proto.tables.extend(kept)
    path = tmp_path / "lacking.p4info.txtpb"
    path.write_text(text_format.MessageToString(proto))
    code, _, err = run_cli(["push", *model_fabric.state_flags(), "--p4info", str(path)], capsys)
    assert code == 1
    assert "lacks table MrcIngress.port_qos" in err
    assert "Traceback" not in err


def test_bad_topology_gives_the_fabric_models_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("planes: 0\nracks: 2\nspines_per_plane: 1\nhosts_per_rack: 1\n")
    code, _, err = run_cli(["push", "--topo", str(bad), "--dry-run"], capsys)
    assert code == 1
    assert f"{bad}: field 'planes' = 0" in err and "Traceback" not in err


def test_dry_run_prints_the_entries_without_connecting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    topo = str(default_p4info_path().parent.parent / "topologies" / "small.yaml")
    code, out, _ = run_cli(["push", "--topo", topo, "--dry-run", "t1-p1-s1"], capsys)
    assert code == 0
    assert "t1-p1-s1 (intended)" in out and "fcbb:bb00:1801::/48" in out


def test_shell_without_its_environment_says_how_to_make_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MRC_SHELL_PYTHON", str(tmp_path / "no-python"))
    with pytest.raises(cli.Failure, match=r"no-python: no p4runtime-shell environment .*install"):
        cli.shell_python()


def test_shell_runs_p4runtime_shell_on_a_switch(
    model_fabric: ModelFabric, info: P4Info, capfd: pytest.CaptureFixture[str]
) -> None:
    try:
        cli.shell_python()  # p4runtime-shell runs in an environment of its own
    except cli.Failure as exc:
        pytest.skip(str(exc))
    push_all(model_fabric, info)
    code = cli.main(
        [
            "shell",
            *model_fabric.state_flags(),
            "t0-p0-r0",
            "-c",
            "print('entries', len(list(table_entry['MrcIngress.ipv6_lpm'].read())))",
        ]
    )
    out, _ = capfd.readouterr()
    routes = [e for e in fabric_tables(model_fabric.fabric)["t0-p0-r0"].by_table(IPV6_LPM)]
    assert code == 0
    assert f"entries {len([e for e in routes if not e.is_default])}" in out


def test_wrong_device_id_and_duplicate_election_id_are_refused_by_name(
    model_fabric: ModelFabric,
) -> None:
    proc = model_fabric.switches["t0-p1-r1"]
    with pytest.raises(P4RuntimeError, match=r"t0-p1-r1: arbitration for device id 99 failed"):
        SwitchClient(proc.address, 99, election_id=3, timeout=5.0, name="t0-p1-r1").connect()
    first = SwitchClient(proc.address, proc.device_id, election_id=4, name="t0-p1-r1").connect()
    try:
        with pytest.raises(P4RuntimeError, match="INVALID_ARGUMENT"):
            SwitchClient(proc.address, proc.device_id, election_id=4, name="t0-p1-r1").connect()
    finally:
        first.close()
