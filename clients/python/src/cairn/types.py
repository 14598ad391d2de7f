"""The values the client returns: plain frozen dataclasses, not protobuf messages."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Tuple, Union

from .v1 import kv_pb2, watch_pb2

#: A key or value as the caller may give it: bytes, or str (sent as UTF-8).
Bytes = Union[bytes, bytearray, memoryview, str]


def to_bytes(b: Bytes) -> bytes:
    if isinstance(b, str):
        return b.encode()
    if isinstance(b, (bytes, bytearray, memoryview)):
        return bytes(b)
    raise TypeError(f"expected bytes or str, got {type(b).__name__}")


class SetMode(enum.IntEnum):
    """kv.proto's SetMode."""

    #: Store whether or not the key exists (memcached set).
    SET = 0
    #: Store only if the key does not exist (memcached add); AlreadyExists otherwise.
    ADD = 1
    #: Store only if the key exists (memcached replace); NotFound otherwise.
    REPLACE = 2


class EventType(enum.IntEnum):
    PUT = 0
    DELETE = 1
    #: Every item was removed (flush_all); matches every watch.
    FLUSH = 2


class DeleteReason(enum.IntEnum):
    NONE = 0
    CLIENT = 1
    EXPIRED = 2
    EVICTED = 3
    FLUSHED = 4


@dataclass(frozen=True)
class KeyValue:
    """One item, as the store holds it."""

    key: bytes
    value: bytes
    #: memcached's opaque 32-bit client flags.
    flags: int = 0
    #: Absolute expiry in unix seconds; 0 = never.
    expires_at: int = 0
    #: memcached's CAS unique.
    cas: int = 0
    #: The revision of the mutation that made this state of the item.
    mod_revision: int = 0
    #: Marked stale by meta invalidate.
    stale: bool = False

    @staticmethod
    def from_pb(m: kv_pb2.KeyValue) -> KeyValue:
        return KeyValue(m.key, m.value, m.flags, m.expires_at, m.cas, m.mod_revision, m.stale)


@dataclass(frozen=True)
class SetResult:
    #: The new item's CAS unique and revision.
    cas: int
    mod_revision: int
    #: The newest revision the server had published when it answered (ResponseHeader).
    revision: int


@dataclass(frozen=True)
class TouchResult:
    mod_revision: int
    expires_at: int
    revision: int


@dataclass(frozen=True)
class Event:
    """One mutation a watch delivers."""

    type: EventType
    #: PUT: the whole new item (mod_revision = revision). DELETE: the key. FLUSH: empty.
    kv: KeyValue
    #: The revision of the mutation; strictly increasing along a watch.
    revision: int
    reason: DeleteReason = DeleteReason.NONE
    #: With prev_kv: the item before this event, if there was one.
    prev_kv: Optional[KeyValue] = None

    @staticmethod
    def from_pb(e: watch_pb2.Event) -> Event:
        return Event(
            EventType(e.type),
            KeyValue.from_pb(e.kv),
            e.revision,
            DeleteReason(e.reason),
            KeyValue.from_pb(e.prev_kv) if e.HasField("prev_kv") else None,
        )


@dataclass(frozen=True)
class Resync:
    """The watched range's whole state as of `revision`: replace what you hold with `items`; the
    events that follow are those after `revision`.

    A watch yields one first when it was asked for `initial_state`, and again, with
    `reason="compacted"` (or `"history_lost"`), each time `on_compacted="relist"` had to list the
    range anew because the server's history no longer held the next revision: the events between
    are gone, so state built from earlier events must be dropped.

    The server leaves out of `items` the items changed after `revision` while it scanned (their
    events follow): `items` and then the events after them give the server's state, `items`
    alone may lack a key that existed at `revision`."""

    revision: int
    items: Tuple[KeyValue, ...]
    #: "initial", "compacted" (the server's history had passed the watch) or "history_lost"
    #: (the server no longer knew the watch's revision: restarted without persistence).
    reason: str
    #: With reason "compacted": the oldest revision the server still had.
    compact_revision: int = 0


@dataclass(frozen=True)
class Progress:
    """Every event of the watch up to `revision` has been delivered."""

    revision: int


#: What a watch yields.
WatchItem = Union[Event, Resync, Progress]
