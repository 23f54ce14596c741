"""Agents of the small fabric in network namespaces, for the tests that run ``mrc-host``.

:func:`skip_without_netns` skips a whole module where namespaces cannot be made (not root, no
iproute2); :func:`agents_running` brings up a :class:`experiments.hostnets.BackToBack` (or a
:class:`~experiments.hostnets.SwitchedRack`, switches included) with one agent per host,
yields it and closes it; :func:`intact_write` is a WRITE between two agents (their control
clients) that must arrive byte for byte::

    @pytest.fixture(scope="module")
    def net(fabric: Fabric, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackToBack]:
        work = tmp_path_factory.mktemp("ports")
        yield from agents_running(BackToBack(fabric, SMALL_TOPOLOGY, ("h0", "h1"), prefix="ap",
                                             workdir=work))
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

import pytest

from experiments.hostnets import BackToBack, SwitchedRack, netns_available

Net = TypeVar("Net", bound=BackToBack)


def skip_without_netns(what: str = "agent namespace tests") -> None:
    """Skip the calling module (at import) unless network namespaces can be made here."""
    why = netns_available()
    if why is not None:
        pytest.skip(f"{what}: {why}", allow_module_level=True)


def agents_running(net: Net, options: Mapping[str, Sequence[str]] | None = None) -> Iterator[Net]:
    """``net`` created, its switches started if it has any, and an agent started on each of its
    hosts (with ``options[host]`` as extra ``mrc-host`` arguments); closed after the yield."""
    try:
        net.create()
        if isinstance(net, SwitchedRack):
            net.start_switches()
        for host in net.hosts:
            net.start_agent(host, *(options or {}).get(host, ()))
        yield net
    finally:
        net.close()


def intact_write(
    tx: Any, rx: Any, dst: str, region: str, size: int, seed: int, timeout: float = 120.0,
    **options: Any,
) -> dict[str, Any]:  # fmt: skip
    """A WRITE of ``size`` bytes of pattern ``seed`` from ``tx``'s agent into a new region
    ``region`` of ``rx``'s (host ``dst``), with transfer ``options`` (``imm``, ``policy``...): it
    completes within ``timeout`` s, none of it fails, and it arrives intact. The wait's reply."""
    mr = rx.register(region, size)
    started = tx.transfer(dst, mr["addr"], mr["rkey"], size, seed=seed, **options)
    done: dict[str, Any] = tx.wait([started["transfer"]], timeout=timeout)
    assert done["complete"] and not done["failed"], done
    assert rx.verify(region, seed=seed)["match"]
    return done
