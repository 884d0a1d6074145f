/* HMAC-SHA-256 (RFC 2104, FIPS 180-4) of every value of an Arrow binary array, as lowercase hex: the
 * transforms' `hash` treatment (cdc_core/model/transforms.py) without a Python call per value. Optional: without
 * a C compiler the same digests come from hashlib (tests/unit/test_transforms.py checks they agree).
 *
 *   hmac_sha256_hex(ipad_block, opad_block, offsets, data) -> bytes
 *
 * ipad_block / opad_block: the key block XOR 0x36 / 0x5c (64 bytes each, made in Python); offsets: the array's
 * int32 offsets (n + 1 of them, absolute into data); data: its value bytes. Returns n * 64 hex characters. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void block(uint32_t h[8], const unsigned char *p) {
    uint32_t w[64];
    int i;
    for (i = 0; i < 16; i++)
        w[i] = ((uint32_t)p[4 * i] << 24) | ((uint32_t)p[4 * i + 1] << 16) | ((uint32_t)p[4 * i + 2] << 8) |
               (uint32_t)p[4 * i + 3];
    for (i = 16; i < 64; i++) {
        uint32_t s0 = ROTR(w[i - 15], 7) ^ ROTR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROTR(w[i - 2], 17) ^ ROTR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (i = 0; i < 64; i++) {
        uint32_t t1 = hh + (ROTR(e, 6) ^ ROTR(e, 11) ^ ROTR(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        uint32_t t2 = (ROTR(a, 2) ^ ROTR(a, 13) ^ ROTR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        hh = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

/* OpenSSL's block function (SHA-NI or AVX where the CPU has them, several times the portable one's speed),
 * found at import in the libcrypto Python's hashlib already loaded; the portable `block` otherwise. A self-test
 * at import falls back to the portable one should the two ever disagree. */
typedef struct {
    uint32_t h[8];
    uint32_t Nl, Nh;
    uint32_t data[16];
    unsigned int num, md_len;
} ossl_sha256_ctx;
typedef void (*ossl_transform_fn)(ossl_sha256_ctx *, const unsigned char *);
static ossl_transform_fn ossl_transform = NULL;

static void block_openssl(uint32_t h[8], const unsigned char *p) {
    ossl_sha256_ctx c;
    memset(&c, 0, sizeof c);
    memcpy(c.h, h, sizeof c.h);
    ossl_transform(&c, p);
    memcpy(h, c.h, sizeof c.h);
}

static void (*block_fn)(uint32_t h[8], const unsigned char *p) = block;

/* The digest of (the 64 bytes already in `mid`) + msg[0:len), into out[32]. */
static void finish(const uint32_t mid[8], const unsigned char *msg, Py_ssize_t len, unsigned char out[32]) {
    uint32_t h[8];
    unsigned char tail[128];
    Py_ssize_t i, full = len / 64 * 64, rest = len - full;
    uint64_t bits = ((uint64_t)len + 64) * 8;
    memcpy(h, mid, sizeof h);
    for (i = 0; i < full; i += 64) block_fn(h, msg + i);
    memset(tail, 0, sizeof tail);
    memcpy(tail, msg + full, (size_t)rest);
    tail[rest] = 0x80;
    Py_ssize_t n = rest + 1 + 8 <= 64 ? 64 : 128;
    for (i = 0; i < 8; i++) tail[n - 1 - i] = (unsigned char)(bits >> (8 * i));
    block_fn(h, tail);
    if (n == 128) block_fn(h, tail + 64);
    for (i = 0; i < 8; i++) {
        out[4 * i] = (unsigned char)(h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(h[i] >> 8);
        out[4 * i + 3] = (unsigned char)h[i];
    }
}

static PyObject *hmac_sha256_hex(PyObject *self, PyObject *args) {
    Py_buffer ipad, opad, offsets, data;
    static const char hexdigits[] = "0123456789abcdef";
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &ipad, &opad, &offsets, &data)) return NULL;
    PyObject *result = NULL;
    if (ipad.len != 64 || opad.len != 64 || offsets.len % 4 != 0 || offsets.len < 4) {
        PyErr_SetString(PyExc_ValueError, "hmac_sha256_hex: 64-byte pads and n + 1 int32 offsets expected");
        goto done;
    }
    Py_ssize_t n = offsets.len / 4 - 1;
    const int32_t *off = (const int32_t *)offsets.buf;
    const unsigned char *bytes = (const unsigned char *)data.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (off[i] < 0 || off[i + 1] < off[i] || off[i + 1] > data.len) {
            PyErr_SetString(PyExc_ValueError, "hmac_sha256_hex: offsets out of range");
            goto done;
        }
    }
    result = PyBytes_FromStringAndSize(NULL, n * 64);
    if (result == NULL) goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    uint32_t inner_mid[8], outer_mid[8];
    memcpy(inner_mid, H0, sizeof H0);
    memcpy(outer_mid, H0, sizeof H0);
    block_fn(inner_mid, (const unsigned char *)ipad.buf);
    block_fn(outer_mid, (const unsigned char *)opad.buf);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char inner[32], digest[32];
        finish(inner_mid, bytes + off[i], off[i + 1] - off[i], inner);
        finish(outer_mid, inner, 32, digest);
        for (int j = 0; j < 32; j++) {
            out[64 * i + 2 * j] = (unsigned char)hexdigits[digest[j] >> 4];
            out[64 * i + 2 * j + 1] = (unsigned char)hexdigits[digest[j] & 15];
        }
    }
    Py_END_ALLOW_THREADS
done:
    PyBuffer_Release(&ipad);
    PyBuffer_Release(&opad);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&data);
    return result;
}

static PyObject *set_backend(PyObject *self, PyObject *args) {
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
    if (strcmp(name, "portable") == 0) {
        block_fn = block;
    } else if (strcmp(name, "openssl") == 0 && ossl_transform != NULL) {
        block_fn = block_openssl;
    } else {
        PyErr_Format(PyExc_ValueError, "no backend %s here", name);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *backend(PyObject *self, PyObject *args) {
    return PyUnicode_FromString(block_fn == block_openssl ? "openssl" : "portable");
}

static PyMethodDef methods[] = {
    {"hmac_sha256_hex", hmac_sha256_hex, METH_VARARGS, "HMAC-SHA-256 hex of each value of an Arrow binary array"},
    {"set_backend", set_backend, METH_VARARGS, "use the 'openssl' or the 'portable' SHA-256 block function"},
    {"backend", backend, METH_NOARGS, "the SHA-256 block function in use"},
    {NULL, NULL, 0, NULL}};

static void find_openssl(void) {
    void *lib = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL) lib = dlopen("libcrypto.so.3", RTLD_NOW);
    if (lib == NULL) return;
    ossl_transform = (ossl_transform_fn)dlsym(lib, "SHA256_Transform");
    if (ossl_transform == NULL) return;
    /* Self-test: one block through both must agree. */
    unsigned char probe[64];
    uint32_t a[8], b[8];
    for (int i = 0; i < 64; i++) probe[i] = (unsigned char)(i * 7 + 3);
    memcpy(a, H0, sizeof a);
    memcpy(b, H0, sizeof b);
    block(a, probe);
    block_openssl(b, probe);
    if (memcmp(a, b, sizeof a) == 0) block_fn = block_openssl;
    else ossl_transform = NULL;
}

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hmac", NULL, -1, methods};

PyMODINIT_FUNC PyInit__hmac(void) {
    find_openssl();
    return PyModule_Create(&module);
}
