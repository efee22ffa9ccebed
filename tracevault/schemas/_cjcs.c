/*
 * The canonical-JSON check of the agent's path in C: ``scan(value)`` is ``_jcs._scan(value, 0)``
 * (tracevault/schemas/_jcs.py), the pass that says which encoder writes a value and refuses
 * what has no RFC 8785 form.
 *
 * Why C: the Recorder encodes every request and response on the agent's thread, and the
 * Python walk cost about as much as orjson's encoding of the same value (docs/design.md,
 * "The event"). Here a 1.5 KB payload is checked in a fraction of that.
 *
 * What the C decides itself: exact dicts, lists and tuples, exact str, None, bool, ints
 * within +-(2**53 - 1), and floats; it raises ``Unencodable`` (the class _jcs gives ``init``)
 * for NaN and Infinity, a key that is not a str, and nesting past MAX_DEPTH. Anything else
 * (a subclass, a str-subclass key, an int past 2**53 - 1 that needs ``exact_int``, any other
 * object) ends the walk, and the Python ``_scan`` then checks the whole value: the walk runs
 * no Python code at all (exact types only; no __eq__, __hash__ or __int__ is called), so no
 * container can change under it, and it holds borrowed references safely under the GIL.
 * The recursion is bounded by MAX_DEPTH (one C frame per level, about 200), far inside the
 * C stack. tests/schemas/test_cjcs.py pins it to the Python walk on generated values.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>

#define FLOATS 1 /* _jcs._FLOATS */
#define SLOW 2   /* _jcs._SLOW */
#define DEFER -2 /* not decided here: the Python walk checks the whole value */
#define REFUSED -1
#define MAX_SAFE_INTEGER ((1LL << 53) - 1)

static PyObject *unencodable;  /* _jcs.Unencodable */
static PyObject *python_scan;  /* _jcs._scan(value, depth) */
static long max_depth = -1;    /* _jcs.MAX_DEPTH */

static int refuse(void) {
    PyErr_SetNone(unencodable);
    return REFUSED;
}

/* A key of a type that is plainly not str: refused. Any other object defers, as a str
 * subclass does (its own isascii() could run): _scan's isinstance(k, str) reads __class__,
 * which a class may define. */
static int other_key(PyObject *k) {
    PyTypeObject *t = Py_TYPE(k);
    if (t == &PyLong_Type || t == &PyFloat_Type || t == &PyBool_Type || k == Py_None ||
        t == &PyTuple_Type || t == &PyBytes_Type || t == &PyFrozenSet_Type)
        return refuse();
    return DEFER;
}

/* A key: an exact str, SLOW when it has a character past U+FFFF, which orjson sorts by code
 * point and JCS by UTF-16 code units. A UCS4-kind string has one when it was built
 * canonically; the check reads it to be sure. */
static int key_flags(PyObject *k) {
    if (!PyUnicode_CheckExact(k))
        return other_key(k);
    if (PyUnicode_IS_ASCII(k) || PyUnicode_KIND(k) != PyUnicode_4BYTE_KIND)
        return 0;
    const Py_UCS4 *data = PyUnicode_4BYTE_DATA(k);
    Py_ssize_t n = PyUnicode_GET_LENGTH(k);
    for (Py_ssize_t i = 0; i < n; i++)
        if (data[i] > 0xFFFF)
            return SLOW;
    return 0;
}

/* _jcs._leaf of an exact float: refused when NaN or infinite, else 0 where orjson writes it
 * as ECMAScript does (non-integral, 1e-4 <= |v| < 1e16), FLOATS elsewhere. */
static int float_flags(PyObject *o) {
    double v = PyFloat_AS_DOUBLE(o);
    if (!isfinite(v))
        return refuse();
    double a = fabs(v);
    return (a >= 1e-4 && a < 1e16 && floor(v) != v) ? 0 : FLOATS;
}

/* An exact int within +-(2**53 - 1) is 0; a larger one needs exact_int: deferred. */
static int int_flags(PyObject *o) {
    int overflow;
    long long n = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || n > MAX_SAFE_INTEGER || n < -MAX_SAFE_INTEGER)
        return DEFER;
    return 0; /* an exact int cannot fail to convert (no __index__ runs) */
}

