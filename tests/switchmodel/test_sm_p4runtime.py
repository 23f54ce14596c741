"""The switchmodel's P4Runtime service over real gRPC (in-process server, no data path sockets):
arbitration, pipeline config, per-update write errors, reads, and p4runtime-shell driving it."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from pathlib import Path

import grpc
import pytest
from dataplane.packets import mrc_frame
from google.protobuf import text_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.switch import InProcessSwitch

from controller.cli import Failure, shell_python
from controller.client import P4RuntimeError, SwitchClient
from controller.p4info import P4Info, default_p4info_path
from p4src import contract
from p4src.proto import p4i, p4r, p4r_grpc
from p4src.proto import rpc_code as code_pb2
from p4src.proto import rpc_status as status_pb2
from switchmodel.pipeline import Forward, egress, ingress
from switchmodel.runtime import RuntimeStatus, SwitchRuntime, TargetSlot

DEVICE = 7
INFO = P4Info.load()
LPM = contract.IPV6_LPM
SID = contract.MY_SID
QOS = contract.PORT_QOS
DST = contract.DST_ADDR


@pytest.fixture
def device_id() -> int:
    """The in-process switch of these tests serves device id :data:`DEVICE`."""
    return DEVICE


class RawStream:
    """A StreamChannel driven by hand, to see every arbitration update."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self.stub = p4r_grpc.P4RuntimeStub(self.channel)
        self.requests: queue.Queue[p4r.StreamMessageRequest | None] = queue.Queue()
        self.responses: queue.Queue[p4r.StreamMessageResponse | grpc.RpcError] = queue.Queue()
        self.call = self.stub.StreamChannel(iter(self.requests.get, None))
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        try:
            for response in self.call:
                self.responses.put(response)
        except grpc.RpcError as exc:
            self.responses.put(exc)

    def arbitrate(self, election: int | None, device: int = DEVICE) -> None:
        request = p4r.StreamMessageRequest()
        request.arbitration.device_id = device
        if election is not None:
            request.arbitration.election_id.low = election
        self.requests.put(request)

    def next(self) -> p4r.StreamMessageResponse | grpc.RpcError:
        return self.responses.get(timeout=5)

    def close(self) -> None:
        self.requests.put(None)
        self.call.cancel()
        self.channel.close()


def entry(prefix: str, port: int) -> p4r.TableEntry:
    return INFO.table_entry(
        LPM,
        {DST: prefix},
        contract.SET_NEXT_HOP,
        contract.params_of(contract.NextHopParams(port, "02:00:00:00:00:01", "02:00:00:00:00:02")),
    )


def update(kind: int, table_entry: p4r.TableEntry) -> p4r.Update:
    u = p4r.Update(type=kind)
    u.entity.table_entry.CopyFrom(table_entry)
    return u


# -- capabilities and arbitration ------------------------------------------------------------


def test_capabilities(switch: InProcessSwitch) -> None:
    with grpc.insecure_channel(switch.address) as channel:
        reply = p4r_grpc.P4RuntimeStub(channel).Capabilities(p4r.CapabilitiesRequest(), timeout=5)
    assert reply.p4runtime_api_version.startswith("1.")


def test_arbitration_primary_backup_and_failover(switch: InProcessSwitch) -> None:
    first, second = RawStream(switch.address), RawStream(switch.address)
    try:
        first.arbitrate(5)
        reply = first.next()
        assert isinstance(reply, p4r.StreamMessageResponse)
        assert reply.arbitration.status.code == code_pb2.OK
        assert reply.arbitration.election_id.low == 5
        second.arbitrate(3)
        reply = second.next()
        assert isinstance(reply, p4r.StreamMessageResponse)
        assert reply.arbitration.status.code == code_pb2.ALREADY_EXISTS
        assert reply.arbitration.election_id.low == 5  # the primary's election id
        first.close()  # the primary leaves: the backup is told it is primary now
        reply = second.next()
        assert isinstance(reply, p4r.StreamMessageResponse)
        assert reply.arbitration.status.code == code_pb2.OK
        assert reply.arbitration.election_id.low == 3
    finally:
        second.close()


