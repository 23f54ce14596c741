"""mrc-switch: run the switchmodel on real interfaces, serving P4Runtime (like simple_switch_grpc).

::

    mrc-switch -i 1@t0-p0-r0-eth1 -i 2@t0-p0-r0-eth2 --device-id 1 --grpc-addr 127.0.0.1:50001 \\
        --priority-queues 2 --port-rate-bps 100000000 --queue-depth 64 [--port-rate-bps-of 2=1e9] \\
        [--port-latency-us US] [--port-latency-us-of 1=2] [--mtu BYTES] [--pcap DIR] \
        [--log-level info] [--log-file FILE]

The switch starts without a pipeline (as BMv2 ``--no-p4``): it drops every frame and counts
nothing until a controller sets the mrc_switch P4Info with SetForwardingPipelineConfig. Once
gRPC listens it logs a line starting with ``ready``. SIGTERM or SIGINT stop it cleanly. A bad
flag, a missing interface or a gRPC address in use end it with one line naming the culprit.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from switchmodel.dataplane import DataPlane, PortConfig

MAX_PORT = 510  # bit<9> ports; 511 is the drop port
IFNAME_MAX = 15
LOG_LEVELS = ("debug", "info", "warning", "error")

log = logging.getLogger("switchmodel")


def _interface(text: str) -> tuple[int, str]:
    number, sep, intf = text.partition("@")
    if not sep or not number.isdigit() or not intf:
        raise argparse.ArgumentTypeError(f"'{text}': expected PORT@INTERFACE, e.g. 1@veth0")
    port = int(number)
    if not 0 <= port <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"'{text}': port {port} outside 0..{MAX_PORT}")
    if len(intf) > IFNAME_MAX or "/" in intf or " " in intf:
        raise argparse.ArgumentTypeError(f"'{text}': '{intf}' is not a Linux interface name")
    return port, intf


def _non_negative(what: str, unit: str, zero: str) -> Callable[[str], float]:
    """A parser of a number >= 0 (``what`` in ``unit``; ``zero``: what 0 means)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}': expected {what} in {unit}") from None
        if not value >= 0:
            raise argparse.ArgumentTypeError(f"'{text}': expected {what} >= 0 ({zero})")
        return value

    return parse


_rate = _non_negative("a rate", "bits per second", "0 = not shaped")
_latency = _non_negative("a latency", "microseconds", "0 = none")


def _per_port(value: Callable[[str], float], form: str) -> Callable[[str], tuple[int, float]]:
    """A parser of ``PORT=VALUE`` (``form`` names VALUE in the message)."""

    def parse(text: str) -> tuple[int, float]:
        port, sep, rest = text.partition("=")
        if not sep or not port.isdigit():
            raise argparse.ArgumentTypeError(f"'{text}': expected PORT={form}")
        return int(port), value(rest)

    return parse


def _add_port_option(
    parser: argparse.ArgumentParser,
    flag: str,
    value: Callable[[str], float],
    form: str,
    every: str,
    metavar: str,
) -> None:
    """``--FLAG VALUE`` for every port (default 0) and ``--FLAG-of PORT=VALUE`` (repeatable)."""
    parser.add_argument(flag, type=value, default=0.0, metavar=metavar, help=every)
    parser.add_argument(
        f"{flag}-of",
        type=_per_port(value, form),
        action="append",
        default=[],
        metavar=f"PORT={metavar}",
        help="one port's value (repeatable)",
    )


