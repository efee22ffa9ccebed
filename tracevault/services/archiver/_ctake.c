/*
 * The archiver's per-event path in C: a batch of consumed sealed records into pending leaves.
 *
 * Why C: the archiver touches every sealed event, and the Python walk of a SealedEvent v1 value
 * (tracevault/schemas/fast/_sealed.py) plus the leaf hash and two tuples cost about 20 us an
 * event, more than fastavro takes to write the same record (docs/log.md, "Archiver speed").
 *
 * What it may do, and nothing more: it reads values and returns values. For each message
 * from ``start`` on, the common case only (no error, no headers, a v1 value that the Python
 * walks read, a run whose leaf prefix the archiver already admitted, sealed_at within the
 * archivable window, seq >= 0), all of the partition of the first one, it builds the same
 * ``LeafRecord`` and ``Pending`` that the Python path would; it returns ``(end, partition,
 * records)``: the index of the first message it left, the partition, and a new list of those
 * records, which the caller appends to the partition's pending list (and from whose last
 * offset it learns what was consumed). It never writes a Python object's attribute, list or
 * dict (docs/design.md, "Native code"). At the first message that is not the common case (or
 * of another partition) it stops: the Python path then handles it (checkpoint records,
 * tombstones, quarantine, new runs, other schema versions, anything odd). So the C walk never
 * decides what is malformed: it only declines.
 *
 * tests/services/archiver/test_ctake.py pins it to the Python walks (every accepted value gives
 * the same fields, leaf and leaf hash) over generated and mutated values.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_avro.h"
#include "_digest.h"

/* ---- Avro walks (SealedEvent v1, the first fields of TraceEvent v2) ------------------- */

typedef struct {
    PyObject *prefixes; /* dict: run id -> leaf prefix (read only) */
    int64_t min_at, max_at;
    PyTypeObject *leaf_cls;    /* LeafRecord */
    PyTypeObject *pending_cls; /* Pending */
    const uint8_t *sealed_header, *trace_header; /* 10 bytes each */
    Py_ssize_t finished, nkinds;
} Ctx;

typedef struct {
    PyObject *run_id; /* new reference */
    int64_t seq;
    const uint8_t *hash; /* 32 bytes inside the value */
    int finishes;
    int64_t sealed_at;
} Fields;

/* The kind index of a TraceEvent v2 value, as event_kind() reads it; -1 where it gives None. */
static Py_ssize_t kind_index(const uint8_t *raw, Py_ssize_t len, const Ctx *c) {
    if (len < 11 || memcmp(raw, c->trace_header, 10) != 0)
        return -1;
    Py_ssize_t p;
    uint8_t b = raw[10];
    if (b & 0x81) {
        int64_t n;
        p = 10;
        /* the run id's length, checked against what is left before it moves p: n may be
         * up to INT64_MAX, and p + n would overflow */
        if (read_long(raw, len, &p, &n) < 0 || n < 0 || n > len - p)
            return -1;
        p += (Py_ssize_t)n;
    } else {
        p = 11 + (b >> 1);
    }
    Py_ssize_t q = p;
    for (;;) {
        if (q < 0 || q >= len)
            return -1;
        if (!(raw[q] & 0x80))
            break;
        q++;
    }
    if (q - p > 9 || q + 1 >= len)
        return -1;
    b = raw[q + 1];
    if ((b & 0x81) || (Py_ssize_t)(b >> 1) >= c->nkinds)
        return -1;
    return b >> 1;
}

/* sealed_fields() + event_kind() of one value: 1 and ``f`` filled, 0 to decline, -1 on a
 * Python error (memory). */
