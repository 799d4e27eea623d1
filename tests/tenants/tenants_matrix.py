"""The route-family matrix (issue 43's "done when"): on one transport
(tenants_harness: TCP or a Unix socket with tokens, HTTPS with client
certificates), every route family - locks, elections, semaphores,
listings, /ui/state, force, Dapr's HTTP lock API - refuses a principal
without the right and serves one with it.

A refused case must get its status (403 forbidden for a principal without
the right; 401 for a credential that names no principal, or none) and
change nothing on the masters (every key of the transport's names, its
value and its expiry, read on each master before and after); a served one
its status and its effect on the masters. Every case that the audit log
records (each refusal; each grant, release, force and term) must have its
line there: JSON, naming the principal (none for a 401), the client
address of the case's own connection ("unix" on the socket), the route's
name and outcome. Served reads, heartbeats and proclaims are not audit
events (audit.h) and have no line to find. A held stream that its client
closes is a release ("closed"). The log holds no bearer token and no lock
token.

The families' calls: locks: acquire, extend, release, inspect, a held
stream and its heartbeat; elections: campaign (a held stream), inspect,
proclaim, resign, heartbeat; semaphores: acquire, inspect, release;
listings: /locks (filtered), /elections, /semaphores; /ui/state; force
release (admin, and admin on a prefix); Dapr's lock and unlock over HTTP
(the name refused: the key name once the body is read, else the store).

run(t, masters) returns the cases; each has family, kind ("refused",
"served"), what, status (what came) and problems (empty: it passed)."""
import time

from tenants_harness import TOKENS, audit_match, audit_read, changes, holding, snap

FAMILIES = ("locks", "elections", "semaphores", "listings", "/ui/state", "force", "dapr http")
DAPR_LOCK, DAPR_UNLOCK = "/v1.0-alpha1/lock/lockstore", "/v1.0-alpha1/unlock/lockstore"
AUDIT_WAIT_S = 30   # generous: the sentinel's line is written before its answer


