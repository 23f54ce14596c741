"""Fixtures for the transport-core tests: an in-memory network of hosts on the small fabric,
at the ``testbed-2026`` operating point the tests' figures were set on (``fabric`` here
replaces the suite-wide one of ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

import pytest
from support.fabric import small_fabric

from host.transport.api import CompletionQueue, Context, MemoryRegion, QueuePair
from host.transport.cc import CcProfile
from host.transport.cc.fabric import fabric_cc_profile
from host.transport.config import StackConfig
from host.transport.events import Completion, Event
from sim.network import SimNet
from topologies import Fabric
from topologies.operating import LEGACY_PROFILE

REGION_ADDR = 0x7F00_0000_0000
REGION_LEN = 1 << 23


@dataclass
class Flow:
    """A connected pair of QPs and the receiver's region."""

    src: str
    dst: str
    sender: QueuePair
    receiver: QueuePair
    region: MemoryRegion


@dataclass
class Net:
    """Host contexts attached to a :class:`SimNet`, with their CQs and every event seen."""

    fabric: Fabric
    sim: SimNet
    config: StackConfig
    hosts: dict[str, Context] = field(default_factory=dict)
    cqs: dict[str, CompletionQueue] = field(default_factory=dict)
    regions: dict[str, MemoryRegion] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)

    def host(self, name: str) -> Context:
        """The context of ``name`` (created and attached on first use)."""
        if name not in self.hosts:
            ctx = Context(name, self.fabric.host(name).nics, config=self.config,
                          seed=self.fabric.host(name).index + 7)  # fmt: skip
            self.sim.attach(ctx)
            self.hosts[name] = ctx
            self.cqs[name] = ctx.create_cq()
            self.regions[name] = ctx.register_region(REGION_ADDR, REGION_LEN)
        return self.hosts[name]

    def connect(self, src: str, dst: str, **qp_options: object) -> Flow:
        """QPs src -> dst and dst -> src, connected, with the same options (by default, NSCC
        fitted to the in-memory network, as the agents fit it to theirs)."""
        if "cc" not in qp_options:
            qp_options["cc"] = fabric_cc_profile(self.sim.topology, CcProfile("nscc"), self.config)
        a, b = self.host(src), self.host(dst)
        qa = a.create_qp(dst, self.fabric.paths(src, dst), cq=self.cqs[src], **qp_options)  # type: ignore[arg-type]
        qb = b.create_qp(src, self.fabric.paths(dst, src), cq=self.cqs[dst], **qp_options)  # type: ignore[arg-type]
        qa.connect(qb.qpn)
        qb.connect(qa.qpn)
        return Flow(src, dst, qa, qb, self.regions[dst])

    def drain_events(self) -> None:
        """Move every pending event of every host into ``events``."""
        for ctx in self.hosts.values():
            while (event := ctx.next_event()) is not None:
                self.events.append(event)

    def run(self, until: float, stop: Callable[[], bool] | None = None) -> float:
        """Run the network (draining events as it goes) until ``until`` or ``stop()``."""
        end = self.sim.run(until, stop)
        self.drain_events()
        return end

    def write(self, flow: Flow, data: bytes, until: float, wr_id: int = 0) -> Completion:
        """Post one WRITE of ``data`` from ``flow``'s sender to the start of the receiver's
        region and run the network until the sender's CQ holds its completion (or ``until``);
        that completion."""
        flow.sender.post_write(data, REGION_ADDR, flow.region.rkey, wr_id=wr_id)
        self.sim.kick(flow.src)
        self.run(until, stop=lambda: len(self.cqs[flow.src]) == 1)
        completion: Completion = self.cqs[flow.src].poll()[0]
        return completion

    def kick_all(self) -> None:
        """Let every host send."""
        for name in self.hosts:
            self.sim.kick(name)


@cache
def legacy_small_fabric() -> Fabric:
    """The shipped small fabric with the ``testbed-2026`` profile (built once)."""
    return Fabric(small_fabric().topology.with_(profile=LEGACY_PROFILE))


@pytest.fixture(scope="session")
def fabric() -> Fabric:
    """The small fabric at the ``testbed-2026`` operating point (50 us of emulated delay per
    link, 64-packet queues): the in-memory networks of these tests and the figures they check
    (packets in flight on a failed path, retransmissions) were set on it."""
    return legacy_small_fabric()


@pytest.fixture
def make_net(fabric: Fabric) -> Callable[..., Net]:
    """Factory: ``make_net(seed=1, config=StackConfig(...), **simnet_options)``.

    The contexts run dilated as the agents do: the fabric's nominal rate over the in-memory
    links' rate, unless ``config`` sets a dilation of its own."""

    def build(seed: int = 1, config: StackConfig | None = None, **options: object) -> Net:
        sim = SimNet(fabric, seed=seed, **options)  # type: ignore[arg-type]
        config = config or StackConfig()
        if config.dilation == 1.0:
            config = config.with_(dilation=sim.dilation)
        return Net(fabric, sim, config)

    return build
