"""A watch that survives disconnects: one gRPC Watch stream at a time, reopened from the next
revision it needs after every failure, as etcd's clientv3 watch does.

```text
   Watch (the caller's iterator)          reader thread                        server
   next() <── buffer (bounded) <── _Resume.on_response() <── Watch stream <── created, events
                                        │ next_revision: every event before it was delivered
                                        │ to the buffer, in revision order, exactly once
                  stream fails ─────────┴─> backoff, then create{start_revision = next_revision}
                  canceled{compact_revision} ─> raise Compacted, or relist: create{initial_state}
```

Where the resume point comes from (watch.proto's contract):
- each event: next_revision = event.revision + 1;
- header.revision of a response that carries events, or of a progress notification: every event
  up to it was sent, so next_revision = max(next_revision, header.revision + 1) (a watch of a
  quiet key moves on without events, and resumes where history still is);
- the `created` response only for a watch "from now on" (start_revision 0): its header is
  where "now" was (for a watch from a start revision it says start_revision - 1: nothing new);
- initial_state: nothing until `initial_state_done`, whose header.revision R is the state's
  revision; next_revision = R + 1. A disconnect during the initial state starts it again.
An event older than next_revision (a server that sent one twice) is dropped and counted.

next_revision belongs to a history (header.history_id: the server's command log, or a server
run without persistence): a resume names it, and a server whose history is another one (a
restart without persistence) refuses the create; the watch then lists again ("history_lost")
or raises FutureRevision, instead of going on in another history and missing events.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from typing import Any, Deque, Iterator, List, Optional, Sequence, Tuple, Union

import grpc

from .errors import (CairnError, Compacted, FutureRevision, Unavailable, WatchCanceled,
                     WatchError, from_rpc_error)
from .types import Event, KeyValue, Progress, Resync, WatchItem
from .v1 import watch_pb2

#: The watch id the client asks for (one watch per stream).
WATCH_ID = 1

#: Status codes after which the stream is reopened; any other ends the watch with its error.
RETRYABLE = frozenset({
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
})


class _Relist(Exception):
    """The watch must list the range again (on_compacted="relist"): reopen at once."""


class _Resume:
    """The watch's resume state, fed one WatchResponse at a time (no I/O, so tests can drive
    it with responses of their own).

    Invariant: every event with revision < next_revision that the watch covers has been
    returned by on_response, once, in revision order; none >= next_revision has."""

    def __init__(self, create: watch_pb2.WatchCreateRequest, *, initial_state: bool,
                 start_revision: Optional[int], on_compacted: str, progress_items: bool) -> None:
        self.template = create
        #: None: "from now on", until the first created response says where now is.
        self.next_revision: Optional[int] = start_revision
        #: The initial state (or a relist) is still to be received.
        self.need_state = initial_state
        self.state_reason = "initial"
        self.compact_revision = 0
        self.on_compacted = on_compacted
        self.progress_items = progress_items
        #: Progress requests the caller made that are not answered yet.
        self.progress_wanted = 0
        #: The current stream's watch was created.
        self.created = False
        #: Initial items received on the current stream.
        self.items: List[KeyValue] = []
        #: Events dropped because they were older than next_revision.
        self.duplicates_dropped = 0
        #: The history next_revision belongs to (a header's history_id; 0: not known yet).
        self.history_id = 0

    def create_request(self) -> watch_pb2.WatchRequest:
        """The create request of the next stream: from where the watch is."""
        c = watch_pb2.WatchCreateRequest()
        c.CopyFrom(self.template)
        c.watch_id = WATCH_ID
        if self.need_state:
            c.initial_state = True
            c.start_revision = 0
        else:
            c.initial_state = False
            c.start_revision = self.next_revision or 0
            c.history_id = self.history_id if c.start_revision else 0
        self.created = False
        self.items = []
        return watch_pb2.WatchRequest(create_request=c)

    def on_response(self, r: watch_pb2.WatchResponse) -> List[WatchItem]:
        """What the response gives the caller, in order. Raises a WatchError when the watch
        cannot go on, _Relist when it must list again."""
        if r.watch_id == -1:
            # The stream's progress response: its one watch is this one.
            if r.progress_notify and self.progress_wanted > 0:
                self.progress_wanted -= 1
                if self.created and not self.need_state:
                    return self._progress(r.header.revision, force=True)
            return []
        if r.watch_id != WATCH_ID:
            return []
        if r.canceled:
            self._canceled(r)
        if r.created:
            self.created = True
            if not self.need_state and self.next_revision is None:
                # "From now on": the server's cursor is header.revision + 1.
                self.next_revision = r.header.revision + 1
            if not self.need_state and r.header.history_id:
                self.history_id = r.header.history_id
            return []
        if self.need_state:
            self.items.extend(KeyValue.from_pb(kv) for kv in r.initial_items)
            if not r.initial_state_done:
                return []
            revision = r.header.revision
            state = Resync(revision, tuple(self.items), self.state_reason, self.compact_revision)
            self.items = []
            self.need_state = False
            self.next_revision = revision + 1
            self.history_id = r.header.history_id
            return [state]
        assert self.next_revision is not None, "created comes first"
        out: List[WatchItem] = []
        for e in r.events:
            if e.revision < self.next_revision:
                self.duplicates_dropped += 1
                continue
            out.append(Event.from_pb(e))
            self.next_revision = e.revision + 1
        if r.events:
            self._advance(r.header.revision)
        elif r.progress_notify:
            out += self._progress(r.header.revision, force=False)
        return out

    def _advance(self, header_revision: int) -> None:
        assert self.next_revision is not None
        self.next_revision = max(self.next_revision, header_revision + 1)

    def _progress(self, revision: int, force: bool) -> List[WatchItem]:
        self._advance(revision)
        if force or self.progress_items:
            assert self.next_revision is not None
            return [Progress(self.next_revision - 1)]
        return []

    def _canceled(self, r: watch_pb2.WatchResponse) -> None:
        needed = self.next_revision or 0
        theirs = r.header.history_id
        if not self.need_state and self.history_id and theirs and theirs != self.history_id:
            # The server's history is not the one next_revision belongs to (a restart without
            # persistence): its revisions mean other events.
            if self.on_compacted == "relist":
                self._relist("history_lost", 0)
            raise FutureRevision(needed, r.cancel_reason)
        if r.compact_revision:
            if self.on_compacted == "relist":
                self._relist("compacted", r.compact_revision)
            raise Compacted(r.compact_revision, needed, r.cancel_reason)
        if not self.need_state and "in the future" in r.cancel_reason:
            # The server's history ends before what this watch already saw.
            if self.on_compacted == "relist":
                self._relist("history_lost", 0)
            raise FutureRevision(needed, r.cancel_reason)
        raise WatchCanceled(r.cancel_reason or "canceled by the server")

    def _relist(self, reason: str, compact_revision: int) -> None:
        self.need_state = True
        self.state_reason = reason
        self.compact_revision = compact_revision
        raise _Relist()


class _End:
    """The buffer's last entry: the watch ended (error None: closed by the caller)."""

    def __init__(self, error: Optional[BaseException]) -> None:
        self.error = error


