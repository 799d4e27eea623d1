/* harness_proxy.c - see harness.h (h_master_proxy, h_master_slow): a TCP
 * proxy in front of one master, on a thread of the test process, that can
 * hold back what the master answers by a set delay. A master slowed so is
 * late on every command by construction (its answers cannot reach redlockd
 * before the delay), yet answers each one, so redlockd keeps its
 * connection: the state a loaded master is in now and then, made
 * deterministic. */
#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PROXY_PAIRS 16

/* A chunk the master sent, held until due_us. */
struct held {
    struct held *next;
    uint64_t due_us;
    size_t len;
    char data[];
};

/* One connection of redlockd's (client) and the proxy's to the master (server). */
struct pair {
    int cfd, sfd;               /* -1: a free slot */
    struct held *head, *tail;   /* the master's bytes not yet passed on, oldest first */
};

struct h_proxy {
    int listen_fd, port, target_port;
    atomic_int delay_ms;        /* what the master sends reaches the client this much later */
    atomic_bool stop;
    pthread_t thread;
    struct pair pairs[PROXY_PAIRS];
};

static void pair_close(struct pair *p)
{
    if (p->cfd >= 0)
        close(p->cfd);
    if (p->sfd >= 0)
        close(p->sfd);
    p->cfd = p->sfd = -1;
    while (p->head) {
        struct held *h = p->head;
        p->head = h->next;
        free(h);
    }
    p->tail = NULL;
}

static void accept_one(h_proxy *x)
{
    int cfd = accept(x->listen_fd, NULL, NULL);
    if (cfd < 0)
        return;
    int sfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)x->target_port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    struct pair *slot = NULL;
    for (int i = 0; i < PROXY_PAIRS && !slot; i++)
        if (x->pairs[i].cfd < 0)
            slot = &x->pairs[i];
    if (sfd < 0 || !slot || connect(sfd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(cfd);   /* as a master that is not there: refused */
        if (sfd >= 0)
            close(sfd);
        return;
    }
    slot->cfd = cfd;
    slot->sfd = sfd;
}

/* Passes on what is due; false when the client is gone. */
static bool pass_due(struct pair *p, uint64_t now)
{
    while (p->head && p->head->due_us <= now) {
        struct held *h = p->head;
        if (write(p->cfd, h->data, h->len) != (ssize_t)h->len)
            return false;
        p->head = h->next;
        if (!p->head)
            p->tail = NULL;
        free(h);
    }
    return true;
}

static void *proxy_main(void *arg)
{
    h_proxy *x = arg;
    while (!atomic_load(&x->stop)) {
        uint64_t now = h_now_us(), next_due = now + 20000;
        struct pollfd f[1 + 2 * PROXY_PAIRS];
        int nf = 0;
        f[nf++] = (struct pollfd){x->listen_fd, POLLIN, 0};
        for (int i = 0; i < PROXY_PAIRS; i++) {
            struct pair *p = &x->pairs[i];
            if (p->cfd >= 0 && !pass_due(p, now))
                pair_close(p);
            if (p->head && p->head->due_us < next_due)
                next_due = p->head->due_us;
            f[1 + 2 * i] = (struct pollfd){p->cfd, POLLIN, 0};   /* (fd -1 is ignored) */
            f[2 + 2 * i] = (struct pollfd){p->sfd, POLLIN, 0};
            nf += 2;
        }
        int wait_ms = (int)((next_due - now + 999) / 1000);
        if (poll(f, (nfds_t)nf, wait_ms) <= 0)
            continue;
        if (f[0].revents)
            accept_one(x);
        for (int i = 0; i < PROXY_PAIRS; i++) {
            struct pair *p = &x->pairs[i];
            if (p->cfd < 0)
                continue;
            char b[16384];
            if (f[1 + 2 * i].revents) {   /* redlockd's commands pass at once */
                ssize_t n = read(p->cfd, b, sizeof b);
                if (n <= 0 || write(p->sfd, b, (size_t)n) != n) {
                    pair_close(p);
                    continue;
                }
            }
            if (f[2 + 2 * i].revents) {   /* the master's answers wait their delay */
                ssize_t n = read(p->sfd, b, sizeof b);
                struct held *h = n > 0 ? malloc(sizeof *h + (size_t)n) : NULL;
                if (!h) {
                    pair_close(p);
                    continue;
                }
                h->next = NULL;
                h->len = (size_t)n;
                h->due_us = h_now_us() + (uint64_t)atomic_load(&x->delay_ms) * 1000ULL;
                if (p->tail && h->due_us < p->tail->due_us)
                    h->due_us = p->tail->due_us;   /* in order, when the delay was lowered */
                memcpy(h->data, b, (size_t)n);
                if (p->tail)
                    p->tail->next = h;
                else
                    p->head = h;
                p->tail = h;
            }
        }
    }
    for (int i = 0; i < PROXY_PAIRS; i++)
        pair_close(&x->pairs[i]);
    return NULL;
}

void h_master_proxy(h_cluster *c, int i)
{
    if (c->m[i].proxy)
        return;
    h_proxy *x = calloc(1, sizeof *x);
    if (!x)
        h_die("calloc");
    for (int k = 0; k < PROXY_PAIRS; k++)
        x->pairs[k].cfd = x->pairs[k].sfd = -1;
    x->target_port = c->m[i].port;
    x->port = h_free_port();
    x->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(x->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)x->port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (x->listen_fd < 0 || bind(x->listen_fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(x->listen_fd, 16) < 0)
        h_die("proxy listen");
    if (pthread_create(&x->thread, NULL, proxy_main, x) != 0)
        h_die("proxy thread");
    c->m[i].proxy = x;
}

void h_master_slow(h_cluster *c, int i, int ms)
{
    if (!c->m[i].proxy) {
        fprintf(stderr, "harness: h_master_slow(%d) without h_master_proxy\n", i);
        abort();
    }
    atomic_store(&c->m[i].proxy->delay_ms, ms);
}

int h_master_addr_port(const h_cluster *c, int i)
{
    return c->m[i].proxy ? c->m[i].proxy->port : c->m[i].port;
}

void h_proxies_free(h_cluster *c)
{
    for (int i = 0; i < c->n; i++) {
        h_proxy *x = c->m[i].proxy;
        if (!x)
            continue;
        atomic_store(&x->stop, true);
        pthread_join(x->thread, NULL);
        close(x->listen_fd);
        free(x);
        c->m[i].proxy = NULL;
    }
}
