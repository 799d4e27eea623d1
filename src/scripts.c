/* scripts.c - see scripts.h. Numbers pass through Redis as strings: Lua
 * prints large doubles in exponent form, so counters are formatted with %d
 * (exact below 2^53, which every fence is). */
#include "scripts.h"

mscript script_acquire = {"acquire",
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
    "  local c = redis.call('GET', KEYS[2])\n"
    "  if c then\n"
    "    c = redis.call('INCR', KEYS[2])\n"
    "  else\n"
    "    local t = redis.call('TIME')\n"
    "    c = tonumber(t[1] .. string.sub('00000' .. t[2], -6))\n"
    "    redis.call('SET', KEYS[2], string.format('%d', c))\n"
    "  end\n"
    "  return {1, c}\n"
    "end\n"
    "return {0, redis.call('PTTL', KEYS[1])}\n", "", false};

mscript script_raise = {"raise",
    "local f = tonumber(ARGV[2])\n"
    "if tonumber(redis.call('GET', KEYS[2]) or '0') < f then\n"
    "  redis.call('SET', KEYS[2], ARGV[2])\n"
    "end\n"
    "if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('PTTL', KEYS[1]) > 0 then\n"
    "  return 1\n"
    "end\n"
    "return 0\n", "", false};

mscript script_extend = {"extend",
    "local v = redis.call('GET', KEYS[1])\n"
    "if v == ARGV[1] then\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}\n"
    "end\n"
    "if v then return {-1} end\n"
    "return {0}\n", "", false};

mscript script_release = {"release",
    "local v = redis.call('GET', KEYS[1])\n"
    "if v == ARGV[1] then\n"
    "  redis.call('DEL', KEYS[1])\n"
    "  return 1\n"
    "end\n"
    "if v then return -1 end\n"
    "return 0\n", "", true};

mscript script_release_notify = {"release_notify",
    "local v = redis.call('GET', KEYS[1])\n"
    "if v == ARGV[1] then\n"
    "  redis.call('DEL', KEYS[1])\n"
    "  redis.call('PUBLISH', '" SCRIPT_NOTICE_CHANNEL "', KEYS[1])\n"
    "  return 1\n"
    "end\n"
    "if v then return -1 end\n"
    "return 0\n", "", true};

mscript script_inspect = {"inspect",
    "local v = redis.call('GET', KEYS[1])\n"
    "if not v then return {-2} end\n"
    "return {redis.call('PTTL', KEYS[1]), v}\n", "", false};

void scripts_init(void)
{
    mscript_init(&script_acquire);
    mscript_init(&script_raise);
    mscript_init(&script_extend);
    mscript_init(&script_release);
    mscript_init(&script_release_notify);
    mscript_init(&script_inspect);
}
