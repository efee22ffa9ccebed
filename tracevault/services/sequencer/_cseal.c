/*
 * The sequencer's per-event path in C: the common raw event sealed, and sealed records encoded.
 *
 * Why C: every raw event crosses the sequencer's rules, and in Python the walk of the
 * TraceEvent v2 value, the canonical-JSON check of its two payloads, the chain link and the
 * SealedEvent encode cost about 20 us an event, more than Kafka's consume and produce of it
 * (docs/design.md, "Sequencer speed").
 *
 * What ``take`` may do, and nothing more: for each message from ``start`` on, the common case
 * only (no error, a v2 value the Python walk reads, both payloads canonical by the strict
 * subset below, a run the book already holds on this partition and keyed as its run id, the
 * run's next seq, nothing held, neither GAP nor RUN_FINISHED, no agent note), it does what
 * ``RunBook._apply`` then ``_seal`` do: link the chain, append the ``SealOut``, move the run's
 * head, mark it touched. At the first message that is anything else it stops and returns that
 * message's index, and the Python rules handle it (new runs, gaps, duplicates, the DLQ, ends
 * of runs, other schema versions). It never decides that something is wrong: it declines.
 *
 * The JSON check (``_canon.h``) accepts a strict subset of what ``check_canonical`` accepts;
 * anything else is left to Python.
 *
 * ``values`` and ``heads`` write what ``sealed_v1``, the leaf hash and ``plain_head_value``
 * write, for a whole batch in one call.
 *
 * tests/services/sequencer/test_cseal.py pins the walk to ``peek_event``, the JSON subset to
 * ``check_canonical``, ``take`` to the rules over whole batches of real messages, and
 * ``values`` and ``heads`` to the Python encoders.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_avro.h"
#include "_canon.h"
#include "_digest.h"

/* ---- the TraceEvent v2 walk (peek_event) ------------------------------------------------- */

typedef struct {
    const uint8_t *run_id, *request, *response;
    Py_ssize_t run_id_len, request_len, response_len;
    int64_t seq;
    Py_ssize_t kind;
    int attest; /* an attribute is the agent's signed note (tracevault.attest) */
} Peek;

/* The Avro-encoded attribute key of an agent note (tracevault.transparency.ATTEST_MARK): an event
 * that carries one is left to the Python rules, which check the note (docs/identity.md). */
static const char ATTEST_MARK[] = "\x22tracevault.attest"; /* 18 bytes and a NUL */
#define ATTEST_MARK_LEN ((Py_ssize_t)sizeof ATTEST_MARK - 1)

/* A string at *pos: its length, bounds and UTF-8, as ``_string`` reads it. */
static int skip_string(const uint8_t *v, Py_ssize_t n, Py_ssize_t *pos) {
    int64_t len;
    if (read_long(v, n, pos, &len) < 0 || len < 0 || len > n - *pos)
        return 0;
    if (!utf8_valid(v + *pos, (Py_ssize_t)len))
        return 0;
    *pos += (Py_ssize_t)len;
    return 1;
}

static int read_bytes(const uint8_t *v, Py_ssize_t n, Py_ssize_t *pos, const uint8_t **out,
                      Py_ssize_t *out_len) {
    int64_t len;
    if (read_long(v, n, pos, &len) < 0 || len < 0 || len > n - *pos)
        return 0;
    *out = v + *pos;
    *out_len = (Py_ssize_t)len;
    *pos += (Py_ssize_t)len;
    return 1;
}

/* An optional field: its union branch (0 null, 1 the value), or -1 to decline. */
static int branch(const uint8_t *v, Py_ssize_t n, Py_ssize_t *pos) {
    if (*pos >= n)
        return -1;
    uint8_t b = v[(*pos)++];
    return b == 0 ? 0 : b == 2 ? 1 : -1;
}

