"""The faults of a scenario: one frozen class per kind, each with ``apply`` and ``undo``.

A fault acts on a :class:`FaultTarget` -- the testbed as a phase drives it, which carries the
action out, records it (``faults.csv``) and remembers what is still down so that the end of the
phase can bring it back. ``apply`` does what the fault's name says; ``undo`` reverses it. Each
family (links, switches, EVs) says once how it breaks and restores; a kind that restores
(``link_up``, ``plane_up``, ``ev_allow``) applies by restoring. A
fault's :meth:`Fault.steps` are its actions in time: most kinds have one (apply at ``at_s``);
``switch_reboot`` applies and undoes ``down_s`` later; ``link_flap`` applies and undoes
``rate_per_min`` times a minute from ``at_s`` to ``until_s``.

==============  ==============================================================================
kind            class
==============  ==============================================================================
link_down/up    :class:`LinkDown` / :class:`LinkUp`: the cable between two nodes
link_flap       :class:`LinkFlap`: down for ``down_s``, ``rate_per_min`` times a minute
switch_reboot   :class:`SwitchReboot`: killed, started again ``down_s`` later
nic_down/up     :class:`NicDown` / :class:`NicUp`: the cable of ``host``'s NIC on ``plane``
plane_down/up   :class:`PlaneDown` / :class:`PlaneUp`: every spine of ``plane`` at once
ev_deny/allow   :class:`EvDeny` / :class:`EvAllow`: the operator sets EVs of ``host``'s QP
                towards ``peer`` (path ``path`` or EV ``ev``) DENIED / UNKNOWN (probed back)
==============  ==============================================================================

The scenario file's parser (:func:`experiments.scenario.parse_scenario`) builds them;
:meth:`Fault.as_dict` gives the file's form back.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Protocol


class FaultTarget(Protocol):
    """What a fault acts on: the testbed as a phase drives it (and records the action)."""

    def link_down(self, a: str, b: str) -> None:
        """Fail the cable between nodes ``a`` and ``b``."""
        ...

    def link_up(self, a: str, b: str) -> None:
        """Repair the cable between nodes ``a`` and ``b``."""
        ...

    def kill_switches(self, names: Sequence[str]) -> None:
        """Stop the switches, all at the same time."""
        ...

    def start_switches(self, names: Sequence[str]) -> None:
        """Start the switches again (their tables are re-installed by ``mrc-ctl watch``)."""
        ...

    def set_ev_state(self, fault: EvFault, state: str) -> None:
        """Set the EVs ``fault`` names to the operator state ``state`` (DENIED / UNKNOWN)."""
        ...


@dataclass(frozen=True)
class Step:
    """One action of a fault at ``t``: its ``apply`` (or ``undo``), named ``action`` in the
    results (``down``, ``up``, ``kill``, ``start``, ``deny``, ``allow``)."""

    t: float
    action: str
    fault: Fault
    undo: bool = False

    def run(self, target: FaultTarget) -> None:
        """Carry the action out on ``target``."""
        if self.undo:
            self.fault.undo(target)
        else:
            self.fault.apply(target)


@dataclass(frozen=True)
class Fault(ABC):
    """A fault of a scenario, starting at ``at_s`` seconds into a phase."""

    #: the scenario file's name of the kind (a class keyword: ``class LinkUp(LinkFault,
    #: kind="link_up", restores=True)``; families such as :class:`LinkFault` have none)
    kind: ClassVar[str] = ""
    #: the names of breaking and restoring, as the results record them (``down``, ``up``)
    names: ClassVar[tuple[str, str]]
    #: a kind that restores (``link_up``, ``plane_up``, ``ev_allow``): apply restores
    restores: ClassVar[bool] = False
    #: fields the parser fills in from the others (not written in a scenario file)
    derived: ClassVar[tuple[str, ...]] = ()

    at_s: float

    def __init_subclass__(cls, kind: str = "", restores: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.kind = kind
        cls.restores = restores

    @abstractmethod
    def _break(self, target: FaultTarget) -> None:
        """Take what the fault hits down."""

    @abstractmethod
    def _restore(self, target: FaultTarget) -> None:
        """Bring what the fault hits back."""

    def apply(self, target: FaultTarget) -> None:
        """Do what the fault's name says."""
        (self._restore if self.restores else self._break)(target)

    def undo(self, target: FaultTarget) -> None:
        """Reverse :meth:`apply`."""
        (self._break if self.restores else self._restore)(target)

    @property
    def actions(self) -> tuple[str, str]:
        """The names of :meth:`apply` and :meth:`undo` in the results."""
        return (self.names[1], self.names[0]) if self.restores else self.names

    @property
    @abstractmethod
    def target(self) -> str:
        """A readable name of what the fault hits."""

    def steps(self) -> list[Step]:
        """The actions of this fault in time order (by default: apply at ``at_s``)."""
        return [Step(self.at_s, self.actions[0], self)]

    def events(self) -> list[tuple[float, str]]:
        """(time, action name) of every step."""
        return [(s.t, s.action) for s in self.steps()]

    def as_dict(self) -> dict[str, Any]:
        """The fault as a scenario file writes it (fields the parser derives left out)."""
        out: dict[str, Any] = {"kind": self.kind}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name not in self.derived and value is not None:
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


# -- links -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinkFault(Fault):
    """A fault of the cable between the two nodes of ``link``."""

    names: ClassVar[tuple[str, str]] = ("down", "up")

    link: tuple[str, str]

    def _break(self, target: FaultTarget) -> None:
        target.link_down(*self.link)

    def _restore(self, target: FaultTarget) -> None:
        target.link_up(*self.link)

    @property
    def target(self) -> str:
        return f"{self.link[0]} <-> {self.link[1]}"


