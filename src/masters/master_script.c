/* master_script.c - the scripts the master layer sends, as text: each
 * one's SHA-1 (EVALSHA names it by that) and the group script that runs
 * several of them in one call (master.h, group commit). Pure: no sockets,
 * so the unit tests run these bodies on a real Redis through hiredis alone.
 *
 * Depends on sha1.c only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master.h"
#include "sha1.h"

void mscript_init(mscript *s) { sha1_hex(s->body, strlen(s->body), s->sha); }

/* The group script's dispatcher (master.h has the layout). A member that
 * raises an error (a redis.call refused: OOM, WRONGTYPE ...) answers that
 * error for itself alone; what it wrote before stays, as it would alone. */
static const char group_run[] =
    "local n, out = tonumber(ARGV[1]), {}\n"
    "local kp, ap = 1, 2 + 3 * n\n"
    "for i = 1, n do\n"
    "  local h = 2 + 3 * (i - 1)\n"
    "  local f, nk, na = F[tonumber(ARGV[h])], tonumber(ARGV[h + 1]), tonumber(ARGV[h + 2])\n"
    "  local keys, args = {}, {}\n"
    "  for j = 1, nk do keys[j] = KEYS[kp + j - 1] end\n"
    "  for j = 1, na do args[j] = ARGV[ap + j - 1] end\n"
    "  kp, ap = kp + nk, ap + na\n"
    "  local ok, r = pcall(f, keys, args)\n"
    "  if ok then out[i] = r\n"
    "  elseif type(r) == 'table' and r.err then out[i] = r\n"
    "  else out[i] = {err = tostring(r)} end\n"
    "end\n"
    "return out\n";

int mscript_group_init(mscript *group, mscript *const *members, int n, const char *prelude,
                       const char *const *bodies)
{
    size_t len = sizeof group_run + strlen(prelude) + 64;
    for (int i = 0; i < n; i++)
        len += strlen(bodies[i] ? bodies[i] : members[i]->body) + 80;
    char *body = malloc(len);
    if (!body)
        return -1;
    size_t off = 0;   /* len counts enough for every piece: none is cut */
#define PUT(...) (off += (size_t)snprintf(body + off, len - off, __VA_ARGS__))
    /* Each member's body as a function whose parameters shadow the globals
     * KEYS and ARGV: it sees its own keys and arguments. */
    PUT("%s", prelude);
    for (int i = 0; i < n; i++)
        PUT("local function f%d(KEYS, ARGV)\n%send\n", i + 1, bodies[i] ? bodies[i] : members[i]->body);
    PUT("local F = {");
    for (int i = 0; i < n; i++)
        PUT("%sf%d", i ? ", " : "", i + 1);
    PUT("}\n%s", group_run);
#undef PUT
    group->body = body;
    mscript_init(group);
    for (int i = 0; i < n; i++) {
        members[i]->group = group;
        members[i]->group_fn = i + 1;
    }
    return 0;
}
