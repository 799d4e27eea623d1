/* jsonio.c - see jsonio.h. */
#include "jsonio.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static bool blank(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!isspace((unsigned char)s[i]))
            return false;
    return true;
}

/* Names the field around byte pos of a body jansson refused, for the
 * message: *key is the last key whose ':' came before pos (the field whose
 * value holds pos), *str the last string that ended before pos (a key given
 * twice is refused just after it). Each is "" when there is none. Only the
 * message depends on it: the refusal is jansson's. */
static void field_near(const char *body, size_t len, size_t pos, char *key, char *str,
                       size_t outlen)
{
    const char *s_at = NULL, *k_at = NULL;
    size_t s_len = 0, k_len = 0;
    bool in_str = false;
    size_t start = 0;
    for (size_t i = 0; i < len && i < pos; i++) {
        char c = body[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"') {
                in_str = false;
                s_at = body + start;
                s_len = i - start;
            }
        } else if (c == '"') {
            in_str = true;
            start = i + 1;
        } else if (c == ':' && s_at) {
            k_at = s_at;
            k_len = s_len;
        }
    }
    snprintf(key, outlen, "%.*s", k_at ? (int)(k_len < 64 ? k_len : 64) : 0, k_at ? k_at : "");
    snprintf(str, outlen, "%.*s", s_at ? (int)(s_len < 64 ? s_len : 64) : 0, s_at ? s_at : "");
    /* Printable in a message; the message goes back as JSON, escaped by cJSON. */
    for (char *p = key; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
            *p = '?';
    for (char *p = str; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
            *p = '?';
}

/* One sentence for what jansson refused, naming the field. */
static void explain(const char *body, size_t len, const json_error_t *e, char *msg,
                    size_t msglen)
{
    char key[72], str[72];
    size_t pos = e->position > 0 ? (size_t)e->position : 0;
    field_near(body, len, pos, key, str, sizeof key);
    const char *field = key[0] ? key : "a string";
    switch (json_error_code(e)) {
    case json_error_duplicate_key:
        snprintf(msg, msglen, "the field %s appears more than once", str);
        return;
    case json_error_null_character:
    case json_error_null_byte_in_key:
        snprintf(msg, msglen, "%s holds a NUL character (\\u0000), which no field may hold", field);
        return;
    case json_error_invalid_utf8:
        snprintf(msg, msglen, "%s is not valid UTF-8", field);
        return;
    case json_error_numeric_overflow:
        snprintf(msg, msglen, "%s is out of range", field);
        return;
    case json_error_invalid_syntax:
        /* jansson's words for a raw byte below 0x20 in a string */
        if (!strncmp(e->text, "control character", 17) ||
            !strncmp(e->text, "unexpected newline", 18)) {
            snprintf(msg, msglen, "%s holds a raw control character (a byte below 0x20), "
                     "which a JSON string may not (RFC 8259 section 7)", field);
            return;
        }
        break;
    default:
        break;
    }
    snprintf(msg, msglen, "the body is not valid JSON (line %d, column %d: %.80s)", e->line,
             e->column, e->text);
}

json_t *jsonio_read_object(const char *body, size_t len, bool empty_ok, char *msg,
                           size_t msglen)
{
    if (len == 0 || blank(body, len)) {
        if (empty_ok)
            return json_object();
        snprintf(msg, msglen, "a JSON body is required");
        return NULL;
    }
    /* A NUL byte is allowed nowhere in JSON text, and jansson 2.14 drops
     * one right after a number or a literal (its one-byte lookahead reads
     * it as the end): {"ttl_ms": 15000<NUL>} would pass as 15000. Found
     * by tests/fuzz (corpus/json/found_*). */
    const char *nul = memchr(body, '\0', len);
    if (nul) {
        char key[72], str[72];
        field_near(body, len, (size_t)(nul - body), key, str, sizeof key);
        snprintf(msg, msglen, "%s holds a NUL byte, which JSON allows nowhere",
                 key[0] ? key : "the body");
        return NULL;
    }
    json_error_t e;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &e);
    if (!root) {
        explain(body, len, &e, msg, msglen);
        return NULL;
    }
    if (!json_is_object(root)) {
        snprintf(msg, msglen, "the body must be a JSON object");
        json_decref(root);
        return NULL;
    }
    return root;
}

int jsonio_int(const json_t *obj, const char *field, long long min, long long max,
               long long *out, char *msg, size_t msglen)
{
    const json_t *v = json_object_get(obj, field);
    if (!v)
        return 0;
    if (!json_is_integer(v)) {
        snprintf(msg, msglen, "%s must be a whole number from %lld to %lld (no fraction or "
                 "exponent)", field, min, max);
        return -1;
    }
    json_int_t n = json_integer_value(v);
    if (n < min || n > max) {
        snprintf(msg, msglen, "%s must be from %lld to %lld", field, min, max);
        return -1;
    }
    *out = (long long)n;
    return 0;
}

int jsonio_bool(const json_t *obj, const char *field, bool *out, char *msg, size_t msglen)
{
    const json_t *v = json_object_get(obj, field);
    if (!v)
        return 0;
    if (!json_is_boolean(v)) {
        snprintf(msg, msglen, "%s must be true or false", field);
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

int jsonio_string(const json_t *obj, const char *field, const char **out, char *msg,
                  size_t msglen)
{
    const json_t *v = json_object_get(obj, field);
    *out = NULL;
    if (!v)
        return 0;
    if (!json_is_string(v)) {
        snprintf(msg, msglen, "%s must be a string", field);
        return -1;
    }
    *out = json_string_value(v);   /* NUL-free: the reader refuses \u0000 */
    return 0;
}

void jsonio_add_int(cJSON *o, const char *field, long long v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%lld", v);
    cJSON_AddRawToObject(o, field, buf);
}

const char *jsonio_escape(const char *s, char *out, size_t cap)
{
    size_t w = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        int n = *p == '"' || *p == '\\' ? snprintf(esc, sizeof esc, "\\%c", *p)
                : *p < 0x20           ? snprintf(esc, sizeof esc, "\\u%04x", *p)
                                      : snprintf(esc, sizeof esc, "%c", *p);
        if (w + (size_t)n >= cap) {
            if (cap)
                out[0] = '\0';
            return out;
        }
        memcpy(out + w, esc, (size_t)n);
        w += (size_t)n;
    }
    if (cap)
        out[w] = '\0';
    return out;
}

char *jsonio_print_free(cJSON *o)
{
    if (!o)
        return NULL;
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
