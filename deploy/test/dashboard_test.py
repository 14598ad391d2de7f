#!/usr/bin/env python3
"""The Grafana dashboard and the alert rules against a real cairn and a real Prometheus.

    cairn (sync persistence, flash tier, gRPC on; every port 127.0.0.1:0)
      ^  memcached text + meta load, gRPC calls and a watch stream (a loop that stops itself)
      |  <── a second cairn, --replica-of the first: the replication panels have a primary
      |      and a replica
      |  GET /metrics of both every second
    prometheus --config.file=<tmp> (rule_files: deploy/prometheus/cairn-rules.yml)
      ^  GET /api/v1/query, /api/v1/rules
    this script

First it checks the dashboard's shape (a data source variable every panel uses, unique ids,
panels that do not overlap); once Prometheus holds a few scrapes, it checks:
  1. every panel's query (rows and collapsed rows included), with the dashboard's variables
     substituted (both nodes selected, as Grafana writes a multi-value variable), returns at
     least one series; a query with a variable this script does not know fails;
  2. every dashboard variable's label_values() finds both nodes;
  3. every metric name in the dashboard and in the rules Prometheus loaded is one the server
     exports (a renamed metric fails here, where a rule would just never fire);
  4. Prometheus evaluates every rule without an error, and no alert fires against this
     healthy node under load.
It also fills RAM (-m 16) past its size so that items move to the flash tier, and checks that
the load moved the counters (cairn_cmd_get_total) and that the replication metrics show the
primary as one, with its replica connected, and the replica as one.

Python's standard library only; grpcio and grpcio-tools, when importable, add gRPC calls and a
watch to the load (scripts/test-all.sh runs this in its venv). Exit 0 when all holds, 1 with
the failures listed. Usage:
    deploy/test/dashboard_test.py [--cairn target/debug/cairn] [--prometheus prometheus]
        [--dashboard deploy/grafana/cairn-dashboard.json] [--rules deploy/prometheus/cairn-rules.yml]
"""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from server_util import MemcachedText as Memcached  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOB = "cairn"
# Grafana's $__rate_interval is at least four scrape intervals; the test scrapes every second.
RATE_INTERVAL = "15s"
SCRAPES_BEFORE_CHECKING = 6
DEADLINE_S = 60


