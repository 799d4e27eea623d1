#!/usr/bin/env python3
"""Unit tests of the nemesis checker (checker.py, checker_live.py) on
hand-made histories: for each property one that breaks it and one that
keeps it, and the edges (a refused force ends nothing, an extension moves
the window, a fault near a probe means it is not judged). The safety
properties are here; the liveness ones in test_checker_live.py."""
import os
import sys
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checker  # noqa: E402


class H:
    """A history written by hand: op() records an invocation, its answer
    and its stream events; fault() a fault's begin and end."""

    def __init__(self):
        self.recs, self.n, self.nf = [dict(type="meta", t=0.0)], 0, 0

    def op(self, op, t0, t1=None, status=None, res=None, events=(), client=0, inst=0, **kw):
        self.n += 1
        self.recs.append(dict(type="invoke", id=self.n, client=client, op=op, t=t0, inst=inst, **kw))
        if t1 is not None:
            self.recs.append(dict(type="complete", id=self.n, t=t1, status=status, **(res or {})))
        for t, ev, fields in events:
            self.recs.append(dict(type="event", id=self.n, t=t, event=ev, **fields))
        return self.n

    def acquire(self, name, t0, t1, token, fence, validity_ms, status=201, **kw):
        return self.op("acquire", t0, t1, status, dict(token=token, fence=fence, validity_ms=validity_ms),
                       kind="lock", name=name, ttl_ms=validity_ms, wait_ms=0, **kw)

    def release(self, name, t0, t1, token, status=204, **kw):
        return self.op("release", t0, t1, status, kind="lock", name=name, token=token, **kw)

    def force(self, name, t0, t1, status=204, kind="lock", **kw):
        return self.op("force", t0, t1, status, kind=kind, name=name, **kw)

    def fault(self, kind, begin, end, settle_ms=0, scope="all", **kw):
        self.nf += 1
        self.recs.append(dict(type="fault", fid=self.nf, phase="begin", kind=kind, t=begin, scope=scope, **kw))
        self.recs.append(dict(type="fault", fid=self.nf, phase="end", kind=kind, t=end, settle_ms=settle_ms))

    def check(self, live=False, end=60.0):
        """The checker's verdict; the history ends end seconds after its last
        record (live: with the liveness properties)."""
        recs = self.recs + [dict(type="meta", t=max(r.get("t", 0) for r in self.recs) + end)]
        return checker.check(recs, live=live)

    def props(self, live=False):
        return sorted({v["property"] for v in self.check(live)["violations"]})


def ev(t, name, **kw):
    return (t, name, kw)


