/*
 * One file-store put (FileStore._put_anonymous) as one call that releases the GIL once.
 *
 * Why C: the archiver's flush threads put hundreds of objects a second while its main thread
 * runs Python. In Python a put is nine os calls, and each one gives the GIL back and must win
 * it again from the busy main thread, so the writers and the main thread took turns instead
 * of using both cores (docs/log.md, "Archiver speed"). Here the whole sequence runs without
 * the GIL: the same system calls, in the same order, with the same durability.
 *
 * The O_TMPFILE flag is the caller's (FileStore._O_TMPFILE), so one switch turns the nameless
 * files off for both paths (tests inject a kernel without it that way).
 *
 * put(parent, name, data, mode, ns, tmpflag) -> 1 linked (object and name fsynced), 0 the name exists
 * (nothing written: the caller compares), -1 no O_TMPFILE here, -2 no /proc/self/fd here
 * (the caller falls back to a named temp file); OSError for anything else.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#ifdef O_TMPFILE
#define FALLBACK (-1) /* no O_TMPFILE or no /proc/self/fd on this file system */

/* A nameless file in the directory ``dfd`` holding ``data``, read-only and locked until
 * ``ns`` (its mtime), not yet synced: its fd, or -1 with ``*err`` an errno or FALLBACK. */
static int write_nameless(int dfd, const Py_buffer *data, int mode, int tmpflag, long long ns,
                          int *err) {
    int fd = openat(dfd, ".", tmpflag | O_WRONLY | O_CLOEXEC, (mode_t)mode);
    if (fd < 0) {
        *err = (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) ? FALLBACK : errno;
        return -1;
    }
    const char *p = data->buf;
    Py_ssize_t left = data->len;
    while (left > 0) {
        ssize_t w = write(fd, p, (size_t)left);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            goto fail;
        }
        p += w;
        left -= w;
    }
    struct timespec times[2] = {{ns / 1000000000LL, ns % 1000000000LL},
                                {ns / 1000000000LL, ns % 1000000000LL}};
    /* fchmod: whatever the umask took away; the lock before the object has a name */
    if (fchmod(fd, (mode_t)mode) < 0 || futimens(fd, times) < 0)
        goto fail;
    return fd;
fail:
    *err = errno;
    close(fd);
    return -1;
}

/* Give the nameless file ``fd`` the name ``name`` in ``dfd``: 1 linked, 0 the name exists,
 * or -1 with ``*err`` an errno or FALLBACK (no /proc/self/fd here). */
static int link_nameless(int fd, int dfd, const char *name, int *err) {
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    if (linkat(AT_FDCWD, proc, dfd, name, AT_SYMLINK_FOLLOW) == 0)
        return 1;
    int e = errno;
    if (e == EEXIST)
        return 0;
    *err = access(proc, F_OK) != 0 ? FALLBACK : e;
    return -1;
}
#endif

#ifdef O_TMPFILE
/* The arguments every put shares, checked before any system call: a file mode, a lock time
 * (ns since the epoch) and a subset of the O_TMPFILE bits (the tests pass O_DIRECTORY alone:
 * a flag the kernel refuses). 0, or -1 with ValueError set. */
static int check_args(const char *fn, int mode, long long ns, int tmpflag) {
    if (mode < 0 || mode > 07777) {
        PyErr_Format(PyExc_ValueError, "%s: mode %d is not a file mode", fn, mode);
        return -1;
    }
    if (ns < 0) {
        PyErr_Format(PyExc_ValueError, "%s: the lock time %lld is before the epoch", fn, ns);
        return -1;
    }
    if (tmpflag & ~O_TMPFILE) {
        PyErr_Format(PyExc_ValueError, "%s: tmpflag %d is not O_TMPFILE", fn, tmpflag);
        return -1;
    }
    return 0;
}
#endif

