"""Transfers of the host agent: pattern data, message splitting, progress and integrity checks.

A transfer writes ``size`` bytes to a peer's registered region as a series of WRITE messages of
``message_size`` bytes (the last one WRITE_IMM when an immediate is given). Its bytes are either
a file's contents or deterministic *pattern data*: :func:`pattern` (``seed``, ``size``) is the
same byte string on every host and Python version (``random.Random(seed)``), so a
receiver can check what arrived without the data crossing the control interface
(:func:`verify_region`). Every transfer also reports the SHA-256 of what it sent.
"""

from __future__ import annotations

import functools
import hashlib
import random
from dataclasses import dataclass, field
from typing import Any

DEFAULT_MESSAGE_SIZE = 1 << 16
DEFAULT_SEED = 1
PATTERN_CHUNK = 1 << 20
MAX_TRANSFER = 1 << 31  # bytes in one transfer (its data is held in memory until it completes)
PATTERN_CACHE_BYTES = 4 << 20  # patterns up to this size are kept once drawn ...
PATTERN_CACHE_ENTRIES = 8  # ... the last this many of them


def pattern(seed: int, size: int) -> bytes:
    """``size`` bytes of deterministic pattern data for ``seed``.

    The bytes of ``random.Random(seed)``, drawn 1 MiB at a time (one draw is limited to less
    than 256 MiB); a shorter pattern of the same seed is a prefix of a longer one. Patterns of
    up to :data:`PATTERN_CACHE_BYTES` are drawn once and kept (the last
    :data:`PATTERN_CACHE_ENTRIES`): a workload writes the same message size with the same seed
    message after message, and its receiver checks each against the same pattern.
    """
    if size <= 0:
        return b""
    if size <= PATTERN_CACHE_BYTES:
        return _kept_pattern(seed, size)
    return _draw(seed, size)


@functools.lru_cache(maxsize=PATTERN_CACHE_ENTRIES)
def _kept_pattern(seed: int, size: int) -> bytes:
    return _draw(seed, size)


def _draw(seed: int, size: int) -> bytes:
    rng = random.Random(seed)
    return b"".join(
        rng.randbytes(min(PATTERN_CHUNK, size - offset)) for offset in range(0, size, PATTERN_CHUNK)
    )


def sha256_hex(data: bytes | bytearray | memoryview) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


@dataclass
class VerifyResult:
    """Outcome of checking a region's bytes."""

    match: bool
    size: int
    sha256: str
    expected_sha256: str
    first_mismatch: int | None  # offset within the checked range, when known
    mismatched_bytes: int | None  # count, when pattern data was compared

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "match": self.match,
            "size": self.size,
            "sha256": self.sha256,
            "expected_sha256": self.expected_sha256,
            "first_mismatch": self.first_mismatch,
            "mismatched_bytes": self.mismatched_bytes,
        }


def verify_bytes(
    data: bytes | bytearray | memoryview, *, seed: int | None = None, sha256: str | None = None
) -> VerifyResult:
    """Compare ``data`` with pattern ``seed`` (byte by byte) or with a SHA-256 digest."""
    actual = sha256_hex(data)
    if seed is not None:
        expected = pattern(seed, len(data))
        if bytes(data) == expected:
            return VerifyResult(True, len(data), actual, actual, None, 0)
        first, count = _mismatches(bytes(data), expected)
        return VerifyResult(False, len(data), actual, sha256_hex(expected), first, count)
    if sha256 is None:
        raise ValueError("verify: give a pattern seed or a SHA-256 digest")
    expected_hex = sha256.lower()
    return VerifyResult(actual == expected_hex, len(data), actual, expected_hex, None, None)


def _mismatches(data: bytes, expected: bytes) -> tuple[int, int]:
    """First differing offset and number of differing bytes (compared in 4 KiB blocks)."""
    first = -1
    count = 0
    block = 4096
    for start in range(0, len(data), block):
        a, b = data[start : start + block], expected[start : start + block]
        if a == b:
            continue
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        if first < 0:
            first = start + diff[0]
        count += len(diff)
    return first, count


@dataclass
class Transfer:
    """One transfer from this host to a peer's region, and its progress."""

    id: int
    peer: str
    addr: int
    rkey: int
    size: int
    message_size: int
    policy: str
    imm: int | None
    seed: int | None
    source: str  # "pattern" or the file name
    data: bytes
    sha256: str
    started: float  # monotonic clock of the agent
    qpn: int = 0
    next_offset: int = 0  # bytes posted so far
    completed_bytes: int = 0
    messages_posted: int = 0
    messages_completed: int = 0
    finished: float | None = None
    error: str | None = None
    wr_ids: set[int] = field(default_factory=set)

    @property
    def messages(self) -> int:
        """Number of messages the transfer is split into."""
        return max(1, -(-self.size // self.message_size))

    @property
    def state(self) -> str:
        """``running``, ``done`` or ``failed``."""
        if self.error is not None:
            return "failed"
        return "done" if self.finished is not None else "running"

    @property
    def all_posted(self) -> bool:
        """True once every message has been posted to the QP."""
        return self.next_offset >= self.size and self.messages_posted >= self.messages

    def next_message(self) -> tuple[int, memoryview, bool]:
        """(offset, bytes, last) of the next message to post."""
        offset = self.next_offset
        end = min(self.size, offset + self.message_size)
        last = end >= self.size
        return offset, memoryview(self.data)[offset:end], last

    def summary(self, now: float) -> dict[str, Any]:
        """JSON form with progress and goodput."""
        end = self.finished if self.finished is not None else now
        elapsed = max(end - self.started, 0.0)
        return {
            "transfer": self.id,
            "peer": self.peer,
            "state": self.state,
            "size": self.size,
            "bytes_completed": self.completed_bytes,
            "messages": self.messages,
            "messages_completed": self.messages_completed,
            "message_size": self.message_size,
            "policy": self.policy,
            "imm": self.imm,
            "seed": self.seed,
            "source": self.source,
            "sha256": self.sha256,
            "addr": self.addr,
            "rkey": self.rkey,
            "qpn": self.qpn,
            "started": self.started,
            "finished": self.finished,
            "elapsed": elapsed,
            "goodput_bps": (self.completed_bytes * 8 / elapsed) if elapsed > 0 else 0.0,
            "error": self.error,
        }


__all__ = [
    "DEFAULT_MESSAGE_SIZE",
    "DEFAULT_SEED",
    "MAX_TRANSFER",
    "Transfer",
    "VerifyResult",
    "pattern",
    "sha256_hex",
    "verify_bytes",
]
