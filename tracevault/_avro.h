/*
 * What tracevault's C walks share (the archiver's take, the sequencer's seal): Avro and UTF-8
 * primitives, each mirroring the Python reader it stands for so that a C walk declines
 * exactly where the Python walk does (the tests of each extension pin them), and the loop
 * that hands a consumed batch to a walk until it declines.
 */
#ifndef TRACEVAULT_AVRO_H
#define TRACEVAULT_AVRO_H
#include <stdint.h>
#include <string.h>

/* Avro's zig-zag varint long, as tracevault/schemas/fast/_varint.py reads it: at most 10
 * bytes, the value within 64 bits. 0 on success; -1 where that reader raises. */
static int read_long(const uint8_t *b, Py_ssize_t end, Py_ssize_t *pos, int64_t *out) {
    Py_ssize_t p = *pos;
    uint64_t n = 0;
    int shift = 0;
    uint8_t x;
    do {
        if (p >= end || shift > 63)
            return -1;
        x = b[p++];
        if (shift == 63 && (x & 0x7F) > 1)
            return -1; /* the value needs more than 64 bits */
        n |= (uint64_t)(x & 0x7F) << shift;
        shift += 7;
    } while (x & 0x80);
    *pos = p;
    *out = (int64_t)((n >> 1) ^ (0 - (n & 1)));
    return 0;
}

/* Avro's zig-zag varint of ``v`` at ``out`` (at most 10 bytes); the bytes written. */
static Py_ssize_t write_long(uint8_t *out, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    Py_ssize_t n = 0;
    while (z >= 0x80) {
        out[n++] = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    out[n++] = (uint8_t)z;
    return n;
}

/* Whether ``p[0:n]`` is what ``bytes.decode("utf-8")`` accepts (strict: no overlong forms,
 * no surrogates, nothing past U+10FFFF). */
static int utf8_valid(const uint8_t *p, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        Py_ssize_t len;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0)
                lo = 0xA0;
            else if (c == 0xED)
                hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F;
        } else
            return 0;
        if (n - i < len || p[i + 1] < lo || p[i + 1] > hi)
            return 0;
        for (Py_ssize_t k = 2; k < len; k++)
            if ((p[i + k] & 0xC0) != 0x80)
                return 0;
        i += len;
    }
    return 1;
}

/* ``bytes.decode("utf-8")`` of a field: 1 and ``*out`` set, 0 if it is not UTF-8 (the walk
 * declines, as the Python one does), -1 on another Python error (memory). */
static int utf8(const uint8_t *p, Py_ssize_t n, PyObject **out) {
    *out = PyUnicode_DecodeUTF8((const char *)p, n, "strict");
    if (*out != NULL)
        return 1;
    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
        return -1;
    PyErr_Clear();
    return 0;
}

/* A tuple subclass without a __dict__ (a NamedTuple), filled with ``n`` stolen references;
 * what ``tuple.__new__(cls, items)`` makes, without the intermediate tuple. */
static PyObject *new_tuple(PyTypeObject *cls, PyObject **items, Py_ssize_t n) {
    PyObject *t = cls->tp_alloc(cls, n);
    if (t == NULL) {
        for (Py_ssize_t i = 0; i < n; i++)
            Py_XDECREF(items[i]);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        PyTuple_SET_ITEM(t, i, items[i]);
    return t;
}

/* ``take(msgs, start, ctx)``, the loop of both C takes: ``one`` on each message from
 * ``start`` on until it declines (0: the Python path handles that message) or fails (-1);
 * the index of the first message it left; ValueError unless 0 <= start <= len(msgs).
 * ``parse`` reads the module's context tuple into ``c``. */
static PyObject *take_messages(PyObject *args, void *c, int (*parse)(PyObject *, void *),
                               int (*one)(PyObject *, const void *)) {
    PyObject *msgs, *ctx;
    Py_ssize_t i;
    if (!PyArg_ParseTuple(args, "O!nO!:take", &PyList_Type, &msgs, &i, &PyTuple_Type, &ctx))
        return NULL;
    if (i < 0 || i > PyList_GET_SIZE(msgs)) {
        PyErr_Format(PyExc_ValueError, "take: start %zd is not an index of the %zd messages", i,
                     PyList_GET_SIZE(msgs));
        return NULL;
    }
    if (parse(ctx, c) < 0)
        return NULL;
    /* the size is read again each time, and each message held while it is walked: the walk
     * calls the message's methods, which could change the list */
    for (; i < PyList_GET_SIZE(msgs); i++) {
        PyObject *msg = Py_NewRef(PyList_GET_ITEM(msgs, i));
        int r = one(msg, c);
        Py_DECREF(msg);
        if (r < 0)
            return NULL;
        if (r == 0)
            break;
    }
    return PyLong_FromSsize_t(i);
}
#endif
