/*
 * A run's content fields opened in C: an encrypted run's requests and responses, in one call.
 *
 * Why C: every reader of an encrypted run (replay show/run/diff, export, batch) opens two
 * envelopes per event, and in Python each costs a slice of the envelope, a base64 decode, an
 * AES-GCM call with its AAD built, and a canonical-JSON check of the plaintext: about 10 us an
 * event, which made reading an encrypted run 2.3 x slower than reading it in clear
 * (docs/confidentiality.md, "What encryption costs"). Here AES-256-GCM is OpenSSL's, the same
 * library ``cryptography`` calls, with the key schedule made once per run; the plaintext's
 * check is the strict subset of canonical JSON the sequencer's C uses (``_canon.h``).
 *
 *   open_pairs(key, aad_prefix, events) -> [(request, response, canonical) or None, ...]
 *
 * ``events`` is a list of objects with ``seq`` (int), ``request`` and ``response`` (bytes);
 * ``aad_prefix`` is ``RunCipher``'s ``tracevault/v1/content\0<run id>\0``. For each event whose
 * two fields are envelopes of the shapes ``RunCipher`` writes, strictly base64'd, and open
 * under ``key`` for that seq and field, the plaintexts and whether both are in the canonical
 * subset (False: ``check_canonical`` decides). Anything else is None, and the Python opener
 * handles that event: it names the field that does not open, or opens a shape written
 * otherwise. Like the sequencer's take, it never decides that something is wrong.
 *
 * tests/content/test_cfields.py pins it to ``RunCipher.open_pair`` and ``check_canonical``.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <openssl/evp.h>
#include <stdint.h>
#include <string.h>

#include "_avro.h"
#include "_canon.h"

#define NONCE 12
#define TAG 16
#define KEY 32

static const char HEAD[] = "{\"enc\":\"";       /* {"enc":"   */
static const char TAIL[] = "\",\"v\":1}";       /* ","v":1}   */
static const char TOOL[] = "\",\"tool\":";      /* ","tool":  */
static const char V1[] = ",\"v\":1}";           /* ,"v":1}    */
#define HEAD_LEN 8
#define TAIL_LEN 8
#define TOOL_LEN 9
#define V1_LEN 7

static int8_t b64_value[256];

static void b64_init(void) {
    const char *alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    memset(b64_value, -1, sizeof b64_value);
    for (int i = 0; i < 64; i++)
        b64_value[(uint8_t)alphabet[i]] = (int8_t)i;
}

/* Standard, padded base64 (RFC 4648 section 4) as pybase64's validating decoder reads it:
 * a multiple of four characters of the alphabet, with "=" only as the last one or two.
 * The decoded length, or -1. ``out`` holds at least n / 4 * 3 bytes. */
static Py_ssize_t b64_decode(const uint8_t *p, Py_ssize_t n, uint8_t *out) {
    if (n % 4 != 0)
        return -1;
    Py_ssize_t o = 0;
    for (Py_ssize_t i = 0; i < n; i += 4) {
        int last = i + 4 == n;
        int pad = last ? (p[i + 3] == '=') + (p[i + 3] == '=' && p[i + 2] == '=') : 0;
        int8_t a = b64_value[p[i]], b = b64_value[p[i + 1]];
        int8_t c = pad == 2 ? 0 : b64_value[p[i + 2]];
        int8_t d = pad >= 1 ? 0 : b64_value[p[i + 3]];
        if ((a | b | c | d) < 0)
            return -1;
        uint32_t v = ((uint32_t)a << 18) | ((uint32_t)b << 12) | ((uint32_t)c << 6) | (uint32_t)d;
        out[o++] = (uint8_t)(v >> 16);
        if (pad < 2)
            out[o++] = (uint8_t)(v >> 8);
        if (pad < 1)
            out[o++] = (uint8_t)v;
    }
    return o;
}

/* The base64 text an envelope of RunCipher's shapes carries: ``{"enc":"<b64>","v":1}``, or a
 * tool request's ``{"enc":"<b64>","tool":<JSON string>,"v":1}``. 0 for any other shape. */