/* peek_event's walk: 1 and ``f`` filled, 0 where it returns None. */
static int peek(const uint8_t *v, Py_ssize_t n, const uint8_t *header, Py_ssize_t nkinds,
                Peek *f) {
    f->attest = 0;
    if (n < 11 || memcmp(v, header, 10) != 0)
        return 0;
    Py_ssize_t pos = 10;
    int64_t x;
    if (!read_bytes(v, n, &pos, &f->run_id, &f->run_id_len) ||
        !utf8_valid(f->run_id, f->run_id_len))
        return 0;
    if (read_long(v, n, &pos, &f->seq) < 0 || pos >= n)
        return 0;
    uint8_t b = v[pos++];
    if ((b & 0x81) || (Py_ssize_t)(b >> 1) >= nkinds)
        return 0;
    f->kind = b >> 1;
    if (read_long(v, n, &pos, &x) < 0) /* at */
        return 0;
    for (int i = 0; i < 5; i++) /* agent */
        if (!skip_string(v, n, &pos))
            return 0;
    int opt;
    if ((opt = branch(v, n, &pos)) < 0 || (opt && !skip_string(v, n, &pos))) /* model */
        return 0;
    if ((opt = branch(v, n, &pos)) < 0 || (opt && read_long(v, n, &pos, &x) < 0)) /* seed */
        return 0;
    if (!read_bytes(v, n, &pos, &f->request, &f->request_len) ||
        !read_bytes(v, n, &pos, &f->response, &f->response_len))
        return 0;
    if ((opt = branch(v, n, &pos)) < 0 ||
        (opt && (!skip_string(v, n, &pos) || !skip_string(v, n, &pos)))) /* error */
        return 0;
    if ((opt = branch(v, n, &pos)) < 0 || (opt && !skip_string(v, n, &pos))) /* idem key */
        return 0;
    if ((opt = branch(v, n, &pos)) < 0 || (opt && read_long(v, n, &pos, &x) < 0)) /* parent */
        return 0;
    for (;;) { /* attributes: map<string> in blocks */
        int64_t count;
        if (read_long(v, n, &pos, &count) < 0)
            return 0;
        if (count == 0)
            break;
        if (count < 0) {
            if (count == INT64_MIN || read_long(v, n, &pos, &x) < 0)
                return 0;
            count = -count;
        }
        for (int64_t i = 0; i < count; i++) {
            Py_ssize_t key = pos;
            if (!skip_string(v, n, &pos))
                return 0;
            if (pos - key == ATTEST_MARK_LEN &&
                memcmp(v + key, ATTEST_MARK, (size_t)ATTEST_MARK_LEN) == 0)
                f->attest = 1;
            if (!skip_string(v, n, &pos))
                return 0;
        }
    }
    if ((opt = branch(v, n, &pos)) < 0) /* interleave */
        return 0;
    if (opt) {
        int prev;
        if ((prev = branch(v, n, &pos)) < 0 || (prev && read_long(v, n, &pos, &x) < 0) ||
            read_long(v, n, &pos, &x) < 0 || read_long(v, n, &pos, &x) < 0)
            return 0;
    }
    return pos == n;
}

/* ---- take: the common case of RunBook.apply ---------------------------------------------- */

typedef struct {
    PyObject *runs;    /* dict: run id -> _Run */
    PyObject *sealed;  /* list of SealOut (out.sealed) */
    PyObject *touched; /* dict: run id -> _Run (out.touched) */
    PyObject *now_us;  /* int */
    PyTypeObject *seal_cls;
    const uint8_t *header; /* TraceEvent v2: 10 bytes */
    Py_ssize_t nkinds, gap, finished, max_raw;
} Ctx;

static PyObject *S_error, *S_value, *S_key, *S_partition, *S_offset, *S_held, *S_finished,
    *S_next_seq, *S_last_hash, *S_hashes, *S_seen_us, *S_enc, *S_leaf, *S_gaps, *S_first_offset,
    *S_last_offset;

static const uint8_t EVENT_DOMAIN[20] = "tracevault/v1/event";