def _positive(what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not text.isdigit() or int(text) < 1:
            raise argparse.ArgumentTypeError(f"'{text}': expected {what} (an integer >= 1)")
        return int(text)

    return parse


def _grpc_addr(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"'{text}': expected HOST:PORT, e.g. 127.0.0.1:9559")
    return text


def build_parser() -> argparse.ArgumentParser:
    """The command line of mrc-switch."""
    parser = argparse.ArgumentParser(
        prog="mrc-switch",
        description="The mrc_switch P4 pipeline in Python, served over P4Runtime "
        "(a second target next to BMv2 simple_switch_grpc).",
    )
    parser.add_argument(
        "-i",
        "--interface",
        action="append",
        type=_interface,
        default=[],
        metavar="PORT@IFACE",
        help="attach interface IFACE as port PORT (repeat for every port)",
    )
    parser.add_argument("--device-id", type=int, default=0, help="P4Runtime device id (default 0)")
    parser.add_argument(
        "--grpc-addr",
        type=_grpc_addr,
        default="127.0.0.1:9559",
        help="P4Runtime server address (default 127.0.0.1:9559)",
    )
    parser.add_argument(
        "--priority-queues",
        type=_positive("a number of queues"),
        default=2,
        help="strict-priority queues per egress port (default 2: priority 1 is served first)",
    )
    _add_port_option(
        parser, "--port-rate-bps", _rate, "BITS_PER_SECOND",
        "shape every egress port to BPS bits/s (default 0: not shaped)", "BPS",
    )  # fmt: skip
    _add_port_option(
        parser, "--port-latency-us", _latency, "MICROSECONDS",
        "hold what leaves every egress port US microseconds before the wire: the link's "
        "latency, where the kernel has no netem (default 0)", "US",
    )  # fmt: skip
    parser.add_argument(
        "--port-links-of",
        type=_per_port(_positive("a number of links"), "a number of links"),
        action="append",
        default=[],
        metavar="PORT=LINKS",
        help="links a port's delay line stands for (default 1): a frame in it also waits its "
        "serialisation at the port's rate on each (repeatable)",
    )
    parser.add_argument(
        "--queue-depth",
        type=_positive("a depth in packets"),
        default=64,
        help="packets each priority queue of a port holds (default 64)",
    )
    parser.add_argument(
        "--control-queue-depth",
        type=_positive("a depth in packets"),
        default=None,
        help="packets each high-priority queue (headers, ACKs, NACKs) holds instead "
        "(default: --queue-depth)",
    )
    parser.add_argument(
        "--mtu",
        type=_positive("an MTU in bytes"),
        default=None,
        help="largest IPv6 packet accepted (default: each interface's MTU); "
        "longer frames are dropped as OVERSIZE",
    )
    parser.add_argument(
        "--pcap",
        type=Path,
        default=None,
        metavar="DIR",
        help="write IFACE_in.pcap and IFACE_out.pcap per port into DIR",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        metavar="FILE",
        help="profile the data path (cProfile) and write the stats to FILE at exit",
    )
    parser.add_argument(
        "--stats-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="rewrite FILE (JSON) every 0.1 s with the service lag of the queues and the "
        "process's scheduling gap (read by a run's fidelity sampler)",
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="info")
    parser.add_argument("--log-file", type=Path, default=None, help="log here instead of stderr")
    return parser


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[int, PortConfig]:
    from switchmodel.dataplane import PortConfig

    ports: dict[int, PortConfig] = {}
    seen: set[str] = set()
    for number, intf in args.interface:
        if number in ports:
            parser.error(f"-i: port {number} given twice")
        if intf in seen:
            parser.error(f"-i: interface '{intf}' given twice")
        seen.add(intf)
        latency = args.port_latency_us * 1e-6
        ports[number] = PortConfig(number, intf, args.port_rate_bps, args.mtu, latency)
    for number, rate in args.port_rate_bps_of:
        if number not in ports:
            parser.error(f"--port-rate-bps-of: port {number} is not one of the -i ports")
        ports[number].rate_bps = rate
    for number, latency in args.port_latency_us_of:
        if number not in ports:
            parser.error(f"--port-latency-us-of: port {number} is not one of the -i ports")
        ports[number].latency_s = latency * 1e-6
    for number, links in args.port_links_of:
        if number not in ports:
            parser.error(f"--port-links-of: port {number} is not one of the -i ports")
        ports[number].links = int(links)
    if args.device_id < 0:
        parser.error(f"--device-id {args.device_id}: expected >= 0")
    return ports


def _setup_logging(level: str, log_file: Path | None) -> None:
    handler: logging.Handler
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(log_file)
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper()))


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``mrc-switch``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    ports = _check(parser, args)
    _setup_logging(args.log_level, args.log_file)
    # imported once the command line is known good: a typo is answered at once
    from switchmodel.dataplane import DataPlane, DataPlaneError
    from switchmodel.server import AddressInUse, P4RuntimeServicer, serve

    def fail(message: str) -> int:
        print(f"mrc-switch: {message}", file=sys.stderr)
        if args.log_file is not None:
            log.error("%s", message)
        return 1

    dataplane = DataPlane(
        ports,
        priorities=args.priority_queues,
        queue_depth=args.queue_depth,
        control_queue_depth=args.control_queue_depth,
        pcap_dir=args.pcap,
        profile=args.profile,
    )
    try:
        dataplane.open()
    except DataPlaneError as exc:
        return fail(str(exc))
    servicer = P4RuntimeServicer(dataplane, args.device_id)
    try:
        server = serve(servicer, args.grpc_addr)
    except AddressInUse as exc:
        dataplane.close()
        return fail(str(exc))

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    dataplane.start()
    port_list = " ".join(f"{n}@{p.intf}" for n, p in sorted(ports.items())) or "none"
    log.info(
        "ready: device %d, P4Runtime on %s, ports %s, %d priority queues of %d packets, "
        "no pipeline yet",
        args.device_id,
        args.grpc_addr,
        port_list,
        args.priority_queues,
        args.queue_depth,
    )
    try:
        if args.stats_file is None:
            while not stop.wait(3600):
                pass
        else:
            _write_stats(dataplane, args.stats_file, stop)
    finally:
        log.info("stopping")
        server.stop(grace=0.5).wait()
        for number, stats in sorted(dataplane.port_stats().items()):
            log.info("port %d (%s): %s", number, ports[number].intf, stats)
        dataplane.stop()
    return 0


