#!/usr/bin/env python3
"""Unit tests of the nemesis checker's liveness properties
(checker_live.py) on hand-made histories: a violation of each, the same
history kept, and the same history not judged because a fault was near."""
import os
import sys
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_checker import H, ev  # noqa: E402


def l1_history(probe_status=409, held=True, fence=7, probe_at=2.5, rel="release"):
    """A grant (fence 7) released at 1.0, probed at probe_at, inspected."""
    h = H()
    g = h.acquire("p", 0.0, 0.01, "t1", 7, 3000, inst=0)
    if rel == "release":
        r = h.release("p", 1.0, 1.01, "t1", inst=1)
    else:
        r = h.force("p", 1.0, 1.01, inst=1)
    p = h.op("acquire", probe_at, probe_at + 0.01, probe_status,
             dict(error="locked") if probe_status == 409 else dict(token="t2", fence=9, validity_ms=900),
             kind="lock", name="p", ttl_ms=1000, inst=2, probe="L1", ref=r, grant=g)
    if probe_status == 409:
        h.op("inspect", probe_at + 0.02, probe_at + 0.03, 200, dict(held=held, fence=fence, validity_ms=500),
             kind="lock", name="p", inst=2, probe="L1i", ref=p)
    return h


class L1(unittest.TestCase):
    def test_the_released_grant_still_holds(self):
        for rel in ("release", "force"):
            h = l1_history(rel=rel)
            self.assertEqual(h.props(live=True), ["L1"], rel)
            self.assertEqual(h.check(True)["stats"]["L1_judged"], 1)

    def test_another_holder_or_a_grant_is_fine(self):
        self.assertEqual(l1_history(fence=8).props(live=True), [])
        self.assertEqual(l1_history(held=False).props(live=True), [])
        self.assertEqual(l1_history(probe_status=201).props(live=True), [])

    def test_a_probe_before_the_bound_is_not_judged(self):
        h = l1_history(probe_at=1.1)
        self.assertEqual(h.props(live=True), [])
        self.assertEqual(h.check(True)["stats"]["L1_judged"], 0)

    def test_a_fault_near_means_not_judged(self):
        h = l1_history()
        h.fault("pause_masters", 0.5, 0.8, settle_ms=100, masters=[1])
        self.assertEqual(h.props(live=True), [])
        h = l1_history()
        h.fault("pause_masters", 0.5, 0.8, settle_ms=2000, masters=[1])   # its settling reaches the probe
        self.assertEqual(h.props(live=True), [])

    def test_faults_elsewhere_do_not_count(self):
        h = l1_history()
        h.fault("pause_instance", 0.5, 0.8, settle_ms=500, scope="inst", inst=0 + 5)
        h.fault("plant_foreign", 0.5, 3.0, scope="names", names=["other"])
        h.fault("pause_masters", 5.0, 6.0, settle_ms=500, masters=[1])
        self.assertEqual(h.props(live=True), ["L1"])


def stream_history(end_ev="lost", probe_at=6.5, aimed=False, probe_status=409, held=True,
                   values=("tk", "tk", None, "foreign-value", "foreign-value")):
    """A held stream (ttl 4000, fence 7, on instance 1) renewed at 1.43
    with 3300 ms announced (until 4.73), released through instance 2 at
    2.9 (answered 2.905), which then reads end_ev; L1's acquire at
    probe_at, on a 409 an inspection (held) and, aimed, a peek (values)."""
    h = H()
    g = h.op("hold", 0.0, 0.1, 201, kind="lock", name="s", ttl_ms=4000, inst=1, aimed=aimed or None,
             events=[ev(0.1, "acquired", token="tk", fence=7, validity_ms=3300),
                     ev(1.43, "renewed", validity_ms=3300), ev(3.0, end_ev,
                                                               **({"reason": "held_by_other"}
                                                                  if end_ev == "lost" else {})),
                     ev(3.0, "end")])
    r = h.release("s", 2.9, 2.905, "tk", inst=2, aimed=aimed or None)
    if aimed:
        h.op("peek", 2.96, 2.962, 200, dict(values=list(values)), name="s", probe="L1r", ref=r, grant=g)
    p = h.op("acquire", probe_at, probe_at + 0.005, probe_status,
             dict(error="locked") if probe_status == 409 else dict(token="t2", fence=9, validity_ms=900),
             kind="lock", name="s", ttl_ms=1000, inst=2, probe="L1", ref=r, grant=g, aimed=aimed or None)
    if probe_status == 409:
        h.op("inspect", probe_at + 0.01, probe_at + 0.012, 200, dict(held=held, fence=7 if held else None),
             kind="lock", name="s", inst=2, probe="L1i", ref=p)
        if aimed:
            h.op("peek", probe_at + 0.02, probe_at + 0.022, 200, dict(values=list(values)), name="s",
                 probe="L1p", ref=p)
    return h, g


