"""The resuming watch against the real server: what it yields, that disconnects and kill -9
restarts change nothing in it (its events equal an uninterrupted watcher's), and what it does
when the server's history no longer holds the next revision.

The disconnect tests pick their moments at random: each prints its seed (CAIRN_TEST_SEED=N
replays one).
"""

from __future__ import annotations

import os
import queue
import random
import threading
import time
from typing import Callable, Dict, List, Optional

import grpc
import pytest

from cairn import (CairnError, Client, Compacted, DeleteReason, Event, EventType, FutureRevision,
                   KeyValue, NotFound, Progress, Resync, Unavailable)
from cairn.v1 import watch_pb2, watch_pb2_grpc
from cairn.watch import _Resume

from conftest import Proxy, Server


def seeded(name: str) -> random.Random:
    seed = int(os.environ.get("CAIRN_TEST_SEED", random.randrange(1 << 32)))
    print(f"{name}: seed {seed} (CAIRN_TEST_SEED={seed} replays it)")
    return random.Random(seed)


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def as_tuple(e) -> tuple:
    """An event's every field (a cairn.Event or a raw watch_pb2.Event)."""
    kv = e.kv
    prev = e.prev_kv
    prev_t = None if prev is None or (not isinstance(prev, KeyValue) and not e.HasField("prev_kv")) \
        else (prev.key, prev.value, prev.flags, prev.mod_revision)
    return (int(e.type), kv.key, kv.value, kv.flags, kv.expires_at, kv.cas, kv.mod_revision,
            kv.stale, int(e.reason), e.revision, prev_t)


def raw_events(addr: str, prefix: bytes, start: int, end: int) -> list:
    """What one uninterrupted watch from `start` gives, up to revision `end`, straight from
    the generated stubs (no client logic)."""
    channel = grpc.insecure_channel(addr)
    requests: queue.Queue = queue.Queue()
    requests.put(watch_pb2.WatchRequest(create_request=watch_pb2.WatchCreateRequest(
        key=prefix, prefix=True, start_revision=start)))
    call = watch_pb2_grpc.WatchStub(channel).Watch(iter(requests.get, None), timeout=120)
    out: list = []
    try:
        for r in call:
            assert not r.canceled, r
            out += r.events
            if out and out[-1].revision >= end:
                return out
    finally:
        requests.put(None)
        call.cancel()
        channel.close()
    raise AssertionError("the reference watch ended early")


class Reader:
    """Drains a watch on a thread into `items`."""

    def __init__(self, w) -> None:
        self.w = w
        self.items: list = []
        self.error: Optional[BaseException] = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.items.append(self.w.next(timeout=0.1))
            except TimeoutError:
                pass
            except StopIteration:
                return
            except BaseException as e:
                self.error = e
                return

    def events(self) -> List[Event]:
        return [i for i in self.items if isinstance(i, Event)]

    def reached(self, revision: int) -> bool:
        ev = self.events()
        return bool(ev) and ev[-1].revision >= revision

    def stop(self) -> None:
        self._stop.set()
        self._t.join(timeout=10)
        self.w.close()


class Writer:
    """Writes to keys under `prefix` on a thread, through failures, recording each write
    acknowledged as (key, value or None for a delete, revision)."""

    def __init__(self, client: Client, prefix: str, rng: random.Random) -> None:
        self.c, self.prefix, self.rng = client, prefix, rng
        self.acked: list = []
        self.failures = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            i += 1
            key = f"{self.prefix}k{self.rng.randrange(40)}"
            try:
                if i % 5 == 0:
                    self.acked.append((key.encode(), None, self.c.delete(key)))
                else:
                    value = f"v{i}-" + "x" * self.rng.randrange(200)
                    r = self.c.set(key, value, flags=i)
                    self.acked.append((key.encode(), value.encode(), r.mod_revision))
            except NotFound:
                pass
            except CairnError:
                self.failures += 1  # the server is down: try again
                time.sleep(0.005)

    def wait_for(self, n: int) -> None:
        target = len(self.acked) + n
        wait_until(lambda: len(self.acked) >= target, 120, f"{n} more acknowledged writes")

    def stop(self) -> None:
        self._stop.set()
        self._t.join(timeout=30)


