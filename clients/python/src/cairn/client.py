"""The client: cairn's KV service as Python calls, and the resuming watch.

```text
   Client ── one grpc.Channel ──┬─ KV stub:    get set delete touch batch_get scan stream_get
                                └─ Watch stub: watch() -> Watch (cairn.watch), one stream each
```

Every unary call has a deadline (the client's `timeout`, or the call's own `timeout=`), and a
failed call raises the CairnError subclass of its status code (cairn.errors).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple,
                    TypeVar, Union)

import grpc

from .errors import CairnError, InvalidArgument, from_rpc_error
from .types import Bytes, KeyValue, SetMode, SetResult, TouchResult, to_bytes
from .v1 import kv_pb2, kv_pb2_grpc, watch_pb2, watch_pb2_grpc
from .watch import Watch

T = TypeVar("T")


class _Default:
    def __repr__(self) -> str:
        return "DEFAULT"


#: "The client's timeout" for a call's `timeout=` argument.
DEFAULT: Any = _Default()

#: Keys in one BatchGet request (the server takes at most 10,000, or its max_keys_per_get).
BATCH_KEYS = 10_000


@dataclass(frozen=True)
class TLS:
    """TLS settings: the CA certificates that sign the server's (PEM; None: the system's), a
    client certificate and key for mutual TLS, and the name the server's certificate must carry
    when it is not the endpoint's host."""

    root_certificates: Optional[bytes] = None
    private_key: Optional[bytes] = None
    certificate_chain: Optional[bytes] = None
    server_name: Optional[str] = None


