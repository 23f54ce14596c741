"""Collectives and training jobs: the rank state machine, step records on the in-memory network,
the job summary, the job in a scenario and a results folder, and the sweep table (no root)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from experiments.jobs.collectives import (
    Collective,
    Job,
    RankMachine,
    bus_factor,
    imm_of,
    machines,
    parse_kind,
)
from experiments.jobs.sim import run_job
from experiments.jobs.steps import annotate, fault_intervals, summarise_job
from experiments.jobs.sweep import format_table, parse_sizes, sweep_rows
from experiments.metrics import CollectiveRecord, FaultMark, StepRecord, TransportResult
from experiments.scenario import ScenarioError, parse_scenario, parse_size
from topologies import Fabric

RANKS = ("h0", "h1", "h2", "h3")


def drive(kind: str, n: int) -> list[tuple[int, int, int]]:
    """Run every rank's machine to the end, delivering messages in posting order; the
    (src, dst, imm) of every message."""
    ranks = machines(Collective(kind, 1 << 20), n, tag=7)
    wire = [(r, s) for r, m in enumerate(ranks) for s in m.start()]
    log = []
    while wire:
        src, send = wire.pop(0)
        log.append((src, send.dst, send.imm))
        wire += [(src, s) for s in ranks[src].on_sent(send.imm)]
        wire += [(send.dst, s) for s in ranks[send.dst].on_received(src, send.imm)]
    assert all(m.finished for m in ranks)
    return log


@pytest.mark.parametrize(
    ("kind", "messages"),
    [("all-reduce", 6), ("all-gather", 3), ("reduce-scatter", 3), ("all-to-all", 3)],
)
def test_every_rank_sends_its_messages(kind: str, messages: int) -> None:
    log = drive(kind, 4)
    for r in range(4):
        mine = [(dst, imm) for src, dst, imm in log if src == r]
        assert len(mine) == messages
        if kind != "all-to-all":  # a ring: to the right neighbour, steps in order
            assert [dst for dst, _ in mine] == [(r + 1) % 4] * messages
            assert [imm for _, imm in mine] == [imm_of(7, s) for s in range(messages)]
        else:
            assert sorted(dst for dst, _ in mine) == [d for d in range(4) if d != r]


def test_a_ring_step_waits_for_the_previous_immediate() -> None:
    m = RankMachine(Collective("all-reduce", 4096), rank=1, n=4)
    first = m.start()
    assert [(s.dst, s.offset, s.size) for s in first] == [(2, 0, 1024)]
    assert m.on_sent(first[0].imm) == []  # our own completion sends nothing
    nxt = m.on_received(0, imm_of(0, 0))
    assert [(s.dst, s.offset) for s in nxt] == [(2, 1024)]
    with pytest.raises(ValueError, match="unexpected immediate"):
        m.on_received(3, imm_of(0, 1))  # not the left neighbour
    assert not m.finished
    assert m.region_bytes() == 6 * 1024


def test_bus_factors_are_nccl_tests() -> None:
    assert bus_factor("all-reduce", 4) == pytest.approx(1.5)
    for kind in ("all-gather", "reduce-scatter", "all-to-all"):
        assert bus_factor(kind, 4) == pytest.approx(0.75)
    assert parse_kind("allreduce") == "all-reduce"
    with pytest.raises(ValueError, match="expected one of"):
        parse_kind("broadcast")


def test_step_records_on_the_in_memory_network(fabric: Fabric) -> None:
    """Four ranks, a ring all-reduce and an all-to-all per step: every step ends, its
    collectives carry nccl-tests' bandwidths, steps follow one another after the compute."""
    job = Job(
        RANKS,
        (Collective("all-reduce", 256 << 10), Collective("all-to-all", 64 << 10)),
        steps=3,
        compute_s=0.01,
    )
    first = run_job(job, fabric, seed=3)
    assert len(first.steps) == 3
    for k, step in enumerate(first.steps):
        assert step.step == k and step.end is not None and step.time is not None
        assert [c.kind for c in step.collectives] == ["all-reduce", "all-to-all"]
        assert step.time == pytest.approx(step.compute_s + step.comm_s)
        for c in step.collectives:
            assert c.end is not None and c.algbw is not None and c.busbw is not None
            assert c.algbw == pytest.approx(c.size / (c.end - c.start) / 1e9)
            assert c.busbw == pytest.approx(c.algbw * bus_factor(c.kind, 4))
        assert step.faults == [] and step.rtos == 0
        if k:
            assert step.start == pytest.approx(first.steps[k - 1].end)
    again = run_job(job, fabric, seed=3)  # a pure function of its seed
    assert [s.time for s in again.steps] == [s.time for s in first.steps]