static PyObject *put(PyObject *self, PyObject *args) {
#ifndef O_TMPFILE
    return PyLong_FromLong(-1);
#else
    PyObject *parent_o, *name_o;
    Py_buffer data;
    int mode, tmpflag;
    long long ns;
    if (!PyArg_ParseTuple(args, "O&O&y*iLi:put", PyUnicode_FSConverter, &parent_o,
                          PyUnicode_FSConverter, &name_o, &data, &mode, &ns, &tmpflag))
        return NULL;
    if (check_args("put", mode, ns, tmpflag) < 0) {
        PyBuffer_Release(&data);
        Py_DECREF(parent_o);
        Py_DECREF(name_o);
        return NULL;
    }
    const char *parent = PyBytes_AS_STRING(parent_o), *name = PyBytes_AS_STRING(name_o);
    const char *failed = parent; /* the path an OSError names */
    int result = 0, err = 0, dfd = -1, fd = -1;
    Py_BEGIN_ALLOW_THREADS
    dfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        err = errno;
        goto out;
    }
    fd = write_nameless(dfd, &data, mode, tmpflag, ns, &err);
    if (fd < 0) {
        if (err == FALLBACK)
            result = -1, err = 0;
        goto out;
    }
    if (fsync(fd) < 0) {
        err = errno;
        goto out;
    }
    int linked = link_nameless(fd, dfd, name, &err);
    if (linked < 0) {
        if (err == FALLBACK)
            result = -2, err = 0;
        else
            failed = name;
        goto out;
    }
    result = linked;
    if (linked == 1 && fsync(dfd) < 0) /* the name */
        err = errno;
out:
    if (fd >= 0)
        close(fd);
    if (dfd >= 0)
        close(dfd);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyObject *ret = NULL;
    if (err) {
        errno = err;
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, failed);
    } else {
        ret = PyLong_FromLong(result);
    }
    Py_DECREF(parent_o);
    Py_DECREF(name_o);
    return ret;
#endif
}

#ifdef O_TMPFILE
typedef struct {
    PyObject *parent, *name; /* bytes (file system encoding) */
    Py_buffer data;
    int dfd, fd, result;
} Item;

static void name_it(char *failed, const char *path) {
    snprintf(failed, PATH_MAX, "%s", path);
}

/* Phase 1 of a chunk: each object written as a nameless file, locked, not yet synced.
 * 0, an errno (``failed`` names the path), or FALLBACK. */
static int write_chunk(Item *it, Py_ssize_t n, int mode, int tmpflag, long long ns,
                       char *failed) {
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *parent = PyBytes_AS_STRING(it[i].parent);
        int err = 0;
        if (i > 0 && strcmp(parent, PyBytes_AS_STRING(it[i - 1].parent)) == 0)
            it[i].dfd = dup(it[i - 1].dfd);
        else
            it[i].dfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (it[i].dfd < 0)
            err = errno;
        else
            it[i].fd = write_nameless(it[i].dfd, &it[i].data, mode, tmpflag, ns, &err);
        if (err) {
            if (err != FALLBACK)
                name_it(failed, parent);
            return err;
        }
    }
    return 0;
}

/* Phase 2, once every file of the chunk is durable: each name appears. */
static int link_chunk(Item *it, Py_ssize_t n, char *failed) {
    for (Py_ssize_t i = 0; i < n; i++) {
        int err = 0;
        it[i].result = link_nameless(it[i].fd, it[i].dfd, PyBytes_AS_STRING(it[i].name), &err);
        if (it[i].result < 0) {
            if (err != FALLBACK)
                name_it(failed, PyBytes_AS_STRING(it[i].name));
            return err;
        }
    }
    return 0;
}

static void release_chunk(Item *it, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        PyBuffer_Release(&it[i].data);
        Py_DECREF(it[i].parent);
        Py_DECREF(it[i].name);
    }
}

static void close_chunk(Item *it, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (it[i].fd >= 0)
            close(it[i].fd);
        if (it[i].dfd >= 0)
            close(it[i].dfd);
        it[i].fd = it[i].dfd = -1;
    }
}

/* The items of one chunk, converted while the GIL is held: how many (< n on an error set). */
static Py_ssize_t parse_chunk(PyObject *items, Py_ssize_t base, Py_ssize_t n, Item *it) {
    for (Py_ssize_t i = 0; i < n; i++) {
        Item *x = &it[i];
        PyObject *parent_s, *name_s, *item = PyList_GET_ITEM(items, base + i);
        x->fd = x->dfd = -1;
        x->result = 0;
        if (!PyTuple_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "put_batch: an item is not (parent, name, data)");
            return i;
        }
        if (!PyArg_ParseTuple(item, "UUy*", &parent_s, &name_s, &x->data))
            return i;
        x->parent = x->name = NULL;
        if (!PyUnicode_FSConverter(parent_s, &x->parent) ||
            !PyUnicode_FSConverter(name_s, &x->name)) {
            PyBuffer_Release(&x->data);
            Py_XDECREF(x->parent);
            return i;
        }
    }
    return n;
}
#endif

