#!/usr/bin/env python3
"""The `containers` suite: builds deploy/Dockerfile and runs docker-compose.yml
for real, with podman and podman-compose (no Docker engine runs here, and no
container registry is reachable, so the base images are made locally).

  1. installs podman, podman-compose, runc, debootstrap, netavark,
     aardvark-dns, iptables (netavark's firewall setup needs it) if missing
     (root);
  2. makes the base images from Debian's archive with debootstrap and
     `podman import` (debian:bookworm and a -slim stand-in) and a stand-in for
     the compose file's Redis image, unless they exist already (cached);
  3. `podman build --format docker --pull=never -f deploy/Dockerfile`;
  4. `podman-compose up` under a unique project name, on a free loopback port;
  5. checks what a user sees: /readyz with five masters up, the README's curl
     examples, the locks on all five masters, uid/gid 10001 with entries,
     `podman healthcheck run` passing (and failing when pointed at a wrong
     port), `redlockd --health-check` following REDLOCKD_LISTEN, the masters'
     maxmemory-policy noeviction and appendfsync always, and `podman stop`
     making redlockd exit 0 within a few seconds;
  6. deploy/k8s/app-with-sidecar.yaml's pod, made from the manifest's own
     values beside the compose masters (containers_sidecar.py): redlockd on
     a Unix socket in an emptyDir-like volume with the manifest's mode,
     users and fsGroup, the app's script taking and releasing its lock over
     the socket, its exec probes, the `redlock` client over the socket, a
     user outside the socket's group refused, a stale socket replaced after
     a SIGKILL, the socket removed at a stop;
  7. deploy/compose.tls.yml under a project of its own: certificates and an
     ACL file from deploy/redis-tls-certs.sh (openssl, on this machine),
     five TLS-only, ACL-only masters and redlockd; /readyz ready with every
     master up over TLS, a lock's token on all five (redis-cli --tls as the
     ACL user), release 204, the masters refusing clear text, clients without
     a certificate and clients not logged in; a second redlockd trusting
     another CA is not ready, /readyz naming the certificate failure; all
     of it removed at the end of the step, certificates included;
  8. the README's two steps on a bare Debian 12: a new container from the
     debootstrap bookworm image (nothing installed beyond minbase) gets the
     source tree (git's tracked files, as they are in the work tree), runs
     ./scripts/run.sh, which must install everything it needs with apt-get,
     build and serve /readyz with five masters up within BARE_DEADLINE_S, and
     then the README's curl lines under "Using it" run inside it as printed
     (201 with the JSON fields, 409 locked, 204, the script block); the .deb
     files are cached in /var/tmp/redlockd-containers/apt-archives;
  9. always tears down what it made (compose down -v, its own containers,
     volumes and network), and prints the time of each step and the image size
     (also written to OUT_DIR/containers-report.md; run.sh's output in the
     bare container goes to OUT_DIR/containers-bare-run.log).

A machine that cannot run containers at all fails with one line saying so.

usage: containers.py SOURCE_ROOT OUT_DIR
"""
import os
import sys

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from containers_setup import *  # noqa: F401,F403,E402
from containers_checks import *  # noqa: F401,F403,E402
from containers_tls import tls_masters  # noqa: E402
from containers_sidecar import sidecar_socket  # noqa: E402
from containers_bare import bare_bookworm  # noqa: E402

compose_started = False
detached_teardown = False  # set when a signal handed the teardown to a detached process


def report(image_size):
    lines = ["| step | seconds | note |", "|---|---:|---|"]
    lines += [f"| {n} | {dt:.1f} | {note.strip()} |" for n, dt, note in steps]
    if image_size:
        lines.append(f"\nredlockd image: {image_size / 1e6:.1f} MB (podman image inspect .Size)")
    text = "\n".join(lines)
    print("\ncontainers suite:\n" + text, flush=True)
    try:
        with open(os.path.join(OUT, "containers-report.md"), "w") as f:
            f.write(text + "\n")
    except OSError:
        pass