def check_against_reference(reader: Reader, writer: Writer, addr: str, prefix: bytes,
                            start: int, end: int) -> None:
    """The watch's events equal an uninterrupted watch's; each acknowledged write is among
    them with its revision; revisions strictly increase."""
    got = reader.events()
    assert all(isinstance(i, Event) for i in reader.items), "no resync, no progress here"
    # Each reconnect asked for exactly the revision after the last one delivered: the server
    # sent nothing the watch had (a resume from the last revision would get it once more).
    assert reader.w.duplicates_dropped == 0
    revisions = [e.revision for e in got]
    assert revisions == sorted(set(revisions)), "each revision once, in order"
    assert revisions[0] == start and revisions[-1] == end
    reference = raw_events(addr, prefix, start, end)
    assert len(got) == len(reference)
    for g, r in zip(got, reference):
        assert as_tuple(g) == as_tuple(r)
    by_revision = {e.revision: e for e in got}
    for key, value, revision in writer.acked:
        e = by_revision[revision]
        assert e.kv.key == key
        if value is None:
            assert e.type == EventType.DELETE and e.reason == DeleteReason.CLIENT
        else:
            assert e.type == EventType.PUT and e.kv.value == value


# ---- what a watch yields --------------------------------------------------------------------


def test_events_of_every_kind(client, server):
    w = client.watch("w/", prev_kv=True)
    assert w.wait_created(20)
    a = client.set("w/a", "1", flags=7)
    client.set("elsewhere", "not watched")
    b = client.set("w/a", "2")
    d = client.delete("w/a")
    client.set("w/exp", "soon", ttl=1)
    items = [w.next(timeout=20) for _ in range(4)]
    assert [(e.type, e.kv.key, e.kv.value, e.revision) for e in items] == [
        (EventType.PUT, b"w/a", b"1", a.mod_revision),
        (EventType.PUT, b"w/a", b"2", b.mod_revision),
        (EventType.DELETE, b"w/a", b"", d),
        (EventType.PUT, b"w/exp", b"soon", items[3].revision),
    ]
    assert items[0].kv.flags == 7 and items[0].prev_kv is None
    assert items[1].prev_kv is not None and items[1].prev_kv.value == b"1"
    assert items[2].reason == DeleteReason.CLIENT
    expired = w.next(timeout=20)
    assert (expired.type, expired.kv.key, expired.reason) == (EventType.DELETE, b"w/exp", DeleteReason.EXPIRED)
    assert w.revision == expired.revision and w.reconnects == 0
    w.close()
    with pytest.raises(StopIteration):
        w.next(timeout=1)


def test_key_range_filters_and_flush(client, server):
    key = client.watch_key("k1")
    rng = client.watch_range("b", "d", no_delete=True)
    assert key.wait_created(20) and rng.wait_created(20)
    for k in ("a", "b", "c", "d", "k1"):
        client.set(k, k)
    client.delete("c")
    client.set("k1", "again")
    assert [(e.kv.key, e.kv.value) for e in (key.next(timeout=20), key.next(timeout=20))] == \
        [(b"k1", b"k1"), (b"k1", b"again")]
    assert [rng.next(timeout=20).kv.key for _ in range(2)] == [b"b", b"c"]
    # flush_all (over memcached) is an event of every watch.
    host, port = server.memcached.rsplit(":", 1)
    import socket
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(b"flush_all\r\n")
        assert s.recv(100) == b"OK\r\n"
    e = key.next(timeout=20)
    assert (e.type, e.reason) == (EventType.FLUSH, DeleteReason.FLUSHED)
    key.close()
    rng.close()