/* put_batch([(parent, name, data), ...], mode, ns, tmpflag, chunk) -> [1 linked | 0 the name exists, ...],
 * or None where O_TMPFILE or /proc/self/fd is missing (the caller then puts each object on
 * its own; any already linked hold the same bytes). Every object and every name is durable
 * when it returns: up to ``chunk`` objects are written as nameless files (each an open file
 * until it is linked: the caller sizes ``chunk`` to its descriptor limit), syncfs() makes them
 * durable, only then are they linked, and a last syncfs() makes the names durable. So a
 * crash leaves a name only on a whole object, as ``put`` does, at one sync of the file
 * system per ``chunk`` objects instead of two fsyncs per object (on a VM's ext4 each fsync is
 * about 200 us of kernel CPU). */
static PyObject *put_batch(PyObject *self, PyObject *args) {
#ifndef O_TMPFILE
    Py_RETURN_NONE;
#else
    PyObject *items;
    int mode, tmpflag;
    long long ns;
    Py_ssize_t chunk;
    if (!PyArg_ParseTuple(args, "O!iLin:put_batch", &PyList_Type, &items, &mode, &ns, &tmpflag,
                          &chunk))
        return NULL;
    if (chunk < 1 || chunk > 65536) {
        PyErr_SetString(PyExc_ValueError, "put_batch: chunk must be 1..65536 files");
        return NULL;
    }
    if (check_args("put_batch", mode, ns, tmpflag) < 0)
        return NULL;
    /* a copy of the list: the GIL is released between chunks, and another thread could
     * change the caller's */
    if ((items = PyList_GetSlice(items, 0, PY_SSIZE_T_MAX)) == NULL)
        return NULL;
    Py_ssize_t total = PyList_GET_SIZE(items);
    Item *it = PyMem_Malloc(sizeof(Item) * (size_t)(total < chunk ? (total ? total : 1) : chunk));
    if (it == NULL) {
        Py_DECREF(items);
        return PyErr_NoMemory();
    }
    PyObject *out = PyList_New(total);
    if (out == NULL) {
        Py_DECREF(items);
        PyMem_Free(it);
        return NULL;
    }
    char failed[PATH_MAX] = "";
    int err = 0, last = -1;
    for (Py_ssize_t base = 0; base < total && !err; base += chunk) {
        Py_ssize_t n = total - base < chunk ? total - base : chunk;
        Py_ssize_t got = parse_chunk(items, base, n, it);
        if (got < n) {
            release_chunk(it, got);
            err = -2; /* the exception is set */
            break;
        }
        Py_BEGIN_ALLOW_THREADS
        err = write_chunk(it, n, mode, tmpflag, ns, failed);
        if (!err && syncfs(it[0].dfd) < 0) {
            err = errno;
            name_it(failed, PyBytes_AS_STRING(it[0].parent));
        }
        if (!err)
            err = link_chunk(it, n, failed);
        if (last < 0 && it[0].dfd >= 0)
            last = dup(it[0].dfd); /* for the last sync, even after a fallback */
        close_chunk(it, n);
        Py_END_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n && !err; i++)
            PyList_SET_ITEM(out, base + i, PyLong_FromLong(it[i].result));
        release_chunk(it, n);
    }
    if (last >= 0) {
        int r;
        Py_BEGIN_ALLOW_THREADS
        r = syncfs(last);
        close(last);
        Py_END_ALLOW_THREADS
        if (r < 0 && (err == 0 || err == FALLBACK)) {
            err = errno;
            snprintf(failed, sizeof failed, "(syncfs)");
        }
    }
    PyMem_Free(it);
    Py_DECREF(items);
    if (err == 0)
        return out;
    Py_DECREF(out);
    if (err == -2)
        return NULL;
    if (err == FALLBACK)
        Py_RETURN_NONE;
    errno = err;
    return PyErr_SetFromErrnoWithFilename(PyExc_OSError, failed);
#endif
}

static PyMethodDef methods[] = {
    {"put_batch", put_batch, METH_VARARGS,
     "put_batch([(parent, name, data)], mode, ns, tmpflag, chunk) -> [1 | 0] or None"},
    {"put", put, METH_VARARGS,
     "put(parent, name, data, mode, ns, tmpflag) -> 1 linked, 0 exists, -1/-2 fall back"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cput",
                                    "One file-store put without the GIL (see _cput.c).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__cput(void) { return PyModule_Create(&module); }
