/*
 * The index's event columns in C: a flush's sealed values into Arrow buffers, in one walk.
 *
 * Why C: the archiver's index step runs once per archived event, and the Python rows
 * (tracevault/index/_rows.py: a whole TraceEvent decoded, then a loop over it) cost 13-15 us
 * an event, more than archiving it (~11 us). The index may take at most a tenth of that
 * (docs/index.md, "Writing"). This walk reads only the fields a row holds, straight from the
 * bytes, into the buffers Arrow takes as they are (no Python object per event): about a
 * quarter of a microsecond an event.
 *
 * What it may do, and nothing more: read SealedEvent v1 values wrapping TraceEvent v2 values
 * (the headers the Python walks are armed with), each exactly to its end, with every string
 * the row holds valid UTF-8. Anything else, it declines (returns None) and the caller builds
 * the rows in Python (``run_rows``), the reference that tests/index/test_step.py pins this
 * walk to. It never decides what is malformed.
 *
 * ``columns(values, counts, sealed_header, trace_header, nkinds, tool_kind)``: ``values`` the
 * flush's sealed values, run after run (``counts`` values each, in seq order). Returns
 * ``(n, buffers, tool_requests, runs)``: ``buffers`` a dict of column name to the Arrow
 * buffers (validity bitmap or None, then offsets and data, or the values), ``tool_requests``
 * ``[(row, request bytes)]`` of the TOOL_CALLs whose tool name this walk leaves to Python
 * (``json_tool``: an escape, an unusual shape), ``runs`` per run ``(kind counts, first at,
 * max at, models, error types, tool names, agent id, agent version,
 * wrapped-key attribute, agent note attribute, whether its last value has an error)``; the
 * agent and attributes of the run's first value.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_avro.h"

#define MAX_KINDS 64

typedef struct {
    uint8_t *p;
    Py_ssize_t n, cap;
} Buf;

static int buf_grow(Buf *b, Py_ssize_t more) {
    if (b->n + more <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + more)
        cap *= 2;
    uint8_t *p = PyMem_Realloc(b->p, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (buf_grow(b, n) < 0)
        return -1;
    memcpy(b->p + b->n, src, (size_t)n);
    b->n += n;
    return 0;
}

static int put_i64(Buf *b, int64_t v) { return buf_put(b, &v, 8); }

static int put_i32(Buf *b, int32_t v) { return buf_put(b, &v, 4); }

/* A nullable string column: validity bits, int32 offsets, UTF-8 data. */
typedef struct {
    Buf valid, off, data;
} StrCol;

static int str_null(StrCol *c, Py_ssize_t row) {
    (void)row;
    return put_i32(&c->off, (int32_t)c->data.n);
}

static int str_value(StrCol *c, Py_ssize_t row, const uint8_t *p, Py_ssize_t n) {
    c->valid.p[row >> 3] |= (uint8_t)(1u << (row & 7));
    if (c->data.n + n > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "index column over 2 GiB");
        return -1;
    }
    if (buf_put(&c->data, p, n) < 0)
        return -1;
    return put_i32(&c->off, (int32_t)c->data.n);
}

typedef struct {
    const uint8_t *p;
    Py_ssize_t n;
} Span;

/* A string at ``*pos``: its span, or -1 (runs past the end). */
static int read_span(const uint8_t *b, Py_ssize_t end, Py_ssize_t *pos, Span *s) {
    int64_t n;
    if (read_long(b, end, pos, &n) < 0 || n < 0 || n > end - *pos)
        return -1;
    s->p = b + *pos;
    s->n = (Py_ssize_t)n;
    *pos += (Py_ssize_t)n;
    return 0;
}

/* A union's branch index (0 or 1 here), or -1. */
static int read_branch(const uint8_t *b, Py_ssize_t end, Py_ssize_t *pos) {
    int64_t i;
    if (read_long(b, end, pos, &i) < 0 || i < 0 || i > 1)
        return -1;
    return (int)i;
}

static int span_is(Span s, const char *lit, Py_ssize_t n) {
    return s.n == n && memcmp(s.p, lit, (size_t)n) == 0;
}

typedef struct {
    int64_t seq, kind, at;
    Span hash, agent_id, agent_version, request, response;
    int has_model, has_error, has_duration;
    Span model, err_type, err_msg;
    int64_t duration;
    Span key_attr, note_attr;
    int has_key_attr, has_note_attr;
} Ev;

