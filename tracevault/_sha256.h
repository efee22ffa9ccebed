/*
 * SHA-256 for tracevault's C paths (the archiver's leaf hashes, the Merkle trees of the log):
 * the portable FIPS 180-4 compression, and the x86 SHA extensions where the CPU has them
 * (checked once, at run time). Included by each extension; tests pin it to hashlib.
 */
#ifndef TRACEVAULT_SHA256_H
#define TRACEVAULT_SHA256_H
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define TV_SHA_NI 1
#endif

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_blocks_portable(uint32_t st[8], const uint8_t *p, size_t nblocks) {
    uint32_t w[64];
    while (nblocks--) {
        for (int t = 0; t < 16; t++)
            w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 |
                   (uint32_t)p[4 * t + 2] << 8 | (uint32_t)p[4 * t + 3];
        for (int t = 16; t < 64; t++) {
            uint32_t s0 = ROR(w[t - 15], 7) ^ ROR(w[t - 15], 18) ^ (w[t - 15] >> 3);
            uint32_t s1 = ROR(w[t - 2], 17) ^ ROR(w[t - 2], 19) ^ (w[t - 2] >> 10);
            w[t] = w[t - 16] + s0 + w[t - 7] + s1;
        }
        uint32_t a = st[0], b = st[1], c = st[2], d = st[3];
        uint32_t e = st[4], f = st[5], g = st[6], h = st[7];
        for (int t = 0; t < 64; t++) {
            uint32_t t1 = h + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) +
                          K256[t] + w[t];
            uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            h = g;
            g = f;
            f = e;
            e = d + t1;
            d = c;
            c = b;
            b = a;
            a = t1 + t2;
        }
        st[0] += a;
        st[1] += b;
        st[2] += c;
        st[3] += d;
        st[4] += e;
        st[5] += f;
        st[6] += g;
        st[7] += h;
        p += 64;
    }
}

#ifdef TV_SHA_NI
/* The compression with the SHA extensions (the round structure of Intel's reference). */
__attribute__((target("sha,sse4.1,ssse3"))) static void sha256_blocks_ni(uint32_t st[8],
                                                                         const uint8_t *p,
                                                                         size_t nblocks) {
    const __m128i MASK = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i tmp = _mm_loadu_si128((const __m128i *)&st[0]);
    __m128i s1 = _mm_loadu_si128((const __m128i *)&st[4]);
    tmp = _mm_shuffle_epi32(tmp, 0xB1);        /* CDAB */
    s1 = _mm_shuffle_epi32(s1, 0x1B);          /* EFGH */
    __m128i s0 = _mm_alignr_epi8(tmp, s1, 8);  /* ABEF */
    s1 = _mm_blend_epi16(s1, tmp, 0xF0);       /* CDGH */
    while (nblocks--) {
        __m128i abef = s0, cdgh = s1, w[4], msg;
        for (int g = 0; g < 16; g++) {
            if (g < 4)
                w[g] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * g)), MASK);
            msg = _mm_add_epi32(w[g & 3], _mm_loadu_si128((const __m128i *)&K256[4 * g]));
            s1 = _mm_sha256rnds2_epu32(s1, s0, msg);
            if (g >= 3 && g <= 14) {
                __m128i t = _mm_alignr_epi8(w[g & 3], w[(g + 3) & 3], 4);
                w[(g + 1) & 3] = _mm_add_epi32(w[(g + 1) & 3], t);
                w[(g + 1) & 3] = _mm_sha256msg2_epu32(w[(g + 1) & 3], w[g & 3]);
            }
            msg = _mm_shuffle_epi32(msg, 0x0E);
            s0 = _mm_sha256rnds2_epu32(s0, s1, msg);
            if (g >= 1 && g <= 12)
                w[(g + 3) & 3] = _mm_sha256msg1_epu32(w[(g + 3) & 3], w[g & 3]);
        }
        s0 = _mm_add_epi32(s0, abef);
        s1 = _mm_add_epi32(s1, cdgh);
        p += 64;
    }
    tmp = _mm_shuffle_epi32(s0, 0x1B);        /* FEBA */
    s1 = _mm_shuffle_epi32(s1, 0xB1);         /* DCHG */
    s0 = _mm_blend_epi16(tmp, s1, 0xF0);      /* DCBA */
    s1 = _mm_alignr_epi8(s1, tmp, 8);         /* ABEF */
    _mm_storeu_si128((__m128i *)&st[0], s0);
    _mm_storeu_si128((__m128i *)&st[4], s1);
}

