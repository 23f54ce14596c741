"""mrc-host: run the MRC host agent, or talk to a running one over its control socket.

Run an agent (inside the host's network namespace, as root)::

    mrc-host --topo topologies/small.yaml --host h0 [--control /run/mrc-testbed/h0.sock]
             [--cc nscc] [--cc-param NAME=VALUE] [--stack-profile uet] [--ev-count 128] [--log-file F] [--stats-file F] [--pcap F] [--direct]

Control a running agent (``--control PATH``, or ``--host h0`` for the default socket path)::

    mrc-host info|stats|regions|quit --host h1
    mrc-host register --host h1 rx 1048576
    mrc-host transfer --host h0 --peer h1 --addr ADDR --rkey RKEY --size 1048576 [--seed 7]
    mrc-host wait --host h0 1 2 [--timeout 30]
    mrc-host paths --host h0 [--peer h1] [--policy mrc]
    mrc-host set-ev --host h0 --peer h1 --path p0 DENIED
    mrc-host ev-format --host h0 stev --fields 8 4 4
    mrc-host ev-events --host h0 --since 0
    mrc-host received --host h1 [--since 0] [--for 5]
    mrc-host probe --host h0 --peer h1 --plane 1 0x1234 0x5678
    mrc-host verify --host h1 rx --seed 7 [--size N]

Every client command prints the agent's JSON reply; errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from host.agent.agent import Agent, AgentError, AgentOptions, default_control_path
from host.agent.control_client import ControlClient, ControlError
from host.agent.nic_setup import SetupError, require_root
from host.transport.cc import DEFAULT_CC, CcProfile
from host.transport.cc import available as cc_available
from host.transport.cc import create as cc_create
from host.transport.config import LEGACY_PROFILE, STACK_PROFILES, UET_PROFILE
from host.transport.policy import HOST_POLICIES
from topologies import Fabric, TopologyError, load_topology
from topologies.config import shipped_topology

CLIENT_COMMANDS = (
    "info",
    "stats",
    "regions",
    "register",
    "transfer",
    "wait",
    "paths",
    "set-ev",
    "ev-format",
    "ev-profiles",
    "ev-events",
    "received",
    "probe",
    "verify",
    "quit",
)


def _topology_path(text: str) -> Path:
    path = Path(text)
    if (
        not path.exists()
        and "/" not in text
        and shipped_topology(text.removesuffix(".yaml")).exists()
    ):
        return shipped_topology(text.removesuffix(".yaml"))
    return path


def agent_parser() -> argparse.ArgumentParser:
    """Options of ``mrc-host`` when it runs an agent."""
    parser = argparse.ArgumentParser(
        prog="mrc-host",
        description="Run the MRC transport on a host's plane NICs "
        f"(or control a running agent: mrc-host {{{','.join(CLIENT_COMMANDS)}}} --help).",
    )
    parser.add_argument("--topo", required=True, help="topology YAML file (or a shipped name)")
    parser.add_argument("--host", required=True, help="this host's name in the topology (h0, ...)")
    parser.add_argument(
        "--control", type=Path, help="control socket path (default /run/mrc-testbed/HOST.sock)"
    )
    parser.add_argument(
        "--cc", default=DEFAULT_CC, help=f"congestion control (default {DEFAULT_CC}; UET: nscc)"
    )
    parser.add_argument(
        "--cc-param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="congestion control parameter, e.g. max_cwnd=512 or window=256 (repeatable)",
    )
    parser.add_argument(
        "--stack-profile",
        default=UET_PROFILE,
        choices=tuple(STACK_PROFILES),
        help=f"the transport's rules: {UET_PROFILE} (default: NSCC fed as UET feeds it) or "
        f"{LEGACY_PROFILE} (the testbed's earlier rules, to compare)",
    )
    parser.add_argument("--ev-count", type=int, default=128, help="EVs per QP (default 128)")
    parser.add_argument("--log-file", type=Path, help="log here instead of stderr")
    parser.add_argument(
        "--log-level", default="info", choices=("debug", "info", "warning", "error")
    )
    parser.add_argument("--stats-file", type=Path, help="rewrite statistics JSON here every second")
    parser.add_argument("--pcap", type=Path, help="capture every MRC frame sent and received")
    parser.add_argument(
        "--direct",
        action="store_true",
        help="test/debug: accept frames whose carrier still holds uSIDs (hosts back to back)",
    )
    parser.add_argument(
        "--no-setup",
        dest="setup",
        action="store_false",
        help="do not prepare the NICs (MTU, MAC, kernel IPv6 off, offloads off)",
    )
    parser.add_argument(
        "--window", type=int, default=64, help="messages of a transfer in flight (default 64)"
    )
    parser.add_argument("--seed", type=int, help="random seed of the transport core")
    parser.add_argument(
        "--ev-format",
        default="srv6",
        choices=("srv6", "srv6+srh", "stev", "udp"),
        help="EV format of every QP: srv6 (uSID carriers, default), srv6+srh (a carrier to the "
        "spine and an SRH segment on to the NIC), stev (flow label + UDP source port, ECMP in "
        "the fabric) or udp (UDP source port, ECMP)",
    )
    parser.add_argument(
        "--no-pace",
        dest="pace",
        action="store_false",
        help="send data frames as fast as the socket takes them instead of at the link rate",
    )
    parser.add_argument(
        "--link-latency-us",
        type=float,
        default=0.0,
        metavar="US",
        help="hold every frame US microseconds for each link of its path (two within a rack, "
        "four between racks) before it is sent: the links' latency, where the switches and "
        "links apply none (BMv2 without netem; default 0)",
    )
    parser.add_argument(
        "--no-rx-ring",
        dest="rx_ring",
        action="store_false",
        help="read frames with one recv per frame instead of the PACKET_RX_RING",
    )
    return parser


def run_agent(argv: list[str]) -> int:
    """``mrc-host --topo ... --host ...``."""
    args = agent_parser().parse_args(argv)
    if args.ev_count < 1:
        return _fail(f"--ev-count {args.ev_count}: expected a positive number of EVs")
    if args.window < 1:
        return _fail(f"--window {args.window}: expected a positive number of messages")
    if args.cc not in cc_available():
        return _fail(f"--cc {args.cc}: expected one of {', '.join(cc_available())}")
    cc_params: list[tuple[str, float]] = []
    for text in args.cc_param:
        name, sep, value = text.partition("=")
        try:
            cc_params.append((name.strip(), float(value)))
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            return _fail(f"--cc-param {text!r}: expected NAME=NUMBER, e.g. max_cwnd=512")
    try:
        cc_create(CcProfile(args.cc, dict(cc_params)), mtu=4096)
    except ValueError as exc:
        return _fail(f"--cc-param: {exc}")
    handlers: list[logging.Handler] = []
    if args.log_file is not None:
        try:
            args.log_file.parent.mkdir(parents=True, exist_ok=True)
            handlers.append(logging.FileHandler(args.log_file))
        except OSError as exc:
            return _fail(f"--log-file {args.log_file}: {exc.strerror}")
    else:
        handlers.append(logging.StreamHandler(sys.stderr))
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        handlers=handlers,
    )
    try:
        fabric = Fabric(load_topology(_topology_path(args.topo)))
    except TopologyError as exc:
        return _fail(str(exc))
    try:
        require_root("the agent")
    except SetupError as exc:
        return _fail(str(exc))
    options = AgentOptions(
        host=args.host,
        control=args.control,
        cc=args.cc,
        cc_params=tuple(cc_params),
        stack_profile=args.stack_profile,
        ev_count=args.ev_count,
        direct=args.direct,
        setup=args.setup,
        pcap=args.pcap,
        stats_file=args.stats_file,
        window=args.window,
        seed=args.seed,
        ev_format=args.ev_format,
        rx_ring=args.rx_ring,
        pace=args.pace,
        link_latency_us=args.link_latency_us,
    )
    try:
        agent = Agent(fabric, options)
        agent.open()
    except AgentError as exc:
        return _fail(str(exc))
    except ValueError as exc:  # the core refused a setting (e.g. --ev-count too large)
        return _fail(str(exc))
    print(f"mrc-host {agent.host.name}: ready, control {agent.control_path}", flush=True)
    return agent.run()


# -- client commands ---------------------------------------------------------------------------


def client_parser() -> argparse.ArgumentParser:
    """Options of the control-socket client commands."""
    parser = argparse.ArgumentParser(prog="mrc-host", description="control a running mrc-host")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        where = p.add_mutually_exclusive_group()
        where.add_argument("--control", type=Path, help="the agent's control socket")
        where.add_argument("--host", help="the agent's host (socket /run/mrc-testbed/HOST.sock)")
        p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for a reply")
        return p

    command("info", "who the agent is")
    command("stats", "statistics (JSON)")
    command("regions", "registered regions")
    command("quit", "stop the agent")
    p = command("register", "register a memory region")
    p.add_argument("name")
    p.add_argument("size", type=int)
    p = command("transfer", "write pattern data or a file to a peer's region")
    p.add_argument("--peer", required=True)
    p.add_argument("--addr", required=True, type=lambda v: int(v, 0))
    p.add_argument("--rkey", required=True, type=lambda v: int(v, 0))
    p.add_argument("--size", type=int)
    p.add_argument("--policy", choices=HOST_POLICIES)
    p.add_argument("--message-size", type=int)
    p.add_argument("--imm", type=lambda v: int(v, 0))
    p.add_argument("--seed", type=int)
    p.add_argument("--file")
    p.add_argument("--wait", action="store_true", help="wait for completion and print it")
    p = command("wait", "wait for transfers")
    p.add_argument("transfers", type=int, nargs="*")
    p.add_argument("--for", dest="wait_for", type=float, default=60.0, help="seconds (default 60)")
    p = command("paths", "EV -> path -> state table")
    p.add_argument("--peer")
    p.add_argument("--policy", choices=HOST_POLICIES)
    p.add_argument(
        "--all", action="store_true", help="list every EV, not only the per-path summary"
    )
    p = command("set-ev", "set EVs DENIED, GOOD or UNKNOWN")
    p.add_argument("--peer", required=True)
    p.add_argument("--policy", choices=HOST_POLICIES)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--ev", type=lambda v: int(v, 0))
    which.add_argument("--path")
    p.add_argument("state", type=str.upper, choices=("DENIED", "GOOD", "UNKNOWN"))
    p = command("ev-format", "the EV format of every QP (set it with FORMAT)")
    p.add_argument("format", nargs="?", type=str.lower, choices=("srv6", "srv6+srh", "stev", "udp"))
    p.add_argument("--fields", type=int, nargs="*", default=[], help="format field widths")
    command("ev-profiles", "EV profiles, their QPs and EV states")
    p = command("ev-events", "EV state changes (profile, EV, old, new)")
    p.add_argument("--since", type=int, default=0, help="after this sequence number")
    p = command("received", "WRITE_IMMs this host received (immediate, peer, status)")
    p.add_argument("--since", type=int, default=0, help="after this sequence number")
    p.add_argument("--for", dest="wait_for", type=float, default=0.0,
                   help="seconds to wait for one when there is none yet (default 0)")  # fmt: skip
    p = command("probe", "EV probes to a peer (mrc_ctl_ep_batch_send_wait)")
    p.add_argument("--peer", required=True)
    p.add_argument("--plane", type=int, default=0)
    p.add_argument("--format", dest="ev_format", type=str.lower, default="stev",
                   choices=("srv6", "stev", "udp"))  # fmt: skip
    p.add_argument("--dscp", type=int, default=48)
    p.add_argument("--timeout-ns", type=int, default=2_000_000)
    p.add_argument("evs", nargs="+", help="EVs (integers; SRV6: carrier addresses)")
    p = command("verify", "check a region's bytes")
    p.add_argument("region")
    p.add_argument("--offset", type=int)
    p.add_argument("--size", type=int)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--seed", type=int)
    what.add_argument("--sha256")
    return parser


def run_client(argv: list[str]) -> int:
    """``mrc-host COMMAND ...``: one request to a running agent, reply printed as JSON."""
    args = client_parser().parse_args(argv)
    if args.control is not None:
        path = args.control
    elif args.host is not None:
        path = default_control_path(args.host)
    else:
        return _fail(f"{args.command}: say which agent with --control PATH or --host NAME")
    client = ControlClient(path, timeout=args.timeout)
    reply: dict[str, Any]
    try:
        with client:
            cmd = args.command
            if cmd in ("info", "stats", "regions", "quit"):
                reply = client.request(cmd)
            elif cmd == "register":
                reply = client.register(args.name, args.size)
            elif cmd == "transfer":
                reply = client.transfer(
                    args.peer,
                    args.addr,
                    args.rkey,
                    args.size,
                    policy=args.policy,
                    message_size=args.message_size,
                    imm=args.imm,
                    seed=args.seed,
                    file=args.file,
                )
                if args.wait:
                    reply = client.wait([reply["transfer"]], timeout=3600.0)
            elif cmd == "wait":
                reply = client.wait(args.transfers, timeout=args.wait_for)
            elif cmd == "paths":
                reply = client.request("paths", peer=args.peer, policy=args.policy)
                if not args.all:
                    for table in reply["paths"].values():
                        table.pop("evs", None)
            elif cmd == "set-ev":
                reply = client.request(
                    "set-ev",
                    peer=args.peer,
                    policy=args.policy,
                    state=args.state,
                    ev=args.ev,
                    path=args.path,
                )
            elif cmd == "ev-format":
                reply = client.ev_format(args.format, args.fields)
            elif cmd == "ev-profiles":
                reply = client.request("ev-profiles")
            elif cmd == "ev-events":
                reply = client.ev_events(args.since)
            elif cmd == "received":
                reply = client.received(args.since, timeout=args.wait_for)
            elif cmd == "probe":
                requests = [
                    {"req_id": i + 1, "peer": args.peer, "plane": args.plane,
                     "format": args.ev_format,
                     "ev": ev if args.ev_format == "srv6" and ":" in ev else int(ev, 0)}
                    for i, ev in enumerate(args.evs)
                ]  # fmt: skip
                reply = client.request(
                    "ep-probe", requests=requests, dscp=args.dscp, timeout_ns=args.timeout_ns
                )
            else:  # verify
                reply = client.verify(
                    args.region,
                    offset=args.offset,
                    size=args.size,
                    seed=args.seed,
                    sha256=args.sha256,
                )
    except ControlError as exc:
        return _fail(f"{args.command}: {exc}")
    json.dump(reply, sys.stdout, indent=2)
    sys.stdout.write("\n")
    if args.command == "verify" and not reply.get("match"):
        return 1
    return 0


def _fail(message: str) -> int:
    print(f"mrc-host: {message}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``mrc-host``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in CLIENT_COMMANDS:
        return run_client(argv)
    if argv and argv[0] == "run":
        argv = argv[1:]
    return run_agent(argv)


if __name__ == "__main__":
    sys.exit(main())
