#!/usr/bin/env python3
"""What the containers suite (containers.py) stands on: its settings, steps
and commands, and the setup: podman installed and configured, the Debian
base images built from the Debian archive, the Redis stand-in image, and the teardown of what a run started."""
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml

ROOT = os.path.abspath(sys.argv[1])
OUT = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else ".")
STATE = "/var/tmp/redlockd-containers"   # podman's config file, debootstrap's scratch
PROJECT = "rlct%d" % os.getpid()         # compose project: unique per run
COMPOSE = os.path.join(ROOT, "docker-compose.yml")
COMPOSE_TLS = os.path.join(ROOT, "deploy", "compose.tls.yml")   # its own project: PROJECT-tls
# iptables: netavark (podman's network backend) runs it to set up every
# bridge network, also a build's RUN steps; podman only suggests it, and
# without it `podman build` exits 125 with "netavark: No such file or
# directory" on a bare Debian 12.
# git: lists the source files the bare-bookworm step copies into its container.
PACKAGES = ["podman", "podman-compose", "runc", "debootstrap", "netavark", "aardvark-dns", "iptables",
            "curl", "git"]
BASE = "docker.io/library/debian:bookworm"
SLIM = "docker.io/library/debian:bookworm-slim"
STOP_LIMIT_S = 5         # "podman stop" must see redlockd exit 0 within this
READY_DEADLINE_S = 90    # compose up to five masters up in /readyz
WRONG_CA_DEADLINE_S = 30 # redlockd with a wrong CA: every master down with the cause in /readyz
BARE_DEADLINE_S = 900    # bare bookworm: run.sh from nothing (apt, build) to /readyz ready
                         # (145-250 s measured; 450 s with other tests loading both cores)

steps = []               # (name, seconds, note)
extra_containers = []    # containers started by name outside compose


class Fail(Exception):
    pass


class Cannot(Exception):
    """This machine cannot run containers at all: one line, and a failure."""


def cannot(reason):
    raise Cannot(reason)


def tail(text, n=25):
    lines = (text or "").strip().splitlines()
    return "\n".join(lines[-n:])


def run(cmd, timeout, check=True, what=None, env=None, stdin=None):
    """Runs cmd in its own process group, killed as a whole on timeout or
    interruption; stdin is a file to read from (default none). Returns
    (status, stdout, stderr)."""
    what = what or " ".join(cmd[:3])
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=stdin if stdin is not None else subprocess.DEVNULL,
                         text=True, errors="replace", start_new_session=True, env=env)
    try:
        out, err = p.communicate(timeout=timeout)
    except BaseException as e:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        if isinstance(e, subprocess.TimeoutExpired):
            raise Fail(f"{what}: still running after {timeout} s") from None
        raise
    if check and p.returncode != 0:
        raise Fail(f"{what}: exit status {p.returncode}\n{tail(err or out)}")
    return p.returncode, out, err


class step:
    """Times one step: `with step("build"): ...`."""

    def __init__(self, name):
        self.name, self.note = name, ""

    def __enter__(self):
        self.t0 = time.monotonic()
        print(f"-- {self.name}", flush=True)
        return self

    def __exit__(self, *exc):
        dt = time.monotonic() - self.t0
        steps.append((self.name, dt, self.note + ("" if exc[0] is None else " (failed)")))
        print(f"   {self.name}: {dt:.1f} s {self.note}", flush=True)
        return False


def check(cond, what):
    if not cond:
        raise Fail(what)


def podman(*args, timeout=60, check=True, what=None):
    return run(["podman", *args], timeout, check=check, what=what or "podman " + " ".join(args[:2]))


# ---------------------------------------------------------------- setup

def install():
    def installed(p):
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True)
        return "install ok installed" in r.stdout
    missing = [p for p in PACKAGES if not installed(p)]
    if missing:
        if os.geteuid() != 0:
            cannot("%s missing, and installing needs root" % " ".join(missing))
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        # Another apt-get (another suite, another session) may hold apt's
        # lock: wait for it rather than fail at once with status 100.
        lock = ["-o", "DPkg::Lock::Timeout=300"]
        try:
            run(["apt-get", *lock, "update", "-qq"], 600, env=env, what="apt-get update")
            run(["apt-get", *lock, "install", "-y", "-qq", *missing], 900, env=env, what="apt-get install")
        except Fail as e:
            cannot("cannot install %s: %s" % (" ".join(missing), tail(str(e), 3).replace("\n", " / ")))
    if os.geteuid() != 0:
        cannot("the suite runs rootful podman and needs root")