def test_initial_state_then_events(client):
    for i in range(10):
        client.set(f"i/{i}", str(i))
    client.set("j", "not watched")
    w = client.watch("i/", initial_state=True)
    state = w.next(timeout=20)
    assert isinstance(state, Resync) and state.reason == "initial" and state.compact_revision == 0
    assert {kv.key: kv.value for kv in state.items} == {b"i/%d" % i: b"%d" % i for i in range(10)}
    assert all(kv.mod_revision <= state.revision for kv in state.items)
    s = client.set("i/new", "n")
    e = w.next(timeout=20)
    assert e.revision == s.mod_revision > state.revision
    w.close()
    with pytest.raises(ValueError):
        client.watch("i/", initial_state=True, start_revision=3)
    with pytest.raises(ValueError):
        client.watch("i/", on_compacted="ignore")


def test_start_revision_and_progress(client):
    revs = [client.set(f"r/{i}", "v").mod_revision for i in range(5)]
    w = client.watch("r/", start_revision=revs[2])
    assert [w.next(timeout=20).revision for _ in range(3)] == revs[2:]
    w.request_progress()
    p = w.next(timeout=20)
    assert isinstance(p, Progress) and p.revision >= revs[-1]
    w.close()
    # Periodic progress, when asked for, on a watch with nothing to send.
    quiet = client.watch_key("quiet", progress_notify=True)
    client.set("other", "x")
    p = quiet.next(timeout=30)
    assert isinstance(p, Progress) and p.revision >= revs[-1]
    quiet.close()


def test_created_header_is_no_resume_point(client, server):
    """The server's `created` response carries its newest revision even for a watch from an
    older start revision, before any of the events from it were sent; the client must not take
    it as progress, or a disconnect right after it would skip those events."""
    revs = [client.set(f"h/{i}", "v").mod_revision for i in range(5)]
    channel = grpc.insecure_channel(server.grpc)
    requests: queue.Queue = queue.Queue()
    create = watch_pb2.WatchCreateRequest(key=b"h/", prefix=True, start_revision=revs[0])
    requests.put(watch_pb2.WatchRequest(create_request=create))
    call = watch_pb2_grpc.WatchStub(channel).Watch(iter(requests.get, None), timeout=60)
    created = next(call)
    requests.put(None)
    call.cancel()
    channel.close()
    assert created.created and not created.canceled
    resume = _Resume(create, initial_state=False, start_revision=revs[0], on_compacted="raise",
                     progress_items=False)
    resume.create_request()
    assert resume.on_response(created) == []
    again = resume.create_request().create_request
    assert again.start_revision == revs[0], \
        f"after created (header {created.header.revision}) the watch resumes at {again.start_revision}"
    # And an event moves it on by one revision exactly; a response's header, past it.
    r = watch_pb2.WatchResponse(watch_id=1, events=[watch_pb2.Event(revision=revs[0])])
    r.header.revision = revs[0]
    assert [e.revision for e in resume.on_response(r)] == [revs[0]]
    assert resume.create_request().create_request.start_revision == revs[0] + 1
    assert resume.on_response(r) == [] and resume.duplicates_dropped == 1


# ---- disconnects ----------------------------------------------------------------------------


def test_resumes_across_cut_connections(server, proxy):
    """Connections cut at random moments during writes: the events equal those of a watcher
    that was never cut."""
    rng = seeded("cut connections")
    direct = Client(server.grpc, timeout=20)
    start = direct.set("c/start", "0").mod_revision
    via_proxy = Client(proxy.addr, timeout=20)
    cut = Reader(via_proxy.watch("c/", start_revision=start, backoff_initial=0.01, backoff_max=0.2))
    steady = Reader(direct.watch("c/", start_revision=start))
    writer = Writer(direct, "c/", rng)
    for _ in range(5):
        writer.wait_for(rng.randrange(20, 150))
        if rng.random() < 0.5:
            proxy.block()  # down for a while: the watch falls behind, then catches up
            proxy.cut()
            writer.wait_for(rng.randrange(1, 100))
            proxy.unblock()
        else:
            proxy.cut()
    writer.wait_for(50)
    writer.stop()
    end = direct.set("c/end", "x").mod_revision
    wait_until(lambda: cut.reached(end) and steady.reached(end), 60, "every event")
    cut.stop()
    steady.stop()
    assert cut.error is None and steady.error is None, (cut.error, steady.error)
    assert cut.w.reconnects >= 5 and steady.w.reconnects == 0
    assert [as_tuple(e) for e in cut.events()] == [as_tuple(e) for e in steady.events()]
    check_against_reference(cut, writer, server.grpc, b"c/", start, end)
    via_proxy.close()
    direct.close()


