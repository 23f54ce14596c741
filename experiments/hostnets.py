"""Back-to-back agent networks for tests and benchmarks: hosts in namespaces, one veth per plane.

:class:`BackToBack` puts each of a few fabric hosts (two hosts of the same rack, e.g. ``h0``
and ``h1`` of ``topologies/small.yaml``) in its own network namespace and joins their NICs of
each plane with a veth pair, using the fabric model's interface names (``h0-p0`` <-> ``h1-p0``).
There is no switch in between, so the agents run with ``--direct`` (they accept frames whose
carrier still holds the leaf's uSID). The agents are real ``mrc-host`` processes started inside
the namespaces. Everything made here is named with the given prefix; the namespaces and veths
are a :class:`targets.lab.NetnsLab`, removed by :meth:`BackToBack.close`, also after a failure.

:class:`SwitchedRack` is the same with the real data plane in between: the rack's leaf of every
plane (``t0-p{plane}-r{rack}``) runs as an ``mrc-switch`` process in a third namespace, wired
with the fabric's switch interface names and MACs (the process is
:func:`targets.factory.fabric_switch`'s) and given its tables by the controller
(``controller.push``). The agents then run without ``--direct``: frames arrive with the
carrier the switch shifted, exactly as in the testbed. ``python -m experiments.hostnets
switches ...`` is the small server that runs inside the switch namespace (starts the switches,
pushes their tables, prints ``switches ready``, stops them on SIGTERM).

Used by tests/host/test_agent*.py (prefix ``ag``) and benchmarks/agent_pps.py (prefix ``agb``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from host.agent.control_client import ControlClient, ControlUnavailable
from targets.lab import NetnsLab, netns_argv, netns_available
from topologies import Fabric

READY_TIMEOUT = 20.0
REPO = Path(__file__).resolve().parent.parent


class TestnetError(RuntimeError):
    """The agents or switches could not be started."""


class BackToBack:
    """Fabric hosts in namespaces ``{prefix}{pid}-{host}``, their plane NICs joined by veths."""

    #: the agents accept frames whose carrier still holds the leaf's uSID (no switch between)
    direct = True

    def __init__(
        self,
        fabric: Fabric,
        topo_file: Path,
        hosts: tuple[str, str] = ("h0", "h1"),
        prefix: str = "ag",
        workdir: Path | None = None,
    ) -> None:
        self.fabric = fabric
        self.topo_file = topo_file
        self.hosts = hosts
        self.prefix = prefix
        self.tag = f"{prefix}{os.getpid()}"
        self.workdir = workdir or Path(f"/tmp/{self.tag}")
        self.lab = NetnsLab()
        self.namespaces: dict[str, str] = {}
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}

    def namespace(self, host: str) -> str:
        """The namespace name of ``host``."""
        return f"{self.tag}-{host}"

    def control(self, host: str) -> Path:
        """The control socket path of ``host``'s agent."""
        return self.workdir / f"{host}.sock"

    def _add_namespaces(self, *names: str) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for name in names:
            self.namespaces[name] = self.lab.add_netns(self.namespace(name))

    def create(self) -> BackToBack:
        """Make the namespaces and one veth pair per plane between the two hosts.

        The NICs are left as the kernel makes them: the agents configure their own."""
        self._add_namespaces(*self.hosts)
        a, b = (self.fabric.host(h) for h in self.hosts)
        for plane in range(self.fabric.topology.planes):
            na, nb = a.nic(plane), b.nic(plane)
            self.lab.add_veth(
                na.intf, nb.intf, a_netns=self.namespace(a.name), b_netns=self.namespace(b.name),
                macs=(na.mac, nb.mac), configure=False,
            )  # fmt: skip
        return self

    def exec_argv(self, host: str, argv: list[str]) -> list[str]:
        """``argv`` run inside ``host``'s namespace."""
        return netns_argv(self.namespace(host), argv)

    def run(
        self, host: str, argv: list[str], timeout: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        """Run a command in ``host``'s namespace and wait for it."""
        return subprocess.run(
            self.exec_argv(host, argv), capture_output=True, text=True, timeout=timeout, check=False
        )

    def start_agent(self, host: str, *extra: str, wait: bool = True) -> subprocess.Popen[bytes]:
        """Start ``mrc-host`` for ``host`` in its namespace (``--direct`` when :attr:`direct`);
        wait until it answers."""
        log = self.workdir / f"{host}.log"
        self.logs[host] = log
        argv = [
            sys.executable, "-m", "host.agent.cli", "--topo", str(self.topo_file),
            "--host", host, "--control", str(self.control(host)), "--log-file", str(log),
            *(["--direct"] if self.direct else []), *extra,
        ]  # fmt: skip
        proc = subprocess.Popen(
            self.exec_argv(host, argv),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=REPO,
        )
        self.agents[host] = proc
        if wait:
            self.wait_ready(host)
        return proc

    def wait_ready(self, host: str, timeout: float = READY_TIMEOUT) -> None:
        """Wait until ``host``'s agent answers ``info`` on its control socket."""
        proc = self.agents[host]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise TestnetError(f"agent {host} exited ({proc.returncode}): {err.strip()}")
            try:
                with ControlClient(self.control(host), timeout=2.0) as client:
                    client.info()
                return
            except ControlUnavailable:
                time.sleep(0.05)
        raise TestnetError(f"agent {host} did not answer on {self.control(host)} in {timeout} s")

    def client(self, host: str, timeout: float = 10.0) -> ControlClient:
        """A control client of ``host``'s agent."""
        return ControlClient(self.control(host), timeout=timeout)

    def stop_agent(self, host: str, timeout: float = 10.0) -> int | None:
        """Stop ``host``'s agent (SIGTERM, then SIGKILL); returns its exit code."""
        proc = self.agents.pop(host, None)
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
        return proc.returncode

    def close(self) -> None:
        """Stop the agents and delete the namespaces (and with them the veths)."""
        for host in list(self.agents):
            with contextlib.suppress(Exception):
                self.stop_agent(host)
        self.lab.cleanup()
        self.namespaces.clear()

    def __enter__(self) -> BackToBack:
        try:
            return self.create()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()


class SwitchedRack(BackToBack):
    """Two hosts of one rack and, per plane, their leaf as an ``mrc-switch`` in namespace ``-sw``."""

    direct = False  # the leaves consume the uSIDs
    switch_proc: subprocess.Popen[str] | None = None  # the switch server, once started
    leaves: list[str]  # the leaves' names, one per plane, once created

    def create(self) -> SwitchedRack:
        """Namespaces for the hosts and the switches; veths host NIC <-> leaf port per plane."""
        self.leaves = []
        a, b = (self.fabric.host(h) for h in self.hosts)
        if a.rack != b.rack:
            raise TestnetError(f"{a.name} and {b.name} are in different racks: expected one rack")
        self._add_namespaces(a.name, b.name, "sw")
        sw_ns = self.namespaces["sw"]
        for plane in range(self.fabric.topology.planes):
            leaf = self.fabric.switch(Fabric.t0_name(plane, a.rack))
            self.leaves.append(leaf.name)
            for host in (a, b):
                nic = host.nic(plane)
                port = leaf.port_to(host.name)
                self.lab.add_veth(
                    nic.intf, port.intf, a_netns=self.namespace(host.name), b_netns=sw_ns,
                    macs=(nic.mac, port.mac), configure=False,
                )  # fmt: skip
                self.lab.configure(port.intf, sw_ns, mtu=self.fabric.topology.link_mtu)
        return self

    def start_switches(self, timeout: float = 60.0) -> None:
        """Run the leaves in the switch namespace and push their tables; wait until ready."""
        log = self.workdir / "switches.log"
        argv = [
            sys.executable, "-m", "experiments.hostnets", "switches", "--topo", str(self.topo_file),
            "--workdir", str(self.workdir), "--hosts", ",".join(self.hosts), *self.leaves,
        ]  # fmt: skip
        self.switch_proc = subprocess.Popen(
            netns_argv(self.namespaces["sw"], argv),
            stdout=subprocess.PIPE,
            stderr=open(log, "w"),  # noqa: SIM115 -- the child keeps it
            text=True,
            cwd=REPO,
        )
        assert self.switch_proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.switch_proc.stdout.readline()
            if not line:
                break
            if line.startswith("switches ready"):
                return
        raise TestnetError(f"switches did not start: {log.read_text()[-2000:]}")

    def close(self) -> None:
        """Stop agents and switches, delete the namespaces."""
        for host in list(self.agents):
            with contextlib.suppress(Exception):
                self.stop_agent(host)
        if self.switch_proc is not None and self.switch_proc.poll() is None:
            self.switch_proc.send_signal(signal.SIGTERM)
            try:
                self.switch_proc.wait(15)
            except subprocess.TimeoutExpired:
                self.switch_proc.kill()
                self.switch_proc.wait()
        super().close()


def serve_switches(argv: list[str]) -> int:
    """Inside the switch namespace: run leaves as mrc-switch, push their tables, wait."""
    import argparse

    from controller.entries import switch_tables
    from controller.p4info import P4Info, default_p4info_path
    from controller.push import SwitchAddress, push_switch
    from targets.factory import fabric_switch
    from targets.process import SwitchProcess
    from topologies import load_topology

    parser = argparse.ArgumentParser(prog="python -m experiments.hostnets switches")
    parser.add_argument("--topo", type=Path, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--hosts", required=True, help="hosts whose ports are wired, h0,h1")
    parser.add_argument("leaves", nargs="+")
    args = parser.parse_args(argv)
    fabric = Fabric(load_topology(args.topo))
    hosts = set(args.hosts.split(","))
    info = P4Info.load(path=default_p4info_path())
    switches: list[SwitchProcess] = []
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        for name in args.leaves:
            leaf = fabric.switch(name)
            ports = {p.number: p.intf for p in leaf.ports if p.peer in hosts}
            switch = fabric_switch(
                "model", fabric, name, ports=ports, quiet=True, log_dir=args.workdir
            )
            switch.start()
            switches.append(switch)
            switch.wait_ready(30)
            report = push_switch(
                SwitchAddress(name, switch.grpc_addr, leaf.device_id),
                info,
                switch_tables(fabric, leaf),
            )
            if not report.ok:
                print(f"push {name}: {report.summary()}", file=sys.stderr, flush=True)
                return 1
            print(f"pushed {report.summary()}", file=sys.stderr, flush=True)
        print("switches ready", flush=True)
        while not stop:
            signal.pause()
    finally:
        for switch in switches:
            switch.stop()
    return 0


__all__ = ["BackToBack", "SwitchedRack", "TestnetError", "netns_available"]


if __name__ == "__main__":
    if sys.argv[1:2] == ["switches"]:
        sys.exit(serve_switches(sys.argv[2:]))
    print("usage: python -m experiments.hostnets switches --topo F --workdir D --hosts h0,h1 LEAF...",
          file=sys.stderr)  # fmt: skip
    sys.exit(2)