class Watch(Iterator[WatchItem]):
    """An iterator of the events of a key range: `Event`s in revision order, `Resync` when the
    whole state is (re)sent, `Progress` when asked for. Disconnects and server restarts are
    invisible: the stream is reopened from the revision after the last one delivered, with
    exponential backoff (and jitter) from `backoff_initial` to `backoff_max` seconds, for at
    most `reconnect_deadline` seconds in a row without a successful create (None: forever),
    after which iteration raises `Unavailable`.

    Made by `Client.watch`; close it (or use `with`) to end the stream."""

    def __init__(self, stub: Any, create: watch_pb2.WatchCreateRequest, *,
                 start_revision: Optional[int], initial_state: bool, on_compacted: str,
                 progress_notify: bool, reconnect_deadline: Optional[float],
                 backoff_initial: float, backoff_max: float, buffer_size: int,
                 metadata: Optional[Sequence[Tuple[str, str]]] = None) -> None:
        if on_compacted not in ("raise", "relist"):
            raise ValueError('on_compacted must be "raise" or "relist"')
        if initial_state and start_revision is not None:
            raise ValueError("initial_state and start_revision exclude each other")
        if start_revision is not None and start_revision < 1:
            raise ValueError("start_revision must be >= 1 (None: from now on)")
        self._stub = stub
        self._metadata = metadata
        self._resume = _Resume(create, initial_state=initial_state,
                               start_revision=start_revision, on_compacted=on_compacted,
                               progress_items=progress_notify)
        self._reconnect_deadline = reconnect_deadline
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._buffer_size = max(1, buffer_size)
        self._buffer: Deque[Union[WatchItem, _End]] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._ended = False
        self._call: Any = None
        self._requests: Optional["_Requests"] = None
        self._created = threading.Event()
        #: Streams opened after the first (disconnects survived).
        self.reconnects = 0
        #: The revision of the last event (or state, or progress) handed to the caller.
        self.revision = 0
        self._thread = threading.Thread(target=self._run, name="cairn-watch", daemon=True)
        self._thread.start()

    # ---- the caller's side ---------------------------------------------------------------

    def __iter__(self) -> Watch:
        return self

    def __next__(self) -> WatchItem:
        return self.next()

    def next(self, timeout: Optional[float] = None) -> WatchItem:
        """The next item; TimeoutError when none came within `timeout` seconds (None: wait).
        Raises the error that ended the watch (Compacted, Unavailable...) once every item before
        it was delivered; StopIteration once closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._buffer:
                if self._ended or self._closed:
                    raise StopIteration
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"no watch event within {timeout} s")
                self._cond.wait(left)
            item = self._buffer.popleft()
            self._cond.notify_all()
        if isinstance(item, _End):
            self._ended = True
            if item.error is not None:
                raise item.error
            raise StopIteration
        self.revision = item.revision
        return item

    def wait_created(self, timeout: Optional[float] = None) -> bool:
        """Waits until the server acknowledged the watch (the first time): writes after this
        returns are events of the watch. False on timeout."""
        return self._created.wait(timeout)

    def request_progress(self) -> None:
        """Asks the server for a progress response: a `Progress` item follows, once every event
        up to its revision was delivered. Lost (no item) if the stream fails meanwhile."""
        with self._cond:
            if self._requests is not None:
                self._resume.progress_wanted += 1
                self._requests.put(watch_pb2.WatchRequest(
                    progress_request=watch_pb2.WatchProgressRequest()))

    @property
    def duplicates_dropped(self) -> int:
        """Events the server sent twice (older than what was delivered), dropped."""
        return self._resume.duplicates_dropped

    def close(self) -> None:
        """Ends the stream; iteration stops. Safe to call twice, from any thread."""
        with self._cond:
            self._closed = True
            call, requests = self._call, self._requests
            self._cond.notify_all()
        if requests is not None:
            requests.close()
        if call is not None:
            call.cancel()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the reader thread ---------------------------------------------------------------

    def _put(self, item: Union[WatchItem, _End]) -> bool:
        """Appends to the buffer, waiting for room; False once closed."""
        with self._cond:
            while len(self._buffer) >= self._buffer_size and not self._closed:
                self._cond.wait()
            if self._closed:
                return False
            self._buffer.append(item)
            self._cond.notify_all()
            return True

    def _run(self) -> None:
        backoff = self._backoff_initial
        failing_since: Optional[float] = None
        first = True
        while True:
            requests = _Requests(self._resume.create_request())
            with self._cond:
                if self._closed:
                    return
                call = self._stub.Watch(iter(requests), metadata=self._metadata)
                self._call, self._requests = call, requests
            if not first:
                self.reconnects += 1
            first = False
            error: Optional[BaseException] = None
            try:
                for response in call:
                    items = self._resume.on_response(response)
                    if response.created and not response.canceled:
                        failing_since, backoff = None, self._backoff_initial
                        self._created.set()
                    for item in items:
                        if not self._put(item):
                            return
            except _Relist:
                requests.close()
                call.cancel()
                continue  # at once: the server is there, it only moved on
            except WatchError as e:
                error = e
            except grpc.RpcError as e:
                if self._closed:
                    return
                if e.code() not in RETRYABLE:
                    error = from_rpc_error(e)
            except BaseException as e:  # a bug: end the watch with it rather than hang
                error = e
            finally:
                requests.close()
                call.cancel()
            if self._closed:
                return
            if error is not None:
                self._put(_End(error))
                return
            # The stream failed (or the server ended it): reopen after a backoff.
            now = time.monotonic()
            if failing_since is None:
                failing_since = now
            elif (self._reconnect_deadline is not None
                  and now - failing_since > self._reconnect_deadline):
                self._put(_End(Unavailable(
                    f"the watch could not reconnect for {self._reconnect_deadline} s",
                    grpc.StatusCode.UNAVAILABLE)))
                return
            delay = random.uniform(backoff / 2, backoff)
            backoff = min(backoff * 2, self._backoff_max)
            with self._cond:
                if self._cond.wait_for(lambda: self._closed, timeout=delay):
                    return


class _Requests:
    """The request side of one Watch stream: the create request, then progress requests, until
    closed. Iterated by grpcio's sending thread."""

    def __init__(self, create: watch_pb2.WatchRequest) -> None:
        self._q: Deque[watch_pb2.WatchRequest] = deque([create])
        self._cond = threading.Condition()
        self._closed = False

    def put(self, r: watch_pb2.WatchRequest) -> None:
        with self._cond:
            self._q.append(r)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def __iter__(self) -> Iterator[watch_pb2.WatchRequest]:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._q or self._closed)
                if not self._q:
                    return
                r = self._q.popleft()
            yield r


__all__ = ["Watch"]
