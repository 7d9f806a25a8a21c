/*
 * pyspark_gazette._jsonscan: a JSON scanner for typed reads of flat records (an accelerator of
 * spark/read/typed.py's TypedDecoder; the pure-Python path stays the reference and the fallback).
 *
 * scan(plan, validity, offsets, data, offset, n, large) reads n JSON records out of an Arrow
 * binary array's buffers (zero-copy, through the buffer protocol) and writes Arrow column
 * buffers for the plan's top-level fields. Each record gets a status byte:
 *
 *   0  a row was written (the record is a JSON object whose values for the plan's fields are
 *      exactly the common typed case, see typed.py's module docstring);
 *   1  no row (a null or blank record);
 *   2  not certain: the caller converts this record with the pure-Python rules. Everything
 *      outside the common case lands here (wrong JSON type for the field, malformed JSON, an
 *      integer out of range, a timestamp form not parsed here, escapes in keys, lone
 *      surrogates, non-finite literals, ...), so no Spark rule is decided in this file beyond
 *      the ones it implements exactly.
 *
 * Only plain C99 and the CPython API (PyOS_string_to_double: locale-independent, correctly
 * rounded) are used.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Field kinds; typed.py's _NATIVE_KINDS must match. */
enum {
    K_STRING = 0,
    K_LONG = 1,
    K_INT = 2,
    K_SHORT = 3,
    K_BYTE = 4,
    K_DOUBLE = 5,
    K_FLOAT = 6,
    K_BOOL = 7,
    K_TIMESTAMP = 8, /* timestamp[us, UTC] */
    K_NTZ = 9,       /* timestamp[us] */
    K_DATE = 10,     /* date32 */
    K_COUNT = 11
};

static const int WIDTH[K_COUNT] = {0, 8, 4, 2, 1, 8, 4, 1, 8, 8, 4};

#define ROW_OK 0
#define ROW_NONE 1
#define ROW_FALLBACK 2

/* Nesting allowed in skipped values before a record is left to Python. */
#define MAX_DEPTH 64
/* Python's int() refuses more digits than this (sys.int_info.default_max_str_digits). */
#define MAX_INT_DIGITS 4300

typedef unsigned char u8;

typedef struct {
    const u8 *name;
    Py_ssize_t name_len;
    int kind;
    int plain; /* the name has no quote, backslash or control byte: a raw key can equal it */
    uint64_t key8, mask8; /* names of up to 7 bytes: the name and its closing quote, as a word */
    u8 *valid;      /* one byte a row, packed into a bitmap at the end */
    u8 *fixed;      /* n * WIDTH[kind] (bools: one byte a row, packed at the end) */
    int32_t *offs;  /* strings: n + 1 offsets */
    u8 *sdata;      /* strings: the UTF-8 data */
    size_t slen, scap;
    Py_ssize_t nulls;
    int state; /* this record: 0 unset, 1 null, 2 a value */
} Col;

typedef struct {
    Col *cols;
    int ncols;
    int *table; /* open addressing over field names: index + 1, 0 empty */
    int tmask;
    int expect; /* the field expected next (records usually repeat their key order) */
    Py_ssize_t row;
    int oom;
} Scan;

/* -- small helpers ------------------------------------------------------------------------ */

