/*
 * The RFC 6962 tree hashing of the log in C: appending leaves to a compact tree, and the
 * root of a perfect subtree (a full tile).
 *
 * Why C: the archiver hashes about two interior nodes per sealed event (the checkpoint's
 * compact tree, the hash tiles it writes), and in Python each costs a call, a bytes join and
 * a hashlib object; here a node is one SHA-256 of 65 bytes (docs/log.md, "Archiver speed").
 * tests/transparency/test_cmerkle.py pins both to the Python definitions in _merkle.py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_digest.h"

static int digest(PyObject *o, const uint8_t **out) {
    if (!PyBytes_Check(o) || PyBytes_GET_SIZE(o) != 32) {
        PyErr_SetString(PyExc_ValueError, "a tree hash is 32 bytes");
        return -1;
    }
    *out = (const uint8_t *)PyBytes_AS_STRING(o);
    return 0;
}

/* The largest tree size: the compact tree's 64-bit size (to_bytes), less one bit so that a
 * size plus a batch of leaves never wraps. */
#define MAX_SIZE (1ULL << 62)

/* extend(hashes, size, leaf_hashes) -> size: CompactTree.extend on its list, in place;
 * ValueError, with nothing changed, if any hash is not 32 bytes of ``bytes``, or the list is
 * not the compact tree of ``size`` leaves (one hash per bit set in ``size``). */
static PyObject *extend(PyObject *self, PyObject *args) {
    PyObject *hashes, *size_o, *leaves;
    if (!PyArg_ParseTuple(args, "O!O!O:extend", &PyList_Type, &hashes, &PyLong_Type, &size_o,
                          &leaves))
        return NULL;
    int overflow;
    long long size = PyLong_AsLongLongAndOverflow(size_o, &overflow);
    if (size == -1 && PyErr_Occurred())
        return NULL;
    if (overflow || size < 0 || (unsigned long long)size > MAX_SIZE) {
        PyErr_SetString(PyExc_ValueError, "extend: the tree size is out of range");
        return NULL;
    }
    unsigned long long n = (unsigned long long)size;
    if (PyList_GET_SIZE(hashes) != __builtin_popcountll(n)) {
        PyErr_Format(PyExc_ValueError,
                     "extend: %zd hashes are not the compact tree of %llu leaves",
                     PyList_GET_SIZE(hashes), n);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(leaves, "leaf hashes must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    const uint8_t *h;
    /* PySequence_Fast may have run Python code (an iterator): check the list again */
    if (PyList_GET_SIZE(hashes) != __builtin_popcountll(n) ||
        (unsigned long long)count > MAX_SIZE - n) {
        PyErr_SetString(PyExc_ValueError, "extend: the tree changed, or grows past its size");
        goto fail;
    }
    for (Py_ssize_t i = 0; i < count; i++) { /* all checked first: nothing changes on error */
        if (digest(items[i], &h) < 0)
            goto fail;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(hashes); i++) {
        if (digest(PyList_GET_ITEM(hashes, i), &h) < 0)
            goto fail;
    }
    /* From here no Python code runs (bytes and list operations only), and the list holds one
     * hash per bit of n: each merge below has its two children. */
    for (Py_ssize_t i = 0; i < count; i++) {
        if (PyList_Append(hashes, items[i]) < 0)
            goto fail;
        n++;
        for (unsigned long long m = n; !(m & 1); m >>= 1) {
            Py_ssize_t k = PyList_GET_SIZE(hashes);
            const uint8_t *l = (const uint8_t *)PyBytes_AS_STRING(PyList_GET_ITEM(hashes, k - 2));
            const uint8_t *r = (const uint8_t *)PyBytes_AS_STRING(PyList_GET_ITEM(hashes, k - 1));
            uint8_t out[32];
            if (hash_children(l, r, out) < 0)
                goto fail;
            PyObject *node = PyBytes_FromStringAndSize((const char *)out, 32);
            if (node == NULL || PyList_SetSlice(hashes, k - 2, k, NULL) < 0 ||
                PyList_Append(hashes, node) < 0) {
                Py_XDECREF(node);
                goto fail;
            }
            Py_DECREF(node);
        }
    }
    Py_DECREF(seq);
    return PyLong_FromUnsignedLongLong(n);
fail:
    Py_DECREF(seq);
    return NULL;
}

/* perfect_root(hashes) -> the root of the perfect subtree over them (a power of two, <= 256:
 * a full tile's row, or part of one). */
static PyObject *perfect_root(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "perfect_root takes a sequence of hashes");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > 256 || (n & (n - 1))) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "perfect_root: a power of two of at most 256 hashes");
        return NULL;
    }
    uint8_t layer[256][32];
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *h;
        if (digest(items[i], &h) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        memcpy(layer[i], h, 32);
    }
    Py_DECREF(seq);
    /* the GIL is kept: ~50 us of work, less than winning it back from a busy thread */
    for (Py_ssize_t w = n; w > 1; w >>= 1)
        for (Py_ssize_t i = 0; i < w / 2; i++)
            if (hash_children(layer[2 * i], layer[2 * i + 1], layer[i]) < 0)
                return NULL;
    return PyBytes_FromStringAndSize((const char *)layer[0], 32);
}

static PyObject *hash_children_py(PyObject *self, PyObject *args) {
    const uint8_t *l, *r;
    PyObject *lo, *ro;
    if (!PyArg_ParseTuple(args, "OO:hash_children", &lo, &ro) || digest(lo, &l) < 0 ||
        digest(ro, &r) < 0)
        return NULL;
    uint8_t out[32];
    if (hash_children(l, r, out) < 0)
        return NULL;
    return PyBytes_FromStringAndSize((const char *)out, 32);
}

static PyMethodDef methods[] = {
    {"extend", extend, METH_VARARGS, "extend(hashes, size, leaf_hashes) -> size"},
    {"perfect_root", perfect_root, METH_O, "perfect_root(hashes) -> root"},
    {"hash_children", hash_children_py, METH_VARARGS, "hash_children(left, right) -> node"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cmerkle",
                                    "RFC 6962 tree hashing in C (see _cmerkle.c).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__cmerkle(void) { return digest_module(&module); }