class Client:
    """A connection to one cairn server's gRPC API.

    `endpoint` is `host:port`; `tls` None (or False) for plain text, True for TLS with the
    system's CA certificates, a `TLS` or a `grpc.ChannelCredentials`; `timeout` the deadline of
    each call in seconds (None: none); `options` extra grpc channel options. Thread safe; close
    it (or use `with`) when done."""

    def __init__(self, endpoint: str = "127.0.0.1:50051", *,
                 tls: Union[None, bool, TLS, grpc.ChannelCredentials] = None,
                 timeout: Optional[float] = 10.0,
                 wait_for_ready: bool = False,
                 metadata: Optional[Sequence[Tuple[str, str]]] = None,
                 options: Optional[Sequence[Tuple[str, Any]]] = None) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.wait_for_ready = wait_for_ready
        self._metadata = tuple(metadata) if metadata else None
        opts: Dict[str, Any] = {
            # Values up to the server's item size limit (128 MiB at most): its own limit is the
            # one that matters.
            "grpc.max_receive_message_length": -1,
            "grpc.max_send_message_length": -1,
            # Find a restarted server soon (grpc's default waits 1 s, then up to 120 s).
            "grpc.initial_reconnect_backoff_ms": 100,
            "grpc.max_reconnect_backoff_ms": 2000,
            # A watch on a quiet range notices a dead peer (no RST) within ~40 s.
            "grpc.keepalive_time_ms": 30_000,
            "grpc.keepalive_timeout_ms": 10_000,
        }
        creds: Optional[grpc.ChannelCredentials] = None
        if isinstance(tls, grpc.ChannelCredentials):
            creds = tls
        elif tls is True:
            creds = grpc.ssl_channel_credentials()
        elif isinstance(tls, TLS):
            creds = grpc.ssl_channel_credentials(tls.root_certificates, tls.private_key,
                                                 tls.certificate_chain)
            if tls.server_name:
                opts["grpc.ssl_target_name_override"] = tls.server_name
        elif tls not in (None, False):
            raise TypeError("tls must be None, a bool, cairn.TLS or grpc.ChannelCredentials")
        opts.update(dict(options or ()))
        items = list(opts.items())
        self._channel = (grpc.secure_channel(endpoint, creds, options=items) if creds
                         else grpc.insecure_channel(endpoint, options=items))
        # The generated stubs have no type hints.
        self._kv: Any = kv_pb2_grpc.KVStub(self._channel)  # type: ignore[no-untyped-call]
        self._watch_stub: Any = watch_pb2_grpc.WatchStub(  # type: ignore[no-untyped-call]
            self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _deadline(self, timeout: Any) -> Optional[float]:
        return self.timeout if timeout is DEFAULT else timeout

    def _call(self, method: Callable[..., T], request: Any, timeout: Any) -> T:
        try:
            return method(request, timeout=self._deadline(timeout), metadata=self._metadata,
                          wait_for_ready=self.wait_for_ready)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    # ---- KV ------------------------------------------------------------------------------

    def get(self, key: Bytes, *, timeout: Any = DEFAULT) -> KeyValue:
        """The item under `key`; NotFound if there is none."""
        r = self._call(self._kv.Get, kv_pb2.GetRequest(key=to_bytes(key)), timeout)
        return KeyValue.from_pb(r.kv)

    def set(self, key: Bytes, value: Bytes, *, flags: int = 0, ttl: int = 0,
            expires_at: int = 0, mode: Union[SetMode, str] = SetMode.SET,
            cas: Optional[int] = None, mod_revision: Optional[int] = None,
            timeout: Any = DEFAULT) -> SetResult:
        """Stores `value` under `key`.

        `ttl`: seconds until it expires (0 never), or `expires_at` in unix seconds (wins when
        non-zero). `mode`: SetMode.SET (or "set"), ADD ("add": AlreadyExists if the key exists),
        REPLACE ("replace": NotFound if it does not). `cas` or `mod_revision`: store only if the
        current item has that CAS unique or mod_revision (CompareFailed if not, NotFound if
        there is no item)."""
        request = kv_pb2.SetRequest(
            key=to_bytes(key), value=to_bytes(value), flags=flags, ttl_seconds=ttl,
            expires_at=expires_at, mode=_mode(mode), compare=_compare(cas, mod_revision))
        r = self._call(self._kv.Set, request, timeout)
        return SetResult(r.cas, r.mod_revision, r.header.revision)

    def add(self, key: Bytes, value: Bytes, **kw: Any) -> SetResult:
        """set(..., mode=SetMode.ADD)."""
        return self.set(key, value, mode=SetMode.ADD, **kw)

    def replace(self, key: Bytes, value: Bytes, **kw: Any) -> SetResult:
        """set(..., mode=SetMode.REPLACE)."""
        return self.set(key, value, mode=SetMode.REPLACE, **kw)

    def delete(self, key: Bytes, *, cas: Optional[int] = None,
               mod_revision: Optional[int] = None, timeout: Any = DEFAULT) -> int:
        """Deletes `key` (only if it matches `cas` or `mod_revision` when given); the delete's
        revision. NotFound if there is no item, CompareFailed if it does not match."""
        request = kv_pb2.DeleteRequest(key=to_bytes(key), compare=_compare(cas, mod_revision))
        return int(self._call(self._kv.Delete, request, timeout).revision)

    def touch(self, key: Bytes, ttl: int = 0, *, expires_at: int = 0,
              timeout: Any = DEFAULT) -> TouchResult:
        """Sets a new expiry: `ttl` seconds from now (0 never), or `expires_at` (unix seconds)."""
        request = kv_pb2.TouchRequest(key=to_bytes(key), ttl_seconds=ttl, expires_at=expires_at)
        r = self._call(self._kv.Touch, request, timeout)
        return TouchResult(r.mod_revision, r.expires_at, r.header.revision)

    def batch_get(self, keys: Iterable[Bytes], *, timeout: Any = DEFAULT
                  ) -> List[Optional[KeyValue]]:
        """The items under `keys`, in their order (None where there is none). More than
        10,000 keys go as several requests (each with the timeout)."""
        wanted = [to_bytes(k) for k in keys]
        out: List[Optional[KeyValue]] = []
        for at in range(0, len(wanted), BATCH_KEYS):
            request = kv_pb2.BatchGetRequest(keys=wanted[at:at + BATCH_KEYS])
            r = self._call(self._kv.BatchGet, request, timeout)
            out += [KeyValue.from_pb(x.kv) if x.found else None for x in r.results]
        return out

    def scan(self, prefix: Bytes = b"", *, page_size: int = 100, keys_only: bool = False,
             timeout: Any = DEFAULT) -> Iterator[KeyValue]:
        """Every item whose key starts with `prefix`, in key order, fetched a page at a time
        (each page a call with the timeout). A key that exists, unchanged, for the whole scan
        comes exactly once; one written meanwhile may or may not."""
        token = b""
        p = to_bytes(prefix)
        while True:
            request = kv_pb2.ScanRequest(prefix=p, limit=page_size, page_token=token,
                                         keys_only=keys_only)
            page = self._call(self._kv.Scan, request, timeout)
            for kv in page.kvs:
                yield KeyValue.from_pb(kv)
            token = page.next_page_token
            if not token:
                return

    def stream_get(self, keys: Iterable[Bytes], *, batch_size: int = 100, window: int = 64,
                   timeout: Optional[float] = None
                   ) -> Iterator[Tuple[bytes, Optional[KeyValue]]]:
        """(key, item or None) for each of `keys`, in their order, over one StreamGet stream:
        keys go in batches of `batch_size` (each a request id), at most `window` batches ahead
        of the answers read. `keys` is read lazily, so it may be a long generator. `timeout`
        (None: none) is for the whole stream. A batch the server refuses (a bad key) raises
        InvalidArgument."""
        if batch_size < 1 or window < 1:
            raise ValueError("batch_size and window must be >= 1")
        pending: Dict[int, List[bytes]] = {}
        room = threading.Semaphore(window)
        stop = threading.Event()
        failed: List[BaseException] = []

        def requests() -> Iterator[kv_pb2.StreamGetRequest]:
            rid = 0
            batch: List[bytes] = []
            it = iter(keys)
            try:
                while True:
                    batch = []
                    for k in it:
                        batch.append(to_bytes(k))
                        if len(batch) == batch_size:
                            break
                    if not batch:
                        return
                    while not room.acquire(timeout=0.1):
                        if stop.is_set():
                            return
                    if stop.is_set():
                        return
                    rid += 1
                    pending[rid] = batch
                    yield kv_pb2.StreamGetRequest(request_id=rid, keys=batch)
            except Exception as e:  # the caller's keys failed: end the stream, raise it there
                failed.append(e)

        call = self._kv.StreamGet(requests(), timeout=timeout, metadata=self._metadata,
                                  wait_for_ready=self.wait_for_ready)
        try:
            for answer in call:
                batch = pending.pop(answer.request_id, None)
                room.release()
                if batch is None:
                    raise CairnError(f"StreamGet answered unknown request {answer.request_id}")
                if answer.error:
                    raise InvalidArgument(answer.error, grpc.StatusCode.INVALID_ARGUMENT)
                if len(answer.results) != len(batch):
                    raise CairnError(f"StreamGet answered {len(answer.results)} of "
                                     f"{len(batch)} keys of request {answer.request_id}")
                for key, lookup in zip(batch, answer.results):
                    yield key, KeyValue.from_pb(lookup.kv) if lookup.found else None
        except grpc.RpcError as e:
            if failed:
                raise failed[0] from None
            raise from_rpc_error(e) from None
        finally:
            stop.set()
            call.cancel()
        if failed:
            raise failed[0]
        if pending:
            raise CairnError(f"StreamGet ended with {len(pending)} requests unanswered")

    # ---- Watch ---------------------------------------------------------------------------

    def watch(self, prefix: Bytes = b"", *, start_revision: Optional[int] = None,
              initial_state: bool = False, prev_kv: bool = False,
              on_compacted: str = "raise", **kw: Any) -> Watch:
        """Watches every key that starts with `prefix` (b"": every key); see `watch_range`."""
        return self._watch(watch_pb2.WatchCreateRequest(key=to_bytes(prefix), prefix=True),
                           start_revision, initial_state, prev_kv, on_compacted, **kw)

    def watch_key(self, key: Bytes, *, start_revision: Optional[int] = None,
                  initial_state: bool = False, prev_kv: bool = False,
                  on_compacted: str = "raise", **kw: Any) -> Watch:
        """Watches one key; see `watch_range`."""
        return self._watch(watch_pb2.WatchCreateRequest(key=to_bytes(key)), start_revision,
                           initial_state, prev_kv, on_compacted, **kw)

    def watch_range(self, start: Bytes, end: Optional[Bytes] = None, *,
                    start_revision: Optional[int] = None, initial_state: bool = False,
                    prev_kv: bool = False, on_compacted: str = "raise",
                    no_put: bool = False, no_delete: bool = False,
                    progress_notify: bool = False, reconnect_deadline: Optional[float] = None,
                    backoff_initial: float = 0.05, backoff_max: float = 2.0,
                    buffer_size: int = 10_000) -> Watch:
        """Watches the keys in [start, end) (end None: every key >= start), and returns the
        iterator of what happens to them (`Event`, `Resync`, `Progress`).

        - `start_revision`: the first revision to deliver (None: from now on);
        - `initial_state`: first a `Resync` with every item of the range, then the events after
          it (excludes `start_revision`);
        - `prev_kv`: each event carries the item before it (the server keeps those only for its
          in-memory history: older, the watch is compacted);
        - `on_compacted`: when the server's history no longer holds the next revision,
          "raise" ends the iteration with `Compacted` (carrying `compact_revision`), "relist"
          lists the range again and yields a `Resync` with reason "compacted", then goes on;
        - `no_put`, `no_delete`: leave those events out;
        - `progress_notify`: ask for periodic progress, and yield `Progress` items;
        - `reconnect_deadline`: give up with `Unavailable` after failing to reconnect for this
          many seconds (None: never); `backoff_initial`/`backoff_max`: the delays between
          attempts (doubling, with jitter);
        - `buffer_size`: items read ahead of the caller (then the stream waits).

        Across disconnects and server restarts the events are those an uninterrupted watch
        would give: each revision once, in order, none missing."""
        create = watch_pb2.WatchCreateRequest(key=to_bytes(start))
        if end is None:
            create.range_end = b"\0"
        else:
            create.range_end = to_bytes(end)
        return self._watch(create, start_revision, initial_state, prev_kv, on_compacted,
                           no_put=no_put, no_delete=no_delete, progress_notify=progress_notify,
                           reconnect_deadline=reconnect_deadline,
                           backoff_initial=backoff_initial, backoff_max=backoff_max,
                           buffer_size=buffer_size)

    def _watch(self, create: watch_pb2.WatchCreateRequest, start_revision: Optional[int],
               initial_state: bool, prev_kv: bool, on_compacted: str, *,
               no_put: bool = False, no_delete: bool = False, progress_notify: bool = False,
               reconnect_deadline: Optional[float] = None, backoff_initial: float = 0.05,
               backoff_max: float = 2.0, buffer_size: int = 10_000) -> Watch:
        create.prev_kv = prev_kv
        create.progress_notify = progress_notify
        if no_put:
            create.filters.append(watch_pb2.WatchCreateRequest.NOPUT)
        if no_delete:
            create.filters.append(watch_pb2.WatchCreateRequest.NODELETE)
        return Watch(self._watch_stub, create, start_revision=start_revision,
                     initial_state=initial_state, on_compacted=on_compacted,
                     progress_notify=progress_notify, reconnect_deadline=reconnect_deadline,
                     backoff_initial=backoff_initial, backoff_max=backoff_max,
                     buffer_size=buffer_size, metadata=self._metadata)


def _mode(mode: Union[SetMode, str]) -> Any:
    if isinstance(mode, str):
        try:
            return int(SetMode[mode.upper()])
        except KeyError:
            raise ValueError(f"mode must be one of set, add, replace: {mode!r}") from None
    return int(SetMode(mode))


def _compare(cas: Optional[int], mod_revision: Optional[int]) -> Optional[kv_pb2.Compare]:
    if cas is not None and mod_revision is not None:
        raise ValueError("compare on cas or on mod_revision, not both")
    if cas is not None:
        return kv_pb2.Compare(cas=cas)
    if mod_revision is not None:
        return kv_pb2.Compare(mod_revision=mod_revision)
    return None
