/* The row-image walk of cdc_core.capture.rowdecode, compiled (optional; rowdecode falls back to the
 * same walk generated as Python when this module is not built).
 *
 * A rows event's images are a null bitmap then each present column's value: fixed-width, or a
 * little-endian length prefix of 1-4 bytes and that many bytes. Finding where rows and values start
 * is the only per-row work of the columnar decoder; everything after it is per column (numpy, Arrow).
 * In Python that walk costs about 0.3 us per column per row, here a few nanoseconds.
 *
 *   scan_table(raw, kinds, ends, widths, prefixes, nullable, key_cols, key_raw, ask[, before])
 *       -> (starts, counts, ops, bad_event, bad_stop)
 *       (before: an update that keeps its key also records its before image, op 3, just before it)
 *   column_offsets(raw, starts, widths, prefixes, nullable) -> offsets (int64, column-major)
 *   gather(raw, offs, prefix) -> (value offsets int64[n + 1], concatenated value bytes)
 *   single_byte_text(raw, offs, prefix, utf8, lens) -> latin1 & co. as UTF-8 (a byte table)
 *   decimal_text(raw, offs, precision, scale) -> (text offsets int64[n + 1], DECIMAL values as text)
 *
 * Every read is bounds-checked against the buffer: a table map that does not describe the rows is
 * reported (bad_event / ValueError), never read past.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    Py_ssize_t ncols;
    const int32_t *width;   /* bytes of a fixed-width value; 0 when length-prefixed */
    const int32_t *prefix;  /* bytes of the length prefix */
    const uint8_t *nullable;
} Layout;

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Grow;

static int grow_put(Grow *g, const void *src, Py_ssize_t n) {
    if (g->len + n > g->cap) {
        Py_ssize_t cap = g->cap ? g->cap : 4096;
        while (cap < g->len + n) cap *= 2;
        char *p = PyMem_Realloc(g->data, (size_t)cap);
        if (!p) { PyErr_NoMemory(); return -1; }
        g->data = p;
        g->cap = cap;
    }
    memcpy(g->data + g->len, src, (size_t)n);
    g->len += n;
    return 0;
}

static PyObject *grow_bytes(Grow *g) {
    PyObject *b = PyBytes_FromStringAndSize(g->data ? g->data : "", g->len);
    PyMem_Free(g->data);
    g->data = NULL;
    g->len = g->cap = 0;
    return b;
}

static inline uint64_t uint_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int j = n - 1; j >= 0; j--) v = (v << 8) | p[j];
    return v;
}

/* Walk one row image from `pos`; the end of the image, or -1 if it runs past `lim`. When `offs` is
 * not NULL it receives every column's value offset (-1 for NULL). */
static Py_ssize_t walk(const uint8_t *d, Py_ssize_t pos, Py_ssize_t lim, const Layout *L, int64_t *offs) {
    Py_ssize_t nbytes = (L->ncols + 7) / 8;
    if (pos + nbytes > lim) return -1;
    const uint8_t *nb = d + pos;
    pos += nbytes;
    for (Py_ssize_t i = 0; i < L->ncols; i++) {
        if (L->nullable[i] && ((nb[i >> 3] >> (i & 7)) & 1)) {
            if (offs) offs[i] = -1;
            continue;
        }
        if (offs) offs[i] = pos;
        if (L->width[i]) {
            pos += L->width[i];
        } else {
            int p = L->prefix[i];
            if (pos + p > lim) return -1;
            pos += p + (Py_ssize_t)uint_le(d + pos, p);
        }
        if (pos > lim) return -1;
    }
    return pos;
}

static Py_ssize_t value_span(const uint8_t *d, Py_ssize_t o, const Layout *L, Py_ssize_t i) {
    if (L->width[i]) return L->width[i];
    return L->prefix[i] + (Py_ssize_t)uint_le(d + o, L->prefix[i]);
}

