"""grpcio (a client nobody here wrote) against the real cairn binary, with stubs generated at
test time by grpcio-tools from proto/cairn/v1/*.proto: the .proto files are the contract.

The server runs with persistence sync on 127.0.0.1:0 for both protocols; readiness is the
"cairn listening on ADDR" line (the gRPC address is printed just before it).
"""

import importlib
import os
import socket
import subprocess
import sys

import grpc
import pytest
from grpc_tools import protoc
from pymemcache.client.base import Client

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("CAIRN_BIN", os.path.join(ROOT, "target", "debug", "cairn"))
PROTO = os.path.join(ROOT, "proto")


@pytest.fixture(scope="session")
def pb(tmp_path_factory):
    """Generates the Python stubs from our .proto files and imports them."""
    out = tmp_path_factory.mktemp("stubs")
    files = [os.path.join("cairn", "v1", f) for f in ("kv.proto", "watch.proto")]
    grpc_include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    rc = protoc.main(
        ["protoc", f"-I{PROTO}", f"-I{grpc_include}", f"--python_out={out}", f"--grpc_python_out={out}"]
        + files
    )
    assert rc == 0, "grpcio-tools could not compile the .proto files"
    sys.path.insert(0, str(out))

    class Stubs:
        kv = importlib.import_module("cairn.v1.kv_pb2")
        kv_grpc = importlib.import_module("cairn.v1.kv_pb2_grpc")
        watch = importlib.import_module("cairn.v1.watch_pb2")
        watch_grpc = importlib.import_module("cairn.v1.watch_pb2_grpc")

    return Stubs