class MutualExclusion(unittest.TestCase):
    def test_two_acquires_within_validity(self):
        h = H()
        h.acquire("a", 0.0, 0.01, "t1", 1, 2000)
        h.acquire("a", 0.5, 0.51, "t2", 2, 2000, client=1)
        self.assertEqual(h.props(), ["mutual_exclusion"])

    def test_release_sent_ends_the_window(self):
        h = H()
        h.acquire("a", 0.0, 0.01, "t1", 1, 2000)
        h.release("a", 0.4, 0.41, "t1")
        h.acquire("a", 0.5, 0.51, "t2", 2, 2000, client=1)
        self.assertEqual(h.props(), [])

    def test_validity_counts_from_the_request(self):
        h = H()
        h.acquire("a", 0.0, 0.3, "t1", 1, 1000)          # relied on until 1.0, not 1.3
        h.acquire("a", 1.05, 1.06, "t2", 2, 1000, client=1)
        self.assertEqual(h.props(), [])

    def test_an_extension_moves_the_window(self):
        h = H()
        h.acquire("a", 0.0, 0.01, "t1", 1, 1000)
        h.op("extend", 0.5, 0.51, 200, dict(fence=1, validity_ms=1000), kind="lock", name="a", token="t1")
        h.acquire("a", 1.2, 1.21, "t2", 2, 1000, client=1)
        self.assertEqual(h.props(), ["mutual_exclusion"])

    def test_an_extension_to_a_shorter_ttl_shortens_it(self):
        h = H()
        h.acquire("a", 0.0, 0.01, "t1", 1, 4000)
        h.op("extend", 1.0, 1.01, 200, dict(fence=1, validity_ms=980), kind="lock", name="a", token="t1",
             ttl_ms=1000)
        h.acquire("a", 2.0, 2.01, "t2", 3, 1000, client=1)
        self.assertEqual(h.props(), [])
        h.acquire("a", 1.5, 1.51, "t3", 2, 1000, client=2)
        self.assertEqual(h.props(), ["mutual_exclusion"])

    def test_an_unanswered_extension_caps_it_at_the_ttl_asked(self):
        h = H()
        h.acquire("a", 0.0, 0.01, "t1", 1, 4000)
        h.op("extend", 1.0, None, None, kind="lock", name="a", token="t1", ttl_ms=1000)
        h.acquire("a", 2.5, 2.51, "t2", 2, 1000, client=1)
        self.assertEqual(h.props(), [])

    def test_a_failed_extension_does_not(self):
        h = H()
        h.acquire("a", 0.0, 0.01, "t1", 1, 1000)
        h.op("extend", 0.5, 0.51, 503, dict(error="no_quorum"), kind="lock", name="a", token="t1")
        h.acquire("a", 1.2, 1.21, "t2", 2, 1000, client=1)
        self.assertEqual(h.props(), [])

    def test_reading_not_held_ends_the_claim(self):
        h = H()
        h.acquire("a", 0.0, 0.01, "t1", 1, 4000)
        h.op("extend", 0.5, 0.51, 409, dict(error="not_held"), kind="lock", name="a", token="t1", ttl_ms=4000)
        h.acquire("a", 0.6, 0.61, "t2", 2, 1000, client=1)
        self.assertEqual(h.props(), [])
        h.acquire("a", 0.505, 0.509, "t3", 3, 1000, client=2)   # before the 409 was read
        self.assertEqual(h.props(), ["fence_order", "mutual_exclusion"])

    def test_a_force_ends_every_claim_but_a_refused_one_none(self):
        h = H()
        h.acquire("a", 0.0, 0.01, "t1", 1, 2000)
        h.force("a", 0.4, 0.41, inst=1)
        h.acquire("a", 0.5, 0.51, "t2", 2, 2000, client=1)
        self.assertEqual(h.props(), [])
        h = H()
        h.acquire("a", 0.0, 0.01, "t1", 1, 2000)
        h.force("a", 0.4, 0.41, status=403)
        h.acquire("a", 0.5, 0.51, "t2", 2, 2000, client=1)
        self.assertEqual(h.props(), ["mutual_exclusion"])

    def test_an_unanswered_force_may_have_run(self):
        h = H()
        h.acquire("a", 0.0, 0.01, "t1", 1, 2000)
        h.force("a", 0.4, None)
        h.acquire("a", 0.5, 0.51, "t2", 2, 2000, client=1)
        self.assertEqual(h.props(), [])

    def test_held_stream_renewals_and_lost(self):
        h = H()
        h.op("hold", 0.0, 0.01, 201, kind="lock", name="a", ttl_ms=1000,
             events=[ev(0.01, "acquired", token="s1", fence=1, validity_ms=800),
                     ev(0.4, "renewed", validity_ms=800), ev(0.8, "renewed", validity_ms=800)])
        h.acquire("a", 1.3, 1.31, "t2", 2, 1000, client=1)   # the stream holds until 1.6
        self.assertEqual(h.props(), ["mutual_exclusion"])
        h = H()
        h.op("hold", 0.0, 0.01, 201, kind="lock", name="a", ttl_ms=1000,
             events=[ev(0.01, "acquired", token="s1", fence=1, validity_ms=800),
                     ev(0.4, "renewed", validity_ms=800), ev(0.8, "lost", reason="expired"), ev(0.8, "end")])
        h.acquire("a", 1.3, 1.31, "t2", 2, 1000, client=1)
        self.assertEqual(h.props(), [])

    def test_closing_a_stream_ends_its_claim(self):
        h = H()
        h.op("hold", 0.0, 0.01, 201, kind="lock", name="a", ttl_ms=1000,
             events=[ev(0.01, "acquired", token="s1", fence=1, validity_ms=800), ev(0.3, "close")])
        h.acquire("a", 0.35, 0.36, "t2", 2, 1000, client=1)
        self.assertEqual(h.props(), [])

    def test_dapr_expiry_and_unlock(self):
        h = H()
        h.op("dapr_lock", 0.0, 0.01, 200, dict(success=True), kind="lock", name="lockstore||r", owner="o1",
             expiry_s=2, via="http")
        h.op("dapr_lock", 1.0, 1.01, 200, dict(success=True), kind="lock", name="lockstore||r", owner="o2",
             expiry_s=2, via="grpc", client=1)
        self.assertEqual(h.props(), ["mutual_exclusion"])
        h = H()
        h.op("dapr_lock", 0.0, 0.01, 200, dict(success=True), kind="lock", name="lockstore||r", owner="o1",
             expiry_s=2, via="http")
        h.op("dapr_unlock", 0.5, 0.51, 200, dict(unlock=0), kind="lock", name="lockstore||r", owner="o1",
             via="grpc")
        h.op("dapr_lock", 1.0, 1.01, 200, dict(success=True), kind="lock", name="lockstore||r", owner="o2",
             expiry_s=2, via="http", client=1)
        self.assertEqual(h.props(), [])

    def test_two_leaders_at_once(self):
        h = H()
        h.op("campaign", 0.0, 0.01, 201, kind="election", name="e",
             events=[ev(0.01, "campaigning"), ev(0.02, "elected", term=5, token="a", validity_ms=900)])
        h.op("campaign", 0.0, 0.01, 201, kind="election", name="e", client=1,
             events=[ev(0.01, "campaigning"), ev(0.5, "elected", term=6, token="b", validity_ms=900)])
        self.assertEqual(h.props(), ["mutual_exclusion"])

    def test_a_grant_read_after_the_client_closed_is_no_claim(self):
        h = H()
        h.op("campaign", 0.0, 0.01, 201, kind="election", name="e",
             events=[ev(0.01, "campaigning"), ev(2.0, "close"),
                     ev(2.0001, "elected", term=5, token="a", validity_ms=900)])
        h.op("campaign", 2.5, 2.51, 201, kind="election", name="e", client=1,
             events=[ev(2.51, "campaigning"), ev(2.52, "elected", term=6, token="b", validity_ms=900)])
        self.assertEqual(h.props(), [])

    def test_a_resign_sent_ends_the_leadership(self):
        h = H()
        h.op("campaign", 0.0, 0.01, 201, kind="election", name="e",
             events=[ev(0.01, "campaigning"), ev(0.02, "elected", term=5, token="a", validity_ms=900),
                     ev(0.41, "resigned")])
        h.op("resign", 0.4, 0.42, 204, kind="election", name="e", token="a")
        h.op("campaign", 0.0, 0.01, 201, kind="election", name="e", client=1,
             events=[ev(0.01, "campaigning"), ev(0.43, "elected", term=6, token="b", validity_ms=900)])
        self.assertEqual(h.props(), [])