static int get_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (view->len % itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes is not a whole number of %zd-byte items", what, view->len,
                     itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

#define MAX_KEYS 64

static PyObject *scan_table(PyObject *self, PyObject *args) {
    PyObject *o_raw, *o_kinds, *o_ends, *o_width, *o_prefix, *o_nullable, *o_keys, *o_keyraw, *ask;
    int with_before = 0;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO|p", &o_raw, &o_kinds, &o_ends, &o_width, &o_prefix, &o_nullable, &o_keys,
                          &o_keyraw, &ask, &with_before))
        return NULL;
    Py_buffer raw = {0}, kinds = {0}, ends = {0}, width = {0}, prefix = {0}, nullable = {0}, keys = {0},
              keyraw = {0};
    Grow starts = {0}, counts = {0}, ops = {0};
    PyObject *result = NULL;
    Py_ssize_t bad_event = -1, bad_stop = 0;
    if (get_buffer(o_raw, &raw, 1, "raw") < 0 || get_buffer(o_kinds, &kinds, 1, "kinds") < 0 ||
        get_buffer(o_ends, &ends, 8, "ends") < 0 || get_buffer(o_width, &width, 4, "widths") < 0 ||
        get_buffer(o_prefix, &prefix, 4, "prefixes") < 0 || get_buffer(o_nullable, &nullable, 1, "nullable") < 0 ||
        get_buffer(o_keys, &keys, 4, "key_cols") < 0 || get_buffer(o_keyraw, &keyraw, 1, "key_raw") < 0)
        goto done;
    Layout L = {width.len / 4, width.buf, prefix.buf, nullable.buf};
    Py_ssize_t nkeys = keys.len / 4;
    if (prefix.len / 4 != L.ncols || nullable.len != L.ncols || keyraw.len != nkeys || kinds.len != ends.len / 8 ||
        nkeys > MAX_KEYS) {
        PyErr_SetString(PyExc_ValueError, "scan_table: inconsistent layout arguments");
        goto done;
    }
    const int32_t *key = keys.buf;
    for (Py_ssize_t j = 0; j < nkeys; j++)
        if (key[j] < 0 || key[j] >= L.ncols) {
            PyErr_SetString(PyExc_ValueError, "scan_table: key column out of range");
            goto done;
        }
    const uint8_t *d = raw.buf;
    const uint8_t *kind = kinds.buf;
    const int64_t *end = ends.buf;
    int64_t *img = PyMem_Malloc(sizeof(int64_t) * (size_t)(2 * (L.ncols ? L.ncols : 1)));
    if (!img) { PyErr_NoMemory(); goto done; }
    int64_t *before = img, *after = img + L.ncols;
    Py_ssize_t pos = 0;
    for (Py_ssize_t e = 0; e < kinds.len; e++) {
        Py_ssize_t stop = (Py_ssize_t)end[e], base = pos;
        int64_t n = 0;
        if (stop > raw.len || stop < pos) { bad_event = e; bad_stop = pos - base; break; }
        if (kind[e] == 1) { /* update: before and after image per row */
            while (pos < stop) {
                Py_ssize_t b_end = walk(d, pos, raw.len, &L, before);
                Py_ssize_t a_end = b_end < 0 ? -1 : walk(d, b_end, raw.len, &L, after);
                if (a_end < 0) { pos = -1; break; }
                int changed = 0, unsure = 0;
                for (Py_ssize_t j = 0; j < nkeys && !changed; j++) {
                    int64_t ob = before[key[j]], oa = after[key[j]];
                    if (ob < 0 || oa < 0) { changed = ob != oa; continue; }
                    Py_ssize_t sb = value_span(d, ob, &L, key[j]), sa = value_span(d, oa, &L, key[j]);
                    if (sb == sa && memcmp(d + ob, d + oa, (size_t)sb) == 0) continue;
                    if (((const uint8_t *)keyraw.buf)[j]) changed = 1;
                    else unsure = 1; /* equal values may differ in bytes (-0.0, invalid dates): ask */
                }
                if (!changed && unsure) {
                    PyObject *r = PyObject_CallFunction(ask, "nn", pos, b_end);
                    if (!r) goto fail;
                    changed = PyObject_IsTrue(r);
                    Py_DECREF(r);
                    if (changed < 0) goto fail;
                }
                int64_t bs = pos, as = b_end;
                if (changed) {
                    if (grow_put(&starts, &bs, 8) < 0 || grow_put(&starts, &as, 8) < 0 ||
                        grow_put(&ops, "\x02\x00", 2) < 0)
                        goto fail;
                    n += 2;
                } else if (with_before) {
                    if (grow_put(&starts, &bs, 8) < 0 || grow_put(&starts, &as, 8) < 0 ||
                        grow_put(&ops, "\x03\x01", 2) < 0)
                        goto fail;
                    n += 2;
                } else {
                    if (grow_put(&starts, &as, 8) < 0 || grow_put(&ops, "\x01", 1) < 0) goto fail;
                    n += 1;
                }
                pos = a_end;
            }
        } else {
            const char *op = kind[e] == 0 ? "\x00" : "\x02";
            while (pos < stop) {
                int64_t s = pos;
                if (grow_put(&starts, &s, 8) < 0 || grow_put(&ops, op, 1) < 0) goto fail;
                pos = walk(d, pos, raw.len, &L, NULL);
                n += 1;
                if (pos < 0) break;
            }
        }
        if (pos != stop) { bad_event = e; bad_stop = pos < 0 ? raw.len - base : pos - base; break; }
        if (grow_put(&counts, &n, 8) < 0) goto fail;
    }
    PyMem_Free(img);
    {
        PyObject *s = grow_bytes(&starts), *c = grow_bytes(&counts), *o = grow_bytes(&ops);
        if (s && c && o) result = Py_BuildValue("NNNnn", s, c, o, bad_event, bad_stop);
        else { Py_XDECREF(s); Py_XDECREF(c); Py_XDECREF(o); }
    }
    goto done;