/* The attributes map: the last "duration_us" (ASCII digits only: else 0, decline) and the two
 * attributes a run's first value is read for. 1 read, 0 decline. */
static int read_attributes(const uint8_t *b, Py_ssize_t end, Py_ssize_t *pos, Ev *e) {
    for (;;) {
        int64_t count, size;
        if (read_long(b, end, pos, &count) < 0)
            return 0;
        if (count == 0)
            return 1;
        if (count < 0) {
            count = -count;
            if (read_long(b, end, pos, &size) < 0)
                return 0;
        }
        for (int64_t i = 0; i < count; i++) {
            Span k, v;
            if (read_span(b, end, pos, &k) < 0 || read_span(b, end, pos, &v) < 0)
                return 0;
            if (!utf8_valid(k.p, k.n) || !utf8_valid(v.p, v.n))
                return 0;
            if (span_is(k, "duration_us", 11)) {
                if (v.n == 0) {
                    e->has_duration = 0;
                    continue;
                }
                int64_t d = 0;
                for (Py_ssize_t j = 0; j < v.n; j++) {
                    if (v.p[j] < '0' || v.p[j] > '9')
                        return 0; /* str.isdigit() knows more digits than ASCII: Python */
                    if (j >= 18)
                        return 0; /* past int64: Python */
                    d = d * 10 + (v.p[j] - '0');
                }
                e->has_duration = 1;
                e->duration = d;
            } else if (span_is(k, "tracevault.content.key", 22)) {
                e->has_key_attr = 1;
                e->key_attr = v;
            } else if (span_is(k, "tracevault.attest", 17)) {
                e->has_note_attr = 1;
                e->note_attr = v;
            }
        }
    }
}

/* One sealed value: 1 and ``e`` filled, 0 to decline. */
static int walk(const uint8_t *b, Py_ssize_t end, const uint8_t *sh, const uint8_t *th,
                int64_t nkinds, Ev *e) {
    memset(e, 0, sizeof *e);
    if (end < 11 || memcmp(b, sh, 10) != 0)
        return 0;
    Py_ssize_t p = 10;
    Span rid, raw, sid;
    int64_t sealed_at, part, off;
    if (read_span(b, end, &p, &rid) < 0 || read_long(b, end, &p, &e->seq) < 0)
        return 0;
    if (end - p <= 64)
        return 0;
    e->hash.p = b + p + 32;
    e->hash.n = 32;
    p += 64;
    if (read_span(b, end, &p, &raw) < 0 || read_long(b, end, &p, &sealed_at) < 0 ||
        read_long(b, end, &p, &part) < 0 || read_long(b, end, &p, &off) < 0 ||
        read_span(b, end, &p, &sid) < 0 || p != end)
        return 0;
    /* the envelope's strings too: fastavro refuses one that is not UTF-8, so Python's rows
       refuse the run, and the C must not index it (tests/index/test_cwalk.py) */
    if (!utf8_valid(rid.p, rid.n) || !utf8_valid(sid.p, sid.n))
        return 0;
    /* the TraceEvent v2 value */
    const uint8_t *r = raw.p;
    Py_ssize_t rend = raw.n, q = 10;
    Span s;
    int64_t x;
    if (rend < 11 || memcmp(r, th, 10) != 0)
        return 0;
    if (read_span(r, rend, &q, &s) < 0 || !utf8_valid(s.p, s.n)) /* run id */
        return 0;
    if (read_long(r, rend, &q, &x) < 0 || x != e->seq) /* seq, as sealed */
        return 0;
    if (read_long(r, rend, &q, &e->kind) < 0 || e->kind < 0 || e->kind >= nkinds)
        return 0;
    if (read_long(r, rend, &q, &e->at) < 0)
        return 0;
    if (read_span(r, rend, &q, &e->agent_id) < 0 || read_span(r, rend, &q, &e->agent_version) < 0)
        return 0;
    if (!utf8_valid(e->agent_id.p, e->agent_id.n) ||
        !utf8_valid(e->agent_version.p, e->agent_version.n))
        return 0;
    for (int i = 0; i < 3; i++) /* host, harness, sdk version */
        if (read_span(r, rend, &q, &s) < 0 || !utf8_valid(s.p, s.n))
            return 0;
    int br;
    if ((br = read_branch(r, rend, &q)) < 0)
        return 0;
    if (br) {
        if (read_span(r, rend, &q, &e->model) < 0 || !utf8_valid(e->model.p, e->model.n))
            return 0;
        e->has_model = 1;
    }
    if ((br = read_branch(r, rend, &q)) < 0 || (br && read_long(r, rend, &q, &x) < 0)) /* seed */
        return 0;
    if (read_span(r, rend, &q, &e->request) < 0 || read_span(r, rend, &q, &e->response) < 0)
        return 0;
    if ((br = read_branch(r, rend, &q)) < 0)
        return 0;
    if (br) {
        if (read_span(r, rend, &q, &e->err_type) < 0 || read_span(r, rend, &q, &e->err_msg) < 0)
            return 0;
        if (!utf8_valid(e->err_type.p, e->err_type.n) || !utf8_valid(e->err_msg.p, e->err_msg.n))
            return 0;
        e->has_error = 1;
    }
    if ((br = read_branch(r, rend, &q)) < 0) /* idempotency key */
        return 0;
    if (br && (read_span(r, rend, &q, &s) < 0 || !utf8_valid(s.p, s.n)))
        return 0;
    if ((br = read_branch(r, rend, &q)) < 0 || (br && read_long(r, rend, &q, &x) < 0)) /* parent */
        return 0;
    if (!read_attributes(r, rend, &q, e))
        return 0;
    if ((br = read_branch(r, rend, &q)) < 0) /* interleave */
        return 0;
    if (br) {
        int bp;
        if ((bp = read_branch(r, rend, &q)) < 0 || (bp && read_long(r, rend, &q, &x) < 0) ||
            read_long(r, rend, &q, &x) < 0 || read_long(r, rend, &q, &x) < 0)
            return 0;
    }
    return q == rend;
}

