"""Switch processes: what every switch target of the testbed has in common.

A switch of the testbed is one process that owns some interfaces (``port number -> interface
name``; none at all for a switch that only serves P4Runtime), serves P4Runtime on ``grpc_addr``
with a given ``device_id`` and shapes every egress port to ``rate_bps`` with a bounded queue of
``queue_depth`` packets in ``priority_queues`` classes. :class:`SwitchProcess` is a dataclass of
that configuration: it validates it, runs the process with its output in a log file and waits
until the gRPC port accepts connections. Subclasses are dataclasses too: they add their own
keyword-only fields and say how the command line looks (:meth:`SwitchProcess.command`) and, if
the target needs it, what to configure once the process is up (:meth:`SwitchProcess.configure`)::

    switch = Bmv2Switch("t0-p0-r0", {1: "t0-p0-r0-eth1", 2: "t0-p0-r0-eth2"}, device_id=1,
                        grpc_addr="127.0.0.1:50001", thrift_port=9091, rate_bps=100_000_000,
                        queue_depth=64, log_dir=Path("logs"))
    switch.start()
    switch.wait_ready(timeout=10.0)   # raises SwitchStartError with the log tail on failure
    ...
    switch.stop()

Two subclasses exist: :class:`targets.bmv2.Bmv2Switch` (simple_switch_grpc) and
:class:`targets.model.ModelSwitch` (mrc-switch); :func:`targets.factory.fabric_switch` makes
either for a switch of the fabric.
"""

from __future__ import annotations

import abc
import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import IO

StrPath = str | os.PathLike[str]

MAX_PORT = 510  # v1model egress_spec is 9 bits and 511 is BMv2's drop port
IFNAME_MAX = 15  # Linux interface names


class SwitchConfigError(ValueError):
    """A switch was described with a value it cannot run with."""


class SwitchStartError(RuntimeError):
    """A switch process did not come up; the message carries the end of its log."""

    def __init__(self, name: str, reason: str, log_tail: str) -> None:
        self.name = name
        self.reason = reason
        self.log_tail = log_tail
        tail = log_tail.strip() or "(log is empty)"
        super().__init__(f"switch {name}: {reason}\n--- last lines of its log ---\n{tail}")


