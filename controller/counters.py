"""Reading the pipeline's counters: per port and per drop reason, with names.

The contract's counters are indirect PACKETS_AND_BYTES arrays: ``MrcIngress.port_in`` (by
ingress port), ``MrcEgress.port_out``, ``MrcIngress.trimmed`` and ``MrcIngress.ecn_marked`` (by
egress port), and ``MrcIngress.drops`` (by drop reason, :class:`p4src.contract.DropReason`).
:func:`read_counters` reads them all from one switch into a :class:`SwitchCounters`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from controller.client import SwitchClient
from p4src.contract import DROPS, ECN_MARKED, PORT_IN, PORT_OUT, TRIMMED, DropReason

Cells = dict[int, tuple[int, int]]  # index -> (packets, bytes)


@dataclass(frozen=True)
class PortCounters:
    """Packets (and bytes) seen on one port."""

    port: int
    rx_packets: int = 0
    rx_bytes: int = 0
    tx_packets: int = 0
    tx_bytes: int = 0
    trimmed: int = 0
    ecn_marked: int = 0


@dataclass(frozen=True)
class SwitchCounters:
    """All counters of one switch."""

    switch: str
    ports: tuple[PortCounters, ...] = ()
    drops: dict[str, int] = field(default_factory=dict)  # reason name -> packets

    def port(self, number: int) -> PortCounters:
        """The counters of one port (zeros when never seen)."""
        for port in self.ports:
            if port.port == number:
                return port
        return PortCounters(number)


def drop_reason_name(index: int) -> str:
    """Name of a drop reason index (``reason 9`` for an unknown one)."""
    try:
        return DropReason(index).name
    except ValueError:
        return f"reason {index}"


def read_counters(client: SwitchClient, ports: Iterable[int] = ()) -> SwitchCounters:
    """Read every counter of the contract; ``ports`` are listed even when all zero."""
    port_in = client.read_counter(PORT_IN)
    port_out = client.read_counter(PORT_OUT)
    trimmed = client.read_counter(TRIMMED)
    marked = client.read_counter(ECN_MARKED)
    drops = client.read_counter(DROPS)
    wanted = set(ports)
    for cells in (port_in, port_out, trimmed, marked):
        wanted.update(i for i, (packets, _) in cells.items() if packets)
    rows = tuple(
        PortCounters(
            port=p,
            rx_packets=port_in.get(p, (0, 0))[0],
            rx_bytes=port_in.get(p, (0, 0))[1],
            tx_packets=port_out.get(p, (0, 0))[0],
            tx_bytes=port_out.get(p, (0, 0))[1],
            trimmed=trimmed.get(p, (0, 0))[0],
            ecn_marked=marked.get(p, (0, 0))[0],
        )
        for p in sorted(wanted)
    )
    reasons = {drop_reason_name(i): packets for i, (packets, _) in sorted(drops.items()) if packets}
    return SwitchCounters(client.name, rows, reasons)