static inline const u8 *skip_ws(const u8 *p, const u8 *end) {
    if (p < end && *p > ' ') return p; /* the usual case: no space between tokens */
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static uint32_t hash_bytes(const u8 *s, Py_ssize_t n) {
    uint32_t h = 2166136261u;
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
    return h;
}

/* Length of the valid UTF-8 sequence at p (a non-ASCII lead byte), 0 if invalid: the strict
 * rules of Python's decoder (no overlongs, no surrogates, nothing past U+10FFFF). */
static inline int utf8_seq(const u8 *p, const u8 *end) {
    u8 c = p[0];
    Py_ssize_t left = end - p;
    if (c >= 0xC2 && c <= 0xDF) {
        return (left >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (left < 3 || (p[2] & 0xC0) != 0x80) return 0;
        u8 lo = 0x80, hi = 0xBF;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
        return (p[1] >= lo && p[1] <= hi) ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (left < 4 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        u8 lo = 0x80, hi = 0xBF;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
        return (p[1] >= lo && p[1] <= hi) ? 4 : 0;
    }
    return 0;
}

static int utf8_valid(const u8 *p, const u8 *end) {
    while (p < end) {
        if (*p < 0x80) {
            p++;
            continue;
        }
        int k = utf8_seq(p, end);
        if (!k) return 0;
        p += k;
    }
    return 1;
}

static inline int hexval(u8 c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static inline int hex4(const u8 *p, const u8 *end) {
    if (end - p < 4) return -1;
    int a = hexval(p[0]), b = hexval(p[1]), c = hexval(p[2]), d = hexval(p[3]);
    if ((a | b | c | d) < 0) return -1;
    return (a << 12) | (b << 8) | (c << 4) | d;
}

/* -- strings ------------------------------------------------------------------------------ */

static int sreserve(Scan *S, Col *c, size_t more) {
    if (c->slen + more <= c->scap) return 1;
    size_t cap = c->scap ? c->scap : 4096;
    while (cap < c->slen + more) cap *= 2;
    u8 *d = (u8 *)realloc(c->sdata, cap);
    if (!d) {
        S->oom = 1;
        return 0;
    }
    c->sdata = d;
    c->scap = cap;
    return 1;
}

/* A JSON string at p (just after the opening quote). With out, its decoded UTF-8 is appended to
 * out's data. Returns the position after the closing quote, or NULL when the string is malformed
 * or not certain (control characters, bad escapes, lone surrogates, invalid UTF-8). */
#define ONES UINT64_C(0x0101010101010101)
#define HIGHS UINT64_C(0x8080808080808080)

/* Whether any of the 8 bytes in w is a quote, a backslash, a control or a non-ASCII byte (the
 * bytes a string's plain run stops at): zero-byte tests on w (SWAR), exact for ASCII bytes. */
static inline uint64_t special8(uint64_t w) {
    uint64_t q = w ^ (ONES * '"'), b = w ^ (ONES * '\\');
    return (w | ((q - ONES) & ~q) | ((b - ONES) & ~b) | (w - ONES * 0x20)) & HIGHS;
}

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
/* The first special byte of a word whose special8 is m != 0: the lowest flag is exact (a borrow
 * only flags bytes after a special one, which are later in memory on a little-endian machine). */
#define FIRST_SPECIAL(m) ((int)(__builtin_ctzll(m) >> 3))
#endif

/* The end of the plain run at p: the first quote, backslash, control or non-ASCII byte. */
static inline const u8 *plain_run(const u8 *p, const u8 *end) {
    while (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint64_t m = special8(w);
        if (m) {
#ifdef FIRST_SPECIAL
            return p + FIRST_SPECIAL(m);
#else
            break;
#endif
        }
        p += 8;
    }
    while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') p++;
    return p;
}

static const u8 *scan_string(Scan *S, const u8 *p, const u8 *end, Col *out) {
    for (;;) {
        const u8 *run = p;
        p = plain_run(p, end);
        if (out && p > run) {
            if (!sreserve(S, out, (size_t)(p - run))) return NULL;
            memcpy(out->sdata + out->slen, run, (size_t)(p - run));
            out->slen += (size_t)(p - run);
        }
        if (p >= end) return NULL;
        u8 c = *p;
        if (c == '"') return p + 1;
        if (c < 0x20) return NULL;
        if (c >= 0x80) {
            int k = utf8_seq(p, end);
            if (!k) return NULL;
            if (out) {
                if (!sreserve(S, out, (size_t)k)) return NULL;
                memcpy(out->sdata + out->slen, p, (size_t)k);
                out->slen += (size_t)k;
            }
            p += k;
            continue;
        }
        /* a backslash */
        if (end - p < 2) return NULL;
        u8 e = p[1];
        uint32_t cp;
        p += 2;
        switch (e) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u': {
                int h = hex4(p, end);
                if (h < 0) return NULL;
                p += 4;
                cp = (uint32_t)h;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return NULL; /* a lone low surrogate */
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u') return NULL;
                    int l = hex4(p + 2, end);
                    if (l < 0xDC00 || l > 0xDFFF) return NULL;
                    p += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)l - 0xDC00);
                }
                break;
            }
            default: return NULL;
        }
        if (out) {
            u8 buf[4];
            int k;
            if (cp < 0x80) {
                buf[0] = (u8)cp;
                k = 1;
            } else if (cp < 0x800) {
                buf[0] = (u8)(0xC0 | (cp >> 6));
                buf[1] = (u8)(0x80 | (cp & 0x3F));
                k = 2;
            } else if (cp < 0x10000) {
                buf[0] = (u8)(0xE0 | (cp >> 12));
                buf[1] = (u8)(0x80 | ((cp >> 6) & 0x3F));
                buf[2] = (u8)(0x80 | (cp & 0x3F));
                k = 3;
            } else {
                buf[0] = (u8)(0xF0 | (cp >> 18));
                buf[1] = (u8)(0x80 | ((cp >> 12) & 0x3F));
                buf[2] = (u8)(0x80 | ((cp >> 6) & 0x3F));
                buf[3] = (u8)(0x80 | (cp & 0x3F));
                k = 4;
            }
            if (!sreserve(S, out, (size_t)k)) return NULL;
            memcpy(out->sdata + out->slen, buf, (size_t)k);
            out->slen += (size_t)k;
        }
    }
}

