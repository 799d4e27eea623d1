/* healthcheck.h - `redlockd --health-check`: a probe for container
 * HEALTHCHECKs, Kubernetes exec probes and scripts, so that no curl (or bash
 * /dev/tcp with a hard-coded address) is needed beside the daemon.
 *
 * It reads the same configuration as the daemon (flags and REDLOCKD_*
 * variables, conf.h), sends `GET /healthz` with a short deadline to the
 * first TCP --listen address (over HTTPS when --tls-cert-file is set,
 * without checking the certificate, and without a client certificate:
 * /healthz needs none), or, when every listener is a Unix socket, to the
 * first one, and prints one line. A wildcard listen address (0.0.0.0 or ::)
 * is probed on the matching loopback address.
 * It starts nothing else: no masters, no threads, no HTTP server.
 */
#ifndef RL_HEALTHCHECK_H
#define RL_HEALTHCHECK_H

#include <stdio.h>

#include "base/base.h"

/* The whole probe, from connect to the status line. */
#define HEALTHCHECK_TIMEOUT_MS 2000

/* Probes the listener above and writes one line to out ("healthy: ..." or
 * "unhealthy: ..." with the reason). Returns the process exit status:
 * 0 when /healthz answered 200 within HEALTHCHECK_TIMEOUT_MS, 1 otherwise. */
int healthcheck_run(const conf *c, FILE *out);

#endif
