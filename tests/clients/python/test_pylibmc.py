"""pylibmc (libmemcached underneath) against the real cairn binary, started with its defaults.

pylibmc speaks the text protocol unless told `binary=True` (its default is False); the binary
mode runs too (memcached's binary protocol, which cairn detects from a connection's first
byte). Run: CAIRN_BIN=target/debug/cairn python -m pytest -v tests/clients/python

A case that fails because of a cairn bug stays, in KNOWN_SERVER_BUGS with its reason: pytest
runs it as a strict xfail, so it fails the suite once it passes (then remove the entry).
"""

import os
import subprocess
import time

import pylibmc
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.environ.get("CAIRN_BIN", os.path.join(ROOT, "target", "debug", "cairn"))

# case name -> the cairn bug that makes it fail today.
KNOWN_SERVER_BUGS = {}


def known(name):
    return pytest.mark.xfail(name in KNOWN_SERVER_BUGS, reason=KNOWN_SERVER_BUGS.get(name, ""),
                             strict=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """cairn's defaults (sync persistence, 64 MiB, 1 MiB items, no admin) on free ports; ready
    once it prints "cairn listening on ADDR". CLIENT_TEST_ADDR=HOST:PORT: a server already
    running instead (a real memcached, to compare)."""
    if os.environ.get("CLIENT_TEST_ADDR"):
        pylibmc.Client([os.environ["CLIENT_TEST_ADDR"]]).flush_all()
        yield os.environ["CLIENT_TEST_ADDR"]
        return
    data = tmp_path_factory.mktemp("cairn-pylibmc")
    proc = subprocess.Popen([BIN, "-p", "0", "--data-dir", str(data)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    addr = None
    for line in proc.stdout:
        if line.startswith("cairn listening on "):
            addr = line.split()[-1]
            break
    assert addr, "cairn exited before it was ready"
    yield addr
    proc.kill()
    proc.wait()


@pytest.fixture()
def mc(server):
    # Timeouts in ms: sync persistence on a shared disk can make a megabyte write slow.
    c = pylibmc.Client([server], binary=False,
                       behaviors={"cas": True, "connect_timeout": 5000, "send_timeout": 20_000_000,
                                  "receive_timeout": 20_000_000})
    yield c
    c.disconnect_all()


@known("test_get_multi")
def test_get_multi(mc):
    mc.set_multi({f"gm:{i}": str(i).encode() for i in range(100)})
    got = mc.get_multi([f"gm:{i}" for i in range(120)])
    assert len(got) == 100
    assert got["gm:42"] == b"42"


@known("test_cas")
def test_cas(mc):
    mc.set("cas:k", b"v1")
    value, unique = mc.gets("cas:k")
    assert value == b"v1" and unique
    assert mc.cas("cas:k", b"v2", unique) is True
    assert mc.cas("cas:k", b"v3", unique) is False  # stale unique: EXISTS
    assert mc.get("cas:k") == b"v2"
    mc.delete("cas:k")
    assert mc.gets("cas:k") == (None, None)


@known("test_incr_decr")
def test_incr_decr(mc):
    mc.set("n", b"10")
    assert mc.incr("n", 5) == 15
    assert mc.decr("n", 20) == 0  # floors at 0
    mc.set("n", b"18446744073709551615")
    assert mc.incr("n", 2) == 1  # wraps at 2^64
    with pytest.raises(pylibmc.NotFound):
        mc.incr("absent", 1)
    mc.set("text", b"abc")
    with pytest.raises(pylibmc.Error):  # CLIENT_ERROR cannot increment or decrement non-numeric value
        mc.incr("text", 1)


@known("test_touch")
def test_touch(mc):
    mc.set("t:k", b"v", time=1)
    assert mc.touch("t:k", 100) is True
    assert mc.touch("t:absent", 100) is False
    mc.set("t:short", b"v", time=100)
    assert mc.touch("t:short", 1) is True
    time.sleep(2.1)  # expiry has a one-second clock
    assert mc.get("t:k") == b"v"
    assert mc.get("t:short") is None


@known("test_large_value")
def test_large_value(mc):
    big = b"0123456789abcdef" * (1_000_000 // 16)
    assert mc.set("big", big)
    assert mc.get("big") == big
    over = b"x" * (1024 * 1024 + 1)  # just above the 1 MiB item limit
    with pytest.raises(pylibmc.Error) as refused:
        mc.set("over", over)
    print("1 MiB + 1 refused as:", repr(refused.value))
    assert mc.get("over") is None
    assert mc.get("big") == big  # the connection is still in step


@known("test_binary_value")
def test_binary_value(mc):
    value = bytes(range(256)) + b"\r\nEND\r\n\x00"
    assert mc.set("bin", value)
    assert mc.get("bin") == value


@known("test_delete")
def test_delete(mc):
    mc.set("d:k", b"v")
    assert mc.delete("d:k") is True
    assert mc.delete("d:k") is False
    assert mc.get("d:k") is None


@known("test_add_replace_append_prepend")
def test_add_replace_append_prepend(mc):
    assert mc.add("s:k", b"mid") is True
    assert mc.add("s:k", b"x") is False
    assert mc.replace("s:absent", b"x") is False
    assert mc.append("s:k", b">") is True
    assert mc.prepend("s:k", b"<") is True
    assert mc.get("s:k") == b"<mid>"
    assert mc.replace("s:k", b"new") is True
    assert mc.get("s:k") == b"new"
    assert mc.append("s:absent", b"x") is False
    assert mc.prepend("s:absent", b"x") is False


@known("test_binary_protocol")
def test_binary_protocol(server):
    """pylibmc with binary=True: every storage command, multi-get (GetKQ + Noop), cas, incr
    and decr, touch, delete, and the errors, as in text mode."""
    c = pylibmc.Client([server], binary=True,
                       behaviors={"cas": True, "connect_timeout": 5000, "send_timeout": 20_000_000,
                                  "receive_timeout": 20_000_000})
    try:
        assert c.set("b:k", b"v")
        assert c.get("b:k") == b"v"
        c.set("b:n", b"1")
        assert c.incr("b:n", 1) == 2
        assert c.decr("b:n", 5) == 0
        with pytest.raises(pylibmc.NotFound):
            c.incr("b:absent", 1)
        assert c.delete("b:k") is True
        assert c.delete("b:k") is False
        assert c.get("b:k") is None
        c.set_multi({f"b:gm:{i}": str(i).encode() for i in range(50)})
        got = c.get_multi([f"b:gm:{i}" for i in range(60)])
        assert len(got) == 50 and got["b:gm:7"] == b"7"
        assert c.add("b:s", b"mid") is True
        assert c.add("b:s", b"x") is False
        with pytest.raises(pylibmc.NotFound):  # binary: 0x0001, which libmemcached raises
            c.replace("b:absent", b"x")
        assert c.append("b:s", b">") is True
        assert c.prepend("b:s", b"<") is True
        assert c.get("b:s") == b"<mid>"
        value, unique = c.gets("b:s")
        assert value == b"<mid>" and unique
        assert c.cas("b:s", b"new", unique) is True
        assert c.cas("b:s", b"newer", unique) is False  # stale unique: exists
        assert c.get("b:s") == b"new"
        assert c.touch("b:s", 100) is True
        assert c.touch("b:absent", 100) is False
        binary = bytes(range(256)) + b"\r\nEND\r\n\x00"
        assert c.set("b:bin", binary, min_compress_len=0)
        assert c.get("b:bin") == binary
        big = b"0123456789abcdef" * (1_000_000 // 16)
        assert c.set("b:big", big)
        assert c.get("b:big") == big
        assert c.flush_all()
        assert c.get("b:n") is None
        c.set("b:big", big)
        c.set("b:text", b"abc")
    finally:
        c.disconnect_all()
    # libmemcached takes the server down for a while after an error status it does not map
    # (memcached's answers too): a fresh client for each, which checks what stayed.
    for refused in (lambda c: c.incr("b:text", 1),  # 0x0006: non-numeric value
                    lambda c: c.set("b:over", b"x" * (1024 * 1024 + 1))):  # 0x0003: too large
        c = pylibmc.Client([server], binary=True)
        try:
            with pytest.raises(pylibmc.Error):
                refused(c)
        finally:
            c.disconnect_all()
    c = pylibmc.Client([server], binary=True)
    try:
        assert c.get("b:over") is None
        assert c.get("b:text") == b"abc"
        assert c.get("b:big") == big
    finally:
        c.disconnect_all()
