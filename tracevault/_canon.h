/*
 * A strict subset of canonical JSON (RFC 8785), checked in C: what the sequencer's take checks
 * on every payload (``_cseal.c``) and the content opener on every plaintext (``_cfields.c``).
 *
 * It accepts no white space, integers of at most 15 digits, no floats, strings of valid UTF-8
 * with only the escapes every canonical form writes, object keys without escapes or
 * characters past U+FFFF in strictly increasing byte order (the UTF-16 order of such keys).
 * ``canonical`` says 1 only for bytes ``check_canonical`` accepts; 0 means "let Python
 * decide", never "not canonical". tests/services/sequencer/test_cseal.py and
 * tests/content/test_cfields.py pin it to ``check_canonical``.
 */
#ifndef TRACEVAULT_CANON_H
#define TRACEVAULT_CANON_H
#include <stdint.h>
#include <string.h>

#include "_avro.h"

#define JSON_MAX_DEPTH 64

typedef struct {
    const uint8_t *p, *end;
} Json;

static int json_value(Json *j, int depth);

/* A string at j->p (just past its opening quote), to its closing quote; ``is_key`` refuses
 * escapes and characters past U+FFFF (their byte order is not their UTF-16 order). */
static int json_string(Json *j, int is_key) {
    const uint8_t *p = j->p, *end = j->end;
    while (p < end) {
        uint8_t c = *p;
        if (c == '"') {
            j->p = p + 1;
            return 1;
        }
        if (c < 0x20)
            return 0; /* a control character must be escaped */
        if (c == '\\') {
            if (is_key || end - p < 2)
                return 0;
            uint8_t e = p[1];
            if (e == '"' || e == '\\' || e == 'b' || e == 'f' || e == 'n' || e == 'r' ||
                e == 't') {
                p += 2;
                continue;
            }
            return 0; /* \u and \/ are left to Python */
        }
        if (c < 0x80) {
            p++;
            continue;
        }
        Py_ssize_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        if (is_key && len == 4)
            return 0;
        if (end - p < len || !utf8_valid(p, len))
            return 0;
        p += len;
    }
    return 0;
}

static int json_number(Json *j) {
    const uint8_t *p = j->p, *end = j->end;
    if (p < end && *p == '-')
        p++;
    const uint8_t *digits = p;
    while (p < end && *p >= '0' && *p <= '9')
        p++;
    Py_ssize_t n = p - digits;
    if (n == 0 || n > 15 || (digits[0] == '0' && (n > 1 || digits != j->p)))
        return 0; /* none, too long for a double to be sure, a leading zero, or -0 */
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E'))
        return 0; /* floats are left to Python */
    j->p = p;
    return 1;
}

static int json_literal(Json *j, const char *word, Py_ssize_t n) {
    if (j->end - j->p < n || memcmp(j->p, word, (size_t)n) != 0)
        return 0;
    j->p += n;
    return 1;
}

static int json_value(Json *j, int depth) {
    if (j->p >= j->end)
        return 0;
    uint8_t c = *j->p;
    if (c == '"') {
        j->p++;
        return json_string(j, 0);
    }
    if (c == '{') {
        if (depth >= JSON_MAX_DEPTH)
            return 0;
        j->p++;
        if (j->p < j->end && *j->p == '}') {
            j->p++;
            return 1;
        }
        const uint8_t *prev = NULL;
        Py_ssize_t prev_len = 0;
        for (;;) {
            if (j->p >= j->end || *j->p != '"')
                return 0;
            const uint8_t *key = ++j->p;
            if (!json_string(j, 1))
                return 0;
            Py_ssize_t len = j->p - 1 - key;
            if (prev != NULL) {
                int cmp = memcmp(prev, key, (size_t)(prev_len < len ? prev_len : len));
                if (cmp > 0 || (cmp == 0 && prev_len >= len))
                    return 0; /* not strictly increasing */
            }
            prev = key;
            prev_len = len;
            if (j->p >= j->end || *j->p != ':')
                return 0;
            j->p++;
            if (!json_value(j, depth + 1))
                return 0;
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == '}') {
                j->p++;
                return 1;
            }
            return 0;
        }
    }
    if (c == '[') {
        if (depth >= JSON_MAX_DEPTH)
            return 0;
        j->p++;
        if (j->p < j->end && *j->p == ']') {
            j->p++;
            return 1;
        }
        for (;;) {
            if (!json_value(j, depth + 1))
                return 0;
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == ']') {
                j->p++;
                return 1;
            }
            return 0;
        }
    }
    if (c == 't')
        return json_literal(j, "true", 4);
    if (c == 'f')
        return json_literal(j, "false", 5);
    if (c == 'n')
        return json_literal(j, "null", 4);
    return json_number(j);
}

/* 1 when ``p[0:n]`` is canonical JSON by the subset above; 0: let Python decide. */
static int canonical(const uint8_t *p, Py_ssize_t n) {
    Json j = {p, p + n};
    return json_value(&j, 0) && j.p == j.end;
}

#endif
