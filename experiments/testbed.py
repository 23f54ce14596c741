"""The running testbed: bring a fabric up (switches, tables, watch, agents) and take it down.

:class:`Testbed` is what ``mrc-testbed up`` and ``mrc-testbed run`` use:

1. write the effective topology (scenario overrides applied) next to the state file, so every
   process reads the same fabric;
2. build the Mininet network (:mod:`experiments.fabricnet`) and start one switch process per
   switch, waiting until each serves P4Runtime;
3. write the state file (:mod:`targets.state`), then install every switch's tables in-process
   (:mod:`experiments.control`, as ``mrc-ctl push`` does) and start ``mrc-ctl watch`` (which
   re-installs a switch that lost its tables, e.g. after a reboot);
4. start ``mrc-host`` in each host's namespace with its control socket in the run directory.

:func:`teardown` is ``mrc-testbed down``: it stops a running ``up`` (SIGTERM), then removes
whatever is left even after a crash -- processes recorded in the state file (checked against
their command line, so a reused pid is never hit), Mininet node shells and agents of this
fabric's node names, and root-namespace interfaces with this fabric's names. It touches nothing
else: no ``mn -c``, no other interface or namespace. ``mrc-testbed down`` runs it for the default
state file and for every state file of the registry of live runs (each testbed that is up lists
its own: :func:`targets.state.live_runs`), so that fabrics of runs and benchmarks, whose state
files live in their folders, are found too.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import yaml

from controller.push import PushReport, SwitchAddress
from controller.qos import describe_operating_point, operating_point
from experiments.control import ControlError, FabricControl
from experiments.mgmtnet import SWITCH_NODE
from p4src.contract import QDEPTH_MAX
from targets.interrupt import handle_termination
from targets.state import (
    HostState,
    StateError,
    SwitchState,
    TestbedState,
    default_path,
    forget_run,
    live_runs,
    register_run,
)
from topologies import Fabric, Topology, load_topology
from topologies.config import shipped_topologies, shipped_topology

if TYPE_CHECKING:
    from mininet.net import Mininet

    from experiments.fabricnet import FabricHost, FabricNet
    from targets.process import SwitchProcess

AGENT_READY_TIMEOUT = 30.0
TRIM_NEVER = QDEPTH_MAX  # a trim threshold no queue reaches: the switch drops instead
Progress = Callable[[str], None]


class TestbedError(RuntimeError):
    """The testbed could not be brought up or reached; the message says what to do."""


def _startup_errors() -> tuple[type[Exception], ...]:
    from targets.process import SwitchConfigError, SwitchStartError

    errors: tuple[type[Exception], ...] = (TestbedError, SwitchStartError, SwitchConfigError)
    try:  # Mininet may be missing where only 'report' or 'topo' is used
        from targets.factory import TargetUnavailable
    except ImportError:
        return errors
    return (*errors, TargetUnavailable)


def tool(name: str) -> str:
    """Path of one of the project's commands (next to this Python, else on PATH)."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise TestbedError(
            f"command '{name}' not found: install the project "
            "(pip install -e .) or run from its virtualenv"
        )
    return found


def write_topology(topology: Topology, path: Path) -> Path:
    """Write ``topology`` (with any overrides) as a topology file every process can load."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = topology.as_dict()
    path.write_text("# effective topology of the running testbed\n" + yaml.safe_dump(data))
    return path


def require_root(what: str) -> None:
    """Raise :class:`TestbedError` unless root (namespaces, veths and raw sockets need it)."""
    if os.geteuid() != 0:
        raise TestbedError(f"{what} needs root (network namespaces, interfaces): run it with sudo")


#: what 'up' and 'run' report in one line instead of a traceback
STARTUP_ERRORS: tuple[type[Exception], ...] = _startup_errors()


@dataclass(frozen=True)
class SwitchHandle:
    """One switch of the running fabric: where it serves P4Runtime and its process."""

    name: str
    address: SwitchAddress
    process: SwitchProcess


class HostHandle:
    """One host of the running fabric: commands and processes in its network namespace."""

    def __init__(self, name: str, node: FabricHost) -> None:
        self.name = name
        self._node = node

    def cmd(self, command: str) -> str:
        """Run a shell command in the host and return its output."""
        return str(self._node.cmd(command))

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start ``argv`` in the host (``subprocess.Popen`` keyword arguments)."""
        process: subprocess.Popen[bytes] = self._node.popen(argv, **kwargs)
        return process

    @property
    def pid(self) -> int:
        """The pid of the host's shell (its namespaces)."""
        return int(self._node.pid)


