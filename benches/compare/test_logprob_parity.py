"""Unit tests of logprob_parity.py (standard library only):
`python3 -m unittest discover -s benches/compare -p 'test_*.py'`."""
import unittest

import logprob_parity as lp


def scored(tokens, tops):
    return {"tokens": [t.encode().hex() for t in tokens],
            "top5": [[[t.encode().hex(), v] for t, v in row] for row in tops]}


class CompareScored(unittest.TestCase):
    def test_identical_runs_compare_every_position(self):
        a = scored(["a", "b"], [[("a", -0.1), ("x", -2.0)], [("b", -0.2), ("y", -3.0)]])
        b = scored(["a", "b"], [[("a", -0.15), ("x", -2.0)], [("y", -2.5), ("b", -0.2)]])
        r = lp.compare_scored(a, b)
        self.assertTrue(r["tokens_identical"])
        self.assertIsNone(r["first_difference"])
        self.assertEqual(r["positions_compared"], 2)
        # Matched by token, not by rank: |-3.0 - -2.5| at the second position.
        self.assertAlmostEqual(r["max_abs_top5_logprob_delta"], 0.5)

    def test_positions_after_the_first_difference_are_not_compared(self):
        a = scored(["a", "b", "c"], [[("a", -0.1)], [("b", -0.6), ("q", -0.7)], [("c", -0.1)]])
        b = scored(["a", "q", "z"], [[("a", -0.1)], [("q", -0.6), ("b", -0.7)], [("c", -9.0)]])
        r = lp.compare_scored(a, b)
        self.assertFalse(r["tokens_identical"])
        self.assertEqual(r["first_difference"], 1)
        self.assertEqual(r["positions_compared"], 2)
        self.assertAlmostEqual(r["max_abs_top5_logprob_delta"], 0.1)

    def test_a_shorter_answer_differs_where_it_stops(self):
        a = scored(["a", "b"], [[("a", -0.1)], [("b", -0.1)]])
        b = scored(["a"], [[("a", -0.1)]])
        r = lp.compare_scored(a, b)
        self.assertFalse(r["tokens_identical"])
        self.assertEqual(r["first_difference"], 1)


class ServerAnswer(unittest.TestCase):
    def test_bytes_are_used_and_a_stop_token_ends_the_answer(self):
        choice = {"logprobs": {"content": [
            {"token": "\ufffd", "bytes": [0xe4, 0xbd], "logprob": -0.1,
             "top_logprobs": [{"token": "\ufffd", "bytes": [0xe4, 0xbd], "logprob": -0.1},
                              {"token": "a", "bytes": None, "logprob": -3.0}]},
            {"token": "<|im_end|>", "bytes": list(b"<|im_end|>"), "logprob": -0.01, "top_logprobs": []}]}}
        s = lp.ours_scored(choice)
        self.assertEqual(s["tokens"], ["e4bd"])
        self.assertEqual(s["top5"], [[["e4bd", -0.1], ["61", -3.0]]])

    def test_totals_and_the_other_dtype_condition(self):
        same = scored(["a"], [[("a", -0.1)]])
        diff = scored(["b"], [[("b", -0.1), ("a", -0.3)]])
        hf = {("0", 0): same, ("0", 1): same}
        ours = {("0", 0): same, ("0", 1): diff}
        other = {("0", 0): same, ("0", 1): diff}
        texts = ({("0", 0): "x", ("0", 1): "y"}, {("0", 0): "x", ("0", 1): "z"})
        lengths = ({("0", 0): 5, ("0", 1): 5}, {("0", 0): 5, ("0", 1): 5})
        out = lp.parity([("0", 0), ("0", 1)], hf, ours, texts, lengths, other)
        self.assertEqual(out["ours_serve_text_equals_eval_steps"], "1/2")
        self.assertEqual(out["tokens_identical_steps"], "1/2")
        self.assertAlmostEqual(out["max_abs_top5_logprob_delta"], 0.2)
        self.assertEqual(out["transformers_other_dtype"]["tokens_identical_steps"], "1/2")
        self.assertEqual(out["ours_identical_where_transformers_dtypes_agree"], "1/1")
        self.assertTrue(all(r["prompt_tokens_equal"] for r in out["per_step"]))


if __name__ == "__main__":
    unittest.main()
