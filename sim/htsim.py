"""uet-htsim interop: its traffic matrices, topology files, validation plans and output.

The UET reference simulator (``htsim_uec`` of ``ultraethernet/uet-htsim``; the project uses
the build in ``../shared/uet-htsim``, commit :data:`HTSIM_COMMIT`) is driven by files, and so is
the comparison with it:

- traffic matrices (``.cm``): ``Nodes N``, ``Connections C`` (optionally ``Triggers T`` and
  ``Failures F``), then one line per flow, ``SRC->DST [id I] start US size BYTES`` or
  ``... trigger T ...`` (started by a trigger) with ``send_done_trigger T`` /
  ``recv_done_trigger T``, and ``trigger id T oneshot|multishot|barrier [count N]`` lines:
  :func:`read_matrix`, :func:`parse_matrix`, :func:`format_matrix`;
- topology files (``.topo``) of a two-tier leaf-spine: :func:`format_topology` writes the one
  of a :class:`sim.fabric.SimFabric`;
- its output: per flow ``Flow NAME flowId ID uecSrc SRC finished at US ... total packets P
  ... fair_inc F prop_inc P fast_inc F eta_inc E multi_dec -M quick_dec -Q nack_dec -N``,
  the final ``New: ... Rtx: ... RTS: ... Bounced: ... ACKs: ... NACKs: ...`` and the sizes it
  derived (queue bytes, ECN thresholds, unloaded RTT): :func:`parse_output`;
- its validation plans (``validate_*.txt``: matrix, ``!Experiment``, ``!Param``,
  ``!tailFCT``) and their published outputs (``validate_*.out``): :func:`read_plan`,
  :func:`parse_published`.

:func:`run_htsim` runs the binary in a scratch folder (it writes ``logout.dat`` and
``idmap.txt`` into its working directory) and parses what it printed.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from host.transport.cc.nscc import CHANGE_CAUSES
from sim.fabric import SimFabric
from sim.workload import Connection

#: the uet-htsim commit the shared build and its published outputs come from
HTSIM_COMMIT = "40ccb05"
#: the summary fields htsim prints at the end of a run
SUMMARY_FIELDS = ("New", "Rtx", "RTS", "Bounced", "ACKs", "NACKs")
#: where the shared build lives, relative to the repository's parent folder
SHARED_DIR = Path("shared") / "uet-htsim"


class HtsimError(RuntimeError):
    """A file htsim would refuse, or a run that failed."""


# -- traffic matrices -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Trigger:
    """A ``trigger`` line: what starts the flows waiting on trigger ``id``."""

    id: int
    kind: str  #: "oneshot", "multishot" or "barrier"
    count: int = 0


@dataclass(frozen=True)
class Matrix:
    """A traffic matrix: hosts, flows (times in seconds) and triggers."""

    nodes: int
    connections: tuple[Connection, ...]
    triggers: tuple[Trigger, ...] = ()
    failures: tuple[str, ...] = ()  #: ``failure`` lines, kept as text


def read_matrix(path: str | Path) -> Matrix:
    """Read a ``.cm`` file."""
    path = Path(path)
    return parse_matrix(path.read_text(), str(path))


def parse_matrix(text: str, source: str = "<matrix>") -> Matrix:
    """Parse the text of a ``.cm`` file (see the module docstring)."""
    nodes: int | None = None
    declared: dict[str, int] = {}
    conns: list[Connection] = []
    triggers: list[Trigger] = []
    failures: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        tokens = line.split()
        if not tokens or tokens[0].startswith("#"):
            continue
        head = tokens[0]
        try:
            if head == "Nodes":
                nodes = int(tokens[1])
            elif head in ("Connections", "Triggers", "Failures"):
                declared[head] = int(tokens[1])
            elif "->" in head:
                conns.append(_connection(tokens))
            elif head == "trigger":
                triggers.append(_trigger(tokens))
            elif head == "failure":
                failures.append(line.strip())
            else:
                raise ValueError(f"unknown line start {head!r}")
        except (IndexError, ValueError) as exc:
            raise HtsimError(f"{source}:{number}: {line.strip()!r}: {exc}") from None
    if nodes is None:
        raise HtsimError(f"{source}: no 'Nodes N' line")
    if declared.get("Connections", len(conns)) != len(conns):
        raise HtsimError(
            f"{source}: 'Connections {declared['Connections']}' but {len(conns)} flows listed"
        )
    for conn in conns:
        if not (0 <= conn.src < nodes and 0 <= conn.dst < nodes):
            raise HtsimError(f"{source}: flow {conn.src}->{conn.dst} outside {nodes} nodes")
    return Matrix(nodes, tuple(conns), tuple(triggers), tuple(failures))


def _connection(tokens: list[str]) -> Connection:
    src, dst = (int(x) for x in tokens[0].split("->"))
    values: dict[str, str] = {}
    rest = tokens[1:]
    i = 0
    while i < len(rest):
        key = rest[i]
        if key not in ("start", "size", "id", "trigger", "send_done_trigger",
                       "recv_done_trigger", "prio", "msg"):  # fmt: skip
            raise ValueError(f"unknown flow field {key!r}")
        values[key] = rest[i + 1]
        i += 2
    if "size" not in values:
        raise ValueError("a flow needs 'size BYTES'")
    if ("start" in values) == ("trigger" in values):
        raise ValueError("a flow needs either 'start US' or 'trigger T'")
    return Connection(
        src=src,
        dst=dst,
        size=int(values["size"]),
        start=float(values["start"]) / 1e6 if "start" in values else None,
        id=int(values["id"]) if "id" in values else None,
        trigger=int(values["trigger"]) if "trigger" in values else None,
        send_done_trigger=int(values["send_done_trigger"])
        if "send_done_trigger" in values
        else None,
    )


def _trigger(tokens: list[str]) -> Trigger:
    ident, kind, count = 0, "", 0
    i = 1
    while i < len(tokens):
        if tokens[i] == "id":
            ident, i = int(tokens[i + 1]), i + 2
        elif tokens[i] == "count":
            count, i = int(tokens[i + 1]), i + 2
        elif tokens[i] in ("oneshot", "multishot", "barrier"):
            kind, i = tokens[i], i + 1
        else:
            raise ValueError(f"unknown trigger field {tokens[i]!r}")
    if not ident or not kind:
        raise ValueError("a trigger needs 'id T' and oneshot, multishot or barrier")
    return Trigger(ident, kind, count)


def format_matrix(matrix: Matrix) -> str:
    """The ``.cm`` text of ``matrix`` (what :func:`parse_matrix` reads back)."""
    lines = [f"Nodes {matrix.nodes}", f"Connections {len(matrix.connections)}"]
    waiting = {c.trigger for c in matrix.connections if c.trigger is not None}
    if waiting or matrix.triggers:
        lines.append(f"Triggers {len(waiting | {t.id for t in matrix.triggers})}")
    if matrix.failures:
        lines.append(f"Failures {len(matrix.failures)}")
    for c in matrix.connections:
        parts = [f"{c.src}->{c.dst}"]
        if c.id is not None:
            parts.append(f"id {c.id}")
        if c.trigger is not None:
            parts.append(f"trigger {c.trigger}")
        else:
            parts.append(f"start {_number((c.start or 0.0) * 1e6)}")
        parts.append(f"size {c.size}")
        if c.send_done_trigger is not None:
            parts.append(f"send_done_trigger {c.send_done_trigger}")
        lines.append(" ".join(parts))
    for t in matrix.triggers:
        lines.append(f"trigger id {t.id} {t.kind}" + (f" count {t.count}" if t.count else ""))
    lines.extend(matrix.failures)
    return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


# -- topologies -----------------------------------------------------------------------------------


def format_topology(spec: SimFabric) -> str:
    """The ``.topo`` text of one plane of ``spec``: a two-tier leaf-spine whose leaves have
    ``hosts_per_rack`` hosts below and ``spines_per_plane`` uplinks, every link at the
    fabric's rate and hop latency (htsim's ``-planes N`` gives it more planes)."""
    oversub = spec.hosts_per_rack // spec.spines_per_plane
    over = f"Oversubscribed {oversub}\n" if oversub > 1 else ""
    rate = _number(spec.rate_gbps)
    hop = _number(spec.hop_latency_us * 1e3)
    switch = _number(spec.switch_latency_us * 1e3)
    return (
        f"Nodes {spec.hosts}\nTiers 2\nPodsize {spec.hosts}\n\n"
        f"Tier 0\nDownlink_speed_Gbps {rate}\nRadix_Down {spec.hosts_per_rack}\n"
        f"Radix_Up {spec.spines_per_plane}\nDownlink_Latency_ns {hop}\n{over}"
        f"Switch_Latency_ns {switch}\n\n"
        f"Tier 1\nDownlink_speed_Gbps {rate}\nRadix_Down {spec.racks}\n"
        f"Downlink_Latency_ns {hop}\nSwitch_Latency_ns {switch}\n"
    )


# -- output ---------------------------------------------------------------------------------------


@dataclass
class HtsimFlow:
    """One finished flow as htsim printed it."""

    name: str  #: e.g. "Uec_0_13"
    src: int
    dst: int
    finished_us: float
    packets: int
    changes: dict[str, float]  #: window changes by cause, bytes (decreases as positive)


@dataclass
class HtsimRun:
    """What one htsim run printed."""

    flows: list[HtsimFlow]
    summary: dict[str, int]  #: New, Rtx, RTS, Bounced, ACKs, NACKs (empty if not printed)
    queue_bytes: int | None = None
    ecn_bytes: tuple[int, int] | None = None
    unloaded_rtt_us: float | None = None
    packet_bytes: int | None = None
    min_rto_us: float | None = None  #: the senders' ACK timeout ("Setting min RTO to")
    command: list[str] = field(default_factory=list)


_FLOW = re.compile(
    r"^Flow (?P<name>\S+) flowId \d+ uecSrc \d+ finished at (?P<at>[\d.e+-]+) .*?"
    r"total packets (?P<packets>\d+)(?P<rest>.*)$"
)
_CHANGE = re.compile(
    r"(fair_inc|prop_inc|fast_inc|eta_inc|multi_dec|quick_dec|nack_dec) -?([\d.e+-]+)"
)


def parse_output(text: str) -> HtsimRun:
    """Parse what ``htsim_uec`` printed (see the module docstring)."""
    flows: list[HtsimFlow] = []
    summary: dict[str, int] = {}
    run = HtsimRun(flows, summary)
    for line in text.splitlines():
        match = _FLOW.match(line)
        if match:
            name = match["name"]
            ends = name.rsplit("_", 2)
            changes = dict.fromkeys(CHANGE_CAUSES, 0.0)
            for cause, value in _CHANGE.findall(match["rest"]):
                changes[cause] = float(value)
            flows.append(
                HtsimFlow(
                    name=name,
                    src=int(ends[-2]) if len(ends) == 3 else -1,
                    dst=int(ends[-1]) if len(ends) == 3 else -1,
                    finished_us=float(match["at"]),
                    packets=int(match["packets"]),
                    changes=changes,
                )
            )
        elif line.startswith("New:"):
            fields = re.findall(r"(\w+): (\d+)", line)
            summary.update({k: int(v) for k, v in fields})
        elif line.startswith("Tier 0 QueueSize Down"):
            run.queue_bytes = int(line.split()[-2])
        elif line.startswith("Setting ECN to parameters low"):
            words = line.split()
            run.ecn_bytes = (int(words[5]), int(words[7]))
        elif line.startswith("network_max_unloaded_rtt"):
            run.unloaded_rtt_us = float(line.split()[1])
        elif line.startswith("Setting min RTO to"):
            run.min_rto_us = float(line.split()[-1])
        elif line.startswith("Packet size (MTU) is"):
            run.packet_bytes = int(line.split()[-1])
    return run


def shared_dir() -> Path | None:
    """The shared uet-htsim folder (``MRC_HTSIM_DIR``, else ``../shared/uet-htsim`` beside the
    repository), None when it is absent."""
    env = os.environ.get("MRC_HTSIM_DIR")
    base = Path(env) if env else Path(__file__).resolve().parents[2] / SHARED_DIR
    return base if (base / "htsim_uec").is_file() else None


def run_htsim(
    matrix: Matrix | Path,
    *,
    topology: SimFabric | None = None,
    args: Sequence[str] = (),
    binary: Path | None = None,
    timeout: float = 1800.0,
) -> HtsimRun:
    """Run ``htsim_uec`` on ``matrix`` (on ``topology``'s two-tier fabric, else its own
    three-tier fat tree) with ``args`` in a scratch folder; returns what it printed, parsed."""
    if binary is None:
        found = shared_dir()
        if found is None:
            raise HtsimError("htsim_uec not found (set MRC_HTSIM_DIR or put ../shared/uet-htsim)")
        binary = found / "htsim_uec"
    with tempfile.TemporaryDirectory(prefix="htsim-") as scratch:
        work = Path(scratch)
        if isinstance(matrix, Matrix):
            cm = work / "flows.cm"
            cm.write_text(format_matrix(matrix))
        else:
            cm = Path(matrix).resolve()
        command = [str(binary), "-tm", str(cm), *args]
        if topology is not None:
            topo = work / "fabric.topo"
            topo.write_text(format_topology(topology))
            command += ["-topo", str(topo)]
        done = subprocess.run(
            command, cwd=work, capture_output=True, text=True, timeout=timeout, check=False
        )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        raise HtsimError(f"htsim_uec exited {done.returncode}: {' | '.join(tail)}")
    run = parse_output(done.stdout)
    run.command = command
    return run


# -- validation plans and published outputs ---------------------------------------------------------


@dataclass(frozen=True)
class PlanExperiment:
    """One experiment of a validation plan."""

    name: str
    matrix: str  #: path relative to the shared folder
    params: tuple[str, ...]  #: htsim arguments
    tail_fct_us: float | None


def read_plan(path: str | Path) -> list[PlanExperiment]:
    """The experiments of a ``validate_*.txt`` plan."""
    out: list[PlanExperiment] = []
    matrix = name = ""
    params: list[str] = []
    tail: float | None = None

    def close() -> None:
        if matrix:
            out.append(PlanExperiment(name, matrix, tuple(params), tail))

    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        if not line.startswith("!"):
            close()
            matrix, name, params, tail = line, "", [], None
        elif line.startswith("!Experiment"):
            name = line[len("!Experiment") :].strip()
        elif line.startswith("!Param"):
            params.extend(line[len("!Param") :].split())
        elif line.startswith("!tailFCT"):
            tail = float(line.split()[1])
    close()
    return out


@dataclass(frozen=True)
class Published:
    """One experiment of a published ``validate_*.out``."""

    name: str
    tail_fct_us: float | None
    first_fct_us: float | None
    summary: dict[str, int]


def parse_published(text: str) -> dict[str, Published]:
    """The experiments of a published validation output, by name."""
    out: dict[str, Published] = {}
    name: str | None = None
    tail = first = None
    summary: dict[str, int] = {}

    def close() -> None:
        if name is not None:
            out[name] = Published(name, tail, first, dict(summary))

    for line in text.splitlines():
        if line.startswith("Experiment:"):
            close()
            name, tail, first, summary = line[len("Experiment:") :].strip(), None, None, {}
        elif "Tail FCT" in line:
            found = re.search(r"Tail FCT ([\d.]+) us", line)
            tail = float(found[1]) if found else None
        elif line.startswith("FCT Spread"):
            found = re.search(r"FCT Spread ([\d.]+) -> ([\d.]+)", line)
            if found:
                first = float(found[1])
        elif line.startswith("Summary:"):
            summary = {k: int(v) for k, v in re.findall(r"(\w+): (\d+)", line)}
    close()
    return out
