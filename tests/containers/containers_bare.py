#!/usr/bin/env python3
"""The containers suite's bare Debian 12 (containers.py runs it): the
source tree in a bookworm container with nothing installed, where
./scripts/run.sh installs, builds and serves, and the README's curl lines
run as printed."""
from containers_setup import *  # noqa: F401,F403
from containers_checks import *  # noqa: F401,F403


# ---------------------------------------------------------------- a bare Debian 12

def source_tar(path):
    """Writes the source tree as a user has it after a clone into the tar file
    path: git's tracked files with their working-tree contents (so an edit not
    yet committed is what runs); without git, the tree minus what .gitignore
    keeps out at the top (build directories, state) and .git."""
    import tarfile
    st, out, _ = run(["git", "-C", ROOT, "ls-files", "-z"], 60, check=False)
    if st == 0 and out:
        names = [n for n in out.split("\0") if n and os.path.lexists(os.path.join(ROOT, n))]
    else:
        names = []
        for d, dirs, files in os.walk(ROOT):
            rel = os.path.relpath(d, ROOT)
            dirs[:] = [x for x in dirs if x != ".git" and x != "node_modules"
                       and not (rel == "." and (x.startswith("build") or x == "state"))]
            names += [os.path.normpath(os.path.join(rel, f)) for f in files]
    with tarfile.open(path, "w") as t:
        for n in sorted(names):
            ti = t.gettarinfo(os.path.join(ROOT, n), "redlockd/" + n)
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = "root"
            if ti.isreg():
                with open(os.path.join(ROOT, n), "rb") as f:
                    t.addfile(ti, f)
            else:
                t.addfile(ti)
    return len(names)


# The script polled inside the container while run.sh runs: what it has got
# to (apt, build, serving), or how it ended.
BARE_POLL = r"""
if [ -f /tmp/run.rc ]; then echo "exited $(cat /tmp/run.rc)"; exit 0; fi
if command -v curl >/dev/null && r=$(curl -s -m 2 localhost:8080/readyz) && [ -n "$r" ]; then
    echo "serving $r"; exit 0; fi
if [ -e /src/redlockd/build/build.ninja ]; then echo building; exit 0; fi
echo installing
"""


def bare_bookworm():
    """The README's two steps on a bare Debian 12: a new container from the
    suite's debootstrap bookworm image (minbase: no compiler, no Redis, no
    curl), the source tree copied in, ./scripts/run.sh run as a user runs it
    (as root: it installs what it needs with apt-get from the mirror the image
    names, builds and starts five masters and redlockd on 127.0.0.1:8080),
    then the README's curl lines under "Using it" run inside the container as
    printed. Downloaded .deb files are kept in STATE/apt-archives for the next
    run (mounted as apt's archive cache; apt-get update and every install
    still run); the package lists are not kept."""
    name = PROJECT + "-bare"
    extra_containers.append(name)
    cache = os.path.join(STATE, "apt-archives")
    os.makedirs(os.path.join(cache, "partial"), exist_ok=True)
    import fcntl
    lockf = open(os.path.join(STATE, "apt-archives.lock"), "w")
    cached = False
    try:
        # Another run (another worktree) using the cache: go without it.
        fcntl.flock(lockf, fcntl.LOCK_EX | fcntl.LOCK_NB)
        mount = ["-v", cache + ":/var/cache/apt/archives"]
        cached = True
    except OSError:
        mount = []
    # dpkg without an fsync per file (force-unsafe-io, as Docker's images long
    # had): about 500 packages of many small files on overlayfs. It changes how
    # fast they are written, not what is installed.
    speedup = os.path.join(STATE, "dpkg-unsafe-io")
    with open(speedup, "w") as f:
        f.write("force-unsafe-io\n")
    mount += ["-v", speedup + ":/etc/dpkg/dpkg.cfg.d/redlockd-test-unsafe-io:ro"]
    try:
        with step("bare bookworm: copy the source tree in") as s:
            # The default network (a bridge made by netavark): the container
            # reaches the Debian mirror, and its loopback is its own, so run.sh's
            # fixed ports 6381-6385 and 8080 meet nothing of this machine's.
            podman("run", "-d", "--name", name, *mount, BASE, "sleep", "infinity", timeout=120)
            with tempfile.NamedTemporaryFile(dir=STATE, prefix="src.", suffix=".tar") as tf:
                n = source_tar(tf.name)
                with open(tf.name, "rb") as f:
                    run(["podman", "exec", "-i", name, "sh", "-c",
                         "mkdir -p /src && tar -x --no-same-owner -C /src"], 120, stdin=f,
                        what="copy the source tree into " + name)
            s.note = f"({n} files{'' if cached else '; apt cache busy, not used'})"
        with step("bare bookworm: ./scripts/run.sh until /readyz is ready") as s:
            podman("exec", "-d", name, "bash", "-c",
                   "cd /src/redlockd && { ./scripts/run.sh > /tmp/run.log 2>&1; echo $? > /tmp/run.rc; }")
            t0 = time.monotonic()
            deadline = t0 + BARE_DEADLINE_S
            seen, state, ready = {}, "", False
            while not ready:
                st, out, err = podman("exec", name, "bash", "-c", BARE_POLL, check=False, timeout=60)
                state = out.strip() if st == 0 else f"poll failed: {tail(err, 2)}"
                phase = state.split(" ", 1)[0]
                seen.setdefault(phase, time.monotonic() - t0)
                if phase == "exited":
                    break
                if phase == "serving":
                    try:
                        j = json.loads(state.split(" ", 1)[1])
                        ready = j.get("status") == "ready" and len(j["masters"]) == 5 and all(
                            m["up"] for m in j["masters"])
                    except (ValueError, KeyError, TypeError):
                        pass
                if not ready and time.monotonic() > deadline:
                    break
                if not ready:
                    time.sleep(3)
            log = podman("exec", name, "cat", "/tmp/run.log", check=False)[1]
            with open(os.path.join(OUT, "containers-bare-run.log"), "w") as f:
                f.write(log)
            b, v = seen.get("building"), seen.get("serving")
            if b is not None and v is not None:
                s.note = "(apt-get about %.0f s, then build and start about %.0f s)" % (b, v - b)
            elif b is not None:
                s.note = "(apt-get about %.0f s, then the build did not serve)" % b
            else:
                s.note = "(apt-get or meson setup did not finish)"
            check(ready, f"./scripts/run.sh on a bare bookworm: {state[:300]} after "
                  f"{time.monotonic() - t0:.0f} s (limit {BARE_DEADLINE_S} s); its output "
                  f"(containers-bare-run.log):\n{tail(log, 30)}")
        with step("bare bookworm: the README's curl lines"):
            readme_examples(lambda script, timeout: podman("exec", name, "bash", "-c", script,
                                                           check=False, timeout=timeout), "localhost:8080")
        if cached:
            # Drops .deb files that the mirror no longer has (newer versions came).
            podman("exec", name, "apt-get", "-qq", "autoclean", check=False, timeout=60)
    finally:
        podman("rm", "-f", "-t", "0", name, check=False, timeout=60)
        lockf.close()