class Semaphores(unittest.TestCase):
    def sem(self, h, t0, t1, slots, limit, client=0):
        return h.op("sem_acquire", t0, t1, 201, dict(granted=[dict(slot=s, token=f"{s}:{client}{t0}", fence=10 + s + int(t0 * 100),
                                                                  validity_ms=1000) for s in slots]),
                    kind="semaphore", name="s", limit=limit, permits=len(slots), client=client)

    def test_more_permits_than_the_limit(self):
        h = H()
        self.sem(h, 0.0, 0.01, [0], 1)
        self.sem(h, 0.2, 0.21, [1], 1, client=1)
        self.assertEqual(h.props(), ["semaphore_limit"])

    def test_one_holder_per_slot(self):
        h = H()
        self.sem(h, 0.0, 0.01, [0], 3)
        h.op("sem_hold", 0.2, 0.21, 201, kind="semaphore", name="s", limit=3, client=1,
             events=[ev(0.21, "acquired", slot=0, token="0:x", fence=20, validity_ms=800)])
        v = h.check()["violations"]
        self.assertEqual([x["property"] for x in v], ["semaphore_limit"])
        self.assertIn("slot 0", v[0]["message"])

    def test_within_the_limit(self):
        h = H()
        self.sem(h, 0.0, 0.01, [0, 1], 2)
        h.op("sem_release", 0.3, 0.31, 204, kind="semaphore", name="s", tokens=["0:00.0"])
        self.sem(h, 0.4, 0.41, [0], 2, client=1)
        self.assertEqual(h.props(), [])


