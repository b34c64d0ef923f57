"""scripts/pytorch/timeline.py: where late requests waited, from a hand-made timeline."""
import importlib.util
import os
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def load():
    spec = importlib.util.spec_from_file_location("timeline", os.path.join(ROOT, "scripts", "pytorch", "timeline.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class TimelineTest(unittest.TestCase):
    def setUp(self):
        self.tl = load()

    def test_wait_divided_between_batches_training_and_neither(self):
        # One late request sent at 1.0 s, answered 500 ms later (budget 300 ms).
        d = {"mode": "managed", "device": "cpu", "seed": 1, "budget_ms": 300,
             "requests": [[0.5, 20.0, 200], [1.0, 500.0, 200]],
             "batches": [[1.25, 4, 100.0]],
             "train": [[1.0, 200.0], [1.2, 100.0]]}
        out = self.tl.summarise(d)
        self.assertIn("1 late (> 300 ms, 50.0%)", out)
        # batch 1.25–1.35 (100 ms); training 1.0–1.3 (300 ms), 50 ms of it under the batch
        # (counted as the batch's); neither 1.35–1.5 (150 ms): 20 %, 50 %, 30 %.
        self.assertIn("20% inside server batches, 50% inside training with no batch, 30% inside neither", out)
        self.assertIn("1 episode(s)", out)

    def test_no_late_request_prints_no_division(self):
        d = {"mode": "unmanaged", "budget_ms": 300, "requests": [[0.1, 10.0, 200]], "batches": [[0.1, 1, 5.0]],
             "train": []}
        out = self.tl.summarise(d)
        self.assertIn("0 late", out)
        self.assertNotIn("waiting", out)

    def test_unanswered_request_is_late(self):
        d = {"mode": "managed", "budget_ms": 300, "requests": [[0.1, 30000.0, 0], [0.2, 10.0, 200]],
             "batches": [], "train": []}
        self.assertIn("1 late", self.tl.summarise(d))

    def test_covered_and_intersect(self):
        self.assertAlmostEqual(self.tl.covered([(0, 1), (2, 3)], 0.5, 2.5), 1.0)
        self.assertEqual(self.tl.intersect([(0, 2), (3, 5)], [(1, 4)]), [(1, 2), (3, 4)])


if __name__ == "__main__":
    unittest.main()