/* -- numbers ------------------------------------------------------------------------------ */

typedef struct {
    const u8 *start, *end; /* the number's text */
    int neg;
    int is_int;            /* no fraction, no exponent */
    int int_digits;        /* digits before the point */
    uint64_t mant;         /* significant digits (leading zeros dropped), if they fit */
    int mant_digits;       /* how many significant digits mant holds */
    int dropped;           /* significant digits that did not fit in mant (then mant is unused) */
    int exp10;             /* value = mant * 10^exp10, when !dropped */
} Num;

/* JSON's number grammar (Python's json: -?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?). Returns the
 * position after the number, or NULL when there is none (or it is too long to be certain). */
static const u8 *scan_number(const u8 *p, const u8 *end, Num *n) {
    n->start = p;
    n->neg = 0;
    n->is_int = 1;
    n->mant = 0;
    n->mant_digits = 0;
    n->dropped = 0;
    n->exp10 = 0;
    if (p < end && *p == '-') {
        n->neg = 1;
        p++;
    }
    if (p >= end || *p < '0' || *p > '9') return NULL;
    const u8 *digits = p;
    if (*p == '0') {
        p++;
    } else {
        while (p < end && *p >= '0' && *p <= '9') {
            if (n->mant_digits < 19) {
                n->mant = n->mant * 10 + (uint64_t)(*p - '0');
                n->mant_digits++;
            } else {
                n->dropped++;
            }
            p++;
        }
    }
    n->int_digits = (int)(p - digits);
    if (n->int_digits > MAX_INT_DIGITS) return NULL;
    n->exp10 = n->dropped;
    if (p < end && *p == '.') {
        n->is_int = 0;
        p++;
        const u8 *f = p;
        while (p < end && *p >= '0' && *p <= '9') {
            if (n->dropped == 0 && n->mant_digits < 19 && (n->mant_digits > 0 || *p != '0')) {
                n->mant = n->mant * 10 + (uint64_t)(*p - '0');
                n->mant_digits++;
                n->exp10--;
            } else if (n->dropped == 0 && n->mant_digits == 0) {
                n->exp10--; /* a leading zero of the fraction */
            } else {
                n->dropped++;
            }
            p++;
        }
        if (p == f) return NULL;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        n->is_int = 0;
        p++;
        int eneg = 0;
        if (p < end && (*p == '+' || *p == '-')) {
            eneg = *p == '-';
            p++;
        }
        const u8 *e = p;
        long ev = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (ev < 100000) ev = ev * 10 + (*p - '0');
            p++;
        }
        if (p == e) return NULL;
        n->exp10 += (int)(eneg ? -ev : ev);
    }
    n->end = p;
    return p;
}

static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* The double Python's float() gives for the number's text; 0 when unsure (the caller falls back). */
static int number_to_double(const Num *n, double *out) {
    if (n->is_int) {
        /* An int64 converts with one rounding, as Python's float(int(text)) does. "-0" is
         * 0.0 for Python's rules but -0.0 for pyarrow's reader: left to the Python path. */
        if (n->neg && n->mant == 0) return 0;
        if (!n->dropped) {
            if (n->mant <= (uint64_t)INT64_MAX) {
                int64_t v = (int64_t)n->mant;
                *out = (double)(n->neg ? -v : v);
                return 1;
            }
        }
        if (n->int_digits > 308) return 0; /* float(int) overflows: Python raises */
    } else if (!n->dropped && n->mant <= (UINT64_C(1) << 53) && n->exp10 >= -22 && n->exp10 <= 22) {
        /* Both operands exact, so the one IEEE operation rounds correctly. */
        double m = (double)n->mant;
        double v = n->exp10 < 0 ? m / POW10[-n->exp10] : m * POW10[n->exp10];
        *out = n->neg ? -v : v;
        return 1;
    }
    char small[128];
    size_t len = (size_t)(n->end - n->start);
    char *buf = len < sizeof(small) ? small : (char *)malloc(len + 1);
    if (!buf) return 0;
    memcpy(buf, n->start, len);
    buf[len] = 0;
    char *stop = NULL;
    double v = PyOS_string_to_double(buf, &stop, NULL); /* overflow gives +-inf, like float() */
    int ok = !(v == -1.0 && PyErr_Occurred()) && stop == buf + len;
    if (PyErr_Occurred()) PyErr_Clear();
    if (buf != small) free(buf);
    if (!ok) return 0;
    *out = v;
    return 1;
}