/* ---- a TOOL_CALL's tool name, as tool_name() in _rows.py reads it --------------------- */

static Py_ssize_t ws(const uint8_t *p, Py_ssize_t i, Py_ssize_t n) {
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
        i++;
    return i;
}

/* A JSON string at ``p[i] == '"'``: the index after it, or -1 (a control character, or the
 * end). ``*esc`` set if it holds an escape. */
static Py_ssize_t json_string(const uint8_t *p, Py_ssize_t i, Py_ssize_t n, int *esc) {
    *esc = 0;
    for (i++; i < n; i++) {
        if (p[i] == '"')
            return i + 1;
        if (p[i] < 0x20)
            return -1;
        if (p[i] == '\\') {
            *esc = 1;
            if (++i >= n)
                return -1;
        }
    }
    return -1;
}

/* Any JSON value at ``i``: the index after it, or -1. Its structure, strings and literals are
 * checked; a number only for its characters (a malformed number, which the sequencer's
 * canonical-JSON check refuses, is the one place this may name a tool where Python would not). */
static Py_ssize_t json_skip(const uint8_t *p, Py_ssize_t i, Py_ssize_t n) {
    int depth = 0, esc;
    do {
        i = ws(p, i, n);
        if (i >= n)
            return -1;
        uint8_t c = p[i];
        if (c == '"') {
            if ((i = json_string(p, i, n, &esc)) < 0)
                return -1;
        } else if (c == '{' || c == '[') {
            depth++;
            i++;
        } else if (c == '}' || c == ']') {
            if (--depth < 0)
                return -1;
            i++;
        } else if (c == ',' || c == ':') {
            if (depth == 0)
                return -1;
            i++;
        } else if (c == 't' || c == 'f' || c == 'n') {
            const char *lit = c == 't' ? "true" : c == 'f' ? "false" : "null";
            Py_ssize_t k = (Py_ssize_t)strlen(lit);
            if (n - i < k || memcmp(p + i, lit, (size_t)k) != 0)
                return -1;
            i += k;
        } else if ((c >= '0' && c <= '9') || c == '-') {
            while (i < n && ((p[i] >= '0' && p[i] <= '9') || p[i] == '.' || p[i] == '+' ||
                             p[i] == '-' || p[i] == 'e' || p[i] == 'E'))
                i++;
        } else {
            return -1;
        }
    } while (depth > 0);
    return i;
}

static const char ENV_END[] = ",\"v\":1}";
static const char ENV_TOOL[] = "\",\"tool\":";

/* 1 and ``out`` set: the tool name; 0: none (the request has no clear string "tool");
 * -1: Python decides (an escape, an unusual shape). */
