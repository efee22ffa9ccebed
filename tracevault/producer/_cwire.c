/*
 * The Recorder's event bytes in C (docs/design.md, "The Recorder's encoder"): what
 * ``EventEncoder.encode_fields_python`` writes for one event on its fast path (TraceEvent v2),
 * and the chain link the Attestor computes over those bytes. Both run on the Publisher's
 * thread, whose time holding the GIL bounds a busy agent's throughput; the Python twins in
 * tracevault/producer/_wire.py and _attest.py stay the reference, and
 * tests/producer/test_cwire.py pins these bytes to them.
 *
 * ``encode`` writes only what it knows exactly: exact ints within int64, exact str, exact
 * bytes, exact dicts, exact tuples, the run's ErrorInfo type, EventKind members by identity.
 * Anything else (a bool, a subclass, a list for the interleave, an int past int64, a str with
 * a lone surrogate) goes to the Python encoder, called from here, so behaviour (bytes or
 * exception) is the Python's by construction.
 *
 * ``link`` keeps the GIL on purpose: giving it up beside a busy agent thread costs the
 * Publisher's thread the interpreter's switch interval to get it back (docs/identity.md).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_avro.h"
#include "_digest.h"

/* No event is near this; it keeps every size sum and _PyBytes_Resize far from overflow. */
#define MAX_EVENT (PY_SSIZE_T_MAX / 8)
#define NKINDS 10

static PyObject *S_type, *S_message;

/* ---- the output buffer: a bytes object grown in place, cut to size at the end ---------- */

typedef struct {
    PyObject *obj; /* the bytes being written (NULL after a failed resize) */
    Py_ssize_t len, cap;
} Buf;

static int reserve(Buf *b, Py_ssize_t n) {
    if (n <= b->cap - b->len)
        return 0;
    if (n > MAX_EVENT - b->len) {
        PyErr_SetString(PyExc_OverflowError, "encode: the event is too large");
        return -1;
    }
    Py_ssize_t need = b->len + n;
    Py_ssize_t cap = b->cap <= MAX_EVENT / 2 ? b->cap * 2 : MAX_EVENT;
    if (cap < need)
        cap = need;
    if (_PyBytes_Resize(&b->obj, cap) < 0)
        return -1; /* b->obj is NULL now */
    b->cap = cap;
    return 0;
}

static int put(Buf *b, const void *p, Py_ssize_t n) {
    if (reserve(b, n) < 0)
        return -1;
    memcpy(PyBytes_AS_STRING(b->obj) + b->len, p, (size_t)n);
    b->len += n;
    return 0;
}

static int put_byte(Buf *b, uint8_t c) { return put(b, &c, 1); }

static int put_long(Buf *b, int64_t v) {
    if (reserve(b, 10) < 0)
        return -1;
    b->len += write_long((uint8_t *)PyBytes_AS_STRING(b->obj) + b->len, v);
    return 0;
}

/* The writers below give 1 when written, 0 when the C declines (the Python encoder then
 * runs), -1 with a Python error set. */

/* An exact int within int64: 1 and ``*out``, 0 otherwise (or -1 on an error). */
static int as_long(PyObject *o, int64_t *out) {
    if (!PyLong_CheckExact(o))
        return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow)
        return 0;
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = (int64_t)v;
    return 1;
}

static int put_int(Buf *b, PyObject *o) {
    int64_t v;
    int r = as_long(o, &v);
    if (r <= 0)
        return r;
    return put_long(b, v) < 0 ? -1 : 1;
}

/* ``_string``: an exact str, its UTF-8 length and bytes. Not UTF-8 (a lone surrogate):
 * declined, so the Python raises its own UnicodeEncodeError. */