static int envelope_text(const uint8_t *e, Py_ssize_t n, const uint8_t **text, Py_ssize_t *len) {
    if (n < HEAD_LEN + TAIL_LEN || memcmp(e, HEAD, HEAD_LEN) != 0)
        return 0;
    const uint8_t *start = e + HEAD_LEN, *end = e + n;
    const uint8_t *q = memchr(start, '"', (size_t)(end - start));
    if (q == NULL)
        return 0;
    *text = start;
    *len = q - start;
    if (end - q == TAIL_LEN && memcmp(q, TAIL, TAIL_LEN) == 0)
        return 1;
    /* the tool form: a JSON string literal between ","tool": and ,"v":1} */
    if (end - q < TOOL_LEN + 2 + V1_LEN || memcmp(q, TOOL, TOOL_LEN) != 0 ||
        memcmp(end - V1_LEN, V1, V1_LEN) != 0 || q[TOOL_LEN] != '"')
        return 0;
    Json j = {q + TOOL_LEN + 1, end - V1_LEN};
    return json_string(&j, 0) && j.p == j.end;
}

/* Open one field: its plaintext as new bytes, or NULL without an exception when it does not
 * open here (the Python opener then says why); NULL with an exception only for lack of
 * memory. ``ad`` holds the AAD's prefix and seq, with room for the field's name. */