static int walk(const uint8_t *b, Py_ssize_t end, const Ctx *c, Fields *f) {
    if (end < 11 || memcmp(b, c->sealed_header, 10) != 0)
        return 0;
    Py_ssize_t p = 10;
    int64_t n, seq, m, sealed_at, part, off;
    if (read_long(b, end, &p, &n) < 0 || n < 0 || n > end - p)
        return 0;
    const uint8_t *rid = b + p;
    Py_ssize_t rid_len = (Py_ssize_t)n;
    p += rid_len;
    if (read_long(b, end, &p, &seq) < 0)
        return 0;
    if (end - p <= 64)
        return 0;
    const uint8_t *hash = b + p + 32;
    p += 64;
    if (read_long(b, end, &p, &m) < 0 || m < 0 || m > end - p)
        return 0;
    const uint8_t *raw = b + p;
    Py_ssize_t raw_len = (Py_ssize_t)m;
    p += raw_len;
    if (read_long(b, end, &p, &sealed_at) < 0)
        return 0;
    if (read_long(b, end, &p, &part) < 0 || part < -2147483648LL || part >= 2147483648LL)
        return 0;
    if (read_long(b, end, &p, &off) < 0)
        return 0;
    if (read_long(b, end, &p, &n) < 0 || n < 0 || n != end - p)
        return 0; /* the sequencer id ends exactly where the value does */
    PyObject *sid, *run_id;
    int ok = utf8(b + p, (Py_ssize_t)n, &sid);
    if (ok <= 0)
        return ok;
    Py_DECREF(sid);
    Py_ssize_t kind = kind_index(raw, raw_len, c);
    if (kind < 0)
        return 0;
    if ((ok = utf8(rid, rid_len, &run_id)) <= 0)
        return ok;
    f->run_id = run_id;
    f->seq = seq;
    f->hash = hash;
    f->finishes = kind == c->finished;
    f->sealed_at = sealed_at;
    return 1;
}

static PyObject *S_error, *S_partition, *S_offset, *S_value, *S_headers, *S_key;

static int parse_ctx(PyObject *t, void *ctx) {
    Ctx *c = ctx;
    PyObject *sh, *th;
    PyObject *leaf_cls, *pending_cls;
    if (!PyArg_ParseTuple(t, "O!LLO!O!SSnn", &PyDict_Type, &c->prefixes, &c->min_at, &c->max_at,
                          &PyType_Type, &leaf_cls, &PyType_Type, &pending_cls, &sh, &th,
                          &c->finished, &c->nkinds))
        return -1;
    c->leaf_cls = (PyTypeObject *)leaf_cls;
    c->pending_cls = (PyTypeObject *)pending_cls;
    if (!PyType_IsSubtype(c->leaf_cls, &PyTuple_Type) ||
        !PyType_IsSubtype(c->pending_cls, &PyTuple_Type) || PyBytes_GET_SIZE(sh) != 10 ||
        PyBytes_GET_SIZE(th) != 10) {
        PyErr_SetString(PyExc_ValueError, "take: a bad context");
        return -1;
    }
    c->sealed_header = (const uint8_t *)PyBytes_AS_STRING(sh);
    c->trace_header = (const uint8_t *)PyBytes_AS_STRING(th);
    return 0;
}

/* One message, the common case, of ``*partition`` (set by the first one: -1 until then):
 * 1 taken (its pending record appended to ``out``, the list this call returns), 0 declined
 * (nothing changed), -1 error. */
