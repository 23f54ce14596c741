"""The sim's switch as a data-plane target: :class:`sim.network.SwitchBench` in this process.

The switch is the one every switch of the virtual-time simulator is (:mod:`sim.network`), its
tables made from the entries a case installs: the ``p4r`` messages are read back into
:class:`controller.entries.Entry` with the committed P4Info and turned into the sim's tables by
:meth:`sim.switch.SwitchTables.of_entries` (``port_qos`` included). A frame sent in crosses a
link into the switch; what the switch sends out waits at the port's test end. Time is
simulated, so :meth:`SimTarget.expect` never waits: it runs the network until a frame is
there or nothing is left to happen. A port of ``port_rates`` sends at its rate, so a burst
queues up behind it as behind a shaped port of BMv2.

Counters are the sim's, under the program's names: ``port_in`` the frames that arrived on a
port, ``port_out`` those a port sent, ``trimmed`` and ``ecn_marked`` per egress port, ``drops``
by reason (:data:`sim.switch.DROP_COUNTERS`; QUEUE_FULL the ports' full queues), read once the
network has run until nothing is left to happen. The sim counts
packets, not bytes: every byte count reads 0. The sim's switch has no registers: the queue
depth it decides on is its queue's. A write of ``port_qdepth`` or ``port_arrivals`` becomes
the depth it stands for: that many stand-in packets waiting in the port's data queue, which
leave (unseen by the test) before the next frame.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from controller.entries import Entry
from controller.p4info import P4Info
from p4src.contract import (
    DROPS,
    ECN_MARKED,
    PORT_ARRIVALS,
    PORT_IN,
    PORT_OUT,
    PORT_QDEPTH,
    TRIMMED,
    DropReason,
)
from p4src.proto import p4r
from sim.network import SwitchBench
from sim.switch import DROP_COUNTERS, SwitchTables

from .target import DataplaneTarget

#: counter name -> what :meth:`SwitchBench.counts` calls it
_PORT_COUNTERS = {PORT_IN: "in", PORT_OUT: "out", TRIMMED: "trimmed", ECN_MARKED: "ecn_marked"}
_DROP_COUNTERS = {**DROP_COUNTERS, DropReason.QUEUE_FULL: "drop_queue_full"}


def entry_of(info: P4Info, message: Any) -> Entry:
    """The :class:`Entry` of a ``p4r.TableEntry``, ``ActionProfileMember`` or
    ``ActionProfileGroup``."""
    if isinstance(message, p4r.ActionProfileMember):
        return Entry.from_member(info.decode_member(message))
    if isinstance(message, p4r.ActionProfileGroup):
        return Entry.from_group(info.decode_group(message))
    if isinstance(message, p4r.TableEntry):
        return Entry.from_proto(info, message)
    raise TypeError(f"{type(message).__name__}: expected a p4r table entry, member or group")


class SimTarget(DataplaneTarget):
    """The sim's switch between test ports, in simulated time."""

    name = "sim"
    cannot_shape = None  # a port of port_rates sends at its rate in simulated time

    def __init__(
        self, ports: Sequence[int], workdir: Path, port_rates: Mapping[int, int] | None = None
    ) -> None:
        super().__init__(ports, workdir, port_rates)
        self._info: P4Info | None = None
        self._bench: SwitchBench | None = None
        self._registers: dict[int, dict[str, int]] = {}  # port -> register -> value

    @property
    def p4info(self) -> P4Info:
        if self._info is None:
            raise RuntimeError("sim target not started")
        return self._info

    def _require(self) -> SwitchBench:
        if self._bench is None:
            raise RuntimeError("sim target not started")
        return self._bench

    def start(self) -> None:
        self._info = P4Info.load()
        self._bench = SwitchBench(self.ports, rates=self.port_rates)

    def install(self, entries: Sequence[Any], defaults: Sequence[Any] = ()) -> None:
        info = self.p4info
        made = [entry_of(info, e) for e in entries] + [entry_of(info, d) for d in defaults]
        self._require().install(SwitchTables.of_entries(made))

    def send(self, port: int, frame: bytes) -> None:
        self._require().send(port, frame)

    def expect(self, port: int, timeout: float) -> bytes | None:
        return self._require().take(port)

    def set_register(self, name: str, index: int, value: int) -> None:
        if name not in (PORT_QDEPTH, PORT_ARRIVALS):
            raise KeyError(f"no register {name!r} (expected {PORT_QDEPTH} or {PORT_ARRIVALS})")
        bench = self._require()
        cells = self._registers.setdefault(index, {PORT_QDEPTH: 0, PORT_ARRIVALS: 0})
        if not bench.held(index):  # the stand-ins left: the departures reset both registers
            cells.update({PORT_QDEPTH: 0, PORT_ARRIVALS: 0})
        cells[name] = value
        bench.hold(index, sum(cells.values()))

    def counters(self, name: str) -> dict[int, tuple[int, int]]:
        bench = self._require()
        bench.run(float("inf"))  # what was sent has been through the switch
        if name == DROPS:
            return {int(r): (bench.counters[c], 0) for r, c in _DROP_COUNTERS.items()}
        what = _PORT_COUNTERS.get(name)
        if what is None:
            raise KeyError(f"no counter {name!r} in the sim's switch")
        return {port: (bench.counts(port)[what], 0) for port in self.ports}

    def stop(self) -> None:
        self._bench = None
        self._registers = {}