class Matrix:
    def __init__(self, t, masters):
        self.t, self.masters = t, masters
        self.cases = []
        self.lock_tokens = []   # every lock token answered: none may reach the audit log

    def _case(self, family, kind, what, a, want_status, error=None):
        c = {"family": family, "kind": kind, "what": what, "status": a.status if a else None,
             "client": getattr(a, "client", None), "problems": [], "audit": None}
        if a is None or a.status != want_status:
            c["problems"].append(f"expected {want_status}, got {a.status if a else None} "
                                 f"{(a.body[:160] if a else b'')!r}")
        elif error:
            try:
                body = a.json()
                got = body.get("error") or body.get("errorCode")
            except ValueError:
                got = None
            if got != error:
                c["problems"].append(f"expected error {error}, got {a.body[:160]!r}")
        if a is not None and a.status in (200, 201):
            try:
                body = a.json()
            except ValueError:
                body = {}
            if isinstance(body, dict):   # a lock's token, a semaphore's permits' tokens
                self.lock_tokens += [x["token"] for x in [body] + body.get("permits", []) if x.get("token")]
        self.cases.append(c)
        return c

    def refused(self, family, what, method, path, who, status, name, body=None, dapr=False, headers=(),
                stream=False, live=()):
        """who's request must be refused with status (403: who has not the
        right; 401: who names no principal) and change nothing. stream: a
        request whose grant would be a held stream (only its head is read,
        then it is closed); live: names a stream keeps meanwhile (their
        renewals are not the request's doing)."""
        before = snap(self.masters, self.t.tag)
        t0 = time.monotonic()
        if stream:
            st = self.t.stream(path, body, who)
            st.close()
            a = st.s.answer
            a.client = st.client
        else:
            a = self.t.req(method, path, body, who, dapr, headers)
        after = snap(self.masters, self.t.tag)
        error = {403: "ERR_PERMISSION_DENIED" if dapr else "forbidden",
                 401: "ERR_UNAUTHORIZED" if dapr else "unauthorized"}[status]
        c = self._case(family, "refused", what, a, status, error)
        c["problems"] += changes(before, after, (time.monotonic() - t0) * 1000, live)
        c["audit"] = {"event": "refused", "principal": who if status == 403 else None, "name": name,
                      "outcome": str(status)}
        return a

    def nobody(self, family, method, path, name, body=None, dapr=False, stream=False, what=""):
        """No credential, and one that names no principal: 401 each."""
        self.refused(family, f"no credential{what}", method, path, None, 401, name, body, dapr, stream=stream)
        self.refused(family, f"a credential of no principal{what}", method, path, "stranger", 401, name, body, dapr,
                     stream=stream)

    def served(self, family, what, method, path, who, status, body=None, dapr=False, headers=(), audit=None):
        """who's request must get status; audit: the line it must have
        (event, outcome, name), or None for a read."""
        a = self.t.req(method, path, body, who, dapr, headers)
        c = self._case(family, "served", what, a, status)
        if audit:
            c["audit"] = {"event": audit[0], "principal": who, "outcome": audit[1], "name": audit[2]}
        return a, c

    def check(self, c, cond, msg):
        if not cond:
            c["problems"].append(msg)
        return cond

    def on_masters(self, c, name, want, kind="lock", timeout=5):
        """Polls until name is on every master (want "held") or on none
        ("gone"): a grant answers once a majority said yes and a release
        may still be on its way to the last masters, and a refusal's
        snapshot must not see them arrive."""
        n = len(self.masters)
        ok = (lambda k: k == n) if want == "held" else (lambda k: k == 0)
        deadline = time.monotonic() + timeout
        while not ok(holding(self.masters, name, kind)) and time.monotonic() < deadline:
            time.sleep(0.02)
        k = holding(self.masters, name, kind)
        return self.check(c, ok(k), f"{name} is on {k} of {n} masters, expected {want}")

    def audit_check(self, n):
        """Each case's line. redlockd writes a line before it answers (or
        sends the stream's event), one write(2) each, in order: once the
        line of a last request sent after every other answer came (a
        sentinel: no credential, 401) is in the log, so is every line it
        will ever hold for the cases before it. Its line is waited for
        (generously); then a missing line is missing, not late."""
        sentinel = f"sentinel/{self.t.tag}{n}"
        a = self.t.req("GET", f"/locks/{sentinel}", None, None)
        want = {"event": "refused", "principal": None, "name": sentinel, "outcome": "401"}
        deadline = time.monotonic() + AUDIT_WAIT_S
        while True:
            _, lines = audit_read(self.t.audit)
            if any(audit_match(ln, want, a.client) for ln in lines) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if not any(audit_match(ln, want, a.client) for ln in lines):
            self.cases.append({"family": "audit log", "kind": "log", "what": "the sentinel's line", "status": a.status,
                               "problems": [f"no line for the sentinel {sentinel} in {AUDIT_WAIT_S} s"], "audit": None})
        for c in self.cases:
            if c["audit"] is None or c.get("audited"):
                continue
            c["audited"] = True
            if not any(audit_match(ln, c["audit"], c["client"]) for ln in lines):
                near = [ln for ln in lines if isinstance(ln, dict) and ln.get("name") == c["audit"].get("name")]
                c["problems"].append(f"no audit line {c['audit']} from {c['client']}; lines of the name: {near[-4:]}")

    def audit_whole(self):
        """The log as a whole: every line JSON, no bearer or lock token."""
        text, lines = audit_read(self.t.audit)
        c = {"family": "audit log", "kind": "log", "what": "every line JSON, no token", "status": None,
             "problems": [], "audit": None}
        self.check(c, lines, f"the audit log {self.t.audit} is empty")
        self.check(c, None not in lines, f"a line that is not JSON in {self.t.audit}")
        for tok in list(TOKENS.values()) + self.lock_tokens:
            self.check(c, tok not in text, f"the audit log holds a token ({tok[:6]}...)")
        self.cases.append(c)


