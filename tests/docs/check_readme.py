#!/usr/bin/env python3
"""The README is a newcomer's page that stays true: at most 250 lines, every
flag and variable of `redlockd --help` and every option of `redlock` (and of
each of its commands) in its tables, and every docs/ page it links to
present. Negative controls: the checks catch a flag left out of a table and
a link to a page that does not exist.

usage: check_readme.py SOURCE_ROOT REDLOCKD_BIN REDLOCK_BIN
"""
import os
import re
import subprocess
import sys

ROOT, REDLOCKD, REDLOCK = sys.argv[1:4]
MAX_LINES = 250
failures = []


def helptext(*argv):
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        failures.append(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def options(text):
    """--flags and REDLOCK(D)_ variables a help text names."""
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text)) | \
        set(re.findall(r"\b(REDLOCKD?_[A-Z_]+)\b", text))


def missing(readme, names):
    """Names that do not appear in the README as code (`--x ...` or `X`)."""
    return sorted(n for n in names if not re.search(r"`" + re.escape(n) + r"[ `=|\\]", readme))


def broken_links(readme, root):
    return sorted(l for l in re.findall(r"\]\((docs/[^)#]+)", readme)
                  if not os.path.exists(os.path.join(root, l)))


readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
lines = readme.count("\n")
if lines > MAX_LINES:
    failures.append(f"README.md has {lines} lines; a newcomer's page has at most {MAX_LINES} "
                    "(long sections belong in docs/)")

server = options(helptext(REDLOCKD, "--help"))
if "--max-holds" not in server or "REDLOCKD_MAX_HOLDS" not in server:
    failures.append("redlockd --help does not name --max-holds / REDLOCKD_MAX_HOLDS")
for n in missing(readme, server):
    failures.append(f"README: redlockd's {n} is not in the flags table")

client = options(helptext(REDLOCK, "--help"))
for cmd in ["run", "elect", "acquire", "extend", "release", "status", "list", "ready"]:
    client |= options(helptext(REDLOCK, cmd, "--help"))
client -= {"--"}
if not {"--url", "--ttl", "--wait", "--grace", "REDLOCK_URL"} <= client:
    failures.append(f"redlock --help lacks options it has: {sorted(client)}")
for n in missing(readme, client):
    failures.append(f"README: redlock's {n} is not in its table")

for link in broken_links(readme, ROOT):
    failures.append(f"README links to {link}, which does not exist")

# Negative controls: the same checks on a README with a row and a page gone.
cut = re.sub(r"^\| `--max-holds N`.*\n", "", readme, flags=re.M)
if missing(cut, server) != ["--max-holds", "REDLOCKD_MAX_HOLDS"]:
    failures.append("the check misses a flag left out of the table")
if broken_links(readme + "\n[x](docs/no-such-page.md)\n", ROOT) != ["docs/no-such-page.md"]:
    failures.append("the check misses a link to a page that does not exist")

for f in failures:
    print("FAIL:", f)
print(f"README: {lines} lines, {len(server)} redlockd and {len(client)} redlock options checked, "
      f"{len(failures)} problems")
sys.exit(1 if failures else 0)