def test_a_link_failure_shows_in_the_steps_it_overlaps(fabric: Fabric) -> None:
    job = Job(RANKS, (Collective("all-reduce", 256 << 10),), steps=6)
    calm = run_job(job, fabric, seed=1)
    middle = calm.steps[2]
    assert middle.end is not None
    down = (middle.start, middle.end + (middle.end - middle.start))  # steps 2 and 3
    hurt = run_job(job, fabric, seed=1, failures=[("t0-p0-r0", "t1-p0-s0", *down)])
    touched = [s.step for s in hurt.steps if s.faults]
    assert touched and touched[0] == 2
    assert all(s.faults == ["t0-p0-r0 <-> t1-p0-s0"] for s in hurt.steps if s.step in touched)
    lost = sum(s.retransmissions + s.evs_retired for s in hurt.steps if s.step in touched)
    assert lost > 0  # the failure cost packets or EVs in the steps it overlapped
    summary = summarise_job(hurt.steps, calm.steps)
    assert summary.finished == 6 and summary.fault_steps == {"t0-p0-r0 <-> t1-p0-s0": touched}
    assert summary.slowdown is not None and summary.p99_over_baseline is not None
    assert summary.baseline_mean_s == pytest.approx(
        sum(s.time or 0 for s in calm.steps) / len(calm.steps)
    )


def test_summary_against_a_baseline_and_recovery_steps() -> None:
    def steps(times: list[float], hit: set[int]) -> list[StepRecord]:
        out, t = [], 0.0
        for k, took in enumerate(times):
            out.append(StepRecord(k, t, t + took, 0.0, [], faults=["x"] if k in hit else []))
            t += took
        return out

    base = steps([1.0] * 6, set())
    run = steps([1.0, 2.0, 1.5, 1.02, 1.005, 1.0], {1})
    s = summarise_job(run, base)
    assert s.step_mean_s == pytest.approx(7.525 / 6)
    assert s.slowdown == pytest.approx(7.525 / 6 - 1)
    assert s.step_max_s == 2.0 and s.fault_steps == {"x": [1]}
    assert s.recovery_steps == {"x": 2}  # steps 2 and 3 slower than 1 %, step 4 within


def test_fault_intervals_and_annotation() -> None:
    marks = [
        FaultMark(1.0, "down", "a <-> b"),
        FaultMark(2.0, "up", "a <-> b"),
        FaultMark(5.0, "kill", "t1-p0-s0"),
    ]
    assert fault_intervals(marks, 9.0) == [("a <-> b", 1.0, 2.0), ("t1-p0-s0", 5.0, 9.0)]
    steps = [StepRecord(k, k * 2.0, k * 2.0 + 2.0, 0.0, []) for k in range(4)]
    annotate(steps, marks, [{"t": 5.5, "new": "assumed_bad"}, {"t": 5.6, "new": "good"}])
    # step 1 starts when the link comes back: not overlapped
    assert [s.faults for s in steps] == [["a <-> b"], [], ["t1-p0-s0"], ["t1-p0-s0"]]
    assert [s.evs_retired for s in steps] == [0, 0, 1, 0]


def test_a_job_in_a_scenario() -> None:
    s = parse_scenario(
        {
            "topology": "small",
            "duration_s": 30,
            "baseline": True,
            "transports": ["mrc", "single-path"],
            "job": {
                "ranks": ["h0", "h1", "h2"],
                "steps": 4,
                "compute_s": 0.2,
                "collectives": [{"kind": "all-reduce", "size": "1MiB"}],
            },
        }
    )
    assert s.job == Job(("h0", "h1", "h2"), (Collective("all-reduce", 1 << 20),), 4, 0.2)
    assert s.baseline and s.workloads == ()
    from experiments.runner import phases

    names = [(len(sc.faults), t.name) for sc, t in phases(s)]
    assert names == [
        (0, "mrc-baseline"),
        (0, "mrc"),
        (0, "single-path-baseline"),
        (0, "single-path"),
    ]
    assert [t.kind for t in s.with_(transports=["mrc", "mptcp"]).transports] == ["mrc", "mptcp"]
    with pytest.raises(ScenarioError, match=r"job\.collectives\[0\]\.kind"):
        s.with_(job={"collectives": [{"kind": "broadcast", "size": 1}]})
    with pytest.raises(ScenarioError, match="job.ranks"):
        s.with_(job={"ranks": ["h0"], "collectives": [{"kind": "all-reduce", "size": 1}]})


