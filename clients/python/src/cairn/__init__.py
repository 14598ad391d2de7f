"""cairn's Python client: the gRPC API's key-value calls and a watch that resumes across
disconnects and server restarts.

    from cairn import Client
    with Client("127.0.0.1:50051") as c:
        c.set("greeting", "hello", ttl=60)
        print(c.get("greeting").value)
        for item in c.watch("app/", initial_state=True):
            print(item)
"""

from .client import DEFAULT, TLS, Client
from .errors import (AlreadyExists, CairnError, Compacted, CompareFailed, DeadlineExceeded,
                     FutureRevision, InvalidArgument, NotFound, ResourceExhausted, Unavailable,
                     WatchCanceled, WatchError)
from .types import (DeleteReason, Event, EventType, KeyValue, Progress, Resync, SetMode,
                    SetResult, TouchResult, WatchItem)
from .watch import Watch

__version__ = "0.1.0"

__all__ = [
    "AlreadyExists", "CairnError", "Client", "Compacted", "CompareFailed", "DEFAULT",
    "DeadlineExceeded", "DeleteReason", "Event", "EventType", "FutureRevision",
    "InvalidArgument", "KeyValue", "NotFound", "Progress", "ResourceExhausted", "Resync",
    "SetMode", "SetResult", "TLS", "TouchResult", "Unavailable", "Watch", "WatchCanceled",
    "WatchError", "WatchItem",
]
