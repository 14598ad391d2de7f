"""The checker's rules on small hand-made histories (`python3 -m unittest tests.faults.test_checker`;
no root, no kazoo needed)."""

import unittest

from .checker import check, compare_nodes
from .workload import Op


def w(op, key, value, start, end, result="ok", process="c0"):
    return Op(process, op, key, value, start, end, result, "n1:11211")


class CheckerTest(unittest.TestCase):
    def test_the_last_acknowledged_write_is_a_valid_final_state(self):
        ops = [w("set", "k", "a", 0, 1), w("set", "k", "b", 2, 3)]
        v = check(ops, {"k": "b"})
        self.assertEqual((v.lost_writes, len(v.phantom_keys)), (0, 0))

    def test_an_older_value_after_a_later_acknowledged_write_is_a_loss(self):
        ops = [w("set", "k", "a", 0, 1), w("set", "k", "b", 2, 3)]
        v = check(ops, {"k": "a"})
        self.assertEqual(v.lost_writes, 1)
        self.assertEqual(v.lost_keys[0].lost[0].value, "b")

    def test_concurrent_acknowledged_writes_may_end_in_either_order(self):
        ops = [w("set", "k", "a", 0, 3), w("set", "k", "b", 1, 2)]
        self.assertEqual(check(ops, {"k": "a"}).lost_writes, 0)
        self.assertEqual(check(ops, {"k": "b"}).lost_writes, 0)

    def test_a_write_of_unknown_outcome_may_land_at_any_time_after_its_start(self):
        ops = [w("set", "k", "u", 0, 1, "unknown"), w("set", "k", "b", 2, 3)]
        self.assertEqual(check(ops, {"k": "u"}).lost_writes, 0)
        # ... but it excuses nothing when it is not the final value.
        self.assertEqual(check(ops, {"k": None}).lost_writes, 1)

    def test_a_value_no_one_wrote_or_a_failed_write_is_a_phantom(self):
        ops = [w("set", "k", "a", 0, 1), w("set", "k", "f", 2, 3, "fail")]
        self.assertEqual(len(check(ops, {"k": "zzz"}).phantom_keys), 1)
        self.assertEqual(len(check(ops, {"k": "f"}).phantom_keys), 1)

    def test_an_acknowledged_delete_undone_is_a_loss(self):
        ops = [w("set", "k", "a", 0, 1), w("delete", "k", None, 2, 3)]
        self.assertEqual(check(ops, {"k": "a"}).lost_writes, 1)
        self.assertEqual(check(ops, {"k": None}).lost_writes, 0)

    def test_an_acknowledged_write_of_a_key_that_is_absent_at_the_end_is_lost(self):
        ops = [w("set", "u1", "x", 0, 1)]
        self.assertEqual(check(ops, {"u1": None}).lost_writes, 1)
        ops = [w("set", "u1", "x", 0, 1, "unknown")]
        self.assertEqual(check(ops, {"u1": None}).lost_writes, 0)

    def test_reads_return_written_values_only(self):
        ops = [
            w("set", "k", "a", 0, 1),
            w("get", "k", "a", 0.5, 0.6),  # concurrent with the write: fine
            w("get", "k", "zzz", 2, 3),  # never written
            w("set", "k", "f", 4, 5, "fail"),
            w("get", "k", "f", 6, 7),  # a failed write's value
            w("get", "k", "b", 8, 9),  # written only after the read ended
            w("set", "k", "b", 10, 11),
            w("get", "k", None, 12, 13),  # absent: allowed (stale reads are not checked)
        ]
        v = check(ops, {"k": "b"})
        self.assertEqual([r.value for r in v.phantom_reads], ["zzz", "f", "b"])

    def test_nodes_that_hold_another_value_are_reported(self):
        d = compare_nodes({"k": "a", "j": None}, {"n2": {"k": "a", "j": None}, "n3": {"k": None, "j": None}})
        self.assertEqual(d, [("n3", "k", "a", None)])


if __name__ == "__main__":
    unittest.main()
