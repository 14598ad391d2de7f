"""The runner: rounds of workload + one fault + heal + recovery + check, and the figures.

```text
  setup (cluster.py) ─> filler loaded (acknowledged writes too) ─> round 0 .. N-1:
    healthy? ─> clients on this round's keys ─> warm-up ─> nemesis.start ─> hold ─> heal
    ─> until a write succeeds again ─> tail ─> clients stop ─> healthy (recovered)
    ─> final reads of every key ever written, on every node ─> checker ─> figures
  ─> teardown ─> summary table, <out>/run.json
```

Exit code: 0 all good; 1 a check failed (an acknowledged write lost with --replication sync,
or in any mode a phantom value, a phantom read, nodes that did not converge, or a group that
did not recover from a fault by itself within the deadline); 2 bad usage;
3 the group did not recover from a fault even after every fault was undone, or the bench
itself could not run.
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import json
import logging
import os
import random
import re
import secrets
import signal
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import disk as diskmod
from .checker import check, compare_nodes
from .cluster import Cluster, NotHealthy
from .nemesis import ALL, BY_NAME, wait_for
from .net import leftovers, pick_subnet, run
from .workload import stop_clients

log = logging.getLogger("faults")

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Config:
    rounds: int
    replication: str
    seed: int
    faults: list[str]
    order: str
    session_timeout_ms: int
    replication_timeout_ms: int
    cairn: str
    out: Path
    clients: int
    keys: int
    filler: int
    filler_bytes: int
    copy_rate_bps: int
    warmup_s: float
    tail_s: float
    op_timeout_s: float
    connect_timeout_s: float


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python3 -m tests.faults",
        description="Jepsen-style fault bench for cairn replication groups (run as root).",
    )
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--replication", choices=["sync", "async"], default="sync")
    p.add_argument("--seed", type=int, default=None, help="default: a random one (printed)")
    p.add_argument(
        "--faults",
        default="all",
        help="comma-separated names, or 'all': " + ", ".join(n.name for n in ALL),
    )
    p.add_argument("--order", choices=["cycle", "random"], default="cycle",
                   help="cycle: the faults in a seeded shuffled order, again and again; "
                        "random: a seeded random pick each round")
    p.add_argument("--session-timeout-ms", type=int, default=4000)
    p.add_argument("--replication-timeout-ms", type=int, default=1000)
    p.add_argument("--cairn", default=str(REPO / "target" / "release" / "cairn"))
    p.add_argument("--out", required=False, default=None)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--keys", type=int, default=10, help="keys per round")
    p.add_argument("--filler", type=int, default=2000,
                   help="keys written before the first round (what a full copy moves)")
    p.add_argument("--filler-bytes", type=int, default=1000)
    p.add_argument("--copy-rate-kib", type=int, default=256,
                   help="replication link speed during pause-during-full-copy (KiB/s)")
    p.add_argument("--warmup-s", type=float, default=1.5)
    p.add_argument("--tail-s", type=float, default=1.0)
    p.add_argument("--op-timeout-s", type=float, default=1.5)
    p.add_argument("--connect-timeout-s", type=float, default=0.5)
    p.add_argument("--cleanup", action="store_true",
                   help="remove namespaces and bridges that killed runs left behind, then exit")
    return p.parse_args(argv)


def setup_logging(out: Path) -> None:
    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    fh = logging.FileHandler(out / "bench.log")
    fh.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    fh.setLevel(logging.DEBUG)
    root.addHandler(fh)
    sh = logging.StreamHandler(sys.stderr)
    sh.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    sh.setLevel(logging.INFO)
    sh.addFilter(lambda r: r.name.startswith("faults") and not r.name.startswith("faults.kazoo"))
    root.addHandler(sh)
    logging.getLogger("faults.kazoo").setLevel(logging.WARNING)
    logging.getLogger("faults.net").setLevel(logging.INFO)


# A running bench writes its PID here under its prefix, so that --cleanup leaves it alone.
RUNS = Path("/run/cairn-faults") if Path("/run").is_dir() else Path("/tmp/cairn-faults")


def alive(prefix: str) -> bool:
    try:
        pid = int((RUNS / prefix).read_text())
        os.kill(pid, 0)
        return True
    except (OSError, ValueError):
        return False


def cleanup_leftovers() -> int:
    found = leftovers()
    if not found:
        print("no namespace or bridge left behind")
    live = set()
    for prefix, items in found.items():
        if alive(prefix):
            print(f"{prefix}: its bench still runs; left alone")
            live.add(prefix)
            continue
        print(f"{prefix}: removing {', '.join(items)}")
        for item in items:
            kind, name = item.split(" ", 1)
            if kind == "netns":
                for pid in run(["ip", "netns", "pids", name], check=False).stdout.split():
                    run(["kill", "-9", pid], check=False)
                run(["ip", "netns", "del", name], check=False)
            else:
                run(["ip", "link", "del", name], check=False)
    for dev, image, mounts in diskmod.leftovers(r"^fb[0-9a-f]{6}-n\d+\.img$"):
        if Path(image).name[:8] in live or alive(Path(image).name[:8]):
            continue
        print(f"removing disk {dev} ({image}) mounted on {mounts}")
        for m in mounts:
            if run(["umount", m], check=False).returncode != 0:
                run(["umount", "-l", m], check=False)
        run(["losetup", "-d", dev], check=False)
        Path(image).unlink(missing_ok=True)
    cg = diskmod.BLKIO
    for d in cg.glob("fb*-n*") if cg.exists() else []:
        if re.match(r"^fb[0-9a-f]{6}-n\d+$", d.name) and not alive(d.name[:8]):
            print(f"removing cgroup {d}")
            try:
                d.rmdir()
            except OSError as e:
                print(f"  {d}: {e}")
    return 0


def writes_of(ops):
    return [o for o in ops if o.op in ("set", "delete")]


# Slack on the async bound: the primary's polls (50 ms), a ZooKeeper write to change the
# in-sync set, and the clients' own clocks around a reply.
BOUND_SLACK_S = 0.5


def bound_of(cfg) -> tuple[float, float]:
    """What --replication async may lose, as seconds before and after a fault's start: the
    writes a replica may lag behind before it leaves the in-sync set (half the replication
    timeout), and what a cut-off primary acknowledges until its lease ends (2/3 of the
    session timeout), each with BOUND_SLACK_S."""
    return (cfg.replication_timeout_ms / 2000 + BOUND_SLACK_S,
            cfg.session_timeout_ms * 2 / 3000 + BOUND_SLACK_S)


def bound_violation(rec: dict, cfg) -> bool:
    """Whether a round lost an async write acknowledged outside bound_of."""
    if "lost_acked_before_fault_s" not in rec:
        return False
    before, after = bound_of(cfg)
    return rec["lost_acked_before_fault_s"] > before or rec["lost_acked_after_fault_s"] > after


def outage(ops, t_fault: float, t_stop: float) -> float:
    """The longest time after the fault without an acknowledged write: the largest gap in
    [t_fault, t_stop] between acknowledged writes' completions."""
    ends = sorted(o.end for o in writes_of(ops) if o.result == "ok" and o.end >= t_fault)
    marks = [t_fault] + ends + [t_stop]
    return max(b - a for a, b in zip(marks, marks[1:]))


