"""pymemcache against cairn with the flash tier: ten times the RAM limit, every value back.

The flash file is a real file with O_DIRECT in pytest's tmp_path (the work disk, not tmpfs).
"""

import os
import subprocess

import pytest
from pymemcache.client.base import Client

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("CAIRN_BIN", os.path.join(ROOT, "target", "debug", "cairn"))


@pytest.fixture()
def server(tmp_path):
    log = open(tmp_path / "stderr.log", "w+")
    proc = subprocess.Popen(
        [BIN, "-p", "0", "--data-dir", str(tmp_path), "--persistence", "off", "-m", "4",
         "--grpc-listen", "127.0.0.1:0",
         "--flash-path", str(tmp_path / "flash.dat"), "--flash-size", "128m"],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        # A test switch: eviction waits for a flash writer that other work on the machine
        # starves, instead of dropping items, so that every value can be expected back.
        env={**os.environ, "CAIRN_TEST_FLASH_WAIT_FOR_WRITER": "1"},
    )
    addr = None
    for line in proc.stdout:
        if line.startswith("cairn listening on "):
            addr = line.strip().rsplit(" ", 1)[1]
            break
    assert addr, "cairn exited before it was ready"
    # The switch is compiled in only with cairn-server's test-hooks feature, which
    # `cargo build --all-targets` and `cargo test` turn on (not `cargo build` alone): a binary
    # without it would drop items on a busy machine instead of failing here.
    log.seek(0)
    assert "CAIRN_TEST_FLASH_WAIT_FOR_WRITER=1" in log.read(), (
        f"{BIN} ignores CAIRN_TEST_FLASH_WAIT_FOR_WRITER: build it with its test switches "
        "(cargo build --all-targets, or cargo build -p cairn-server --features test-hooks)")
    host, port = addr.rsplit(":", 1)
    yield (host, int(port))
    proc.terminate()
    assert proc.wait(timeout=30) == 0, "graceful shutdown exits 0"
    log.close()


def value(i):
    return (b"%08d-" % i) * 110


def test_ten_times_ram_reads_back(server):
    c = Client(server, timeout=20, connect_timeout=20)
    n = 40_000  # ~40 MiB of values through 4 MiB of RAM
    for start in range(0, n, 500):
        failed = c.set_many({"k%d" % i: value(i) for i in range(start, start + 500)},
                            noreply=False)
        assert failed == []
    stats = c.stats()
    assert int(stats[b"flash_items"]) > n // 2
    assert int(stats[b"evictions"]) == 0
    for start in range(0, n, 200):
        keys = ["k%d" % i for i in range(start, start + 200)]
        got = c.get_many(keys)
        assert got == {k: value(int(k[1:])) for k in keys}
    # Commands on flash items: incr, append, touch, delete, cas.
    c.set("counter", b"41", noreply=False)
    c.set_many({"fill%d" % i: value(i) for i in range(8000)}, noreply=False)
    assert c.incr("counter", 1) == 42
    assert c.append("k0", b"!", noreply=False)
    assert c.get("k0") == value(0) + b"!"
    assert c.touch("k1", 100, noreply=False)
    assert c.delete("k2", noreply=False)
    assert c.get("k2") is None
    v, cas = c.gets("k3")
    assert v == value(3)
    assert c.cas("k3", b"swapped", cas, noreply=False)
    assert c.get("k3") == b"swapped"
    assert int(c.stats()[b"get_extstore"]) > 0