@dataclass(frozen=True)
class NicCounters:
    """What one host NIC has sent so far (its interface counters)."""

    host: str
    plane: int
    intf: str
    tx_bytes: int


@dataclass(frozen=True)
class ProcessInfo:
    """A process of the testbed: ``kind`` is ``switch``, ``agent`` or ``watch``."""

    kind: str
    name: str
    pid: int


class Testbed:
    """One running fabric with its controller watch and host agents.

    Its face: :meth:`switch` / :meth:`switches` (:class:`SwitchHandle`), :meth:`host`
    (:class:`HostHandle`), :meth:`nic_counters`, :meth:`processes`, :attr:`control` (tables,
    QoS and counters over P4Runtime, :class:`experiments.control.FabricControl`) and the fault
    primitives. The Mininet network itself is reached only through :attr:`network`.
    """

    def __init__(
        self,
        topology: Topology,
        target: str = "auto",
        *,
        state_path: Path | None = None,
        agents: bool = True,
        watch: bool = True,
        agent_args: Iterable[str] = (),
    ) -> None:
        from targets.factory import choose_target

        self.topology = topology
        self.fabric = Fabric(topology)
        self.target = choose_target(target)
        self.state_path = state_path or default_path()
        self.run_dir = self.state_path.parent
        self.topology_file = self.run_dir / "topology.yaml"
        self.with_agents = agents
        self.with_watch = watch
        self.agent_args = list(agent_args)
        self._net: FabricNet | None = None
        self.control = FabricControl(
            self.fabric,
            self.target,
            self.state_path,
            lambda: [s.address for s in self.switches()],
        )
        self.watch: subprocess.Popen[bytes] | None = None
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []
        self.state: TestbedState | None = None
        self.trimming = True
        self.qos_changed = False

    # -- the running fabric ------------------------------------------------------------------

    @property
    def network(self) -> FabricNet:
        """The Mininet network of the fabric (raises :class:`TestbedError` before ``up``)."""
        if self._net is None:
            raise TestbedError("the testbed is not up")
        return self._net

    @property
    def latency_by(self) -> str:
        """What applies the links' latency: ``netem``, ``switch`` (the switchmodel's delay
        lines), ``agents`` (BMv2: the host agents, the whole path's) or ``none``."""
        return self._net.latency_by if self._net is not None else "none"

    def operating_point(self) -> dict[str, Any]:
        """The switches' queue, thresholds and latency, and what applies the latency (for a
        run's results)."""
        return {**operating_point(self.topology), "latency_by": self.latency_by}

    @property
    def mininet(self) -> Mininet:
        """Mininet's own network object (for its CLI)."""
        return self.network.net

    def switches(self) -> list[SwitchHandle]:
        """Every switch, in the fabric's order (none before ``up``)."""
        if self._net is None:
            return []
        return [
            SwitchHandle(name, SwitchAddress(name, sw.grpc_addr, sw.model.device_id), sw.process)
            for name, sw in self._net.switches.items()
        ]

    def switch(self, name: str) -> SwitchHandle:
        """Switch ``name`` (KeyError when the fabric has none of that name)."""
        for handle in self.switches():
            if handle.name == name:
                return handle
        raise KeyError(f"no switch {name} in the running fabric")

    def host(self, name: str) -> HostHandle:
        """Host ``name``."""
        return HostHandle(name, self.network.hosts[name])

    def nic_counters(self) -> list[NicCounters]:
        """Bytes sent so far by every host NIC (NICs without a readable counter are left out)."""
        out = []
        for host in self.fabric.hosts:
            node = self.host(host.name)
            for nic in host.nics:
                text = node.cmd(f"cat /sys/class/net/{nic.intf}/statistics/tx_bytes").strip()
                if text.isdigit():
                    out.append(NicCounters(host.name, nic.plane, nic.intf, int(text)))
        return out

    def processes(self) -> list[ProcessInfo]:
        """The switch processes, the agents and the watch that run now."""
        out = [
            ProcessInfo("switch", s.name, s.process.pid) for s in self.switches() if s.process.pid
        ]
        out += [ProcessInfo("agent", name, p.pid) for name, p in self.agents.items()]
        if self.watch is not None:
            out.append(ProcessInfo("watch", "mrc-ctl watch", self.watch.pid))
        return out

    # -- paths -------------------------------------------------------------------------------

    def control_path(self, host: str) -> Path:
        """The control socket of ``host``'s agent."""
        return self.run_dir / f"{host}.sock"

    @property
    def log_dir(self) -> Path:
        """Logs of switches, agents and the watch."""
        return self.run_dir / "logs"

    def env(self) -> dict[str, str]:
        """Environment for the project's commands: they find this testbed's state file."""
        return {**os.environ, "MRC_TESTBED_STATE": str(self.state_path)}

    # -- up ----------------------------------------------------------------------------------

    def up(self, progress: Progress | None = None) -> None:
        """Bring everything up; on failure, take down what was started and re-raise. From
        here on SIGTERM raises KeyboardInterrupt (:mod:`targets.interrupt`), so that the
        caller's cleanup takes the fabric down."""
        require_root("mrc-testbed up")
        handle_termination()
        say = progress or (lambda _m: None)
        try:
            existing = TestbedState.load(self.state_path)
        except StateError:
            existing = None
        if existing is not None and _alive(existing):
            raise TestbedError(
                f"a testbed is already running (state {self.state_path}): "
                "stop it with 'mrc-testbed down'"
            )
        if existing is not None:
            teardown(self.state_path, say)
        taken = [
            intf
            for intf in fabric_interface_names(self.fabric)
            if Path(f"/sys/class/net/{intf}").exists()
        ]
        if taken:
            raise TestbedError(
                f"interface {taken[0]} already exists: another fabric with these "
                "names is running (stop it with 'mrc-testbed down')"
            )
        try:
            self._up(say)
        except BaseException:
            self.down()
            raise

    def _up(self, say: Progress) -> None:
        from experiments.fabricnet import FabricNet, NetOptions

        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        write_topology(self.topology, self.topology_file)
        say(f"{self.fabric.summary()} (target: {self.target})")
        self._net = net = FabricNet(
            self.fabric, NetOptions(target=self.target, run_dir=self.run_dir)
        )
        started = time.monotonic()
        net.build()
        say(describe_operating_point(self.operating_point()))
        self._save_state()
        net.start()
        say(f"switches: {len(net.switches)} serving P4Runtime ({time.monotonic() - started:.1f} s)")
        self._save_state()
        started = time.monotonic()
        self.push()
        say(f"tables: {len(net.switches)} switches, {time.monotonic() - started:.1f} s")
        if self.with_watch:
            self.start_watch()
        if self.with_agents:
            self.start_agents()
            say(f"agents: {len(self.agents)} hosts ready")
        self._save_state()

    def push(self) -> list[PushReport]:
        """Install every switch's tables (as ``mrc-ctl push``, in-process)."""
        try:
            return self.control.push()
        except ControlError as exc:
            raise TestbedError(f"could not install the tables: {exc}") from None

    def start_watch(self) -> None:
        """Start ``mrc-ctl watch`` (re-installs the tables of a switch that lost them)."""
        log = self._open_log("mrc-ctl-watch.log")
        self.watch = subprocess.Popen(
            [tool("mrc-ctl"), "watch"],
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start_agents(self) -> None:
        """Start ``mrc-host`` in every host's namespace and wait for their control sockets."""
        from host.agent.control_client import ControlClient, ControlError

        for name in self.network.hosts:
            sock = self.control_path(name)
            with contextlib.suppress(FileNotFoundError):
                sock.unlink()
            log = self._open_log(f"{name}.log")
            argv = [
                tool("mrc-host"),
                "--topo",
                str(self.topology_file),
                "--host",
                name,
                "--control",
                str(sock),
                *self.agent_args,
            ]
            if self.latency_by == "agents":  # BMv2 without netem: each path's links' latency
                argv += ["--link-latency-us", f"{self.topology.link_delay_us:g}"]
            self.agents[name] = self.host(name).popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.env()
            )
        deadline = time.monotonic() + AGENT_READY_TIMEOUT
        for name, process in self.agents.items():
            while True:
                if process.poll() is not None:
                    raise TestbedError(
                        f"agent of {name} exited with status "
                        f"{process.returncode}: see {self.log_dir / name}.log\n"
                        + _tail(self.log_dir / f"{name}.log")
                    )
                try:
                    with ControlClient(self.control_path(name), timeout=2.0) as client:
                        client.info()
                    break
                except ControlError:
                    if time.monotonic() > deadline:
                        raise TestbedError(
                            f"agent of {name} not answering on "
                            f"{self.control_path(name)} after "
                            f"{AGENT_READY_TIMEOUT:g} s"
                        ) from None
                    time.sleep(0.1)

    def stop_agents(self) -> None:
        """Stop every host agent."""
        for process in self.agents.values():
            _stop(process)
        self.agents.clear()

    def restart_agents(self) -> None:
        """Stop and start every host agent (a clean slate between experiment phases)."""
        self.stop_agents()
        self.start_agents()
        self._save_state()

    def set_qos(
        self, switch: str, trim: int | None, ecn: int | None, port: int | None = None
    ) -> None:
        """Set the trim and (fixed) ECN thresholds (packets) of a switch, or of one port of it;
        None leaves that one as it is."""
        try:
            self.control.set_qos(switch, trim, ecn, port)
        except ControlError as exc:
            raise TestbedError(f"could not set the QoS thresholds: {exc}") from None

    def reset_qos(self) -> None:
        """Back to the controller's default thresholds on every switch (trimming on)."""
        try:
            self.control.reset_qos()
        except ControlError as exc:
            raise TestbedError(f"could not reset the QoS thresholds: {exc}") from None
        self.trimming = True
        self.qos_changed = False

    def set_trimming(self, on: bool, trim: int | None = None, ecn: int | None = None) -> None:
        """Trimming on (at ``trim`` packets, else the controller's default) or off everywhere.

        ``ecn`` sets a fixed ECN threshold too (default: the controller's ECN marking, left as
        it is). With no thresholds given and trimming already as asked, nothing is pushed.
        """
        if on == self.trimming and trim is None and ecn is None and not self.qos_changed:
            return
        self.reset_qos()
        if not on or trim is not None or ecn is not None:
            t = TRIM_NEVER if not on else trim
            for sw in self.switches():
                self.set_qos(sw.name, t, ecn)
            self.qos_changed = True
        self.trimming = on

    def _open_log(self, name: str) -> IO[bytes]:
        log = open(self.log_dir / name, "ab")  # noqa: SIM115 -- closed in down()
        self._logs.append(log)
        return log

    def _save_state(self) -> None:
        switches = {
            sw.name: SwitchState(
                grpc=sw.address.address,
                device_id=sw.address.device_id,
                pid=sw.process.pid or 0,
                log=str(sw.process.log_path),
            )
            for sw in self.switches()
        }
        processes: list[dict[str, Any]] = [
            {"name": "mrc-testbed", "pid": os.getpid(), "match": _cmdline(os.getpid())}
        ]
        if self._net is not None:
            for name, pid in self._net.node_pids().items():
                processes.append({"name": f"node {name}", "pid": pid, "match": f"mininet:{name}"})
        if self.watch is not None:
            processes.append({"name": "mrc-ctl watch", "pid": self.watch.pid, "match": "mrc-ctl"})
        hosts = {
            name: HostState(pid=p.pid, control=str(self.control_path(name)))
            for name, p in self.agents.items()
        }
        self.state = TestbedState(
            topology=str(self.topology_file),
            target=self.target,
            started=time.time(),
            switches=switches,
            hosts=hosts,
            processes=processes,
        )
        self.state.save(self.state_path)
        register_run(self.state_path)

    def refresh_state(self) -> None:
        """Rewrite the state file (after a switch restart its pid changed)."""
        self._save_state()

    # -- faults ------------------------------------------------------------------------------

    def link_down(self, a: str, b: str) -> None:
        """Fail the cable between nodes ``a`` and ``b``."""
        self.network.link_down(a, b)

    def link_up(self, a: str, b: str) -> None:
        """Repair the cable between nodes ``a`` and ``b``."""
        self.network.link_up(a, b)

    def kill_switch(self, name: str) -> None:
        """Stop switch ``name`` (first half of a reboot)."""
        self.network.kill_switch(name)

    def start_switch(self, name: str) -> None:
        """Start switch ``name`` again; ``mrc-ctl watch`` re-installs its tables."""
        self.network.start_switch(name)
        self._save_state()

    # -- down --------------------------------------------------------------------------------

    def down(self) -> None:
        """Stop agents, watch and switches, remove the network, delete the state file."""
        for process in [*self.agents.values(), *([self.watch] if self.watch else [])]:
            _stop(process)
        self.agents.clear()
        self.watch = None
        if self._net is not None:
            with contextlib.suppress(Exception):
                self._net.stop()
            self._net = None
        for log in self._logs:
            log.close()
        self._logs.clear()
        sweep(self.fabric, self.run_dir)
        with contextlib.suppress(FileNotFoundError):
            self.state_path.unlink()
        forget_run(self.state_path)

    def __enter__(self) -> Testbed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()


