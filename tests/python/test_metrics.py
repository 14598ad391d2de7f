"""The Prometheus endpoint, parsed by the Prometheus project's own Python parsers, and the
accept loop under EMFILE."""

import resource
import select
import socket
import time
import urllib.request

import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families as prometheus_families
from pymemcache.client.base import Client

from cairn_harness import Cairn

# `stats` names whose metric carries its unit under another name.
RENAMED = {"uptime": "uptime_seconds", "rusage_user": "cpu_user_seconds",
           "rusage_system": "cpu_system_seconds"}
TEXT_ONLY = {"pid", "time", "version"}


def scrape(server, path="/metrics"):
    host, port = server.metrics
    with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=20) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("application/openmetrics-text")
        return r.read().decode()


@pytest.fixture()
def server(tmp_path):
    s = Cairn(tmp_path, "--metrics-addr", "127.0.0.1:0", "--persistence", "sync")
    yield s
    assert s.stop() == 0


def test_every_stat_is_a_metric_and_the_text_parses(server):
    c = Client(server.addr, timeout=20, connect_timeout=20)
    for i in range(20):
        assert c.set(f"k{i}", b"v" * 100, noreply=False)
    assert c.get("k1") == b"v" * 100
    assert c.get("missing") is None
    stats = {k.decode(): v for k, v in c.stats().items()}
    text = scrape(server)

    families = {f.name: f for f in openmetrics_families(text)}
    # The Prometheus text parser reads it as well (it names counters with _total).
    assert {f.name for f in prometheus_families(text)}

    for name, value in stats.items():
        if name in TEXT_ONLY:
            continue
        metric = "cairn_" + RENAMED.get(name, name)
        assert metric in families, f"stats {name} has no metric {metric}"
        family = families[metric]
        assert family.type in ("counter", "gauge"), (metric, family.type)
        if family.type == "counter":
            assert family.samples[0].name == metric + "_total"
        assert family.documentation, f"{metric} has no HELP"

    def value(name):
        return families[name].samples[0].value

    assert value("cairn_cmd_set") >= 20
    assert value("cairn_get_hits") >= 1 and value("cairn_get_misses") >= 1
    assert value("cairn_curr_connections") >= 1
    assert "cairn_rejected_connections" in families
    assert value("cairn_rss_bytes") > 1 << 20

    # Command latency by family: the 20 sets and 2 gets are counted.
    latency = families["cairn_command_duration_seconds"]
    assert latency.type == "histogram"
    counts = {s.labels["command"]: s.value for s in latency.samples
              if s.name.endswith("_count")}
    assert counts["set"] >= 20 and counts["get"] >= 2, counts

    # Persistence: each sync set waited for a durable write of the log (O_DIRECT, the
    # default: one pwritev2(RWF_DSYNC) per batch; fdatasync and plain writes are there too);
    # batches and log bytes are there.
    for name in ("cairn_fdatasync_seconds", "cairn_log_write_seconds"):
        assert families[name].type == "histogram", name
    dsync = families["cairn_log_dsync_write_seconds"]
    assert dsync.type == "histogram"
    assert [s.value for s in dsync.samples if s.name.endswith("_count")][0] >= 1
    batch = families["cairn_log_batch_bytes"]
    assert [s.value for s in batch.samples if s.name.endswith("_sum")][0] >= 20 * 100
    for name in ("cairn_log_pending_bytes", "cairn_log_bytes_since_checkpoint",
                 "cairn_checkpoints", "cairn_checkpoint_failures",
                 "cairn_last_checkpoint_duration_seconds", "cairn_recovery_duration_seconds",
                 "cairn_recovered_items", "cairn_writes_refused"):
        assert name in families, name
    assert families["cairn_checkpoints"].type == "counter"


def test_unknown_paths_are_404(server):
    host, port = server.metrics
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://{host}:{port}/nope", timeout=20)
    assert e.value.code == 404


def stat(conn_file, sock, name):
    sock.sendall(b"stats\r\n")
    value = None
    while True:
        line = conn_file.readline().decode()
        assert line, "connection closed"
        if line.startswith(f"STAT {name} "):
            value = int(line.split()[2])
        if line == "END\r\n":
            return value


def test_accept_backs_off_on_emfile_and_resumes(tmp_path):
    """Under `ulimit -n 64`, 200 connection attempts run the server out of descriptors: it must
    not spin on the failing accept (CPU stays low), and it serves the waiting connections once
    others close."""
    limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    server = Cairn(tmp_path, "--persistence", "off", "-t", "2", preexec_fn=limit)
    try:
        first = socket.create_connection(server.addr, timeout=20)
        first_file = first.makefile("rb")
        # Non-blocking attempts: past the listen backlog the kernel drops the SYN and the
        # client retries it, which must not stall the test.
        conns = []
        for _ in range(200):
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(server.addr)
            conns.append(c)
        # Wait until the server has hit the limit (the counter is what it saw, no sleep).
        deadline = time.monotonic() + 60
        while stat(first_file, first, "accept_errors") == 0:
            assert time.monotonic() < deadline, "no accept error under ulimit -n 64"
        # While out of descriptors, the server idles: CPU over a window stays far below the
        # window (a spinning accept loop would use the whole of it, on one core or more).
        cpu0, wall0 = server.cpu_seconds(), time.monotonic()
        time.sleep(2)
        cpu, wall = server.cpu_seconds() - cpu0, time.monotonic() - wall0
        assert cpu < 0.25 * wall, f"{cpu:.2f} s CPU in {wall:.2f} s: the accept loop spins"
        # Close most: the last connections, waiting in the backlog, are then served. Keep
        # few enough open that the server has a descriptor for each besides its own (about 24
        # at start: listeners, rings, eventfds, the runtimes' epolls); with 50 kept open, the
        # last one could wait behind the others for a descriptor that never came free.
        for c in conns[:190]:
            c.close()
        # The last attempt's SYN may have been dropped; the kernel retries it within seconds.
        last = conns[-1]
        _, writable, _ = select.select([], [last], [], 60)
        assert writable, "the last connection was never accepted"
        last.setblocking(True)
        last.settimeout(60)
        last.sendall(b"version\r\n")
        assert last.makefile("rb").readline().startswith(b"VERSION ")
        for c in conns[190:]:
            c.close()
        first.close()
    finally:
        assert server.stop() == 0
