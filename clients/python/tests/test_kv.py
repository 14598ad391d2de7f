"""Every key-value call of the client against the real server, with the exceptions each
status code maps to."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

import grpc
import pytest

from cairn import (TLS, AlreadyExists, CairnError, Client, CompareFailed, DeadlineExceeded, InvalidArgument,
                   KeyValue, NotFound, ResourceExhausted, SetMode, Unavailable)

from conftest import Server


def test_set_get_flags_ttl_and_str_keys(client):
    r = client.set("greeting", "hello", flags=42)
    assert r.cas > 0 and r.mod_revision > 0 and r.revision >= r.mod_revision
    kv = client.get(b"greeting")
    assert kv == KeyValue(b"greeting", b"hello", 42, 0, r.cas, r.mod_revision, False)
    before = int(time.time())
    r2 = client.set(b"short", b"\x00\xffbinary", ttl=100)
    got = client.get("short")
    assert got.value == b"\x00\xffbinary" and got.mod_revision == r2.mod_revision > r.mod_revision
    assert before + 99 <= got.expires_at <= int(time.time()) + 101
    client.set("abs", "v", expires_at=2_000_000_000, ttl=5)
    assert client.get("abs").expires_at == 2_000_000_000, "expires_at wins over ttl"
    with pytest.raises(NotFound) as e:
        client.get("missing")
    assert e.value.details and e.value.code.name == "NOT_FOUND"


def test_modes_and_compares(client):
    with pytest.raises(NotFound):
        client.set("k", "v", mode="replace")
    first = client.set("k", "v1", mode=SetMode.ADD)
    with pytest.raises(AlreadyExists):
        client.add("k", "again")
    with pytest.raises(CompareFailed) as e:
        client.set("k", "v", cas=first.cas + 1)
    assert "CAS" in e.value.details
    with pytest.raises(CompareFailed) as e:
        client.set("k", "v", mod_revision=first.mod_revision + 1)
    assert "mod_revision" in e.value.details
    second = client.set("k", "v2", mod_revision=first.mod_revision)
    third = client.replace("k", "v3", cas=second.cas)
    assert client.get("k").value == b"v3"
    with pytest.raises(NotFound):
        client.set("nokey", "v", cas=1)
    with pytest.raises(ValueError):
        client.set("k", "v", cas=1, mod_revision=1)
    with pytest.raises(ValueError):
        client.set("k", "v", mode="upsert")
    with pytest.raises(CompareFailed):
        client.delete("k", cas=first.cas)
    with pytest.raises(CompareFailed):
        client.delete("k", mod_revision=second.mod_revision)
    d = client.delete("k", mod_revision=third.mod_revision)
    assert d > third.mod_revision
    with pytest.raises(NotFound):
        client.delete("k")


def test_touch(client):
    with pytest.raises(NotFound):
        client.touch("gone", 5)
    s = client.set("t", "v")
    t = client.touch("t", expires_at=2_000_000_000)
    assert t.expires_at == 2_000_000_000 and t.mod_revision > s.mod_revision
    assert client.get("t").expires_at == 2_000_000_000
    t = client.touch("t", 0)
    assert t.expires_at == 0 and client.get("t").expires_at == 0


def test_bad_keys_and_limits(client):
    for bad in (b"", b"with space", b"x" * 251, b"new\nline"):
        with pytest.raises(InvalidArgument) as e:
            client.get(bad)
        assert e.value.details
    with pytest.raises(ResourceExhausted):
        client.set("big", b"x" * ((1 << 20) + 10))
    with pytest.raises(TypeError):
        client.get(12)  # type: ignore[arg-type]


def test_batch_get_in_order_and_in_chunks(client):
    for i in range(5):
        client.set(f"b/{i}", f"v{i}")
    got = client.batch_get(["b/1", "missing", b"b/3", "b/1"])
    assert [kv and kv.value for kv in got] == [b"v1", None, b"v3", b"v1"]
    # More keys than one request may hold: the client splits them, the order stays.
    keys = [f"n/{i}" for i in range(10_003)]
    keys[0], keys[10_001] = "b/0", "b/4"
    got = client.batch_get(keys)
    assert len(got) == 10_003
    assert got[0].value == b"v0" and got[10_001].value == b"v4"
    assert sum(kv is not None for kv in got) == 2
    with pytest.raises(InvalidArgument):
        client.batch_get(["ok", ""])
    assert client.batch_get([]) == []


def test_scan_iterates_every_page(client):
    for i in range(250):
        client.set(f"scan/{i:03d}", f"v{i}", flags=i)
    client.set("scan0", "not under the prefix")
    items = list(client.scan("scan/", page_size=7))
    assert [kv.key for kv in items] == [b"scan/%03d" % i for i in range(250)]
    assert [kv.flags for kv in items] == list(range(250))
    assert all(kv.value == b"v%d" % kv.flags for kv in items)
    keys_only = list(client.scan(b"scan/", page_size=100, keys_only=True))
    assert len(keys_only) == 250 and all(kv.value == b"" for kv in keys_only)
    assert len(list(client.scan())) == 251
    assert list(client.scan("nothing/")) == []
    with pytest.raises(InvalidArgument):
        list(client.scan("scan/", page_size=10_001))


def test_stream_get_matches_answers_to_keys(client):
    for i in range(300):
        client.set(f"s/{i}", f"v{i}")

    consumed = []

    def keys():
        for i in range(1000):
            consumed.append(i)
            yield f"s/{i}" if i % 3 else f"absent/{i}"

    got = list(client.stream_get(keys(), batch_size=7, window=4))
    assert [k for k, _ in got] == [(b"s/%d" % i if i % 3 else b"absent/%d" % i) for i in range(1000)]
    for i, (k, kv) in enumerate(got):
        if i % 3 and i < 300:
            assert kv is not None and kv.key == k and kv.value == b"v%d" % i
        else:
            assert kv is None, (k, kv)
    assert list(client.stream_get([])) == []
    # The keys are read lazily: stopping early leaves most of a long generator unread.
    consumed.clear()
    it = client.stream_get(keys(), batch_size=10, window=2)
    assert next(it)[0] == b"absent/0"
    it.close()
    assert len(consumed) < 200, len(consumed)
    # A refused batch raises, after the answers before it.
    answers = []
    with pytest.raises(InvalidArgument) as e:
        for pair in client.stream_get(["s/1", "s/2", "bad key", "s/4"], batch_size=2):
            answers.append(pair)
    assert [k for k, _ in answers] == [b"s/1", b"s/2"] and e.value.details
    # The caller's own error in the keys surfaces as itself.
    with pytest.raises(TypeError):
        list(client.stream_get(["s/1", 7]))  # type: ignore[list-item]


def test_unavailable_and_deadline(server, client):
    client.set("x", "y")
    # A peer that takes the connection and never answers: the call's deadline passes.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    with Client("127.0.0.1:%d" % silent.getsockname()[1], timeout=0.5) as c:
        began = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            c.get("x")
        assert time.monotonic() - began < 5
    silent.close()
    server.stop()
    with pytest.raises(Unavailable):
        client.get("x", timeout=5)
    with Client(server.grpc, timeout=20, wait_for_ready=True) as patient:
        with pytest.raises(DeadlineExceeded):
            patient.get("x", timeout=0.5)
        server.restart()
        assert patient.get("x").value == b"y", "waits for the restarted server"


@pytest.mark.skipif(not shutil.which("openssl") and not os.environ.get("CI"),
                    reason="openssl makes the certificate (CI installs it)")
def test_tls(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
         "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    s = Server(tmp_path / "data", "--grpc-tls-cert", str(cert), "--grpc-tls-key", str(key))
    try:
        with Client(s.grpc, tls=TLS(root_certificates=cert.read_bytes())) as c:
            c.set("tls", "yes")
            assert c.get("tls").value == b"yes"
        with Client(s.grpc, timeout=5) as plain:
            with pytest.raises(CairnError) as e:
                plain.get("tls")
            assert e.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL)
    finally:
        s.stop()
