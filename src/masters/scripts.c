/* scripts.c - see scripts.h. Numbers pass through Redis as strings: Lua
 * prints large doubles in exponent form, so counters are formatted with %d
 * (exact below 2^53, which every fence is) and compared as digit strings
 * where they come from outside the script. */
#include "scripts.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The first line of every script that writes what takes memory (a lock, a
 * ticket, a counter, an owner record, a limit). With it, Redis checks
 * maxmemory before the script runs at all and refuses it whole (OOM);
 * without it, only at the script's first write, and a first write that
 * takes no memory (a ZREM of expired tickets, a PEXPIRE) lets every write
 * after it past maxmemory. Scripts that only delete, extend, read or
 * publish go without: they must run on a master over its limit. */
#define TAKES_MEMORY "#!lua\n"

/* The marker check every vote script starts with (scripts.h). */
#define GUARD \
    "if ARGV[#ARGV] == '1' then\n" \
    "  local u = redis.call('HGET', KEYS[#KEYS], 'until')\n" \
    "  if not u then return {-100} end\n" \
    "  if u ~= '0' then\n" \
    "    local t = redis.call('TIME')\n" \
    "    local left = tonumber(u) - (tonumber(t[1]) * 1000000 + tonumber(t[2]))\n" \
    "    if left > 0 then return {-101, math.ceil(left / 1000)} end\n" \
    "  end\n" \
    "end\n"

/* n is a counter read back: an exact integer in 0..2^53-2 (one more must
 * still be exact). tonumber takes "nan" and "inf" too; both fail here. */
#define COUNTER_BAD(n) "(not " n " or " n " < 0 or " n " >= 9007199254740991 or " n " ~= math.floor(" n "))"

mscript script_acquire = {"acquire",
    TAKES_MEMORY
    GUARD
    /* Fair order (scripts.h): a waiter's ticket joins the name's queue when
     * it cannot take the name at once; only the oldest live ticket may take
     * it, and while tickets wait an acquire without one takes nothing. */
    "local tk = ARGV[7]\n"
    "local queued = redis.call('EXISTS', KEYS[4]) == 1\n"
    "local now\n"
    "if queued or tk ~= '' then\n"
    "  local t = redis.call('TIME')\n"
    "  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "end\n"
    "if queued then\n"
    "  local old = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, 32)\n"
    "  if #old > 0 then\n"
    "    redis.call('ZREM', KEYS[4], unpack(old))\n"
    "    redis.call('ZREM', KEYS[5], unpack(old))\n"
    "    queued = redis.call('EXISTS', KEYS[4]) == 1\n"
    "  end\n"
    "end\n"
    "if queued or (tk ~= '' and redis.call('EXISTS', KEYS[1]) == 1) then\n"
    "  if tk ~= '' then\n"
    "    local ttl = tonumber(ARGV[9])\n"
    "    redis.call('ZADD', KEYS[4], 'NX', ARGV[8], tk)\n"
    "    redis.call('ZADD', KEYS[5], now + ttl, tk)\n"
    "    if redis.call('PTTL', KEYS[4]) < ttl then\n"
    "      redis.call('PEXPIRE', KEYS[4], ttl)\n"
    "      redis.call('PEXPIRE', KEYS[5], ttl)\n"
    "    end\n"
    "  end\n"
    "  local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]\n"
    "  if head and head ~= tk then\n"
    "    local p = redis.call('PTTL', KEYS[1])\n"
    "    if p == -2 then p = " SCRIPT_QUEUE_RETRY_MS " end\n"
    "    return {0, p}\n"
    "  end\n"
    "end\n"
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
    "  if tk ~= '' then\n"
    "    redis.call('ZREM', KEYS[4], tk)\n"
    "    redis.call('ZREM', KEYS[5], tk)\n"
    "  end\n"
    "  local c = redis.call('GET', KEYS[2])\n"
    "  local f\n"
    "  if c then\n"
    "    f = tonumber(c)\n"
    "    if " COUNTER_BAD("f") " then\n"
    "      redis.call('DEL', KEYS[1])   -- undone in the same step: no lock is left\n"
    "      return redis.error_reply('ERR redlockd: fence counter ' .. KEYS[2] .. ' is not an integer below 2^53')\n"
    "    end\n"
    "    f = f + 1\n"
    "  end\n"
    /* The proposed seed (quorum_seed_fence states the same rule): taken
     * where there is no counter or it is below, if within the bound of this
     * master's clock; TIME is read only when the proposal could decide. */
    "  local p = tonumber(ARGV[5]) or 0\n"
    "  if not f or (p > 0 and f <= p) then\n"
    "    local t = redis.call('TIME')\n"
    "    local now, b = tonumber(t[1]) * 1000000 + tonumber(t[2]), tonumber(ARGV[6]) or 0\n"
    "    if p > 0 and p >= now - b and p <= now + b and p == math.floor(p) then f = p\n"
    "    elseif not f then f = now end\n"
    "  end\n"
    "  redis.call('SET', KEYS[2], string.format('%d', f), 'PX', ARGV[3])\n"
    "  if ARGV[4] ~= '' then\n"
    "    local o = ARGV[4]\n"
    "    if string.byte(o, 1) == 1 then   -- an election: stamp when its term began\n"
    "      local t = redis.call('TIME')\n"
    "      o = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) .. ' ' .. string.sub(o, 2)\n"
    "    end\n"
    "    redis.call('SET', KEYS[3], ARGV[1] .. '\\n' .. o, 'PX', ARGV[2])\n"
    "  end\n"
    "  return {1, f}\n"
    "end\n"
    "return {0, redis.call('PTTL', KEYS[1])}\n", "", false, true, NULL, true, NULL, 0, false};