def until(st, kind, timeout):
    """The stream's first event of kind, or None when it ends or none comes
    in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ev = st.next(max(0.01, deadline - time.monotonic()))
        except (TimeoutError, OSError, ValueError):
            return None
        if ev is None or ev.get("event") == kind:
            return ev
    return None


# ---- the families; the names hold the transport's tag ----

def locks(m, t):
    own, other, ro = f"billing/{t}run", f"payroll/{t}x", f"billing/{t}ro"
    ttl = {"ttl_ms": 30000}
    m.refused("locks", "billing acquires another team's name", "POST", f"/locks/{other}", "billing", 403, other, ttl)
    m.refused("locks", "dashboard (read only) acquires", "POST", f"/locks/{ro}", "dashboard", 403, ro, ttl)
    m.nobody("locks", "POST", f"/locks/{own}", own, ttl)
    a, c = m.served("locks", "billing acquires its own", "POST", f"/locks/{own}", "billing", 201, ttl,
                    audit=("grant", "201", own))
    tok = a.json().get("token", "") if a.status == 201 else ""
    if a.status == 201:
        c["audit"]["fence"] = a.json().get("fence")
    m.on_masters(c, own, "held")
    lt = [("Lock-Token", tok)]
    m.refused("locks", "dashboard extends billing's lock", "PATCH", f"/locks/{own}", "dashboard", 403, own,
              {"ttl_ms": 60000}, headers=lt)
    m.refused("locks", "dashboard releases billing's lock", "DELETE", f"/locks/{own}", "dashboard", 403, own,
              headers=lt)
    m.refused("locks", "billing's heartbeat on another team's name", "PUT", f"/locks/{other}/heartbeat", "billing",
              403, other, headers=[("Lock-Token", "x" * 22)])
    m.refused("locks", "billing reads another team's name", "GET", f"/locks/{other}", "billing", 403, other)
    a, c = m.served("locks", "dashboard reads billing's lock", "GET", f"/locks/{own}", "dashboard", 200)
    m.check(c, a.status != 200 or a.json().get("held") is True, f"not held: {a.body[:160]!r}")
    m.served("locks", "billing extends its own", "PATCH", f"/locks/{own}", "billing", 200, {"ttl_ms": 30000},
             headers=lt)
    _, c = m.served("locks", "billing releases its own", "DELETE", f"/locks/{own}", "billing", 204, headers=lt,
                    audit=("release", "204", own))
    m.on_masters(c, own, "gone")
    held_stream(m, t)


def held_stream(m, t):
    """A held stream (hold: true) and its heartbeat, of the locks family.
    The stream's ttl is long, so that it renews seldom; a refusal beside
    it discounts the renewals anyway (live)."""
    lease = f"billing/{t}lease"
    hold = {"hold": True, "ttl_ms": 30000, "heartbeat_ms": 30000}
    m.refused("locks", "dashboard (read only) opens a held stream", "POST", f"/locks/{lease}", "dashboard", 403,
              lease, hold, stream=True)
    m.nobody("locks", "POST", f"/locks/{lease}", lease, hold, stream=True, what=" (a held stream)")
    st = m.t.stream(f"/locks/{lease}", hold, "billing")
    st.s.answer.client = st.client
    c = m._case("locks", "served", "billing opens a held stream of its own", st.s.answer, 201)
    c["audit"] = {"event": "grant", "principal": "billing", "outcome": "201", "name": lease}
    ev = until(st, "acquired", 10) if st.s.answer.status == 201 else None
    tok = ev.get("token", "") if ev else ""
    if m.check(c, ev is not None and tok and ev.get("fence"), f"no acquired event: {st.events}"):
        c["audit"]["fence"] = ev["fence"]
        m.lock_tokens.append(tok)
        m.on_masters(c, lease, "held")
    lt = [("Lock-Token", tok or "x" * 22)]
    m.refused("locks", "dashboard's heartbeat on billing's held stream", "PUT", f"/locks/{lease}/heartbeat",
              "dashboard", 403, lease, headers=lt, live=[lease])
    m.refused("locks", "a heartbeat with no credential", "PUT", f"/locks/{lease}/heartbeat", None, 401, lease,
              headers=lt, live=[lease])
    m.served("locks", "billing's heartbeat on its held stream", "PUT", f"/locks/{lease}/heartbeat", "billing", 204,
             headers=lt)
    m.refused("locks", "dashboard releases the held stream's lock", "DELETE", f"/locks/{lease}", "dashboard", 403,
              lease, headers=lt, live=[lease])
    # the stream goes on: a refused heartbeat or release did not end it
    a, c2 = m.served("locks", "dashboard reads the held lock", "GET", f"/locks/{lease}", "dashboard", 200)
    m.check(c2, a.status != 200 or a.json().get("held") is True, f"not held: {a.body[:160]!r}")
    st.close()   # closing the connection releases the lock, and says so in the audit log
    c3 = m._case("locks", "served", "billing closes its held stream (a release)", st.s.answer, 201)
    c3["audit"] = {"event": "release", "principal": "billing", "outcome": "closed", "name": lease}
    m.on_masters(c3, lease, "gone")


def elections(m, t):
    own, other = f"billing/{t}lead", f"payroll/{t}lead"
    m.refused("elections", "billing campaigns for another team's name", "POST", f"/elections/{other}", "billing",
              403, other, {"candidate": "b1", "ttl_ms": 30000}, stream=True)
    m.refused("elections", "dashboard (read only) campaigns", "POST", f"/elections/{own}", "dashboard", 403, own,
              {"candidate": "d1", "ttl_ms": 30000}, stream=True)
    m.refused("elections", "billing reads another team's election", "GET", f"/elections/{other}", "billing", 403,
              other)
    m.nobody("elections", "POST", f"/elections/{own}", own, {"candidate": "n1", "ttl_ms": 30000}, stream=True)
    # a campaign is a held stream: its ttl long, so that it renews seldom
    st = m.t.stream(f"/elections/{own}", {"candidate": "b1", "ttl_ms": 30000}, "billing")
    st.s.answer.client = st.client
    c = m._case("elections", "served", "billing campaigns for its own (held)", st.s.answer, 201)
    c["audit"] = {"event": "term", "principal": "billing", "outcome": "elected", "name": own}
    ev = until(st, "elected", 10) if st.s.answer.status == 201 else None
    tok = ev.get("token", "") if ev else ""
    if m.check(c, ev is not None and ev.get("term") and tok, f"no elected event: {st.events}"):
        c["audit"]["fence"] = ev["term"]
        m.lock_tokens.append(tok)
        m.on_masters(c, own, "held", "election")
    lt = [("Lock-Token", tok or "x" * 22)]
    m.refused("elections", "dashboard proclaims a value in billing's term", "PUT", f"/elections/{own}/value",
              "dashboard", 403, own, {"value": "d"}, headers=lt, live=[own])
    m.refused("elections", "dashboard resigns billing's term", "DELETE", f"/elections/{own}", "dashboard", 403, own,
              headers=lt, live=[own])
    m.refused("elections", "dashboard's heartbeat on billing's term", "PUT", f"/elections/{own}/heartbeat",
              "dashboard", 403, own, headers=lt, live=[own])
    m.served("elections", "billing proclaims a value", "PUT", f"/elections/{own}/value", "billing", 204,
             {"value": "v2"}, headers=lt)
    a, c2 = m.served("elections", "dashboard reads the election", "GET", f"/elections/{own}", "dashboard", 200)
    m.check(c2, a.status != 200 or (a.json().get("leader") == "b1" and a.json().get("value") == "v2"),
            f"the leader is not b1 with the value v2: {a.body[:160]!r}")
    _, c3 = m.served("elections", "billing resigns", "DELETE", f"/elections/{own}", "billing", 204, headers=lt,
                     audit=("release", "204", own))
    end = until(st, "resigned", 10) if ev else None
    m.check(c3, end is not None and end.get("event") == "resigned", f"the stream did not end resigned: {st.events}")
    st.close()
    m.on_masters(c3, own, "gone", "election")


def semaphores(m, t):
    own, other = f"reports/{t}sem", f"payroll/{t}sem"
    body = {"limit": 2, "ttl_ms": 30000}
    m.refused("semaphores", "billing takes a permit of another team's", "POST", f"/semaphores/{other}", "billing",
              403, other, body)
    m.refused("semaphores", "dashboard (read only) takes a permit", "POST", f"/semaphores/{own}", "dashboard", 403,
              own, body)
    m.refused("semaphores", "billing reads another team's semaphore", "GET", f"/semaphores/{other}", "billing", 403,
              other)
    m.nobody("semaphores", "POST", f"/semaphores/{own}", own, body)
    a, c = m.served("semaphores", "billing takes a permit of its own", "POST", f"/semaphores/{own}", "billing", 201,
                    body, audit=("grant", "201", own))
    permit = a.json()["permits"][0] if a.status == 201 else {}
    c["audit"]["fence"] = permit.get("fence")
    m.on_masters(c, own, "held", "semaphore")
    lt = [("Lock-Token", permit.get("token", ""))]
    m.refused("semaphores", "dashboard releases billing's permit", "DELETE", f"/semaphores/{own}", "dashboard", 403,
              own, headers=lt)
    a, c2 = m.served("semaphores", "dashboard reads it", "GET", f"/semaphores/{own}", "dashboard", 200)
    _, c = m.served("semaphores", "billing releases its permit", "DELETE", f"/semaphores/{own}", "billing", 204,
                    headers=lt, audit=("release", "204", own))
    m.on_masters(c, own, "gone", "semaphore")


def listings(m, t):
    mine, theirs = f"billing/{t}list", f"payroll/{t}list"
    ta, c = m.served("listings", "ops takes a name of payroll's", "POST", f"/locks/{theirs}", "ops", 201,
                     {"ttl_ms": 30000}, audit=("grant", "201", theirs))
    m.on_masters(c, theirs, "held")
    tb, c = m.served("listings", "billing takes a name of its own", "POST", f"/locks/{mine}", "billing", 201,
                     {"ttl_ms": 30000}, audit=("grant", "201", mine))
    m.on_masters(c, mine, "held")
    for path in ("/locks", "/elections", "/semaphores"):
        m.refused("listings", f"locker (no read right) lists {path}", "GET", path, "locker", 403, None)
    m.nobody("listings", "GET", "/locks", None)

    def names(a):
        return [x.get("name") for x in a.json().get("locks", [])] if a.status == 200 else []
    a, c = m.served("listings", "billing lists locks: its own names only", "GET", "/locks?limit=1000", "billing", 200)
    m.check(c, mine in names(a) and theirs not in names(a), f"billing's listing: {names(a)}")
    a, c = m.served("listings", "dashboard lists locks: every name", "GET", "/locks?limit=1000", "dashboard", 200)
    m.check(c, mine in names(a) and theirs in names(a), f"dashboard's listing: {names(a)}")
    m.served("listings", "billing lists elections", "GET", "/elections", "billing", 200)
    m.served("listings", "billing lists semaphores", "GET", "/semaphores", "billing", 200)
    for who, a, name in (("ops", ta, theirs), ("billing", tb, mine)):
        tok = a.json().get("token", "") if a.status == 201 else ""
        _, c = m.served("listings", f"{who} releases {name}", "DELETE", f"/locks/{name}", who, 204,
                        headers=[("Lock-Token", tok)], audit=("release", "204", name))
        m.on_masters(c, name, "gone")


def ui_state(m, t):
    m.refused("/ui/state", "locker (no read right) reads /ui/state", "GET", "/ui/state", "locker", 403, None)
    m.nobody("/ui/state", "GET", "/ui/state", None)
    for who in ("dashboard", "billing"):
        a, c = m.served("/ui/state", f"{who} reads /ui/state", "GET", "/ui/state", who, 200)
        m.check(c, a.status != 200 or isinstance(a.json().get("waiters"), list), f"no waiters list: {a.body[:160]!r}")


def force(m, t):
    theirs, mine = f"payroll/{t}f", f"billing/{t}f"
    held = {}
    for who, name in (("ops", theirs), ("billing", mine)):
        a, c = m.served("force", f"{who} takes {name}", "POST", f"/locks/{name}", who, 201, {"ttl_ms": 30000},
                        audit=("grant", "201", name))
        held[name] = a.json().get("fence") if a.status == 201 else None
        m.on_masters(c, name, "held")
    m.refused("force", "billing (no admin right) forces its own name", "DELETE", f"/locks/{mine}?force=true",
              "billing", 403, mine)
    m.refused("force", "billops (admin on billing/ only) forces payroll's", "DELETE", f"/locks/{theirs}?force=true",
              "billops", 403, theirs)
    m.nobody("force", "DELETE", f"/locks/{mine}?force=true", mine)
    for who, name in (("billops", mine), ("ops", theirs)):
        _, c = m.served("force", f"{who} forces {name}", "DELETE", f"/locks/{name}?force=true", who, 204,
                        audit=("force", "204", name))
        c["audit"]["fence"] = held[name]
        m.on_masters(c, name, "gone")


def dapr_http(m, t):
    res = f"{t}r1"
    name = f"lockstore||{res}"
    lock = {"resourceId": res, "lockOwner": "o", "expiryInSeconds": 30}
    unlock = {"resourceId": res, "lockOwner": "o"}
    m.refused("dapr http", "billing locks an app's key", "POST", DAPR_LOCK, "billing", 403, name, lock, dapr=True)
    # (without the lock right at all: refused before its body is read, for the path's store)
    m.refused("dapr http", "dashboard (read only) locks", "POST", DAPR_LOCK, "dashboard", 403, "lockstore", lock,
              dapr=True)
    m.nobody("dapr http", "POST", DAPR_LOCK, "lockstore", lock, dapr=True)   # (body unread: the path's store)
    a, c = m.served("dapr http", "app locks its key", "POST", DAPR_LOCK, "app", 200, lock, dapr=True,
                    audit=("grant", "200", name))
    m.check(c, a.status != 200 or a.json().get("success") is True, f"not granted: {a.body[:160]!r}")
    m.on_masters(c, name, "held")
    m.refused("dapr http", "billing unlocks the app's key", "POST", DAPR_UNLOCK, "billing", 403, name, unlock,
              dapr=True)
    a, c = m.served("dapr http", "app unlocks it", "POST", DAPR_UNLOCK, "app", 200, unlock, dapr=True,
                    audit=("release", "200", name))
    m.on_masters(c, name, "gone")


STEPS = (("locks", locks), ("elections", elections), ("semaphores", semaphores), ("listings", listings),
         ("/ui/state", ui_state), ("force", force), ("dapr http", dapr_http))


def run(t, masters, log):
    """Every family on transport t; the cases, their audit lines checked."""
    m = Matrix(t, masters)
    for family, fn in STEPS:
        n = len(m.cases)
        try:
            fn(m, t.tag)
        except Exception as e:  # noqa: BLE001 (a case that broke is a failed case)
            m.cases.append({"family": family, "kind": "error", "what": "the family's run", "status": None,
                            "problems": [f"{type(e).__name__}: {e}"], "audit": None})
        m.audit_check(len(m.cases))
        bad = [c for c in m.cases[n:] if c["problems"]]
        log(f"{t.name} {family}: {len(m.cases) - n} cases, {len(bad)} failed")
    m.audit_whole()
    return m.cases