static PyObject *open_field(EVP_CIPHER_CTX *ctx, PyObject *env, uint8_t *ad, Py_ssize_t ad_len,
                            const char *field, uint8_t *scratch, Py_ssize_t scratch_len) {
    if (!PyBytes_Check(env))
        return NULL;
    const uint8_t *text;
    Py_ssize_t text_len;
    if (!envelope_text((const uint8_t *)PyBytes_AS_STRING(env), PyBytes_GET_SIZE(env), &text,
                       &text_len))
        return NULL;
    if (text_len / 4 * 3 > scratch_len)
        return NULL;
    Py_ssize_t blob_len = b64_decode(text, text_len, scratch);
    if (blob_len < NONCE + TAG || blob_len - NONCE - TAG > INT_MAX)
        return NULL;
    size_t field_len = strlen(field);
    memcpy(ad + ad_len, field, field_len);
    int ct_len = (int)(blob_len - NONCE - TAG), outl = 0, finl = 0;
    PyObject *out = PyBytes_FromStringAndSize(NULL, ct_len);
    if (out == NULL)
        return NULL;
    uint8_t *plain = (uint8_t *)PyBytes_AS_STRING(out);
    if (EVP_DecryptInit_ex(ctx, NULL, NULL, NULL, scratch) != 1 ||
        EVP_DecryptUpdate(ctx, NULL, &outl, ad, (int)(ad_len + (Py_ssize_t)field_len)) != 1 ||
        EVP_DecryptUpdate(ctx, plain, &outl, scratch + NONCE, ct_len) != 1 || outl != ct_len ||
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, TAG, scratch + NONCE + ct_len) != 1 ||
        EVP_DecryptFinal_ex(ctx, plain + outl, &finl) != 1 || finl != 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *S_seq, *S_request, *S_response;

static PyObject *open_pairs(PyObject *self, PyObject *args) {
    Py_buffer key, prefix;
    PyObject *events;
    if (!PyArg_ParseTuple(args, "y*y*O!:open_pairs", &key, &prefix, &PyList_Type, &events))
        return NULL;
    PyObject *result = NULL;
    uint8_t *ad = NULL, *scratch = NULL;
    EVP_CIPHER_CTX *ctx = NULL;
    if (key.len != KEY) {
        PyErr_SetString(PyExc_ValueError, "open_pairs: a data key is 32 bytes");
        goto done;
    }
    if (prefix.len > 4096) {
        PyErr_SetString(PyExc_ValueError, "open_pairs: the AAD prefix is over 4096 bytes");
        goto done;
    }
    /* the AAD: prefix, seq (8 bytes, big-endian, signed), "request" or "response" */
    if ((ad = PyMem_Malloc((size_t)prefix.len + 8 + 8)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(ad, prefix.buf, (size_t)prefix.len);
    ctx = EVP_CIPHER_CTX_new();
    if (ctx == NULL || EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, NONCE, NULL) != 1 ||
        EVP_DecryptInit_ex(ctx, NULL, NULL, (const unsigned char *)key.buf, NULL) != 1) {
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL: AES-256-GCM init failed");
        goto done;
    }
    Py_ssize_t n = PyList_GET_SIZE(events), scratch_len = 0;
    if ((result = PyList_New(n)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(events) && i < n; i++) {
        PyObject *ev = PyList_GET_ITEM(events, i);
        Py_INCREF(ev); /* the list may change while attributes run Python code */
        PyObject *seq_o = PyObject_GetAttr(ev, S_seq);
        PyObject *req = seq_o ? PyObject_GetAttr(ev, S_request) : NULL;
        PyObject *resp = req ? PyObject_GetAttr(ev, S_response) : NULL;
        Py_DECREF(ev);
        PyObject *item = NULL, *req_p = NULL, *resp_p = NULL;
        if (resp == NULL)
            goto fail_item;
        int overflow = 0;
        long long seq = PyLong_Check(seq_o) ? PyLong_AsLongLongAndOverflow(seq_o, &overflow) : 0;
        if (seq == -1 && PyErr_Occurred())
            goto fail_item;
        if (!PyLong_Check(seq_o) || overflow || !PyBytes_Check(req) || !PyBytes_Check(resp))
            goto none_item;
        Py_ssize_t need = (PyBytes_GET_SIZE(req) > PyBytes_GET_SIZE(resp) ? PyBytes_GET_SIZE(req)
                                                                          : PyBytes_GET_SIZE(resp));
        if (need > scratch_len) {
            uint8_t *grown = PyMem_Realloc(scratch, (size_t)need);
            if (grown == NULL) {
                PyErr_NoMemory();
                goto fail_item;
            }
            scratch = grown;
            scratch_len = need;
        }
        for (int b = 0; b < 8; b++)
            ad[prefix.len + b] = (uint8_t)((unsigned long long)seq >> (56 - 8 * b));
        req_p = open_field(ctx, req, ad, prefix.len + 8, "request", scratch, scratch_len);
        if (req_p == NULL && PyErr_Occurred())
            goto fail_item;
        if (req_p != NULL)
            resp_p = open_field(ctx, resp, ad, prefix.len + 8, "response", scratch, scratch_len);
        if (resp_p == NULL && PyErr_Occurred())
            goto fail_item;
        if (req_p == NULL || resp_p == NULL)
            goto none_item;
        int canon = canonical((const uint8_t *)PyBytes_AS_STRING(req_p), PyBytes_GET_SIZE(req_p)) &&
                    canonical((const uint8_t *)PyBytes_AS_STRING(resp_p), PyBytes_GET_SIZE(resp_p));
        item = PyTuple_Pack(3, req_p, resp_p, canon ? Py_True : Py_False);
        if (item == NULL)
            goto fail_item;
        goto set_item;
    none_item:
        item = Py_NewRef(Py_None);
    set_item:
        Py_XDECREF(seq_o);
        Py_XDECREF(req);
        Py_XDECREF(resp);
        Py_XDECREF(req_p);
        Py_XDECREF(resp_p);
        PyList_SET_ITEM(result, i, item);
        continue;
    fail_item:
        Py_XDECREF(seq_o);
        Py_XDECREF(req);
        Py_XDECREF(resp);
        Py_XDECREF(req_p);
        Py_XDECREF(resp_p);
        Py_CLEAR(result);
        goto done;
    }
    /* a list that shrank while attributes ran Python code: what was not reached is None */
    if (result != NULL)
        for (Py_ssize_t i = 0; i < n; i++)
            if (PyList_GET_ITEM(result, i) == NULL)
                PyList_SET_ITEM(result, i, Py_NewRef(Py_None));
done:
    EVP_CIPHER_CTX_free(ctx);
    PyMem_Free(ad);
    PyMem_Free(scratch);
    PyBuffer_Release(&key);
    PyBuffer_Release(&prefix);
    return result;
}

static PyMethodDef methods[] = {
    {"open_pairs", open_pairs, METH_VARARGS,
     "open_pairs(key, aad_prefix, events) -> [(request, response, canonical) or None]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cfields",
                                    "An encrypted run's content opened in C (see _cfields.c).",
                                    -1, methods};

PyMODINIT_FUNC PyInit__cfields(void) {
    b64_init();
    if ((S_seq = PyUnicode_InternFromString("seq")) == NULL ||
        (S_request = PyUnicode_InternFromString("request")) == NULL ||
        (S_response = PyUnicode_InternFromString("response")) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