class Terms(unittest.TestCase):
    def test_one_leader_per_term(self):
        h = H()
        h.op("campaign", 0.0, 0.01, 201, kind="election", name="e",
             events=[ev(0.02, "elected", term=5, token="a", validity_ms=300), ev(0.2, "close")])
        h.op("campaign", 0.0, 0.01, 201, kind="election", name="e", client=1,
             events=[ev(1.0, "elected", term=5, token="b", validity_ms=300)])
        self.assertEqual(h.props(), ["leader_per_term"])   # sent before the first was elected: no order

    def test_terms_that_increase(self):
        h = H()
        h.op("campaign", 0.0, 0.01, 201, kind="election", name="e",
             events=[ev(0.02, "elected", term=5, token="a", validity_ms=300), ev(0.2, "close")])
        h.op("campaign", 0.5, 0.51, 201, kind="election", name="e", client=1,
             events=[ev(1.0, "elected", term=6, token="b", validity_ms=300)])
        self.assertEqual(h.props(), [])


class Fences(unittest.TestCase):
    def test_a_later_grant_with_a_lower_or_equal_fence(self):
        for fence in (9, 10):
            h = H()
            h.acquire("a", 0.0, 0.01, "t1", 10, 100)
            h.acquire("a", 1.0, 1.01, "t2", fence, 100, client=1)
            self.assertEqual(h.props(), ["fence_order"], fence)

    def test_concurrent_grants_are_not_ordered(self):
        h = H()
        h.acquire("a", 0.0, 0.01, "t1", 10, 100)
        h.acquire("a", 0.005, 0.5, "t2", 9, 100, client=1)   # sent before the first was answered
        self.assertEqual(h.props(), [])

    def test_an_extension_reports_its_grants_fence(self):
        h = H()
        h.acquire("a", 0.0, 0.01, "t1", 10, 1000)
        h.op("extend", 0.5, 0.51, 200, dict(fence=11, validity_ms=1000), kind="lock", name="a", token="t1")
        self.assertEqual(h.props(), ["fence_order"])

    def test_slots_are_fenced_apart(self):
        h = H()
        h.op("sem_acquire", 0.0, 0.01, 201, dict(granted=[dict(slot=0, token="0:a", fence=10, validity_ms=100)]),
             kind="semaphore", name="s", limit=2)
        h.op("sem_acquire", 1.0, 1.01, 201, dict(granted=[dict(slot=1, token="1:b", fence=5, validity_ms=100)]),
             kind="semaphore", name="s", limit=2)
        h.op("sem_acquire", 2.0, 2.01, 201, dict(granted=[dict(slot=0, token="0:c", fence=7, validity_ms=100)]),
             kind="semaphore", name="s", limit=2)
        v = h.check()["violations"]
        self.assertEqual(len(v), 1)
        self.assertIn("slot 0", v[0]["message"])