static int take_one(PyObject *msg, const Ctx *c, long *partition, PyObject *out) {
    int ret = -1;
    PyObject *err = NULL, *part_o = NULL, *off_o = NULL, *value = NULL, *headers = NULL;
    PyObject *key = NULL, *rec = NULL, *pend = NULL;
    Fields f = {NULL, 0, NULL, 0, 0};

    if ((err = PyObject_CallMethodNoArgs(msg, S_error)) == NULL)
        goto done;
    if (err != Py_None) {
        ret = 0;
        goto done;
    }
    if ((part_o = PyObject_CallMethodNoArgs(msg, S_partition)) == NULL ||
        (off_o = PyObject_CallMethodNoArgs(msg, S_offset)) == NULL ||
        (value = PyObject_CallMethodNoArgs(msg, S_value)) == NULL ||
        (headers = PyObject_CallMethodNoArgs(msg, S_headers)) == NULL)
        goto done;
    if (!PyLong_CheckExact(part_o) || !PyLong_CheckExact(off_o) || !PyBytes_CheckExact(value) ||
        headers != Py_None) {
        ret = 0;
        goto done;
    }
    int overflow;
    long part = PyLong_AsLongAndOverflow(part_o, &overflow);
    if (part == -1 && PyErr_Occurred())
        goto done;
    if (overflow || part < 0 || part > INT32_MAX || (*partition >= 0 && part != *partition)) {
        ret = 0; /* another partition's: the caller goes on with it */
        goto done;
    }
    const uint8_t *b = (const uint8_t *)PyBytes_AS_STRING(value);
    int w = walk(b, PyBytes_GET_SIZE(value), c, &f);
    if (w <= 0) {
        ret = w;
        goto done;
    }
    PyObject *pfx = PyDict_GetItemWithError(c->prefixes, f.run_id); /* borrowed */
    if (pfx == NULL || !PyBytes_CheckExact(pfx) || f.sealed_at < c->min_at ||
        f.sealed_at > c->max_at || f.seq < 0) {
        ret = PyErr_Occurred() ? -1 : 0;
        goto done;
    }
    Py_ssize_t plen = PyBytes_GET_SIZE(pfx);
    uint8_t buf[600];
    if (plen < 1 || plen + 40 > (Py_ssize_t)sizeof buf) {
        ret = 0;
        goto done;
    }
    memcpy(buf, PyBytes_AS_STRING(pfx), (size_t)plen);
    for (int i = 0; i < 8; i++)
        buf[plen + i] = (uint8_t)((uint64_t)f.seq >> (56 - 8 * i));
    memcpy(buf + plen + 8, f.hash, 32);
    uint8_t digest[32];
    if (sha256(buf, (size_t)(plen + 40), digest) < 0)
        goto done;

    long long off = PyLong_AsLongLongAndOverflow(off_o, &overflow);
    if (off == -1 && PyErr_Occurred())
        goto done;
    if (overflow || off < 0 || off == INT64_MAX) { /* not a Kafka offset: the Python path's */
        ret = 0;
        goto done;
    }
    if ((key = PyObject_CallMethodNoArgs(msg, S_key)) == NULL)
        goto done;
    PyObject *items[8] = {
        f.run_id,
        PyLong_FromLongLong(f.seq),
        PyBytes_FromStringAndSize((const char *)f.hash, 32),
        f.finishes ? Py_True : Py_False,
        PyLong_FromLongLong(f.sealed_at),
        PyBytes_FromStringAndSize((const char *)buf + 1, plen + 39),
        PyBytes_FromStringAndSize((const char *)digest, 32),
        value,
    };
    Py_INCREF(items[3]);
    Py_INCREF(value);
    f.run_id = NULL; /* stolen by the record */
    if (!items[1] || !items[2] || !items[4] || !items[5] || !items[6]) {
        for (int i = 0; i < 8; i++)
            Py_XDECREF(items[i]);
        goto done;
    }
    if ((rec = new_tuple(c->leaf_cls, items, 8)) == NULL)
        goto done;
    Py_INCREF(off_o);
    Py_INCREF(key);
    PyObject *pitems[3] = {off_o, key, rec};
    rec = NULL; /* stolen by the pending record */
    if ((pend = new_tuple(c->pending_cls, pitems, 3)) == NULL)
        goto done;
    if (PyList_Append(out, pend) < 0)
        goto done;
    *partition = part;
    ret = 1;
done:
    Py_XDECREF(f.run_id);
    Py_XDECREF(err);
    Py_XDECREF(part_o);
    Py_XDECREF(off_o);
    Py_XDECREF(value);
    Py_XDECREF(headers);
    Py_XDECREF(key);
    Py_XDECREF(rec);
    Py_XDECREF(pend);
    return ret;
}

