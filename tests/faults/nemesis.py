"""The faults. Each nemesis has a name, `start` (inject), `hold` (the fault lasts) and `heal`.

T is the ZooKeeper session timeout. A node whose ZooKeeper session ends stops taking writes
once its own client notices (cairn's client expires a session it cannot reach after 7/5 T);
ZooKeeper ends the session after T, and the others elect a new primary then. Most faults
therefore last 1.6 T + 1 s: long enough for a failover under the fault.

| name | start | heal |
|---|---|---|
| partition-primary | the primary drops everything: ZooKeeper, the other nodes, the clients | lift |
| partition-primary-replica-zk | the primary and one replica lose ZooKeeper; they still reach each other and the clients | lift |
| zk-minority | kill -9 of one ZooKeeper server (the leader) | restart it |
| zk-majority | kill -9 of two ZooKeeper servers (the leader and a follower) | restart them |
| pause-primary | SIGSTOP of the primary | SIGCONT |
| pause-during-full-copy | a fresh filler written (so a full copy has something to move); kill -9 of the primary; once a new primary is elected, the other survivor is killed, its data folder wiped (a replaced disk) and started again on links slowed to `copy_rate`, so it takes a full copy; during that copy, SIGSTOP of the new primary for longer than its session (the half-copied member is then the only one registered) | SIGCONT; links back to full speed; the old primary started again |
| kill-primary | kill -9 of the primary, until a new one is elected | restart it |
| stale-client | the primary loses ZooKeeper and the other nodes; two extra clients talk to it alone | lift; those clients stop |
| flapping | the primary's links to ZooKeeper and the other nodes go down and up at random (0.2 s .. T/2 each) for 2.5 T | lift |
| slow-disk | the primary's data disk throttled to 4 write IOPS (a set then takes about 1 s) for 2 T | lift |
| slow-replication | every replication link: 150 ms delay each way, 128 KiB/s, and a connection cut about every 5 s, for 2 T | lift |
"""

from __future__ import annotations

import logging
import random
import shutil
import time

from .cluster import Cluster, NotHealthy

log = logging.getLogger("faults.nemesis")


def wait_for(what: str, fn, deadline_s: float, every_s: float = 0.05):
    """Polls fn until it returns something true; returns it. NotHealthy after the deadline."""
    t0 = time.monotonic()
    while True:
        r = fn()
        if r:
            return r
        if time.monotonic() - t0 > deadline_s:
            raise NotHealthy(f"timed out after {deadline_s:.0f}s waiting for {what}")
        time.sleep(every_s)


class Nemesis:
    name = "?"
    # Runs only when the nodes' data folders are on loop devices (disk.py).
    needs_disks = False

    def __init__(self, cl: Cluster, rng: random.Random):
        self.cl = cl
        self.rng = rng
        self.T = cl.session_s
        self.notes: dict = {}

    def hold_s(self) -> float:
        return 1.6 * self.T + 1.0

    def start(self) -> None:
        raise NotImplementedError

    def hold(self) -> None:
        time.sleep(self.hold_s())

    def heal(self) -> None:
        raise NotImplementedError

    # helpers
    def isolate(self, node, zk: bool = True, nodes: bool = True, clients: bool = False) -> None:
        net, cl = self.cl.net, self.cl
        addrs = []
        if zk:
            addrs += cl.ensemble.ips
        if nodes:
            addrs += [o.ip for o in cl.others(node)]
            for o in cl.others(node):
                net.block(o.host, [node.ip])
        if clients:
            addrs.append(net.client_ip)
        net.block(node.host, addrs)

    def lift(self) -> None:
        self.cl.net.unblock_all()


class PartitionPrimary(Nemesis):
    name = "partition-primary"

    def start(self):
        self.p = self.cl.primary()
        self.notes["node"] = self.p.host
        self.isolate(self.p, zk=True, nodes=True, clients=True)
        self.cl.event(f"{self.p.host} (primary) cut off from everything")

    def heal(self):
        self.lift()
        self.cl.event("partition lifted")