class ExtendAfterRelease(unittest.TestCase):
    def test_extension_after_the_release_was_answered(self):
        h = H()
        h.acquire("a", 0.0, 0.01, "t1", 1, 2000)
        h.release("a", 0.2, 0.21, "t1")
        h.op("extend", 0.3, 0.31, 200, dict(fence=1, validity_ms=1000), kind="lock", name="a", token="t1")
        self.assertEqual(h.props(), ["extend_after_release"])

    def test_extension_racing_the_release(self):
        h = H()
        h.acquire("a", 0.0, 0.01, "t1", 1, 2000)
        h.release("a", 0.2, 0.21, "t1")
        h.op("extend", 0.205, 0.22, 200, dict(fence=1, validity_ms=1000), kind="lock", name="a", token="t1")
        self.assertEqual(h.props(), [])

    def test_a_refused_release_ends_nothing(self):
        h = H()
        h.acquire("a", 0.0, 0.01, "t1", 1, 2000)
        h.release("a", 0.2, 0.21, "t1", status=409)
        h.op("extend", 0.3, 0.31, 200, dict(fence=1, validity_ms=1000), kind="lock", name="a", token="t1")
        self.assertEqual(h.props(), [])

    def test_extension_after_a_force(self):
        h = H()
        h.acquire("a", 0.0, 0.01, "t1", 1, 2000)
        h.force("a", 0.2, 0.21)
        h.op("extend", 0.3, 0.31, 200, dict(fence=1, validity_ms=1000), kind="lock", name="a", token="t1")
        self.assertEqual(h.props(), ["extend_after_release"])

    def test_proclaim_after_resign_and_permits_after_release(self):
        h = H()
        h.op("campaign", 0.0, 0.01, 201, kind="election", name="e",
             events=[ev(0.02, "elected", term=5, token="a", validity_ms=900), ev(0.25, "resigned")])
        h.op("resign", 0.2, 0.21, 204, kind="election", name="e", token="a")
        h.op("proclaim", 0.3, 0.31, 204, kind="election", name="e", token="a", value="v")
        self.assertEqual(h.props(), ["extend_after_release"])
        h = H()
        h.op("sem_acquire", 0.0, 0.01, 201, dict(granted=[dict(slot=0, token="0:a", fence=10, validity_ms=900)]),
             kind="semaphore", name="s", limit=2)
        h.op("sem_release", 0.2, 0.21, 204, kind="semaphore", name="s", tokens=["0:a"])
        h.op("sem_extend", 0.3, 0.31, 200, dict(granted=[dict(slot=0, token="0:a", fence=10, validity_ms=900)]),
             kind="semaphore", name="s", tokens=["0:a"])
        self.assertEqual(h.props(), ["extend_after_release"])



class Rights(unittest.TestCase):
    def test_refused_calls_keep_it(self):
        h = H()
        h.op("trespass", 1.0, 1.1, 403, what="acquire", name="nm-s0")
        h.op("trespass", 2.0, None, None, what="release", name="nm-s0")   # no answer: unknown, not judged
        h.op("trespass", 3.0, 3.1, 200, dict(names=["outside/1"]), what="list", name="nm-s0")
        h.op("trespass", 4.0, 4.1, 201, what="own", name="nm-s0")
        self.assertEqual(h.props(), [])

    def test_a_call_served_breaks_it(self):
        h = H()
        h.op("trespass", 1.0, 1.1, 201, what="acquire", name="nm-s0")
        self.assertEqual(h.props(), ["rights"])

    def test_a_listing_of_others_names_breaks_it(self):
        h = H()
        h.op("trespass", 1.0, 1.1, 200, dict(names=["outside/1", "nm-s0"]), what="list", name="nm-s0")
        self.assertEqual(h.props(), ["rights"])

if __name__ == "__main__":
    # Both files' tests: this one's and test_checker_live.py's.
    import test_checker_live
    suite = unittest.TestLoader().loadTestsFromModule(sys.modules[__name__])
    suite.addTests(unittest.TestLoader().loadTestsFromModule(test_checker_live))
    ok = unittest.TextTestRunner(verbosity=2).run(suite).wasSuccessful()
    sys.exit(0 if ok else 1)