fail:
    PyMem_Free(img);
done:
    PyMem_Free(starts.data);
    PyMem_Free(counts.data);
    PyMem_Free(ops.data);
    Py_buffer *views[] = {&raw, &kinds, &ends, &width, &prefix, &nullable, &keys, &keyraw};
    for (size_t i = 0; i < sizeof(views) / sizeof(views[0]); i++)
        if (views[i]->obj) PyBuffer_Release(views[i]);
    return result;
}

static PyObject *column_offsets(PyObject *self, PyObject *args) {
    PyObject *o_raw, *o_starts, *o_width, *o_prefix, *o_nullable;
    if (!PyArg_ParseTuple(args, "OOOOO", &o_raw, &o_starts, &o_width, &o_prefix, &o_nullable)) return NULL;
    Py_buffer raw = {0}, starts = {0}, width = {0}, prefix = {0}, nullable = {0};
    PyObject *out = NULL;
    int64_t *row = NULL;
    if (get_buffer(o_raw, &raw, 1, "raw") < 0 || get_buffer(o_starts, &starts, 8, "starts") < 0 ||
        get_buffer(o_width, &width, 4, "widths") < 0 || get_buffer(o_prefix, &prefix, 4, "prefixes") < 0 ||
        get_buffer(o_nullable, &nullable, 1, "nullable") < 0)
        goto done;
    Layout L = {width.len / 4, width.buf, prefix.buf, nullable.buf};
    if (prefix.len / 4 != L.ncols || nullable.len != L.ncols) {
        PyErr_SetString(PyExc_ValueError, "column_offsets: inconsistent layout arguments");
        goto done;
    }
    Py_ssize_t n = starts.len / 8;
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizeof(int64_t) * n * L.ncols);
    row = PyMem_Malloc(sizeof(int64_t) * (size_t)(L.ncols ? L.ncols : 1));
    if (!out || !row) { Py_CLEAR(out); if (!PyErr_Occurred()) PyErr_NoMemory(); goto done; }
    int64_t *cols = (int64_t *)PyBytes_AS_STRING(out);
    const int64_t *s = starts.buf;
    for (Py_ssize_t r = 0; r < n; r++) {
        if (s[r] < 0 || walk(raw.buf, (Py_ssize_t)s[r], raw.len, &L, row) < 0) {
            PyErr_Format(PyExc_ValueError, "the row image at byte %lld runs past the buffer", (long long)s[r]);
            Py_CLEAR(out);
            goto done;
        }
        for (Py_ssize_t i = 0; i < L.ncols; i++) cols[i * n + r] = row[i];
    }