static int json_tool(const uint8_t *p, Py_ssize_t n, Span *out) {
    int esc;
    if (n >= 7 && memcmp(p + n - 7, ENV_END, 7) == 0) { /* an encrypted envelope */
        for (Py_ssize_t at = n - 7 - 9; at >= 0; at--) {
            if (memcmp(p + at, ENV_TOOL, 9) != 0)
                continue;
            Py_ssize_t v = at + 9, e = n - 7;
            if (v >= e || p[v] != '"' || json_string(p, v, e, &esc) != e || esc)
                return -1;
            out->p = p + v + 1;
            out->n = e - v - 2;
            return utf8_valid(out->p, out->n) ? 1 : -1;
        }
        return -1;
    }
    if (n < 2 || p[0] != '{' || memchr(p, 0, (size_t)n) != NULL)
        return -1; /* not the plain object a request is: Python */
    int found = 0;
    Py_ssize_t i = ws(p, 1, n);
    if (i < n && p[i] == '}')
        return ws(p, i + 1, n) == n ? 0 : -1;
    for (;;) {
        if (i >= n || p[i] != '"')
            return -1;
        Py_ssize_t k = i, j = json_string(p, i, n, &esc);
        if (j < 0 || esc)
            return -1;
        int is_tool = j - k == 6 && memcmp(p + k + 1, "tool", 4) == 0;
        i = ws(p, j, n);
        if (i >= n || p[i] != ':')
            return -1;
        i = ws(p, i + 1, n);
        if (is_tool) {
            found = 0; /* the last "tool" key wins, as in a dict */
            if (i < n && p[i] == '"') {
                Py_ssize_t e = json_string(p, i, n, &esc);
                if (e < 0 || esc)
                    return -1;
                out->p = p + i + 1;
                out->n = e - i - 2;
                if (!utf8_valid(out->p, out->n))
                    return -1;
                found = 1;
                i = e;
            } else if ((i = json_skip(p, i, n)) < 0) {
                return -1;
            }
        } else if ((i = json_skip(p, i, n)) < 0) {
            return -1;
        }
        i = ws(p, i, n);
        if (i < n && p[i] == ',') {
            i = ws(p, i + 1, n);
            continue;
        }
        if (i < n && p[i] == '}')
            return ws(p, i + 1, n) == n ? found : -1;
        return -1;
    }
}

static PyObject *bytes_of(Buf *b) {
    return PyBytes_FromStringAndSize((const char *)b->p, b->n);
}

static PyObject *str_or_none(int has, Span s) {
    if (!has)
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8((const char *)s.p, s.n, "strict");
}

/* The distinct spans of a run (models, error types), as a list of str. */
typedef struct {
    Span *v;
    Py_ssize_t n, cap;
} Spans;