/* chain.link: SHA-256(EVENT_DOMAIN || prev || raw). 0, or -1 with a Python error. */
static int link_hash(const uint8_t *prev, const uint8_t *raw, Py_ssize_t n, uint8_t out[32]) {
    uint8_t head[52];
    memcpy(head, EVENT_DOMAIN, 20);
    memcpy(head + 20, prev, 32);
    if (sha256_start() < 0 || sha256_update(head, 52) < 0 || sha256_update(raw, (size_t)n) < 0)
        return -1;
    return sha256_finish(out);
}

static int parse_ctx(PyObject *t, void *ctx) {
    Ctx *c = ctx;
    PyObject *header, *cls;
    if (!PyArg_ParseTuple(t, "O!O!O!O!O!Snnnn", &PyDict_Type, &c->runs, &PyList_Type,
                          &c->sealed, &PyDict_Type, &c->touched, &PyLong_Type, &c->now_us,
                          &PyType_Type, &cls, &header, &c->nkinds, &c->gap, &c->finished,
                          &c->max_raw))
        return -1;
    c->seal_cls = (PyTypeObject *)cls;
    if (!PyType_IsSubtype(c->seal_cls, &PyTuple_Type) || PyBytes_GET_SIZE(header) != 10) {
        PyErr_SetString(PyExc_ValueError, "take: a bad context");
        return -1;
    }
    c->header = (const uint8_t *)PyBytes_AS_STRING(header);
    return 0;
}

/* ``run.attr`` is exactly ``want`` (False, an empty dict): 1 yes, 0 no, -1 error. */
static int attr_is_false(PyObject *run, PyObject *name) {
    PyObject *v = PyObject_GetAttr(run, name);
    if (v == NULL)
        return -1;
    int r = v == Py_False || (PyDict_CheckExact(v) && PyDict_GET_SIZE(v) == 0);
    Py_DECREF(v);
    return r;
}

