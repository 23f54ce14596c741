"""Action profile members and groups (the ECMP groups of ``ipv6_ecmp``), as P4Runtime sees them.

One :class:`ProfileState` per action profile of the program keeps what was written -- each
member's action and parameters, each group's member ids, and how many table entries point at
each group -- and the :class:`~switchmodel.tables.EcmpGroup` objects the data path reads. The
members of a group are ordered as BMv2 orders them: by the handle BMv2 gives a member when it
is created, the smallest handle not in use (so creation order on a fresh switch, and a handle
freed by a delete is reused first). With the same writes, both targets therefore pick the same
member for the same hash (:func:`p4src.contract.member_index`).

The rules follow P4Runtime (and what BMv2's server answers): a group may hold only existing
members, each once; a member still in a group and a group still used by a table entry cannot be
deleted (FAILED_PRECONDITION); a duplicate insert is ALREADY_EXISTS, a missing id NOT_FOUND.
Errors are :class:`~switchmodel.runtime.RuntimeStatus`-compatible ``(code, message)`` pairs
raised as :class:`ProfileError`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from p4src.proto import p4r
from p4src.proto import rpc_code as code_pb2
from switchmodel.tables import EcmpGroup, NextHop

_T = TypeVar("_T")


class ProfileError(Exception):
    """A refused member or group write: a ``google.rpc.Code`` and a message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class _Member:
    handle: int
    hop: NextHop
    stored: p4r.Entity  # the member as a Read returns it


@dataclass
class _Group:
    members: tuple[int, ...]  # member ids, sorted
    data: EcmpGroup = field(default_factory=EcmpGroup)
    users: int = 0  # table entries pointing at the group