static int put_str(Buf *b, PyObject *s) {
    if (!PyUnicode_CheckExact(s) || PyUnicode_READY(s) < 0)
        return PyErr_Occurred() ? -1 : 0;
    if (PyUnicode_IS_ASCII(s)) {
        Py_ssize_t n = PyUnicode_GET_LENGTH(s);
        return put_long(b, n) < 0 || put(b, PyUnicode_DATA(s), n) < 0 ? -1 : 1;
    }
    PyObject *u = PyUnicode_AsUTF8String(s);
    if (u == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return -1;
        PyErr_Clear();
        return 0;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(u);
    int r = put_long(b, n) < 0 || put(b, PyBytes_AS_STRING(u), n) < 0 ? -1 : 1;
    Py_DECREF(u);
    return r;
}

static int put_bytes(Buf *b, PyObject *o) {
    if (!PyBytes_CheckExact(o))
        return 0;
    Py_ssize_t n = PyBytes_GET_SIZE(o);
    return put_long(b, n) < 0 || put(b, PyBytes_AS_STRING(o), n) < 0 ? -1 : 1;
}

/* A union of null and ``put_one``: branch 0, or branch 1 then the value. */
static int put_optional(Buf *b, PyObject *o, int (*put_one)(Buf *, PyObject *)) {
    if (o == Py_None)
        return put_byte(b, 0) < 0 ? -1 : 1;
    if (put_byte(b, 2) < 0)
        return -1;
    return put_one(b, o);
}

/* ``error``: None, or exactly the run's ErrorInfo type with str fields. */
static int put_error(Buf *b, PyObject *err, PyObject *error_type) {
    if (err == Py_None)
        return put_byte(b, 0) < 0 ? -1 : 1;
    if ((PyObject *)Py_TYPE(err) != error_type)
        return 0;
    PyObject *t = PyObject_GetAttr(err, S_type);
    PyObject *m = t == NULL ? NULL : PyObject_GetAttr(err, S_message);
    int r;
    if (m == NULL)
        r = PyErr_ExceptionMatches(PyExc_AttributeError) ? (PyErr_Clear(), 0) : -1;
    else if (put_byte(b, 2) < 0)
        r = -1;
    else
        r = put_str(b, t);
    if (r == 1)
        r = put_str(b, m);
    Py_XDECREF(t);
    Py_XDECREF(m);
    return r;
}

/* The attributes map: None or {} (empty), an exact int n (``{"duration_us": str(n)}``), or
 * an exact dict of str to str, as one block then the empty block. */
static int put_attributes(Buf *b, PyObject *extra) {
    int r = 1;
    if (PyLong_CheckExact(extra)) {
        int64_t v;
        if ((r = as_long(extra, &v)) <= 0)
            return r;
        char digits[24];
        int n = snprintf(digits, sizeof digits, "%lld", (long long)v);
        if (n <= 0 || n >= (int)sizeof digits) {
            PyErr_SetString(PyExc_SystemError, "encode: formatting an int failed");
            return -1;
        }
        static const uint8_t key[] = "\x02\x16"
                                     "duration_us";
        if (put(b, key, 13) < 0 || put_long(b, n) < 0 || put(b, digits, n) < 0)
            return -1;
    } else if (PyDict_CheckExact(extra) && PyDict_GET_SIZE(extra) > 0) {
        Py_ssize_t size = PyDict_GET_SIZE(extra), pos = 0, seen = 0;
        PyObject *k, *v;
        if (put_long(b, size) < 0)
            return -1;
        while (r == 1 && PyDict_Next(extra, &pos, &k, &v)) {
            if ((r = put_str(b, k)) == 1)
                r = put_str(b, v);
            seen++;
        }
        if (r == 1 && seen != size) /* only Python code could change it, and none ran */
            return 0;
    } else if (extra != Py_None && !(PyDict_CheckExact(extra)))
        return 0;
    if (r == 1 && put_byte(b, 0) < 0)
        return -1;
    return r;
}

/* The interleave: None, or an exact tuple (branch_prev or None, started_at_done, done_order). */
static int put_interleave(Buf *b, PyObject *il) {
    if (il == Py_None)
        return put_byte(b, 0) < 0 ? -1 : 1;
    if (!PyTuple_CheckExact(il) || PyTuple_GET_SIZE(il) != 3)
        return 0;
    int r;
    if (put_byte(b, 2) < 0)
        return -1;
    if ((r = put_optional(b, PyTuple_GET_ITEM(il, 0), put_int)) != 1 ||
        (r = put_int(b, PyTuple_GET_ITEM(il, 1))) != 1)
        return r;
    return put_int(b, PyTuple_GET_ITEM(il, 2));
}

/* The event after the prefix, seq and kind: fields[2:12] in schema order. */
static int put_rest(Buf *b, PyObject *const *f, PyObject *agent, PyObject *error_type) {
    int r;
    if ((r = put_int(b, f[2])) != 1)
        return r;
    if (put(b, PyBytes_AS_STRING(agent), PyBytes_GET_SIZE(agent)) < 0)
        return -1;
    if ((r = put_optional(b, f[5], put_str)) != 1 || (r = put_optional(b, f[6], put_int)) != 1 ||
        (r = put_bytes(b, f[3])) != 1 || (r = put_bytes(b, f[4])) != 1 ||
        (r = put_error(b, f[7], error_type)) != 1 ||
        (r = put_optional(b, f[8], put_str)) != 1 || (r = put_optional(b, f[9], put_int)) != 1 ||
        (r = put_attributes(b, f[10])) != 1)
        return r;
    return put_interleave(b, f[11]);
}

static Py_ssize_t bytes_len(PyObject *o) { return PyBytes_CheckExact(o) ? PyBytes_GET_SIZE(o) : 0; }

/* The whole event into a new bytes object: 1 and ``*out``, 0 declined, -1 error. */
static int encode_event(PyObject *prefix, PyObject *agent, PyObject *kinds, PyObject *error_type,
                        PyObject *fields, PyObject **out) {
    PyObject *const *f = &PyTuple_GET_ITEM(fields, 0);
    Py_ssize_t kind = 0;
    while (kind < NKINDS && PyTuple_GET_ITEM(kinds, kind) != f[1])
        kind++;
    if (kind == NKINDS)
        return 0;
    /* room for the sizes known now; each sum is bounded before it is made */
    Py_ssize_t guess = 256, part[4] = {PyBytes_GET_SIZE(prefix), PyBytes_GET_SIZE(agent),
                                       bytes_len(f[3]), bytes_len(f[4])};
    for (int i = 0; i < 4; i++) {
        if (part[i] > MAX_EVENT - guess) {
            PyErr_SetString(PyExc_OverflowError, "encode: the event is too large");
            return -1;
        }
        guess += part[i];
    }
    Buf b = {PyBytes_FromStringAndSize(NULL, guess), 0, guess};
    if (b.obj == NULL)
        return -1;
    int r = put(&b, PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix)) < 0 ? -1 : 1;
    if (r == 1)
        r = put_int(&b, f[0]);
    if (r == 1)
        r = put_byte(&b, (uint8_t)(2 * kind)) < 0 ? -1 : 1;
    if (r == 1)
        r = put_rest(&b, f, agent, error_type);
    if (r == 1 && b.len < b.cap && _PyBytes_Resize(&b.obj, b.len) < 0)
        return -1;
    if (r != 1) {
        Py_XDECREF(b.obj);
        return r;
    }
    *out = b.obj;
    return 1;
}