/* One message, the common case: 1 sealed, 0 declined (nothing changed), -1 error. */
static int take_one(PyObject *msg, const void *ctx) {
    const Ctx *c = ctx;
    int ret = -1;
    PyObject *err = NULL, *value = NULL, *key = NULL, *part_o = NULL, *off_o = NULL;
    PyObject *run_id = NULL, *next = NULL, *prev = NULL, *hashes = NULL;
    PyObject *seq_o = NULL, *h = NULL, *rec = NULL, *next_o = NULL;
    Peek f;

    if ((err = PyObject_CallMethodNoArgs(msg, S_error)) == NULL)
        goto done;
    if (err != Py_None) {
        ret = 0;
        goto done;
    }
    if ((value = PyObject_CallMethodNoArgs(msg, S_value)) == NULL ||
        (key = PyObject_CallMethodNoArgs(msg, S_key)) == NULL ||
        (part_o = PyObject_CallMethodNoArgs(msg, S_partition)) == NULL ||
        (off_o = PyObject_CallMethodNoArgs(msg, S_offset)) == NULL)
        goto done;
    ret = 0;
    if (!PyBytes_CheckExact(value) || !PyBytes_CheckExact(key) || !PyLong_CheckExact(part_o) ||
        !PyLong_CheckExact(off_o))
        goto done;
    const uint8_t *v = (const uint8_t *)PyBytes_AS_STRING(value);
    Py_ssize_t vlen = PyBytes_GET_SIZE(value);
    if (vlen > c->max_raw || !peek(v, vlen, c->header, c->nkinds, &f))
        goto done;
    if (f.seq < 0 || f.attest || f.kind == c->gap || f.kind == c->finished ||
        f.run_id_len != PyBytes_GET_SIZE(key) ||
        memcmp(f.run_id, PyBytes_AS_STRING(key), (size_t)f.run_id_len) != 0)
        goto done;
    if (!canonical(f.request, f.request_len) || !canonical(f.response, f.response_len))
        goto done;
    ret = -1;
    if ((run_id = PyUnicode_DecodeUTF8((const char *)f.run_id, f.run_id_len, "strict")) == NULL)
        goto done;
    PyObject *run = PyDict_GetItemWithError(c->runs, run_id); /* borrowed */
    if (run == NULL) {
        ret = PyErr_Occurred() ? -1 : 0;
        goto done;
    }
    Py_INCREF(run);
    int r;
    /* the run's partition, as the rules check it (its key is its run id's bytes, which the
     * message key was compared with above) */
    PyObject *run_part = PyObject_GetAttr(run, S_partition);
    if (run_part == NULL)
        goto done_run;
    r = PyObject_RichCompareBool(run_part, part_o, Py_EQ);
    Py_DECREF(run_part);
    if (r < 0)
        goto done_run;
    if (!r) {
        ret = 0;
        goto done_run;
    }
    /* not finished, nothing held, and this is the next seq */
    if ((r = attr_is_false(run, S_finished)) <= 0 || (r = attr_is_false(run, S_held)) <= 0) {
        ret = r;
        goto done_run;
    }
    if ((next = PyObject_GetAttr(run, S_next_seq)) == NULL ||
        (prev = PyObject_GetAttr(run, S_last_hash)) == NULL ||
        (hashes = PyObject_GetAttr(run, S_hashes)) == NULL)
        goto done_run;
    if (!PyLong_CheckExact(next) || !PyBytes_CheckExact(prev) || PyBytes_GET_SIZE(prev) != 32 ||
        !PyDict_CheckExact(hashes)) {
        ret = 0;
        goto done_run;
    }
    int overflow;
    long long want = PyLong_AsLongLongAndOverflow(next, &overflow);
    if (want == -1 && PyErr_Occurred())
        goto done_run;
    if (overflow || want != f.seq || f.seq == INT64_MAX) { /* seq + 1 must fit: else Python */
        ret = 0;
        goto done_run;
    }
    /* RunBook._seal */
    uint8_t digest[32];
    if (link_hash((const uint8_t *)PyBytes_AS_STRING(prev), v, vlen, digest) < 0)
        goto done_run;
    if ((h = PyBytes_FromStringAndSize((const char *)digest, 32)) == NULL ||
        (seq_o = PyLong_FromLongLong(f.seq)) == NULL ||
        (next_o = PyLong_FromLongLong(f.seq + 1)) == NULL)
        goto done_run;
    PyObject *items[7] = {run, seq_o, prev, h, value, part_o, off_o};
    for (int i = 0; i < 7; i++)
        Py_INCREF(items[i]);
    if ((rec = new_tuple(c->seal_cls, items, 7)) == NULL)
        goto done_run;
    /* These fail only for lack of memory; take then raises and the session ends before this
     * batch commits, so a half-applied book is thrown away with it (the rules' own guarantee
     * for an exception outside a record: the book is restored from the heads topic). */
    if (PyDict_SetItem(hashes, seq_o, h) < 0 || PyObject_SetAttr(run, S_seen_us, c->now_us) < 0 ||
        PyObject_SetAttr(run, S_last_hash, h) < 0 || PyObject_SetAttr(run, S_next_seq, next_o) < 0 ||
        PyList_Append(c->sealed, rec) < 0 || PyDict_SetItem(c->touched, run_id, run) < 0)
        goto done_run;
    ret = 1;
done_run:
    Py_DECREF(run);
done:
    Py_XDECREF(err);
    Py_XDECREF(value);
    Py_XDECREF(key);
    Py_XDECREF(part_o);
    Py_XDECREF(off_o);
    Py_XDECREF(run_id);
    Py_XDECREF(next);
    Py_XDECREF(prev);
    Py_XDECREF(hashes);
    Py_XDECREF(seq_o);
    Py_XDECREF(h);
    Py_XDECREF(rec);
    Py_XDECREF(next_o);
    return ret;
}

