"""The agent side of the OCP MRC API: what ``lib_mrc.so`` and the testbed's ``libibverbs.so.1``
ask of a host's agent (docs/ocp-api.md).

:class:`OcpProvider` serves the agent's second socket (:mod:`.server`). Every process that opens
the emulated verbs device gets a session: its memory registrations (the application's own
buffers, read and written in place, :mod:`.mem`), completion queues, completion channels, QPs
and asynchronous events (:mod:`.objects`). The session ends with its connection.

QPs follow the RDMA state machine (RESET -> INIT -> RTR -> RTS, any -> ERR / RESET), a table in
:mod:`.qp_states`. A QP becomes a transport-core QP at RTR, when its peer is known
(``IBV_QP_AV``: the peer's GID is a plane address of another testbed host;
``IBV_QP_DEST_QPN``), with a transport config of its own made from its ACK timeout, retry
counts and MPRs (:func:`.qp_states.core_config`; changed at once when the application changes
them). Numbers in requests and replies are the libibverbs and MRC values, enums of
:mod:`.abi`; errors carry an ``errno`` the library sets.

The modules, from the ground up: :mod:`.abi` (the numbers, the error, field validators),
:mod:`.mem`, :mod:`.server`, :mod:`.objects`, :mod:`.qp_states`, the profile stores
(:mod:`.profiles`, :mod:`.ev_formats`, :mod:`.ev_profiles`, :mod:`.cc_profiles`),
:mod:`.state` (sessions, the delivery of completions and events, the command rows), the two
APIs: :mod:`.app_api` (the application's, its work requests in :mod:`.work`) and
:mod:`.ctl_api` (the controller's), and on top
:mod:`.provider`, which dispatches their rows and takes the transport core's events.
"""

from host.agent.ocp.abi import OcpError
from host.agent.ocp.provider import OcpProvider, ocp_socket_path
from host.agent.ocp.state import AgentLike

__all__ = ["AgentLike", "OcpError", "OcpProvider", "ocp_socket_path"]
