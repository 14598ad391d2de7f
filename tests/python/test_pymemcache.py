"""pymemcache (a client nobody here wrote) against the real cairn binary on 127.0.0.1:0.

The binary is taken from $CAIRN_BIN (default: target/debug/cairn). Readiness is the
"cairn listening on ADDR" line, so nothing sleeps waiting for the server.
"""

import os
import subprocess

import pytest
from pymemcache.client.base import Client

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("CAIRN_BIN", os.path.join(ROOT, "target", "debug", "cairn"))


@pytest.fixture()
def server(tmp_path):
    proc = subprocess.Popen(
        [BIN, "-p", "0", "--data-dir", str(tmp_path), "--log-segment-mb", "2", "--grpc-listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    addr = None
    for line in proc.stdout:
        if line.startswith("cairn listening on "):
            addr = line.strip().rsplit(" ", 1)[1]
            break
    assert addr, "cairn exited before it was ready"
    host, port = addr.rsplit(":", 1)
    yield (host, int(port))
    proc.terminate()
    assert proc.wait(timeout=30) == 0, "graceful shutdown exits 0"


def client(server):
    return Client(server, timeout=20, connect_timeout=20)


def test_set_get_delete(server):
    c = client(server)
    assert c.set("k", b"v1")
    assert c.get("k") == b"v1"
    assert c.add("k", b"x") is False or c.get("k") == b"v1"
    assert c.replace("k", b"v2", noreply=False)
    assert c.get("k") == b"v2"
    assert c.delete("k", noreply=False)
    assert c.get("k") is None


def test_flags_multiget_and_noreply(server):
    c = client(server)
    c.set("a", b"1", noreply=True)
    c.set("b", b"2", noreply=True)
    c.set_many({"c": b"3", "d": b"4"})
    assert c.get_many(["a", "b", "c", "d", "zz"]) == {"a": b"1", "b": b"2", "c": b"3", "d": b"4"}
    c.append("a", b"x", noreply=False)
    c.prepend("a", b"y", noreply=False)
    assert c.get("a") == b"y1x"


def test_cas_incr_touch(server):
    c = client(server)
    c.set("k", b"10")
    value, cas = c.gets("k")
    assert value == b"10"
    assert c.cas("k", b"20", cas) is True
    assert c.cas("k", b"30", cas) is False
    assert c.get("k") == b"20"
    assert c.incr("k", 5) == 25
    assert c.decr("k", 100) == 0
    assert c.incr("missing", 1) is None
    assert c.touch("k", 100, noreply=False) is True
    assert c.touch("missing", 100, noreply=False) is False
    assert c.get("k") == b"0"


def test_stats_and_version(server):
    c = client(server)
    c.set("k", b"v")
    c.get("k")
    stats = c.stats()
    assert stats[b"curr_items"] == 1
    assert stats[b"get_hits"] == 1
    assert c.version().startswith(b"1.6")
    assert c.flush_all(noreply=False)
    assert c.get("k") is None
