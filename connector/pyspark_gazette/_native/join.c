/*
 * join.c, the write side of pyspark_gazette._jsonscan: rows of JSON text joined from Arrow
 * columns (an accelerator of spark/write/encode.py's json_lines; its pure-Python path stays the
 * reference and the fallback). See join_doc for the parts it takes.
 */
#include "common.h"

typedef struct {
    int kind;
    const u8 *text; /* P_TEXT */
    Py_ssize_t len;
    const u8 *data; /* P_RAW, P_STRING: offsets (int32 or int64) into data */
    const void *offsets;
    const void *values; /* P_INT, P_BOOL, P_MICROS, P_DATE */
    const u8 *validity; /* NULL: no nulls; else Arrow's bitmap (null where a bit is 0) */
    Py_ssize_t offset, dlen;
    int large, width, zone;
    int scale;   /* P_DECIMAL */
    int failed;  /* P_DOUBLE, P_DECIMAL: a value left to Arrow */
    Py_ssize_t index; /* the part's index in join's parts (a constant before it merged, see join) */
    const u8 *lead;   /* a constant written before every row's value (the one before it in parts) */
    Py_ssize_t lead_len;
    u8 lead16[16]; /* the lead, when at most 16 bytes: copied as two words */
    int64_t day; /* P_MICROS: the day last written, and its YYYY-MM-DD (consecutive rows share it) */
    u8 day_text[10];
} Part;

static inline int64_t part_at(const Part *p, Py_ssize_t j) {
    return p->large ? ((const int64_t *)p->offsets)[j] : (int64_t)((const int32_t *)p->offsets)[j];
}

static inline int bit_at(const u8 *bits, Py_ssize_t j) { return (bits[j >> 3] >> (j & 7)) & 1; }

/* The bytes a part writes for any row, at most, beyond its column's text (P_RAW: + its bytes,
 * P_STRING: + 6 per byte); 16 more for the lead's word copy. */
static Py_ssize_t part_fixed_max(const Part *p) {
    Py_ssize_t lead = p->lead_len + 16;
    switch (p->kind) {
    case P_TEXT: return p->len;
    case P_RAW: return lead + 4;
    case P_STRING: return lead + 6;
    case P_DECIMAL: return lead + 84; /* sign, 39 digits, "0." and up to 38 zeros */
    default: return lead + 40;
    }
}

/* memcpy, without its call for the short runs most rows are made of (names, codes, numbers). */
static inline u8 *put(u8 *w, const u8 *src, Py_ssize_t len) {
    if (len > 16) {
        memcpy(w, src, (size_t)len);
        return w + len;
    }
    for (Py_ssize_t k = 0; k < len; k++) w[k] = src[k];
    return w + len;
}