done:
    PyMem_Free(row);
    Py_buffer *views[] = {&raw, &starts, &width, &prefix, &nullable};
    for (size_t i = 0; i < sizeof(views) / sizeof(views[0]); i++)
        if (views[i]->obj) PyBuffer_Release(views[i]);
    return out;
}

static PyObject *gather(PyObject *self, PyObject *args) {
    PyObject *o_raw, *o_offs;
    int prefix;
    if (!PyArg_ParseTuple(args, "OOi", &o_raw, &o_offs, &prefix)) return NULL;
    if (prefix < 1 || prefix > 4) {
        PyErr_SetString(PyExc_ValueError, "gather: the length prefix is 1 to 4 bytes");
        return NULL;
    }
    Py_buffer raw = {0}, offs = {0};
    PyObject *aoff = NULL, *data = NULL, *result = NULL;
    if (get_buffer(o_raw, &raw, 1, "raw") < 0 || get_buffer(o_offs, &offs, 8, "offsets") < 0) goto done;
    Py_ssize_t n = offs.len / 8;
    const int64_t *o = offs.buf;
    const uint8_t *d = raw.buf;
    aoff = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizeof(int64_t) * (n + 1));
    if (!aoff) goto done;
    int64_t *a = (int64_t *)PyBytes_AS_STRING(aoff);
    a[0] = 0;
    for (Py_ssize_t r = 0; r < n; r++) {
        int64_t len = 0;
        if (o[r] >= 0) {
            if (o[r] + prefix > raw.len) goto overrun;
            len = (int64_t)uint_le(d + o[r], prefix);
            if (o[r] + prefix + len > raw.len) goto overrun;
        }
        a[r + 1] = a[r] + len;
    }
    data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)a[n]);
    if (!data) goto done;
    char *out = PyBytes_AS_STRING(data);
    for (Py_ssize_t r = 0; r < n; r++)
        if (a[r + 1] > a[r]) memcpy(out + a[r], d + o[r] + prefix, (size_t)(a[r + 1] - a[r]));
    result = Py_BuildValue("OO", aoff, data);
    goto done;
overrun:
    PyErr_SetString(PyExc_ValueError, "gather: a value runs past the buffer");
done:
    Py_XDECREF(aoff);
    Py_XDECREF(data);
    if (raw.obj) PyBuffer_Release(&raw);
    if (offs.obj) PyBuffer_Release(&offs);
    return result;
}

/* Length-prefixed text in a single-byte charset transcoded to UTF-8 by a byte table: `utf8` holds each
 * byte's UTF-8 bytes (3 per byte, padded), `lens` their count, 0 for a byte the charset does not define.
 * Returns (text offsets int64[n + 1], UTF-8 bytes, -1), or (None, None, row) for the first row holding an
 * undefined byte (the caller names the value). NULL rows (offset -1) are empty. */
