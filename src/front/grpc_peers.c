/* grpc_peers.c - connections per client address for the gRPC listener
 * (grpc_peers.h). */
#include "grpc_peers.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#define PEERS_MIN_CAP 16

bool grpc_peer_addr_of(const struct sockaddr *sa, socklen_t len, grpc_peer_addr *out)
{
    memset(out, 0, sizeof *out);
    if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        out->b[10] = out->b[11] = 0xff;
        memcpy(out->b + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return true;
    }
    if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        memcpy(out->b, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        return true;
    }
    return false;
}

void grpc_peers_init(grpc_peers *p, uint64_t seed)
{
    *p = (grpc_peers){.seed = seed};
}

/* splitmix64's finalizer: every bit of x moves every bit of the result. */
static uint64_t mix(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static size_t home_of(const grpc_peers *p, const grpc_peer_addr *a)
{
    uint64_t hi, lo;
    memcpy(&hi, a->b, 8);
    memcpy(&lo, a->b + 8, 8);
    return (size_t)mix(mix(p->seed ^ hi) ^ lo) & (p->cap - 1);
}

/* The slot that holds a, or the empty one where it would go. */
static size_t find(const grpc_peers *p, const grpc_peer_addr *a)
{
    size_t i = home_of(p, a);
    while (p->slots[i].count && memcmp(&p->slots[i].addr, a, sizeof *a) != 0)
        i = (i + 1) & (p->cap - 1);
    return i;
}

static bool grow(grpc_peers *p)
{
    size_t cap = p->cap ? p->cap * 2 : PEERS_MIN_CAP;
    grpc_peer_slot *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return false;
    grpc_peers old = *p;
    p->slots = slots;
    p->cap = cap;
    for (size_t i = 0; i < old.cap; i++)
        if (old.slots[i].count)
            p->slots[find(p, &old.slots[i].addr)] = old.slots[i];
    free(old.slots);
    return true;
}

bool grpc_peers_take(grpc_peers *p, const grpc_peer_addr *a, int limit)
{
    if ((p->used + 1) * 2 > p->cap && !grow(p))
        return false;
    size_t i = find(p, a);
    grpc_peer_slot *s = &p->slots[i];
    if (s->count >= (uint32_t)(limit > 0 ? limit : 0))
        return false;
    if (!s->count) {
        s->addr = *a;
        p->used++;
    }
    s->count++;
    return true;
}

void grpc_peers_give(grpc_peers *p, const grpc_peer_addr *a)
{
    if (!p->cap)
        return;
    size_t mask = p->cap - 1, i = find(p, a);
    if (!p->slots[i].count || --p->slots[i].count)
        return;
    p->used--;
    /* Backward shift: each entry after the hole that may move into it
     * (its home is not cyclically in (hole, j]) does, so that every probe
     * still finds its entry before an empty slot. */
    for (size_t j = (i + 1) & mask; p->slots[j].count; j = (j + 1) & mask) {
        size_t k = home_of(p, &p->slots[j].addr);
        if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
            continue;
        p->slots[i] = p->slots[j];
        p->slots[j].count = 0;
        i = j;
    }
}

int grpc_peers_count(const grpc_peers *p, const grpc_peer_addr *a)
{
    return p->cap ? (int)p->slots[find(p, a)].count : 0;
}

void grpc_peers_free(grpc_peers *p)
{
    free(p->slots);
    grpc_peers_init(p, p->seed);
}
