/* grpc_peers.h - how many gRPC connections each client address holds, for
 * --max-connections-per-ip on the gRPC listener (its own count, apart from
 * the HTTP listeners'). An open-addressing table from address to count:
 * linear probing, deletion by backward shift (no tombstones), at most half
 * full, so that taking and giving back a place costs O(1) whatever the
 * number of connections. The hash is keyed by a seed the caller draws at
 * random, so that a client cannot choose addresses that collide.
 *
 * Pure (no sockets, no clock), unit-tested in tests/unit/front/. Not
 * thread-safe: the gRPC thread owns its table (grpc_int.h).
 */
#ifndef RL_GRPC_PEERS_H
#define RL_GRPC_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* A client's address: IPv6, or IPv4 mapped (::ffff:a.b.c.d), so that one
 * client counts once on a dual-stack listener. */
typedef struct grpc_peer_addr {
    uint8_t b[16];
} grpc_peer_addr;

typedef struct grpc_peer_slot {
    grpc_peer_addr addr;
    uint32_t count;                /* connections held; 0: the slot is empty */
} grpc_peer_slot;

typedef struct grpc_peers {
    grpc_peer_slot *slots;         /* cap of them; NULL before the first take */
    size_t cap;                    /* a power of two, or 0 */
    size_t used;                   /* addresses with a count */
    uint64_t seed;                 /* keys the hash */
} grpc_peers;

/* The address of sa (AF_INET or AF_INET6, len bytes) into out. false for
 * another family, which is not counted. */
bool grpc_peer_addr_of(const struct sockaddr *sa, socklen_t len, grpc_peer_addr *out);

/* An empty table whose hash is keyed by seed. Allocates nothing yet. */
void grpc_peers_init(grpc_peers *p, uint64_t seed);

/* One more connection from a if it holds fewer than limit: true, counted.
 * false when it holds limit already, or there was no memory to count it;
 * the caller refuses the connection, which is not counted. */
bool grpc_peers_take(grpc_peers *p, const grpc_peer_addr *a, int limit);

/* One connection fewer from a, taken before; an address with none is left
 * alone. */
void grpc_peers_give(grpc_peers *p, const grpc_peer_addr *a);

/* How many connections a holds. */
int grpc_peers_count(const grpc_peers *p, const grpc_peer_addr *a);

/* Frees the table's memory; p is empty afterwards. */
void grpc_peers_free(grpc_peers *p);

#endif
