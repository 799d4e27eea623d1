#!/usr/bin/env python3
"""The floors of src/ (docs/design.md, "The floors"): uses run one way, from a
higher floor to a lower one, and never round in a circle.

  base < masters < engine < recipes < front < main.c;  cli uses base only

Checked twice, so that neither a stray #include nor a stray extern slips by:
  - includes: every quoted #include in src/ is resolved to the folder it
    names. A file includes its own folder's headers by name, and another
    folder's one public header by path (engine/engine.h), never that
    folder's other headers. The graph of folders those includes draw has no
    circle, and no edge runs from a lower floor to a higher one;
  - symbols: in the built objects (nm), no floor uses a function or a
    variable that a higher floor defines.
  - calls: the files' objects call one another without a circle (none
    spans http.c and the route handlers, say), except within one module
    split into files (MODULE_CIRCLES: master_*.c, redlock*.c, hold*.c);
  - names: every external symbol carries its floor's or module's prefix.
And no file of code in src/, tests/, bench/ or scripts/ is longer than 600
lines, and every floor has its public header.

Before the real tree, each check is fed a small tree or pair of objects
broken on purpose (a negative control) and must catch it.

usage: check_layers.py SOURCE_ROOT BUILD_ROOT
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

FLOORS = ["base", "masters", "engine", "recipes", "front"]
# What each folder may use: the floors below it. main.c (top) wires them all.
MAY_USE = {f: set(FLOORS[:i]) for i, f in enumerate(FLOORS)}
MAY_USE["top"] = set(FLOORS)
MAY_USE["cli"] = {"base"}
MAX_LINES = 600
# Headers generated at build time, and the folder whose code includes them.
GENERATED = {"dapr_lock.pb-c.h": "front", "ui_assets.h": "front"}
# Quoted includes, and bracketed ones that name a folder of src/ (which -I
# src/ would find too); system headers are not ours to check.
INCLUDE = re.compile(r'^\s*#\s*include\s+(?:"([^"]+)"|<((?:%s)/[^>]+)>)' % "|".join(FLOORS + ["cli"]),
                     re.M)


def folder_of(rel):
    """src/engine/redlock.c -> engine; src/main.c -> top."""
    parts = rel.split("/")
    if len(parts) == 2:
        return "top"
    return parts[1]


def sources(root):
    out = []
    for dirpath, _, names in os.walk(os.path.join(root, "src")):
        for n in names:
            if n.endswith((".c", ".h")):
                out.append(os.path.relpath(os.path.join(dirpath, n), root))
    return sorted(out)


def check_includes(root):
    """Returns (problems, edges, lengths): edges maps (from, to) folder to the
    files; lengths is code_lengths(root)."""
    problems, edges = [], {}
    for rel in sources(root):
        me = folder_of(rel)
        text = open(os.path.join(root, rel), encoding="utf-8").read()
        for quoted, bracketed in INCLUDE.findall(text):
            inc = quoted or bracketed
            if "/" not in inc:
                here = os.path.join(root, os.path.dirname(rel), inc)
                if not os.path.exists(here) and GENERATED.get(inc) != me:
                    problems.append(f"{rel}: includes \"{inc}\", which is not in its own folder; "
                                    f"another folder's header is named by path (engine/engine.h)")
                continue
            to = inc.split("/")[0]
            if to not in FLOORS and to != "cli":
                problems.append(f"{rel}: includes \"{inc}\", which names no folder of src/")
                continue
            if to == me:
                problems.append(f"{rel}: includes its own folder's \"{inc}\" by path; by name is the rule")
                continue
            if inc != f"{to}/{to}.h":
                problems.append(f"{rel}: includes \"{inc}\", which is private to {to}/; "
                                f"only {to}/{to}.h is public")
            edges.setdefault((me, to), []).append(rel)
    for (a, b), files in sorted(edges.items()):
        if b not in MAY_USE.get(a, set()):
            problems.append(f"{a}/ uses {b}/, a floor above it or beside it (in {', '.join(files[:3])})")
    cycle = find_cycle({a for a, _ in edges} | {b for _, b in edges}, edges)
    if cycle:
        problems.append("include circle between folders: " + " -> ".join(cycle))
    lengths = code_lengths(root)
    for rel, lines in sorted(lengths.items()):
        if lines > MAX_LINES:
            problems.append(f"{rel}: {lines} lines, over {MAX_LINES}")
    for f in FLOORS:
        if not os.path.exists(os.path.join(root, "src", f, f + ".h")):
            problems.append(f"src/{f}/ has no public header {f}/{f}.h")
    return problems, edges, lengths


def code_lengths(root):
    """{path: lines} of each file of code in src/, tests/, bench/ and scripts/
    (fuzz corpora, installed packages and caches aside)."""
    out = {}
    for top in ("src", "tests", "bench", "scripts"):
        for dirpath, dirs, names in os.walk(os.path.join(root, top)):
            dirs[:] = [d for d in dirs if d not in ("corpus", "node_modules", "__pycache__")]
            for n in names:
                if n.endswith((".c", ".h", ".py", ".js", ".sh", ".html")):
                    path = os.path.join(dirpath, n)
                    with open(path, encoding="utf-8", errors="replace") as f:
                        out[os.path.relpath(path, root)] = sum(1 for _ in f)
    return out


def find_cycle(nodes, edges):
    """A circle in the directed graph, as a list that ends where it starts, or None."""
    succ = {n: sorted(b for (a, b) in edges if a == n) for n in nodes}
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in succ[n]:
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(nodes):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def object_floor(path):
    """The floor of one of meson's object files: src/redlockd.p/engine_redlock.c.o -> engine."""
    base = os.path.basename(path)
    if "/src/cli/" in path.replace(os.sep, "/"):
        return "cli"
    if base.startswith("meson-generated_"):
        return "front"
    if base == "main.c.o":
        return "top"
    first = base.split("_")[0]
    return first if first in FLOORS else None