/* ``take(msgs, start, ctx)``: ``take_one`` on each message from ``start`` on until it
 * declines or fails; ``(end, partition, records)`` (``partition`` None when it took none);
 * ValueError unless 0 <= start <= len(msgs). */
static PyObject *take(PyObject *self, PyObject *args) {
    PyObject *msgs, *ctx;
    Py_ssize_t i;
    Ctx c;
    if (!PyArg_ParseTuple(args, "O!nO!:take", &PyList_Type, &msgs, &i, &PyTuple_Type, &ctx))
        return NULL;
    if (i < 0 || i > PyList_GET_SIZE(msgs)) {
        PyErr_Format(PyExc_ValueError, "take: start %zd is not an index of the %zd messages", i,
                     PyList_GET_SIZE(msgs));
        return NULL;
    }
    if (parse_ctx(ctx, &c) < 0)
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    long partition = -1;
    /* the size is read again each time, and each message held while it is walked: the walk
     * calls the message's methods, which could change the list */
    for (; i < PyList_GET_SIZE(msgs); i++) {
        PyObject *msg = Py_NewRef(PyList_GET_ITEM(msgs, i));
        int r = take_one(msg, &c, &partition, out);
        Py_DECREF(msg);
        if (r < 0) {
            Py_DECREF(out);
            return NULL;
        }
        if (r == 0)
            break;
    }
    if (partition < 0)
        return Py_BuildValue("(nON)", i, Py_None, out);
    return Py_BuildValue("(nlN)", i, partition, out);
}

/* The walk alone, for the tests that pin it to the Python walks: (run_id, seq, hash,
 * finishes_run, sealed_at) or None. */
static PyObject *leaf_fields(PyObject *self, PyObject *args) {
    PyObject *ctx;
    Py_buffer value;
    Ctx c;
    Fields f;
    if (!PyArg_ParseTuple(args, "y*O!:leaf_fields", &value, &PyTuple_Type, &ctx))
        return NULL;
    PyObject *out = NULL;
    if (parse_ctx(ctx, &c) < 0)
        goto done;
    int w = walk((const uint8_t *)value.buf, value.len, &c, &f);
    if (w < 0)
        goto done;
    if (w == 0) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    out = Py_BuildValue("(NLy#OL)", f.run_id, (long long)f.seq, f.hash, (Py_ssize_t)32,
                        f.finishes ? Py_True : Py_False, (long long)f.sealed_at);
done:
    PyBuffer_Release(&value);
    return out;
}

static PyObject *sha256_py(PyObject *self, PyObject *arg) {
    Py_buffer data;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0)
        return NULL;
    uint8_t out[32];
    int r = sha256((const uint8_t *)data.buf, (size_t)data.len, out);
    PyBuffer_Release(&data);
    return r < 0 ? NULL : PyBytes_FromStringAndSize((const char *)out, 32);
}

static PyMethodDef methods[] = {
    {"take", take, METH_VARARGS,
     "take(msgs, start, ctx) -> (end, partition, records): the common case from start on"},
    {"leaf_fields", leaf_fields, METH_VARARGS,
     "leaf_fields(value, ctx) -> (run_id, seq, hash, finishes_run, sealed_at) or None"},
    {"sha256", sha256_py, METH_O, "sha256(data) -> digest (the leaf hash's SHA-256)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ctake",
                                    "The archiver's per-event path in C (see _ctake.c).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__ctake(void) {
#define INTERN(var, s)                                                                         \
    if ((var = PyUnicode_InternFromString(s)) == NULL)                                         \
        return NULL;
    INTERN(S_error, "error");
    INTERN(S_partition, "partition");
    INTERN(S_offset, "offset");
    INTERN(S_value, "value");
    INTERN(S_headers, "headers");
    INTERN(S_key, "key");
    return digest_module(&module);
}
