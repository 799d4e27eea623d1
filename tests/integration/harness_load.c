/* harness_load.c - see harness.h: clients that acquire and release until
 * stopped (h_loader), and many held streams at once (h_leases). */
#include "harness.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <strings.h>
#include <sys/stat.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static size_t load_sink(char *p, size_t size, size_t n, void *arg)
{
    h_loader *l = arg;
    size_t len = size * n < sizeof l->last_body - 1 ? size * n : sizeof l->last_body - 1;
    memcpy(l->last_body, p, len);
    l->last_body[len] = '\0';
    return size * n;
}

/* One request; its status, or -1 without an answer (counted either way). */
static long load_call(CURL *h, h_loader *l, const char *method, const char *url, const char *body,
                      struct curl_slist *hdrs)
{
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, load_sink);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, l);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 15000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    l->last_body[0] = '\0';
    atomic_fetch_add(&l->sent, 1);
    CURLcode rc = curl_easy_perform(h);
    if (rc == CURLE_COULDNT_CONNECT) {
        atomic_fetch_add(&l->refused, 1);   /* the listener is closed: the service is stopping */
        return -2;
    }
    if (rc != CURLE_OK) {
        atomic_fetch_add(&l->no_answer, 1);
        l->last_error = (int)rc;
        curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &l->last_new_conn);
        return -1;
    }
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    atomic_fetch_add(&l->answered, 1);
    if (status >= 500) {
        atomic_fetch_add(&l->five_xx, 1);
        l->last_5xx = status;
        memcpy(l->last_5xx_body, l->last_body, sizeof l->last_5xx_body);
    }
    return status;
}

static void *load_main(void *arg)
{
    h_loader *l = arg;
    CURL *h = curl_easy_init();
    while (!atomic_load(&l->stop)) {
        char name[200], url[300];
        const char *body = NULL;
        l->next(l, name, sizeof name, &body);
        snprintf(url, sizeof url, "%s/locks/%s", l->c->base, name);
        long st = load_call(h, l, "POST", url, body, NULL);
        if (st == -2)
            break;
        if (st != 201)
            continue;
        char token[64] = "";
        cJSON *j = cJSON_Parse(l->last_body);
        const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(j, "token"));
        snprintf(token, sizeof token, "%s", t ? t : "");
        cJSON_Delete(j);
        if (l->tokens && l->ntokens < l->max_tokens)
            snprintf(l->tokens[l->ntokens++], sizeof l->tokens[0], "%s", token);
        char hdr[120];
        snprintf(hdr, sizeof hdr, "Lock-Token: %s", token);
        struct curl_slist *hs = curl_slist_append(NULL, hdr);
        st = load_call(h, l, "DELETE", url, NULL, hs);   /* one that fails leaves a known token */
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
        curl_slist_free_all(hs);
        if (st == -2)
            break;
    }
    curl_easy_cleanup(h);
    return NULL;
}

void h_load_start(h_loader *l, int n, pthread_t *t)
{
    for (int i = 0; i < n; i++) {
        l[i].id = i;
        if (pthread_create(&t[i], NULL, load_main, &l[i]) != 0)
            h_die("pthread_create");
    }
}

void h_load_join(h_loader *l, int n, pthread_t *t)
{
    for (int i = 0; i < n; i++)
        atomic_store(&l[i].stop, true);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
}

long h_load_sum(const h_loader *l, int n, size_t counter_offset)
{
    long sum = 0;
    for (int i = 0; i < n; i++)
        sum += atomic_load((const atomic_long *)((const char *)&l[i] + counter_offset));
    return sum;
}

/* ---- leases ---- */

/* Asks for streams while fewer than l->window are waiting for "acquired". */
static void leases_ask(h_leases *l)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)l->port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    char body[64], req[384];
    int blen = snprintf(body, sizeof body, "{\"hold\":true,\"ttl_ms\":%d}", l->ttl_ms);
    while (l->opened < l->n && l->opened - l->got < l->window) {
        int i = l->opened;
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) < 0)
            h_die("connect");
        int rlen = snprintf(req, sizeof req,
                            "POST /locks/%s-%d HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                            "application/json\r\nContent-Length: %d\r\n\r\n%s", l->prefix, i, blen, body);
        if (send(s, req, (size_t)rlen, MSG_NOSIGNAL) != rlen)
            h_die("send");
        l->pf[i] = (struct pollfd){.fd = s, .events = POLLIN};
        l->opened++;
    }
}

h_leases *h_leases_open_window(int port, int n, int ttl_ms, const char *prefix, int window)
{
    h_leases *l = calloc(1, sizeof *l);
    if (!l || !(l->pf = calloc((size_t)n, sizeof *l->pf)) ||
        !(l->acquired = calloc((size_t)n, sizeof *l->acquired)) || !(l->lost = calloc((size_t)n, sizeof *l->lost)))
        h_die("calloc");
    l->n = n;
    l->window = window;
    l->port = port;
    l->ttl_ms = ttl_ms;
    snprintf(l->prefix, sizeof l->prefix, "%s", prefix);
    leases_ask(l);
    return l;
}

h_leases *h_leases_open(int port, int n, int ttl_ms, const char *prefix)
{
    return h_leases_open_window(port, n, ttl_ms, prefix, n);
}

void h_leases_read(h_leases *l, int ms)
{
    if (poll(l->pf, (nfds_t)l->opened, ms) <= 0)
        return;
    char buf[4096];
    for (int i = 0; i < l->opened; i++) {
        if (!l->pf[i].revents)
            continue;
        ssize_t k = recv(l->pf[i].fd, buf, sizeof buf, MSG_DONTWAIT);
        if (k <= 0) {
            l->pf[i].fd = -l->pf[i].fd - 1;   /* closed: poll no more */
            l->closed++;
            continue;
        }
        if (!l->acquired[i] && memmem(buf, (size_t)k, "\"acquired\"", 10)) {
            l->acquired[i] = true;
            l->got++;
        }
        if (!l->lost[i] && memmem(buf, (size_t)k, "\"lost\"", 6)) {
            l->lost[i] = true;
            l->nlost++;
        }
    }
    leases_ask(l);
}

void h_leases_close(h_leases *l)
{
    for (int i = 0; i < l->opened; i++)
        close(l->pf[i].fd >= 0 ? l->pf[i].fd : -l->pf[i].fd - 1);
    free(l->pf);
    free(l->acquired);
    free(l->lost);
    free(l);
}