def log(msg):
    print(f"dashboard test: {msg}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- cairn ----------------------------------------------------------------------------------

def start_cairn(binary, tmp, name="data", replica_of=None):
    """Starts cairn on free ports with persistence and the gRPC API, and a flash tier unless it
    is a replica (--replica-of); returns the process and its addresses, read from its ready
    lines."""
    data = os.path.join(tmp, name)
    os.makedirs(data)
    args = [
        binary, "-p", "0", "--data-dir", data, "--log-segment-mb", "2",
        "--persistence", "sync", "--metrics-addr", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
    ]
    if replica_of:
        args += ["--replica-of", replica_of]
    else:
        args += [
            "-m", "16",
            # O_DIRECT on the flash file needs a file system that has it: tmp is ext4 here, and
            # --flash-direct-io false keeps the test running on a tmpfs /tmp.
            "--flash-path", os.path.join(tmp, "cairn.flash"), "--flash-size", "32m",
            "--flash-direct-io", "false", "--enable-admin",
        ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=open(os.path.join(tmp, f"{name}.log"), "w"), text=True)
    addrs = {}
    for line in proc.stdout:
        for key, prefix in (("metrics", "cairn metrics on "), ("grpc", "cairn grpc listening on "),
                            ("memcached", "cairn listening on ")):
            if line.startswith(prefix):
                addrs[key] = line.strip()[len(prefix):]
        if "memcached" in addrs:
            break
    if set(addrs) != {"metrics", "grpc", "memcached"}:
        proc.kill()
        raise SystemExit(f"cairn exited before it was ready (log: {tmp}/{name}.log): {addrs}")
    # Keep draining stdout so the server never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    return proc, addrs


def fill_past_memory(addr, errors):
    """Stores 8 KiB values (noreply, pipelined) until RAM evicts to flash: at most 20,000 of
    them (160 MiB, over -m 16 + the 32 MiB flash tier)."""
    try:
        mc = Memcached(addr)
        value = b"f" * 8192
        for batch in range(0, 20000, 500):
            mc.sock.sendall(b"".join(
                b"set fill:%d 0 0 %d noreply\r\n%s\r\n" % (k, len(value), value)
                for k in range(batch, batch + 500)))
            stats = dict(l.split(b" ")[1:3] for l in mc.call("stats", until=b"END")[:-1])
            if int(stats.get(b"evictions", 0)) > 0 and int(stats.get(b"flash_items", 0)) > 0:
                mc.close()
                return batch + 500
        mc.close()
        errors.append("filling past -m evicted nothing to flash")
    except Exception as e:
        errors.append(f"fill: {e!r}")
    return 0


def memcached_load(addr, stop, errors, filled):
    """Sets, gets (hits and misses, RAM and flash), deletes, incr, touch, meta and stats until
    `stop`."""
    try:
        mc = Memcached(addr)
        i = 0
        value = b"v" * 100
        while not stop.is_set():
            key = f"key:{i % 500}"
            reply = mc.call(f"set {key} 0 0 {len(value)}", value)
            if reply != [b"STORED"]:
                raise RuntimeError(f"set {key}: {reply}")
            mc.call(f"get {key} key:missing:{i}", until=b"END")
            mc.call(f"touch {key} 0")
            mc.call("set counter 0 0 1", b"0")
            mc.call("incr counter 1")
            mc.call(f"delete key:{(i + 250) % 500}")
            if filled:
                mc.call(f"get fill:{(i * 7919) % filled}", until=b"END")
            if mc.call(f"mg {key} v")[0].startswith(b"VA "):
                mc.line()  # the value's line
            if i % 50 == 0:
                mc.call("stats", until=b"END")
            i += 1
            time.sleep(0.002)
        mc.close()
    except Exception as e:  # reported, and fails the test
        errors.append(f"memcached load: {e!r}")


def grpc_load(addr, stop, errors, tmp):
    """gRPC Get/Set and one watch stream held open, when grpcio and grpcio-tools are here."""
    try:
        import importlib
        import grpc
        from grpc_tools import protoc
    except ImportError:
        log("grpcio/grpcio-tools not importable: no gRPC load (the gRPC panels still must "
            "return their series, at zero)")
        return
    try:
        out = os.path.join(tmp, "stubs")
        os.makedirs(out)
        include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
        files = [os.path.join("cairn", "v1", f) for f in ("kv.proto", "watch.proto")]
        if protoc.main(["protoc", f"-I{ROOT}/proto", f"-I{include}", f"--python_out={out}",
                        f"--grpc_python_out={out}"] + files) != 0:
            raise RuntimeError("grpcio-tools could not compile proto/cairn/v1")
        sys.path.insert(0, out)
        kv = importlib.import_module("cairn.v1.kv_pb2")
        kv_grpc = importlib.import_module("cairn.v1.kv_pb2_grpc")
        watch = importlib.import_module("cairn.v1.watch_pb2")
        watch_grpc = importlib.import_module("cairn.v1.watch_pb2_grpc")
        channel = grpc.insecure_channel(addr)
        stub = kv_grpc.KVStub(channel)

        def requests():
            yield watch.WatchRequest(create_request=watch.WatchCreateRequest(key=b"grpc:", prefix=True))
            stop.wait()

        stream = watch_grpc.WatchStub(channel).Watch(requests())
        threading.Thread(target=lambda: [None for _ in stream], daemon=True).start()
        i = 0
        while not stop.is_set():
            stub.Set(kv.SetRequest(key=f"grpc:{i % 100}".encode(), value=b"x" * 50))
            stub.Get(kv.GetRequest(key=f"grpc:{i % 100}".encode()))
            i += 1
            time.sleep(0.01)
        stream.cancel()
        channel.close()
    except Exception as e:
        errors.append(f"gRPC load: {e!r}")


# ---- Prometheus -------------------------------------------------------------------------------

def start_prometheus(binary, tmp, targets, rules):
    config = os.path.join(tmp, "prometheus.yml")
    with open(config, "w") as f:
        f.write(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n  - {json.dumps(os.path.abspath(rules))}\n"
            f"scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n"
            f"      - targets: {json.dumps(targets)}\n"
        )
    for _ in range(5):  # a free port can be taken between the check and the bind
        port = free_port()
        logf = open(os.path.join(tmp, "prometheus.log"), "w")
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp}/tsdb",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=logf, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        until = time.monotonic() + 30
        while time.monotonic() < until and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return proc, url
            except OSError:
                time.sleep(0.2)
        proc.kill()
        proc.wait()
    raise SystemExit(f"prometheus did not become ready (log: {tmp}/prometheus.log)")


