"""Events the transport core hands to its driver (``Context.next_event()``).

A flat list of small dataclasses, one docstring line per field. Times are the ``now`` values the
driver passed in (seconds). EV states are the strings of :class:`host.transport.evs.EvState`.
Completion-queue entries (:class:`Completion`) are also delivered through ``cq.poll()``.
"""

from __future__ import annotations

from dataclasses import dataclass

# Completion status values.
STATUS_OK = "ok"
STATUS_REMOTE_ACCESS_ERROR = "remote_access_error"  # the receiver refused the rkey or address
STATUS_RETRY_EXCEEDED = "retry_exceeded"  # a packet was retransmitted more than max_retransmits


@dataclass
class Event:
    """Base class of every event."""


@dataclass
class Completion(Event):
    """A completion-queue entry: a posted WRITE finished (sender) or a WRITE_IMM arrived (receiver)."""

    cq: int  #: completion queue number
    qpn: int  #: local QP number
    wr_id: int  #: the work request id given to post_write (0 on the receiver side)
    opcode: str  #: "write", "write_imm" (sender side) or "recv_write_imm" (receiver side)
    status: str  #: "ok", "remote_access_error" or "retry_exceeded"
    byte_len: int  #: message length in bytes
    imm: int | None  #: immediate data (WRITE_IMM only)
    remote_addr: int  #: sender: the remote address written; receiver: where the message was placed
    time: float  #: when the completion happened


@dataclass
class WriteCompleted(Completion):
    """Sender side: every packet of a posted WRITE / WRITE_IMM was acknowledged."""


@dataclass
class WriteImmReceived(Completion):
    """Receiver side: every byte of a WRITE_IMM was placed; carries the immediate data."""


@dataclass
class EvStateChanged(Event):
    """An EV of a QP changed state (failure, probe reply, operator)."""

    qpn: int  #: local QP number
    ev: int  #: the entropy value
    path: str  #: label of the EV's path (e.g. "p1-s0")
    old: str  #: previous state
    new: str  #: new state
    reason: str  #: "rto", "sack", "path", "probe_reply", "operator", "port_down", ...
    time: float  #: when it changed
    profile: int = 0  #: the EV profile whose state changed (every QP using it sees the change)
    plane: int = 0  #: the plane (NIC, mrc_ctl_ev.port - 1) of the EV


@dataclass
class PathProbeSent(Event):
    """A connectionless probe was sent on an EV that is not GOOD."""

    qpn: int  #: local QP number
    ev: int  #: the entropy value probed
    probe_id: int  #: id carried by the probe and echoed by the reply
    time: float  #: when it was sent


@dataclass
class PathProbeReplied(Event):
    """A probe reply came back: the EV's path works again."""

    qpn: int  #: local QP number
    ev: int  #: the entropy value probed
    probe_id: int  #: id of the probe answered
    rtt: float  #: probe round-trip time in seconds
    time: float  #: when the reply arrived


@dataclass
class PathProbeTimedOut(Event):
    """No reply to a probe within probe_timeout."""

    qpn: int  #: local QP number
    ev: int  #: the entropy value probed
    probe_id: int  #: id of the probe
    time: float  #: when the timeout fired


@dataclass
class RetransmitTimeout(Event):
    """The ACK timeout of a QP fired (packets assumed lost, backoff applied)."""

    qpn: int  #: local QP number
    packets: int  #: packets declared lost
    backoff: int  #: the exponent t now in use (timeout = 1.024 us x 2^t)
    time: float  #: when it fired


@dataclass
class QpError(Event):
    """A QP gave up on a message (remote access error or retry limit)."""

    qpn: int  #: local QP number
    reason: str  #: what went wrong
    time: float  #: when


@dataclass
class PlacementFault(Event):
    """The receiver could not write a packet's payload into a region (its memory is unmapped,
    read-only or its process gone): the packet was refused with an access-error NACK and the
    QP's receiver refuses everything from now on (a NIC's protection fault)."""

    qpn: int  #: local QP number
    rkey: int  #: the region's rkey
    va: int  #: where the payload was to go
    length: int  #: payload bytes
    error: str  #: why the write failed
    time: float  #: when


@dataclass
class EndpointResponse(Event):
    """A response to an endpoint request (``mrc_ctl_ep_rsp``): an EV probe answered, or a port
    status update acknowledged."""

    req_id: int  #: the request's id
    op: str  #: "ev_probe" or "port_status_update"
    port: int  #: the port (1-based: plane + 1) the response arrived on
    rtt: float  #: round trip, minus the responder's service time when adj_svc_time (seconds)
    rtt_ns: int  #: the same in ns of protocol (real-fabric) time, as mrc_ctl_ep_rsp.rtt
    adj_svc_time: bool  #: the responder's service time was subtracted
    time: float  #: when it arrived


@dataclass
class PortStatusChanged(Event):
    """A port (NIC) of this host, or of a peer (a PORT_STATUS_UPDATE), went down or came up."""

    host: str  #: whose port: this host's name, or the peer's NIC address for a peer
    plane: int  #: the port's plane (port number - 1)
    up: bool  #: the new status
    evs: int  #: EVs whose state this changed (retired when down, probed again when up)
    time: float  #: when


@dataclass
class PortStatusRefused(Event):
    """A peer's port status update that was not applied: its source is no peer's NIC, or its
    mask said the port it arrived on is down (which would take every EV away)."""

    source: str  #: the update's source address
    mask: int  #: the ports it said are up (bit N: port N)
    plane: int  #: the plane it arrived on
    reason: str  #: "not_from_peer" or "arrival_port_down"
    time: float  #: when