static PyObject *single_byte_text(PyObject *self, PyObject *args) {
    PyObject *o_raw, *o_offs, *o_utf8, *o_lens;
    int prefix;
    if (!PyArg_ParseTuple(args, "OOiOO", &o_raw, &o_offs, &prefix, &o_utf8, &o_lens)) return NULL;
    if (prefix < 1 || prefix > 4) {
        PyErr_SetString(PyExc_ValueError, "single_byte_text: the length prefix is 1 to 4 bytes");
        return NULL;
    }
    Py_buffer raw = {0}, offs = {0}, utf8 = {0}, lens = {0};
    PyObject *aoff = NULL, *result = NULL;
    Grow text = {0};
    if (get_buffer(o_raw, &raw, 1, "raw") < 0 || get_buffer(o_offs, &offs, 8, "offsets") < 0 ||
        get_buffer(o_utf8, &utf8, 1, "utf8") < 0 || get_buffer(o_lens, &lens, 1, "lens") < 0)
        goto done;
    if (utf8.len != 256 * 3 || lens.len != 256) {
        PyErr_SetString(PyExc_ValueError, "single_byte_text: the byte table is 256 x 3 bytes and 256 lengths");
        goto done;
    }
    Py_ssize_t n = offs.len / 8;
    const int64_t *o = offs.buf;
    const uint8_t *d = raw.buf, *table = utf8.buf, *len = lens.buf;
    aoff = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizeof(int64_t) * (n + 1));
    if (!aoff) goto done;
    int64_t *a = (int64_t *)PyBytes_AS_STRING(aoff);
    a[0] = 0;
    for (Py_ssize_t r = 0; r < n; r++) {
        a[r + 1] = a[r];
        if (o[r] < 0) continue;
        if (o[r] + prefix > raw.len) goto overrun;
        Py_ssize_t k = (Py_ssize_t)uint_le(d + o[r], prefix), v = (Py_ssize_t)o[r] + prefix;
        if (v + k > raw.len) goto overrun;
        char out[3 * 256];
        Py_ssize_t used = 0;
        for (Py_ssize_t j = 0; j < k; j++) {
            uint8_t b = d[v + j];
            if (!len[b]) {
                result = Py_BuildValue("OOn", Py_None, Py_None, r);
                goto done;
            }
            memcpy(out + used, table + 3 * b, 3);
            used += len[b];
            if (used > (Py_ssize_t)sizeof(out) - 3) {
                if (grow_put(&text, out, used) < 0) goto done;
                used = 0;
            }
        }
        if (used && grow_put(&text, out, used) < 0) goto done;
        a[r + 1] = (int64_t)text.len;
    }
    {
        PyObject *t = grow_bytes(&text);
        if (t) result = Py_BuildValue("ONn", aoff, t, (Py_ssize_t)-1);
    }
    goto done;
overrun:
    PyErr_SetString(PyExc_ValueError, "single_byte_text: a value runs past the buffer");
done:
    PyMem_Free(text.data);
    Py_XDECREF(aoff);
    Py_buffer *views[] = {&raw, &offs, &utf8, &lens};
    for (size_t i = 0; i < sizeof(views) / sizeof(views[0]); i++)
        if (views[i]->obj) PyBuffer_Release(views[i]);
    return result;
}

static const int DIG2BYTES[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};

static inline uint32_t uint_be(const uint8_t *p, int n) {
    uint32_t v = 0;
    for (int j = 0; j < n; j++) v = (v << 8) | p[j];
    return v;
}

static const uint32_t POW10[10] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000};

/* v in decimal, zero-padded to `width` digits (wider when v needs more, like printf's "%0*u"). */
static int put_digits(char *p, uint32_t v, int width) {
    int n = 1;
    while (n < 10 && v >= POW10[n]) n++;
    if (n < width) n = width;
    for (int j = n - 1; j >= 0; j--) {
        p[j] = (char)('0' + v % 10);
        v /= 10;
    }
    return n;
}

/* MySQL's binary DECIMAL(p, s) as exact text: '-' only when negative and non-zero, the integer part
 * without leading zeros ('0' when none), then '.' and exactly s fraction digits. NULL rows (offset -1)
 * are empty. The same text as rowdecode.decimals.decimal_text. */
