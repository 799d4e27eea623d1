#!/usr/bin/env python3
"""The documents tell clients to count validity_ms from the moment they sent
the request (the hop back is not subtracted), never from when the answer
arrived: a client that counts from the answer can hold a lock after it
expired on the masters, and with a short TTL one TCP retransmit makes two
holders. Checks the README, docs/safety.md and api/openapi.yaml.

usage: check_validity_docs.py SOURCE_ROOT
"""
import re
import sys

ROOT = sys.argv[1]
failures = []
WRONG = re.compile(r"from the (moment|time) (it|you|the caller) (got|received|gets|receives) the answer"
                   r"|rely on the lock from the answer", re.I)
RIGHT = re.compile(r"from (the moment|when) (you|the caller|it) sent (its|your|the) request", re.I)

for rel in ["README.md", "docs/safety.md", "api/openapi.yaml"]:
    try:
        text = open(f"{ROOT}/{rel}", encoding="utf-8").read()
    except OSError as e:
        failures.append(f"{rel}: {e.strerror}")
        continue
    flat = re.sub(r"\s+", " ", text.replace("*", "").replace("`", ""))
    for m in WRONG.finditer(flat):
        failures.append(f"{rel}: counts validity from the answer: ...{flat[max(0, m.start() - 60):m.end() + 20]}...")
    if not RIGHT.search(flat):
        failures.append(f"{rel}: never says validity counts from when the request was sent")

# The negative control: the checker catches the wording the README had.
old = "While a caller's validity_ms (counted from the moment it got the answer) has not run out"
if not WRONG.search(old):
    failures.append("the checker no longer catches the old, wrong wording")

for f in failures:
    print("FAIL:", f)
print(f"validity docs: {len(failures)} problems in README.md, docs/safety.md, api/openapi.yaml")
sys.exit(1 if failures else 0)