static PyObject *take(PyObject *self, PyObject *args) {
    Ctx c;
    return take_messages(args, &c, parse_ctx, take_one);
}

/* ---- values: SealedEvent v1 values and log leaf hashes of a batch ------------------------ */

/* ``run.<name>``, filled by ``fill(run)`` when it is None (the run's cached encodings). */
static PyObject *cached(PyObject *run, PyObject *name, PyObject *fill) {
    PyObject *v = PyObject_GetAttr(run, name);
    if (v != Py_None)
        return v;
    Py_DECREF(v);
    return PyObject_CallOneArg(fill, run);
}

static int as_int64(PyObject *o, int64_t *out) {
    if (!PyLong_Check(o)) {
        PyErr_SetString(PyExc_ValueError, "values: an int field is not an int");
        return -1;
    }
    long long x = PyLong_AsLongLong(o);
    if (x == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) { /* the caller's Python path decides */
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "values: an int field is past 64 bits");
        }
        return -1;
    }
    *out = x;
    return 0;
}

static int hash32(PyObject *o) {
    if (!PyBytes_Check(o) || PyBytes_GET_SIZE(o) != 32) {
        PyErr_SetString(PyExc_ValueError, "values: a chain hash is not 32 bytes");
        return -1;
    }
    return 0;
}

/* values(sealed, at, sid, run_enc, leaf_prefix) -> (values, {partition: [leaf hash]}):
 * ``sealed_v1`` of each SealOut and its log leaf hash, in order; ValueError (nothing made)
 * where a record is not what sealed_v1 takes, so the caller encodes that batch in Python. */