class ProfileState:
    """The members and groups of one action profile (with a selector)."""

    def __init__(self, name: str, profile_id: int, size: int) -> None:
        self.name = name
        self.profile_id = profile_id
        self.size = size
        self._members: dict[int, _Member] = {}
        self._groups: dict[int, _Group] = {}

    def _find(
        self, store: Mapping[int, _T], key: int, noun: str, kind: int
    ) -> tuple[str, _T | None]:
        """How errors name ``noun`` ``key``, and what ``store`` holds under it. Refused: a key
        below 1, a MODIFY or DELETE of a key not there, an INSERT of one there or into a full
        profile."""
        what = f"{self.name} {noun} {key}"
        if key < 1:
            raise ProfileError(code_pb2.INVALID_ARGUMENT, f"{what}: expected a {noun} id >= 1")
        current = store.get(key)
        if current is None and kind in (p4r.Update.MODIFY, p4r.Update.DELETE):
            raise ProfileError(code_pb2.NOT_FOUND, f"{what} does not exist")
        if kind == p4r.Update.INSERT:
            if current is not None:
                raise ProfileError(code_pb2.ALREADY_EXISTS, f"{what} already exists")
            if len(store) >= self.size:
                raise ProfileError(
                    code_pb2.RESOURCE_EXHAUSTED, f"{self.name}: full ({self.size} {noun}s)"
                )
        return what, current

    # -- members -----------------------------------------------------------------------------

    def _free_handle(self) -> int:
        used = {m.handle for m in self._members.values()}
        handle = 0
        while handle in used:
            handle += 1
        return handle

    def write_member(self, kind: int, member: p4r.ActionProfileMember, hop: NextHop | None) -> None:
        """INSERT, MODIFY or DELETE ``member``; ``hop`` is its decoded ``set_next_hop`` (None
        for a DELETE)."""
        member_id = int(member.member_id)
        what, current = self._find(self._members, member_id, "member", kind)
        if kind == p4r.Update.DELETE:
            holders = sorted(g for g, grp in self._groups.items() if member_id in grp.members)
            if holders:
                raise ProfileError(
                    code_pb2.FAILED_PRECONDITION,
                    f"{what} is still in group(s) {', '.join(map(str, holders))}",
                )
            del self._members[member_id]
            return
        assert hop is not None
        stored = p4r.Entity()
        stored.action_profile_member.CopyFrom(member)
        for param in stored.action_profile_member.action.params:  # canonical, as Reads answer
            param.value = param.value.lstrip(b"\x00") or b"\x00"
        if kind == p4r.Update.INSERT:
            self._members[member_id] = _Member(self._free_handle(), hop, stored)
        elif kind == p4r.Update.MODIFY:
            assert current is not None
            current.hop = hop
            current.stored = stored
            for group in self._groups.values():
                if member_id in group.members:
                    self._refresh(group)
        else:
            raise ProfileError(code_pb2.INVALID_ARGUMENT, f"{what}: update type {kind} unknown")

    # -- groups ------------------------------------------------------------------------------

    def _refresh(self, group: _Group) -> None:
        """Recompute the next hops the data path picks from, in member handle order."""
        members = sorted((self._members[m] for m in group.members), key=lambda m: m.handle)
        group.data.hops = tuple(m.hop for m in members)

    def write_group(self, kind: int, group: p4r.ActionProfileGroup) -> None:
        """INSERT, MODIFY (its member list is replaced) or DELETE ``group``."""
        group_id = int(group.group_id)
        what, current = self._find(self._groups, group_id, "group", kind)
        if kind == p4r.Update.DELETE:
            assert current is not None
            if current.users:
                raise ProfileError(
                    code_pb2.FAILED_PRECONDITION,
                    f"{what} is still used by {current.users} table entries",
                )
            del self._groups[group_id]
            return
        ids: list[int] = []
        for member in group.members:
            if member.member_id not in self._members:
                raise ProfileError(
                    code_pb2.NOT_FOUND, f"{what}: member {member.member_id} does not exist"
                )
            if member.weight not in (0, 1):
                raise ProfileError(
                    code_pb2.UNIMPLEMENTED,
                    f"{what}: member {member.member_id} has weight {member.weight}; "
                    "only weight 1 is supported",
                )
            if member.member_id in ids:
                raise ProfileError(
                    code_pb2.INVALID_ARGUMENT, f"{what}: member {member.member_id} given twice"
                )
            ids.append(int(member.member_id))
        if group.max_size and len(ids) > group.max_size:
            raise ProfileError(
                code_pb2.INVALID_ARGUMENT,
                f"{what}: {len(ids)} members exceed its max_size {group.max_size}",
            )
        if kind == p4r.Update.INSERT:
            current = self._groups[group_id] = _Group(tuple(sorted(ids)))
        elif kind == p4r.Update.MODIFY:
            assert current is not None
            current.members = tuple(sorted(ids))
        else:
            raise ProfileError(code_pb2.INVALID_ARGUMENT, f"{what}: update type {kind} unknown")
        self._refresh(current)

    def use_group(self, group_id: int) -> EcmpGroup:
        """A table entry now points at ``group_id``: its data (NOT_FOUND when it does not
        exist)."""
        group = self._groups.get(group_id)
        if group is None:
            raise ProfileError(code_pb2.NOT_FOUND, f"{self.name} group {group_id} does not exist")
        group.users += 1
        return group.data

    def release_group(self, group_id: int) -> None:
        """A table entry no longer points at ``group_id``."""
        group = self._groups.get(group_id)
        if group is not None and group.users:
            group.users -= 1

    # -- reads -------------------------------------------------------------------------------

    def read_members(self, member_id: int = 0) -> Iterator[p4r.Entity]:
        """The members (one when ``member_id`` is given), as a Read returns them."""
        for mid in sorted(self._members) if not member_id else [member_id]:
            found = self._members.get(mid)
            if found is not None:
                yield found.stored

    def read_groups(self, group_id: int = 0) -> Iterator[p4r.Entity]:
        """The groups (one when ``group_id`` is given), as a Read returns them: each with
        its members in id order, weight 1."""
        for gid in sorted(self._groups) if not group_id else [group_id]:
            found = self._groups.get(gid)
            if found is None:
                continue
            entity = p4r.Entity()
            group = entity.action_profile_group
            group.action_profile_id = self.profile_id
            group.group_id = gid
            for member_id in found.members:
                group.members.add(member_id=member_id, weight=1)
            yield entity