def configure_podman():
    """Podman's two settings for these VMs (shared/FACTS.md): nofile at the
    hard limit (no CAP_SYS_RESOURCE to raise it) and runc (crun refuses the
    hybrid cgroup layout)."""
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard = 1048576 if hard == resource.RLIM_INFINITY else hard
    os.makedirs(STATE, exist_ok=True)
    conf = os.path.join(STATE, "containers.conf")
    with open(conf, "w") as f:
        f.write('[containers]\ndefault_ulimits = ["nofile=%d:%d", "nproc=32768:32768"]\n'
                '[engine]\nruntime = "runc"\n' % (hard, hard))
    os.environ["CONTAINERS_CONF"] = conf
    st, out, err = run(["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"], 60, check=False)
    if st != 0:
        cannot("podman info fails: " + tail(err, 1))


def debian_mirror():
    try:
        text = open("/etc/apt/sources.list.d/debian.sources").read()
        for stanza in text.split("\n\n"):
            if re.search(r"^Suites:.*\bbookworm\b", stanza, re.M) and "security" not in stanza:
                m = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
                if m:
                    return m.group(1)
    except OSError:
        pass
    return "http://deb.debian.org/debian"


# What Debian's official images add to a debootstrap tree (debuerreotype):
# apt keeps no caches and no translations; -slim also keeps no docs, man
# pages or locales of packages installed later.
APT_CONF = """Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Acquire::GzipIndexes "true";
Acquire::Languages "none";
Apt::AutoRemove::SuggestsImportant "false";
"""
SLIM_DPKG = """path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
"""
BASE_KEY = hashlib.sha256((APT_CONF + SLIM_DPKG + "1").encode()).hexdigest()[:16]


def base_images(s):
    def cached(tag):
        st, out, _ = podman("image", "inspect", "--format", '{{index .Labels "redlockd.base"}}', tag,
                            check=False)
        return st == 0 and out.strip() == BASE_KEY
    if cached(BASE) and cached(SLIM):
        s.note = "(cached)"
        return
    s.note = "(cold: debootstrap)"
    mirror = debian_mirror()
    with tempfile.TemporaryDirectory(dir=STATE, prefix="rootfs.") as tmp:
        root = os.path.join(tmp, "root")
        st, out, err = run(["debootstrap", "--variant=minbase", "bookworm", root, mirror], 900,
                           check=False)
        if st != 0:
            raise Fail(f"debootstrap from {mirror} failed:\n{tail(out + err)}")
        # The same apt sources as this machine (bookworm, -updates, -security),
        # no downloaded packages or lists.
        if os.path.exists("/etc/apt/sources.list.d/debian.sources"):
            run(["cp", "/etc/apt/sources.list.d/debian.sources", root + "/etc/apt/sources.list.d/"], 10)
            run(["rm", "-f", root + "/etc/apt/sources.list"], 10)
        run(["sh", "-c", f"rm -rf {root}/var/cache/apt/archives/*.deb {root}/var/cache/apt/*.bin "
                         f"{root}/var/lib/apt/lists/*"], 30)
        with open(root + "/etc/apt/apt.conf.d/docker-clean", "w") as f:
            f.write(APT_CONF)

        def imp(tag):
            tar = subprocess.Popen(["tar", "--numeric-owner", "-C", root, "-c", "."],
                                   stdout=subprocess.PIPE)
            try:
                run(["podman", "import", "--change", 'CMD ["bash"]', "--change",
                     "LABEL redlockd.base=" + BASE_KEY, "-", tag], 300,
                    stdin=tar.stdout, what="podman import " + tag)
            finally:
                tar.stdout.close()
                tar.wait()
        imp(BASE)
        # -slim: the same tree without docs, man pages and locales.
        run(["sh", "-c", f"rm -rf {root}/usr/share/doc/* {root}/usr/share/man/* "
                         f"{root}/usr/share/info/* {root}/usr/share/locale/*"], 60)
        with open(root + "/etc/dpkg/dpkg.cfg.d/docker", "w") as f:
            f.write(SLIM_DPKG)
        imp(SLIM)


def redis_standin(s, image):
    """Builds the Redis stand-in, tagged as the compose file names it."""
    standin(s, image, "redis-standin.Containerfile", BASE)


def standin(s, image, containerfile, base):
    """Builds a stand-in image from tests/containers/CONTAINERFILE on base,
    tagged as a deployment file names the image it stands in for; cached by
    a label over the Containerfile and the base image."""
    cf = os.path.join(ROOT, "tests", "containers", containerfile)
    base_id = podman("image", "inspect", "--format", "{{.Id}}", base)[1].strip()
    key = hashlib.sha256(open(cf, "rb").read() + base_id.encode()).hexdigest()[:16]
    st, out, _ = podman("image", "inspect", "--format", '{{index .Labels "redlockd.standin"}}', image,
                        check=False)
    if st == 0 and out.strip() == key:
        s.note = "(cached)"
        return
    s.note = "(cold)"
    old = image_id(image)
    run(["podman", "build", "--format", "docker", "--pull=never", "--label", "redlockd.standin=" + key,
         "-f", cf, "-t", image, os.path.dirname(cf)], 600, what=f"podman build ({containerfile})")
    drop_replaced(old, image)