class L1Streams(unittest.TestCase):
    def test_after_a_lost_the_bound_counts_from_the_announced_validity(self):
        # free from 4.73 + 0.5 (the transit margin): a probe at 3.3 is
        # past the bound from the answer but not judged
        h, _ = stream_history(probe_at=3.3)
        self.assertEqual(h.props(live=True), [])
        self.assertEqual(h.check(True)["stats"]["L1_judged"], 0)
        h, _ = stream_history(probe_at=6.5)
        self.assertEqual(h.props(live=True), ["L1"])

    def test_after_released_the_bound_counts_from_the_answer(self):
        h, _ = stream_history(end_ev="released", probe_at=4.2)
        self.assertEqual(h.props(live=True), ["L1"])


class L1Aimed(unittest.TestCase):
    def test_copies_of_the_released_token_keep_the_name(self):
        # not held on a majority (the inspection says so), but its two
        # copies and one free master would have granted it
        h, _ = stream_history(aimed=True, held=False)
        v = h.check(True)
        self.assertEqual([x["property"] for x in v["violations"]], ["L1"])
        self.assertIn("2 master(s) still held the released grant's token", v["violations"][0]["message"])
        self.assertEqual((v["stats"]["L1_aimed_judged"], v["stats"]["L1_aimed_raced"]), (1, 1))

    def test_other_values_keep_the_name(self):
        for values in [("tk", "other", None, "foreign-value", "foreign-value"),
                       (None, None, "!down", "foreign-value", "foreign-value")]:
            h, _ = stream_history(aimed=True, held=False, values=values)
            self.assertEqual(h.props(live=True), [], values)
            self.assertEqual(h.check(True)["stats"]["L1_aimed_judged"], 1)

    def test_granted_is_fine(self):
        h, _ = stream_history(aimed=True, probe_status=201)
        self.assertEqual(h.props(live=True), [])
        self.assertEqual(h.check(True)["stats"]["L1_aimed_judged"], 1)

    def test_its_stall_is_no_fault_but_moves_the_bound(self):
        h, g = stream_history(aimed=True, held=False)
        h.fault("stall_instance", 2.89, 3.2, settle_ms=500, scope="inst", inst=1, aimed=[g])
        self.assertEqual(h.props(live=True), ["L1"])
        # the stall ends after the announced validity: the probe is early
        h, g = stream_history(aimed=True, held=False)
        h.fault("stall_instance", 2.89, 5.4, settle_ms=500, scope="inst", inst=1, aimed=[g])
        self.assertEqual(h.props(live=True), [])
        self.assertEqual(h.check(True)["stats"]["L1_aimed_judged"], 0)

    def test_a_stall_is_a_fault_for_the_others(self):
        h, _ = stream_history(held=True)
        h.fault("stall_instance", 2.89, 3.2, settle_ms=500, scope="inst", inst=1, aimed=[99])
        self.assertEqual(h.props(live=True), [])
        self.assertEqual(h.check(True)["stats"]["L1_judged"], 0)

    def test_other_faults_still_count(self):
        h, _ = stream_history(aimed=True, held=False)
        h.fault("pause_instance", 4.0, 4.5, settle_ms=1500, scope="inst", inst=1)
        self.assertEqual(h.props(live=True), [])
        # before the release, settled: an aimed probe is judged from its release on
        h, _ = stream_history(aimed=True, held=False)
        h.fault("pause_masters", 0.5, 0.6, settle_ms=2000, masters=[1])
        self.assertEqual(h.props(live=True), ["L1"])


def l2_history(status=409, answered=9.0, release_at=2.0, wait_ms=8000, before=()):
    """A holder, its release at release_at, a waiter's tries: before (each
    (status, sent, answered)), then the last one."""
    h = H()
    hold = h.acquire("w", 0.0, 0.01, "t1", 3, 4000, inst=0)
    t0 = 1.0
    for k, (st, s, a) in enumerate(before):
        h.op("acquire", s, a, st, dict(error="no_quorum"), kind="lock", name="w", ttl_ms=2000,
             wait_ms=int(wait_ms - (s - 1.0) * 1000), inst=1, probe="L2", holder=hold, attempt=k)
        t0 = a + 0.05
    h.op("acquire", t0, answered, status, dict(error="locked") if status == 409 else
         dict(token="t2", fence=4, validity_ms=1900), kind="lock", name="w", ttl_ms=2000,
         wait_ms=int(wait_ms - (t0 - 1.0) * 1000), inst=1, probe="L2", holder=hold, attempt=len(before))
    h.release("w", release_at, release_at + 0.01, "t1", inst=2, probe="L2rel", holder=hold)
    return h


