/* jsonio.h - the service's one strict JSON reader, for every request body
 * (native and Dapr routes), and its one integer writer, for every answer and
 * event that carries an integer.
 *
 * Reading is jansson's, with duplicate keys refused. A body is refused whole,
 * with one sentence that names the field, when it breaks RFC 8259 or would
 * be read as something other than what was sent:
 *   - a raw byte below 0x20 inside a string (RFC 8259 section 7), or an
 *     escaped NUL (\u0000): either would cut a C string short, so that
 *     "worker<NUL>A" and "worker<NUL>B" would name one owner;
 *   - bytes that are not UTF-8;
 *   - a key given twice (parsers differ on which one wins);
 *   - bytes after the value;
 *   - where an integer is expected, a fraction, an exponent (1.0, 1e3) or a
 *     value outside the field's range, 64-bit overflow included.
 * No field of the API is fractional, so an integer is always an integer
 * literal, as Go's encoding/json and serde read int64.
 *
 * Writing stays cJSON's, whose number printer tries 15 significant digits
 * first and keeps them when they read back exactly: a 16-digit fence that
 * ends in 0 came out as 1.79561494424068e+15. jsonio_add_int writes the
 * integer literal instead.
 *
 * Pure (no sockets, no threads); the returned objects are the caller's
 * (json_decref). */
#ifndef RL_JSONIO_H
#define RL_JSONIO_H

#include <cjson/cJSON.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* The body as a JSON object. An empty or all-whitespace body is {} when
 * empty_ok, else refused. Returns the object, or NULL with msg. */
json_t *jsonio_read_object(const char *body, size_t len, bool empty_ok, char *msg,
                           size_t msglen);

/* An optional integer field in [min, max]. Returns 0 (absent leaves *out
 * as it is), or -1 with msg naming the field. */
int jsonio_int(const json_t *obj, const char *field, long long min, long long max,
               long long *out, char *msg, size_t msglen);

/* An optional true/false field. Returns 0 (absent leaves *out), or -1. */
int jsonio_bool(const json_t *obj, const char *field, bool *out, char *msg, size_t msglen);

/* An optional string field: *out is its NUL-free text (NULL when absent).
 * Returns 0, or -1 with msg when it is there but not a string. */
int jsonio_string(const json_t *obj, const char *field, const char **out, char *msg,
                  size_t msglen);

/* Adds "field": v to o as an integer literal. */
void jsonio_add_int(cJSON *o, const char *field, long long v);

/* s as the inside of a JSON string, into out (cap bytes): '"' and '\\'
 * escaped, control bytes as \u00XX, the rest (UTF-8) as it is. For event
 * lines built without cJSON. Returns out ("" when it does not fit). */
const char *jsonio_escape(const char *s, char *out, size_t cap);

/* o printed compactly, then deleted: a malloc'd string, or NULL when o is
 * NULL or printing runs out of memory. */
char *jsonio_print_free(cJSON *o);

#endif
