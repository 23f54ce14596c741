"""Bandwidth of an OCP MRC API program on the small fabric, beside the Python agent's own.

Brings the small fabric up (Mininet, switch model or BMv2) at ``--rate`` Mb/s per link, builds
``lib_mrc.so`` and the project's C example (capi/examples/mrc_pingpong.c) against the OCP
headers, and runs it between h0 (rack 0) and h2 (rack 1) through ``mrc-testbed exec``: a
64-byte WRITE_IMM ping-pong, then the bandwidth sweep, message sizes 4 KiB to ``--max``
(64 MiB), each size moving ``--volume`` bytes (at least one message) with up to 128 WRITEs
posted, every byte checked by the receiver. Then capi/examples/mrc_bw.c, written as
applications for real MRC NICs are (its server on h2, the client naming it by host name over
the management network, GID index 3, no profile ids, verbs timeout and retries), sweeps 1 byte
to ``--max``, each size ``--bw-iters`` WRITEs at most and ``--volume`` bytes at most beyond its
first message, every byte checked by the server. The same sizes are then written by h0's agent
itself (the ``transfer`` control command: the transport core without the C library, the OCP
socket or the application's memory in between), each checked with ``verify`` on h2.

Reported per size: MB/s (10^6 bytes) of the C example, of mrc_bw (its BW average, which it
prints in perftest's MB of 2^20 bytes) and of the agent, each as a share of the capacity
between the two hosts (one link per plane, every plane), and the round trip of the
ping-pong in emulated and real-fabric time.

    sudo .venv/bin/python benchmarks/ocp_sweep.py [--rate 20] [--max 64MiB] [--volume 4MiB]
        [--bw-iters 1000] [--target model|bmv2] [--headers DIR] [--out result.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.scenario import parse_size  # noqa: E402
from experiments.testbed import Testbed  # noqa: E402
from host.agent.control_client import ControlClient  # noqa: E402
from targets.interrupt import handle_termination  # noqa: E402
from topologies import load_topology  # noqa: E402
from topologies.config import shipped_topology  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SRC, DST = "h0", "h2"  # different racks: every byte crosses a leaf, a spine and a leaf
SWEEP = re.compile(r"sweep\s+(\d+) B x\s+(\d+):\s+([\d.]+) MB/s")
PINGPONG = re.compile(r"ping-pong (\d+) round trips, ([\d.]+) us per round trip")
#: a result row of mrc_bw: #bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]
BW_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
PERFTEST_MB = 1 << 20  # perftest's MB
#: mrc_bw's verbs ACK timeout: 5 (4.096 us x 2^5 = 131 us, MRC's 7), the agents' own
BW_TIMEOUT = 5
MIN_SIZE = 4096


def size_arg(text: str) -> int:
    """A size on the command line, as scenario files write them (``64MiB``, ``4096``)."""
    try:
        return parse_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"size {text!r}: expected bytes such as 4096, 4KiB, 64MiB"
        ) from None


def sizes(largest: int) -> list[int]:
    """4 KiB, 8 KiB, ... up to ``largest``."""
    out = [MIN_SIZE]
    while out[-1] * 2 <= largest:
        out.append(out[-1] * 2)
    return out


def build(headers: Path) -> Path:
    """lib_mrc.so, the emulated verbs device and the example; returns the example's path."""
    print(f"building lib_mrc.so and the example against {headers} ...", flush=True)
    subprocess.run(
        ["make", "-s", "-C", str(ROOT / "capi"), f"MRC_H_PATH={headers}"],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return ROOT / "build" / "capi" / "mrc_pingpong"


def exec_argv(host: str, *argv: str) -> list[str]:
    """``mrc-testbed exec HOST -- ARGV``."""
    return [sys.executable, "-m", "experiments.cli", "exec", host, "--", *argv]


def run_example(
    tb: Testbed, example: Path, largest: int, volume: int, iters: int, timeout: float
) -> dict[str, Any]:
    """The example on both hosts; its ping-pong and sweep figures, as h0 printed them."""
    rendezvous = Path(tempfile.mkdtemp(prefix="mrc-sweep-"))
    os.chmod(rendezvous, 0o777)
    args = ["-r", str(rendezvous), "-i", str(iters), "-s", str(largest), "-v", str(volume)]
    args += ["-t", str(int(timeout))]
    procs = {
        me: subprocess.Popen(
            exec_argv(me, str(example), "-n", me, "-p", peer, *args),
            cwd=ROOT,
            env=tb.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for me, peer in ((SRC, DST), (DST, SRC))
    }
    out: dict[str, Any] = {"sweep": {}}
    stdout = procs[SRC].stdout
    assert stdout is not None
    for line in stdout:
        print(f"  C  {line.rstrip()}", flush=True)
        if m := SWEEP.search(line):
            out["sweep"][int(m[1])] = {"messages": int(m[2]), "mb_s": float(m[3])}
        elif m := PINGPONG.search(line):
            out["pingpong_us"] = float(m[2])
    for me, proc in procs.items():
        rest = proc.communicate(timeout=timeout)[0] or ""
        if proc.returncode != 0:
            raise SystemExit(f"the example on {me} failed (exit {proc.returncode}):\n{rest}")
    return out


def run_bw(tb: Testbed, largest: int, volume: int, iters: int, timeout: float) -> dict[int, Any]:
    """mrc_bw's server on h2, its client on h0 naming it; MB/s (10^6 bytes) per size from the
    client's rows."""
    bw = str(ROOT / "build" / "capi" / "mrc_bw")
    run = {"cwd": ROOT, "env": tb.env(), "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT,
           "text": True}  # fmt: skip
    server = subprocess.Popen(exec_argv(DST, bw, "-t", str(int(timeout))), **run)  # type: ignore[call-overload]
    client = subprocess.Popen(
        exec_argv(SRC, bw, "-m", str(largest), "-v", str(volume), "-n", str(iters),
                  "-T", str(BW_TIMEOUT), "-t", str(int(timeout)), DST),
        **run,
    )  # type: ignore[call-overload]  # fmt: skip
    out: dict[int, Any] = {}
    assert client.stdout is not None
    for line in client.stdout:
        print(f"  bw {line.rstrip()}", flush=True)
        if m := BW_ROW.match(line):
            size = int(m[1])  # the finer of BW average (2 decimals) and MsgRate (6) x size
            mb_s = max(float(m[4]) * PERFTEST_MB / 1e6, float(m[5]) * size)
            out[size] = {"messages": int(m[2]), "mb_s": mb_s}
    for name, proc in (("client", client), ("server", server)):
        rest = proc.communicate(timeout=timeout)[0] or ""
        if proc.returncode != 0:
            raise SystemExit(f"mrc_bw's {name} failed (exit {proc.returncode}):\n{rest}")
    return out


def run_agent(tb: Testbed, largest: int, volume: int, timeout: float) -> dict[int, Any]:
    """The same sizes written by h0's agent itself, each checked on h2."""
    out: dict[int, Any] = {}
    with ControlClient(tb.control_path(DST), timeout=30.0) as rx:
        mr = rx.register("sweep", max(largest, volume))
    for size in sizes(largest):
        count = max(1, volume // size)
        seed = size
        t0 = time.monotonic()
        with ControlClient(tb.control_path(SRC), timeout=30.0) as tx:
            reply = tx.transfer(
                DST, mr["addr"], mr["rkey"], count * size, message_size=size, seed=seed
            )
            done = tx.wait([reply["transfer"]], timeout=timeout)
        elapsed = time.monotonic() - t0
        if not done.get("complete") or done.get("failed"):
            raise SystemExit(f"the agent's write of {count} x {size} B did not complete: {done}")
        with ControlClient(tb.control_path(DST), timeout=60.0) as rx:
            match = rx.verify("sweep", size=count * size, seed=seed)["match"]
        if not match:
            raise SystemExit(f"the agent's write of {count} x {size} B arrived corrupted")
        mb_s = count * size / elapsed / 1e6
        out[size] = {"messages": count, "mb_s": mb_s}
        print(f"  py agent sweep {size:>9} B x {count:>4}: {mb_s:8.2f} MB/s (checked)", flush=True)
    return out


def main() -> int:
    handle_termination()  # SIGTERM cleans up as Ctrl-C does: nothing is left running
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=20.0, help="link rate, Mb/s (default 20)")
    parser.add_argument("--max", type=size_arg, default=64 << 20, help="largest size (64MiB)")
    parser.add_argument(
        "--volume", type=size_arg, default=4 << 20, help="bytes per size, at least one message"
    )
    parser.add_argument("--iters", type=int, default=100, help="ping-pong round trips (100)")
    parser.add_argument(
        "--bw-iters", type=int, default=1000, help="mrc_bw's WRITEs per size at most (1000)"
    )
    parser.add_argument("--target", choices=("model", "bmv2"), default="model")
    parser.add_argument(
        "--headers",
        type=Path,
        default=Path(os.environ.get("MRC_H_PATH", str(ROOT.parent / "shared" / "ocp-mrc"))),
        help="the OCP MRC API headers (default: $MRC_H_PATH or ../shared/ocp-mrc)",
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="give up after (s)")
    parser.add_argument("--out", type=Path, help="write the figures here (JSON)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("needs root (Mininet): run with sudo")
    if not (args.headers / "mrc.h").is_file():
        parser.error(f"--headers {args.headers}: no mrc.h there (the OCP MRC API headers)")
    if args.max < MIN_SIZE:
        parser.error(f"--max {args.max}: expected at least {MIN_SIZE} bytes")
    example = build(args.headers)
    topology = load_topology(shipped_topology("small")).with_(
        link={"rate_mbps": args.rate, "delay_us": 0}
    )
    planes = topology.planes
    capacity = planes * args.rate * 1e6 / 8 / 1e6  # MB/s between two hosts of different racks
    state = Path(tempfile.mkdtemp(prefix="mrc-sweep-state-")) / "state.json"
    tb = Testbed(topology, args.target, state_path=state)
    print(f"small fabric on {args.target} at {args.rate:g} Mb/s per link ...", flush=True)
    tb.up(progress=lambda line: print(f"  {line}", flush=True))
    try:
        print(f"C example {SRC} -> {DST}: ping-pong and sweep 4 KiB .. {args.max} B", flush=True)
        c = run_example(tb, example, args.max, args.volume, args.iters, args.timeout)
        print(f"mrc_bw {SRC} -> {DST} over the management network: 1 B .. {args.max} B")
        tb.restart_agents()
        bw = run_bw(tb, args.max, args.volume, args.bw_iters, args.timeout)
        print(f"the agent's own writes {SRC} -> {DST}", flush=True)
        tb.restart_agents()  # a clean slate: no QP or EV state left from the example
        agent = run_agent(tb, args.max, args.volume, args.timeout)
    finally:
        tb.down()
    dilation = topology.dilation
    rows = []
    print(f"\ncapacity {SRC} -> {DST}: {capacity:.2f} MB/s ({planes} planes x {args.rate:g} Mb/s)")
    print(f"{'size':>10} {'C MB/s':>8} {'share':>6} {'mrc_bw MB/s':>12} {'share':>6} "
          f"{'agent MB/s':>11} {'share':>6}")  # fmt: skip
    for size in sorted(set(bw) | set(sizes(args.max))):
        row: dict[str, Any] = {"size": size}
        for key, figures in (("c", c["sweep"]), ("bw", bw), ("agent", agent)):
            got = figures.get(size)
            row[f"{key}_mb_s"] = got and got["mb_s"]
            row[f"{key}_share"] = got and got["mb_s"] / capacity
        rows.append(row)
        cells = [
            f"{row[k + '_mb_s']:{w}.3f} {row[k + '_share']:6.3f}" if row[k + "_mb_s"] is not None else
            f"{'-':>{w}} {'-':>6}"
            for k, w in (("c", 8), ("bw", 12), ("agent", 11))
        ]  # fmt: skip
        print(f"{size:>10} " + " ".join(cells))
    rtt = c.get("pingpong_us")
    if rtt is not None:
        print(
            f"ping-pong round trip (64 B WRITE_IMM each way): {rtt:.0f} us emulated = "
            f"{rtt / dilation:.2f} us at {topology.nominal_rate_gbps:g} Gb/s"
        )
    result = {
        "target": args.target,
        "rate_mbps": args.rate,
        "planes": planes,
        "capacity_mb_s": capacity,
        "dilation": dilation,
        "volume": args.volume,
        "pingpong_us": rtt,
        "pingpong_real_us": rtt / dilation if rtt is not None else None,
        "sweep": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"figures in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
