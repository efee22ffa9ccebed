/*
 * A run's content fields opened in C: an encrypted run's requests and responses, in one call;
 * and sealed: the Recorder's ``Sealer``, one call per event (the second half of this file).
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
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
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

/* -- sealing ---------------------------------------------------------------------------------
 *
 *   Sealer(key, aad_prefix, salt, start=0)
 *     .seal(seq, field, plaintext) -> envelope
 *     .seal_tool_request(seq, request) -> envelope
 *     .seal_event(seq, is_tool, request, response) -> (request envelope, response envelope)
 *
 * The Recorder's sealing (``RunCipher.seal``/``seal_tool_request``) in one call per event: the
 * Publisher's thread paid about 5 us of Python holding the GIL per event for it (nonce, AAD,
 * ``AESGCM.encrypt``, base64, joins, twice). The bytes are exactly the Python's for the same
 * nonces (tests/content/test_cseal_fields.py pins them).
 *
 * Nonce safety: a Sealer owns its run key's one 64-bit counter (``RunCipher`` routes every seal
 * through it when the C is loaded, and its Python counter is then never used). Nonces are
 * ``salt ‖ counter`` (4 + 8 bytes, big-endian); the counter's 2**64 values are each used once,
 * and a Sealer that has used them all refuses with OverflowError (as the Python's
 * ``to_bytes(8)`` does) instead of wrapping. Threads: every method validates its arguments (the
 * only place Python code may run: a ``__buffer__`` or ``__bool__``), then takes its nonces and
 * uses the cipher context and the AAD buffer without running Python code and without releasing
 * the GIL, so a seal is atomic with respect to every other seal on the same Sealer. Never
 * release the GIL in these calls: the counter and the context are guarded by it alone.
 */