@pytest.mark.parametrize("persistence", ["sync", "async"])
def test_resumes_across_kill9_restarts(tmp_path, persistence):
    """The server is killed with kill -9 and restarted on its data folder several times during a
    stream of writes: the watch's events equal an uninterrupted watch's over the whole history
    (read from the final server), and every acknowledged write is among them. (sync is the
    default; async publishes a revision once written to the kernel, which a kill -9 keeps.)"""
    rng = seeded(f"kill -9, persistence {persistence}")
    server = Server(tmp_path / "data", "--persistence", persistence)
    try:
        c = Client(server.grpc, timeout=5)
        start = c.set("k/start", "0").mod_revision
        reader = Reader(c.watch("k/", start_revision=start, backoff_initial=0.01, backoff_max=0.3))
        writer = Writer(c, "k/", rng)
        for _ in range(4):
            writer.wait_for(rng.randrange(50, 300))
            server.kill9()
            server.restart()
        writer.wait_for(50)
        writer.stop()
        end = c.set("k/end", "x").mod_revision
        wait_until(lambda: reader.reached(end) or reader.error is not None, 60, "every event")
        reader.stop()
        assert reader.error is None, reader.error
        assert reader.w.reconnects >= 4 and writer.failures > 0
        check_against_reference(reader, writer, server.grpc, b"k/", start, end)
        c.close()
    finally:
        server.stop()


def test_gives_up_after_its_reconnect_deadline(client, server, proxy):
    with Client(proxy.addr, timeout=20) as c:
        w = c.watch("g/", reconnect_deadline=1.0, backoff_initial=0.05, backoff_max=0.2)
        assert w.wait_created(20)
        client.set("g/1", "v")
        assert w.next(timeout=20).kv.key == b"g/1"
        proxy.block()
        proxy.cut()
        began = time.monotonic()
        with pytest.raises(Unavailable):
            w.next(timeout=30)
        assert 1.0 <= time.monotonic() - began < 15
        w.close()


def test_resumes_after_its_initial_state_from_the_next_revision(tmp_path):
    """A disconnect right after the initial state: the watch goes on from the state's revision
    + 1 (the state already holds the event at its revision)."""
    server = Server(tmp_path / "data", "--persistence", "off")  # revisions are the writes
    proxy = Proxy(server.grpc)
    try:
        direct = Client(server.grpc, timeout=20)
        for i in range(3):
            last = direct.set(f"s/{i}", "v")
        w = Client(proxy.addr, timeout=20).watch("s/", initial_state=True, backoff_initial=0.01,
                                                  backoff_max=0.2)
        state = w.next(timeout=20)
        assert isinstance(state, Resync) and state.revision == last.mod_revision
        proxy.cut()
        wait_until(lambda: w.reconnects >= 1, 20, "a reconnect")
        after = direct.set("s/3", "v")
        e = w.next(timeout=20)
        assert (e.kv.key, e.revision) == (b"s/3", after.mod_revision)
        assert w.duplicates_dropped == 0
        w.close()
    finally:
        proxy.close()
        server.stop()


