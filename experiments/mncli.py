"""The Mininet CLI of ``mrc-testbed up --cli``, with the testbed's own commands added.

Besides Mininet's commands (``h0 ip link``, ``nodes``, ``links``...)::

    transfer h0 h2 8MiB [POLICY]   write 8 MiB from h0 to h2 with MRC and wait for it
    linkdown t0-p0-r0 t1-p0-s0     fail a cable (both ends down)
    linkup t0-p0-r0 t1-p0-s0       repair it
    reboot t1-p0-s0 [SECONDS]      kill a switch and start it again (watch restores its tables)
    evs h0 [PEER]                  the EV -> path -> state table of h0's agent
    counters                       mrc-ctl counters of every switch
"""

from __future__ import annotations

import time
from typing import Any

from mininet.cli import CLI

from experiments.scenario import parse_size


class TestbedCLI(CLI):
    """Mininet's CLI over a running :class:`experiments.testbed.Testbed`."""

    prompt = "mrc> "

    def __init__(self, testbed: Any) -> None:
        self.testbed = testbed
        super().__init__(testbed.mininet)

    def _client(self, host: str) -> Any:
        from host.agent.control_client import ControlClient

        return ControlClient(self.testbed.control_path(host), timeout=10.0)

    def do_transfer(self, line: str) -> None:
        """transfer SRC DST SIZE [POLICY]: an MRC write from SRC to DST; prints the time."""
        words = line.split()
        if len(words) not in (3, 4):
            print("usage: transfer SRC DST SIZE [POLICY]")
            return
        src, dst, size_text = words[:3]
        try:
            size = parse_size(size_text)
            with self._client(dst) as rx, self._client(src) as tx:
                region = rx.register(f"cli-{time.time_ns()}", size)
                started = time.monotonic()
                t = tx.transfer(
                    dst,
                    region["addr"],
                    region["rkey"],
                    size,
                    seed=1,
                    policy=words[3] if len(words) == 4 else None,
                )
                done = tx.wait([t["transfer"]], timeout=600)
                took = time.monotonic() - started
            state = "complete" if done.get("complete") else "NOT complete"
            print(
                f"{src} -> {dst}: {size} bytes {state} in {took:.2f} s "
                f"({size * 8 / took / 1e6:.1f} Mb/s)"
            )
        except Exception as exc:  # a CLI command reports and carries on
            print(f"transfer: {exc}")

    def do_linkdown(self, line: str) -> None:
        """linkdown A B: take the cable between nodes A and B down."""
        try:
            self.testbed.link_down(*line.split())
        except Exception as exc:
            print(f"linkdown: {exc}")

    def do_linkup(self, line: str) -> None:
        """linkup A B: bring the cable between nodes A and B up."""
        try:
            self.testbed.link_up(*line.split())
        except Exception as exc:
            print(f"linkup: {exc}")

    def do_reboot(self, line: str) -> None:
        """reboot SWITCH [SECONDS]: kill a switch, wait, start it (watch restores its tables)."""
        words = line.split()
        try:
            self.testbed.kill_switch(words[0])
            time.sleep(float(words[1]) if len(words) > 1 else 1.0)
            self.testbed.start_switch(words[0])
            print(f"{words[0]} restarted")
        except Exception as exc:
            print(f"reboot: {exc}")

    def do_evs(self, line: str) -> None:
        """evs HOST [PEER]: EV states of a host's agent, counted per path."""
        words = line.split()
        if not words:
            print("usage: evs HOST [PEER]")
            return
        try:
            with self._client(words[0]) as client:
                reply = client.paths(words[1] if len(words) > 1 else None)
            for peer, table in summarise_paths(reply.get("paths", {})).items():
                for path, states in sorted(table.items()):
                    text = " ".join(f"{s}={n}" for s, n in sorted(states.items()))
                    print(f"{words[0]} -> {peer} {path}: {text}")
        except Exception as exc:
            print(f"evs: {exc}")

    def do_counters(self, line: str) -> None:
        """counters [SWITCH...]: packets in and out, trimmed and ECN-marked per port, drops by
        reason (of every switch when none is named)."""
        wanted = set(line.split())
        try:
            everything = self.testbed.control.counters()
        except Exception as exc:
            print(f"counters: {exc}")
            return
        for name, counters in everything.items():
            if wanted and name not in wanted:
                continue
            drops = ", ".join(f"{k} {v}" for k, v in counters.drops.items()) or "none"
            print(f"{name}: drops {drops}")
            for p in counters.ports:
                print(f"  port {p.port}: in {p.rx_packets} ({p.rx_bytes} B), out {p.tx_packets} "
                      f"({p.tx_bytes} B), trimmed {p.trimmed}, ECN-marked {p.ecn_marked}")  # fmt: skip


def summarise_paths(paths: Any) -> dict[str, dict[str, dict[str, int]]]:
    """peer -> path label -> state -> number of EVs, from an agent's ``paths`` reply."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    if not isinstance(paths, dict):
        return out
    for peer, table in paths.items():
        by_path = table.get("paths", {}) if isinstance(table, dict) else {}
        out[str(peer)] = {
            str(label): {str(k): int(v) for k, v in entry.get("states", {}).items()}
            for label, entry in by_path.items()
            if isinstance(entry, dict)
        }
    return out