static const char B64_ALPHABET[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char TOOL_KEY[] = ",\"tool\":"; /* ,"tool":  as seal_tool_request finds it */
#define TOOL_KEY_LEN 8
#define MAX_PLAIN ((Py_ssize_t)INT_MAX - NONCE - TAG) /* EVP's lengths are int */
#define STACK_BLOB 4096

/* Two base64 characters for each 12-bit value (built at import): three bytes become four
 * characters in two lookups and one store, where the AVX2 path is not there. */
static uint16_t b64_pairs[4096];

static void b64_pairs_init(void) {
    for (int v = 0; v < 4096; v++) {
        uint8_t two[2] = {(uint8_t)B64_ALPHABET[v >> 6], (uint8_t)B64_ALPHABET[v & 63]};
        memcpy(&b64_pairs[v], two, 2); /* in memory order, whatever the byte order */
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define B64_AVX2 1

/* Muła and Lemire's AVX2 base64 ("Faster Base64 Encoding and Decoding using AVX2
 * Instructions", 2018): 24 bytes to 32 characters per step. Each 128-bit lane takes 12 input
 * bytes, in groups of three [a b c] shuffled to the 32-bit word [b a c b]; two multiplies move
 * the four 6-bit indices into the word's four bytes; a 16-entry table adds each index's offset
 * to its ASCII character. ``in[-4 .. -1]`` must be readable (the first load starts there so
 * that lane 0's twelve bytes sit at its positions 4..15); the bytes encoded, a multiple of 24,
 * are returned, the rest left to the scalar loop. */
__attribute__((target("avx2"))) static Py_ssize_t b64_encode_avx2(const uint8_t *in, Py_ssize_t n,
                                                                  uint8_t *out) {
    const __m256i shuffle = _mm256_set_epi8(10, 11, 9, 10, 7, 8, 6, 7, 4, 5, 3, 4, 1, 2, 0, 1, 14,
                                            15, 13, 14, 11, 12, 10, 11, 8, 9, 7, 8, 5, 6, 4, 5);
    const __m256i offsets = _mm256_setr_epi8(65, 71, -4, -4, -4, -4, -4, -4, -4, -4, -4, -4, -19,
                                             -16, 0, 0, 65, 71, -4, -4, -4, -4, -4, -4, -4, -4, -4,
                                             -4, -19, -16, 0, 0);
    Py_ssize_t i = 0;
    /* every load reads in[i - 4 .. i + 27]: within the input while n - i >= 28 */
    for (; n - i >= 28; i += 24, out += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(in + i - 4));
        v = _mm256_shuffle_epi8(v, shuffle);
        __m256i t0 = _mm256_and_si256(v, _mm256_set1_epi32(0x0fc0fc00));
        __m256i t1 = _mm256_mulhi_epu16(t0, _mm256_set1_epi32(0x04000040));
        __m256i t2 = _mm256_and_si256(v, _mm256_set1_epi32(0x003f03f0));
        __m256i t3 = _mm256_mullo_epi16(t2, _mm256_set1_epi32(0x01000010));
        __m256i idx = _mm256_or_si256(t1, t3);
        __m256i sel = _mm256_subs_epu8(idx, _mm256_set1_epi8(51));
        sel = _mm256_sub_epi8(sel, _mm256_cmpgt_epi8(idx, _mm256_set1_epi8(25)));
        v = _mm256_add_epi8(idx, _mm256_shuffle_epi8(offsets, sel));
        _mm256_storeu_si256((__m256i *)(void *)out, v);
    }
    return i;
}
#endif

static int b64_avx2; /* whether this CPU has AVX2 (read at import) */

/* _base64_simd(on) -> whether the AVX2 base64 now runs: the tests pin both paths to the
 * same bytes (on where the CPU has AVX2; off always). */
static PyObject *base64_simd(PyObject *self, PyObject *arg) {
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
#ifdef B64_AVX2
    b64_avx2 = on && __builtin_cpu_supports("avx2");
    return PyBool_FromLong(b64_avx2);
#else
    return Py_NewRef(Py_False);
#endif
}

/* Standard, padded base64 (RFC 4648 section 4) of n bytes: 4 * ceil(n / 3) characters.
 * ``in[-4 .. -1]`` must be readable (the AVX2 path's first load). A 1.5 KB field's base64
 * takes 0.07 us with AVX2, 0.9 us a character at a time: longer than its encryption. */
static void b64_encode(const uint8_t *restrict in, Py_ssize_t n, uint8_t *restrict out) {
    Py_ssize_t i = 0;
#ifdef B64_AVX2
    if (b64_avx2) {
        i = b64_encode_avx2(in, n, out);
        out += i / 3 * 4;
    }
#endif
    for (; n - i >= 3; i += 3, out += 4) {
        uint32_t v = ((uint32_t)in[i] << 16) | ((uint32_t)in[i + 1] << 8) | (uint32_t)in[i + 2];
        uint16_t quad[2] = {b64_pairs[v >> 12], b64_pairs[v & 0xfff]};
        memcpy(out, quad, 4);
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        *out++ = (uint8_t)B64_ALPHABET[v >> 18];
        *out++ = (uint8_t)B64_ALPHABET[(v >> 12) & 63];
        *out++ = '=';
        *out++ = '=';
    } else if (n - i == 2) {
        uint32_t v = ((uint32_t)in[i] << 16) | ((uint32_t)in[i + 1] << 8);
        *out++ = (uint8_t)B64_ALPHABET[v >> 18];
        *out++ = (uint8_t)B64_ALPHABET[(v >> 12) & 63];
        *out++ = (uint8_t)B64_ALPHABET[(v >> 6) & 63];
        *out++ = '=';
    }
}

typedef struct {
    PyObject_HEAD
    EVP_CIPHER_CTX *ctx; /* AES-256-GCM, the run key's schedule made once */
    uint8_t *ad;                       /* the AAD prefix, then room for seq and field */
    Py_ssize_t prefix_len;
    uint64_t next;                     /* the counter of the next nonce */
    int spent;                         /* 1 once all 2**64 counters are used */
    uint8_t salt[4];
} Sealer;

static PyTypeObject SealerType;

static void sealer_dealloc(Sealer *s) {
    EVP_CIPHER_CTX_free(s->ctx); /* clears the key schedule */
    PyMem_Free(s->ad);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *sealer_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"key", "aad_prefix", "salt", "start", NULL};
    Py_buffer key, prefix, salt;
    PyObject *start_o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*y*y*|O!:Sealer", kwlist, &key, &prefix, &salt,
                                     &PyLong_Type, &start_o))
        return NULL;
    Sealer *s = NULL;
    uint64_t start = 0;
    if (key.len != KEY) {
        PyErr_SetString(PyExc_ValueError, "Sealer: a data key is 32 bytes");
        goto done;
    }
    if (salt.len != 4) {
        PyErr_SetString(PyExc_ValueError, "Sealer: the nonce salt is 4 bytes");
        goto done;
    }
    if (prefix.len > (Py_ssize_t)INT_MAX - 16) {
        PyErr_SetString(PyExc_ValueError, "Sealer: the AAD prefix is over 2**31 - 17 bytes");
        goto done;
    }
    if (start_o != NULL) {
        start = PyLong_AsUnsignedLongLong(start_o); /* OverflowError below 0 or at 2**64 */
        if (start == (uint64_t)-1 && PyErr_Occurred())
            goto done;
    }
    if ((s = (Sealer *)type->tp_alloc(type, 0)) == NULL)
        goto done;
    s->next = start;
    memcpy(s->salt, salt.buf, 4);
    s->prefix_len = prefix.len;
    if ((s->ad = PyMem_Malloc((size_t)prefix.len + 16)) == NULL) {
        Py_CLEAR(s);
        PyErr_NoMemory();
        goto done;
    }
    memcpy(s->ad, prefix.buf, (size_t)prefix.len);
    s->ctx = EVP_CIPHER_CTX_new();
    if (s->ctx == NULL || EVP_EncryptInit_ex(s->ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
        EVP_CIPHER_CTX_ctrl(s->ctx, EVP_CTRL_GCM_SET_IVLEN, NONCE, NULL) != 1 ||
        EVP_EncryptInit_ex(s->ctx, NULL, NULL, (const unsigned char *)key.buf, NULL) != 1) {
        Py_CLEAR(s);
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL: AES-256-GCM init failed");
    }
done:
    PyBuffer_Release(&key);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&salt);
    return (PyObject *)s;
}