def image_id(tag):
    st, out, _ = podman("image", "inspect", "--format", "{{.Id}}", tag, check=False)
    return out.strip() if st == 0 else None


def drop_replaced(old_id, tag):
    """Removes the image a rebuild of tag replaced (now untagged), so that
    repeated runs do not pile up images; its cached layers stay if used."""
    if old_id and old_id != image_id(tag):
        podman("rmi", old_id, check=False)


def drop_stale_stages(build_output):
    """Removes build-stage images of earlier builds (untagged, made from this
    suite's base images), keeping this build's: its layers are the cache of
    the next build. Their shared parents stay, as other images use them."""
    m = re.search(r"^--> ([0-9a-f]+)\s*\n\[2/2\] STEP 1/", build_output, re.M)
    if not m:
        return
    _, out, _ = podman("images", "-q", "--no-trunc", "--filter", "dangling=true", "--filter",
                       "label=redlockd.base", check=False)
    for i in out.split():
        if not i.replace("sha256:", "").startswith(m.group(1)):
            podman("rmi", i, check=False)


def smoke():
    st, out, err = run(["podman", "run", "--rm", "--network", "none", BASE, "true"], 120, check=False)
    if st != 0:
        cannot("podman cannot start a container: " + tail(err or out, 1))


# ---------------------------------------------------------------- teardown

def mine(name, project):
    return name.startswith(project + "_") or name.startswith(project + "-")


def teardown(project=None, compose=True):
    """Removes everything a run made: compose down -v, then whatever it
    missed (containers, pods, volumes, networks named after the project)."""
    project = project or PROJECT
    errors = []
    if compose:
        st, out, err = run(["podman-compose", "-p", project, "-f", COMPOSE, "down", "-v", "-t", "5"], 180,
                           check=False)
        if st != 0:
            errors.append("podman-compose down: " + tail(err, 3))
    _, out, _ = run(["podman", "ps", "-a", "--format", "{{.Names}}"], 30, check=False)
    for c in out.split():
        if mine(c, project):
            run(["podman", "rm", "-f", "-t", "2", c], 60, check=False)
    _, out, _ = run(["podman", "pod", "ls", "--format", "{{.Name}}"], 30, check=False)
    for p in out.split():
        if mine(p, project) or p == "pod_" + project:
            run(["podman", "pod", "rm", "-f", p], 60, check=False)
    for kind in ("volume", "network"):
        _, out, _ = run(["podman", kind, "ls", "--format", "{{.Name}}"], 30, check=False)
        for v in out.split():
            if mine(v, project):
                run(["podman", kind, "rm", "-f", v], 60, check=False)
    for d in os.listdir(STATE) if os.path.isdir(STATE) else []:
        if d.startswith((f"tls-{project}.", f"sidecar-{project}.")):   # certificates, the pod's volumes
            shutil.rmtree(os.path.join(STATE, d), ignore_errors=True)
    # Nothing of this run may be left.
    left = []
    for cmd in (["ps", "-a", "--format", "{{.Names}}"], ["volume", "ls", "--format", "{{.Name}}"],
                ["network", "ls", "--format", "{{.Name}}"]):
        left += [x for x in run(["podman", *cmd], 30, check=False)[1].split() if mine(x, project)]
    if left:
        errors.append("left behind: " + " ".join(left))
    return errors


def sweep_stale():
    """Tears down what earlier runs left when they were killed outright
    (a project rlct<pid> whose process is gone)."""
    names = set()
    for kind in ("ps -a", "volume ls", "network ls"):
        _, out, _ = run(["podman", *kind.split(), "--format", "{{.Names}}" if kind == "ps -a" else "{{.Name}}"],
                        30, check=False)
        names.update(m.group(1) for m in map(re.compile(r"^(rlct(\d+))[_-]").match, out.split()) if m)
    names.update(m.group(1) for m in map(re.compile(r"^(?:tls|sidecar)-(rlct(\d+))\.").match,
                                         os.listdir(STATE) if os.path.isdir(STATE) else []) if m)
    for project in sorted(names):
        pid = int(project[4:])
        try:
            os.kill(pid, 0)
            if pid != os.getpid() and "containers.py" in open(f"/proc/{pid}/cmdline").read():
                continue   # another run, still going
        except (ProcessLookupError, FileNotFoundError, PermissionError):
            pass
        print(f"   removing what an earlier run ({project}) left behind", flush=True)
        teardown(project, compose=False)