def test_steps_in_a_results_folder(tmp_path: Path, fabric: Fabric) -> None:
    """steps.jsonl is written, read back, summarised into metrics.json and summary.md, and
    steps.png drawn."""
    from experiments.results import load_jobs, load_raw, render, write_raw

    job = Job(RANKS, (Collective("all-reduce", 128 << 10),), steps=4)
    results = []
    for name, failures in (("mrc-baseline", []), ("mrc", [("t0-p0-r0", "t1-p0-s0", 0.0, 0.05)])):
        run = run_job(job, fabric, seed=2, failures=failures)
        r = TransportResult(name=name, kind="mrc", duration=run.end, flows=[])
        r.steps, r.faults = run.steps, [m for m in run.faults if m.t <= run.end]
        results.append(r)
    write_raw(tmp_path, {}, fabric.topology.as_dict(), 0.25, results)
    lines = (tmp_path / "steps.jsonl").read_text().splitlines()
    assert len(lines) == 8
    first = json.loads(lines[4])
    assert first["transport"] == "mrc" and first["faults"] == ["t0-p0-r0 <-> t1-p0-s0"]
    assert {"time_s", "comm_s", "retransmissions", "trims", "nacks", "rtos", "evs_retired"} <= set(
        first
    )
    assert set(first["collectives"][0]) >= {"algbw", "busbw", "kind", "size"}
    _, _, loaded = load_raw(tmp_path)
    assert [s.time for s in loaded[1].steps] == [s.time for s in results[1].steps]
    render(tmp_path)
    jobs = load_jobs(tmp_path)
    assert jobs["mrc"].baseline_mean_s == jobs["mrc-baseline"].step_mean_s
    assert jobs["mrc"].fault_steps["t0-p0-r0 <-> t1-p0-s0"][0] == 0
    assert "Steps of the job" in (tmp_path / "summary.md").read_text()
    assert (tmp_path / "steps.png").stat().st_size > 0


def test_sweep_table_format() -> None:
    assert parse_sizes("1MiB:8MiB", parse_size) == [1 << 20, 2 << 20, 4 << 20, 8 << 20]
    assert parse_sizes("4KiB,1MiB", parse_size) == [4096, 1 << 20]
    job = Job(RANKS, (Collective("all-reduce", 1 << 20), Collective("all-reduce", 2 << 20)), 2)
    steps = [
        StepRecord(
            k,
            0.0,
            3.0,
            0.0,
            [
                CollectiveRecord("all-reduce", 1 << 20, 4, 0.0, 0.001),
                CollectiveRecord("all-reduce", 2 << 20, 4, 0.001, 0.003),
            ],
        )
        for k in range(2)
    ]
    rows = sweep_rows(job, steps)
    assert [r.count for r in rows] == [262144, 524288]
    assert rows[0].time_us == pytest.approx(1000.0)
    assert rows[0].algbw == pytest.approx((1 << 20) / 1e-3 / 1e9)
    assert rows[0].busbw == pytest.approx(rows[0].algbw * 1.5)
    table = format_table("all-reduce", 4, rows).splitlines()
    header = next(line for line in table if "size" in line)
    assert header.split()[1:] == [
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
    ]
    data = [line.split() for line in table if not line.startswith("#")]
    assert data[0] == ["1048576", "262144", "float", "sum", "-1", "1000.0", "1.0486", "1.5729"]
    assert table[-1].startswith("# Avg bus bandwidth    : 1.5729")


def test_sweep_command_writes_csv_and_json(tmp_path: Path) -> None:
    from experiments.cli import main

    assert main(["collective", "allreduce", "--sizes", "64KiB:128KiB", "--iters", "1",
                 "--out", str(tmp_path)]) == 0  # fmt: skip
    csv_lines = (tmp_path / "sweep.csv").read_text().splitlines()
    assert csv_lines[0].split(",")[:3] == ["size", "count", "type"] and len(csv_lines) == 3
    doc = json.loads((tmp_path / "sweep.json").read_text())
    assert doc["collective"] == "all-reduce" and [r["size"] for r in doc["rows"]] == [
        65536,
        131072,
    ]
    assert all(r["busbw"] > 0 for r in doc["rows"])


def _free_ports(count: int) -> int:
    """The first of ``count`` consecutive TCP ports that nothing is bound to on any address,
    below the kernel's ephemeral range (where outgoing connections take ports: one port free
    now says nothing of the next)."""
    import random
    import socket

    for _ in range(200):
        base = random.randrange(20_000, 32_000 - count)
        probes = [socket.socket(socket.AF_INET6, socket.SOCK_STREAM) for _ in range(count)]
        try:
            for k, probe in enumerate(probes):
                probe.bind(("::", base + k))
            return base
        except OSError:
            continue
        finally:
            for probe in probes:
                probe.close()
    raise RuntimeError(f"no {count} consecutive free TCP ports between 20000 and 32000")