def parse_grpc_addr(addr: str) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` for IPv6) into host and port, with a clear error."""
    host, sep, port_text = addr.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise SwitchConfigError(f"grpc_addr {addr!r}: expected HOST:PORT, e.g. 127.0.0.1:50001")
    return host.strip("[]"), int(port_text)


@dataclass(eq=False, repr=False)
class SwitchProcess(abc.ABC):
    """One switch process: configuration, start, readiness, stop and its log."""

    #: what the process is, for messages ("BMv2", "switchmodel")
    kind = "switch"
    #: True when an interface taken down stalls the whole process (BMv2's libpcap reader): a
    #: failed link of such a switch keeps its interfaces up and drops instead
    interface_down_stalls = False

    name: str
    ports: Mapping[int, str]  # port number -> interface name
    device_id: int
    grpc_addr: str  # where it serves P4Runtime, HOST:PORT
    _: KW_ONLY
    priority_queues: int = 2  # strict-priority classes of every egress port
    rate_bps: int | None = None  # egress shaping of every port (None: none)
    queue_depth: int | None = None  # packets an egress queue holds (None: the target's own)
    #: packets a port's high-priority queues hold (None: ``queue_depth``); headers, ACKs and
    #: NACKs are small: topologies.operating.header_queue_depth
    control_queue_depth: int | None = None
    mtu: int | None = None  # largest IP packet a port carries (None: the target's own)
    pcap_dir: StrPath | None = None  # where per-port captures go (None: no capture)
    log_dir: StrPath | None = None  # where the log goes (None: a temporary directory)
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _log: IO[bytes] | None = field(default=None, init=False)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        """Check the configuration; :class:`SwitchConfigError` names the field."""
        name = self.name
        if not name:
            raise SwitchConfigError("name: expected a non-empty switch name")
        for number, intf in self.ports.items():
            if not isinstance(number, int) or not 1 <= number <= MAX_PORT:
                raise SwitchConfigError(
                    f"switch {name}: port {number!r}: expected a port number 1..{MAX_PORT}"
                )
            if not intf or len(intf) > IFNAME_MAX or "@" in intf or " " in intf:
                raise SwitchConfigError(
                    f"switch {name}: port {number} interface {intf!r}: expected a Linux "
                    f"interface name of 1..{IFNAME_MAX} characters"
                )
        if len(set(self.ports.values())) != len(self.ports):
            raise SwitchConfigError(f"switch {name}: ports: an interface is used twice")
        self.ports = dict(sorted(self.ports.items()))
        parse_grpc_addr(self.grpc_addr)
        for what, value, low in (
            ("device_id", self.device_id, 0),
            ("priority_queues", self.priority_queues, 1),
            ("rate_bps", self.rate_bps, 1),
            ("queue_depth", self.queue_depth, 1),
            ("control_queue_depth", self.control_queue_depth, 1),
            ("mtu", self.mtu, 64),
        ):
            if value is not None and value < low:
                raise SwitchConfigError(f"switch {name}: {what} {value}: expected at least {low}")
        if self.priority_queues > 8:
            raise SwitchConfigError(
                f"switch {name}: priority_queues {self.priority_queues}: expected 1..8"
            )

    # -- what subclasses provide -----------------------------------------------------------

    @abc.abstractmethod
    def command(self) -> list[str]:
        """The command line that runs this switch."""

    def configure(self) -> None:  # noqa: B027 -- optional hook, most targets need nothing
        """Runtime configuration once the process accepts connections (default: none)."""

    def ready(self) -> bool:
        """True once the switch serves P4Runtime: by default, its gRPC port accepts."""
        host, port = parse_grpc_addr(self.grpc_addr)
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            return False

    # -- files -----------------------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        """The file that receives the process's standard output and error."""
        return self._log_dir() / f"{self.name}.log"

    @property
    def stats_path(self) -> Path | None:
        """A JSON file the process rewrites with its service lag while it runs (None: the
        target writes none; read by experiments.fidelity)."""
        return None

    def _log_dir(self) -> Path:
        if self.log_dir is not None:
            return Path(self.log_dir)
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix=f"mrc-{self.name}-")
        return Path(self._tmp.name)

    def log_tail(self, n: int = 20) -> str:
        """The last ``n`` lines the switch wrote to its log (empty before it ran)."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(0, os.SEEK_END)
                size = log.tell()
                log.seek(max(0, size - 64 * 1024))
                lines = log.read().decode(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        return "\n".join(lines[-n:])

    # -- life cycle ------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """True while the process runs."""
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The process id, once started."""
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        """Start the process (in its own session), with its output appended to the log."""
        if self.alive:
            raise RuntimeError(f"switch {self.name} is already running (pid {self.pid})")
        argv = self.command()
        log_dir = self._log_dir()
        log_dir.mkdir(parents=True, exist_ok=True)
        if self.pcap_dir is not None:
            Path(self.pcap_dir).mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 -- closed in stop()
        self._log.write(f"# {self.kind} {self.name}: {' '.join(argv)}\n".encode())
        self._log.flush()
        try:
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            self._log.close()
            self._log = None
            raise SwitchStartError(self.name, f"cannot run {argv[0]}: {exc}", "") from exc

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Wait until the switch serves P4Runtime, then :meth:`configure` it.

        Raises :class:`SwitchStartError` (with the log tail) if the process exits or is not
        ready within ``timeout`` seconds.
        """
        if self._process is None:
            raise RuntimeError(f"switch {self.name}: wait_ready() before start()")
        deadline = time.monotonic() + timeout
        delay = 0.02
        while True:
            code = self._process.poll()
            if code is not None:
                raise SwitchStartError(
                    self.name, f"{self.kind} process exited with status {code}", self.log_tail()
                )
            if self.ready():
                break
            if time.monotonic() >= deadline:
                raise SwitchStartError(
                    self.name,
                    f"not serving P4Runtime on {self.grpc_addr} after {timeout:g} s",
                    self.log_tail(),
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.25)
        self.configure()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the process (SIGTERM, then SIGKILL after ``timeout``); safe to call twice."""
        self._end(grace=timeout)

    def kill(self) -> None:
        """Kill the process at once (SIGKILL): a switch that crashes or loses power forwards
        nothing from that moment, where :meth:`stop`'s clean shutdown would keep forwarding
        while it winds down."""
        self._end(grace=None)

    def _end(self, grace: float | None) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            if grace is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(grace)
                except subprocess.TimeoutExpired:
                    grace = None
            if grace is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> SwitchProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.alive else "stopped"
        return (
            f"<{type(self).__name__} {self.name} device {self.device_id} {self.grpc_addr} {state}>"
        )