def summarize_key(kv) -> dict:
    final = kv.final if kv.final is None or len(kv.final) <= 40 else kv.final[:40] + "..."
    return {"key": kv.key, "final": final, "why": kv.reason, "lost": len(kv.lost)}


def round_failed(rec: dict, replication: str) -> bool:
    return (
        not rec.get("recovered", False)
        or not rec.get("checked", False)
        or (replication == "sync" and rec.get("lost_acked_writes", 0) > 0)
        or any(rec.get(k, 0) for k in ("phantom_values", "phantom_reads", "divergent_keys"))
    )


class Bench:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.prefix = "fb" + secrets.token_hex(3)
        self.cl = Cluster(cfg, self.prefix, cfg.out, self.rng)
        self.rounds: list[dict] = []
        self.known_bad: set[str] = set()
        self.known_divergent: set[tuple[str, str]] = set()
        self.aborted: str | None = None
        self.setup_s = 0.0
        self.load: dict = {}

    def schedule(self) -> list[str]:
        names = list(self.cfg.faults)
        if self.cfg.order == "random":
            return [self.rng.choice(names) for _ in range(self.cfg.rounds)]
        order = names[:]
        self.rng.shuffle(order)
        return [order[i % len(order)] for i in range(self.cfg.rounds)]

    def run(self) -> None:
        cfg, cl = self.cfg, self.cl
        t0 = time.monotonic()
        base = pick_subnet(random.Random())
        log.info("run %s: bridge %s-br on %s.0/24, out %s", self.prefix, self.prefix, base, cfg.out)
        cl.setup(base, slow_disk="slow-disk" in cfg.faults)
        self.write_filler()
        self.setup_s = time.monotonic() - t0
        cl.event(f"setup done in {self.setup_s:.1f}s")
        for r, name in enumerate(self.schedule()):
            rec = self.round(r, name)
            self.rounds.append(rec)
            if rec.get("abort"):
                self.aborted = rec["error"]
                break

    def write_filler(self) -> None:
        if self.cfg.filler > 0:
            self.load = self.cl.write_filler("0")
            self.cl.wait_healthy(60)

    def round(self, r: int, name: str) -> dict:
        cfg, cl = self.cfg, self.cl
        rec: dict = {"round": r, "fault": name}
        cl.round_name = f"r{r:03d}"
        cl.round_keys = [f"{cl.round_name}k{i}" for i in range(cfg.keys)]
        h0 = len(cl.history)
        t_round = time.monotonic()
        cl.event(f"=== round {r}: {name}")
        nem = BY_NAME[name](cl, random.Random(self.rng.random()))
        clients = []
        t_fault = t_heal_start = None
        try:
            cl.wait_healthy(60)
            clients = cl.start_clients(f"{cl.round_name}c", cfg.clients)
            time.sleep(cfg.warmup_s)
            t_fault = cl.clock.now()
            try:
                nem.start()
                nem.hold()
            finally:
                t_heal_start = cl.clock.now()
                nem.heal()
            t_heal = cl.clock.now()

            def wrote_again():
                return any(
                    o.result == "ok" and o.end > t_heal and o.process.startswith(f"{cl.round_name}c")
                    for o in writes_of(cl.history.since(h0))
                )

            wait_for("a write to succeed after the heal", wrote_again, 60, every_s=0.05)
            time.sleep(cfg.tail_s)
            stop_clients(clients)
            t_stop = cl.clock.now()
            rec["recovery_s"] = round(cl.wait_healthy(60 + self.copy_seconds()), 2)
            rec["recovered"] = True
        except (NotHealthy, RuntimeError, OSError) as e:
            # The fault (or its heal) left the group broken: undo everything and look again.
            rec["recovered"] = False
            rec["error"] = str(e)
            log.error("round %d (%s): %s", r, name, e)
            stop_clients(clients)
            t_stop = cl.clock.now()
            t_fault = t_stop if t_fault is None else t_fault
            t_heal_start = t_stop if t_heal_start is None else t_heal_start
            try:
                cl.repair()
                cl.wait_healthy(120 + self.copy_seconds())
            except (NotHealthy, RuntimeError, OSError) as e2:
                rec["abort"] = True
                rec["error"] += f"; after repair: {e2}"
                log.error("round %d: still broken after repair, stopping the run: %s", r, e2)
        for c in [c for c in cl.clients if c not in clients]:
            c.stop()  # pinned clients a failed heal left running
        cl.clients = []
        every = cl.history.since(h0)
        # The figures count the clients' ops; a filler written in the round is counted apart.
        ops = [o for o in every if o.process != "loader"]
        rec["filler_writes"] = len(every) - len(ops)
        mine = [o for o in ops if o.process.startswith(f"{cl.round_name}c")]
        rec["notes"] = nem.notes
        rec["t_fault"] = round(t_fault, 3)
        rec["fault_s"] = round(t_heal_start - t_fault, 2)
        rec["ops"] = len(ops)
        ws = writes_of(ops)
        rec["writes"] = len(ws)
        rec["acked_writes"] = sum(o.result == "ok" for o in ws)
        rec["unknown_writes"] = sum(o.result == "unknown" for o in ws)
        rec["failed_writes"] = sum(o.result == "fail" for o in ws)
        rec["reads"] = len(ops) - len(ws)
        rec["write_outage_s"] = round(outage(mine, t_fault, t_stop), 3)
        if not rec.get("abort"):
            self.check_round(rec, h0)
        rec["seconds"] = round(time.monotonic() - t_round, 1)
        hist = cfg.out / "history"
        hist.mkdir(exist_ok=True)
        with open(hist / f"round-{r:03d}.jsonl", "w") as f:
            for o in every:
                f.write(o.to_json() + "\n")
        cl.event(
            f"round {r} {name}: ops {rec['ops']} acked {rec['acked_writes']} unknown "
            f"{rec['unknown_writes']} lost {rec.get('lost_acked_writes', '?')} outage "
            f"{rec['write_outage_s']}s ({rec['seconds']}s)"
        )
        return rec

    def copy_seconds(self) -> float:
        return self.cfg.filler * self.cfg.filler_bytes / self.cfg.copy_rate_bps

    def check_round(self, rec: dict, h0: int) -> None:
        cl = self.cl
        all_ops = list(cl.history.ops)
        keys = sorted({o.key for o in all_ops})
        try:
            p = cl.primary()
            finals = cl.read_all(p, keys)
            others = {n.host: cl.read_all(n, keys) for n in cl.others(p)}
        except (OSError, NotHealthy) as e:
            rec["error"] = (rec.get("error", "") + f"; final reads: {e}").lstrip("; ")
            rec["checked"] = False
            return
        rec["checked"] = True
        rec["primary_after"] = p.host
        v = check(all_ops, finals, reads_from=h0)
        new_lost = [k for k in v.lost_keys if k.key not in self.known_bad]
        new_phantom = [k for k in v.phantom_keys if k.key not in self.known_bad]
        self.known_bad |= {k.key for k in new_lost + new_phantom}
        div = [d for d in compare_nodes(finals, others) if (d[0], d[1]) not in self.known_divergent]
        self.known_divergent |= {(d[0], d[1]) for d in div}
        rec["keys_checked"] = v.keys_checked
        rec["lost_acked_writes"] = sum(len(k.lost) for k in new_lost)
        rec["lost_filler_writes"] = sum(
            sum(o.process == "loader" for o in k.lost) for k in new_lost
        )
        rec["lost_keys"] = len(new_lost)
        rec["lost_examples"] = [summarize_key(k) for k in new_lost[:5]]
        lost_ops = sorted((o for k in new_lost for o in k.lost), key=lambda o: o.start)
        # Where and when the lost writes were acknowledged: (node, process kind) -> count,
        # and the first and last start times.
        by = {}
        for o in lost_ops:
            kind = "loader" if o.process == "loader" else "client"
            e = by.setdefault(f"{o.node} {kind}", {"count": 0, "first_start": o.start})
            e["count"] += 1
            e["last_start"] = o.start
        rec["lost_by_node"] = by
        if lost_ops:
            # When the lost writes were acknowledged, against the fault's start (async mode
            # states a bound on both sides: see bound_violation).
            t_fault = rec["t_fault"]
            rec["lost_acked_before_fault_s"] = round(max(t_fault - o.end for o in lost_ops), 3)
            rec["lost_acked_after_fault_s"] = round(max(o.end - t_fault for o in lost_ops), 3)
        rec["phantom_values"] = len(new_phantom)
        rec["phantom_examples"] = [summarize_key(k) for k in new_phantom[:5]]
        rec["phantom_reads"] = len(v.phantom_reads)
        rec["phantom_read_examples"] = [vars(o) for o in v.phantom_reads[:3]]
        rec["divergent_keys"] = len(div)
        rec["divergent_examples"] = [
            {"node": n, "key": k, "primary": a, "node_has": b} for n, k, a, b in div[:5]
        ]

    # ---- figures ----------------------------------------------------------------------

    def totals(self) -> dict:
        def agg(recs):
            outs = [r["write_outage_s"] for r in recs]
            return {
                "rounds": len(recs),
                "ops": sum(r["ops"] for r in recs),
                "acked_writes": sum(r["acked_writes"] for r in recs),
                "unknown_writes": sum(r["unknown_writes"] for r in recs),
                "lost_acked_writes": sum(r.get("lost_acked_writes", 0) for r in recs),
                "lost_filler_writes": sum(r.get("lost_filler_writes", 0) for r in recs),
                "lost_keys": sum(r.get("lost_keys", 0) for r in recs),
                "phantom_values": sum(r.get("phantom_values", 0) for r in recs),
                "phantom_reads": sum(r.get("phantom_reads", 0) for r in recs),
                "divergent_keys": sum(r.get("divergent_keys", 0) for r in recs),
                "not_recovered": sum(not r.get("recovered", False) for r in recs),
                "outage_median_s": round(statistics.median(outs), 2) if outs else None,
                "outage_max_s": round(max(outs), 2) if outs else None,
                "outage_max_over_session_timeout": (
                    round(max(outs) / (self.cfg.session_timeout_ms / 1000), 2) if outs else None
                ),
            }

        per_fault = {}
        for name in dict.fromkeys(r["fault"] for r in self.rounds):
            per_fault[name] = agg([r for r in self.rounds if r["fault"] == name])
        return {"all": agg(self.rounds), "per_fault": per_fault}

    def table(self, totals: dict) -> str:
        cols = ["rounds", "ops", "acked_writes", "unknown_writes", "lost_acked_writes",
                "phantom_values", "divergent_keys", "not_recovered", "outage_median_s",
                "outage_max_s", "outage_max_over_session_timeout"]
        heads = ["rounds", "ops", "acked", "unknown", "LOST", "phantom", "diverged",
                 "unrecov", "outage med", "outage max", "max/T"]
        rows = [(name, t) for name, t in totals["per_fault"].items()] + [("TOTAL", totals["all"])]
        w0 = max(len(n) for n, _ in rows)
        ws = [max(len(h), 6) for h in heads]
        lines = [f"{'fault':<{w0}}  " + " ".join(f"{h:>{w}}" for h, w in zip(heads, ws))]
        for name, t in rows:
            lines.append(
                f"{name:<{w0}}  " + " ".join(f"{str(t[c]):>{w}}" for c, w in zip(cols, ws))
            )
        lines.append(
            "outage: the longest time after the fault with no acknowledged write (s); "
            f"T = session timeout = {self.cfg.session_timeout_ms / 1000:g} s"
        )
        return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    if os.geteuid() != 0:
        print("the fault bench needs root (network namespaces, nftables)", file=sys.stderr)
        return 2
    if a.cleanup:
        return cleanup_leftovers()
    if not a.out:
        print("--out DIR is required", file=sys.stderr)
        return 2
    seed = a.seed if a.seed is not None else random.randrange(1 << 32)
    names = [n.name for n in ALL] if a.faults == "all" else [f.strip() for f in a.faults.split(",") if f.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        print(f"unknown faults: {unknown}; known: {[n.name for n in ALL]}", file=sys.stderr)
        return 2
    if importlib.util.find_spec("kazoo") is None:
        print("kazoo missing: pip install -r tests/faults/requirements.txt, or run "
              "tests/faults/run.sh (a venv in target/faults-venv)", file=sys.stderr)
        return 2
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    setup_logging(out)
    skipped = {}
    if "slow-disk" in names:
        why = diskmod.available()
        if why:
            skipped["slow-disk"] = why
            names.remove("slow-disk")
            log.warning("slow-disk skipped: %s", why)
    if not names:
        print("no fault left to run", file=sys.stderr)
        return 2
    if not os.access(a.cairn, os.X_OK):
        print(f"no cairn binary at {a.cairn} (cargo build --release -p cairn-server --bin cairn)",
              file=sys.stderr)
        return 2
    cfg = Config(
        rounds=a.rounds, replication=a.replication, seed=seed, faults=names, order=a.order,
        session_timeout_ms=a.session_timeout_ms, replication_timeout_ms=a.replication_timeout_ms,
        cairn=a.cairn, out=out, clients=a.clients, keys=a.keys, filler=a.filler,
        filler_bytes=a.filler_bytes, copy_rate_bps=a.copy_rate_kib * 1024,
        warmup_s=a.warmup_s, tail_s=a.tail_s, op_timeout_s=a.op_timeout_s,
        connect_timeout_s=a.connect_timeout_s,
    )
    print(f"seed {seed}", flush=True)
    bench = Bench(cfg)
    RUNS.mkdir(exist_ok=True)
    pidfile = RUNS / bench.prefix
    pidfile.write_text(str(os.getpid()))
    atexit.register(pidfile.unlink, missing_ok=True)
    atexit.register(bench.cl.teardown)

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_signal)
    t0 = time.monotonic()
    error = None
    try:
        bench.run()
    except (NotHealthy, RuntimeError, OSError) as e:
        error = f"{type(e).__name__}: {e}"
        log.exception("the run stopped")
    except (SystemExit, KeyboardInterrupt) as e:
        error = f"interrupted ({type(e).__name__} {getattr(e, 'code', '')})"
        log.error("the run was interrupted")
    finally:
        bench.cl.teardown()
    elapsed = time.monotonic() - t0
    totals = bench.totals() if bench.rounds else {"all": {}, "per_fault": {}}
    report = {
        "seed": seed,
        "prefix": bench.prefix,
        "command": " ".join(["python3", "-m", "tests.faults"] + (argv if argv is not None else sys.argv[1:])),
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(cfg).items()},
        "skipped_faults": skipped,
        "seconds": round(elapsed, 1),
        "setup_seconds": round(bench.setup_s, 1),
        "filler": bench.load,
        "error": error or bench.aborted,
        "totals": totals,
        "rounds": bench.rounds,
        "events": [(round(t, 3), e) for t, e in bench.cl.events],
        "zookeeper_primaries_seen": [(round(t, 3), p) for t, p in
                                     (bench.cl.discovery.changes if bench.cl.discovery else [])],
    }
    (out / "run.json").write_text(json.dumps(report, indent=1))
    print()
    print(f"cairn fault bench: {len(bench.rounds)} rounds, --replication {cfg.replication}, "
          f"session timeout {cfg.session_timeout_ms} ms, seed {seed}, {elapsed:.0f} s")
    if bench.rounds:
        print(bench.table(totals))
    for name, why in skipped.items():
        print(f"skipped {name}: {why}")
    if error or bench.aborted:
        print(f"STOPPED: {error or bench.aborted}")
        return 3
    t = totals["all"]
    bad = []
    if cfg.replication == "sync" and t["lost_acked_writes"]:
        bad.append(f"{t['lost_acked_writes']} acknowledged writes lost")
    elif t["lost_acked_writes"]:
        before, after = bound_of(cfg)
        worst_before = max((r.get("lost_acked_before_fault_s", -1e9) for r in bench.rounds))
        worst_after = max((r.get("lost_acked_after_fault_s", -1e9) for r in bench.rounds))
        print(f"async: {t['lost_acked_writes']} acknowledged writes lost, acknowledged from "
              f"{worst_before:.3f} s before a fault's start to {worst_after:.3f} s after it; "
              f"the stated bound: {before:.3f} s before, {after:.3f} s after")
        late = [r["round"] for r in bench.rounds if bound_violation(r, cfg)]
        if late:
            bad.append(f"async writes lost outside the stated bound in rounds {late}")
    for k, what in (("phantom_values", "phantom values"), ("phantom_reads", "phantom reads"),
                    ("divergent_keys", "keys diverged between nodes"),
                    ("not_recovered", "rounds in which the group did not recover by itself")):
        if t[k]:
            bad.append(f"{t[k]} {what}")
    print(f"report: {out / 'run.json'}; seed {seed}")
    # A round passes when the group recovered and the checks found nothing that fails the
    # run (the line's form is one CI's log reader counts).
    failed = sum(round_failed(r, cfg.replication) for r in bench.rounds)
    print(f"rounds: {len(bench.rounds) - failed} passed, {failed} failed")
    if bad:
        print("FAILED: " + "; ".join(bad))
        return 1
    print("passed")
    return 0