class PartitionPrimaryReplicaZk(Nemesis):
    name = "partition-primary-replica-zk"

    def hold_s(self):
        return 1.8 * self.T + 1.0

    def start(self):
        p = self.cl.primary()
        r = self.rng.choice(self.cl.others(p))
        self.notes.update(primary=p.host, replica=r.host)
        net = self.cl.net
        net.block(p.host, self.cl.ensemble.ips)
        net.block(r.host, self.cl.ensemble.ips)
        self.cl.event(f"{p.host} (primary) and {r.host} (replica) cut off from ZooKeeper")

    def heal(self):
        self.lift()
        self.cl.event("ZooKeeper reachable again")


class ZkLoss(Nemesis):
    count = 1

    def hold_s(self):
        return 2.0 * self.T

    def start(self):
        ens = self.cl.ensemble
        leader = ens.leader()
        victims = [leader] if leader else []
        rest = [s for s in ens.servers if s not in victims]
        self.rng.shuffle(rest)
        victims += rest[: self.count - len(victims)]
        self.victims = victims
        for s in victims:
            s.kill()
        self.notes["killed"] = [s.host for s in victims]
        self.cl.event(f"ZooKeeper {[s.host for s in victims]} killed (-9)")

    def heal(self):
        for s in self.victims:
            s.start()
        self.cl.ensemble.wait_serving(self.cl.ensemble.servers, 120)
        self.cl.event(f"ZooKeeper {[s.host for s in self.victims]} back, ensemble serving")


class ZkMinority(ZkLoss):
    name = "zk-minority"
    count = 1


class ZkMajority(ZkLoss):
    name = "zk-majority"
    count = 2


class PausePrimary(Nemesis):
    name = "pause-primary"

    def start(self):
        self.p = self.cl.primary()
        self.notes["node"] = self.p.host
        self.p.stop()
        self.cl.event(f"{self.p.host} (primary) paused (SIGSTOP)")

    def heal(self):
        self.p.cont()
        self.cl.event(f"{self.p.host} resumed (SIGCONT)")


class PauseDuringFullCopy(Nemesis):
    name = "pause-during-full-copy"

    def start(self):
        cl = self.cl
        # A fresh filler, so that the copy takes filler * filler_bytes / copy_rate seconds
        # whatever earlier rounds lost.
        cl.write_filler(cl.round_name)
        old = cl.primary()
        self.old = old
        old.kill9()
        cl.event(f"{old.host} (primary) killed (-9)")

        def elected():
            ps = [n for n in cl.others(old) if (n.stats() or {}).get("role") == "primary"]
            return ps[0] if ps else None

        new = wait_for("a new primary", elected, 3 * self.T + 20)
        self.new = new
        cl.event(f"{new.host} elected")
        # The other survivor kept up, so it resumes from the new primary; a full copy is what a
        # member with nothing takes: its data folder is wiped (a replaced disk) and it starts
        # again, on slowed links.
        copier = next(n for n in cl.others(old) if n is not new)
        self.copier = copier
        copier.kill9()
        for entry in copier.data_dir.iterdir():
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        cl.proxies.set(None, rate_bps=cl.cfg.copy_rate_bps)
        cl.event(f"replication links slowed to {cl.cfg.copy_rate_bps} B/s")
        copier.start(wait_s=None)
        cl.event(f"{copier.host} wiped and restarted (it takes a full copy before it serves)")

        def copying():
            # The copier listens only once its copy is whole: until then the new primary
            # counts it as a connected replica, and it is not ready.
            s = new.stats() or {}
            return int(s.get("replicas", 0)) >= 1 and not copier.ready.is_set()

        wait_for("the full copy", copying, 20, every_s=0.02)
        # Paused for longer than its session: the half-copied member is then the only one
        # registered, and must not be elected (it never held every acknowledged write).
        new.stop()
        self.notes.update(killed=old.host, paused=new.host, copying=copier.host)
        cl.event(f"{new.host} (new primary) paused (SIGSTOP) during the full copy of {copier.host}")

    def heal(self):
        self.new.cont()
        self.cl.proxies.set(None)
        if not self.old.running:
            self.old.start(wait_s=None)
        self.cl.event(f"{self.new.host} resumed (SIGCONT); replication links at full speed")


