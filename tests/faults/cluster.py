"""The whole topology of one run, its set-up, its health and its teardown.

```text
  Cluster.setup: bridge ─> z1..z3 namespaces, ensemble started, quorum ─> n1..n3 namespaces
      (nftables: DNAT of every other node's gRPC port to the proxy of that pair) ─> proxies
      ─> [loop-device disks] ─> n1 started alone (primary), then n2, n3 (full copies)
      ─> the ZooKeeper reader (discovery) ─> healthy
  healthy: every node runs and printed its ready line; one says role primary, the others
      replica and connected; ZooKeeper lists that one alone as ^M^; each replica's
      applied_revision equals the primary's revision; the three ZooKeeper servers serve
  Cluster.teardown: clients stopped, processes killed by PID, namespaces and bridge deleted,
      disks unmounted and detached, cgroups removed (also at exit and on SIGTERM/SIGINT)
```
"""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path

from . import disk as diskmod
from .cairn import GRPC_PORT, Conn, Node
from .net import Net
from .proxy import Proxies
from .workload import Clock, Discovery, History
from .zookeeper import Ensemble

log = logging.getLogger("faults.cluster")


class NotHealthy(Exception):
    pass


class Cluster:
    def __init__(self, cfg, prefix: str, out: Path, rng: random.Random):
        self.cfg = cfg
        self.prefix = prefix
        self.out = out
        self.rng = rng
        self.service = f"faults-{prefix}"
        self.session_s = cfg.session_timeout_ms / 1000
        self.clock = Clock()
        self.history = History()
        self.net: Net | None = None
        self.ensemble: Ensemble | None = None
        self.nodes: list[Node] = []
        self.proxies: Proxies | None = None
        self.disks: dict[str, diskmod.Disk] = {}
        self.discovery: Discovery | None = None
        self.clients: list = []
        # The keys the clients of the current round use, and the round's name ("r007").
        self.round_keys: list[str] = []
        self.round_name = "r"
        self.pinned_serial = 0
        self.events: list[tuple[float, str]] = []

    # ---- set-up and teardown ----------------------------------------------------------

    def event(self, what: str) -> None:
        t = self.clock.now()
        self.events.append((t, what))
        log.info("[%8.3f] %s", t, what)

    def setup(self, base: str, slow_disk: bool) -> None:
        logs = self.out / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        work = self.out / "work"
        self.net = Net(self.prefix, base)
        self.net.create()
        self.ensemble = Ensemble(self.net, work, logs)
        self.ensemble.start(deadline_s=120)
        self.event(f"ZooKeeper ensemble serving at {self.ensemble.connect_string}")
        ips = {f"n{i}": self.net.add_host(f"n{i}", 10 + i) for i in (1, 2, 3)}
        self.proxies = Proxies(random.Random(self.rng.random()))
        dnat: dict[str, list] = {h: [] for h in ips}
        for src in ips:
            for dst, dst_ip in ips.items():
                if src == dst:
                    continue
                link = self.proxies.add(f"{src}->{dst}", self.net.proxy_ip, (dst_ip, GRPC_PORT))
                dnat[src].append((dst_ip, GRPC_PORT, self.net.proxy_ip, link.port))
        for h in ips:
            self.net.firewall(h, dnat[h])
        args = [
            "--zookeeper",
            self.ensemble.connect_string,
            "--service-code",
            self.service,
            "--replication-group",
            "g0",
            "--replication",
            self.cfg.replication,
            "--zookeeper-session-timeout-ms",
            str(self.cfg.session_timeout_ms),
            "--replication-timeout-ms",
            str(self.cfg.replication_timeout_ms),
            "-t",
            "1",
            "--grpc-threads",
            "1",
            "--log-segment-mb",
            "4",
            "-m",
            "256",
        ]
        for h, ip in ips.items():
            data = work / h / "data"
            if slow_disk:
                d = diskmod.Disk(h, self.prefix, self.out / "disks")
                self.disks[h] = d
                data = d.create() / "data"
            node = Node(h, ip, self.net, self.cfg.cairn, data, logs, args)
            if slow_disk:
                node.on_start = self.disks[h].adopt
            self.nodes.append(node)
        # The first alone becomes the primary; the others follow it.
        self.nodes[0].start(wait_s=60)
        for n in self.nodes[1:]:
            n.start(wait_s=60)
        self.event("cairn nodes started")
        self.discovery = Discovery(self.ensemble.connect_string, self.service, self.clock)
        self.discovery.start()
        self.wait_healthy(60)

    def teardown(self) -> None:
        from .workload import stop_clients

        try:
            stop_clients(self.clients, 5)
        except Exception:
            pass
        if self.discovery:
            self.discovery.stop()  # kept: its list of changes goes in the report
        for n in self.nodes:
            try:
                n.cont()
                n.kill9()
            except Exception as e:
                log.warning("%s: %s", n.host, e)
        if self.ensemble:
            self.ensemble.stop()
        if self.proxies:
            self.proxies.close()
            self.proxies = None
        if self.net:
            self.net.teardown()
        for d in self.disks.values():
            d.destroy()
        self.disks = {}

    # ---- looking at the group ---------------------------------------------------------

    def node(self, addr_text: str) -> Node | None:
        for n in self.nodes:
            if n.addr_text == addr_text:
                return n
        return None

    def roles(self) -> dict[str, dict[str, str] | None]:
        return {n.host: n.stats("replication") for n in self.nodes}

    def primaries(self) -> list[Node]:
        """The nodes that say they are the primary now."""
        out = []
        for n in self.nodes:
            s = n.stats("replication")
            if s and s.get("role") == "primary":
                out.append(n)
        return out

    def primary(self) -> Node:
        ps = self.primaries()
        if len(ps) == 1:
            return ps[0]
        listed = self.discovery.primary() if self.discovery else None
        for p in ps:
            if p.addr_text == listed:
                return p
        raise NotHealthy(f"no single primary: {[p.host for p in ps]}, ZooKeeper lists {listed}")

    def members(self) -> list[str]:
        """The group's member znodes in ZooKeeper ([] if it cannot be read)."""
        try:
            return [
                m
                for m in self.discovery.zk.get_children(f"/arcus_repl/group_list/{self.service}/g0")
                if "^" in m
            ]
        except Exception:
            return []

    def others(self, node: Node) -> list[Node]:
        return [n for n in self.nodes if n is not node]

    def health(self) -> str | None:
        """None if healthy, else what is not."""
        for s in self.ensemble.servers:
            if not s.running or s.mode() not in ("leader", "follower"):
                return f"ZooKeeper {s.host} not serving"
        for n in self.nodes:
            if not n.running:
                return f"{n.host} not running"
            if n.paused:
                return f"{n.host} paused"
            if not n.ready.is_set():
                return f"{n.host} not ready yet"
        stats = self.roles()
        prim = [h for h, s in stats.items() if s and s.get("role") == "primary"]
        if len(prim) != 1:
            return f"primaries: {prim}"
        p = next(n for n in self.nodes if n.host == prim[0])
        ps = stats[p.host]
        listed = self.discovery.primaries if self.discovery else []
        if listed != [p.addr_text]:
            return f"ZooKeeper lists {listed} as ^M^, {p.host} is the primary"
        for n in self.others(p):
            s = stats[n.host]
            if not s or s.get("role") != "replica":
                return f"{n.host}: {s and s.get('role')}"
            if s.get("connected") != "yes":
                return f"{n.host} not connected"
            if s.get("applied_revision") != ps.get("revision"):
                return (f"{n.host} applied {s.get('applied_revision')}, "
                        f"{p.host} is at {ps.get('revision')}")
        if ps.get("replicas") != str(len(self.nodes) - 1):
            return f"{p.host} has {ps.get('replicas')} replicas"
        return None

    def wait_healthy(self, deadline_s: float) -> float:
        """Polls until healthy; returns the seconds it took. NotHealthy after the deadline."""
        t0 = time.monotonic()
        why = None
        while time.monotonic() - t0 < deadline_s:
            for n in self.nodes:
                if n.proc is not None and n.proc.poll() is not None:
                    raise NotHealthy(f"{n.host} exited ({n.proc.returncode}): see {n.log_path}")
            why = self.health()
            if why is None:
                return time.monotonic() - t0
            time.sleep(0.1)
        raise NotHealthy(f"not healthy after {deadline_s:.0f}s: {why}")

    def repair(self) -> None:
        """Undoes every fault the bench may have left (after a round that did not recover)."""
        self.event("repair: every fault undone")
        self.net.unblock_all()
        self.proxies.set(None, cut=False)
        for d in self.disks.values():
            d.throttle(0)
        for s in self.ensemble.servers:
            if not s.running:
                s.start()
        for n in self.nodes:
            n.cont()
            if not n.running:
                n.start(wait_s=None)

    # ---- clients ----------------------------------------------------------------------

    def make_client(self, name: str, pinned: str | None = None):
        from .workload import Client

        return Client(
            name,
            self.round_keys,
            [n.addr_text for n in self.nodes],
            self.discovery,
            self.history,
            self.clock,
            self.net.client_ip,
            random.Random(self.rng.random()),
            self.cfg.op_timeout_s,
            self.cfg.connect_timeout_s,
            pinned=pinned,
        )

    def start_clients(self, prefix: str, count: int) -> list:
        cs = [self.make_client(f"{prefix}{i}") for i in range(count)]
        for c in cs:
            c.start()
        self.clients += cs
        return cs

    def start_pinned_clients(self, addr_text: str, count: int) -> list:
        """Clients that talk to `addr_text` alone (a client that can reach only that node)."""
        self.pinned_serial += 1
        cs = [
            self.make_client(f"{self.round_name}s{self.pinned_serial}.{i}", pinned=addr_text)
            for i in range(count)
        ]
        for c in cs:
            c.start()
        self.clients += cs
        return cs

    def stop_pinned_clients(self, cs: list) -> None:
        from .workload import stop_clients

        stop_clients(cs)

    # ---- data -------------------------------------------------------------------------

    def write_filler(self, gen: str) -> dict:
        """Writes `filler` new keys of `filler_bytes` each to the primary (what a full copy
        has to move), recorded as the "loader" process's acknowledged writes."""
        from .workload import load

        cfg = self.cfg
        pad = "x" * max(0, cfg.filler_bytes - 24)
        items = [(f"fill{gen}.{i}", f"loader{gen}.{i}.{pad}") for i in range(cfg.filler)]
        p = self.primary()
        t = time.monotonic()
        stored = load(p.addr_text, items, self.history, self.clock, self.net.client_ip, 10)
        self.event(f"filler {gen}: {stored}/{cfg.filler} keys stored on {p.host}")
        return {"keys": cfg.filler, "stored": stored, "seconds": round(time.monotonic() - t, 2)}

    def read_all(self, node: Node, keys: list[str], timeout_s: float = 5) -> dict[str, str | None]:
        with Conn(node.addr, self.net.control_ip, timeout_s) as c:
            return c.mg_many(keys)
