"""Transport policies: MRC and the baselines it is compared with, all on the same engine.

``mrc`` sprays every packet on a different GOOD EV, retires EVs on loss and probes them back,
and uses trimming with NACKs. The baselines switch one of these features off each; see the
table in docs/host-stack.md. The ``uet-*`` policies spray with one of UET's load balancers
(:mod:`host.transport.balancers`) instead of MRC's spraying, and retire no EV, as UET's sender
does: the sim runs them beside the reference simulator (docs/validation.md).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Policy:
    """What a QP does with its EVs and with trimming."""

    name: str
    spray: bool  #: a different EV for every packet (else one EV for the whole QP)
    single_ev: str | None  #: "first" or "hash" when not spraying
    failover: bool  #: retire EVs on loss and probe them back
    trimmable: bool  #: data sent with DSCP 10 (else DSCP 0, never trimmed)
    trim_nack: bool  #: the receiver NACKs trimmed packets
    #: UET's load balancer that picks each packet's EV (:data:`host.transport.balancers.BALANCERS`),
    #: None: MRC's spraying (or one EV)
    balancer: str | None = None


#: the policies, one row each (the table of docs/host-stack.md)
POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        #      name                 spray  single_ev failover trimmable trim_nack balancer
        Policy("mrc",               True,  None,     True,    True,     True),
        Policy("single-path",       False, "first",  False,   True,     True),
        Policy("ecmp",              False, "hash",   False,   True,     True),
        Policy("spray-no-failover", True,  None,     False,   True,     True),
        Policy("no-trim-nack",      True,  None,     True,    False,    False),
        Policy("uet-oblivious",     True,  None,     False,   True,     True,  "oblivious"),
        Policy("uet-bitmap",        True,  None,     False,   True,     True,  "bitmap"),
        Policy("uet-reps",          True,  None,     False,   True,     True,  "reps"),
        Policy("uet-reps-legacy",   True,  None,     False,   True,     True,  "reps_legacy"),
        Policy("uet-mixed",         True,  None,     False,   True,     True,  "mixed"),
    )
}  # fmt: skip


#: the policies a host agent runs, a QP each towards every peer: MRC and its baselines. UET's
#: load balancers (``uet-*``) are the sim's, run beside the reference simulator
HOST_POLICIES: tuple[str, ...] = tuple(name for name, p in POLICIES.items() if p.balancer is None)


def balancer_policy(balancer: str) -> str:
    """The policy that sprays with UET's load balancer ``balancer`` (a name of uet-htsim's
    ``-load_balancing_algo``)."""
    for policy in POLICIES.values():
        if policy.balancer == balancer:
            return policy.name
    names = ", ".join(p.balancer for p in POLICIES.values() if p.balancer)
    raise ValueError(f"-load_balancing_algo {balancer}: expected one of {names}")


def get_policy(name: str) -> Policy:
    """The policy called ``name``."""
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"policy {name!r}: expected one of {', '.join(POLICIES)}") from None
