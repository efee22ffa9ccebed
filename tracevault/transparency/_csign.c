/*
 * Ed25519 signatures from OpenSSL's libcrypto, made while holding the GIL.
 *
 * Why C: ``cryptography``'s ``sign`` releases the GIL for the 50 µs a signature takes. On the
 * Recorder's Publisher thread, beside a busy agent thread, every release costs the publisher
 * the interpreter's switch interval (5 ms) before it holds the GIL again, so an agent that
 * signs a note every 64 events ran at half the speed of one that signs none (docs/identity.md,
 * "What identity costs"). Here the signature is the same deterministic RFC 8032 signature
 * from the same library (OpenSSL, which ``cryptography`` links too), and the thread keeps the
 * GIL for its 50 µs. tests/transparency/test_csign.py pins every signature to ``cryptography``'s.
 *
 *   key(seed) -> key        a 32-byte seed's private key, kept by OpenSSL in a capsule
 *   sign(key, message) -> the 64-byte signature of ``message`` (any bytes-like object)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <openssl/evp.h>
#include <stdint.h>

#define KEY_NAME "tracevault.transparency._csign.key"

static void key_free(PyObject *capsule) {
    EVP_PKEY *key = PyCapsule_GetPointer(capsule, KEY_NAME);
    if (key != NULL)
        EVP_PKEY_free(key);
}

static PyObject *key_py(PyObject *self, PyObject *arg) {
    Py_buffer seed;
    if (!PyArg_Parse(arg, "y*:key", &seed))
        return NULL;
    if (seed.len != 32) {
        PyBuffer_Release(&seed);
        PyErr_Format(PyExc_ValueError, "key: an Ed25519 seed is 32 bytes, not %zd", seed.len);
        return NULL;
    }
    EVP_PKEY *key =
        EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, (const unsigned char *)seed.buf, 32);
    PyBuffer_Release(&seed);
    if (key == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL: an Ed25519 key from its seed failed");
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(key, KEY_NAME, key_free);
    if (capsule == NULL)
        EVP_PKEY_free(key);
    return capsule;
}

static PyObject *sign_py(PyObject *self, PyObject *args) {
    PyObject *capsule;
    Py_buffer msg;
    if (!PyArg_ParseTuple(args, "Oy*:sign", &capsule, &msg))
        return NULL;
    if (!PyCapsule_IsValid(capsule, KEY_NAME)) {
        PyBuffer_Release(&msg);
        PyErr_SetString(PyExc_TypeError, "sign: the key is not one key() made");
        return NULL;
    }
    EVP_PKEY *key = PyCapsule_GetPointer(capsule, KEY_NAME);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char sig[64];
    size_t siglen = sizeof sig;
    /* Ed25519 is "one shot": no digest (NULL), the whole message in EVP_DigestSign */
    int ok = ctx != NULL && key != NULL && EVP_DigestSignInit(ctx, NULL, NULL, NULL, key) == 1 &&
             EVP_DigestSign(ctx, sig, &siglen, (const unsigned char *)msg.buf,
                            (size_t)msg.len) == 1 &&
             siglen == 64;
    EVP_MD_CTX_free(ctx);
    PyBuffer_Release(&msg);
    if (!ok) {
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL: the Ed25519 signature failed");
        return NULL;
    }
    return PyBytes_FromStringAndSize((const char *)sig, 64);
}

static PyMethodDef methods[] = {
    {"key", key_py, METH_O, "key(seed) -> the private key of a 32-byte Ed25519 seed"},
    {"sign", sign_py, METH_VARARGS, "sign(key, message) -> 64-byte Ed25519 signature"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_csign",
    "Ed25519 signatures from libcrypto that keep the GIL (see _csign.c).", -1, methods};

PyMODINIT_FUNC PyInit__csign(void) { return PyModule_Create(&module); }