def _stop(process: subprocess.Popen[bytes], timeout: float = 3.0) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait()


def _tail(path: Path, n: int = 8) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


# -- teardown after a crash ----------------------------------------------------------------------


def _cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def _alive(state: TestbedState) -> bool:
    """True when the process that wrote ``state`` still runs."""
    for proc in state.processes:
        if proc.get("name") == "mrc-testbed":
            pid = int(proc.get("pid", 0))
            return (
                pid != os.getpid()
                and bool(proc.get("match"))
                and (_cmdline(pid) == proc.get("match"))
            )
    return False


def _kill(pid: int, marker: str, timeout: float = 3.0) -> bool:
    """SIGTERM then SIGKILL ``pid`` if its command line still contains ``marker``."""
    if pid <= 1 or pid == os.getpid() or marker not in _cmdline(pid):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and marker in _cmdline(pid):
        time.sleep(0.05)
    if marker in _cmdline(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return True


def fabric_interface_names(fabric: Fabric) -> list[str]:
    """The root-namespace interfaces of ``fabric``'s switches."""
    return [p.intf for sw in fabric.switches for p in sw.ports]


def node_names(fabric: Fabric) -> list[str]:
    """Every Mininet node name of ``fabric`` (with the management network's switch node)."""
    return [s.name for s in fabric.switches] + [h.name for h in fabric.hosts] + [SWITCH_NODE]


def sweep(fabric: Fabric, run_dir: Path, say: Progress | None = None) -> list[str]:
    """Remove processes and interfaces of ``fabric`` left behind; returns what was removed."""
    removed: list[str] = []
    shells = {f"mininet:{name}" for name in node_names(fabric)}
    intfs = [p.intf for sw in fabric.switches for p in sw.ports]
    intf_args = {f"@{intf}" for intf in intfs}
    run_text = str(run_dir) + "/"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == os.getpid():
            continue
        cmd = _cmdline(pid)
        if not cmd:
            continue
        words = cmd.split()
        if (
            (
                (words and words[-1] in shells)  # a node shell: bash ... mininet:NAME
                or ("mrc-host" in cmd and run_text in cmd)  # an agent of this run directory
                or any("@" in w and w[w.index("@") :] in intf_args for w in words)  # a switch
            )
            and _kill(pid, cmd.split(" ", 1)[0])
        ):
            removed.append(f"process {pid} ({' '.join(words[:3])})")
    present = set(os.listdir("/sys/class/net")) if Path("/sys/class/net").exists() else set()
    host_intfs = [nic.intf for h in fabric.hosts for nic in h.nics]
    for intf in [*intfs, *host_intfs]:
        if intf in present:
            subprocess.run(["ip", "link", "del", "dev", intf], capture_output=True, check=False)
            removed.append(f"interface {intf}")
    if say is not None:
        for item in removed:
            say(f"removed {item}")
    return removed


def teardown(
    state_path: Path | None = None, say: Progress | None = None, topologies: Iterable[Path] = ()
) -> list[str]:
    """``mrc-testbed down``: stop a running testbed and remove everything it left behind."""
    state_path = state_path or default_path()
    removed: list[str] = []
    fabrics: list[Fabric] = []
    try:
        state: TestbedState | None = TestbedState.load(state_path)
    except StateError:
        state = None
    if state is not None:
        for proc in state.processes:  # the 'up' process first: it cleans up after itself
            if proc.get("name") == "mrc-testbed" and _alive(state):
                pid = int(proc.get("pid", 0))
                if _kill(pid, str(proc["match"]), timeout=20.0):
                    removed.append(f"process {pid} (mrc-testbed)")
        for proc in state.processes:
            if proc.get("name") != "mrc-testbed" and _kill(
                int(proc.get("pid", 0)), str(proc.get("match", "?"))
            ):
                removed.append(f"process {proc['pid']} ({proc.get('name')})")
        for name, host in state.hosts.items():
            if _kill(host.pid, "mrc-host"):
                removed.append(f"process {host.pid} (agent {name})")
        for name, sw in state.switches.items():
            if _kill(sw.pid, "switch"):
                removed.append(f"process {sw.pid} (switch {name})")
        with contextlib.suppress(Exception):
            fabrics.append(Fabric(load_topology(state.topology)))
    for path in [*topologies, *shipped_topologies()]:
        with contextlib.suppress(Exception):
            fabrics.append(Fabric(load_topology(path)))
    for fabric in fabrics:
        removed += sweep(fabric, state_path.parent)
    for leftover in [state_path, state_path.with_suffix(".tmp")]:
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()
    forget_run(state_path)
    for sock in state_path.parent.glob("h*.sock"):
        with contextlib.suppress(OSError):
            sock.unlink()
    if say is not None:
        for item in removed:
            say(f"removed {item}")
    return removed


# -- the up / down commands ------------------------------------------------------------------------


def _topology_arg(value: str) -> Path:
    path = Path(value)
    if not path.exists() and not path.suffix and shipped_topology(value).exists():
        return shipped_topology(value)
    return path


def cmd_up(args: argparse.Namespace) -> int:
    """``mrc-testbed up``: start the fabric and keep it running until Ctrl-C or ``down``."""
    topology = load_topology(_topology_arg(args.topo))
    testbed = Testbed(topology, args.target)
    # SIGTERM ('mrc-testbed down') ends the wait below as Ctrl-C does; Mininet's CLI takes a
    # KeyboardInterrupt for a Ctrl-C at its prompt, so under it SIGTERM exits instead
    handle_termination(SystemExit if args.cli else KeyboardInterrupt)
    try:
        testbed.up(progress=print)
        print(
            f"testbed up: state {testbed.state_path}; 'mrc-ctl counters', "
            f"'mrc-host ... --control {testbed.run_dir}/hN.sock'; stop with Ctrl-C or "
            "'mrc-testbed down'"
        )
        if args.cli:
            from experiments.mncli import TestbedCLI

            TestbedCLI(testbed)
        else:
            while True:
                signal.pause()
    except KeyboardInterrupt:
        pass
    except STARTUP_ERRORS as exc:
        print(f"mrc-testbed: {exc}", file=sys.stderr)
        return 1
    finally:
        testbed.down()
        print("testbed down")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    """``mrc-testbed down``: remove everything the testbed started, under the default state
    file and under every state file of the registry of live runs (runs and benchmarks keep
    theirs in their own folders)."""
    require_root("mrc-testbed down")
    extra = [_topology_arg(args.topo)] if args.topo else []
    removed: list[str] = []
    # the registered runs first: a run's own process takes its fabric down best while the
    # fabric is whole, before the sweep of the default state file removes what it finds
    for path in live_runs():
        if path.absolute() != default_path().absolute():
            found = teardown(path, topologies=extra)
            if found:
                print(f"testbed down: a testbed of {path}")
            removed += found
    removed += teardown(default_path(), topologies=extra)
    print(
        f"testbed down: {len(removed)} leftovers removed"
        if removed
        else "testbed down: nothing was running"
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``up`` and ``down`` to the ``mrc-testbed`` command line."""
    from targets.factory import SWITCH_TARGETS

    up = subparsers.add_parser("up", help="start the fabric, tables, watch and host agents")
    up.add_argument(
        "--topo", default="small", help="topology file or shipped name (default: small)"
    )
    up.add_argument(
        "--target",
        default="auto",
        choices=SWITCH_TARGETS,
        help="switch target (auto: BMv2 when simple_switch_grpc and simple_switch_CLI exist)",
    )
    up.add_argument("--cli", action="store_true", help="open the Mininet CLI with testbed commands")
    up.set_defaults(func=cmd_up)
    down = subparsers.add_parser("down", help="remove everything the testbed started")
    down.add_argument(
        "--topo", default=None, help="also sweep the names of this topology (after a crash)"
    )
    down.set_defaults(func=cmd_down)


__all__ = [
    "HostHandle",
    "NicCounters",
    "ProcessInfo",
    "SwitchHandle",
    "Testbed",
    "TestbedError",
    "register",
    "sweep",
    "teardown",
    "tool",
    "write_topology",
]