/* -- timestamps and dates ----------------------------------------------------------------- */

static inline int digits(const u8 *p, int k) {
    int v = 0;
    for (int i = 0; i < k; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

static int is_leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

/* Days from 1970-01-01 to a valid date of years 1-9999; -1000000 when the date is invalid. */
static int64_t civil_days(int y, int m, int d) {
    static const int before[12] = {0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334};
    static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (y < 1 || m < 1 || m > 12 || d < 1) return -1000000;
    int leap = is_leap(y);
    if (d > mdays[m - 1] + (m == 2 && leap)) return -1000000;
    int64_t yy = y - 1;
    int64_t days = yy * 365 + yy / 4 - yy / 100 + yy / 400; /* days before Jan 1 of year y */
    days += before[m - 1] + (m > 2 && leap) + (d - 1);
    return days - 719162; /* days before 1970-01-01 */
}

/* "yyyy-mm-dd" at p (10 bytes); the days, or -1000000. */
static int64_t ymd(const u8 *p, const u8 *end) {
    if (end - p < 10 || p[4] != '-' || p[7] != '-') return -1000000;
    int y = digits(p, 4), m = digits(p + 5, 2), d = digits(p + 8, 2);
    if (y < 0 || m < 0 || d < 0) return -1000000;
    return civil_days(y, m, d);
}

/* The string's content s..e (between the quotes, no backslash in it). The common ISO-8601 forms
 * (Spark's cast grammar restricted to them): yyyy-mm-dd, or yyyy-mm-dd[T ]hh:mm:ss[.f*] with an
 * optional zone Z, +-hh:mm or +-hhmm (zoned only). Anything else: 0 (not certain). */
static int parse_ts(const u8 *s, const u8 *e, int zoned, int64_t *out) {
    int64_t days = ymd(s, e);
    if (days == -1000000) return 0;
    const u8 *p = s + 10;
    if (p == e) {
        *out = days * 86400 * INT64_C(1000000);
        return 1;
    }
    if (e - p < 9 || (*p != 'T' && *p != ' ') || p[3] != ':' || p[6] != ':') return 0;
    int h = digits(p + 1, 2), mi = digits(p + 4, 2), sec = digits(p + 7, 2);
    if (h < 0 || mi < 0 || sec < 0 || h > 23 || mi > 59 || sec > 59) return 0;
    p += 9;
    int64_t micros = 0;
    if (p < e && *p == '.') {
        p++;
        int k = 0;
        while (p < e && *p >= '0' && *p <= '9') {
            if (k < 6) micros = micros * 10 + (*p - '0');
            k++;
            p++;
        }
        for (; k < 6; k++) micros *= 10;
    }
    int64_t off = 0;
    if (p < e) {
        if (!zoned) return 0;
        if (*p == 'Z') {
            p++;
        } else if (*p == '+' || *p == '-') {
            int sign = *p == '+' ? 1 : -1;
            int zh, zm;
            if (e - p == 6 && p[3] == ':') {
                zh = digits(p + 1, 2);
                zm = digits(p + 4, 2);
            } else if (e - p == 5) {
                zh = digits(p + 1, 2);
                zm = digits(p + 3, 2);
            } else {
                return 0;
            }
            if (zh < 0 || zm < 0 || zm > 59 || zh * 3600 + zm * 60 > 18 * 3600) return 0;
            off = sign * (int64_t)(zh * 3600 + zm * 60);
            p = e;
        } else {
            return 0;
        }
        if (p != e) return 0;
    }
    int64_t t = ((days * 24 + h) * 60 + mi) * 60 + sec - off;
    *out = t * 1000000 + micros;
    return 1;
}

/* -- values ------------------------------------------------------------------------------- */

/* Skip any JSON value at p, checking it as Python's json would. NULL: malformed or unsure. */
static const u8 *skip_value(Scan *S, const u8 *p, const u8 *end, int depth) {
    if (p >= end) return NULL;
    switch (*p) {
        case '"': return scan_string(S, p + 1, end, NULL);
        case '{': {
            if (depth >= MAX_DEPTH) return NULL;
            p = skip_ws(p + 1, end);
            if (p < end && *p == '}') return p + 1;
            for (;;) {
                if (p >= end || *p != '"') return NULL;
                p = scan_string(S, p + 1, end, NULL);
                if (!p) return NULL;
                p = skip_ws(p, end);
                if (p >= end || *p != ':') return NULL;
                p = skip_value(S, skip_ws(p + 1, end), end, depth + 1);
                if (!p) return NULL;
                p = skip_ws(p, end);
                if (p < end && *p == ',') {
                    p = skip_ws(p + 1, end);
                    continue;
                }
                if (p < end && *p == '}') return p + 1;
                return NULL;
            }
        }
        case '[': {
            if (depth >= MAX_DEPTH) return NULL;
            p = skip_ws(p + 1, end);
            if (p < end && *p == ']') return p + 1;
            for (;;) {
                p = skip_value(S, p, end, depth + 1);
                if (!p) return NULL;
                p = skip_ws(p, end);
                if (p < end && *p == ',') {
                    p = skip_ws(p + 1, end);
                    continue;
                }
                if (p < end && *p == ']') return p + 1;
                return NULL;
            }
        }
        case 't': return (end - p >= 4 && memcmp(p, "true", 4) == 0) ? p + 4 : NULL;
        case 'f': return (end - p >= 5 && memcmp(p, "false", 5) == 0) ? p + 5 : NULL;
        case 'n': return (end - p >= 4 && memcmp(p, "null", 4) == 0) ? p + 4 : NULL;
        default: {
            Num n;
            return scan_number(p, end, &n);
        }
    }
}

static inline void put_fixed(Col *c, Py_ssize_t row, const void *v) {
    int w = WIDTH[c->kind];
    memcpy(c->fixed + row * w, v, (size_t)w);
}

/* The value at p for column c. NULL: not certain (the record falls back). */
static const u8 *typed_value(Scan *S, Col *c, const u8 *p, const u8 *end) {
    Py_ssize_t row = S->row;
    if (p >= end) return NULL;
    if (*p == 'n') {
        if (end - p < 4 || memcmp(p, "null", 4) != 0) return NULL;
        c->state = 1;
        return p + 4;
    }
    switch (c->kind) {
        case K_STRING: {
            if (*p != '"') return NULL; /* other JSON types become their text: Python's rules */
            c->slen = (size_t)c->offs[row]; /* a duplicate key replaces the earlier value */
            p = scan_string(S, p + 1, end, c);
            if (!p) return NULL;
            c->state = 2;
            return p;
        }
        case K_LONG:
        case K_INT:
        case K_SHORT:
        case K_BYTE:
        case K_TIMESTAMP: {
            if (c->kind == K_TIMESTAMP && *p == '"') break;
            Num n;
            p = scan_number(p, end, &n);
            if (!p || !n.is_int || n.dropped) return NULL;
            uint64_t lim;
            switch (c->kind) {
                case K_LONG: lim = (uint64_t)INT64_MAX; break;
                case K_INT: lim = INT32_MAX; break;
                case K_SHORT: lim = INT16_MAX; break;
                case K_BYTE: lim = INT8_MAX; break;
                default: lim = UINT64_C(9223372036854); break; /* epoch seconds Spark takes */
            }
            if (n.mant > lim + (uint64_t)(n.neg && c->kind != K_TIMESTAMP)) return NULL;
            int64_t v = n.neg ? (int64_t)(0 - n.mant) : (int64_t)n.mant;
            if (n.neg && n.mant == (uint64_t)INT64_MAX + 1) v = INT64_MIN;
            switch (c->kind) {
                case K_LONG: put_fixed(c, row, &v); break;
                case K_INT: {
                    int32_t x = (int32_t)v;
                    put_fixed(c, row, &x);
                    break;
                }
                case K_SHORT: {
                    int16_t x = (int16_t)v;
                    put_fixed(c, row, &x);
                    break;
                }
                case K_BYTE: {
                    int8_t x = (int8_t)v;
                    put_fixed(c, row, &x);
                    break;
                }
                default: {
                    int64_t us = v * 1000000;
                    put_fixed(c, row, &us);
                }
            }
            c->state = 2;
            return p;
        }
        case K_DOUBLE:
        case K_FLOAT: {
            Num n;
            p = scan_number(p, end, &n); /* "NaN"/"Infinity" strings and literals: Python's */
            if (!p) return NULL;
            double d;
            if (!number_to_double(&n, &d)) return NULL;
            if (c->kind == K_DOUBLE) {
                put_fixed(c, row, &d);
            } else {
                /* pyarrow's reader rounds the text to float32 once; text -> double -> float32
                 * agrees except where the double is a float32 midpoint (or past float32's
                 * range, where Python's rules and pyarrow's differ): those go to Python. */
                if (!(fabs(d) <= 3.4028234663852886e38)) return NULL;
                float f = (float)d;
                if ((double)f != d) {
                    float other = nextafterf(f, d > (double)f ? HUGE_VALF : -HUGE_VALF);
                    if (d - (double)f == (double)other - d) return NULL;
                }
                put_fixed(c, row, &f);
            }
            c->state = 2;
            return p;
        }
        case K_BOOL: {
            u8 b;
            if (end - p >= 4 && memcmp(p, "true", 4) == 0) {
                b = 1;
                p += 4;
            } else if (end - p >= 5 && memcmp(p, "false", 5) == 0) {
                b = 0;
                p += 5;
            } else {
                return NULL;
            }
            c->fixed[row] = b;
            c->state = 2;
            return p;
        }
        default: break;
    }
    /* strings of timestamps and dates: no escapes, only the common forms */
    if (*p != '"') return NULL;
    const u8 *s = p + 1, *q = plain_run(s, end);
    if (q >= end || *q != '"') return NULL;
    if (c->kind == K_DATE) {
        int64_t days = ymd(s, q);
        if (days == -1000000 || (q - s > 10 && s[10] != 'T' && s[10] != ' ')) return NULL;
        int32_t x = (int32_t)days;
        put_fixed(c, row, &x);
    } else {
        int64_t us;
        if (!parse_ts(s, q, c->kind == K_TIMESTAMP, &us)) return NULL;
        put_fixed(c, row, &us);
    }
    c->state = 2;
    return q + 1;
}

static Col *find_field(Scan *S, const u8 *k, Py_ssize_t len) {
    uint32_t h = hash_bytes(k, len) & (uint32_t)S->tmask;
    for (;;) {
        int i = S->table[h];
        if (!i) return NULL;
        Col *c = &S->cols[i - 1];
        if (c->name_len == len && memcmp(c->name, k, (size_t)len) == 0) {
            S->expect = i;
            return c;
        }
        h = (h + 1) & (uint32_t)S->tmask;
    }
}

/* One record; writes row S->row on ROW_OK. */
static int scan_record(Scan *S, const u8 *p, const u8 *end) {
    Py_ssize_t row = S->row;
    p = skip_ws(p, end);
    if (p == end) return ROW_NONE;
    if (*p != '{') return ROW_FALLBACK;
    for (int i = 0; i < S->ncols; i++) S->cols[i].state = 0;
    S->expect = 0;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') {
        p++;
    } else {
        for (;;) {
            if (p >= end || *p != '"') goto fallback;
            const u8 *k = ++p;
            Col *c = NULL;
            if (S->expect < S->ncols) { /* the usual case: the key the last record had here */
                Col *e = &S->cols[S->expect];
                uint64_t w = 0;
                if (e->mask8 && end - k >= 8) memcpy(&w, k, 8);
                if (e->mask8 && end - k >= 8 ? (w & e->mask8) == e->key8
                                             : (e->plain && end - k > e->name_len && k[e->name_len] == '"' &&
                                                memcmp(k, e->name, (size_t)e->name_len) == 0)) {
                    c = e;
                    S->expect++;
                    p = k + e->name_len;
                    goto key_done;
                }
            }
            for (;;) {
                p = plain_run(p, end);
                if (p >= end || *p < 0x80) break;
                int n = utf8_seq(p, end);
                if (!n) goto fallback;
                p += n;
            }
            if (p >= end || *p != '"') goto fallback; /* escapes in keys: Python's */
            c = find_field(S, k, p - k);
        key_done:
            p = skip_ws(p + 1, end);
            if (p >= end || *p != ':') goto fallback;
            p = skip_ws(p + 1, end);
            p = c ? typed_value(S, c, p, end) : skip_value(S, p, end, 0);
            if (!p) goto fallback;
            p = skip_ws(p, end);
            if (p < end && *p == ',') {
                p = skip_ws(p + 1, end);
                continue;
            }
            if (p < end && *p == '}') {
                p++;
                break;
            }
            goto fallback;
        }
    }
    /* Content after the value is ignored, but the record must be UTF-8 (Python decodes it). */
    if (!utf8_valid(p, end)) goto fallback;
    for (int i = 0; i < S->ncols; i++) {
        Col *c = &S->cols[i];
        int ok = c->state == 2;
        c->valid[row] = (u8)ok;
        if (!ok) {
            c->nulls++;
            if (c->kind == K_STRING) {
                c->slen = (size_t)c->offs[row];
            } else {
                memset(c->fixed + row * WIDTH[c->kind], 0, (size_t)WIDTH[c->kind]);
            }
        }
        if (c->kind == K_STRING) {
            if (c->slen > (size_t)INT32_MAX) {
                S->oom = 2;
                return ROW_FALLBACK;
            }
            c->offs[row + 1] = (int32_t)c->slen;
        }
    }
    return ROW_OK;
fallback:
    for (int i = 0; i < S->ncols; i++) {
        Col *c = &S->cols[i];
        if (c->kind == K_STRING) c->slen = (size_t)c->offs[row];
    }
    return ROW_FALLBACK;
}

/* -- module ------------------------------------------------------------------------------- */

static void pack_bits(u8 *bytes, Py_ssize_t n) { /* in place: byte i -> bit i */
    Py_ssize_t full = n / 8;
    for (Py_ssize_t j = 0; j < full; j++) {
        const u8 *b = bytes + j * 8;
        bytes[j] = (u8)(b[0] | b[1] << 1 | b[2] << 2 | b[3] << 3 | b[4] << 4 | b[5] << 5 | b[6] << 6 | b[7] << 7);
    }
    if (n % 8) {
        u8 v = 0;
        for (Py_ssize_t i = full * 8; i < n; i++) v |= (u8)(bytes[i] << (i - full * 8));
        bytes[full] = v;
    }
}

static void free_cols(Col *cols, int n) {
    if (!cols) return;
    for (int i = 0; i < n; i++) {
        free(cols[i].valid);
        free(cols[i].fixed);
        free(cols[i].offs);
        free(cols[i].sdata);
    }
    free(cols);
}

PyDoc_STRVAR(scan_doc,
             "scan(plan, validity, offsets, data, offset, n, large) -> (status, rows, columns)\n\n"
             "plan: a list of (name: bytes, kind: int). validity may be None. status: bytes, one a\n"
             "record (0 row, 1 no row, 2 fall back); columns: per field (validity bitmap, data,\n"
             "offsets or None, null count).");

static PyObject *scan(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *plan, *validity_obj, *offsets_obj, *data_obj;
    Py_ssize_t offset, n;
    int large;
    if (!PyArg_ParseTuple(args, "OOOOnnp", &plan, &validity_obj, &offsets_obj, &data_obj, &offset, &n, &large))
        return NULL;
    if (!PyList_Check(plan)) {
        PyErr_SetString(PyExc_TypeError, "plan must be a list");
        return NULL;
    }
    Py_ssize_t ncols = PyList_GET_SIZE(plan);
    if (ncols < 1 || ncols > 100000 || n < 0 || offset < 0) {
        PyErr_SetString(PyExc_ValueError, "bad plan or sizes");
        return NULL;
    }
    Py_buffer vb = {0}, ob = {0}, db = {0};
    int have_v = 0, have_d = 0;
    PyObject *result = NULL, *status = NULL, *columns = NULL;
    Col *cols = NULL;
    Scan S = {0};
    if (PyObject_GetBuffer(offsets_obj, &ob, PyBUF_SIMPLE) < 0) return NULL;
    if (validity_obj != Py_None) {
        if (PyObject_GetBuffer(validity_obj, &vb, PyBUF_SIMPLE) < 0) goto done;
        have_v = 1;
    }
    if (data_obj != Py_None) {
        if (PyObject_GetBuffer(data_obj, &db, PyBUF_SIMPLE) < 0) goto done;
        have_d = 1;
    }
    Py_ssize_t osize = large ? 8 : 4;
    if (ob.len < (offset + n + 1) * osize || (have_v && vb.len * 8 < offset + n)) {
        PyErr_SetString(PyExc_ValueError, "buffers too small");
        goto done;
    }
    cols = (Col *)calloc((size_t)ncols, sizeof(Col));
    int tsize = 8;
    while (tsize < ncols * 2) tsize *= 2;
    S.table = (int *)calloc((size_t)tsize, sizeof(int));
    if (!cols || !S.table) {
        PyErr_NoMemory();
        goto done;
    }
    S.cols = cols;
    S.ncols = (int)ncols;
    S.tmask = tsize - 1;
    Py_ssize_t total = 0;
    if (n) {
        total = large ? ((const int64_t *)ob.buf)[offset + n] - ((const int64_t *)ob.buf)[offset]
                      : ((const int32_t *)ob.buf)[offset + n] - ((const int32_t *)ob.buf)[offset];
    }
    for (Py_ssize_t i = 0; i < ncols; i++) {
        PyObject *item = PyList_GET_ITEM(plan, i);
        const char *name;
        Py_ssize_t name_len;
        int kind;
        if (!PyArg_ParseTuple(item, "y#i", &name, &name_len, &kind)) goto done;
        if (kind < 0 || kind >= K_COUNT) {
            PyErr_SetString(PyExc_ValueError, "unknown kind");
            goto done;
        }
        Col *c = &cols[i];
        c->name = (const u8 *)name; /* the plan list keeps the bytes alive */
        c->name_len = name_len;
        c->kind = kind;
        c->plain = 1;
        for (Py_ssize_t b = 0; b < name_len; b++) {
            if (c->name[b] == '"' || c->name[b] == '\\' || c->name[b] < 0x20) c->plain = 0;
        }
        if (c->plain && name_len < 8) {
            u8 key[8] = {0}, mask[8] = {0};
            memcpy(key, name, (size_t)name_len);
            key[name_len] = '"';
            memset(mask, 0xFF, (size_t)name_len + 1);
            memcpy(&c->key8, key, 8);
            memcpy(&c->mask8, mask, 8);
        }
        size_t rows = (size_t)n + 8;
        c->valid = (u8 *)malloc(rows);
        if (kind == K_STRING) {
            c->offs = (int32_t *)malloc((rows + 1) * sizeof(int32_t));
            c->scap = (size_t)(total / ncols) + 64;
            c->sdata = (u8 *)malloc(c->scap);
            if (c->offs) c->offs[0] = 0;
            if (!c->offs || !c->sdata) c->valid = (free(c->valid), NULL);
        } else {
            c->fixed = (u8 *)malloc(rows * (size_t)WIDTH[kind]);
            if (!c->fixed) c->valid = (free(c->valid), NULL);
        }
        if (!c->valid) {
            PyErr_NoMemory();
            goto done;
        }
        uint32_t h = hash_bytes(c->name, name_len) & (uint32_t)S.tmask;
        while (S.table[h]) h = (h + 1) & (uint32_t)S.tmask;
        S.table[h] = (int)i + 1;
    }
    status = PyBytes_FromStringAndSize(NULL, n);
    if (!status) goto done;
    u8 *st = (u8 *)PyBytes_AS_STRING(status);
    const u8 *data = have_d ? (const u8 *)db.buf : (const u8 *)"";
    Py_ssize_t dlen = have_d ? db.len : 0;
    const u8 *vbits = have_v ? (const u8 *)vb.buf : NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t j = offset + i;
        if (vbits && !((vbits[j >> 3] >> (j & 7)) & 1)) {
            st[i] = ROW_NONE;
            continue;
        }
        int64_t a, b;
        if (large) {
            a = ((const int64_t *)ob.buf)[j];
            b = ((const int64_t *)ob.buf)[j + 1];
        } else {
            a = ((const int32_t *)ob.buf)[j];
            b = ((const int32_t *)ob.buf)[j + 1];
        }
        if (a < 0 || b < a || b > dlen) {
            PyErr_SetString(PyExc_ValueError, "offsets outside the data");
            goto done;
        }
        int r = scan_record(&S, data + a, data + b);
        if (S.oom) {
            if (S.oom == 1) PyErr_NoMemory();
            else PyErr_SetString(PyExc_OverflowError, "string column over 2 GiB");
            goto done;
        }
        st[i] = (u8)r;
        if (r == ROW_OK) S.row++;
    }
    Py_ssize_t rows = S.row;
    columns = PyList_New(ncols);
    if (!columns) goto done;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        Col *c = &cols[i];
        pack_bits(c->valid, rows);
        PyObject *valid = PyBytes_FromStringAndSize((const char *)c->valid, (rows + 7) / 8);
        PyObject *dat, *offs;
        if (c->kind == K_STRING) {
            dat = PyBytes_FromStringAndSize((const char *)c->sdata, (Py_ssize_t)c->offs[rows]);
            offs = PyBytes_FromStringAndSize((const char *)c->offs, (rows + 1) * 4);
        } else {
            if (c->kind == K_BOOL) pack_bits(c->fixed, rows);
            Py_ssize_t sz = c->kind == K_BOOL ? (rows + 7) / 8 : rows * WIDTH[c->kind];
            dat = PyBytes_FromStringAndSize((const char *)c->fixed, sz);
            offs = Py_None;
            Py_INCREF(offs);
        }
        PyObject *t = (valid && dat && offs) ? Py_BuildValue("(NNNn)", valid, dat, offs, c->nulls) : NULL;
        if (!t) {
            if (!valid || !dat || !offs) {
                Py_XDECREF(valid);
                Py_XDECREF(dat);
                Py_XDECREF(offs);
            }
            goto done;
        }
        PyList_SET_ITEM(columns, i, t);
    }
    result = Py_BuildValue("(OnO)", status, rows, columns);
done:
    Py_XDECREF(status);
    Py_XDECREF(columns);
    free_cols(cols, (int)ncols);
    free(S.table);
    PyBuffer_Release(&ob);
    if (have_v) PyBuffer_Release(&vb);
    if (have_d) PyBuffer_Release(&db);
    return result;
}

static PyMethodDef methods[] = {{"scan", scan, METH_VARARGS, scan_doc}, {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jsonscan",
                                    "A JSON scanner for typed reads of flat records (see typed.py).",
                                    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__jsonscan(void) { return PyModule_Create(&module); }