def api(url, path, **params):
    q = urllib.parse.urlencode(params)
    with urllib.request.urlopen(f"{url}/api/v1/{path}?{q}", timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{path} {params}: {body}")
    return body["data"]


def query(url, expr):
    """The instant query's result list; raises on a PromQL error (with Prometheus's message)."""
    try:
        return api(url, "query", query=expr)["result"]
    except urllib.error.HTTPError as e:
        raise RuntimeError(json.load(e).get("error", str(e))) from None


# ---- The dashboard ------------------------------------------------------------------------------

def panels(dashboard):
    """Every panel, rows' (collapsed) children included."""
    for p in dashboard["panels"]:
        yield p
        yield from p.get("panels", [])


def grafana_regex_escape(value):
    """What Grafana's Prometheus data source makes of a multi-value variable's value inside a
    regex matcher (prometheusSpecialRegexEscape): each special character behind two
    backslashes, as a PromQL string needs them."""
    return re.sub(r"([$^*{}\[\]'+?.()|])", r"\\\\\1", value.replace("\\", "\\\\\\\\"))


def structure(dashboard):
    """What Grafana's import needs and this dashboard promises, without a Grafana: a data source
    variable that every panel and query uses, unique panel ids, unique refIds per panel, and
    panels that do not overlap on the grid."""
    problems = []
    variables = dashboard.get("templating", {}).get("list", [])
    if not any(v.get("type") == "datasource" and v.get("query") == "prometheus" and v.get("name") == "datasource"
               for v in variables):
        problems.append("no Prometheus data source variable named datasource")
    ids, cells = set(), {}
    for p in panels(dashboard):
        where = f"panel {p.get('title')!r}"
        if p.get("id") in ids:
            problems.append(f"{where}: id {p.get('id')} used twice")
        ids.add(p.get("id"))
        if p["type"] not in ("row", "text"):
            sources = [p.get("datasource")] + [t.get("datasource") for t in p.get("targets", [])]
            if any(d != {"type": "prometheus", "uid": "${datasource}"} for d in sources):
                problems.append(f"{where}: a data source other than ${{datasource}}: {sources}")
            refs = [t.get("refId") for t in p.get("targets", [])]
            if len(refs) != len(set(refs)) or not refs:
                problems.append(f"{where}: refIds {refs}")
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    problems.append(f"{where} overlaps {cells[(x, y)]!r} at ({x}, {y})")
                    break
                cells[(x, y)] = p.get("title")
            else:
                continue
            break
        if g["x"] + g["w"] > 24:
            problems.append(f"{where}: wider than the grid")
    return problems


def grafana_multi_value(selected):
    """A multi-value variable as Grafana writes it into a regex matcher: one value escaped, or
    several as (a|b)."""
    escaped = [grafana_regex_escape(v) for v in selected]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def substitute(expr, values):
    """The dashboard's variables replaced by this run's values; any other $ is an error."""
    out = expr.replace("$__rate_interval", RATE_INTERVAL)
    for name, value in values.items():
        out = out.replace("${%s}" % name, value).replace(f"${name}", value)
    if "$" in out:
        raise ValueError(f"a variable this test does not know: {out}")
    return out


METRIC = re.compile(r"\b(cairn_[a-z0-9_]+|up)\b")
HISTOGRAM_SUFFIX = re.compile(r"_(bucket|sum|count)$")


def metric_names(expr):
    return set(METRIC.findall(expr))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cairn", default=os.environ.get("CAIRN_BIN", os.path.join(ROOT, "target", "debug", "cairn")))
    ap.add_argument("--prometheus", default="prometheus")
    ap.add_argument("--dashboard", default=os.path.join(ROOT, "deploy", "grafana", "cairn-dashboard.json"))
    ap.add_argument("--rules", default=os.path.join(ROOT, "deploy", "prometheus", "cairn-rules.yml"))
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (logs, tsdb)")
    ap.add_argument("--verbose", action="store_true", help="list the queries that returned only 0 or NaN")
    args = ap.parse_args()
    prometheus = shutil.which(args.prometheus)
    if not prometheus:
        raise SystemExit(f"{args.prometheus} not found (Debian's prometheus package)")
    dashboard = json.load(open(args.dashboard))

    started = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="cairn-dashboard-test-")
    failures, load_errors = structure(dashboard), []
    stop = threading.Event()
    cairn = replica = prom = None
    loads = []
    try:
        cairn, addrs = start_cairn(args.cairn, tmp)
        log(f"cairn: memcached {addrs['memcached']}, gRPC {addrs['grpc']}, metrics {addrs['metrics']}")
        filled = fill_past_memory(addrs["memcached"], load_errors)
        replica, replica_addrs = start_cairn(args.cairn, tmp, "replica", replica_of=addrs["grpc"])
        log(f"replica: memcached {replica_addrs['memcached']}, metrics {replica_addrs['metrics']}")
        loads = [threading.Thread(target=memcached_load, args=(addrs["memcached"], stop, load_errors, filled), daemon=True),
                 threading.Thread(target=grpc_load, args=(addrs["grpc"], stop, load_errors, tmp), daemon=True)]
        for t in loads:
            t.start()
        # A checkpoint, so the checkpoint figures have one behind them.
        admin = Memcached(addrs["memcached"])
        if admin.call("checkpoint") != [b"OK"]:
            failures.append("the checkpoint admin line did not answer OK")
        admin.close()
        instances = [addrs["metrics"], replica_addrs["metrics"]]
        prom, url = start_prometheus(prometheus, tmp, instances, args.rules)
        log(f"prometheus {url} scraping both every second")
        while True:
            r = query(url, f'count_over_time(up{{job="{JOB}"}}[1m])')
            if len(r) == 2 and min(float(s["value"][1]) for s in r) >= SCRAPES_BEFORE_CHECKING:
                break
            if time.monotonic() - started > DEADLINE_S:
                raise SystemExit(f"prometheus did not scrape cairn {SCRAPES_BEFORE_CHECKING} times in time")
            time.sleep(0.5)
        up = query(url, f'up{{job="{JOB}"}}')
        if len(up) != 2 or any(s["value"][1] != "1" for s in up):
            failures.append(f"up{{job={JOB}}} is not 1 for both nodes: {up}")

        # The replication metrics describe what runs: a primary with its replica connected.
        roles = {s["metric"]["instance"]: s["metric"]["role"]
                 for s in query(url, f'cairn_replication_role{{job="{JOB}"}} == 1')}
        if roles != {addrs["metrics"]: "primary", replica_addrs["metrics"]: "replica"}:
            failures.append(f"cairn_replication_role: {roles}")
        for expr, want in ((f'cairn_replication_replicas{{instance="{addrs["metrics"]}"}}', "1"),
                           (f'cairn_replication_connected{{instance="{replica_addrs["metrics"]}"}}', "1"),
                           (f'cairn_replication_complete{{instance="{replica_addrs["metrics"]}"}}', "1")):
            got = query(url, expr)
            if not got or got[0]["value"][1] != want:
                failures.append(f"{expr}: {got}, expected {want}")

        # 2. The variables: each label_values(METRIC{...}, LABEL) finds this run's value.
        values = {}
        # Both nodes selected, as Grafana writes a multi-value variable: (a|b), each escaped.
        known = {"job": [JOB], "instance": instances}
        for var in dashboard.get("templating", {}).get("list", []):
            if var["type"] == "datasource":
                continue
            q = var.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\)\s*", q or "")
            if not m or var["name"] not in known:
                failures.append(f"variable {var['name']}: this test knows no value for it ({q!r})")
                continue
            selector = substitute(m.group(1), values)
            found = {s["metric"].get(m.group(2)) for s in query(url, f"group by ({m.group(2)}) ({selector})")}
            if not set(known[var["name"]]) <= found:
                failures.append(f"variable {var['name']}: label_values({selector}, {m.group(2)}) "
                                f"found {sorted(map(str, found))}, not all of {known[var['name']]!r}")
            values[var["name"]] = grafana_multi_value(known[var["name"]])

        # 1. Every panel's query returns at least one series.
        exported = {s["metric"]["__name__"] for s in query(url, f'group by (__name__) ({{job="{JOB}"}})')}
        checked = 0
        names = set()
        idle = []
        for p in panels(dashboard):
            for t in p.get("targets", []):
                expr = t.get("expr")
                if not expr:
                    continue
                checked += 1
                where = f"panel {p.get('title')!r} ({t.get('refId')})"
                names |= metric_names(expr)
                try:
                    q = substitute(expr, values)
                    result = query(url, q)
                except (ValueError, RuntimeError) as e:
                    failures.append(f"{where}: {e}")
                    continue
                if not result:
                    failures.append(f"{where}: no series for {q}")
                    continue
                values_now = [float(r["value"][1]) for r in result]
                if all(v != v for v in values_now):
                    idle.append(f"{where}: NaN (no observations in the window)")
                elif all(v == 0 for v in values_now):
                    idle.append(f"{where}: 0")
        if checked == 0:
            failures.append("the dashboard has no panel query")
        log(f"{checked} panel queries run, each returned a series; {len(idle)} of them only "
            f"zero or NaN under this load (errors, refusals, drops: --verbose lists them)")
        if args.verbose:
            for line in idle:
                log(f"  {line}")

        # 3. and 4. The rules as Prometheus loaded them (it refuses to start on a file it cannot
        # load): every metric they name exported, each evaluated without an error, none firing.
        rules = [r for g in api(url, "rules")["groups"] for r in g["rules"]]
        if not rules:
            failures.append(f"prometheus loaded no rule from {args.rules}")
        for r in rules:
            names |= metric_names(r["query"])
            if r.get("health") != "ok":
                failures.append(f"rule {r['name']}: health {r.get('health')}: {r.get('lastError')}")
        for n in sorted(names):
            if n not in exported and HISTOGRAM_SUFFIX.sub("", n) + "_bucket" not in exported:
                failures.append(f"metric {n} is named in the rules or the dashboard but cairn does not export it")
        log(f"{len(names)} metric names checked against {len(exported)} exported")
        firing = [a for a in api(url, "alerts")["alerts"] if a["state"] == "firing"]
        for a in firing:
            failures.append(f"alert {a['labels']['alertname']} fires on a healthy node: {a['labels']}")
        log(f"{len(rules)} rules loaded and evaluated")
        if load_errors:
            failures.extend(load_errors)
        ops = query(url, f'sum(rate(cairn_cmd_get_total{{job="{JOB}"}}[{RATE_INTERVAL}]))')
        if not ops or float(ops[0]["value"][1]) <= 0:
            failures.append(f"the load did not move cairn_cmd_get_total: {ops}")
    finally:
        stop.set()
        for t in loads:
            t.join(timeout=10)
        for proc in (prom, replica, cairn):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if args.keep or failures:
            log(f"logs and data kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    for name, proc in (("cairn", cairn), ("the replica", replica)):
        if proc is not None and proc.returncode != 0:
            failures.append(f"{name} exited {proc.returncode} on SIGTERM (expected 0)")
    took = time.monotonic() - started
    for f in failures:
        print(f"FAIL: {f}", flush=True)
    log(f"took {took:.1f} s")
    print(f"dashboard: {0 if failures else 1} passed, {1 if failures else 0} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