def test_kernel_rank_programs_over_loopback_tcp() -> None:
    """The kernel baselines' rank program: four ranks over TCP on ::1 run an all-reduce and an
    all-to-all, each reporting when it finished."""
    import socket
    import subprocess
    import sys

    try:
        socket.socket(socket.AF_INET6, socket.SOCK_STREAM).bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback")
    base = _free_ports(4)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "experiments.flows.kernel_rank",
                "--rank",
                str(r),
                "--addrs",
                ",".join(["::1"] * 4),
                "--port",
                str(base),
                "--all-pairs",
                "--timeout",
                "30",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for r in range(4)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and "ready" in json.loads(p.stdout.readline())
        for tag, kind in enumerate(("all-reduce", "all-to-all")):
            for p in procs:
                assert p.stdin is not None
                p.stdin.write(f"run {kind} {256 << 10} {tag}\n")
                p.stdin.flush()
            for p in procs:
                assert p.stdout is not None
                done = json.loads(p.stdout.readline())
                assert done["tag"] == tag and done["end"] >= done["start"]
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("quit\n")
            p.stdin.flush()
            assert p.wait(10) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


class _Agents:
    """In-memory agents for the job driver: a WRITE_IMM arrives at once (the receiver's
    completion); its sender's completion comes only once ``hold`` transfers were posted, so a
    driver that waited for senders' completions to move the ring on would never get there."""

    def __init__(self, hold: int) -> None:
        self.hold = hold
        self.lock = threading.Lock()
        self.posted: list[tuple[str, str, int]] = []  # (src, dst, imm), in posting order
        self.received: dict[str, list[dict[str, Any]]] = {h: [] for h in RANKS}
        self.completed_when: int | None = None  # transfers posted at the first completion

    def client(self, host: str, timeout: float = 10.0) -> _AgentClient:
        return _AgentClient(self, host)


class _AgentClient:
    def __init__(self, agents: _Agents, host: str) -> None:
        self.agents, self.host = agents, host

    def __enter__(self) -> _AgentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        pass

    def transfer(self, peer: str, addr: int, rkey: int, size: int, **fields: Any) -> dict:
        a = self.agents
        with a.lock:
            a.posted.append((self.host, peer, fields["imm"]))
            got = a.received[peer]
            got.append({"seq": len(got) + 1, "peer": self.host, "imm": fields["imm"],
                        "status": "ok"})  # fmt: skip
            return {"transfer": len(a.posted)}

    def received(self, since: int = 0, timeout: float = 0.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            with self.agents.lock:
                got = self.agents.received[self.host]
                if len(got) > since or time.monotonic() >= deadline:
                    return {"received": got[since:], "last": len(got)}
            time.sleep(0.005)

    def wait(self, transfers: list[int], timeout: float = 60.0) -> dict:
        a = self.agents
        with a.lock:
            if len(a.posted) >= a.hold:
                if a.completed_when is None:
                    a.completed_when = len(a.posted)
                return {"complete": True, "failed": []}
        time.sleep(min(timeout, 0.02))
        return {"complete": False, "failed": []}


def test_the_agents_job_moves_the_ring_on_receive_completions() -> None:
    """A rank posts its next ring step when its own agent received the previous one (the
    ``received`` stream), as an MRC application does, not when the sender's WRITE_IMM
    completed: every step of the all-reduce is posted before any sender completes."""
    from experiments.flows.collective import CollectiveFlows

    collective = Collective("all-reduce", 4 << 12)
    steps = len(RANKS) * collective.messages(len(RANKS))
    agents = _Agents(hold=steps)
    t0 = time.monotonic()
    phase = SimpleNamespace(
        stop=threading.Event(), errors=[], now=lambda: time.monotonic() - t0,
        scenario=SimpleNamespace(duration_s=20.0), transport=SimpleNamespace(kind="mrc"),
    )  # fmt: skip
    flows = object.__new__(CollectiveFlows)
    flows.phase, flows.ranks = phase, list(RANKS)
    flows.rank_regions = [{"addr": 0, "rkey": 1} for _ in RANKS]
    flows.client = agents.client  # type: ignore[method-assign]
    ended: list[float | None] = []
    job = threading.Thread(target=lambda: ended.append(flows._collective(collective, tag=3)))
    job.start()
    job.join(15.0)  # a driver waiting for completions that never come: stopped, not hung
    phase.stop.set()
    job.join(5.0)
    assert ended and ended[0] is not None, (ended, phase.errors)
    assert agents.completed_when == steps and len(agents.posted) == steps
    for r, host in enumerate(RANKS):  # each rank's steps in ring order, to its right
        mine = [(dst, imm) for src, dst, imm in agents.posted if src == host]
        assert mine == [(RANKS[(r + 1) % 4], imm_of(3, s)) for s in range(6)]