STATS_INTERVAL = 0.1  # seconds between --stats-file rewrites
STATS_WINDOWS = 20  # the service lag of this many intervals is in the file


def _write_stats(dataplane: DataPlane, path: Path, stop: threading.Event) -> None:
    """Rewrite ``path`` every :data:`STATS_INTERVAL` until ``stop``: the queues' service lag
    and the process's scheduling gap (``windows``: the end time, the largest service lag and
    how much later than asked this writer woke up, of each recent interval, on the monotonic
    clock, so a reader at any pace finds the figures of its own interval).
    The gap shows a process that gets no CPU (starved, throttled, stopped) even when its
    queues are empty.

    The file is rewritten in place, with one ``pwrite`` of the whole text padded with spaces
    so that it never shrinks, not through a temporary file and a rename: ten renames a second
    cost an idle switch several times the CPU of the rest of its work. A reader sees the
    previous figures or the new ones (a read that overlaps the write may not parse: the
    reader then has no figures for that interval)."""
    import json
    import os
    import time
    from collections import deque

    windows: deque[tuple[float, float, float]] = deque(maxlen=STATS_WINDOWS)
    last = time.monotonic()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as exc:
        log.warning("stats file %s: %s", path, exc.strerror)
        return
    size = 0  # the longest text written so far: shorter ones are padded to it
    try:
        while not stop.wait(STATS_INTERVAL):
            now = time.monotonic()
            gap, last = max(0.0, now - last - STATS_INTERVAL), now
            figures = dataplane.service_figures()
            windows.append((now, figures.pop("service_lag_max_s"), gap))
            text = (json.dumps({**figures, "windows": list(windows)}) + "\n").encode()
            size = max(size, len(text))
            os.pwrite(fd, text.ljust(size), 0)
    except OSError as exc:
        log.warning("stats file %s: %s", path, exc.strerror)
    finally:
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main())