/* The seq as RunCipher's AAD has it: an int (a bool is one) within int64, as Python's
 * ``int.to_bytes(seq, 8, "big", signed=True)`` takes it (TypeError, OverflowError). */
static int seq_arg(PyObject *o, long long *seq) {
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "seal: seq must be an int, not %.80s", Py_TYPE(o)->tp_name);
        return -1;
    }
    int overflow = 0;
    *seq = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (*seq == -1 && PyErr_Occurred())
        return -1;
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "seal: seq does not fit in 8 signed bytes");
        return -1;
    }
    return 0;
}

static int plain_arg(Py_buffer *b, const char *what) {
    if (b->len > MAX_PLAIN) {
        PyErr_Format(PyExc_OverflowError, "seal: the %s is over 2**31 - 29 bytes", what);
        return -1;
    }
    return 0;
}

/* ``n`` nonces' counters, the first in ``*first``; OverflowError once the counter is spent
 * (a Sealer with fewer than ``n`` left is spent: as Python's, whose second nonce of an event
 * would fail after its first took the last counter). */
static int take_nonces(Sealer *s, uint64_t n, uint64_t *first) {
    if (s->spent || UINT64_MAX - s->next < n - 1) {
        s->spent = 1;
        PyErr_SetString(PyExc_OverflowError,
                        "seal: this run key's 2**64 nonces are used up: no field is sealed");
        return -1;
    }
    *first = s->next;
    if (UINT64_MAX - s->next == n - 1)
        s->spent = 1; /* the last counter is taken */
    else
        s->next += n;
    return 0;
}

/* The length of an envelope around ``plain_len`` bytes sealed, with ``extra`` bytes after the
 * base64 (the tail, or the tool form's): at most about 4/3 * 2**31, so no overflow in a
 * Py_ssize_t of 64 bits; a 32-bit one is checked. */
static Py_ssize_t envelope_len(Py_ssize_t plain_len, Py_ssize_t extra) {
    Py_ssize_t blob = plain_len + NONCE + TAG; /* plain_len <= MAX_PLAIN: fits in int */
    Py_ssize_t groups = blob / 3 + (blob % 3 != 0);
    if (groups > (PY_SSIZE_T_MAX - HEAD_LEN - extra) / 4) {
        PyErr_NoMemory();
        return -1;
    }
    return HEAD_LEN + groups * 4 + extra;
}

/* Seal ``plain`` under nonce ``counter`` with the AAD prefix ‖ seq ‖ ``field``, and write
 * the envelope: HEAD, base64 of nonce ‖ ciphertext ‖ tag, then ``","v":1}``, or with a tool
 * ``name`` (a JSON string literal, ``name_len`` bytes) ``","tool":<name>,"v":1}``. No Python
 * code runs here. NULL with an exception on failure. */