static int spans_add(Spans *a, Span s) {
    for (Py_ssize_t i = 0; i < a->n; i++)
        if (a->v[i].n == s.n && memcmp(a->v[i].p, s.p, (size_t)s.n) == 0)
            return 0;
    if (a->n == a->cap) {
        Py_ssize_t cap = a->cap ? a->cap * 2 : 8;
        Span *v = PyMem_Realloc(a->v, (size_t)cap * sizeof(Span));
        if (v == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = s;
    return 0;
}

static PyObject *spans_list(const Spans *a) {
    PyObject *out = PyList_New(a->n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < a->n; i++) {
        PyObject *t = PyUnicode_DecodeUTF8((const char *)a->v[i].p, a->v[i].n, "strict");
        if (t == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, t);
    }
    return out;
}

static const char HEX[] = "0123456789abcdef";

static PyObject *columns(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *values, *counts, *sh, *th;
    Py_ssize_t nkinds, tool_kind;
    if (!PyArg_ParseTuple(args, "O!O!SSnn", &PyList_Type, &values, &PyList_Type, &counts, &sh,
                          &th, &nkinds, &tool_kind))
        return NULL;
    if (PyBytes_GET_SIZE(sh) != 10 || PyBytes_GET_SIZE(th) != 10 || nkinds < 1 ||
        nkinds > MAX_KINDS) {
        PyErr_SetString(PyExc_ValueError, "columns: bad headers or kinds");
        return NULL;
    }
    const uint8_t *shp = (const uint8_t *)PyBytes_AS_STRING(sh);
    const uint8_t *thp = (const uint8_t *)PyBytes_AS_STRING(th);
    Py_ssize_t n = PyList_GET_SIZE(values), nruns = PyList_GET_SIZE(counts);
    Py_ssize_t nbits = (n + 7) / 8;
    PyObject *ret = NULL, *tools = NULL, *runs = NULL, *bufs = NULL;
    Buf seq = {0}, kind = {0}, at = {0}, dur = {0}, durv = {0}, req = {0}, resp = {0};
    Buf errb = {0}, hash = {0}, hoff = {0};
    StrCol model = {{0}}, err = {{0}}, tool = {{0}};
    Spans models = {0}, errs = {0}, tls = {0};
    int declined = 0;

    if (buf_grow(&seq, 8 * n) < 0 || buf_grow(&kind, n + 1) < 0 || buf_grow(&at, 8 * n) < 0 ||
        buf_grow(&dur, 8 * n) < 0 || buf_grow(&durv, nbits + 1) < 0 ||
        buf_grow(&req, 8 * n) < 0 || buf_grow(&resp, 8 * n) < 0 || buf_grow(&errb, 8 * n) < 0 ||
        buf_grow(&hash, 64 * n + 1) < 0 || buf_grow(&hoff, 4 * (n + 1)) < 0 ||
        buf_grow(&model.valid, nbits + 1) < 0 || buf_grow(&model.off, 4 * (n + 1)) < 0 ||
        buf_grow(&err.valid, nbits + 1) < 0 || buf_grow(&err.off, 4 * (n + 1)) < 0 ||
        buf_grow(&tool.valid, nbits + 1) < 0 || buf_grow(&tool.off, 4 * (n + 1)) < 0)
        goto done;
    memset(tool.valid.p, 0, (size_t)nbits + 1);
    tool.valid.n = nbits;
    put_i32(&tool.off, 0);
    memset(durv.p, 0, (size_t)nbits + 1);
    memset(model.valid.p, 0, (size_t)nbits + 1);
    memset(err.valid.p, 0, (size_t)nbits + 1);
    durv.n = model.valid.n = err.valid.n = nbits;
    put_i32(&model.off, 0);
    put_i32(&err.off, 0);
    put_i32(&hoff, 0);
    if ((tools = PyList_New(0)) == NULL || (runs = PyList_New(nruns)) == NULL)
        goto done;

    Py_ssize_t row = 0;
    for (Py_ssize_t r = 0; r < nruns && !declined; r++) {
        PyObject *ci = PyList_GET_ITEM(counts, r);
        if (!PyLong_CheckExact(ci)) { /* an __index__ could run Python and shrink ``values`` */
            PyErr_SetString(PyExc_TypeError, "columns: a count that is not an int");
            goto done;
        }
        Py_ssize_t cnt = PyLong_AsSsize_t(ci);
        if (cnt < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "columns: a negative count");
            goto done;
        }
        if (cnt == 0 || row + cnt > n) {
            PyErr_SetString(PyExc_ValueError, "columns: counts do not add up to the values");
            goto done;
        }
        int64_t kc[MAX_KINDS] = {0};
        int64_t max_at = INT64_MIN, last_seq = -1;
        int last_err = 0;
        Ev first = {0};
        models.n = errs.n = tls.n = 0;
        for (Py_ssize_t i = 0; i < cnt; i++, row++) {
            PyObject *v = PyList_GET_ITEM(values, row);
            Ev e;
            if (!PyBytes_CheckExact(v) ||
                !walk((const uint8_t *)PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v), shp, thp,
                      nkinds, &e) ||
                e.seq <= last_seq) {
                declined = 1; /* not this walk's shape, or not in seq order: Python */
                break;
            }
            if (i == 0)
                first = e;
            last_seq = e.seq;
            last_err = e.has_error;
            kc[e.kind]++;
            if (e.at > max_at)
                max_at = e.at;
            put_i64(&seq, e.seq);
            kind.p[kind.n++] = (uint8_t)e.kind;
            put_i64(&at, e.at);
            if (e.has_duration)
                durv.p[row >> 3] |= (uint8_t)(1u << (row & 7));
            put_i64(&dur, e.has_duration ? e.duration : 0);
            put_i64(&req, e.request.n);
            put_i64(&resp, e.response.n);
            put_i64(&errb, e.has_error ? e.err_msg.n : 0);
            for (int j = 0; j < 32; j++) {
                hash.p[hash.n++] = (uint8_t)HEX[e.hash.p[j] >> 4];
                hash.p[hash.n++] = (uint8_t)HEX[e.hash.p[j] & 15];
            }
            put_i32(&hoff, (int32_t)hash.n);
            if ((e.has_model ? str_value(&model, row, e.model.p, e.model.n)
                             : str_null(&model, row)) < 0)
                goto done;
            if ((e.has_error ? str_value(&err, row, e.err_type.p, e.err_type.n)
                             : str_null(&err, row)) < 0)
                goto done;
            if (e.has_model && spans_add(&models, e.model) < 0)
                goto done;
            if (e.has_error && spans_add(&errs, e.err_type) < 0)
                goto done;
            Span name;
            int got = e.kind == tool_kind ? json_tool(e.request.p, e.request.n, &name) : 0;
            if ((got == 1 ? str_value(&tool, row, name.p, name.n) : str_null(&tool, row)) < 0)
                goto done;
            if (got == 1 && spans_add(&tls, name) < 0)
                goto done;
            if (got < 0) { /* read in Python */
                PyObject *t = Py_BuildValue("(ny#)", row, (const char *)e.request.p,
                                            e.request.n);
                if (t == NULL || PyList_Append(tools, t) < 0) {
                    Py_XDECREF(t);
                    goto done;
                }
                Py_DECREF(t);
            }
        }
        if (declined)
            break;
        PyObject *kct = PyTuple_New(nkinds);
        if (kct == NULL)
            goto done;
        for (Py_ssize_t k = 0; k < nkinds; k++) {
            PyObject *c = PyLong_FromLongLong(kc[k]);
            if (c == NULL) {
                Py_DECREF(kct);
                goto done;
            }
            PyTuple_SET_ITEM(kct, k, c);
        }
        PyObject *run = Py_BuildValue(
            "(NLLNNNNNNNN)", kct, (long long)first.at, (long long)max_at, spans_list(&models),
            spans_list(&errs), spans_list(&tls), str_or_none(1, first.agent_id),
            str_or_none(1, first.agent_version), str_or_none(first.has_key_attr, first.key_attr),
            str_or_none(first.has_note_attr, first.note_attr), PyBool_FromLong(last_err));
        if (run == NULL)
            goto done;
        PyList_SET_ITEM(runs, r, run);
    }
    if (declined) {
        ret = Py_None;
        Py_INCREF(ret);
        goto done;
    }
    if (row != n) {
        PyErr_SetString(PyExc_ValueError, "columns: counts do not add up to the values");
        goto done;
    }
    bufs = Py_BuildValue(
        "{s:N,s:(NNN),s:N,s:N,s:(NNN),s:(NNN),s:(NN),s:N,s:N,s:(NN),s:(NN)}", "seq",
        bytes_of(&seq), "tool", bytes_of(&tool.valid), bytes_of(&tool.off), bytes_of(&tool.data),
        "kind", bytes_of(&kind), "at", bytes_of(&at), "model", bytes_of(&model.valid),
        bytes_of(&model.off), bytes_of(&model.data), "error_type", bytes_of(&err.valid),
        bytes_of(&err.off), bytes_of(&err.data), "duration_us", bytes_of(&durv), bytes_of(&dur),
        "request_bytes", bytes_of(&req), "response_bytes", bytes_of(&resp), "error_bytes",
        bytes_of(&err.valid), bytes_of(&errb), "hash", bytes_of(&hoff), bytes_of(&hash));
    if (bufs == NULL)
        goto done;
    ret = Py_BuildValue("(nNOO)", n, bufs, tools, runs);
    bufs = NULL;
done:
    Py_XDECREF(tools);
    Py_XDECREF(runs);
    Buf *all[] = {&seq, &kind, &at, &dur, &durv, &req, &resp, &errb, &hash, &hoff,
                  &model.valid, &model.off, &model.data, &err.valid, &err.off, &err.data,
                  &tool.valid, &tool.off, &tool.data};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        PyMem_Free(all[i]->p);
    PyMem_Free(models.v);
    PyMem_Free(errs.v);
    PyMem_Free(tls.v);
    return ret;
}

static PyMethodDef methods[] = {
    {"columns", columns, METH_VARARGS, "A flush's sealed values into the index's event columns."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ccolumns",
                                    "The index's event columns in C.", -1, methods};

PyMODINIT_FUNC PyInit__ccolumns(void) { return PyModule_Create(&module); }