class KillPrimary(Nemesis):
    name = "kill-primary"

    def hold_s(self):
        return 0.5

    def start(self):
        cl = self.cl
        self.p = cl.primary()
        self.notes["node"] = self.p.host
        self.p.kill9()
        cl.event(f"{self.p.host} (primary) killed (-9)")

        def elected():
            return [n for n in cl.others(self.p) if (n.stats() or {}).get("role") == "primary"]

        new = wait_for("a new primary", elected, 3 * self.T + 20)
        cl.event(f"{new[0].host} elected")

    def heal(self):
        self.p.start(wait_s=60)
        self.cl.event(f"{self.p.host} restarted, serving as {(self.p.stats() or {}).get('role')}")


class StaleClient(Nemesis):
    name = "stale-client"

    def start(self):
        self.p = self.cl.primary()
        self.notes["node"] = self.p.host
        self.isolate(self.p, zk=True, nodes=True, clients=False)
        self.pinned = self.cl.start_pinned_clients(self.p.addr_text, 2)
        self.cl.event(
            f"{self.p.host} (primary) cut off from ZooKeeper and the nodes; "
            f"{len(self.pinned)} clients pinned to it"
        )

    def heal(self):
        self.cl.stop_pinned_clients(self.pinned)
        self.lift()
        self.cl.event("partition lifted, pinned clients stopped")


class Flapping(Nemesis):
    name = "flapping"

    def start(self):
        self.p = self.cl.primary()
        self.notes["node"] = self.p.host
        self.flips = 0
        self.cl.event(f"{self.p.host} (primary): links to ZooKeeper and the nodes flapping")

    def hold(self):
        end = time.monotonic() + 2.5 * self.T
        down = False
        while time.monotonic() < end:
            if down:
                self.lift()
            else:
                self.isolate(self.p, zk=True, nodes=True, clients=False)
            down = not down
            self.flips += 1
            time.sleep(min(self.rng.uniform(0.2, self.T / 2), max(0.0, end - time.monotonic())))
        self.notes["flips"] = self.flips

    def heal(self):
        self.lift()
        self.cl.event(f"flapping over after {self.flips} flips, links up")


class SlowDisk(Nemesis):
    name = "slow-disk"
    needs_disks = True

    def hold_s(self):
        return 2.0 * self.T

    def start(self):
        self.p = self.cl.primary()
        self.notes["node"] = self.p.host
        self.cl.disks[self.p.host].throttle(4)
        self.cl.event(f"{self.p.host} (primary): data disk at 4 write IOPS")

    def heal(self):
        self.cl.disks[self.p.host].throttle(0)
        self.cl.event(f"{self.p.host}: disk at full speed")


class SlowReplication(Nemesis):
    name = "slow-replication"

    def hold_s(self):
        return 2.0 * self.T

    def start(self):
        self.cl.proxies.set(None, delay_s=0.15, rate_bps=128 * 1024, reset_per_s=0.2)
        self.cl.event("replication links: 150 ms delay, 128 KiB/s, a cut every ~5 s")

    def heal(self):
        self.cl.proxies.set(None)
        self.cl.event("replication links at full speed")


ALL = [
    PartitionPrimary,
    PartitionPrimaryReplicaZk,
    ZkMinority,
    ZkMajority,
    PausePrimary,
    PauseDuringFullCopy,
    KillPrimary,
    StaleClient,
    Flapping,
    SlowDisk,
    SlowReplication,
]
BY_NAME = {n.name: n for n in ALL}