/* Whether a METH_FASTCALL function got its ``want`` arguments; TypeError if not. */
static int arity(const char *name, Py_ssize_t nargs, Py_ssize_t want) {
    if (nargs == want)
        return 1;
    PyErr_Format(PyExc_TypeError, "%s expected %zd arguments, got %zd", name, want, nargs);
    return 0;
}

PyDoc_STRVAR(encode_doc,
             "encode(prefix, agent, layout, fields, /) -> bytes\n\n"
             "One event's TraceEvent v2 bytes, as EventEncoder.encode_fields_python writes "
             "them. ``layout`` is (the ten EventKind members in schema order, the ErrorInfo "
             "type, the Python encoder): what the C does not handle exactly, it hands to the "
             "Python encoder, whose result or exception this returns or raises.");

static PyObject *wire_encode(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    if (!arity("encode", nargs, 4))
        return NULL;
    PyObject *prefix = args[0], *agent = args[1], *layout = args[2], *fields = args[3];
    if (!PyBytes_CheckExact(prefix) || !PyBytes_CheckExact(agent)) {
        PyErr_SetString(PyExc_TypeError, "encode: prefix and agent must be bytes");
        return NULL;
    }
    if (!PyTuple_CheckExact(layout) || PyTuple_GET_SIZE(layout) != 3 ||
        !PyTuple_CheckExact(PyTuple_GET_ITEM(layout, 0)) ||
        PyTuple_GET_SIZE(PyTuple_GET_ITEM(layout, 0)) != NKINDS ||
        !PyType_Check(PyTuple_GET_ITEM(layout, 1)) ||
        !PyCallable_Check(PyTuple_GET_ITEM(layout, 2))) {
        PyErr_SetString(PyExc_TypeError, "encode: layout must be (10 kinds, the ErrorInfo type, "
                                         "the Python encoder)");
        return NULL;
    }
    PyObject *out = NULL;
    int r = 0;
    if (PyTuple_CheckExact(fields) && PyTuple_GET_SIZE(fields) == 12)
        r = encode_event(prefix, agent, PyTuple_GET_ITEM(layout, 0), PyTuple_GET_ITEM(layout, 1),
                         fields, &out);
    if (r < 0)
        return NULL;
    if (r == 1)
        return out;
    return PyObject_CallOneArg(PyTuple_GET_ITEM(layout, 2), fields);
}