/* Days since 1970-01-01 to a civil date (proleptic Gregorian). */
static void civil(int64_t days, int64_t *y, int *m, int *d) {
    days += 719468;
    int64_t era = (days >= 0 ? days : days - 146096) / 146097;
    int64_t doe = days - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static const char PAIRS[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                            "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                            "8081828384858687888990919293949596979899";

/* v (>= 0, < 10^width) in exactly width digits. */
static inline u8 *put_digits(u8 *w, int64_t v, int width) {
    int k = width;
    while (k >= 2) {
        memcpy(w + k - 2, PAIRS + 2 * (v % 100), 2);
        v /= 100;
        k -= 2;
    }
    if (k) w[0] = (u8)('0' + v % 10);
    return w + width;
}

/* Days since 1970-01-01 of 0001-01-01 and 9999-12-31: the dates write_date writes (encode.py
 * sends other years the Arrow way; a part holding one anyway is left to Arrow's cast). */
#define FIRST_DAY (-719162)
#define LAST_DAY 2932896

/* YYYY-MM-DD of a date in years 1-9999 (FIRST_DAY to LAST_DAY: put_digits' ranges hold). */
static inline u8 *write_date(u8 *w, int64_t days) {
    int64_t y;
    int m, d;
    civil(days, &y, &m, &d);
    w = put_digits(w, y, 4);
    *w++ = '-';
    w = put_digits(w, m, 2);
    *w++ = '-';
    return put_digits(w, d, 2);
}

static inline int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

static u8 *write_int(u8 *w, int64_t v) {
    u8 tmp[24], *t = tmp + 24;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    while (u >= 100) {
        t -= 2;
        memcpy(t, PAIRS + 2 * (u % 100), 2);
        u /= 100;
    }
    if (u >= 10) {
        t -= 2;
        memcpy(t, PAIRS + 2 * u, 2);
    } else {
        *--t = (u8)('0' + u);
    }
    if (v < 0) *w++ = '-';
    return put(w, t, tmp + 24 - t);
}

static const char HEXL[] = "0123456789abcdef";

/* JSON string text of UTF-8 bytes, as json.dumps(ensure_ascii=False) escapes it: quote,
 * backslash and the control characters (\n \r \t \b \f, else \u00XX). */
static inline int needs_escape(u8 c) { return c < 0x20 || c == '"' || c == '\\'; }

/* Whether any of 8 bytes needs escaping: a byte below 0x20, a '"' or a '\\' (the exact
 * "has a zero byte" / "has a byte less than n" word tests). */
static inline int word_needs_escape(uint64_t x) {
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\');
    return (((x - ones * 0x20) & ~x) | ((q - ones) & ~q) | ((b - ones) & ~b)) & highs ? 1 : 0;
}

/* s[0, len) as JSON string content; ``end`` is where s's buffer ends, and the caller leaves
 * 16 bytes of room beyond what the escaped text needs. Where the buffer allows, a tail of
 * under 8 bytes is tested as one word (the bytes past it masked to 'a') and a run of at most
 * 16 bytes is copied as two words: a short string then costs a few word operations. */
static u8 *write_escaped(u8 *w, const u8 *s, Py_ssize_t len, const u8 *end) {
    Py_ssize_t run = 0, k = 0;
    while (k < len) {
        if (k + 8 <= len) {
            uint64_t x;
            memcpy(&x, s + k, 8);
            if (!word_needs_escape(x)) {
                k += 8;
                continue;
            }
        } else if (s + k + 8 <= end) {
            uint64_t x, keep = (1ULL << (8 * (len - k))) - 1;
            memcpy(&x, s + k, 8);
            x = (x & keep) | (0x6161616161616161ULL & ~keep);
            if (!word_needs_escape(x)) {
                k = len;
                break;
            }
        }
        Py_ssize_t stop = k + 8 < len ? k + 8 : len;
        for (; k < stop; k++) {
            u8 c = s[k];
            if (!needs_escape(c)) continue;
            w = put(w, s + run, k - run);
            run = k + 1;
            *w++ = '\\';
            switch (c) {
            case '"': *w++ = '"'; break;
            case '\\': *w++ = '\\'; break;
            case '\n': *w++ = 'n'; break;
            case '\r': *w++ = 'r'; break;
            case '\t': *w++ = 't'; break;
            case '\b': *w++ = 'b'; break;
            case '\f': *w++ = 'f'; break;
            default:
                *w++ = 'u';
                *w++ = '0';
                *w++ = '0';
                *w++ = (u8)HEXL[c >> 4];
                *w++ = (u8)HEXL[c & 15];
            }
        }
    }
    if (len - run <= 16 && s + run + 16 <= end) {
        memcpy(w, s + run, 16);
        return w + (len - run);
    }
    return put(w, s + run, len - run);
}

static const uint64_t UPOW10[] = {1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL,
                                  10000000ULL, 100000000ULL, 1000000000ULL, 10000000000ULL,
                                  100000000000ULL, 1000000000000ULL, 10000000000000ULL,
                                  100000000000000ULL, 1000000000000000ULL, 10000000000000000ULL,
                                  100000000000000000ULL};

/* A float64 as Arrow's cast to string writes it (double-conversion's shortest digits, in
 * positional form for 1e-6 <= |v| < 1e10: "2", "0.37", "-0", "0.000015"), for the values whose
 * shortest form has at most 17 decimals and fewer than 16 digits: the fewest decimals p with
 * round(|v| * 10^p) / 10^p == |v| (both operands exact, so the quotient is what parsing the
 * text gives). NaN and the infinities as Spark's JSON writer: "NaN", "Infinity", "-Infinity".
 * NULL for any other value (exponent forms, 16-17 digit values): the caller uses Arrow's text. */
static u8 *write_double(u8 *w, double v) {
    if (isnan(v)) return put(w, (const u8 *)"\"NaN\"", 5);
    if (isinf(v)) return v > 0 ? put(w, (const u8 *)"\"Infinity\"", 10) : put(w, (const u8 *)"\"-Infinity\"", 11);
    double a = fabs(v);
    if (a == 0) return signbit(v) ? put(w, (const u8 *)"-0", 2) : put(w, (const u8 *)"0", 1);
    if (a >= 1e10 || a < 1e-6) return NULL;
    for (int p = 0; p < 18; p++) {
        double m = nearbyint(a * POW10[p]);
        if (m >= 1e15) return NULL;
        if (m / POW10[p] != a) continue;
        uint64_t u = (uint64_t)m, whole = u / UPOW10[p], frac = u % UPOW10[p];
        if (signbit(v)) *w++ = '-';
        w = write_int(w, (int64_t)whole);
        if (p) {
            *w++ = '.';
            w = put_digits(w, (int64_t)frac, p);
        }
        return w;
    }
    return NULL;
}

/* A decimal128 (two's complement, little-endian) of scale s as Arrow's cast to string writes
 * it (Decimal128::ToString): its digits with a point s places from the right, "0." and zeros
 * before them where there are fewer digits than s. NULL where Arrow writes an exponent form
 * (scale below 0, or fewer than s - 6 digits: "1E-10"): the caller uses Arrow's text. */
static u8 *write_decimal(u8 *w, const u8 *le16, int scale) {
    if (scale < 0) return NULL;
    uint64_t lo, hi;
    memcpy(&lo, le16, 8);
    memcpy(&hi, le16 + 8, 8);
    int negative = (int64_t)hi < 0;
    u8 tmp[48], *t = tmp + 48;
#if GZ_HAVE_INT128
    unsigned __int128 u = ((unsigned __int128)hi << 64) | lo;
    if (negative) u = (unsigned __int128)0 - u;
    while (u > (unsigned __int128)UINT64_MAX) {
        uint64_t low19 = (uint64_t)(u % 10000000000000000000ULL);
        u /= 10000000000000000000ULL;
        for (int k = 0; k < 19; k++) {
            *--t = (u8)('0' + low19 % 10);
            low19 /= 10;
        }
    }
    uint64_t v = (uint64_t)u;
#else
    /* Without a 128-bit type: the magnitude as two words, divided by 10^9 through 32-bit
     * limbs (each step's dividend is below 10^9 * 2^32 < 2^62) while the high word is set. */
    if (negative) {
        lo = (uint64_t)0 - lo;
        hi = ~hi + (lo == 0);
    }
    while (hi) {
        uint32_t limbs[4] = {(uint32_t)(hi >> 32), (uint32_t)hi, (uint32_t)(lo >> 32), (uint32_t)lo};
        uint64_t rem = 0;
        for (int k = 0; k < 4; k++) {
            uint64_t cur = (rem << 32) | limbs[k];
            limbs[k] = (uint32_t)(cur / 1000000000u); /* below 2^32: rem < 10^9 */
            rem = cur % 1000000000u;
        }
        hi = ((uint64_t)limbs[0] << 32) | limbs[1];
        lo = ((uint64_t)limbs[2] << 32) | limbs[3];
        for (int k = 0; k < 9; k++) {
            *--t = (u8)('0' + rem % 10);
            rem /= 10;
        }
    }
    uint64_t v = lo;
#endif
    do {
        *--t = (u8)('0' + v % 10);
        v /= 10;
    } while (v);
    Py_ssize_t digits = tmp + 48 - t;
    if (negative) *w++ = '-';
    if (scale == 0) return put(w, t, digits);
    if (digits - 1 - scale < -6) return NULL;
    if (digits > scale) {
        w = put(w, t, digits - scale);
        *w++ = '.';
        return put(w, t + digits - scale, scale);
    }
    *w++ = '0';
    *w++ = '.';
    for (Py_ssize_t k = digits; k < scale; k++) *w++ = '0';
    return put(w, t, digits);
}

/* Row j of part p at w (room for part_fixed_max bytes and its text is there). */
static u8 *write_part(u8 *w, Part *p, Py_ssize_t j) {
    if (p->kind == P_TEXT) {
        return put(w, p->text, p->len);
    }
    if (p->lead_len) {
        if (p->lead_len <= 16) {
            memcpy(w, p->lead16, 16);
            w += p->lead_len;
        } else {
            w = put(w, p->lead, p->lead_len);
        }
    }
    Py_ssize_t at = p->offset + j;
    if (p->validity && !bit_at(p->validity, at)) {
        memcpy(w, "null", 4);
        return w + 4;
    }
    switch (p->kind) {
    case P_RAW:
    case P_STRING: {
        int64_t a = part_at(p, at), b = part_at(p, at + 1);
        if (p->kind == P_RAW) return put(w, p->data + a, (Py_ssize_t)(b - a));
        *w++ = '"';
        w = write_escaped(w, p->data + a, (Py_ssize_t)(b - a), p->data + p->dlen);
        *w++ = '"';
        return w;
    }
    case P_INT: {
        int64_t v;
        switch (p->width) {
        case 1: v = ((const int8_t *)p->values)[at]; break;
        case 2: v = ((const int16_t *)p->values)[at]; break;
        case 4: v = ((const int32_t *)p->values)[at]; break;
        default: v = ((const int64_t *)p->values)[at];
        }
        return write_int(w, v);
    }
    case P_BOOL:
        if (bit_at((const u8 *)p->values, at)) {
            memcpy(w, "true", 4);
            return w + 4;
        }
        memcpy(w, "false", 5);
        return w + 5;
    case P_MICROS: {
        int64_t us = ((const int64_t *)p->values)[at];
        int64_t days = floor_div(us, 86400000000LL), rem = us - days * 86400000000LL;
        *w++ = '"';
        if (days != p->day) {
            if (days < FIRST_DAY || days > LAST_DAY) {
                p->failed = 1;
                return w;
            }
            write_date(p->day_text, days);
            p->day = days;
        }
        w = put(w, p->day_text, 10);
        *w++ = 'T';
        int64_t secs = rem / 1000000;
        w = put_digits(w, secs / 3600, 2);
        *w++ = ':';
        w = put_digits(w, secs / 60 % 60, 2);
        *w++ = ':';
        w = put_digits(w, secs % 60, 2);
        *w++ = '.';
        w = put_digits(w, rem % 1000000, 6);
        if (p->zone) *w++ = 'Z';
        *w++ = '"';
        return w;
    }
    case P_DOUBLE: {
        u8 *end = write_double(w, ((const double *)p->values)[at]);
        if (!end) {
            p->failed = 1;
            return w;
        }
        return end;
    }
    case P_DECIMAL: {
        u8 *end = write_decimal(w, (const u8 *)p->values + 16 * at, p->scale);
        if (!end) {
            p->failed = 1;
            return w;
        }
        return end;
    }
    default: { /* P_DATE */
        int32_t days = ((const int32_t *)p->values)[at];
        if (days < FIRST_DAY || days > LAST_DAY) {
            p->failed = 1;
            return w;
        }
        *w++ = '"';
        w = write_date(w, days);
        *w++ = '"';
        return w;
    }
    }
}

/* A buffer's memory, held until join returns; NULL for None. */
static int hold(PyObject *obj, Py_buffer *held, Py_ssize_t *nheld, const void **buf, Py_ssize_t *len) {
    if (obj == Py_None) {
        *buf = NULL;
        *len = 0;
        return 0;
    }
    if (PyObject_GetBuffer(obj, &held[*nheld], PyBUF_SIMPLE) < 0) return -1;
    *buf = held[*nheld].buf;
    *len = held[(*nheld)++].len;
    return 0;
}

static int too_small(void) {
    PyErr_SetString(PyExc_ValueError, "a column buffer is too small for its rows");
    return -1;
}

/* Parse parts[k] (see join_doc) into p. */
static int parse_part(PyObject *item, Part *p, Py_ssize_t n, Py_buffer *held, Py_ssize_t *nheld) {
    if (PyBytes_Check(item)) {
        p->kind = P_TEXT;
        char *text;
        if (PyBytes_AsStringAndSize(item, &text, &p->len) < 0) return -1;
        p->text = (const u8 *)text;
        return 0;
    }
    PyObject *a = NULL, *b = NULL, *validity = Py_None;
    int kind, large = 0, width = 0, zone = 0, scale = 0;
    Py_ssize_t vlen, alen;
    const void *vbuf;
    if (!PyTuple_Check(item) || PyTuple_Size(item) < 1) {
        PyErr_SetString(PyExc_TypeError, "a part is bytes or a tuple");
        return -1;
    }
    kind = (int)PyLong_AsLong(PyTuple_GetItem(item, 0));
    if (kind == -1 && PyErr_Occurred()) return -1;
    p->kind = kind;
    if (kind == P_RAW || kind == P_STRING) {
        if (!PyArg_ParseTuple(item, "iOOnpO", &kind, &a, &b, &p->offset, &large, &validity)) return -1;
    } else if (kind == P_INT) {
        if (!PyArg_ParseTuple(item, "iOniO", &kind, &a, &p->offset, &width, &validity)) return -1;
        if (width != 1 && width != 2 && width != 4 && width != 8) {
            PyErr_SetString(PyExc_ValueError, "integer width is 1, 2, 4 or 8");
            return -1;
        }
    } else if (kind == P_BOOL || kind == P_DATE || kind == P_DOUBLE) {
        if (!PyArg_ParseTuple(item, "iOnO", &kind, &a, &p->offset, &validity)) return -1;
    } else if (kind == P_MICROS) {
        if (!PyArg_ParseTuple(item, "iOnpO", &kind, &a, &p->offset, &zone, &validity)) return -1;
    } else if (kind == P_DECIMAL) {
        if (!PyArg_ParseTuple(item, "iOniO", &kind, &a, &p->offset, &scale, &validity)) return -1;
    } else {
        PyErr_Format(PyExc_ValueError, "unknown part kind %d", kind);
        return -1;
    }
    p->large = large;
    p->width = width;
    p->zone = zone;
    p->scale = scale;
    p->day = INT64_MIN;
    if (p->offset < 0) return too_small();
    /* offset + n + 1 values of up to 16 bytes, counted without overflow (join bounds n). */
    if (p->offset > PY_SSIZE_T_MAX / 16 - 1 - n) {
        PyErr_SetString(PyExc_OverflowError, "a column's array offset is out of range");
        return -1;
    }
    if (hold(validity, held, nheld, &vbuf, &vlen) < 0) return -1;
    if (vbuf && vlen < (p->offset + n + 7) / 8) return too_small();
    p->validity = (const u8 *)vbuf;
    if (hold(a, held, nheld, &p->values, &alen) < 0) return -1;
    if (!p->values) return too_small();
    Py_ssize_t need = kind == P_INT ? width * (p->offset + n)
                      : kind == P_BOOL ? (p->offset + n + 7) / 8
                      : kind == P_MICROS || kind == P_DOUBLE ? 8 * (p->offset + n)
                      : kind == P_DATE ? 4 * (p->offset + n)
                      : kind == P_DECIMAL ? 16 * (p->offset + n)
                      : (large ? 8 : 4) * (p->offset + n + 1);
    if (alen < need) return too_small();
    if (kind != P_RAW && kind != P_STRING) return 0;
    p->offsets = p->values;
    p->values = NULL;
    const void *dbuf;
    if (hold(b, held, nheld, &dbuf, &p->dlen) < 0) return -1;
    p->data = dbuf ? (const u8 *)dbuf : (const u8 *)"";
    /* Arrow's offsets rise; checked at the ends here and row by row below. */
    int64_t lo = part_at(p, p->offset), hi = part_at(p, p->offset + n);
    if (lo < 0 || hi < lo || hi > p->dlen) {
        PyErr_SetString(PyExc_ValueError, "offsets outside the data");
        return -1;
    }
    return 0;
}

const char gz_join_doc[] = PyDoc_STR(
             "join(parts, n) -> (bytes, bytes)\n\n"
             "Row i of the result is the concatenation over parts of row i of each part: bytes are\n"
             "a constant; a tuple is a column given by its Arrow buffers, first item its kind:\n"
             "(1 raw text | 2 JSON string, offsets, data, array offset, large, validity),\n"
             "(3 integers, values, array offset, width, validity), (4 booleans, bits, array offset,\n"
             "validity), (5 timestamp[us], values, array offset, zone, validity), (6 date32, values,\n"
             "array offset, validity), (7 float64, values, array offset, validity), (8 decimal128,\n"
             "values, array offset, scale, validity). A null (validity None: none) is written as\n"
             "null. Returns the joined bytes and the n + 1 row boundaries (int64), or the index of a\n"
             "float64 or decimal part holding a value it leaves to Arrow's cast (see write_double,\n"
             "write_decimal).");

PyObject *gz_join(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *parts_obj;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "O!n", &PyTuple_Type, &parts_obj, &n)) return NULL;
    Py_ssize_t np_ = PyTuple_Size(parts_obj);
    if (n < 0 || np_ > 1000000) {
        PyErr_SetString(PyExc_ValueError, "bad sizes");
        return NULL;
    }
    /* Rows of at least 8 bytes of bounds each, and the size sums below, in range. */
    if (n > PY_SSIZE_T_MAX / 64) {
        PyErr_SetString(PyExc_OverflowError, "too many rows to join");
        return NULL;
    }
    Part *parts = calloc((size_t)np_ + 1, sizeof(Part));
    Py_buffer *held = calloc((size_t)np_ * 3 + 1, sizeof(Py_buffer));
    Py_ssize_t nheld = 0, *texts = NULL; /* texts: the indexes of the P_RAW and P_STRING parts */
    PyObject *bounds = NULL, *result = NULL;
    u8 *out = NULL; /* the joined rows, grown as needed; copied into the returned bytes at the end */
    if (!parts || !held) {
        PyErr_NoMemory();
        goto done;
    }
    /* A first size: every constant and column byte once, and a guess for the rest. */
    int64_t guess = 0;
    for (Py_ssize_t k = 0; k < np_; k++) {
        Part *p = &parts[k];
        if (parse_part(PyTuple_GetItem(parts_obj, k), p, n, held, &nheld) < 0) goto done;
        p->index = k;
        if (p->kind == P_TEXT) {
            if (n && p->len > (PY_SSIZE_T_MAX / 4) / n) {
                PyErr_SetString(PyExc_OverflowError, "joined rows too large");
                goto done;
            }
            guess += (int64_t)p->len * n;
        }
        else if (p->kind == P_RAW || p->kind == P_STRING)
            guess += part_at(p, p->offset + n) - part_at(p, p->offset) + (p->kind == P_STRING ? 2 * n : 0);
        else guess += (int64_t)(p->kind == P_MICROS ? 29 : 8) * n;
        if (guess > PY_SSIZE_T_MAX / 4) {
            PyErr_SetString(PyExc_OverflowError, "joined rows too large");
            goto done;
        }
    }
    /* A constant followed by a column becomes that column's lead: one step per column and row. */
    Py_ssize_t np2 = 0;
    for (Py_ssize_t k = 0; k < np_; k++) {
        Part *p = &parts[k];
        if (p->kind == P_TEXT && k + 1 < np_ && parts[k + 1].kind != P_TEXT) {
            Part *next = &parts[k + 1];
            next->lead = p->text;
            next->lead_len = p->len;
            if (p->len <= 16) memcpy(next->lead16, p->text, (size_t)p->len);
            continue;
        }
        if (np2 != k) parts[np2] = *p;
        np2++;
    }
    /* Room a row needs at most: the parts' fixed maxima, and its text columns' bytes. */
    Py_ssize_t fixed = 0, ntexts = 0;
    texts = calloc((size_t)np2 + 1, sizeof(Py_ssize_t));
    if (!texts) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < np2; k++) {
        fixed += part_fixed_max(&parts[k]);
        if (fixed > PY_SSIZE_T_MAX / 4) {
            PyErr_SetString(PyExc_OverflowError, "joined rows too large");
            goto done;
        }
        if (parts[k].kind == P_RAW || parts[k].kind == P_STRING) texts[ntexts++] = k;
    }
    Py_ssize_t cap = (Py_ssize_t)guess + 64, len = 0;
    out = (u8 *)malloc((size_t)cap);
    if (!out) {
        PyErr_NoMemory();
        goto done;
    }
    bounds = PyBytes_FromStringAndSize(NULL, (n + 1) * 8);
    if (!bounds) goto done;
    int64_t *bo = (int64_t *)PyBytes_AsString(bounds);
    bo[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t room = fixed;
        for (Py_ssize_t t = 0; t < ntexts; t++) {
            Part *p = &parts[texts[t]];
            int64_t a = part_at(p, p->offset + i), b = part_at(p, p->offset + i + 1);
            if (a < 0 || b < a || b > p->dlen) {
                PyErr_SetString(PyExc_ValueError, "offsets outside the data");
                goto done;
            }
            /* each term below PY_SSIZE_T_MAX / 8, and the sum kept below PY_SSIZE_T_MAX / 4 */
            if (b - a > PY_SSIZE_T_MAX / 64) {
                PyErr_SetString(PyExc_OverflowError, "joined rows too large");
                goto done;
            }
            room += (Py_ssize_t)(b - a) * (p->kind == P_STRING ? 6 : 1);
            if (room > PY_SSIZE_T_MAX / 4) {
                PyErr_SetString(PyExc_OverflowError, "joined rows too large");
                goto done;
            }
        }
        if (room > cap - len) {
            if (room > PY_SSIZE_T_MAX / 4 - len) {
                PyErr_SetString(PyExc_OverflowError, "joined rows too large");
                goto done;
            }
            cap = cap + cap / 2 > len + room ? cap + cap / 2 : len + room;
            u8 *grown = (u8 *)realloc(out, (size_t)cap);
            if (!grown) {
                PyErr_NoMemory();
                goto done;
            }
            out = grown;
        }
        u8 *w = out + len;
        for (Py_ssize_t k = 0; k < np2; k++) {
            Part *p = &parts[k];
            w = write_part(w, p, i);
            if (p->failed) {
                result = PyLong_FromSsize_t(p->index);
                goto done;
            }
        }
        len = (Py_ssize_t)(w - out);
        bo[i + 1] = (int64_t)len;
    }
    /* bytes, immutable once returned: the appender keeps a reference, not a copy */
    result = Py_BuildValue("(y#O)", (const char *)out, len, bounds);
done:
    free(out);
    Py_XDECREF(bounds);
    for (Py_ssize_t k = 0; k < nheld; k++) PyBuffer_Release(&held[k]);
    free(texts);
    free(held);
    free(parts);
    return result;
}