@dataclass(frozen=True)
class LinkDown(LinkFault, kind="link_down"):
    """``link_down``: the cable fails at ``at_s``."""


@dataclass(frozen=True)
class LinkUp(LinkFault, kind="link_up", restores=True):
    """``link_up``: the cable is repaired at ``at_s``."""


@dataclass(frozen=True)
class LinkFlap(LinkFault, kind="link_flap"):
    """``link_flap``: down ``rate_per_min`` times a minute from ``at_s`` to ``until_s``, each
    time for ``down_s``."""

    rate_per_min: float
    down_s: float
    until_s: float

    def steps(self) -> list[Step]:
        period = 60.0 / self.rate_per_min
        out: list[Step] = []
        t = self.at_s
        while t < self.until_s - 1e-9:
            out += [Step(t, "down", self), Step(t + self.down_s, "up", self, undo=True)]
            t += period
        return out


@dataclass(frozen=True)
class NicFault(LinkFault):
    """A fault of the cable of ``host``'s NIC on ``plane`` (``link``)."""

    derived: ClassVar[tuple[str, ...]] = ("link",)

    host: str
    plane: int


@dataclass(frozen=True)
class NicDown(NicFault, kind="nic_down"):
    """``nic_down``: the NIC's cable fails (the agent sees its link go down)."""


@dataclass(frozen=True)
class NicUp(NicFault, kind="nic_up", restores=True):
    """``nic_up``: the NIC's cable is repaired."""


# -- switches --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SwitchFault(Fault):
    """A fault of some switches (``switches``), killed and started at the same time."""

    names: ClassVar[tuple[str, str]] = ("kill", "start")
    derived: ClassVar[tuple[str, ...]] = ("switches",)  # a file names a switch or a plane

    switches: tuple[str, ...]

    def _break(self, target: FaultTarget) -> None:
        target.kill_switches(self.switches)

    def _restore(self, target: FaultTarget) -> None:
        target.start_switches(self.switches)

    @property
    def target(self) -> str:
        return ", ".join(self.switches)


@dataclass(frozen=True)
class SwitchReboot(SwitchFault, kind="switch_reboot"):
    """``switch_reboot``: ``switch`` is killed at ``at_s`` and started ``down_s`` later (with
    empty tables: ``mrc-ctl watch`` re-installs them)."""

    down_s: float

    @property
    def switch(self) -> str:
        """The switch rebooted."""
        return self.switches[0]

    def steps(self) -> list[Step]:
        return [Step(self.at_s, "kill", self), Step(self.at_s + self.down_s, "start", self, True)]

    def as_dict(self) -> dict[str, Any]:
        return {**super().as_dict(), "switch": self.switch}


@dataclass(frozen=True)
class PlaneFault(SwitchFault):
    """A fault of every spine of ``plane`` (``switches``)."""

    plane: int


@dataclass(frozen=True)
class PlaneDown(PlaneFault, kind="plane_down"):
    """``plane_down``: every spine of the plane is killed at once."""


@dataclass(frozen=True)
class PlaneUp(PlaneFault, kind="plane_up", restores=True):
    """``plane_up``: every spine of the plane is started again."""


# -- operator EV states ----------------------------------------------------------------------


@dataclass(frozen=True)
class EvFault(Fault):
    """The operator's state of the EVs of path ``path`` (or of EV ``ev``) of ``host``'s QP
    towards ``peer``."""

    names: ClassVar[tuple[str, str]] = ("deny", "allow")

    host: str
    peer: str
    path: str | None = None  # a path label (p0-s1, or p0-ecmp for STEV / UDP EVs)
    ev: int | None = None

    def _break(self, target: FaultTarget) -> None:
        target.set_ev_state(self, "DENIED")

    def _restore(self, target: FaultTarget) -> None:
        target.set_ev_state(self, "UNKNOWN")

    @property
    def which(self) -> dict[str, object]:
        """The agent's ``set-ev`` selector: ``{"path": ...}`` or ``{"ev": ...}``."""
        return {"path": self.path} if self.path is not None else {"ev": self.ev}

    @property
    def target(self) -> str:
        what = self.path if self.path is not None else f"{self.ev:#x}"
        return f"{self.host} -> {self.peer} {what}"


@dataclass(frozen=True)
class EvDeny(EvFault, kind="ev_deny"):
    """``ev_deny``: the EVs are set DENIED (the sender stops using them)."""


@dataclass(frozen=True)
class EvAllow(EvFault, kind="ev_allow", restores=True):
    """``ev_allow``: the EVs are set UNKNOWN (probed back to GOOD)."""


#: every fault class by its ``kind``
FAULT_CLASSES: dict[str, type[Fault]] = {
    cls.kind: cls
    for cls in (
        LinkDown, LinkUp, LinkFlap, SwitchReboot, NicDown, NicUp, PlaneDown, PlaneUp, EvDeny,
        EvAllow,
    )
}  # fmt: skip
FAULT_KINDS = tuple(FAULT_CLASSES)


__all__ = [
    "FAULT_CLASSES",
    "FAULT_KINDS",
    "EvAllow",
    "EvDeny",
    "EvFault",
    "Fault",
    "FaultTarget",
    "LinkDown",
    "LinkFault",
    "LinkFlap",
    "LinkUp",
    "NicDown",
    "NicFault",
    "NicUp",
    "PlaneDown",
    "PlaneFault",
    "PlaneUp",
    "Step",
    "SwitchFault",
    "SwitchReboot",
]