static PyObject *seal_one(Sealer *s, long long seq, const char *field, uint64_t counter,
                          const Py_buffer *plain, const uint8_t *name, Py_ssize_t name_len) {
    Py_ssize_t blob_len = plain->len + NONCE + TAG;
    /* name_len < plain->len <= MAX_PLAIN: the sum cannot overflow */
    Py_ssize_t extra = name == NULL ? TAIL_LEN : TOOL_LEN + name_len + V1_LEN;
    Py_ssize_t total = envelope_len(plain->len, extra);
    if (total < 0)
        return NULL;
    /* four bytes before the blob: base64's first AVX2 load reads them (and ignores them) */
    uint8_t stack[4 + STACK_BLOB], *base = stack;
    if (blob_len > STACK_BLOB && (base = PyMem_Malloc((size_t)blob_len + 4)) == NULL)
        return PyErr_NoMemory();
    uint8_t *blob = base + 4;
    PyObject *out = NULL;
    memset(base, 0, 4);
    memcpy(blob, s->salt, 4);
    for (int b = 0; b < 8; b++) {
        blob[4 + b] = (uint8_t)(counter >> (56 - 8 * b));
        s->ad[s->prefix_len + b] = (uint8_t)((unsigned long long)seq >> (56 - 8 * b));
    }
    size_t field_len = strlen(field);
    memcpy(s->ad + s->prefix_len + 8, field, field_len);
    int ad_len = (int)(s->prefix_len + 8 + (Py_ssize_t)field_len), outl = 0, finl = 0;
    int ct_len = (int)plain->len;
    if (EVP_EncryptInit_ex(s->ctx, NULL, NULL, NULL, blob) != 1 ||
        EVP_EncryptUpdate(s->ctx, NULL, &outl, s->ad, ad_len) != 1 ||
        EVP_EncryptUpdate(s->ctx, blob + NONCE, &outl, (const uint8_t *)plain->buf, ct_len) != 1 ||
        outl != ct_len || EVP_EncryptFinal_ex(s->ctx, blob + NONCE + outl, &finl) != 1 ||
        finl != 0 ||
        EVP_CIPHER_CTX_ctrl(s->ctx, EVP_CTRL_GCM_GET_TAG, TAG, blob + NONCE + ct_len) != 1) {
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL: AES-256-GCM encryption failed");
        goto done;
    }
    if ((out = PyBytes_FromStringAndSize(NULL, total)) == NULL)
        goto done;
    uint8_t *w = (uint8_t *)PyBytes_AS_STRING(out);
    memcpy(w, HEAD, HEAD_LEN);
    b64_encode(blob, blob_len, w + HEAD_LEN);
    w += total - extra;
    if (name == NULL) {
        memcpy(w, TAIL, TAIL_LEN);
    } else {
        memcpy(w, TOOL, TOOL_LEN);
        memcpy(w + TOOL_LEN, name, (size_t)name_len);
        memcpy(w + TOOL_LEN + name_len, V1, V1_LEN);
    }
done:
    if (base != stack)
        PyMem_Free(base);
    return out;
}

/* seal_tool_request's rule: the request's name literal when it has the shape
 * ``...,"tool":<literal>}`` ending in ``"}`` (the last ``,"tool":``), else 0 (a plain seal).
 * The literal is ``request[at + 8 : -1]``: one byte at least, as ``,"tool":`` cannot overlap
 * the closing ``"}``. */
static int tool_name(const Py_buffer *req, const uint8_t **name, Py_ssize_t *name_len) {
    const uint8_t *p = (const uint8_t *)req->buf;
    Py_ssize_t n = req->len;
    if (n < 2 || p[n - 2] != '"' || p[n - 1] != '}')
        return 0;
    for (Py_ssize_t at = n - TOOL_KEY_LEN; at >= 0; at--) {
        if (p[at] == ',' && memcmp(p + at, TOOL_KEY, TOOL_KEY_LEN) == 0) {
            *name = p + at + TOOL_KEY_LEN;
            *name_len = n - 1 - (at + TOOL_KEY_LEN);
            return 1;
        }
    }
    return 0;
}

/* The request's envelope: the tool form when ``is_tool`` and the shape matches, else plain. */
static PyObject *seal_request(Sealer *s, long long seq, int is_tool, uint64_t counter,
                              const Py_buffer *req) {
    const uint8_t *name;
    Py_ssize_t name_len;
    if (is_tool && tool_name(req, &name, &name_len))
        return seal_one(s, seq, "request", counter, req, name, name_len);
    return seal_one(s, seq, "request", counter, req, NULL, 0);
}

static const char *FIELD_NAMES[] = {"request", "response", "error"};