def test_higher_election_id_takes_over_and_old_primary_is_told(switch: InProcessSwitch) -> None:
    old, new = RawStream(switch.address), RawStream(switch.address)
    try:
        old.arbitrate(1)
        assert old.next().arbitration.status.code == code_pb2.OK  # type: ignore[union-attr]
        new.arbitrate(2)
        assert new.next().arbitration.status.code == code_pb2.OK  # type: ignore[union-attr]
        demoted = old.next()
        assert demoted.arbitration.status.code == code_pb2.ALREADY_EXISTS  # type: ignore[union-attr]
    finally:
        old.close()
        new.close()


def test_duplicate_election_id_and_wrong_device_are_refused(switch: InProcessSwitch) -> None:
    first, dup, wrong = (RawStream(switch.address) for _ in range(3))
    try:
        first.arbitrate(4)
        assert first.next().arbitration.status.code == code_pb2.OK  # type: ignore[union-attr]
        dup.arbitrate(4)
        error = dup.next()
        assert isinstance(error, grpc.RpcError)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        wrong.arbitrate(9, device=DEVICE + 1)
        error = wrong.next()
        assert isinstance(error, grpc.RpcError)
        assert error.code() == grpc.StatusCode.NOT_FOUND
        assert str(DEVICE + 1) in error.details()
    finally:
        for stream in (first, dup, wrong):
            stream.close()


def test_backup_write_is_permission_denied(switch: InProcessSwitch, client: SwitchClient) -> None:
    backup = SwitchClient(switch.address, DEVICE, election_id=2, p4info=INFO).connect()
    try:
        assert client.is_primary and not backup.is_primary
        with pytest.raises(P4RuntimeError) as caught:
            backup.insert([entry("fcbb:bb00:100::/48", 1)])
        assert caught.value.code == "PERMISSION_DENIED"
        with pytest.raises(P4RuntimeError) as caught:
            backup.set_pipeline(INFO)
        assert caught.value.code == "PERMISSION_DENIED"
        assert backup.read_table_entries() == []  # reads are open to backups
    finally:
        backup.close()


def test_wrong_device_id_on_write_is_not_found(
    switch: InProcessSwitch, client: SwitchClient
) -> None:
    request = p4r.WriteRequest(device_id=DEVICE + 1)
    request.election_id.low = 10
    request.updates.append(update(p4r.Update.INSERT, entry("fcbb:bb00:100::/48", 1)))
    with grpc.insecure_channel(switch.address) as channel, pytest.raises(grpc.RpcError) as caught:
        p4r_grpc.P4RuntimeStub(channel).Write(request, timeout=5)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


# -- pipeline config -------------------------------------------------------------------------


def _without(kind: str, name: str) -> p4i.P4Info:
    info = p4i.P4Info()
    info.CopyFrom(INFO.proto)
    items = getattr(info, kind)
    keep = [item for item in items if item.preamble.name != name]
    del items[:]
    items.extend(keep)
    return info


def _set_config(
    switch: InProcessSwitch, info: p4i.P4Info | None, action: int, election: int = 10
) -> None:
    request = p4r.SetForwardingPipelineConfigRequest(device_id=DEVICE, action=action)
    request.election_id.low = election
    if info is not None:
        request.config.p4info.CopyFrom(info)
        request.config.cookie.cookie = 42
    with grpc.insecure_channel(switch.address) as channel:
        p4r_grpc.P4RuntimeStub(channel).SetForwardingPipelineConfig(request, timeout=5)


def _get_config(switch: InProcessSwitch) -> p4r.ForwardingPipelineConfig:
    request = p4r.GetForwardingPipelineConfigRequest(device_id=DEVICE)
    with grpc.insecure_channel(switch.address) as channel:
        return (
            p4r_grpc.P4RuntimeStub(channel).GetForwardingPipelineConfig(request, timeout=5).config
        )