/* A scalar of an exact type: its flags, or DEFER for anything else (a container too). */
static inline int leaf(PyObject *o) {
    PyTypeObject *t = Py_TYPE(o);
    if (t == &PyUnicode_Type || o == Py_None || t == &PyBool_Type)
        return 0;
    if (t == &PyLong_Type)
        return int_flags(o);
    if (t == &PyFloat_Type)
        return float_flags(o);
    return DEFER;
}

static int walk(PyObject *o, long depth);

/* One member of a container: the inline leaves of _scan, then the nested values (walk
 * defers again what is neither, and what leaf deferred). */
static inline int member(PyObject *v, long depth) {
    int f = leaf(v);
    return f == DEFER ? walk(v, depth + 1) : f;
}

static int walk(PyObject *o, long depth) {
    PyTypeObject *t = Py_TYPE(o);
    int flags = 0, f;
    if (t == &PyDict_Type) {
        if (depth >= max_depth)
            return refuse();
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(o, &pos, &k, &v)) {
            if ((f = key_flags(k)) < 0)
                return f;
            flags |= f;
            if ((f = member(v, depth)) < 0)
                return f;
            flags |= f;
        }
        return flags;
    }
    if (t == &PyList_Type || t == &PyTuple_Type) {
        if (depth >= max_depth)
            return refuse();
        /* nothing here runs Python code, so the size and the items stay as they are */
        Py_ssize_t n = Py_SIZE(o);
        PyObject **items = PySequence_Fast_ITEMS(o);
        for (Py_ssize_t i = 0; i < n; i++) {
            if ((f = member(items[i], depth)) < 0)
                return f;
            flags |= f;
        }
        return flags;
    }
    return leaf(o); /* DEFER for subclasses and other objects: the Python walk's own rules */
}

/* scan(value) -> int: the flags _jcs._scan(value, 0) returns, or its Unencodable. */
static PyObject *scan(PyObject *self, PyObject *value) {
    if (python_scan == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_cjcs.init() has not been called");
        return NULL;
    }
    int flags = walk(value, 0);
    if (flags >= 0)
        return PyLong_FromLong(flags);
    if (flags == REFUSED)
        return NULL;
    PyObject *got = PyObject_CallFunction(python_scan, "Oi", value, 0);
    if (got != NULL && !PyLong_CheckExact(got)) {
        PyErr_Format(PyExc_TypeError, "_scan gave a %.100s, not an int", Py_TYPE(got)->tp_name);
        Py_CLEAR(got);
    }
    return got;
}

/* init(unencodable, scan, max_depth): what _jcs defines, given once when it loads this. */
static PyObject *init(PyObject *self, PyObject *args) {
    PyObject *exc, *fallback;
    long depth;
    if (!PyArg_ParseTuple(args, "OOl:init", &exc, &fallback, &depth))
        return NULL;
    if (!PyType_Check(exc) || !PyType_IsSubtype((PyTypeObject *)exc,
                                                 (PyTypeObject *)PyExc_Exception)) {
        PyErr_SetString(PyExc_TypeError, "init: unencodable must be an Exception subclass");
        return NULL;
    }
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "init: scan must be callable");
        return NULL;
    }
    if (depth < 0 || depth > 1000) {
        PyErr_SetString(PyExc_ValueError, "init: max_depth must be within 0..1000");
        return NULL;
    }
    Py_INCREF(exc);
    Py_INCREF(fallback);
    Py_XSETREF(unencodable, exc);
    Py_XSETREF(python_scan, fallback);
    max_depth = depth;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O, "The flags _jcs._scan(value, 0) returns, or its Unencodable."},
    {"init", init, METH_VARARGS, "init(unencodable, scan, max_depth): _jcs's, once."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cjcs",
                                    "The canonical-JSON check in C (see _cjcs.c).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__cjcs(void) { return PyModule_Create(&module); }