# What AddressSanitizer and UBSan add to an object (ODR indicators such as
# __odr_asan.NAME, their hooks): the compiler's, not the code's.
SANITIZER_SYMBOLS = ("__odr_asan", "__asan", "__ubsan", "__sanitizer")


def nm_lines(o, *flags):
    """nm's lines of object o, split, without the sanitizers' symbols."""
    out = subprocess.run(["nm", *flags, o], capture_output=True, text=True, check=True).stdout
    return [p for p in (line.split() for line in out.splitlines()) if p and not p[-1].startswith(SANITIZER_SYMBOLS)]


def check_symbols(objects):
    """Returns (problems, checked, placed): uses of a symbol defined on a
    higher floor, how many uses across floors were checked, and the floors
    whose objects were seen. An object no floor can be told of is a problem
    too: it would go unchecked."""
    defined, used, problems, placed = {}, [], [], set()
    for o in objects:
        floor = object_floor(o)
        if floor is None:
            problems.append(f"{o}: no floor of src/ by its name; the symbol check cannot place it")
            continue
        placed.add(floor)
        for p in nm_lines(o):
            if len(p) == 3 and p[1] in "TDBRC":
                defined.setdefault(p[2], set()).add(floor)
            elif len(p) == 2 and p[0] == "U":
                used.append((floor, p[1], o))
    checked = 0
    for floor, sym, o in used:
        for owner in defined.get(sym, ()):
            if owner == floor:
                continue
            checked += 1
            if owner not in MAY_USE[floor]:
                problems.append(f"{os.path.basename(o)} ({floor}/) uses {sym}, defined on {owner}/")
    return problems, checked, placed


# Every external symbol carries its folder's or its module's prefix
# (../shared/STYLE.md, "Names"): a reader of wake() or on_header() cannot
# tell which room it lives in, and a linker cannot either.
PREFIXES = {
    "base": ("conf_", "log_", "loop_", "rules_", "token_", "jsonio_", "metrics_", "listener_", "deadline_",
             "testhook_", "principals_", "principal_", "audit_"),
    "masters": ("mpool_", "master_", "mscript_", "script_", "scripts_", "quarantine_", "marker_", "sha1_",
                "mtls_", "mlink_"),
    "engine": ("rl_", "quorum_"),
    "recipes": ("hold_", "election_", "sem_", "list_"),
    "front": ("http_", "grpc_", "api_", "healthcheck_", "ui_", "auth_"),
    "cli": ("cli_", "main"),
    "top": ("main",),
}


# Modules split into several files that call one another both ways: an
# object's name (floor_file) starting with one of these is of that module.
MODULE_CIRCLES = ("masters_master_", "engine_redlock", "recipes_hold")


def check_call_circles(objects):
    """Circles of calls between objects (by the symbols one uses and another
    defines), but those inside one module of MODULE_CIRCLES. Returns
    (problems, calls): each circle found, and how many calls from one
    object to another were seen."""
    defined, uses = {}, {}
    for o in objects:
        if object_floor(o) is None:
            continue
        name = os.path.basename(o)[:-len(".c.o")] if o.endswith(".c.o") else os.path.basename(o)
        for p in nm_lines(o):
            if len(p) == 3 and p[1] in "TDBRC":
                defined.setdefault(p[2], name)
            elif len(p) == 2 and p[0] == "U":
                uses.setdefault(name, set()).add(p[1])
    edges = {(a, defined[u]) for a, us in uses.items() for u in us if u in defined and defined[u] != a}
    problems, nodes = [], {a for a, _ in edges} | {b for _, b in edges}
    while True:
        cycle = find_cycle(nodes, edges)
        if not cycle:
            break
        module = next((m for m in MODULE_CIRCLES if all(n.startswith(m) for n in cycle)), None)
        if not module:
            problems.append("a circle of calls: " + " -> ".join(cycle))
        edges.discard((cycle[-2], cycle[-1]))   # cut it, and look for another
    return problems, len({e for e in edges}) + len(problems)