def test_pipeline_starts_empty_and_writes_need_one(switch: InProcessSwitch) -> None:
    with SwitchClient(switch.address, DEVICE, election_id=1, p4info=INFO) as c:
        assert c.get_pipeline() is None
        with pytest.raises(P4RuntimeError) as caught:
            c.insert([entry("fcbb:bb00:100::/48", 1)])
        assert caught.value.code == "FAILED_PRECONDITION"
    assert switch.slot.state is None


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("tables", contract.PORT_QOS),
        ("counters", contract.DROPS),
        ("actions", contract.SRV6_END),
    ],
)
def test_set_pipeline_rejects_missing_objects_by_name(
    switch: InProcessSwitch, kind: str, name: str
) -> None:
    with SwitchClient(switch.address, DEVICE, election_id=1) as c:
        request_info = P4Info(_without(kind, name))
        with pytest.raises(P4RuntimeError) as caught:
            c.set_pipeline(request_info)
    assert caught.value.code == "INVALID_ARGUMENT"
    assert name in caught.value.details
    assert switch.slot.state is None


def test_set_pipeline_rejects_wrong_width(switch: InProcessSwitch) -> None:
    info = p4i.P4Info()
    info.CopyFrom(INFO.proto)
    for action in info.actions:
        for param in action.params:
            if param.name == "port":
                param.bitwidth = 16
    with (
        SwitchClient(switch.address, DEVICE, election_id=1) as c,
        pytest.raises(P4RuntimeError) as caught,
    ):
        c.set_pipeline(P4Info(info))
    assert "'port'" in caught.value.details and "bit<9>" in caught.value.details


def test_verify_save_commit_and_get(switch: InProcessSwitch) -> None:
    actions = p4r.SetForwardingPipelineConfigRequest
    with SwitchClient(switch.address, DEVICE, election_id=10):
        _set_config(switch, INFO.proto, actions.VERIFY)
        assert switch.slot.state is None
        _set_config(switch, INFO.proto, actions.VERIFY_AND_SAVE)
        assert switch.slot.state is None
        with pytest.raises(grpc.RpcError) as caught:
            _set_config(switch, INFO.proto, actions.COMMIT)  # COMMIT takes no config
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        _set_config(switch, None, actions.COMMIT)
        assert switch.slot.state is not None
        config = _get_config(switch)
        assert config.cookie.cookie == 42
        assert config.p4info == INFO.proto
        with pytest.raises(grpc.RpcError) as caught:
            _set_config(switch, None, actions.COMMIT)  # nothing saved any more
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        # reconcile keeps the state for the same program and refuses another one
        state = switch.slot.state
        _set_config(switch, INFO.proto, actions.RECONCILE_AND_COMMIT)
        assert switch.slot.state is state
        other = p4i.P4Info()
        other.CopyFrom(INFO.proto)
        other.tables[0].size = 7
        with pytest.raises(grpc.RpcError) as caught:
            _set_config(switch, other, actions.RECONCILE_AND_COMMIT)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_ids_come_from_the_given_p4info(switch: InProcessSwitch) -> None:
    info = p4i.P4Info()
    info.CopyFrom(INFO.proto)
    for table in info.tables:
        table.preamble.id += 0x100
    renumbered = P4Info(info)
    with SwitchClient(switch.address, DEVICE, election_id=1, p4info=renumbered) as c:
        c.set_pipeline(renumbered)
        c.insert([renumbered.table_entry(LPM, {DST: "fcbb:bb00:100::/48"}, contract.DROP_NO_ROUTE)])
        (found,) = c.read_table_entries(LPM)
        assert found.table_id == renumbered.table_id(LPM) != INFO.table_id(LPM)


# -- writes ----------------------------------------------------------------------------------