def test_an_initial_state_cut_short_starts_again(tmp_path):
    """A disconnect in the middle of the initial state: the whole state comes again, once, and
    nothing of the half-received one is kept."""
    server = Server(tmp_path / "data", "--persistence", "off")
    proxy = Proxy(server.grpc)
    try:
        direct = Client(server.grpc, timeout=20)
        value = "x" * 500
        for i in range(6000):
            direct.set(f"big/{i:05d}", value)
        proxy.cut_after(1_500_000)  # the state is ~3.3 MB in chunks of ~1 MiB: cut in the second
        w = Client(proxy.addr, timeout=20).watch("big/", initial_state=True,
                                                  backoff_initial=0.01, backoff_max=0.2)
        state = w.next(timeout=60)
        assert isinstance(state, Resync) and w.reconnects >= 1
        keys = [kv.key for kv in state.items]
        assert len(keys) == 6000 and set(keys) == {b"big/%05d" % i for i in range(6000)}
        after = direct.set("big/new", "v")
        assert w.next(timeout=20).revision == after.mod_revision
        w.close()
    finally:
        proxy.close()
        server.stop()


# ---- history that no longer holds the next revision ---------------------------------------


def fall_behind(direct: Client, proxy: Proxy, w, prefix: str) -> int:
    """Cuts the watch off, then writes more than the server's 1 MiB history holds; returns the
    revision the watch needs next."""
    direct.set(f"{prefix}a", "1")
    first = w.next(timeout=20)
    assert isinstance(first, Event)
    proxy.block()
    proxy.cut()
    for _ in range(300):
        direct.set(f"{prefix}big", b"y" * 8000)
    direct.set(f"{prefix}b", "2")
    direct.delete(f"{prefix}a")
    proxy.unblock()
    return first.revision + 1


def small_history(tmp_path) -> Server:
    return Server(tmp_path / "small", "--persistence", "off", "--watch-history-mb", "1")


def test_compacted_raises_by_default(tmp_path):
    server = small_history(tmp_path)
    proxy = Proxy(server.grpc)
    try:
        direct = Client(server.grpc, timeout=20)
        w = Client(proxy.addr, timeout=20).watch("p/", backoff_initial=0.01, backoff_max=0.2)
        assert w.wait_created(20)
        needed = fall_behind(direct, proxy, w, "p/")
        with pytest.raises(Compacted) as e:
            w.next(timeout=30)
        assert e.value.revision == needed and e.value.compact_revision > needed
        with pytest.raises(StopIteration):
            w.next(timeout=1)
    finally:
        proxy.close()
        server.stop()


def test_compacted_relists_when_asked(tmp_path):
    server = small_history(tmp_path)
    proxy = Proxy(server.grpc)
    try:
        direct = Client(server.grpc, timeout=20)
        direct.set("q/old", "kept")
        direct.set("q/gone", "deleted while cut off")
        w = Client(proxy.addr, timeout=20).watch("q/", initial_state=True, on_compacted="relist",
                                                  backoff_initial=0.01, backoff_max=0.2)
        state: Dict[bytes, bytes] = {}

        def apply(item) -> None:
            if isinstance(item, Resync):
                state.clear()
                state.update({kv.key: kv.value for kv in item.items})
            elif item.type == EventType.PUT:
                state[item.kv.key] = item.kv.value
            elif item.type == EventType.DELETE:
                state.pop(item.kv.key, None)

        initial = w.next(timeout=20)
        assert isinstance(initial, Resync) and initial.reason == "initial"
        apply(initial)
        direct.delete("q/gone")
        apply(w.next(timeout=20))
        needed = fall_behind(direct, proxy, w, "q/")
        resync = w.next(timeout=30)
        assert isinstance(resync, Resync), resync
        assert resync.reason == "compacted" and resync.compact_revision > needed
        apply(resync)
        assert state == {kv.key: kv.value for kv in direct.scan("q/")}
        after = direct.set("q/after", "3")
        e = w.next(timeout=20)
        assert e.revision == after.mod_revision > resync.revision
        apply(e)
        assert state == {kv.key: kv.value for kv in direct.scan("q/")}
        assert w.reconnects >= 2
        w.close()
    finally:
        proxy.close()
        server.stop()