def start(tmp_path, *extra):
    proc = subprocess.Popen(
        [BIN, "-p", "0", "--data-dir", str(tmp_path), "--log-segment-mb", "2", "--grpc-listen", "127.0.0.1:0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    grpc_addr = mc_addr = None
    for line in proc.stdout:
        if line.startswith("cairn grpc listening on "):
            grpc_addr = line.strip().rsplit(" ", 1)[1]
        if line.startswith("cairn listening on "):
            mc_addr = line.strip().rsplit(" ", 1)[1]
            break
    assert mc_addr and grpc_addr, "cairn exited before it was ready"
    host, port = mc_addr.rsplit(":", 1)
    return proc, grpc_addr, (host, int(port))


@pytest.fixture()
def server(tmp_path):
    proc, grpc_addr, mc = start(tmp_path, "--watch-progress-notify-ms", "200")
    yield grpc_addr, mc
    proc.terminate()
    assert proc.wait(timeout=30) == 0, "graceful shutdown exits 0"


@pytest.fixture()
def kv(pb, server):
    channel = grpc.insecure_channel(server[0])
    yield pb.kv_grpc.KVStub(channel)
    channel.close()


def code_of(call):
    with pytest.raises(grpc.RpcError) as e:
        call()
    return e.value.code(), e.value.details()


def mc_line(mc, request):
    """One raw memcached exchange: returns the reply up to its last line."""
    with socket.create_connection(mc, timeout=20) as s:
        s.sendall(request)
        buf = b""
        while not (buf.endswith(b"END\r\n") or buf.endswith(b"STORED\r\n") or buf.endswith(b"DELETED\r\n")):
            chunk = s.recv(65536)
            assert chunk, buf
            buf += chunk
        return buf


def test_both_protocols_see_the_same_data(pb, kv, server):
    mc = Client(server[1], timeout=20)
    assert mc.set("from-mc", b"hello", expire=0, noreply=False)
    got = kv.Get(pb.kv.GetRequest(key=b"from-mc"))
    assert got.kv.value == b"hello" and got.kv.mod_revision > 0 and got.kv.cas > 0
    r = kv.Set(pb.kv.SetRequest(key=b"from-grpc", value=b"world", flags=42, ttl_seconds=1000))
    assert r.mod_revision > got.kv.mod_revision, "revisions increase"
    reply = mc_line(server[1], b"gets from-grpc\r\n")
    assert reply.startswith(b"VALUE from-grpc 42 5 %d\r\nworld\r\n" % r.cas), reply
    # The same revision is reported by Get, and a memcached write moves it.
    assert kv.Get(pb.kv.GetRequest(key=b"from-grpc")).kv.mod_revision == r.mod_revision
    assert mc.set("from-grpc", b"again", noreply=False)
    assert kv.Get(pb.kv.GetRequest(key=b"from-grpc")).kv.mod_revision > r.mod_revision
    stats = mc.stats("grpc")
    assert int(stats[b"grpc_get_requests"]) == 3 and int(stats[b"grpc_set_requests"]) == 1, stats
    assert int(stats[b"watch_published_revision"]) >= r.mod_revision


def test_modes_compares_and_status_codes(pb, kv):
    SetRequest, Compare = pb.kv.SetRequest, pb.kv.Compare
    assert code_of(lambda: kv.Get(pb.kv.GetRequest(key=b"nope")))[0] == grpc.StatusCode.NOT_FOUND
    assert code_of(lambda: kv.Set(SetRequest(key=b"k", value=b"v", mode=pb.kv.SET_MODE_REPLACE)))[0] == grpc.StatusCode.NOT_FOUND
    first = kv.Set(SetRequest(key=b"k", value=b"v1", mode=pb.kv.SET_MODE_ADD))
    assert code_of(lambda: kv.Set(SetRequest(key=b"k", value=b"v", mode=pb.kv.SET_MODE_ADD)))[0] == grpc.StatusCode.ALREADY_EXISTS
    code, why = code_of(lambda: kv.Set(SetRequest(key=b"k", value=b"v", compare=Compare(cas=first.cas + 1))))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "CAS" in why
    code, why = code_of(lambda: kv.Set(SetRequest(key=b"k", value=b"v", compare=Compare(mod_revision=first.mod_revision + 1))))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "mod_revision" in why
    second = kv.Set(SetRequest(key=b"k", value=b"v2", compare=Compare(mod_revision=first.mod_revision)))
    assert kv.Get(pb.kv.GetRequest(key=b"k")).kv.value == b"v2"
    assert code_of(lambda: kv.Delete(pb.kv.DeleteRequest(key=b"k", compare=Compare(cas=first.cas))))[0] == grpc.StatusCode.FAILED_PRECONDITION
    d = kv.Delete(pb.kv.DeleteRequest(key=b"k", compare=Compare(cas=second.cas)))
    assert d.revision > second.mod_revision
    assert code_of(lambda: kv.Delete(pb.kv.DeleteRequest(key=b"k")))[0] == grpc.StatusCode.NOT_FOUND
    for bad in (b"", b"with space", b"x" * 251):
        code, why = code_of(lambda: kv.Get(pb.kv.GetRequest(key=bad)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and why, bad
    assert code_of(lambda: kv.Touch(pb.kv.TouchRequest(key=b"gone", ttl_seconds=5)))[0] == grpc.StatusCode.NOT_FOUND
    kv.Set(SetRequest(key=b"t", value=b"v"))
    t = kv.Touch(pb.kv.TouchRequest(key=b"t", expires_at=2_000_000_000))
    assert t.expires_at == 2_000_000_000
    assert kv.Get(pb.kv.GetRequest(key=b"t")).kv.expires_at == 2_000_000_000


def test_batch_scan_and_streaming_reads(pb, kv):
    for i in range(250):
        kv.Set(pb.kv.SetRequest(key=b"scan/%03d" % i, value=b"v%d" % i))
    kv.Set(pb.kv.SetRequest(key=b"other", value=b"x"))
    r = kv.BatchGet(pb.kv.BatchGetRequest(keys=[b"scan/001", b"missing", b"other"]))
    assert [(x.found, x.kv.key) for x in r.results] == [(True, b"scan/001"), (False, b"missing"), (True, b"other")]
    keys, token = [], b""
    while True:
        page = kv.Scan(pb.kv.ScanRequest(prefix=b"scan/", limit=100, page_token=token))
        keys += [x.key for x in page.kvs]
        token = page.next_page_token
        if not token:
            break
    assert keys == [b"scan/%03d" % i for i in range(250)], "every key once, in order"

    def requests():
        for rid in range(1, 51):
            yield pb.kv.StreamGetRequest(request_id=rid, keys=[b"scan/%03d" % rid, b"missing"])
        yield pb.kv.StreamGetRequest(request_id=99, keys=[b"bad key"])

    answers = list(kv.StreamGet(requests()))
    assert [a.request_id for a in answers] == list(range(1, 51)) + [99]
    assert all(a.results[0].kv.value == b"v%d" % a.request_id and not a.results[1].found for a in answers[:50])
    assert answers[50].error and not answers[50].results, "a bad request is answered, the stream goes on"


def test_huge_messages_and_too_many_keys_are_refused(pb, kv):
    code, why = code_of(lambda: kv.Set(pb.kv.SetRequest(key=b"big", value=b"x" * (3 << 20))))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, why
    code, why = code_of(lambda: kv.Set(pb.kv.SetRequest(key=b"big", value=b"x" * ((1 << 20) + 10))))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "too large" in why
    code, why = code_of(lambda: kv.BatchGet(pb.kv.BatchGetRequest(keys=[b"k%d" % i for i in range(10_001)])))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "10001" in why
    kv.Set(pb.kv.SetRequest(key=b"still", value=b"fine"))
    assert kv.Get(pb.kv.GetRequest(key=b"still")).kv.value == b"fine"


class Watcher:
    """A watch stream driven from the test: requests go in through a queue."""

    def __init__(self, pb, channel):
        import queue

        self.pb = pb
        self.q = queue.Queue()
        self.responses = pb.watch_grpc.WatchStub(channel).Watch(iter(self.q.get, None))

    def send(self, **kw):
        self.q.put(self.pb.watch.WatchRequest(**kw))

    def next(self):
        return next(self.responses)

    def close(self):
        self.q.put(None)
        self.responses.cancel()


def test_a_stream_holds_at_most_1000_watches(pb, server):
    channel = grpc.insecure_channel(server[0])
    kv = pb.kv_grpc.KVStub(channel)
    w = Watcher(pb, channel)
    for i in range(1000):
        w.send(create_request=pb.watch.WatchCreateRequest(key=b"cap/%d" % i))
    ids = []
    for _ in range(1000):
        m = w.next()
        assert m.created and not m.canceled, m
        ids.append(m.watch_id)
    # The 1,001st create is refused with the reason; the stream and its watches go on.
    w.send(create_request=pb.watch.WatchCreateRequest(key=b"cap/extra"))
    m = w.next()
    assert m.canceled and "resource exhausted" in m.cancel_reason and "1000" in m.cancel_reason, m
    w.send(cancel_request=pb.watch.WatchCancelRequest(watch_id=ids[0]))
    m = w.next()
    assert m.canceled and m.watch_id == ids[0], m
    w.send(create_request=pb.watch.WatchCreateRequest(key=b"cap/extra"))
    m = w.next()
    assert m.created and not m.canceled, "room again after a cancel"
    kv.Set(pb.kv.SetRequest(key=b"cap/7", value=b"v"))
    m = w.next()
    assert m.watch_id == ids[7] and m.events[0].kv.key == b"cap/7", m
    w.close()
    channel.close()


def test_watch_initial_state_events_and_reasons(pb, server):
    channel = grpc.insecure_channel(server[0])
    kv = pb.kv_grpc.KVStub(channel)
    mc = Client(server[1], timeout=20)
    for i in range(10):
        kv.Set(pb.kv.SetRequest(key=b"w/%d" % i, value=b"%d" % i))
    kv.Set(pb.kv.SetRequest(key=b"elsewhere", value=b"x"))
    w = Watcher(pb, channel)
    w.send(create_request=pb.watch.WatchCreateRequest(key=b"w/", prefix=True, initial_state=True, prev_kv=True))
    created = w.next()
    assert created.created and created.watch_id > 0
    items, r = {}, None
    while r is None:
        m = w.next()
        items.update({kv_.key: kv_.value for kv_ in m.initial_items})
        if m.initial_state_done:
            r = m.header.revision
    assert items == {b"w/%d" % i: b"%d" % i for i in range(10)}
    # Writes over both protocols, a delete, an expiry, a flush: each an event after R.
    mc.set("w/0", b"changed", noreply=False)
    kv.Set(pb.kv.SetRequest(key=b"elsewhere", value=b"not watched"))
    kv.Delete(pb.kv.DeleteRequest(key=b"w/1"))
    mc.set("w/exp", b"soon", expire=1, noreply=False)
    mc.flush_all(noreply=False)
    seen = []
    while not any(e.type == pb.watch.Event.FLUSH for e in seen):
        m = w.next()
        assert m.watch_id == created.watch_id
        seen += m.events
    revs = [e.revision for e in seen]
    assert revs == sorted(set(revs)) and revs[0] > r
    put = seen[0]
    assert (put.type, put.kv.key, put.kv.value, put.prev_kv.value) == (pb.watch.Event.PUT, b"w/0", b"changed", b"0")
    assert (seen[1].type, seen[1].kv.key, seen[1].reason) == (pb.watch.Event.DELETE, b"w/1", pb.watch.Event.CLIENT)
    assert seen[2].kv.key == b"w/exp" and seen[2].kv.expires_at > 0
    assert seen[3].type == pb.watch.Event.FLUSH and seen[3].reason == pb.watch.Event.FLUSHED
    # Progress on request: every event up to the bookmark was sent.
    w.send(progress_request=pb.watch.WatchProgressRequest())
    m = w.next()
    assert m.progress_notify and m.watch_id == -1 and m.header.revision >= revs[-1]
    w.send(cancel_request=pb.watch.WatchCancelRequest(watch_id=created.watch_id))
    assert w.next().canceled
    w.send(cancel_request=pb.watch.WatchCancelRequest(watch_id=12345))
    m = w.next()
    assert m.canceled and "unknown watch id 12345" in m.cancel_reason
    w.close()
    channel.close()


def test_watch_resume_compaction_and_bad_requests(pb, server):
    channel = grpc.insecure_channel(server[0])
    kv = pb.kv_grpc.KVStub(channel)
    revs = [kv.Set(pb.kv.SetRequest(key=b"r/%d" % i, value=b"v")).mod_revision for i in range(5)]
    w = Watcher(pb, channel)
    w.send(create_request=pb.watch.WatchCreateRequest(key=b"r/", prefix=True, start_revision=revs[2], watch_id=7))
    assert w.next().created
    got = []
    while len(got) < 3:
        got += [e.revision for e in w.next().events]
    assert got == revs[2:], "resuming at a revision gives exactly the rest"
    w.send(create_request=pb.watch.WatchCreateRequest(key=b"r/", prefix=True, watch_id=7))
    m = w.next()
    assert m.canceled and "in use" in m.cancel_reason
    w.send(create_request=pb.watch.WatchCreateRequest(key=b"x", start_revision=revs[-1] + 1000))
    m = w.next()
    assert m.canceled and "future" in m.cancel_reason
    w.send(create_request=pb.watch.WatchCreateRequest(key=b"b", range_end=b"a"))
    m = w.next()
    assert m.canceled and "range_end" in m.cancel_reason
    w.send()  # an empty WatchRequest: the stream ends with INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as e:
        w.next()
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    w.close()
    # The server goes on.
    assert kv.Get(pb.kv.GetRequest(key=b"r/0")).kv.value == b"v"
    channel.close()


def test_watch_history_is_bounded_and_compaction_is_reported(pb, tmp_path):
    proc, grpc_addr, _ = start(tmp_path, "--persistence", "off", "--watch-history-mb", "1")
    try:
        channel = grpc.insecure_channel(grpc_addr)
        kv = pb.kv_grpc.KVStub(channel)
        first = kv.Set(pb.kv.SetRequest(key=b"c", value=b"x")).mod_revision
        for i in range(300):
            kv.Set(pb.kv.SetRequest(key=b"c", value=b"y" * 8000))
        w = Watcher(pb, channel)
        w.send(create_request=pb.watch.WatchCreateRequest(key=b"c", start_revision=first))
        m = w.next()
        assert m.canceled and m.compact_revision > first, m
        w.close()
        channel.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_health_and_reflection(pb, server):
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    channel = grpc.insecure_channel(server[0])
    health = health_pb2_grpc.HealthStub(channel)
    assert health.Check(health_pb2.HealthCheckRequest(service="cairn.v1.KV")).status == health_pb2.HealthCheckResponse.SERVING
    db = ProtoReflectionDescriptorDatabase(channel)
    services = set(db.get_services())
    assert {"cairn.v1.KV", "cairn.v1.Watch", "grpc.health.v1.Health"} <= services, services
    assert db.FindFileContainingSymbol("cairn.v1.KV").name == "cairn/v1/kv.proto"
    channel.close()


def test_tls(pb, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    proc, grpc_addr, _ = start(tmp_path / "data", "--grpc-tls-cert", str(cert), "--grpc-tls-key", str(key))
    try:
        creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        channel = grpc.secure_channel(grpc_addr, creds)
        kv = pb.kv_grpc.KVStub(channel)
        kv.Set(pb.kv.SetRequest(key=b"tls", value=b"yes"))
        assert kv.Get(pb.kv.GetRequest(key=b"tls")).kv.value == b"yes"
        channel.close()
        plain = grpc.insecure_channel(grpc_addr)
        code = code_of(lambda: pb.kv_grpc.KVStub(plain).Get(pb.kv.GetRequest(key=b"tls"), timeout=10))[0]
        assert code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL), code
        plain.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # A key that is no key refuses to start, naming the problem.
    (tmp_path / "bad.pem").write_text("not a key")
    out = subprocess.run(
        [BIN, "-p", "0", "--data-dir", str(tmp_path / "d2"), "--grpc-listen", "127.0.0.1:0",
         "--grpc-tls-cert", str(cert), "--grpc-tls-key", str(tmp_path / "bad.pem")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0 and "TLS" in out.stderr, out.stderr


def test_bad_input_gives_a_clear_status_and_nothing_breaks(pb, server):
    channel = grpc.insecure_channel(server[0])
    kv = pb.kv_grpc.KVStub(channel)
    # Bytes that are no protobuf message, on a unary and on a streaming method.
    raw = channel.unary_unary("/cairn.v1.KV/Get")
    code, why = code_of(lambda: raw(b"\xff\xff\xff\xff", timeout=20))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "decode" in why, (code, why)
    raw_stream = channel.stream_stream("/cairn.v1.Watch/Watch")
    code, why = code_of(lambda: list(raw_stream(iter([b"\x0a\xff"]), timeout=20)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "decode" in why, (code, why)
    code, _ = code_of(lambda: channel.unary_unary("/cairn.v1.KV/NoSuchMethod")(b"", timeout=20))
    assert code == grpc.StatusCode.UNIMPLEMENTED
    # Requests that parse but make no sense: INVALID_ARGUMENT with the reason.
    for call, reason in [
        (lambda: kv.Set(pb.kv.SetRequest(key=b"k", value=b"v", mode=99)), "mode"),
        (lambda: kv.Delete(pb.kv.DeleteRequest(key=b"")), "empty"),
        (lambda: kv.Touch(pb.kv.TouchRequest(key=b"a\nb")), "whitespace"),
        (lambda: kv.Scan(pb.kv.ScanRequest(prefix=b"a/", limit=10_001)), "limit"),
        (lambda: kv.Scan(pb.kv.ScanRequest(prefix=b"a/", page_token=b"b/1")), "page token"),
        (lambda: kv.BatchGet(pb.kv.BatchGetRequest(keys=[b"ok", b""])), "empty"),
    ]:
        code, why = code_of(call)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and reason in why, (code, why)
    # A watch request that makes no sense cancels that watch with the reason; the stream and
    # its other watches go on.
    w = Watcher(pb, channel)
    w.send(create_request=pb.watch.WatchCreateRequest(key=b"ok/", prefix=True))
    good = w.next()
    assert good.created and not good.canceled
    for create, reason in [
        (pb.watch.WatchCreateRequest(key=b""), "empty"),
        (pb.watch.WatchCreateRequest(key=b"a", prefix=True, range_end=b"b"), "not both"),
        (pb.watch.WatchCreateRequest(key=b"b", range_end=b"b"), "range_end"),
        (pb.watch.WatchCreateRequest(key=b"a", watch_id=-3), "watch_id"),
        (pb.watch.WatchCreateRequest(key=b"a", filters=[7]), "filter"),
        (pb.watch.WatchCreateRequest(key=b"a", start_revision=2**63), "future"),
    ]:
        w.send(create_request=create)
        m = w.next()
        assert m.canceled and reason in m.cancel_reason, (create, m)
    w.send(cancel_request=pb.watch.WatchCancelRequest(watch_id=999))
    m = w.next()
    assert m.canceled and "unknown watch id 999" in m.cancel_reason
    kv.Set(pb.kv.SetRequest(key=b"ok/1", value=b"v"))
    m = w.next()
    assert m.watch_id == good.watch_id and m.events[0].kv.key == b"ok/1"
    # A watch request over the message size limit ends that stream with RESOURCE_EXHAUSTED.
    w.send(create_request=pb.watch.WatchCreateRequest(key=b"x" * (3 << 20)))
    with pytest.raises(grpc.RpcError) as e:
        w.next()
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value
    w.close()
    # Nothing else broke: both protocols still answer.
    assert kv.Get(pb.kv.GetRequest(key=b"ok/1")).kv.value == b"v"
    assert mc_line(server[1], b"get ok/1\r\n") == b"VALUE ok/1 0 1\r\nv\r\nEND\r\n"
    channel.close()
