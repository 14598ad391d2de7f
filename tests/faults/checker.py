"""The checker: what the final state and the reads may be, given the history.

Every set writes a value no other op writes (`<client>.<seq>`), so a value names the op that
wrote it. Times are the client's: an op took effect, if at all, somewhere in [start, end] if
its outcome is known, and at any time after its start if it is `unknown` (a write the old
primary holds may reach the group later, so its end is taken as +infinity). A `fail` never
took effect. A key's initial state (absent, before the bench wrote it) is a delete that ended
at time -infinity.

For each key, with F its final state (the primary's, after healing and recovery):

1. F was written: F is the value of a set whose outcome is ok or unknown, or F is "absent"
   (the initial state or a delete that is ok or unknown). Else: **phantom** (a value no one
   wrote, or a write that certainly failed took effect).
2. No acknowledged write lost: among the ops that may have produced F (its set; or, for
   absent, every delete and the initial state), one must not have ended before an
   acknowledged write of the key started. If every such op c has `c.end < a.start` for some
   acknowledged write a, then a came after c in real time and F should have been a or
   something later: a is **lost**. Counted: every acknowledged write a with
   `a.start > max(c.end)`. This covers an acknowledged delete that was undone (F a value
   written before the delete started).
3. Reads return written values: a read's value is that of a set whose outcome is not fail
   and that started before the read ended; a read of "absent" is always allowed (reads may
   be served by a replica or an old primary and be stale; staleness is not checked).
4. Convergence: after recovery every node holds F for every key (`mg KEY v` on each node,
   once each replica's applied_revision equals the primary's revision).

This checks that the final state agrees with some real-time order of the acknowledged
writes; it is not a full linearizability check of the reads.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from .workload import Op

INF = math.inf


@dataclass
class KeyVerdict:
    key: str
    final: str | None
    phantom: bool = False
    lost: list[Op] = field(default_factory=list)
    reason: str = ""


@dataclass
class Verdict:
    keys_checked: int = 0
    phantom_keys: list[KeyVerdict] = field(default_factory=list)
    lost_keys: list[KeyVerdict] = field(default_factory=list)
    phantom_reads: list[Op] = field(default_factory=list)
    divergent: list[tuple[str, str, str | None, str | None]] = field(default_factory=list)

    @property
    def lost_writes(self) -> int:
        return sum(len(k.lost) for k in self.lost_keys)


def short(value: str | None, n: int = 40) -> str:
    if value is None:
        return "absent"
    return repr(value if len(value) <= n else value[:n] + "...")


def effective_end(op: Op) -> float:
    return INF if op.result == "unknown" else op.end


def check_key(key: str, writes: list[Op], final: str | None) -> KeyVerdict:
    """Rules 1 and 2 for one key: `writes` are its sets and deletes."""
    v = KeyVerdict(key, final)
    acked = [w for w in writes if w.result == "ok"]
    if final is None:
        sources = [w for w in writes if w.op == "delete" and w.result != "fail"]
        source_ends = [-INF] + [effective_end(w) for w in sources]
    else:
        sources = [w for w in writes if w.op == "set" and w.value == final]
        if not sources:
            v.phantom, v.reason = True, f"final value {short(final)} was never written"
            return v
        if all(w.result == "fail" for w in sources):
            v.phantom = True
            v.reason = f"final value {short(final)} comes from a write that failed: {sources[0].detail}"
            return v
        source_ends = [effective_end(w) for w in sources if w.result != "fail"]
    latest = max(source_ends)
    v.lost = [a for a in acked if a.start > latest]
    if v.lost:
        first = min(v.lost, key=lambda a: a.start)
        v.reason = (
            f"final {short(final)} (its write ended at {latest:.3f}) but {len(v.lost)} "
            f"acknowledged write(s) started later, the first {first.op} {short(first.value)} "
            f"by {first.process} at {first.start:.3f} on {first.node}"
        )
    return v


def check(ops: list[Op], finals: dict[str, str | None], reads_from: int = 0) -> Verdict:
    """Rules 1-3 over every key in `finals` (a key with no write in `ops` must be absent);
    rule 3 for the reads among ops[reads_from:]."""
    writes: dict[str, list[Op]] = defaultdict(list)
    reads: dict[str, list[Op]] = defaultdict(list)
    for i, op in enumerate(ops):
        if op.op != "get":
            writes[op.key].append(op)
        elif i >= reads_from:
            reads[op.key].append(op)
    verdict = Verdict()
    for key, final in finals.items():
        verdict.keys_checked += 1
        kv = check_key(key, writes.get(key, []), final)
        if kv.phantom:
            verdict.phantom_keys.append(kv)
        elif kv.lost:
            verdict.lost_keys.append(kv)
    for key, rs in reads.items():
        sets = {w.value: w for w in writes.get(key, []) if w.op == "set"}
        for r in rs:
            if r.result != "ok" or r.value is None:
                continue
            w = sets.get(r.value)
            if w is None or w.result == "fail" or w.start > r.end:
                verdict.phantom_reads.append(r)
    return verdict


def compare_nodes(
    finals: dict[str, str | None], others: dict[str, dict[str, str | None]]
) -> list[tuple[str, str, str | None, str | None]]:
    """Rule 4: (node, key, primary's, node's) for every key a node holds otherwise."""
    out = []
    for node, state in others.items():
        for key, want in finals.items():
            got = state.get(key, "<missing>")
            if got != want:
                out.append((node, key, want, got))
    return out