static int has_sha_ni(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 19)) || !(c & (1u << 9)))
        return 0; /* SSE4.1, SSSE3 */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    return (b >> 29) & 1;
}
#endif

typedef void (*sha256_blocks_fn)(uint32_t st[8], const uint8_t *p, size_t nblocks);
static sha256_blocks_fn sha256_blocks = sha256_blocks_portable;

/* Picks the compression once, at module init (TRACEVAULT_PORTABLE_SHA256 forces the portable
 * one: the tests run both). */
static const char *sha256_init(int portable) {
#ifdef TV_SHA_NI
    if (!portable && has_sha_ni()) {
        sha256_blocks = sha256_blocks_ni;
        return "sha-ni";
    }
#endif
    sha256_blocks = sha256_blocks_portable;
    return "portable";
}

/* SHA-256 in pieces (the chain link: a domain, the previous hash, then the raw value, which
 * may be large: no copy into one buffer); ``sha256`` below is the one-piece case. */
typedef struct {
    uint32_t st[8];
    uint8_t buf[64];
    size_t fill;
    uint64_t len;
} sha256_ctx;

static void sha256_start(sha256_ctx *c) {
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->st, iv, sizeof iv);
    c->fill = 0;
    c->len = 0;
}

static void sha256_update(sha256_ctx *c, const uint8_t *p, size_t n) {
    c->len += n;
    if (c->fill) {
        size_t take = 64 - c->fill < n ? 64 - c->fill : n;
        memcpy(c->buf + c->fill, p, take);
        c->fill += take;
        p += take;
        n -= take;
        if (c->fill < 64)
            return;
        sha256_blocks(c->st, c->buf, 1);
        c->fill = 0;
    }
    sha256_blocks(c->st, p, n / 64);
    memcpy(c->buf, p + n / 64 * 64, n % 64);
    c->fill = n % 64;
}

static void sha256_finish(sha256_ctx *c, uint8_t out[32]) {
    uint8_t tail[128];
    size_t rest = c->fill;
    memcpy(tail, c->buf, rest);
    tail[rest] = 0x80;
    size_t tlen = rest + 1 + 8 <= 64 ? 64 : 128;
    memset(tail + rest + 1, 0, tlen - rest - 1);
    uint64_t bits = c->len * 8;
    for (int i = 0; i < 8; i++)
        tail[tlen - 1 - i] = (uint8_t)(bits >> (8 * i));
    sha256_blocks(c->st, tail, tlen / 64);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(c->st[i] >> 24);
        out[4 * i + 1] = (uint8_t)(c->st[i] >> 16);
        out[4 * i + 2] = (uint8_t)(c->st[i] >> 8);
        out[4 * i + 3] = (uint8_t)c->st[i];
    }
}

static void sha256(const uint8_t *data, size_t len, uint8_t out[32]) {
    sha256_ctx c;
    sha256_start(&c);
    sha256_update(&c, data, len);
    sha256_finish(&c, out);
}

#ifdef Py_PYTHON_H
/* The module of ``def``, its SHA-256 compression picked first and named in ``sha256_impl``
 * (the tests check both compressions through it). */
static PyObject *sha256_module(PyModuleDef *def) {
    const char *impl = sha256_init(getenv("TRACEVAULT_PORTABLE_SHA256") != NULL);
    PyObject *m = PyModule_Create(def);
    if (m != NULL && PyModule_AddStringConstant(m, "sha256_impl", impl) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
#endif

/* RFC 6962 interior node: SHA-256(0x01 || left || right), 65 bytes, two blocks. */
static void hash_children(const uint8_t *left, const uint8_t *right, uint8_t out[32]) {
    uint8_t buf[65];
    buf[0] = 0x01;
    memcpy(buf + 1, left, 32);
    memcpy(buf + 33, right, 32);
    sha256(buf, 65, out);
}
#endif
