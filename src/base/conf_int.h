/* conf_int.h - what conf.c (the flags, their table and their sources),
 * conf_values.c (the values that are more than a number or a string) and
 * conf_listen.c (the listeners and their TLS) share.
 * Each returns 0 or true when the value is good; on the main thread, at start.
 */
#ifndef RL_CONF_INT_H
#define RL_CONF_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "conf.h"

/* HOST:PORT or [V6]:PORT into a. Returns 0, or -1. */
int conf_parse_addr(const char *s, conf_addr *a);

/* --masters: comma-separated HOST:PORT into c. Returns 0, or -1. */
int conf_parse_masters(const char *s, conf *c);

/* The token in the file at path (flag names it in err): malloc'd, or NULL
 * with err set. */
char *conf_read_token_file(const char *flag, const char *path, char *err, size_t errlen);

/* Is val a good --dapr-stores (NAME[=KEYPREFIX],...)? */
bool conf_stores_valid(const char *val);

/* Appends the comma-separated entries of val (--allow-origin when origins,
 * else --allow-host; from names the source in err) to *list (*n entries),
 * each in conf_origin_norm's or conf_host_norm's form. Returns 0, or -1
 * with err set (the entries before the bad one stay in the list). */
int conf_parse_allowed(const char *from, const char *val, bool origins, char ***list, int *n, char *err,
                  size_t errlen);
void conf_free_allowed(char ***list, int *n);

/* conf_listen.c */
/* One listener's entry (len bytes at s: HOST:PORT, [V6]:PORT or unix:PATH,
 * for --listen and --dapr-grpc-listen) into a. 0, or -1 with *why (a
 * phrase). */
int conf_listen_entry(const char *s, size_t len, conf_addr *a, const char **why);
/* Appends the comma-separated entries of val (--listen; from names the
 * source in err) to c->listen: HOST:PORT, [V6]:PORT, or unix:PATH with an
 * absolute PATH of at most CONF_UNIX_PATH_MAX bytes. Returns 0, or -1 with
 * err set (a bad entry, one given twice, more than CONF_MAX_LISTEN). */
int conf_listen_add(conf *c, const char *from, const char *val, char *err, size_t errlen);
/* --listen-mode: octal 0 to 0777 ("0660", "660") into *mode. 0, or -1. */
int conf_listen_mode(const char *val, int *mode);
/* After every source: the default listener when none is given, TLS on the
 * TCP listeners, and the TLS flags that only make sense together. 0, or -1
 * with err set. */
int conf_listen_check(conf *c, char *err, size_t errlen);

#endif