static PyObject *values(PyObject *self, PyObject *args) {
    PyObject *sealed, *fill_enc, *fill_leaf;
    Py_buffer at, sid;
    if (!PyArg_ParseTuple(args, "O!y*y*OO:values", &PyList_Type, &sealed, &at, &sid, &fill_enc,
                          &fill_leaf))
        return NULL;
    PyObject *out = NULL, *vals = NULL, *leaves = NULL, *enc = NULL, *lp = NULL, *part = NULL;
    uint8_t *buf = NULL;
    Py_ssize_t cap = 0;
    /* a copy of the list, so the records stay alive and in place while the run encoders
     * (Python code) run */
    if ((sealed = PyList_GetSlice(sealed, 0, PY_SSIZE_T_MAX)) == NULL)
        goto done;
    Py_ssize_t n = PyList_GET_SIZE(sealed);
    if ((vals = PyList_New(n)) == NULL || (leaves = PyDict_New()) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *rec = PyList_GET_ITEM(sealed, i);
        if (!PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) != 7) {
            PyErr_SetString(PyExc_ValueError, "values: not a SealOut");
            goto done;
        }
        PyObject *run = PyTuple_GET_ITEM(rec, 0), *prev = PyTuple_GET_ITEM(rec, 2);
        PyObject *h = PyTuple_GET_ITEM(rec, 3), *raw = PyTuple_GET_ITEM(rec, 4);
        int64_t seq, sp, so;
        if (as_int64(PyTuple_GET_ITEM(rec, 1), &seq) < 0 || seq < 0 ||
            as_int64(PyTuple_GET_ITEM(rec, 5), &sp) < 0 ||
            as_int64(PyTuple_GET_ITEM(rec, 6), &so) < 0 || hash32(prev) < 0 || hash32(h) < 0)
            goto done;
        if (!PyBytes_Check(raw)) {
            PyErr_SetString(PyExc_ValueError, "values: a raw value is not bytes");
            goto done;
        }
        Py_CLEAR(enc);
        Py_CLEAR(lp);
        Py_CLEAR(part);
        if ((enc = cached(run, S_enc, fill_enc)) == NULL || (lp = cached(run, S_leaf, fill_leaf)) == NULL ||
            (part = PyObject_GetAttr(run, S_partition)) == NULL)
            goto done;
        if (!PyTuple_Check(enc) || PyTuple_GET_SIZE(enc) < 1 ||
            !PyBytes_Check(PyTuple_GET_ITEM(enc, 0)) || !PyBytes_Check(lp)) {
            PyErr_SetString(PyExc_ValueError, "values: a run's cached encodings are not bytes");
            goto done;
        }
        PyObject *prefix = PyTuple_GET_ITEM(enc, 0);
        Py_ssize_t plen = PyBytes_GET_SIZE(prefix), rlen = PyBytes_GET_SIZE(raw);
        Py_ssize_t size = plen + 10 + 64 + 10 + rlen + at.len + 20 + sid.len;
        PyObject *val = PyBytes_FromStringAndSize(NULL, size);
        if (val == NULL)
            goto done;
        uint8_t *w = (uint8_t *)PyBytes_AS_STRING(val), *w0 = w;
        memcpy(w, PyBytes_AS_STRING(prefix), (size_t)plen);
        w += plen;
        w += write_long(w, seq);
        memcpy(w, PyBytes_AS_STRING(prev), 32);
        memcpy(w + 32, PyBytes_AS_STRING(h), 32);
        w += 64;
        w += write_long(w, rlen);
        memcpy(w, PyBytes_AS_STRING(raw), (size_t)rlen);
        w += rlen;
        memcpy(w, at.buf, (size_t)at.len);
        w += at.len;
        w += write_long(w, sp);
        w += write_long(w, so);
        memcpy(w, sid.buf, (size_t)sid.len);
        w += sid.len;
        if (_PyBytes_Resize(&val, w - w0) < 0)
            goto done;
        PyList_SET_ITEM(vals, i, val);
        /* the leaf: SHA-256(leaf prefix || u64be(seq) || hash) */
        Py_ssize_t llen = PyBytes_GET_SIZE(lp) + 40;
        if (llen > cap) {
            PyMem_Free(buf);
            cap = llen * 2;
            if ((buf = PyMem_Malloc((size_t)cap)) == NULL) {
                PyErr_NoMemory();
                goto done;
            }
        }
        memcpy(buf, PyBytes_AS_STRING(lp), (size_t)(llen - 40));
        for (int k = 0; k < 8; k++)
            buf[llen - 40 + k] = (uint8_t)((uint64_t)seq >> (56 - 8 * k));
        memcpy(buf + llen - 32, PyBytes_AS_STRING(h), 32);
        uint8_t digest[32];
        if (sha256(buf, (size_t)llen, digest) < 0)
            goto done;
        PyObject *list = PyDict_GetItemWithError(leaves, part); /* borrowed */
        if (list == NULL) {
            if (PyErr_Occurred() || (list = PyList_New(0)) == NULL)
                goto done;
            int r = PyDict_SetItem(leaves, part, list);
            Py_DECREF(list);
            if (r < 0)
                goto done;
        }
        PyObject *d = PyBytes_FromStringAndSize((const char *)digest, 32);
        if (d == NULL)
            goto done;
        int r = PyList_Append(list, d);
        Py_DECREF(d);
        if (r < 0)
            goto done;
    }
    out = PyTuple_Pack(2, vals, leaves);
done:
    Py_XDECREF(sealed);
    PyMem_Free(buf);
    Py_XDECREF(vals);
    Py_XDECREF(leaves);
    Py_XDECREF(enc);
    Py_XDECREF(lp);
    Py_XDECREF(part);
    PyBuffer_Release(&at);
    PyBuffer_Release(&sid);
    return out;
}

/* ---- heads: HeadState v1 values of the common head ---------------------------------------- */

/* heads(runs, suffix, run_enc) -> [value or None]: ``plain_head_value`` of each run whose head
 * is the plain shape (not finished, no gaps, nothing held, a 32-byte last hash), None for the
 * others (the caller writes those with ``encode_head``, or ends a finished run's head). */
