"""Back-to-back agent networks for tests and benchmarks: hosts in namespaces, one veth per plane.

:class:`BackToBack` puts each of a few fabric hosts (two hosts of the same rack, e.g. ``h0``
and ``h1`` of ``topologies/small.yaml``) in its own network namespace and joins their NICs of
each plane with a veth pair, using the fabric model's interface names (``h0-p0`` <-> ``h1-p0``).
There is no switch in between, so the agents run with ``--direct`` (they accept frames whose
carrier still holds the leaf's uSID). The agents are real ``mrc-host`` processes started inside
the namespaces. Everything made here is named with the given prefix and removed by
:meth:`BackToBack.close`, also after a failure.

Used by tests/host/test_agent*.py (prefix ``ag``) and benchmarks/agent_pps.py (prefix ``agb``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from host.control_client import ControlClient, ControlUnavailable
from topologies import Fabric

READY_TIMEOUT = 20.0


class TestnetError(RuntimeError):
    """The namespaces, links or agents could not be set up."""


def netns_available() -> str | None:
    """None when root and ``ip netns`` are usable, else the reason they are not."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, AF_PACKET sockets)"
    if shutil.which("ip") is None:
        return "needs iproute2 ('ip' not on PATH)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"'ip netns' does not work here: {probe.stderr.strip()}"
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise TestnetError(f"ip {' '.join(args)}: {done.stderr.strip()}")


class BackToBack:
    """Fabric hosts in namespaces ``{prefix}{pid}-{host}``, their plane NICs joined by veths."""

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
        self.namespaces: dict[str, str] = {}
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}

    def namespace(self, host: str) -> str:
        """The namespace name of ``host``."""
        return f"{self.tag}-{host}"

    def control(self, host: str) -> Path:
        """The control socket path of ``host``'s agent."""
        return self.workdir / f"{host}.sock"

    def create(self) -> BackToBack:
        """Make the namespaces and one veth pair per plane between the two hosts."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        a, b = (self.fabric.host(h) for h in self.hosts)
        for host in (a, b):
            ns = self.namespace(host.name)
            _ip("netns", "add", ns)
            self.namespaces[host.name] = ns
            _ip("-n", ns, "link", "set", "lo", "up")
        for plane in range(self.fabric.topology.planes):
            na, nb = a.nic(plane), b.nic(plane)
            _ip(
                "link", "add", na.intf, "netns", self.namespace(a.name), "address", na.mac,
                "type", "veth", "peer", "name", nb.intf, "netns", self.namespace(b.name),
                "address", nb.mac,
            )  # fmt: skip
        return self

    def exec_argv(self, host: str, argv: list[str]) -> list[str]:
        """``argv`` run inside ``host``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(host), *argv]

    def run(
        self, host: str, argv: list[str], timeout: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        """Run a command in ``host``'s namespace and wait for it."""
        return subprocess.run(
            self.exec_argv(host, argv), capture_output=True, text=True, timeout=timeout, check=False
        )

    def start_agent(self, host: str, *extra: str, wait: bool = True) -> subprocess.Popen[bytes]:
        """Start ``mrc-host --direct`` for ``host`` in its namespace; wait until it answers."""
        log = self.workdir / f"{host}.log"
        self.logs[host] = log
        argv = [
            sys.executable, "-m", "host.agent_cli", "--topo", str(self.topo_file),
            "--host", host, "--control", str(self.control(host)), "--direct",
            "--log-file", str(log), *extra,
        ]  # fmt: skip
        proc = subprocess.Popen(
            self.exec_argv(host, argv),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=Path(__file__).resolve().parent.parent,
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
        for ns in self.namespaces.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        self.namespaces.clear()

    def __enter__(self) -> BackToBack:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["BackToBack", "TestnetError", "netns_available"]