class L2(unittest.TestCase):
    def test_a_waiter_not_served(self):
        h = l2_history()
        self.assertEqual(h.props(live=True), ["L2"])

    def test_a_waiter_served(self):
        self.assertEqual(l2_history(status=201, answered=2.02).props(live=True), [])

    def test_a_503_then_a_grant_is_served(self):
        h = l2_history(status=201, answered=2.3, before=[(503, 1.0, 2.1)])
        self.assertEqual(h.props(live=True), [])
        self.assertEqual(h.check(True)["stats"]["L2_judged"], 1)

    def test_503s_to_the_end_of_the_wait_are_not_served(self):
        h = l2_history(status=503, answered=8.95, before=[(503, 1.0, 2.1), (None, 2.15, 5.0)])
        v = h.check(True)["violations"]
        self.assertEqual([x["property"] for x in v], ["L2"])
        self.assertIn("503 no_quorum, None", v[0]["message"])

    def test_a_release_too_late_in_the_wait_is_not_judged(self):
        self.assertEqual(l2_history(release_at=7.5).props(live=True), [])

    def test_a_master_fault_means_not_judged(self):
        h = l2_history()
        h.fault("flushall", 3.0, 3.0, settle_ms=8000, masters=[2])
        self.assertEqual(h.props(live=True), [])


def l3_history(after_force, tagged=True, force_status=204):
    """A stream holding p from 0.01, renewed, forced at 2.0; after_force:
    its events from then on."""
    h = H()
    s = h.op("hold", 0.0, 0.01, 201, kind="lock", name="p", ttl_ms=1500, inst=0,
             events=[ev(0.01, "acquired", token="s", fence=3, validity_ms=1200),
                     ev(0.5, "renewed", validity_ms=1200), ev(1.0, "renewed", validity_ms=1200),
                     ev(1.5, "renewed", validity_ms=1200)] + after_force)
    h.force("p", 2.0, 2.01, status=force_status, inst=1, **(dict(probe="L3", stream=s) if tagged else {}))
    return h


class L3(unittest.TestCase):
    def test_lost_forced_is_read(self):
        h = l3_history([ev(2.02, "lost", reason="forced"), ev(2.02, "end")])
        self.assertEqual(h.props(live=True), [])
        self.assertEqual(h.check(True)["stats"]["L3_forced_judged"], 1)

    def test_the_stream_ends_without_lost(self):
        h = l3_history([ev(2.02, "end")])
        self.assertEqual(h.props(live=True), ["L3"])
        # not a probe: any last event will do
        self.assertEqual(l3_history([ev(2.02, "end")], tagged=False).props(live=True), [])

    def test_the_stream_says_nothing(self):
        self.assertEqual(l3_history([]).props(live=True), ["L3"])
        self.assertEqual(l3_history([], tagged=False).props(live=True), ["L3"])

    def test_a_refused_force_asks_nothing(self):
        h = l3_history([ev(2.5, "renewed", validity_ms=1200), ev(3.0, "close")], force_status=403)
        self.assertEqual(h.props(live=True), [])

    def test_the_client_closing_first_is_not_judged(self):
        h = l3_history([ev(2.05, "close")])
        self.assertEqual(h.props(live=True), [])

    def test_validity_ran_out_and_nothing_came(self):
        h = H()
        h.op("hold", 0.0, 0.01, 201, kind="lock", name="q", ttl_ms=1500, inst=0,
             events=[ev(0.01, "acquired", token="s", fence=3, validity_ms=1200), ev(9.0, "close")])
        self.assertEqual(h.props(live=True), ["L3"])
        h.fault("pause_instance", 0.5, 1.0, settle_ms=1000, scope="inst", inst=0)
        self.assertEqual(h.props(live=True), [])

    def test_renewals_on_time(self):
        h = H()
        h.op("campaign", 0.0, 0.01, 201, kind="election", name="e", inst=0,
             events=[ev(0.01, "campaigning"), ev(0.5, "elected", term=3, token="s", validity_ms=1200)]
             + [ev(0.5 + 0.4 * k, "renewed", validity_ms=1200) for k in range(1, 20)] + [ev(8.5, "close")])
        self.assertEqual(h.props(live=True), [])
        self.assertGreater(h.check(True)["stats"]["L3_validity_judged"], 10)

    def test_not_judged_past_the_end_of_the_history(self):
        h = H()
        h.op("hold", 0.0, 0.01, 201, kind="lock", name="q", ttl_ms=1500, inst=0,
             events=[ev(0.01, "acquired", token="s", fence=3, validity_ms=1200)])
        self.assertEqual(sorted({v["property"] for v in h.check(True, end=1.0)["violations"]}), [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