def main():
    global compose_started

    def on_term(sig, frame):
        # meson sends SIGKILL half a second after SIGTERM: a detached copy of
        # this script does the teardown.
        global detached_teardown
        if (compose_started or extra_containers) and not detached_teardown:
            detached_teardown = True
            subprocess.Popen([sys.executable, os.path.abspath(__file__), ROOT, OUT, "--teardown", PROJECT],
                             start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        raise Fail(f"interrupted by signal {sig} (the suite's time limit?); teardown continues detached")
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    failure, image_size = None, 0
    t_all = time.monotonic()
    try:
        install()
        configure_podman()
        sweep_stale()
        steps.append(("install and configure podman", time.monotonic() - t_all, ""))
        redis_image, image, redis_services = compose_names()
        check(len(redis_services) == 5, f"five Redis services in the compose file, found {redis_services}")
        with step("base images debian:bookworm, bookworm-slim") as s:
            base_images(s)
        smoke()
        with step(f"Redis stand-in {redis_image}") as s:
            redis_standin(s, redis_image)
        with step("podman build -f deploy/Dockerfile") as s:
            old = image_id(image)
            st, out, err = run(["podman", "build", "--format", "docker", "--pull=never",
                                "-f", os.path.join(ROOT, "deploy", "Dockerfile"), "-t", image, ROOT],
                               900, check=False)
            with open(os.path.join(OUT, "containers-build.log"), "w") as f:
                f.write(out + err)
            check(st == 0, f"podman build failed (exit {st}):\n{tail(out + err, 40)}")
            drop_replaced(old, image)
            drop_stale_stages(out + err)
            s.note = "(%d of %d steps from the layer cache)" % (
                (out + err).count("--> Using cache"), len(re.findall(r"STEP \d+/\d+: (?!FROM)", out + err)))
            image_size = int(podman("image", "inspect", "--format", "{{.Size}}", image)[1].strip())
            hc = podman("image", "inspect", "--format", "{{json .HealthCheck}}", image)[1]
            check("--health-check" in hc, f"the image's HEALTHCHECK is not redlockd --health-check: {hc}")
        with step("podman-compose up, until /readyz shows 5 masters up"):
            with socket.socket() as so:
                so.bind(("127.0.0.1", 0))
                port = so.getsockname()[1]
            env = dict(os.environ, REDLOCKD_HOST_PORT=str(port))
            compose_started = True
            st, out, err = run(["podman-compose", "-p", PROJECT, "-f", COMPOSE, "up", "-d", "--no-build"],
                               300, check=False, env=env)
            with open(os.path.join(OUT, "containers-compose-up.log"), "w") as f:
                f.write(out + err)
            # podman-compose answers 0 even when a container failed: judge by /readyz.
            try:
                wait_ready(port, len(redis_services))
            except Fail as e:
                raise Fail(f"{e}\npodman-compose up said:\n{tail(out + err, 20)}") from None
        with step("checks"):
            r = checks(port, image, redis_services)
        with step("podman stop redlockd (SIGTERM)") as s:
            stop(r, s)
        sidecar_socket(image, redis_services)
        tls_masters()
        bare_bookworm()
    except Cannot as e:
        print("containers: FAIL: cannot run containers on this machine: " + str(e), flush=True)
        sys.exit(1)
    except Fail as e:
        failure = str(e)
    except BaseException:
        if not detached_teardown:
            teardown()
        raise
    errors = []
    if not detached_teardown:
        with step("teardown (compose down -v, own containers)"):
            errors = teardown()
    steps.append(("total", time.monotonic() - t_all, ""))
    report(image_size)
    if failure or errors:
        print("containers: FAIL: " + (failure or "") + ("\n" if failure and errors else "")
              + "\n".join(errors), flush=True)
        sys.exit(1)
    print("containers: all checks passed", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[3] == "--teardown":   # the detached teardown of on_term
        PROJECT = sys.argv[4]
        os.environ["CONTAINERS_CONF"] = os.path.join(STATE, "containers.conf")
        teardown()
    else:
        main()