mscript script_dequeue = {"dequeue",
    "redis.call('ZREM', KEYS[1], ARGV[1])\n"
    "redis.call('ZREM', KEYS[2], ARGV[1])\n"
    "if ARGV[2] ~= '' then redis.call('PUBLISH', ARGV[2], KEYS[3]) end\n"
    "return 1\n", "", true, false, NULL, false, NULL, 0, false};

mscript script_settle = {"settle",
    TAKES_MEMORY
    GUARD
    "if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('PTTL', KEYS[1]) > 0 then\n"
    "  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])\n"
    "  return 1\n"
    "end\n"
    "return 0\n", "", true, true, NULL, true, NULL, 0, false};

/* The extension where the key holds the value (script_extend and
 * script_renew share it). */
#define EXTEND_HELD \
    "local v = redis.call('GET', KEYS[1])\n" \
    "if v and (v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. " SCRIPT_VALUE_SEP_LUA ") then\n" \
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n" \
    "  local o = redis.call('GET', KEYS[3])\n" \
    "  if o and string.sub(o, 1, #v + 1) == v .. '\\n' then redis.call('PEXPIRE', KEYS[3], ARGV[2]) end\n" \
    "  local c = tonumber(redis.call('GET', KEYS[2]) or '')\n" \
    "  if " COUNTER_BAD("c") " then return {1, 0, v} end\n" \
    "  redis.call('PEXPIRE', KEYS[2], ARGV[3])\n" \
    "  return {1, c, v}\n" \
    "end\n" \
    "if v then return {-1} end\n"

mscript script_extend = {"extend",
    GUARD
    EXTEND_HELD
    "return {0}\n", "", false, true, NULL, true, NULL, 0, false};

/* A held stream's extension that also takes the masters where the key is
 * free (scripts.h). The fence counter is raised to the holder's fence,
 * never lowered, so every later grant's fence still exceeds it. */
mscript script_renew = {"renew",
    TAKES_MEMORY
    GUARD
    EXTEND_HELD
    "local raw = redis.call('GET', KEYS[2])\n"
    "local c = tonumber(raw or '')\n"
    "if raw and " COUNTER_BAD("c") " then return {0} end\n"
    "local f = tonumber(ARGV[4])\n"
    "if not c or c < f then c = f end\n"
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
    "redis.call('SET', KEYS[2], string.format('%d', c), 'PX', ARGV[3])\n"
    "if ARGV[5] ~= '' then redis.call('SET', KEYS[3], ARGV[1] .. '\\n' .. ARGV[5], 'PX', ARGV[2]) end\n"
    "return {2, c, ARGV[1]}\n", "", false, true, NULL, true, NULL, 0, false};

mscript script_inspect = {"inspect",
    GUARD
    "local v = redis.call('GET', KEYS[1])\n"
    "if not v then return {-2} end\n"
    "local c = tonumber(redis.call('GET', KEYS[2]) or '')\n"
    "if " COUNTER_BAD("c") " then c = 0 end\n"
    "local o, owner = redis.call('GET', KEYS[3]), ''\n"
    "if o and string.sub(o, 1, #v + 1) == v .. '\\n' then owner = string.sub(o, #v + 2) end\n"
    "return {redis.call('PTTL', KEYS[1]), c, #owner, v .. owner}\n", "", false, true, NULL, false, NULL, 0, false};

/* An election leader's new value: the owner key holds "<value>\n<since>
 * <candidate>\x1f<proclaimed value>" (election.h); all before the value
 * stays. Only where the
 * token (ARGV[1]) is the stored value; the owner key keeps the lock's expiry. */
mscript script_proclaim = {"proclaim",
    TAKES_MEMORY
    GUARD
    "local v = redis.call('GET', KEYS[1])\n"
    "if v and v == ARGV[1] then\n"
    "  local o = redis.call('GET', KEYS[2])\n"
    "  local pttl = redis.call('PTTL', KEYS[1])\n"
    "  if o and pttl > 0 and string.sub(o, 1, #v + 1) == v .. '\\n' then\n"
    "    local head = string.match(string.sub(o, #v + 2), '^(%d+ [^\\31]*\\31)')\n"
    "    if head then redis.call('SET', KEYS[2], v .. '\\n' .. head .. ARGV[2], 'PX', pttl) end\n"
    "  end\n"
    "  return {1}\n"
    "end\n"
    "if v then return {-1} end\n"
    "return {0}\n", "", false, true, NULL, true, NULL, 0, false};

/* A notice of a change (scripts.h). */
mscript script_publish = {"publish", "redis.call('PUBLISH', ARGV[1], KEYS[1] .. (ARGV[2] or ''))\nreturn 1\n", "", false, false,
                          NULL, false, NULL, 0, false};

/* A semaphore's limit (scripts.h). */
mscript script_sem_limit = {"sem_limit",
    TAKES_MEMORY
    GUARD
    "local v = redis.call('GET', KEYS[1])\n"
    "if ARGV[1] == '0' then return {1, tonumber(v or '0') or 0} end\n"
    "if ARGV[1] == '-1' then\n"
    "  if v and redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end\n"
    "  return {1, tonumber(v or '0') or 0}\n"
    "end\n"
    "if v and v ~= ARGV[1] then return {0, tonumber(v) or 0} end\n"
    "if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then\n"
    "  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
    "end\n"
    "return {1, tonumber(ARGV[1])}\n", "", false, true, NULL, true, NULL, 0, false};

/* A release: match is the Lua test of the stored value v (scripts.h). */
#define RELEASE_BODY(match) \
    "local v = redis.call('GET', KEYS[1])\n" \
    "if v and (" match ") then\n" \
    "  redis.call('DEL', KEYS[1], KEYS[2])\n" \
    "  if ARGV[3] ~= '' then redis.call('PUBLISH', ARGV[3], KEYS[1] .. '\\n' .. v) end\n" \
    "  return {1, v}\n" \
    "end\n" \
    "if v then return -1 end\n" \
    "return 0\n"
#define MATCH_TOKEN \
    "v == ARGV[1] or (ARGV[2] == '~' and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. " SCRIPT_VALUE_SEP_LUA ")"

mscript script_force = {"force",
    "local v = redis.call('GET', KEYS[1])\n"
    "if not v then return {0} end\n"
    "local o, owner = redis.call('GET', KEYS[2]), ''\n"
    "if o and string.sub(o, 1, #v + 1) == v .. '\\n' then owner = string.sub(o, #v + 2) end\n"
    "local c = tonumber(redis.call('GET', KEYS[3]) or '')\n"
    "if " COUNTER_BAD("c") " then c = 0 end\n"
    "redis.call('DEL', KEYS[1], KEYS[2])\n"
    "if ARGV[1] ~= '' then redis.call('PUBLISH', ARGV[1], KEYS[1] .. '\\n\\2' .. v) end\n"
    "return {1, c, #owner, v .. owner}\n", "", false, false, NULL, false, NULL, 0, false};

mscript script_release_replay = {"release_replay", RELEASE_BODY("v == ARGV[1]"), "", true, false, NULL, false, NULL, 0, false};
mscript script_release = {"release", RELEASE_BODY(MATCH_TOKEN), "", true, false, &script_release_replay,
                              false, NULL, 0, false};

mscript script_marker = {"marker",
    "local mk, act, run_id = KEYS[1], ARGV[1], ARGV[2]\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
    "local later = string.format('%d', now + tonumber(ARGV[3]))\n"
    "local st = redis.call('HGET', mk, 'state')\n"
    "if act == 'pending' and not st then\n"
    "  redis.call('HSET', mk, 'state', 'pending', 'run_id', run_id, 'since', string.format('%d', now))\n"
    "  st = 'pending'\n"
    "elseif act == 'promote' and st == 'pending' then\n"
    "  redis.call('HSET', mk, 'state', 'ready', 'until', '0')\n"
    "  st = 'ready'\n"
    "elseif act == 'restore' and not st then\n"
    "  redis.call('HSET', mk, 'state', 'ready', 'until', later, 'run_id', run_id,\n"
    "             'since', string.format('%d', now), 'reason', 'lost its data')\n"
    "  st = 'ready'\n"
    "elseif act == 'observe' and st and redis.call('HGET', mk, 'run_id') ~= run_id then\n"
    "  redis.call('HSET', mk, 'run_id', run_id)\n"
    "  local u = tonumber(redis.call('HGET', mk, 'until') or '0') or 0\n"
    /* A pending marker that outlived a restart may have lost the promote
     * and every vote since (everysec answers before the AOF write): it
     * counts as ready and sits out, like any restart that lost writes. */
    "  if st == 'pending' and ARGV[4] ~= '1' then\n"
    "    redis.call('HSET', mk, 'state', 'ready', 'until', later,\n"
    "               'reason', 'restarted during the set-up without appendfsync always')\n"
    "    st = 'ready'\n"
    "  elseif st == 'ready' and ARGV[4] ~= '1' and u < now + tonumber(ARGV[3]) then\n"
    "    redis.call('HSET', mk, 'until', later, 'reason', 'restarted without appendfsync always')\n"
    "  end\n"
    "end\n"
    "if not st then return {0, 0} end\n"
    "if st ~= 'ready' then return {1, 0} end\n"
    "local left = (tonumber(redis.call('HGET', mk, 'until') or '0') or 0) - now\n"
    "if left < 0 then left = 0 end\n"
    "return {2, math.ceil(left / 1000)}\n", "", false, false, NULL, false, NULL, 0, false};

/* Listings (scripts.h). A page never splits a SCAN batch when it can stop
 * before it; when the first batch of a page alone holds more than the page
 * takes, the page ends inside it, after a name, and the next resumes the
 * batch after that name (names sorted bytewise), with the batch's COUNT,
 * so that the same buckets are read again. */
mscript script_list_scan = {"list_scan",
    GUARD
    "local cur, after, count, pat = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]\n"
    "local limit, kind, plen = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])\n"
    "local suffix = ''\n"
    "if kind == 'e' then suffix = '\\31#election' elseif kind == 's' then suffix = '\\31#limit' end\n"
    "local names, calls = {}, 0\n"
    "while true do\n"
    "  if after == '' then count = math.min(limit - #names, " SCRIPT_LIST_SCAN_COUNT ") end\n"
    "  local r = redis.call('SCAN', cur, 'MATCH', pat, 'COUNT', count)\n"
    "  calls = calls + 1\n"
    "  local batch = {}\n"
    "  for _, k in ipairs(r[2]) do\n"
    "    local name = string.sub(k, plen + 1, #k - #suffix)\n"
    "    if #name > 0 and not string.find(name, '\\31', 1, true) and string.sub(k, #k - #suffix + 1) == suffix\n"
    "       and (after == '' or name > after)\n"
    "       and (kind ~= 'l' or redis.call('EXISTS', k .. '\\31#fence') == 1) then\n"
    "      batch[#batch + 1] = name\n"
    "    end\n"
    "  end\n"
    "  after = ''\n"
    "  table.sort(batch)\n"
    "  if #names + #batch > limit then\n"
    "    if #names > 0 then return {0, cur .. '\\n\\n0\\n' .. table.concat(names, '\\n')} end\n"
    "    for i = 1, limit do names[i] = batch[i] end\n"
    "    return {0, cur .. '\\n' .. batch[limit] .. '\\n' .. count .. '\\n' .. table.concat(names, '\\n')}\n"
    "  end\n"
    "  for i = 1, #batch do names[#names + 1] = batch[i] end\n"
    "  cur = r[1]\n"
    "  if cur == '0' or #names == limit or calls >= 4 + limit / 25 then break end\n"
    "end\n"
    "return {0, cur .. '\\n\\n0\\n' .. table.concat(names, '\\n')}\n", "", false, true, NULL, false, NULL, 0, true};

mscript script_list_check = {"list_check",
    GUARD
    "local kind, out = ARGV[1], {}\n"
    "for i = 2, #ARGV - 1 do\n"
    "  local k = ARGV[i]\n"
    "  if kind == 'x' then\n"
    "    out[#out + 1] = redis.call('EXISTS', k)\n"
    "  elseif kind == 's' then\n"
    "    local lim = tonumber(redis.call('GET', k .. '\\31#limit') or '') or 0\n"
    "    if lim < 0 or lim ~= math.floor(lim) then lim = 0 end\n"
    "    if lim > " SCRIPT_LIST_SLOTS_MAX " then lim = " SCRIPT_LIST_SLOTS_MAX " end\n"
    "    local parts = {string.format('%d', lim)}\n"
    "    for slot = 0, lim - 1 do\n"
    "      local sk = k .. '\\31#' .. slot\n"
    "      local v = redis.call('GET', sk) or ''\n"
    "      local p = -2\n"
    "      if v ~= '' then p = redis.call('PTTL', sk) end\n"
    "      parts[#parts + 1] = string.format('%d %d ', p, #v) .. v\n"
    "    end\n"
    "    out[#out + 1] = table.concat(parts, ' ')\n"
    "  else\n"
    "    local m = redis.call('MGET', k, k .. '\\31#fence', k .. '\\31#owner')\n"
    "    local v = m[1]\n"
    "    if not v then\n"
    "      out[#out + 1] = '-2'\n"
    "    else\n"
    "      local c = tonumber(m[2] or '')\n"
    "      if " COUNTER_BAD("c") " then c = 0 end\n"
    "      local o, owner = m[3], ''\n"
    "      if o and string.sub(o, 1, #v + 1) == v .. '\\n' then owner = string.sub(o, #v + 2) end\n"
    "      out[#out + 1] = string.format('%d %d %d %d ', redis.call('PTTL', k), c, #v, #owner) .. v .. owner\n"
    "    end\n"
    "  end\n"
    "end\n"
    "if kind == 'x' then return {0, table.concat(out)} end\n"
    "return {0, table.concat(out, '\\n')}\n", "", false, true, NULL, false, NULL, 0, true};

/* Extensions, inspections, releases and notices, as one call when several
 * meet on a master (master.h, group commit). Its body is built by
 * mscript_group_init. */
mscript script_group = {"group", "", "", false, false, NULL, false, NULL, 0, false};

/* In a group call, the guard reads the marker once for every command that
 * runs it (no command of a group writes the marker), and each guarded
 * body starts with GUARD_ONCE instead of GUARD: the same verdict, one
 * HGET (and TIME) per call rather than per command. */
static const char guard_prelude[] =
    "local guard_seen = {}\n"
    "local function guard(KEYS, ARGV)\n"
    "  if ARGV[#ARGV] ~= '1' then return nil end\n"
    "  local mk = KEYS[#KEYS]\n"
    "  local v = guard_seen[mk]\n"
    "  if v == nil then\n"
    "    v = false\n"
    "    local u = redis.call('HGET', mk, 'until')\n"
    "    if not u then v = {-100}\n"
    "    elseif u ~= '0' then\n"
    "      local t = redis.call('TIME')\n"
    "      local left = tonumber(u) - (tonumber(t[1]) * 1000000 + tonumber(t[2]))\n"
    "      if left > 0 then v = {-101, math.ceil(left / 1000)} end\n"
    "    end\n"
    "    guard_seen[mk] = v\n"
    "  end\n"
    "  return v or nil\n"
    "end\n";
#define GUARD_ONCE "local g_ = guard(KEYS, ARGV)\nif g_ then return g_ end\n"

static void scripts_init_once(void)
{
    /* Only scripts that take no memory: Redis checks maxmemory at a
     * script's first write only, so an acquire behind an extension in one
     * call would not be refused OOM where alone it is (and the master would
     * grow past maxmemory). Acquires, settles, proclaims and a semaphore's
     * limit go alone. */
    static mscript *const members[] = {&script_extend, &script_inspect, &script_release,
                                       &script_publish};
    enum { N = sizeof members / sizeof members[0] };
    static char *bodies[N];   /* live as long as the process, as the group's body */
    for (int i = 0; i < N; i++) {
        const char *b = members[i]->body;
        if (!members[i]->guarded)
            continue;
        if (strncmp(b, GUARD, strlen(GUARD)) != 0)
            abort();   /* a guarded script starts with GUARD (scripts.h) */
        bodies[i] = malloc(strlen(GUARD_ONCE) + strlen(b) - strlen(GUARD) + 1);
        if (!bodies[i])
            abort();   /* at start-up, before anything runs */
        strcpy(stpcpy(bodies[i], GUARD_ONCE), b + strlen(GUARD));
    }
    if (mscript_group_init(&script_group, members, N, guard_prelude, (const char *const *)bodies) < 0)
        abort();   /* at start-up, before anything runs */
    mscript_init(&script_acquire);
    mscript_init(&script_dequeue);
    mscript_init(&script_settle);
    mscript_init(&script_extend);
    mscript_init(&script_renew);
    mscript_init(&script_inspect);
    mscript_init(&script_release);
    mscript_init(&script_release_replay);
    mscript_init(&script_marker);
    mscript_init(&script_proclaim);
    mscript_init(&script_force);
    mscript_init(&script_sem_limit);
    mscript_init(&script_publish);
    mscript_init(&script_list_scan);
    mscript_init(&script_list_check);
}

void scripts_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, scripts_init_once);   /* the engine and the markers both call it */
}