def check_prefixes(objects):
    """External symbols (defined, not static) without their floor's or
    module's prefix. Code generated by protoc-c (dapr_pb) is not ours."""
    problems, seen = [], 0
    for o in objects:
        floor = object_floor(o)
        if floor is None or "dapr_pb" in o:
            continue
        for p in nm_lines(o, "-g", "--defined-only"):
            if len(p) != 3 or p[1] not in "TDBRCVW":
                continue
            seen += 1
            if not p[2].startswith(PREFIXES[floor]):
                problems.append(f"{os.path.basename(o)} ({floor}/) defines {p[2]}, without a prefix of "
                                f"its floor or module ({', '.join(PREFIXES[floor])})")
    return problems, seen


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def good_tree(root):
    for i, f in enumerate(FLOORS):
        below = "".join(f'#include "{g}/{g}.h"\n' for g in FLOORS[:i])
        write(root, f"src/{f}/{f}.h", below + f'#include "part.h"\n')
        write(root, f"src/{f}/part.h", "")
        write(root, f"src/{f}/part.c", f'#include "{f}.h"\n#include "part_int.h"\n')
        write(root, f"src/{f}/part_int.h", "")
    write(root, "src/main.c", "".join(f'#include "{g}/{g}.h"\n' for g in FLOORS))


def negative_controls(failures):
    """Each broken tree must be caught; the unbroken one must pass."""
    # what: (how to break the good tree, what the report must say)
    controls = {
        "a circle: base includes masters": (lambda r: write(
            r, "src/base/part.c", '#include "base.h"\n#include "masters/masters.h"\n'),
            "include circle between folders: base -> masters -> base"),
        "an upward use without a circle": (lambda r: write(
            r, "src/masters/part.c", '#include "masters.h"\n#include "front/front.h"\n'),
            "masters/ uses front/, a floor above it"),
        "another folder's private header": (lambda r: write(
            r, "src/recipes/part.c", '#include "recipes.h"\n#include "engine/part_int.h"\n'),
            "private to engine/"),
        "a bracketed include of another folder's private header": (lambda r: write(
            r, "src/front/part.c", '#include "front.h"\n#include <engine/part_int.h>\n'),
            "private to engine/"),
        "a bare include of another folder's header": (lambda r: write(
            r, "src/front/part.c", '#include "front.h"\n#include "redlock.h"\n'),
            "is not in its own folder"),
        "the client using the engine": (lambda r: write(
            r, "src/cli/cli.c", '#include "engine/engine.h"\n'),
            "cli/ uses engine/"),
        "a file over 600 lines": (lambda r: write(r, "src/engine/part.c", "int x;\n" * 601),
                                  "601 lines, over 600"),
        "a test over 600 lines": (lambda r: write(r, "tests/api/test_x.py", "x = 1\n" * 601),
                                  "tests/api/test_x.py: 601 lines, over 600"),
        "a floor without its public header": (lambda r: (
            os.remove(os.path.join(r, "src/masters/masters.h")),
            write(r, "src/masters/part.c", '#include "part_int.h"\n')),
            "src/masters/ has no public header"),
    }
    with tempfile.TemporaryDirectory() as r:
        good_tree(r)
        problems, edges, _ = check_includes(r)
        if problems or not edges:
            failures.append(f"the unbroken tree was refused or drew no edge: {problems}")
    for what, (breakit, expect) in controls.items():
        with tempfile.TemporaryDirectory() as r:
            good_tree(r)
            breakit(r)
            problems, _, _ = check_includes(r)
            hit = [p for p in problems if expect in p]
            if not hit:
                failures.append(f"negative control not caught: {what} (wanted \"{expect}\", got {problems})")
            else:
                print(f"negative control caught ({what}): {hit[0]}")
    # Symbols: base calling a function the engine defines, built for real.
    with tempfile.TemporaryDirectory() as r:
        os.makedirs(os.path.join(r, "src", "x.p"))
        write(r, "lo.c", "int engine_fn(void);\nint base_fn(void) { return engine_fn(); }\n")
        write(r, "hi.c", "int base_fn(void);\nint engine_fn(void) { return 1; }\nint other(void) { return base_fn(); }\n")
        lo = os.path.join(r, "src", "x.p", "base_lo.c.o")
        hi = os.path.join(r, "src", "x.p", "engine_hi.c.o")
        for src, obj in (("lo.c", lo), ("hi.c", hi)):
            subprocess.run(["cc", "-c", os.path.join(r, src), "-o", obj], check=True)
        problems, checked, _ = check_symbols([lo, hi])
        if len(problems) != 1 or "engine_fn" not in problems[0] or checked != 2:
            failures.append(f"negative control of the symbol check: expected one upward use of "
                            f"engine_fn in 2 checked, got {problems} in {checked}")
        else:
            print(f"negative control caught (a symbol used upward): {problems[0]}")
    # Prefixes: an engine object defining wake() and rl_wake().
    with tempfile.TemporaryDirectory() as r:
        os.makedirs(os.path.join(r, "src", "x.p"))
        write(r, "e.c", "int wake(void) { return 0; }\nint rl_wake(void) { return 1; }\n"
                        "static int quiet(void) { return 2; }\nint rl_other(void) { return quiet(); }\n")
        obj = os.path.join(r, "src", "x.p", "engine_e.c.o")
        subprocess.run(["cc", "-c", os.path.join(r, "e.c"), "-o", obj], check=True)
        problems, seen = check_prefixes([obj])
        if len(problems) != 1 or " wake," not in problems[0] or seen != 3:
            failures.append(f"negative control of the prefix check: expected wake alone of 3, got {problems} "
                            f"of {seen}")
        else:
            print(f"negative control caught (an unprefixed external symbol): {problems[0]}")


