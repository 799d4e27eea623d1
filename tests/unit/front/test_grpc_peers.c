/* Unit tests of grpc_peers.c: the gRPC listener's count of connections
 * per client address (--max-connections-per-ip), without a socket. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "front/grpc_peers.h"

static grpc_peer_addr v4(const char *text)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    cr_assert_eq(inet_pton(AF_INET, text, &sa.sin_addr), 1);
    grpc_peer_addr a;
    cr_assert(grpc_peer_addr_of((struct sockaddr *)&sa, sizeof sa, &a));
    return a;
}

static grpc_peer_addr v6(const char *text)
{
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6};
    cr_assert_eq(inet_pton(AF_INET6, text, &sa.sin6_addr), 1);
    grpc_peer_addr a;
    cr_assert(grpc_peer_addr_of((struct sockaddr *)&sa, sizeof sa, &a));
    return a;
}

/* The i-th of many distinct addresses: IPv4 and IPv6 mixed. */
static grpc_peer_addr nth(int i)
{
    grpc_peer_addr a = {{0}};
    if (i % 3 == 0) {
        a.b[10] = a.b[11] = 0xff;
        memcpy(a.b + 12, &i, sizeof i);
    } else {
        a.b[0] = 0x20;
        a.b[1] = 0x01;
        memcpy(a.b + 8 + (i % 2) * 4, &i, sizeof i);
    }
    return a;
}

Test(grpc_peers, each_address_up_to_its_limit)
{
    grpc_peers p;
    grpc_peers_init(&p, 42);
    grpc_peer_addr one = v4("127.0.0.1"), two = v4("127.0.0.2");
    cr_assert(grpc_peers_take(&p, &one, 2));
    cr_assert(grpc_peers_take(&p, &one, 2));
    cr_assert_not(grpc_peers_take(&p, &one, 2), "a third from one address is refused");
    cr_assert_eq(grpc_peers_count(&p, &one), 2, "a refusal is not counted");
    cr_assert(grpc_peers_take(&p, &two, 2), "another address still gets in");
    grpc_peers_give(&p, &one);
    cr_assert_eq(grpc_peers_count(&p, &one), 1);
    cr_assert(grpc_peers_take(&p, &one, 2), "a place given back is taken again");
    grpc_peers_give(&p, &one);
    grpc_peers_give(&p, &one);
    grpc_peers_give(&p, &two);
    cr_assert_eq(p.used, 0, "no address is left once every connection closed");
    grpc_peers_give(&p, &two);   /* one too many: left alone */
    cr_assert_eq(grpc_peers_count(&p, &two), 0);
    grpc_peers_free(&p);
}

Test(grpc_peers, ipv4_counts_the_same_as_its_mapped_ipv6)
{
    grpc_peers p;
    grpc_peers_init(&p, 7);
    grpc_peer_addr a = v4("10.1.2.3"), m = v6("::ffff:10.1.2.3"), other = v6("2001:db8::1");
    cr_assert(grpc_peers_take(&p, &a, 1));
    cr_assert_not(grpc_peers_take(&p, &m, 1), "a dual-stack listener sees one client, not two");
    cr_assert(grpc_peers_take(&p, &other, 1));
    struct sockaddr_un_like {
        sa_family_t family;
        char path[32];
    } un = {AF_UNIX, "/tmp/x"};
    grpc_peer_addr x;
    cr_assert_not(grpc_peer_addr_of((struct sockaddr *)&un, sizeof un, &x), "another family");
    struct sockaddr_in short_sa = {.sin_family = AF_INET};
    cr_assert_not(grpc_peer_addr_of((struct sockaddr *)&short_sa, 4, &x), "a truncated address");
    grpc_peers_free(&p);
}

/* Thousands of addresses taken and given back in a shuffled order: every
 * count stays exact as the table grows and as backward shifts move
 * entries, and the table ends empty. A model (an array) says what each
 * count must be. */
Test(grpc_peers, many_addresses_grow_and_shrink_exactly)
{
    enum { N = 5000, LIMIT = 3 };
    static int model[N];
    memset(model, 0, sizeof model);
    grpc_peers p;
    grpc_peers_init(&p, 0x9e3779b97f4a7c15ULL);
    srand(1);
    for (int round = 0; round < 60000; round++) {
        int i = rand() % N;
        grpc_peer_addr a = nth(i);
        if (rand() % 3) {
            bool took = grpc_peers_take(&p, &a, LIMIT);
            cr_assert_eq(took, model[i] < LIMIT, "address %d at %d: took %d", i, model[i], took);
            model[i] += took;
        } else {
            grpc_peers_give(&p, &a);
            model[i] -= model[i] > 0;
        }
    }
    size_t used = 0;
    for (int i = 0; i < N; i++) {
        grpc_peer_addr a = nth(i);
        cr_assert_eq(grpc_peers_count(&p, &a), model[i], "address %d", i);
        used += model[i] > 0;
    }
    cr_assert_eq(p.used, used);
    cr_assert_leq(p.used * 2, p.cap, "at most half full");
    for (int i = N - 1; i >= 0; i--) {
        grpc_peer_addr a = nth(i);
        for (; model[i] > 0; model[i]--)
            grpc_peers_give(&p, &a);
        for (int j = i - 1; j >= 0 && j > i - 50; j--) {   /* the shifts lost none */
            grpc_peer_addr b = nth(j);
            cr_assert_eq(grpc_peers_count(&p, &b), model[j], "address %d after %d left", j, i);
        }
    }
    cr_assert_eq(p.used, 0);
    for (size_t k = 0; k < p.cap; k++)
        cr_assert_eq(p.slots[k].count, 0);
    grpc_peers_free(&p);
}
