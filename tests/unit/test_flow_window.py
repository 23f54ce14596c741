"""A flow keeps enough messages in flight to keep its host's NICs busy over a round trip, also
a late one (:func:`experiments.flows.mrc.window`): waiting on the oldest message before posting
the next bounds a flow at ``n T / (T + RTT)`` of its host's rate, a limit of the workload, not
of MRC."""

from __future__ import annotations

import pytest

from experiments.flows.mrc import QUEUE_RTTS, WINDOW, window
from topologies.config import load_topology, shipped_topology

KIB = 1024


@pytest.mark.parametrize("name", ["small", "default", "mrc8"])
@pytest.mark.parametrize("message", [4 * KIB, 256 * KIB, 1024 * KIB, 64 * 1024 * KIB])
def test_the_window_covers_late_round_trips_at_the_host_rate(name: str, message: int) -> None:
    topology = load_topology(shipped_topology(name))
    n = window(topology, message)
    message_time = message * 8 / (topology.planes * topology.link_rate_mbps * 1e6)
    covered = QUEUE_RTTS * topology.base_rtt
    assert n >= WINDOW
    # the bound n T / (T + RTT) leaves at least one message of slack over a round trip
    # QUEUE_RTTS times the base one (a loaded queue, a packet recovered after a path failed)
    assert (n - 1) * message_time >= covered
    assert n == WINDOW or (n - 3) * message_time < covered  # and no more


def test_wider_hosts_keep_more_in_flight() -> None:
    small, mrc8 = (load_topology(shipped_topology(n)) for n in ("small", "mrc8"))
    assert window(mrc8, 256 * KIB) > window(small, 256 * KIB) >= WINDOW