static PyObject *decimal_text(PyObject *self, PyObject *args) {
    PyObject *o_raw, *o_offs;
    int precision, scale;
    if (!PyArg_ParseTuple(args, "OOii", &o_raw, &o_offs, &precision, &scale)) return NULL;
    if (precision < 1 || precision > 65 || scale < 0 || scale > 30 || scale > precision) {
        PyErr_Format(PyExc_ValueError, "decimal_text: DECIMAL(%d,%d) is not a MySQL decimal", precision, scale);
        return NULL;
    }
    Py_buffer raw = {0}, offs = {0};
    PyObject *aoff = NULL, *result = NULL;
    Grow text = {0};
    if (get_buffer(o_raw, &raw, 1, "raw") < 0 || get_buffer(o_offs, &offs, 8, "offsets") < 0) goto done;
    int intg = precision - scale;
    int width = (intg / 9) * 4 + DIG2BYTES[intg % 9] + (scale / 9) * 4 + DIG2BYTES[scale % 9];
    Py_ssize_t n = offs.len / 8;
    const int64_t *o = offs.buf;
    aoff = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizeof(int64_t) * (n + 1));
    if (!aoff) goto done;
    int64_t *a = (int64_t *)PyBytes_AS_STRING(aoff);
    a[0] = 0;
    uint8_t g[32];
    char out[160]; /* sign, 80 integer digits at most (even for corrupt groups), point, 40 fraction digits */
    for (Py_ssize_t r = 0; r < n; r++) {
        if (o[r] < 0) { a[r + 1] = a[r]; continue; }
        if (o[r] + width > raw.len) {
            PyErr_SetString(PyExc_ValueError, "decimal_text: a value runs past the buffer");
            goto done;
        }
        memcpy(g, (const uint8_t *)raw.buf + o[r], (size_t)width);
        int neg = (g[0] & 0x80) == 0;
        g[0] ^= 0x80;
        if (neg)
            for (int j = 0; j < width; j++) g[j] ^= 0xFF;
        char digits[96];
        int nd = 0, pos = 0, nonzero = 0;
        int lead = DIG2BYTES[intg % 9];
        if (lead) {
            uint32_t v = uint_be(g, lead);
            nonzero |= v != 0;
            nd += put_digits(digits + nd, v, 1);
            pos = lead;
        }
        for (int k = 0; k < intg / 9; k++, pos += 4) {
            uint32_t v = uint_be(g + pos, 4);
            nonzero |= v != 0;
            nd += put_digits(digits + nd, v, 9);
        }
        int skip = 0;
        while (skip < nd && digits[skip] == '0') skip++;
        char frac[64];
        int nf = 0;
        for (int k = 0; k < scale / 9; k++, pos += 4) {
            uint32_t v = uint_be(g + pos, 4);
            nonzero |= v != 0;
            nf += put_digits(frac + nf, v, 9);
        }
        if (scale % 9) {
            uint32_t v = uint_be(g + pos, DIG2BYTES[scale % 9]);
            nonzero |= v != 0;
            nf += put_digits(frac + nf, v, scale % 9);
        }
        int len = 0;
        if (neg && nonzero) out[len++] = '-';
        if (skip == nd) out[len++] = '0';
        else { memcpy(out + len, digits + skip, (size_t)(nd - skip)); len += nd - skip; }
        if (scale) {
            out[len++] = '.';
            memcpy(out + len, frac, (size_t)nf);
            len += nf;
        }
        if (grow_put(&text, out, len) < 0) goto done;
        a[r + 1] = a[r] + len;
    }
    {
        PyObject *t = grow_bytes(&text);
        if (t) result = Py_BuildValue("ON", aoff, t);
    }
done:
    PyMem_Free(text.data);
    Py_XDECREF(aoff);
    if (raw.obj) PyBuffer_Release(&raw);
    if (offs.obj) PyBuffer_Release(&offs);
    return result;
}

static PyMethodDef methods[] = {
    {"single_byte_text", single_byte_text, METH_VARARGS,
     "single_byte_text(raw, offsets, prefix, utf8_table, lengths) -> (int64 text offsets, UTF-8 bytes, bad row)"},
    {"decimal_text", decimal_text, METH_VARARGS,
     "decimal_text(raw, offsets, precision, scale) -> (int64 text offsets, text bytes)"},
    {"scan_table", scan_table, METH_VARARGS,
     "scan_table(raw, kinds, ends, widths, prefixes, nullable, key_cols, key_raw, ask[, before]) -> "
     "(starts, counts, ops, bad_event, bad_stop)"},
    {"column_offsets", column_offsets, METH_VARARGS,
     "column_offsets(raw, starts, widths, prefixes, nullable) -> int64 offsets, column-major"},
    {"gather", gather, METH_VARARGS, "gather(raw, offsets, prefix) -> (int64 value offsets, value bytes)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rowscan", "Compiled row-image walk.", -1, methods};

PyMODINIT_FUNC PyInit__rowscan(void) { return PyModule_Create(&module); }