static PyObject *heads(PyObject *self, PyObject *args) {
    PyObject *runs, *fill_enc;
    Py_buffer suffix;
    if (!PyArg_ParseTuple(args, "O!y*O:heads", &PyList_Type, &runs, &suffix, &fill_enc))
        return NULL;
    PyObject *out = NULL;
    /* a copy: the runs' attributes and encoders are Python code, which could change the list */
    if ((runs = PyList_GetSlice(runs, 0, PY_SSIZE_T_MAX)) == NULL)
        goto fail;
    Py_ssize_t n = PyList_GET_SIZE(runs);
    if ((out = PyList_New(n)) == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *run = PyList_GET_ITEM(runs, i);
        PyObject *f[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
        PyObject *names[6] = {S_finished, S_gaps, S_held, S_last_hash, S_next_seq, S_partition};
        PyObject *enc = NULL, *val = NULL;
        int64_t next, part, first, last;
        int plain = 1;
        for (int k = 0; k < 6; k++)
            if ((f[k] = PyObject_GetAttr(run, names[k])) == NULL)
                goto item_fail;
        if (f[0] != Py_False || !PyList_CheckExact(f[1]) || PyList_GET_SIZE(f[1]) != 0 ||
            !PyDict_CheckExact(f[2]) || PyDict_GET_SIZE(f[2]) != 0 || !PyBytes_CheckExact(f[3]) ||
            PyBytes_GET_SIZE(f[3]) != 32)
            plain = 0;
        if (plain) {
            PyObject *fo = PyObject_GetAttr(run, S_first_offset), *lo;
            if (fo == NULL)
                goto item_fail;
            lo = PyObject_GetAttr(run, S_last_offset);
            int bad = lo == NULL || as_int64(f[4], &next) < 0 || as_int64(f[5], &part) < 0 ||
                      as_int64(fo, &first) < 0 || as_int64(lo, &last) < 0;
            Py_DECREF(fo);
            Py_XDECREF(lo);
            if (bad || (enc = cached(run, S_enc, fill_enc)) == NULL)
                goto item_fail;
            if (!PyTuple_Check(enc) || PyTuple_GET_SIZE(enc) < 2 ||
                !PyBytes_Check(PyTuple_GET_ITEM(enc, 1))) {
                PyErr_SetString(PyExc_ValueError, "heads: a run's cached encodings are not bytes");
                goto item_fail;
            }
            PyObject *prefix = PyTuple_GET_ITEM(enc, 1);
            Py_ssize_t plen = PyBytes_GET_SIZE(prefix);
            if ((val = PyBytes_FromStringAndSize(NULL, plen + 4 * 10 + 32 + 3 + suffix.len)) ==
                NULL)
                goto item_fail;
            uint8_t *w = (uint8_t *)PyBytes_AS_STRING(val), *w0 = w;
            memcpy(w, PyBytes_AS_STRING(prefix), (size_t)plen);
            w += plen;
            w += write_long(w, next);
            memcpy(w, PyBytes_AS_STRING(f[3]), 32);
            w += 32;
            *w++ = 0; /* finished: false */
            w += write_long(w, part);
            w += write_long(w, first);
            w += write_long(w, last);
            *w++ = 0; /* gaps: an empty array */
            *w++ = 0; /* held: an empty array */
            memcpy(w, suffix.buf, (size_t)suffix.len);
            w += suffix.len;
            if (_PyBytes_Resize(&val, w - w0) < 0)
                goto item_fail;
        } else {
            val = Py_NewRef(Py_None);
        }
        PyList_SET_ITEM(out, i, val);
        for (int k = 0; k < 6; k++)
            Py_XDECREF(f[k]);
        Py_XDECREF(enc);
        continue;
    item_fail:
        for (int k = 0; k < 6; k++)
            Py_XDECREF(f[k]);
        Py_XDECREF(enc);
        Py_XDECREF(val);
        goto fail;
    }
    Py_DECREF(runs);
    PyBuffer_Release(&suffix);
    return out;
fail:
    Py_XDECREF(runs);
    Py_XDECREF(out);
    PyBuffer_Release(&suffix);
    return NULL;
}

/* ---- the pieces alone, for the tests that pin them --------------------------------------- */

static PyObject *peek_py(PyObject *self, PyObject *args) {
    Py_buffer value, header;
    Py_ssize_t nkinds;
    if (!PyArg_ParseTuple(args, "y*y*n:peek", &value, &header, &nkinds))
        return NULL;
    PyObject *out = NULL;
    Peek f;
    if (header.len != 10) {
        PyErr_SetString(PyExc_ValueError, "peek: the header is 10 bytes");
    } else if (!peek((const uint8_t *)value.buf, value.len, header.buf, nkinds, &f)) {
        out = Py_NewRef(Py_None);
    } else {
        out = Py_BuildValue("(s#Lny#y#)", (const char *)f.run_id, f.run_id_len,
                            (long long)f.seq, f.kind, (const char *)f.request, f.request_len,
                            (const char *)f.response, f.response_len);
    }
    PyBuffer_Release(&value);
    PyBuffer_Release(&header);
    return out;
}

static PyObject *canonical_py(PyObject *self, PyObject *arg) {
    Py_buffer data;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0)
        return NULL;
    int ok = canonical((const uint8_t *)data.buf, data.len);
    PyBuffer_Release(&data);
    return PyBool_FromLong(ok);
}

