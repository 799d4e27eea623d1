/* semaphore_api.h - the HTTP contract of counting semaphores without the
 * HTTP server (docs/semaphores.md): request bodies and tokens, and the JSON
 * of answers. Pure (cJSON only): unit-tested in tests/unit/front/test_semaphore.c.
 * Strings returned as char * are malloc'd; the caller frees.
 */
#ifndef RL_SEMAPHORE_API_H
#define RL_SEMAPHORE_API_H

#include <stdbool.h>
#include <stddef.h>

#include "api.h"
#include "recipes/recipes.h"

/* POST /semaphores/{name}: {"limit" (required), "permits", "ttl_ms",
 * "wait_ms", "hold" (one permit, ttl_ms at least HOLD_MIN_TTL_MS),
 * "owner"} into req (name not touched). Returns 0, or -1 with
 * msg naming the field. */
int api_sem_parse_acquire(const char *body, size_t len, const api_limits *lim, sem_request *req,
                      char *msg, size_t msglen);

/* PATCH/DELETE: the permits' tokens from the Lock-Token header (comma-
 * separated), else the token query parameter (the same), else the body
 * {"tokens": [...]} (or {"token": "..."}); PATCH also reads "ttl_ms".
 * Returns 0, or -1 with msg. */
int api_sem_parse_tokens(bool extend, const char *header, const char *query, const char *body, size_t len,
                     const api_limits *lim, sem_request *req, char *msg, size_t msglen);

/* The answer to a finished request: *status, the body (NULL for 204), and
 * *retry_after_s for a 409 locked. */
char *api_sem_result_json(const sem_request *req, const sem_result *res, int *status,
                      long long *retry_after_s);

#endif
