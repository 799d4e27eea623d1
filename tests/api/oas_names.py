#!/usr/bin/env python3
"""Names in Unicode, and the listing's errors in the prose (issue 41,
finding C), for test_openapi.py.

utf8_names: a standard JSON Schema validator (python3-jsonschema, Draft
2020-12) applies the document's patterns to the decoded Unicode text, as a
generated client does; names, owners, candidates and values of letters of
any script and emoji must pass it, and the service must serve them.
listing_docs_agree: every error docs/api.md and docs/ops.md list for a
listing is one the document allows.
"""
import os
import re
import urllib.parse

import jsonschema

import oas_harness
from oas_harness import ROOT, Streamed, expect, fail, secrets

NAMES = ["été", "名前", "🔒", "caf\u00e9 \u6771\u4eac \U0001F512", "é" * 100]
REFUSED = ["a\u0001b", "a\u007fb", "tab\there"]


def standard(schema, what):
    """A validator for a part of the document, as any client library
    builds one (references resolved against the whole document)."""
    v = jsonschema.Draft202012Validator(schema, resolver=jsonschema.RefResolver("", oas_harness.SPEC.doc))
    v.check_schema(schema)
    return v


def utf8_names(A):
    doc = oas_harness.SPEC.doc
    comp = doc["components"]
    name_v = standard(comp["parameters"]["Name"]["schema"], "Name")
    text = {k: standard({"$ref": f"#/components/schemas/{k}"}, k)
            for k in ["LockName", "Owner", "Candidate", "ElectionValue"]}
    if "200 bytes" not in comp["parameters"]["Name"]["description"]:
        fail("the Name parameter does not state its limit in bytes")
    for name in NAMES:
        for what, v in [("the Name parameter", name_v), ("LockName", text["LockName"])]:
            errs = [e.message for e in v.iter_errors(name)]
            if errs:
                fail(f"a standard validator refuses the name {name!r} as {what}: {errs[0][:200]}")
        for k in ["Owner", "Candidate", "ElectionValue"]:
            short = name[:16]
            if not text[k].is_valid(short):
                fail(f"a standard validator refuses {short!r} as {k}")
        path = "/locks/" + urllib.parse.quote(name, safe="")
        probs = oas_harness.SPEC.request_problems("POST", path, {}, b'{"owner": "%s"}' % name.encode())
        if probs:
            fail(f"the request schemas refuse POST {path}: {probs}")
        secrets.add(name)
        g = A.req("POST", path, {"ttl_ms": 60000, "owner": name[:32]}, what=f"acquire {name!r}")
        if not expect(g, 201, what=f"acquire {name!r}"):
            continue
        grant = g.json()
        secrets.add(grant["token"])
        if grant["name"] != name:
            fail(f"the grant of {name!r} names {grant['name']!r}")
        s = A.req("GET", path, what=f"inspect {name!r}")
        if expect(s, 200, what=f"inspect {name!r}") and s.json().get("owner") != name[:32]:
            fail(f"GET {path}: {s.json()}, not owned by {name[:32]!r}")
        expect(A.req("DELETE", path, headers={"Lock-Token": grant["token"]}), 204, what=f"release {name!r}")
    # An election of such a name, candidate and value.
    name = "名前-é"
    secrets.add(name)
    c = Streamed(A, "POST", "/elections/" + urllib.parse.quote(name, safe=""),
                 {"candidate": "候補 🔒", "value": "値 ✓", "ttl_ms": 3000})
    if expect(c.a, 201, what=f"campaign {name!r}"):
        ev = c.until(lambda e: e.get("event") != "campaigning", 5, f"{name!r} elected")
        if not ev or ev.get("event") != "elected" or ev.get("candidate") != "候補 🔒":
            fail(f"the campaign of {name!r}: {ev}")
    c.finish()
    for name in REFUSED:
        if name_v.is_valid(name):
            fail(f"a standard validator accepts the name {name!r}, which the service refuses")
        path = "/locks/" + urllib.parse.quote(name, safe="")
        if not oas_harness.SPEC.request_problems("POST", path):
            fail(f"the request schemas admit POST {path}")
        expect(A.req("POST", path, what=f"acquire {name!r}"), 400, "bad_name", f"acquire {name!r}")


def _pairs(text):
    return set((int(s), c) for s, c in re.findall(r"`(\d{3}) ([a-z_]+)`", text))


def listing_docs_agree():
    """The listing's errors docs/api.md (its calls table) and docs/ops.md
    (the listing's answers) name must be the document's for GET /locks."""
    spec = oas_harness.SPEC
    allowed = set()
    for st in spec.doc["paths"]["/locks"]["get"]["responses"]:
        key = ("op", "/locks", "GET", st)
        for field, vals in spec.documented_codes(key).items():
            allowed |= {(int(st), v) for v in vals}
    for cat in ["anyRequest", "otherMethod"]:
        for k in spec.doc.get("x-other-responses", {}).get(cat) or {}:
            allowed |= {(int(k), v) for vals in spec.documented_codes(("other", cat, "*", k)).values()
                        for v in vals}
    api = open(os.path.join(ROOT, "docs", "api.md"), encoding="utf-8").read()
    row = next((line for line in api.splitlines() if line.startswith("| `GET /locks?prefix=")), "")
    ops = open(os.path.join(ROOT, "docs", "ops.md"), encoding="utf-8").read()
    # (the rows of its tables: the prose also says what a listing never answers)
    section = "\n".join(line for line in ops[ops.find("## Listing what is held"):ops.find("### With the CLI")]
                        .splitlines() if line.startswith("| `"))
    if not row or not section:
        fail("docs/api.md's listing row or docs/ops.md's listing section is gone")
    for where, text in [("docs/api.md", row), ("docs/ops.md", section)]:
        pairs = _pairs(text)
        if not pairs:
            fail(f"{where} lists no error of a listing")
        for st, code in sorted(pairs - allowed):
            fail(f"{where} lists {st} {code} for a listing; api/openapi.yaml allows "
                 f"{sorted(c for c in allowed)}")