static PyObject *link_py(PyObject *self, PyObject *args) {
    Py_buffer prev, raw;
    if (!PyArg_ParseTuple(args, "y*y*:link", &prev, &raw))
        return NULL;
    PyObject *out = NULL;
    if (prev.len != 32) {
        PyErr_SetString(PyExc_ValueError, "link: the previous hash is 32 bytes");
    } else {
        uint8_t digest[32];
        if (link_hash(prev.buf, raw.buf, raw.len, digest) == 0)
            out = PyBytes_FromStringAndSize((const char *)digest, 32);
    }
    PyBuffer_Release(&prev);
    PyBuffer_Release(&raw);
    return out;
}

static PyMethodDef methods[] = {
    {"take", take, METH_VARARGS,
     "take(msgs, start, ctx) -> index of the first message left to the Python rules"},
    {"values", values, METH_VARARGS,
     "values(sealed, at, sid, run_enc, leaf_prefix) -> (sealed values, leaf hashes by "
     "partition)"},
    {"heads", heads, METH_VARARGS,
     "heads(runs, suffix, run_enc) -> [HeadState v1 value of each plain head, else None]"},
    {"peek", peek_py, METH_VARARGS,
     "peek(value, header, nkinds) -> (run_id, seq, kind index, request, response) or None"},
    {"canonical", canonical_py, METH_O,
     "canonical(data) -> True when data is canonical JSON by the C subset (False: ask Python)"},
    {"link", link_py, METH_VARARGS, "link(prev_hash, raw) -> chain.link(prev_hash, raw)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cseal",
                                    "The sequencer's per-event path in C (see _cseal.c).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__cseal(void) {
#define INTERN(var, s)                                                                         \
    if ((var = PyUnicode_InternFromString(s)) == NULL)                                         \
        return NULL;
    INTERN(S_error, "error");
    INTERN(S_value, "value");
    INTERN(S_key, "key");
    INTERN(S_partition, "partition");
    INTERN(S_offset, "offset");
    INTERN(S_held, "held");
    INTERN(S_finished, "finished");
    INTERN(S_next_seq, "next_seq");
    INTERN(S_last_hash, "last_hash");
    INTERN(S_hashes, "hashes");
    INTERN(S_seen_us, "seen_us");
    INTERN(S_enc, "enc");
    INTERN(S_leaf, "leaf");
    INTERN(S_gaps, "gaps");
    INTERN(S_first_offset, "first_offset");
    INTERN(S_last_offset, "last_offset");
    return digest_module(&module);
}