static PyObject *sealer_seal(Sealer *s, PyObject *args) {
    PyObject *seq_o, *field_o;
    Py_buffer plain;
    if (!PyArg_ParseTuple(args, "OOy*:seal", &seq_o, &field_o, &plain))
        return NULL;
    PyObject *out = NULL;
    long long seq;
    const char *field = NULL;
    uint64_t counter;
    if (seq_arg(seq_o, &seq) < 0 || plain_arg(&plain, "plaintext") < 0)
        goto done;
    if (PyUnicode_Check(field_o))
        for (size_t i = 0; i < sizeof FIELD_NAMES / sizeof *FIELD_NAMES; i++)
            if (PyUnicode_CompareWithASCIIString(field_o, FIELD_NAMES[i]) == 0)
                field = FIELD_NAMES[i];
    if (field == NULL) {
        PyErr_SetString(PyExc_ValueError, "seal: field must be request, response or error");
        goto done;
    }
    if (take_nonces(s, 1, &counter) < 0)
        goto done;
    out = seal_one(s, seq, field, counter, &plain, NULL, 0);
done:
    PyBuffer_Release(&plain);
    return out;
}

static PyObject *sealer_seal_tool_request(Sealer *s, PyObject *args) {
    PyObject *seq_o;
    Py_buffer req;
    if (!PyArg_ParseTuple(args, "Oy*:seal_tool_request", &seq_o, &req))
        return NULL;
    PyObject *out = NULL;
    long long seq;
    uint64_t counter;
    if (seq_arg(seq_o, &seq) == 0 && plain_arg(&req, "request") == 0 &&
        take_nonces(s, 1, &counter) == 0)
        out = seal_request(s, seq, 1, counter, &req);
    PyBuffer_Release(&req);
    return out;
}

static PyObject *sealer_seal_event(Sealer *s, PyObject *args) {
    PyObject *seq_o;
    int is_tool;
    Py_buffer req, resp;
    if (!PyArg_ParseTuple(args, "Opy*y*:seal_event", &seq_o, &is_tool, &req, &resp))
        return NULL;
    PyObject *req_e = NULL, *resp_e = NULL, *out = NULL;
    long long seq;
    uint64_t counter;
    if (seq_arg(seq_o, &seq) < 0 || plain_arg(&req, "request") < 0 ||
        plain_arg(&resp, "response") < 0 || take_nonces(s, 2, &counter) < 0)
        goto done;
    /* the request's nonce first, then the response's: the Python's order */
    if ((req_e = seal_request(s, seq, is_tool, counter, &req)) == NULL ||
        (resp_e = seal_one(s, seq, "response", counter + 1, &resp, NULL, 0)) == NULL)
        goto done;
    out = PyTuple_Pack(2, req_e, resp_e); /* the context is done with: GC may run here */
done:
    Py_XDECREF(req_e);
    Py_XDECREF(resp_e);
    PyBuffer_Release(&req);
    PyBuffer_Release(&resp);
    return out;
}

static PyMethodDef sealer_methods[] = {
    {"seal", (PyCFunction)sealer_seal, METH_VARARGS,
     "seal(seq, field, plaintext) -> envelope (RunCipher.seal)"},
    {"seal_tool_request", (PyCFunction)sealer_seal_tool_request, METH_VARARGS,
     "seal_tool_request(seq, request) -> envelope (RunCipher.seal_tool_request)"},
    {"seal_event", (PyCFunction)sealer_seal_event, METH_VARARGS,
     "seal_event(seq, is_tool, request, response) -> (request envelope, response envelope)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SealerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracevault.content._cfields.Sealer",
    .tp_basicsize = sizeof(Sealer),
    .tp_dealloc = (destructor)sealer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Sealer(key, aad_prefix, salt, start=0): a run's content sealed, one nonce "
              "counter (see _cfields.c)",
    .tp_methods = sealer_methods,
    .tp_new = sealer_new,
};

static PyMethodDef methods[] = {
    {"open_pairs", open_pairs, METH_VARARGS,
     "open_pairs(key, aad_prefix, events) -> [(request, response, canonical) or None]"},
    {"_base64_simd", base64_simd, METH_O,
     "_base64_simd(on) -> whether the sealer's AVX2 base64 runs (for the tests of both paths)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cfields",
                                    "An encrypted run's content sealed and opened in C "
                                    "(see _cfields.c).",
                                    -1, methods};

PyMODINIT_FUNC PyInit__cfields(void) {
    b64_init();
    b64_pairs_init();
#ifdef B64_AVX2
    b64_avx2 = __builtin_cpu_supports("avx2");
#endif
    if ((S_seq = PyUnicode_InternFromString("seq")) == NULL ||
        (S_request = PyUnicode_InternFromString("request")) == NULL ||
        (S_response = PyUnicode_InternFromString("response")) == NULL)
        return NULL;
    if (PyType_Ready(&SealerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddObjectRef(m, "Sealer", (PyObject *)&SealerType) < 0)
        Py_CLEAR(m);
    return m;
}