/* ---- link: chain.link, keeping the GIL ------------------------------------------------- */

static const uint8_t EVENT_DOMAIN[20] = "tracevault/v1/event";

PyDoc_STRVAR(link_doc, "link(prev, raw, /) -> bytes\n\n"
                       "SHA-256(EVENT_DOMAIN || prev || raw): tracevault.chain.link, with the GIL "
                       "held throughout. ``prev`` is a 32-byte hash.");

static PyObject *chain_link(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    if (!arity("link", nargs, 2))
        return NULL;
    PyObject *prev = args[0], *raw = args[1];
    if (!PyBytes_Check(prev) || !PyBytes_Check(raw)) {
        PyErr_SetString(PyExc_TypeError, "link: prev and raw must be bytes");
        return NULL;
    }
    if (PyBytes_GET_SIZE(prev) != 32) {
        PyErr_Format(PyExc_ValueError, "link: prev must be a 32-byte hash, not %zd bytes",
                     PyBytes_GET_SIZE(prev));
        return NULL;
    }
    uint8_t head[52], out[32];
    memcpy(head, EVENT_DOMAIN, 20);
    memcpy(head + 20, PyBytes_AS_STRING(prev), 32);
    if (sha256_start() < 0 || sha256_update(head, 52) < 0 ||
        sha256_update((const uint8_t *)PyBytes_AS_STRING(raw), (size_t)PyBytes_GET_SIZE(raw)) < 0 ||
        sha256_finish(out) < 0)
        return NULL;
    return PyBytes_FromStringAndSize((const char *)out, 32);
}

static PyMethodDef methods[] = {
    {"encode", (PyCFunction)(void (*)(void))wire_encode, METH_FASTCALL, encode_doc},
    {"link", (PyCFunction)(void (*)(void))chain_link, METH_FASTCALL, link_doc},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cwire", "The Recorder's event bytes and chain link in C.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cwire(void) {
    if (S_type == NULL && ((S_type = PyUnicode_InternFromString("type")) == NULL ||
                           (S_message = PyUnicode_InternFromString("message")) == NULL))
        return NULL;
    return digest_module(&module);
}
