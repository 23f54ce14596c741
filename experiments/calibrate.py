"""What a switch hop and an agent packet cost on this machine, measured once and cached, and the
link rate a scenario runs at (``link_rate_mbps: auto``).

:func:`calibrate` boots the smallest fabric (one plane, two racks of one host, one spine: three
switches, two agents) on the chosen switch target at :data:`CALIBRATION_RATE_MBPS` and reads
every switch's and agent's CPU time (``/proc/PID/task/*/schedstat``: nanoseconds on a CPU, user
and system, which do not depend on how busy the rest of the machine is; ``/proc/PID/stat``'s
ticks where schedstat is missing) over :data:`IDLE_S` with no traffic, then over a write each
way between the two hosts that keeps both links busy for about :data:`TRANSFER_S`. The
traffic's CPU over the frames delivered is the cost of a switch hop (three per frame) and of an
agent packet (two ends per frame); the idle CPU is what every process of a fabric costs
besides. It does so twice, at :data:`CALIBRATION_RATE_MBPS` and again at
:data:`CALIBRATION_SLOW_RATE_MBPS`: a frame costs more where a process handles fewer
(:mod:`experiments.rate`). It takes about twenty-five seconds, boots included.

:func:`cached_calibration` keeps the figures in ``calibration.json`` of the cache folder
(``$MRC_TESTBED_CACHE``, else ``$XDG_CACHE_HOME/mrc-testbed``, else ``~/.cache/mrc-testbed``),
keyed by the machine's CPU model, its core count, the target and the code's version (a hash
of the agent's, the switch model's and the P4 program's sources, and of the BMv2 binary):
a new build or a changed agent is calibrated again.

:func:`resolve_rate` is what ``mrc-testbed run`` does before it brings the fabric up: an
``auto`` scenario moves to the rate :func:`experiments.rate.choose_rate` picks (printed with
its headroom); a fixed rate the budget does not hold gets a warning line, or
:class:`experiments.rate.UnfaithfulRate` when strict.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from experiments.rate import (
    BUDGET,
    Budget,
    Calibration,
    Need,
    Point,
    RateError,
    UnfaithfulRate,
    assess,
    choose_rate,
    fabric_load,
)
from experiments.scenario import AUTO_RATE, Scenario
from experiments.testbed import Testbed
from targets.factory import SIM_TARGET, choose_target
from topologies import Topology, load_topology
from topologies.config import shipped_topology

CALIBRATION_RATE_MBPS = 10.0  # above the rates auto picks on a small machine
CALIBRATION_SLOW_RATE_MBPS = 1.0  # and below most: what a frame costs there is interpolated
IDLE_S = 2.0
TRANSFER_S = 4.0
MESSAGE_BYTES = 256 << 10  # as a workload's default messages
CACHE_FILE = "calibration.json"
MEASURES = "two rates"  # in the cache key: a calibration of one rate is measured again
HZ = os.sysconf("SC_CLK_TCK")
REPO = Path(__file__).resolve().parent.parent
#: the sources whose change changes what a packet costs
VERSIONED = ("host", "switchmodel", "p4src", "targets")
#: the smallest fabric: three switches (a leaf per rack, one spine), two agents
CALIBRATION_SHAPE = {"planes": 1, "racks": 2, "spines_per_plane": 1, "hosts_per_rack": 1}


def cpu_seconds(pid: int) -> float | None:
    """CPU-seconds process ``pid`` has used so far, all its threads (None once it is gone)."""
    total = 0.0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0]) / 1e9
        except (OSError, IndexError, ValueError):
            try:  # no schedstat in this kernel: the process's ticks, once
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                return None
            return (int(fields[11]) + int(fields[12])) / HZ
    return total


def calibration_topology(target_rate: float = CALIBRATION_RATE_MBPS) -> Topology:
    """The fabric :func:`calibrate` boots."""
    return load_topology(shipped_topology("small")).with_(
        **CALIBRATION_SHAPE, link={"rate_mbps": target_rate, "nominal_rate_gbps": 100.0}
    )


def _cpu_by_kind(testbed: Testbed) -> dict[str, float]:
    out = {"switch": 0.0, "agent": 0.0}
    for proc in testbed.processes():
        if proc.kind in out:
            out[proc.kind] += cpu_seconds(proc.pid) or 0.0
    return out


def calibrate(target: str, say: Callable[[str], None] = print) -> Calibration:
    """Measure ``target``'s and the agent's CPU per packet on the smallest fabric at two rates
    (as root, with no other fabric up: it uses the fabric's interface names)."""
    target = choose_target(target)
    say(f"calibrating {target} on this machine ({os.cpu_count()} cores, load "
        f"{os.getloadavg()[0]:.1f}): one write each way for about {TRANSFER_S:g} s at "
        f"{CALIBRATION_RATE_MBPS:g} and at {CALIBRATION_SLOW_RATE_MBPS:g} Mb/s")  # fmt: skip
    fast, slow = (
        _measure(target, rate, say) for rate in (CALIBRATION_RATE_MBPS, CALIBRATION_SLOW_RATE_MBPS)
    )
    return Calibration.from_json(
        {
            "target": target,
            **asdict(fast.costs),
            "switch_idle_cores": fast.switch_idle_cores,
            "agent_idle_cores": fast.agent_idle_cores,
            "slow": asdict(slow.costs),
            "measured": fast.measured,
        }
    )


@dataclass(frozen=True)
class _Measured:
    costs: Point  # its frames_per_s: what each switch and agent handled
    switch_idle_cores: float
    agent_idle_cores: float
    measured: dict[str, float]


def _measure(target: str, rate_mbps: float, say: Callable[[str], None]) -> _Measured:
    """One measurement of the smallest fabric at ``rate_mbps``, said when done."""
    from host.agent.control_client import ControlClient

    topology = calibration_topology(rate_mbps)
    frames = rate_mbps * 1e6 / ((topology.link_mtu + 14) * 8)
    size = int(frames * TRANSFER_S) * topology.mtu
    with tempfile.TemporaryDirectory(prefix="mrc-calibrate-") as run_dir:
        testbed = Testbed(topology, target, state_path=Path(run_dir) / "state.json", watch=False)
        testbed.up()
        try:
            hosts = [h.name for h in testbed.fabric.hosts]

            def client(host: str) -> ControlClient:
                return ControlClient(testbed.control_path(host), timeout=10.0)

            regions = {}
            for host in hosts:
                with client(host) as c:
                    regions[host] = c.register("calibration", size)
            idle0, t0 = _cpu_by_kind(testbed), time.monotonic()
            time.sleep(IDLE_S)
            idle1, t1 = _cpu_by_kind(testbed), time.monotonic()
            errors: list[str] = []

            def write(src: str, dst: str) -> None:
                try:
                    with client(src) as c:
                        region = regions[dst]
                        reply = c.transfer(dst, int(region["addr"]), int(region["rkey"]), size,
                                           policy="mrc", message_size=MESSAGE_BYTES, seed=1)  # fmt: skip
                        done = c.wait([int(reply["transfer"])], timeout=TRANSFER_S * 5)
                    if not done.get("complete"):
                        errors.append(f"{src} -> {dst} did not complete")
                except Exception as exc:
                    errors.append(f"{src} -> {dst}: {exc}")

            writers = [
                threading.Thread(target=write, args=pair, daemon=True)
                for pair in ((hosts[0], hosts[1]), (hosts[1], hosts[0]))
            ]
            for thread in writers:
                thread.start()
            for thread in writers:
                thread.join()
            busy, t2 = _cpu_by_kind(testbed), time.monotonic()
            load = os.getloadavg()[0]
        finally:
            testbed.down()
    if errors:
        raise RateError(f"calibrating {target} at {rate_mbps:g} Mb/s: {'; '.join(errors)}")
    packets = 2 * -(-size // topology.mtu)
    idle = {k: (idle1[k] - idle0[k]) / (t1 - t0) for k in idle1}
    traffic = {k: busy[k] - idle1[k] - idle[k] * (t2 - t1) for k in busy}
    switch_hop_s = max(traffic["switch"], 1e-9) / (packets * 3)
    agent_packet_s = max(traffic["agent"], 1e-9) / (packets * 2)
    say(f"  at {rate_mbps:g} Mb/s: a switch hop {switch_hop_s * 1e6:.0f} us, an agent packet "
        f"{agent_packet_s * 1e6:.0f} us of CPU")  # fmt: skip
    return _Measured(
        # every switch carries both writes, every agent sends one and receives the other
        costs=Point(packets / (t2 - t1), switch_hop_s, agent_packet_s),
        switch_idle_cores=max(idle["switch"], 0.0) / 3,
        agent_idle_cores=max(idle["agent"], 0.0) / 2,
        measured={
            "rate_mbps": rate_mbps,
            "packets": packets,
            "seconds": round(t2 - t1, 3),
            "load": round(load, 2),
            "at": round(time.time(), 1),
        },
    )


# -- the cache -----------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Where calibrations are kept (see the module's docstring)."""
    if os.environ.get("MRC_TESTBED_CACHE"):
        return Path(os.environ["MRC_TESTBED_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mrc-testbed"


def cpu_model() -> str:
    """The machine's CPU model (``/proc/cpuinfo``), or ``unknown``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def code_version(target: str) -> str:
    """A hash of the sources that decide what a packet costs (and of BMv2's binary)."""
    digest = hashlib.sha256()
    for folder in VERSIONED:
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix in (".py", ".p4", ".json", ".c", ".h") and path.is_file():
                digest.update(str(path.relative_to(REPO)).encode())
                digest.update(path.read_bytes())
    if target == "bmv2":
        binary = shutil.which("simple_switch_grpc")
        if binary is not None:
            digest.update(Path(binary).read_bytes())
    return digest.hexdigest()[:16]


def cache_key(target: str) -> str:
    """The calibration's key: CPU model, core count, target, code version, and what a
    calibration measures (:data:`MEASURES`)."""
    return f"{cpu_model()}|{os.cpu_count()} cores|{target}|{code_version(target)}|{MEASURES}"


def cached_calibration(
    target: str,
    say: Callable[[str], None] = print,
    *,
    folder: Path | None = None,
    measure: Callable[[str, Callable[[str], None]], Calibration] = calibrate,
) -> Calibration:
    """The calibration of ``target`` on this machine: from the cache, else measured now
    (``measure``) and kept."""
    target = choose_target(target)
    path = (folder or cache_dir()) / CACHE_FILE
    key = cache_key(target)
    try:
        entries = json.loads(path.read_text())
        if not isinstance(entries, dict):
            entries = {}
    except (OSError, ValueError):
        entries = {}
    if key in entries:
        try:
            return Calibration.from_json(entries[key])
        except RateError as exc:
            say(f"calibration cache {path}: {exc}; measuring again")
    calibration = measure(target, say)
    entries[key] = calibration.as_json()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # two runs may write at once
    tmp.write_text(json.dumps(entries, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    return calibration


# -- the rate of a run ---------------------------------------------------------------------------


def scenario_need(
    scenario: Scenario, calibration: Calibration, budget: Budget = BUDGET
) -> tuple[Need, Need | None]:
    """What ``scenario`` needs at its rate, and (``auto``) at the rate chosen for it."""
    topology = scenario.topology
    flows = [(s, d) for _, s, d in scenario.flows()]
    if not flows and scenario.job is not None:
        ranks = scenario.job.ranks
        flows = [(r, ranks[(i + 1) % len(ranks)]) for i, r in enumerate(ranks)]
    load = fabric_load(topology, flows)
    cores = os.cpu_count() or 1
    now = assess(calibration, load, topology.link_rate_mbps, topology, cores, budget)
    chosen = choose_rate(calibration, load, topology, cores, budget) if scenario.auto_rate else None
    return now, chosen


def resolve_rate(
    scenario: Scenario,
    target: str,
    say: Callable[[str], None] = print,
    *,
    strict: bool = False,
    calibration: Calibration | None = None,
) -> Scenario:
    """``scenario`` at the rate it runs at on ``target`` here: an ``auto`` one at the chosen
    rate (its times scaled, :meth:`Scenario.at_rate`); a fixed one as it is, with a warning
    when its rate is over the budget (:class:`UnfaithfulRate` when ``strict``). The sim target
    runs in simulated time: an ``auto`` scenario stays at its reference rate."""
    if target == SIM_TARGET:
        return scenario
    calibration = calibration or cached_calibration(target, say)
    now, chosen = scenario_need(scenario, calibration)
    if chosen is not None:
        resolved = scenario.at_rate(chosen.rate_mbps)
        say(
            f"link rate auto: {chosen.rate_mbps:g} Mb/s on {calibration.target} "
            f"(dilation {resolved.topology.dilation:,.0f}); {chosen.text()}"
        )
        return resolved
    if not now.faithful:
        try:
            top = scenario_need(scenario.with_(link_rate_mbps=AUTO_RATE), calibration)[1]
        except RateError:
            top = None
        better = f"; auto would choose {top.rate_mbps:g} Mb/s" if top is not None else ""
        message = (
            f"link_rate_mbps {now.rate_mbps:g} is not faithful on {calibration.target} here: "
            f"{now.text()}{better}"
        )
        if strict:
            raise UnfaithfulRate(message)
        say(f"warning: {message}")
    return scenario


__all__ = [
    "CALIBRATION_RATE_MBPS",
    "CALIBRATION_SLOW_RATE_MBPS",
    "cache_dir",
    "cache_key",
    "cached_calibration",
    "calibrate",
    "calibration_topology",
    "code_version",
    "cpu_seconds",
    "resolve_rate",
    "scenario_need",
]