def test_prev_kv_watch_across_a_restart_relists(tmp_path):
    """With persistence the history reaches into the command log, but previous items only the
    in-memory history keeps: a prev_kv watch that missed events over a restart is compacted."""
    server = Server(tmp_path / "data")
    proxy = Proxy(server.grpc)
    try:
        direct = Client(server.grpc, timeout=20)
        w = Client(proxy.addr, timeout=20).watch("v/", prev_kv=True, on_compacted="relist",
                                                  backoff_initial=0.01, backoff_max=0.2)
        assert w.wait_created(20)
        direct.set("v/a", "1")
        assert w.next(timeout=20).kv.value == b"1"
        proxy.block()
        proxy.cut()
        direct.set("v/a", "2")
        direct.set("v/b", "3")
        server.kill9()
        server.restart()
        proxy.target = server.grpc
        proxy.unblock()
        resync = w.next(timeout=30)
        assert isinstance(resync, Resync) and resync.reason == "compacted"
        assert {kv.key: kv.value for kv in resync.items} == {b"v/a": b"2", b"v/b": b"3"}
        direct.set("v/a", "4")
        e = w.next(timeout=20)
        assert e.kv.value == b"4" and e.prev_kv is not None and e.prev_kv.value == b"2"
        w.close()
    finally:
        proxy.close()
        server.stop()


@pytest.mark.parametrize("mode", ["raise", "relist"])
def test_history_lost_over_a_restart_without_persistence(tmp_path, mode):
    """Without persistence a restart starts revisions again from 1: a watch that had seen more
    is told so (raise FutureRevision), or lists again."""
    server = Server(tmp_path / "data", "--persistence", "off")
    proxy = Proxy(server.grpc)
    try:
        direct = Client(server.grpc, timeout=20)
        w = Client(proxy.addr, timeout=20).watch("f/", on_compacted=mode, backoff_initial=0.01,
                                                  backoff_max=0.2)
        assert w.wait_created(20)
        for i in range(5):
            direct.set(f"f/{i}", "v")
        assert [w.next(timeout=20).kv.key for _ in range(5)] == [b"f/%d" % i for i in range(5)]
        proxy.block()
        proxy.cut()
        server.kill9()
        server.restart()
        proxy.target = server.grpc
        proxy.unblock()
        if mode == "raise":
            with pytest.raises(FutureRevision):
                w.next(timeout=30)
        else:
            resync = w.next(timeout=30)
            assert isinstance(resync, Resync) and resync.reason == "history_lost"
            assert resync.items == ()
            direct.set("f/new", "v")
            assert w.next(timeout=20).kv.key == b"f/new"
        w.close()
    finally:
        proxy.close()
        server.stop()


@pytest.mark.parametrize("mode", ["raise", "relist"])
def test_a_new_history_past_the_revision_is_not_taken_for_the_old(tmp_path, mode):
    """Without persistence a restarted server starts revisions again from 1; once it has
    passed the watch's next revision, only the history id tells its revisions from the old
    ones. The watch names its history when it resumes, so it is told (FutureRevision, or a
    Resync with reason "history_lost") instead of going on with the new server's events from
    that revision and missing the rest."""
    server = Server(tmp_path / "data", "--persistence", "off")
    proxy = Proxy(server.grpc)
    try:
        direct = Client(server.grpc, timeout=20)
        w = Client(proxy.addr, timeout=20).watch("n/", on_compacted=mode, backoff_initial=0.01,
                                                  backoff_max=0.2)
        assert w.wait_created(20)
        for i in range(3):
            direct.set(f"n/{i}", "v")
        assert [w.next(timeout=20).kv.key for _ in range(3)] == [b"n/%d" % i for i in range(3)]
        proxy.block()
        proxy.cut()
        server.kill9()
        server.restart()
        direct = Client(server.grpc, timeout=20)
        for i in range(10):  # the new history passes the watch's next revision
            direct.set(f"n/new{i}", "v")
        proxy.target = server.grpc
        proxy.unblock()
        if mode == "raise":
            with pytest.raises(FutureRevision):
                w.next(timeout=30)
        else:
            resync = w.next(timeout=30)
            assert isinstance(resync, Resync) and resync.reason == "history_lost"
            assert len(resync.items) == 10
        w.close()
    finally:
        proxy.close()
        server.stop()