def call_circle_control(failures):
    """A table (front_http) that calls a handler (front_http_locks) that
    calls back: caught; a module's own files (masters_master_a and _b)
    calling each other: let be."""
    with tempfile.TemporaryDirectory() as r:
        os.makedirs(os.path.join(r, "src", "x.p"))
        files = {"front_http": "int http_handler(void);\nint http_serve(void) { return http_handler(); }\n",
                 "front_http_locks": "int http_serve(void);\nint http_handler(void) { return http_serve() + 1; }\n",
                 "masters_master_a": "int master_b(void);\nint master_a(void) { return master_b(); }\n",
                 "masters_master_b": "int master_a(void);\nint master_b(void) { return master_a(); }\n"}
        objs = []
        for name, text in files.items():
            write(r, name + ".c", text)
            objs.append(os.path.join(r, "src", "x.p", name + ".c.o"))
            subprocess.run(["cc", "-c", os.path.join(r, name + ".c"), "-o", objs[-1]], check=True)
        problems, _ = check_call_circles(objs)
        if len(problems) != 1 or "front_http" not in problems[0] or "master" in problems[0]:
            failures.append(f"negative control of the call-circle check: expected the http circle alone, got {problems}")
        else:
            print(f"negative control caught ({problems[0]})")


def main():
    root, build = sys.argv[1], sys.argv[2]
    failures = []
    negative_controls(failures)
    call_circle_control(failures)

    problems, edges, lengths = check_includes(root)
    failures += problems
    print("floors used, by #include (from -> to: files):")
    for (a, b), files in sorted(edges.items(), key=lambda e: (e[0][0], e[0][1])):
        print(f"  {a:8} -> {b:8} {len(files)}")

    objects = [o for o in glob.glob(os.path.join(build, "src", "**", "*.o"), recursive=True)]
    if len(objects) < 40:
        failures.append(f"only {len(objects)} objects under {build}/src: build redlockd and redlock first")
    problems, checked, placed = check_symbols(objects)
    failures += problems
    for f in FLOORS + ["cli", "top"]:
        if f not in placed:
            failures.append(f"no object of {f}/ under {build}/src: the symbol check would not see it")
    if checked == 0:
        failures.append("the symbol check found no use across floors to check")
    problems, calls = check_call_circles(objects)
    failures += problems
    print(f"calls between objects: {calls}, in circles outside a module: {len(problems)}")
    if calls < 100:
        failures.append(f"the call-circle check saw only {calls} calls between objects")
    problems, seen = check_prefixes(objects)
    failures += problems
    if seen < 100:
        failures.append(f"the prefix check saw only {seen} external symbols")
    print(f"external symbols with their floor's or module's prefix: {seen - len(problems)} of {seen}")
    print(f"uses of a symbol across floors in {len(objects)} objects: {checked}, "
          f"upward: {len(problems)}")

    longest = max((rel for rel in lengths if rel.startswith("src" + os.sep)), key=lengths.get)
    print(f"longest file in src/: {longest}, {lengths[longest]} lines; "
          f"files of code over {MAX_LINES} lines in src/, tests/, bench/, scripts/: "
          f"{sum(1 for n in lengths.values() if n > MAX_LINES)}")
    if failures:
        print("layer checks failed:")
        for f in failures:
            print("  " + f)
        sys.exit(1)
    print("layer checks passed")


if __name__ == "__main__":
    main()
