"""The exceptions the client raises, one per gRPC status code cairn answers (kv.proto's list),
and the watch's own.

    CairnError
    ├── NotFound            NOT_FOUND: no such key (get, delete, touch, set REPLACE or with a compare)
    ├── AlreadyExists       ALREADY_EXISTS: set ADD on a key that exists
    ├── CompareFailed       FAILED_PRECONDITION: a compare on CAS or mod_revision did not match
    ├── InvalidArgument     INVALID_ARGUMENT: a bad key, too many keys, a bad page token...
    ├── ResourceExhausted   RESOURCE_EXHAUSTED: a message or value over the limit, store full
    ├── Unavailable         UNAVAILABLE: no server, or writes refused (the command log failed)
    ├── DeadlineExceeded    DEADLINE_EXCEEDED: the call's timeout passed
    └── WatchError          a watch ended for a reason a reconnect cannot mend
        ├── Compacted       history no longer holds the next revision (compact_revision)
        ├── FutureRevision  the server no longer knows the next revision (it lost its history)
        └── WatchCanceled   the server canceled the watch for another reason
"""

from __future__ import annotations

from typing import Dict, Optional, Type

import grpc


class CairnError(Exception):
    """Any error of a cairn call: `code` is the gRPC status code (None for the client's own
    errors), `details` the server's message."""

    def __init__(self, details: str, code: Optional[grpc.StatusCode] = None) -> None:
        super().__init__(details if code is None else f"{code.name}: {details}")
        self.code = code
        self.details = details


class NotFound(CairnError):
    """The key does not exist."""


class AlreadyExists(CairnError):
    """Set with mode ADD on a key that exists."""


class CompareFailed(CairnError):
    """A compare on CAS or mod_revision did not match the current item."""


class InvalidArgument(CairnError):
    """The server refused the request (bad key, too many keys, bad page token...)."""


class ResourceExhausted(CairnError):
    """A message or value over the server's limit, or the store full with eviction off."""


class Unavailable(CairnError):
    """The server cannot be reached, or refuses writes because its command log failed."""


class DeadlineExceeded(CairnError):
    """The call's timeout passed before the answer came."""


class WatchError(CairnError):
    """A watch ended for a reason that reconnecting would not mend."""


class Compacted(WatchError):
    """The server's history no longer holds the revision the watch needs next.

    `compact_revision` is the oldest revision still available; `revision` is the one the watch
    needed (every event before it was delivered). Re-sync: list the keys again (or watch with
    `on_compacted="relist"`, which does it for you)."""

    def __init__(self, compact_revision: int, revision: int, details: str) -> None:
        super().__init__(f"compacted: needed revision {revision}, history starts at "
                         f"{compact_revision} ({details})")
        self.compact_revision = compact_revision
        self.revision = revision


class FutureRevision(WatchError):
    """The server refused the revision the watch needs next as one it has not reached: it lost
    history the watch already saw (a restart without persistence, or an async-mode power loss).
    Re-sync, as for `Compacted`."""

    def __init__(self, revision: int, details: str) -> None:
        super().__init__(f"revision {revision} is unknown to the server ({details})")
        self.revision = revision


class WatchCanceled(WatchError):
    """The server canceled the watch for a reason other than history (the message says)."""


_BY_CODE: Dict[grpc.StatusCode, Type[CairnError]] = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: CompareFailed,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
}


def from_rpc_error(e: grpc.RpcError) -> CairnError:
    """The exception for a failed call, by its status code."""
    code = e.code() if isinstance(e, grpc.Call) else None
    details = (e.details() if isinstance(e, grpc.Call) else None) or str(e)
    cls = _BY_CODE.get(code, CairnError) if code is not None else CairnError
    return cls(details, code)