def test_per_update_errors(switch: InProcessSwitch, client: SwitchClient) -> None:
    good = entry("fcbb:bb00:100::/48", 1)
    client.insert([good])
    bad_param = entry("fcbb:bb00:200::/48", 1)
    bad_param.action.action.params[0].value = b"\x02\x00"  # 512 does not fit bit<9>
    wrong_action = INFO.table_entry(SID, {DST: "fcbb:bb00:300::/48"}, contract.USID_UN)
    wrong_action.action.action.action_id = INFO.action_id(contract.SET_PORT_QOS)
    host_bits = entry("fcbb:bb00:400::/48", 1)
    host_bits.match[0].lpm.value = bytes.fromhex("fcbbbb00040000000000000000000001")
    updates = [
        update(p4r.Update.INSERT, entry("fcbb:bb00:500::/48", 2)),  # fine
        update(p4r.Update.INSERT, good),  # duplicate
        update(p4r.Update.MODIFY, entry("fcbb:bb00:600::/48", 2)),  # absent
        update(p4r.Update.DELETE, entry("fcbb:bb00:700::/48", 2)),  # absent
        update(p4r.Update.INSERT, bad_param),
        update(p4r.Update.INSERT, wrong_action),
        update(p4r.Update.INSERT, host_bits),
    ]
    request = p4r.WriteRequest(device_id=DEVICE)
    request.election_id.low = 10
    request.updates.extend(updates)
    with grpc.insecure_channel(switch.address) as channel, pytest.raises(grpc.RpcError) as caught:
        p4r_grpc.P4RuntimeStub(channel).Write(request, timeout=5)
    assert caught.value.code() == grpc.StatusCode.UNKNOWN
    details = dict(caught.value.trailing_metadata())["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(details)
    errors = []
    for detail in status.details:
        error = p4r.Error()
        assert detail.Unpack(error)
        errors.append(error)
    assert [e.canonical_code for e in errors] == [
        code_pb2.OK,
        code_pb2.ALREADY_EXISTS,
        code_pb2.NOT_FOUND,
        code_pb2.NOT_FOUND,
        code_pb2.INVALID_ARGUMENT,
        code_pb2.INVALID_ARGUMENT,
        code_pb2.INVALID_ARGUMENT,
    ]
    assert "fcbb:bb00:100::/48" in errors[1].message
    assert "bit<9>" in errors[4].message
    assert contract.SET_PORT_QOS.split(".")[-1] in errors[5].message
    # the good update of the batch was applied, and the client decodes the others
    assert len(client.read_table_entries(LPM)) == 2
    with pytest.raises(P4RuntimeError) as decoded:
        client.insert([good])
    assert [e.code_name for e in decoded.value.errors] == ["ALREADY_EXISTS"]


def test_modify_delete_and_default_entries_reach_the_data_path(
    switch: InProcessSwitch, client: SwitchClient
) -> None:
    dst = "fcbb:bb00:100::"
    frame = mrc_frame(dst)
    state = switch.slot.state
    assert state is not None
    client.insert([entry("fcbb:bb00:100::/48", 1)])
    verdict = ingress(frame, 5, state)
    assert isinstance(verdict, Forward) and verdict.port == 1
    client.modify([entry("fcbb:bb00:100::/48", 4)])
    verdict = ingress(frame, 5, state)
    assert isinstance(verdict, Forward) and verdict.port == 4
    client.delete([entry("fcbb:bb00:100::/48", 4)])
    assert not isinstance(ingress(frame, 5, state), Forward)
    # default entries: read the program's, change one, reset it
    default = client.read_default_entry(LPM)
    assert default.action.action.action_id == INFO.action_id(contract.DROP_NO_ROUTE)
    client.modify(
        [
            INFO.default_entry(
                LPM,
                contract.SET_NEXT_HOP,
                contract.params_of(
                    contract.NextHopParams(6, "02:00:00:00:00:01", "02:00:00:00:00:02")
                ),
            )
        ]
    )
    verdict = ingress(frame, 5, state)
    assert isinstance(verdict, Forward) and verdict.port == 6
    assert client.read_default_entry(LPM).action.action.action_id == INFO.action_id(
        contract.SET_NEXT_HOP
    )
    reset = p4r.TableEntry(table_id=INFO.table_id(LPM), is_default_action=True)
    client.modify([reset])
    assert not isinstance(ingress(frame, 5, state), Forward)
    with pytest.raises(P4RuntimeError) as caught:
        client.insert([INFO.default_entry(SID, contract.USID_UN)])
    assert caught.value.errors[0].code_name == "INVALID_ARGUMENT"


# -- reads -----------------------------------------------------------------------------------


def test_wildcard_and_per_table_reads(client: SwitchClient) -> None:
    sid = INFO.table_entry(SID, {DST: "fcbb:bb00:100::/48"}, contract.USID_UN)
    end = INFO.table_entry(SID, {DST: "fcbb:bb00:100::e/128"}, contract.SRV6_END)
    qos = INFO.table_entry(
        QOS,
        {contract.EGRESS_SPEC: 3},
        contract.SET_PORT_QOS,
        contract.params_of(contract.PortQosParams(32, 16, 16, 0, 0)),
    )
    routes = [entry(f"fcbb:bb00:{i}00::/48", i) for i in range(1, 4)]
    client.insert([sid, end, qos, *routes])
    everything = client.read_table_entries()
    assert len(everything) == 6
    assert {e.table_id for e in everything} == {INFO.table_id(t) for t in (SID, LPM, QOS)}
    assert sorted(INFO.describe(e) for e in client.read_table_entries(LPM)) == sorted(
        INFO.describe(e) for e in routes
    )
    (read_qos,) = client.read_table_entries(QOS)
    assert read_qos == qos  # canonical values read back as written
    # a read naming one entry's match returns only that entry
    want = p4r.Entity()
    want.table_entry.CopyFrom(routes[1])
    want.table_entry.ClearField("action")
    found = client.read([want])
    assert len(found) == 1 and INFO.describe(found[0].table_entry) == INFO.describe(routes[1])


def test_counters_and_register_read(switch: InProcessSwitch, client: SwitchClient) -> None:
    client.insert([entry("fcbb:bb00:100::/48", 2)])
    state = switch.slot.state
    assert state is not None
    frame = mrc_frame("fcbb:bb00:100::")
    for _ in range(3):
        verdict = ingress(frame, 1, state)
        assert isinstance(verdict, Forward)
        egress(state, verdict.port, verdict.priority, 9, len(frame))
    ingress(b"\x00" * 10, 1, state)  # a runt: PARSE_ERROR
    port_in = client.read_counter(contract.PORT_IN)
    assert len(port_in) == 512
    assert port_in[1] == (4, 3 * len(frame) + 10)
    assert client.read_counter(contract.PORT_OUT)[2] == (3, 3 * len(frame))
    assert client.read_counter(contract.DROPS)[2] == (1, 10)
    assert client.read_register(contract.PORT_QDEPTH)[2] == 9
    one = p4r.Entity()
    one.counter_entry.counter_id = INFO.counter_id(contract.PORT_IN)
    one.counter_entry.index.index = 1
    (cell,) = client.read([one])
    assert cell.counter_entry.data.packet_count == 4
    every = p4r.Entity()
    every.counter_entry.counter_id = 0  # all counters
    assert len(client.read([every])) == 4 * 512 + 16
    bad = p4r.Entity()
    bad.counter_entry.counter_id = INFO.counter_id(contract.DROPS)
    bad.counter_entry.index.index = 16
    with pytest.raises(P4RuntimeError) as caught:
        client.read([bad])
    assert caught.value.code == "OUT_OF_RANGE"


# -- p4runtime-shell -------------------------------------------------------------------------


# run by the Python of p4runtime-shell's own environment (controller/shell.py says why); the P4
# names and action parameters are the contract's
SHELL_SESSION = """
import json, sys
import p4runtime_sh.shell as sh

address, device_id, p4info, device_config = sys.argv[1:5]
sh.setup(
    device_id=int(device_id),
    grpc_addr=address,
    election_id=(0, 1),
    config=sh.FwdPipeConfig(p4info, device_config),
    verbose=False,
)
try:
    te = sh.TableEntry({lpm!r})(action={next_hop!r})
    te.match[{dst!r}] = "fcbb:bb00:1400::/48"
    for name, value in {hop!r}.items():
        te.action[name] = str(value)
    te.insert()
    found = list(sh.TableEntry({lpm!r}).read())
    qos = sh.TableEntry({qos!r})(action={set_qos!r})
    qos.match[{egress!r}] = "3"
    for name, value in {thresholds!r}.items():
        qos.action[name] = str(value)
    qos.insert()
    counters = list(sh.CounterEntry({port_in!r}).read())
    port = found[0].action[{port!r}].value if found else None
    print(json.dumps({{
        "found": len(found),
        "port": int.from_bytes(port, "big") if found else None,
        "counters": len(counters),
    }}))
finally:
    sh.teardown()
""".format(
    lpm=contract.IPV6_LPM,
    next_hop=contract.SET_NEXT_HOP,
    dst=contract.DST_ADDR,
    hop=contract.params_of(contract.NextHopParams(3, "02:00:00:00:00:01", "02:00:00:00:00:02")),
    qos=contract.PORT_QOS,
    set_qos=contract.SET_PORT_QOS,
    egress=contract.EGRESS_SPEC,
    thresholds=contract.params_of(contract.PortQosParams(8, 4, 4, 0, 0)),
    port_in=contract.PORT_IN,
    port=contract.NextHopParams._fields[0],
)


def test_p4runtime_shell_connects_writes_and_reads(switch: InProcessSwitch, tmp_path: Path) -> None:
    try:
        python = shell_python()
    except Failure as exc:
        pytest.skip(str(exc))
    device_config = tmp_path / "device_config.bin"
    device_config.write_bytes(b"")
    done = subprocess.run(
        [
            str(python),
            "-c",
            SHELL_SESSION,
            switch.address,
            str(DEVICE),
            str(default_p4info_path()),
            str(device_config),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    session = json.loads(done.stdout.strip().splitlines()[-1])
    assert session == {"found": 1, "port": 3, "counters": 512}
    state = switch.slot.state
    assert state is not None and len(state.ipv6_lpm) == 1 and 3 in state.port_qos.entries
    text = text_format.MessageToString(INFO.proto)
    assert "MrcIngress.ipv6_lpm" in text


# -- robustness: any update gets an answer ---------------------------------------------------


_IDS = [t.preamble.id for t in INFO.proto.tables] + [0, 0x02FFFFFF]
_ACTIONS = [a.preamble.id for a in INFO.proto.actions] + [0, 0x01FFFFFF]


@st.composite
def random_updates(draw: st.DrawFn) -> p4r.Update:
    u = p4r.Update(type=draw(st.integers(0, 3)))
    te = u.entity.table_entry
    te.table_id = draw(st.sampled_from(_IDS))
    te.is_default_action = draw(st.booleans())
    te.priority = draw(st.sampled_from([0, 0, 0, 5]))
    for _ in range(draw(st.integers(0, 2))):
        fm = te.match.add()
        fm.field_id = draw(st.integers(0, 2))
        if draw(st.booleans()):
            fm.lpm.value = draw(st.binary(max_size=18))
            fm.lpm.prefix_len = draw(st.integers(-1, 130))
        else:
            fm.exact.value = draw(st.binary(max_size=3))
    if draw(st.booleans()):
        action = te.action.action
        action.action_id = draw(st.sampled_from(_ACTIONS))
        for _ in range(draw(st.integers(0, 4))):
            action.params.add(param_id=draw(st.integers(0, 4)), value=draw(st.binary(max_size=8)))
    return u


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(random_updates(), max_size=5))
def test_fuzz_updates_are_applied_or_refused_with_a_status(updates: list[p4r.Update]) -> None:
    slot = TargetSlot()
    runtime = SwitchRuntime(slot)
    runtime.set_pipeline(
        p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
        p4r.ForwardingPipelineConfig(p4info=INFO.proto),
    )
    for u in updates:
        try:
            runtime.write(u)
        except RuntimeStatus as exc:
            assert exc.code != code_pb2.OK and exc.message
    # whatever was accepted reads back, and the data path still runs over it
    entity = p4r.Entity()
    entity.table_entry.table_id = 0
    assert isinstance(list(runtime.read(entity)), list)
    assert slot.state is not None
    ingress(mrc_frame("fcbb:bb00:100::"), 1, slot.state)
