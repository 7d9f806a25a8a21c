/*
 * scan.c, the read side of pyspark_gazette._jsonscan: a JSON scanner for typed reads (an accelerator of
 * spark/read/typed.py's TypedDecoder; the pure-Python path stays the reference and the fallback).
 *
 * scan(plan, validity, offsets, data, offset, n, large) reads n JSON records out of an Arrow
 * binary array's buffers (zero-copy, through the buffer protocol) and writes Arrow column
 * buffers for the plan's fields: scalars, and structs and arrays of them (at any depth the plan
 * gives; a struct's fields and an array's elements are columns of their own, written as the
 * record is read). Each record gets a status byte:
 *
 *   0  a row was written (the record is a JSON object whose values for the plan's fields are
 *      exactly the common typed case, see typed.py's module docstring);
 *   1  no row (a null or blank record);
 *   2  not certain: the caller converts this record with the pure-Python rules. Everything
 *      outside the common case lands here (wrong JSON type for the field, malformed JSON, an
 *      integer out of range, a timestamp form not parsed here, escapes in keys, lone
 *      surrogates, non-finite literals, a struct or array given twice in one object, ...), so
 *      no Spark rule is decided in this file beyond the ones it implements exactly.
 *
 * Only plain C99 and the CPython API (PyOS_string_to_double: locale-independent, correctly
 * rounded) are used.
 */
#include "common.h"

static const int WIDTH[K_COUNT] = {0, 8, 4, 2, 1, 8, 4, 1, 8, 8, 4, 0, 0};

#define ROW_OK 0
#define ROW_NONE 1
#define ROW_FALLBACK 2

/* Nesting allowed in skipped values before a record is left to Python. */
#define MAX_DEPTH 64
/* Nesting of the plan's structs and arrays (typed.py plans fewer levels). */
#define MAX_PLAN_DEPTH 16
/* Python's int() refuses more digits than this (sys.int_info.default_max_str_digits). */
#define MAX_INT_DIGITS 4300
/* Digits of a fraction past which a number is left to Python. */
#define MAX_FRACTION_DIGITS (1 << 20)

/* A column: a field of the record or of a struct, or an array's elements. Its slots are written
 * in order; slot `len` is the one being read (a field's value in the current object, an array's
 * next element) until commit() closes it. A record that falls back rolls every column back to
 * its length at the record's start (mark_len). */
typedef struct Col Col;
struct Col {
    const u8 *name;
    Py_ssize_t name_len;
    int kind;
    int plain; /* the name has no quote, backslash or control byte: a raw key can equal it */
    uint64_t key8, mask8; /* names of up to 7 bytes: the name and its closing quote, as a word */
    u8 *valid;      /* one byte a slot, packed into a bitmap at the end */
    u8 *fixed;      /* cap * WIDTH[kind] (bools: one byte a slot, packed at the end) */
    int32_t *offs;  /* strings: cap + 1 offsets into sdata; lists: into the element column */
    u8 *sdata;      /* strings: the UTF-8 data */
    size_t slen, scap;
    Py_ssize_t cap, len;
    int in_list;                     /* inside an array: slots are closed as elements are read */
    Py_ssize_t mark_len;             /* in_list: at the start of the record */
    int state; /* in the object being read: 0 unset, 1 null, 2 a value */
    /* structs (the record itself is one): the fields, and their names' hash table */
    Col *kids; /* lists: kids[0], the element */
    int nkids;
    int *table; /* open addressing over field names: index + 1, 0 empty */
    int tmask;
};

typedef struct {
    Col root;     /* the record: a struct without validity */
    Col **marked; /* the columns in_list */
    Py_ssize_t nmarked;
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
    /* counted as Py_ssize_t: they cannot overflow whatever the number's length */
    Py_ssize_t dropped;    /* significant digits that did not fit in mant (then mant is unused) */
    Py_ssize_t exp10;      /* value = mant * 10^exp10, when !dropped */
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
    if (p - digits > MAX_INT_DIGITS) return NULL;
    n->int_digits = (int)(p - digits);
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
        if (p == f || p - f > MAX_FRACTION_DIGITS) return NULL;
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
        n->exp10 += eneg ? -ev : ev;
    }
    n->end = p;
    return p;
}


/* The double Python's float() gives for the number's text; 0 when unsure (the caller falls back). */
static ALWAYS_INLINE int number_to_double(const Num *n, double *out) {
    if (n->is_int) {
        /* An int64 converts with one rounding, as Python's float(int(text)) does. The JSON
         * integer "-0" is 0.0, as Spark's reader has it (a long zero, then a double). */
        if (n->neg && n->mant == 0 && !n->dropped) {
            *out = 0.0;
            return 1;
        }
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
static ALWAYS_INLINE int parse_ts(const u8 *s, const u8 *e, int zoned, int64_t *out) {
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

/* Room for slot c->len and its closing offset: columns inside arrays grow (the others have one
 * slot a record from the start). 0 on out of memory (S->oom). */
static int grow(Scan *S, Col *c) {
    Py_ssize_t cap = c->cap * 2 + 64;
    u8 *v = (u8 *)realloc(c->valid, (size_t)cap);
    if (!v) goto oom;
    c->valid = v;
    if (WIDTH[c->kind]) {
        u8 *f = (u8 *)realloc(c->fixed, (size_t)cap * (size_t)WIDTH[c->kind]);
        if (!f) goto oom;
        c->fixed = f;
    }
    if (c->offs) {
        int32_t *o = (int32_t *)realloc(c->offs, ((size_t)cap + 1) * sizeof(int32_t));
        if (!o) goto oom;
        c->offs = o;
    }
    c->cap = cap;
    return 1;
oom:
    S->oom = 1;
    return 0;
}

/* Room for the slot of an array's next element: in its column, and in the fields of a struct
 * element (which share its slots). Other columns have one slot a record from the start. */
static int reserve(Scan *S, Col *c) {
    if (c->len >= c->cap && !grow(S, c)) return 0;
    if (c->kind == K_STRUCT) {
        for (int k = 0; k < c->nkids; k++) {
            if (!reserve(S, &c->kids[k])) return 0;
        }
    }
    return 1;
}

static int commit_fields(Scan *S, Col *st, int ok);

/* Closes slot c->len: a value when c->state is 2, else null (a null struct's fields are null,
 * a null array has no elements). 0 on out of memory or a column past int32 offsets (S->oom). */
static inline int commit(Scan *S, Col *c) {
    Py_ssize_t i = c->len;
    int ok = c->state == 2;
    c->valid[i] = (u8)ok;
    if (c->kind == K_STRING) {
        if (!ok) c->slen = (size_t)c->offs[i];
        if (c->slen > (size_t)INT32_MAX) goto too_big;
        c->offs[i + 1] = (int32_t)c->slen;
    } else if (c->kind < K_STRUCT) {
        if (!ok) memset(c->fixed + i * WIDTH[c->kind], 0, (size_t)WIDTH[c->kind]);
    } else if (c->kind == K_LIST) { /* a null array's elements were never written */
        if (c->kids[0].len > INT32_MAX) goto too_big;
        c->offs[i + 1] = (int32_t)c->kids[0].len;
    } else if (!commit_fields(S, c, ok)) {
        return 0;
    }
    c->len++;
    return 1;
too_big:
    S->oom = 2;
    return 0;
}

/* A struct's fields, as the struct's slot closes (all null when it is null). */
static int commit_fields(Scan *S, Col *st, int ok) {
    for (int k = 0; k < st->nkids; k++) {
        if (!ok) st->kids[k].state = 0;
        if (!commit(S, &st->kids[k])) return 0;
    }
    return 1;
}

/* The scalar at p for column c, into its slot c->len. NULL: not certain (the record falls
 * back). Structs and arrays: nested_value. */
static ALWAYS_INLINE const u8 *scalar_value(Scan *S, Col *c, const u8 *p, const u8 *end) {
    Py_ssize_t row = c->len;
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

static const u8 *scan_object(Scan *S, Col *st, const u8 *p, const u8 *end, int depth);
static const u8 *nested_value(Scan *S, Col *c, const u8 *p, const u8 *end, int depth);

/* The value at p for column c (members of objects and elements of arrays at `depth`, see
 * skip_value). */
static ALWAYS_INLINE const u8 *typed_value(Scan *S, Col *c, const u8 *p, const u8 *end, int depth) {
    return c->kind < K_STRUCT ? scalar_value(S, c, p, end) : nested_value(S, c, p, end, depth);
}

/* The struct or array at p for column c, into its slot c->len: its fields' or elements' own
 * columns are written as it is read. NULL: not certain (the record falls back). */
static const u8 *nested_value(Scan *S, Col *c, const u8 *p, const u8 *end, int depth) {
    /* Given twice in one object: the pure-Python path decides (the last value wins there, and
     * an array's earlier elements are already written here). */
    if (p >= end || c->state) return NULL;
    if (*p == 'n') {
        if (end - p < 4 || memcmp(p, "null", 4) != 0) return NULL;
        c->state = 1;
        return p + 4;
    }
    if (c->kind == K_STRUCT) { /* anything but an object (or null) is the pure-Python path's */
        if (*p != '{') return NULL;
        p = scan_object(S, c, p + 1, end, depth + 1);
        if (!p) return NULL;
        c->state = 2;
        return p;
    }
    if (*p != '[' || depth >= MAX_DEPTH) return NULL; /* likewise for arrays */
    Col *e = c->kids;
    p = skip_ws(p + 1, end);
    if (p < end && *p == ']') {
        c->state = 2;
        return p + 1;
    }
    for (;;) {
        e->state = 0;
        if (!reserve(S, e)) return NULL;
        p = typed_value(S, e, p, end, depth + 1);
        if (!p || !commit(S, e)) return NULL;
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == ']') {
            c->state = 2;
            return p + 1;
        }
        return NULL;
    }
}

/* The index of st's field named k, or -1. */
static int find_field(const Col *st, const u8 *k, Py_ssize_t len) {
    uint32_t h = hash_bytes(k, len) & (uint32_t)st->tmask;
    for (;;) {
        int i = st->table[h];
        if (!i) return -1;
        const Col *c = &st->kids[i - 1];
        if (c->name_len == len && memcmp(c->name, k, (size_t)len) == 0) return i - 1;
        h = (h + 1) & (uint32_t)st->tmask;
    }
}

/* The members of an object at p (just after its "{") into the fields of struct st (the record,
 * or a struct field's slot), the others skipped; members' values are at `depth`. Returns the
 * position after the "}", or NULL (not certain). */
static const u8 *scan_object(Scan *S, Col *st, const u8 *p, const u8 *end, int depth) {
    Col *const kids = st->kids;
    const int nkids = st->nkids;
    int expect = 0; /* the field expected next (objects usually repeat their key order) */
    for (int i = 0; i < nkids; i++) kids[i].state = 0;
    p = skip_ws(p, end);
    if (p < end && *p == '}') return p + 1;
    for (;;) {
        if (p >= end || *p != '"') return NULL;
        const u8 *k = ++p;
        Col *c = NULL;
        if (expect < nkids) { /* the usual case: the key the last object had here */
            Col *e = &kids[expect];
            uint64_t w = 0;
            if (e->mask8 && end - k >= 8) memcpy(&w, k, 8);
            if (e->mask8 && end - k >= 8 ? (w & e->mask8) == e->key8
                                         : (e->plain && end - k > e->name_len && k[e->name_len] == '"' &&
                                            memcmp(k, e->name, (size_t)e->name_len) == 0)) {
                c = e;
                expect++;
                p = k + e->name_len;
                goto key_done;
            }
        }
        for (;;) {
            p = plain_run(p, end);
            if (p >= end || *p < 0x80) break;
            int n = utf8_seq(p, end);
            if (!n) return NULL;
            p += n;
        }
        if (p >= end || *p != '"') return NULL; /* escapes in keys: Python's */
        int f = find_field(st, k, p - k);
        if (f >= 0) {
            c = &kids[f];
            expect = f + 1;
        }
    key_done:
        p = skip_ws(p + 1, end);
        if (p >= end || *p != ':') return NULL;
        p = skip_ws(p + 1, end);
        p = c ? typed_value(S, c, p, end, depth) : skip_value(S, p, end, depth);
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

/* A record that falls back leaves no trace: columns inside arrays (whose slots are closed as
 * their elements are read) go back to their lengths at its start, strings to their last offset. */
static void rollback(Col *st) {
    for (int i = 0; i < st->nkids; i++) {
        Col *c = &st->kids[i];
        if (c->in_list) c->len = c->mark_len;
        if (c->kind == K_STRING) c->slen = (size_t)c->offs[c->len];
        if (c->nkids) rollback(c);
    }
}

/* One record; writes row S->row on ROW_OK. */
static int scan_record(Scan *S, const u8 *p, const u8 *end) {
    Col *root = &S->root;
    p = skip_ws(p, end);
    if (p == end) return ROW_NONE;
    if (*p != '{') return ROW_FALLBACK;
    p = scan_object(S, root, p + 1, end, 0);
    /* Content after the value is ignored, but the record must be UTF-8 (Python decodes it). */
    if (!p || !utf8_valid(p, end)) goto fallback;
    Col *const kids = root->kids;
    for (int i = 0, n = root->nkids; i < n; i++) {
        if (!commit(S, &kids[i])) goto fallback;
    }
    for (Py_ssize_t i = 0; i < S->nmarked; i++) {
        Col *c = S->marked[i];
        c->mark_len = c->len;
    }
    return ROW_OK;
fallback:
    rollback(root);
    return ROW_FALLBACK;
}

/* -- module ------------------------------------------------------------------------------- */

/* In place: byte i (0 or 1) -> bit i. Returns how many bytes were 0. */
static Py_ssize_t pack_bits(u8 *bytes, Py_ssize_t n) {
    Py_ssize_t full = n / 8, ones = 0;
    for (Py_ssize_t j = 0; j < full; j++) {
        const u8 *b = bytes + j * 8;
        ones += b[0] + b[1] + b[2] + b[3] + b[4] + b[5] + b[6] + b[7];
        bytes[j] = (u8)(b[0] | b[1] << 1 | b[2] << 2 | b[3] << 3 | b[4] << 4 | b[5] << 5 | b[6] << 6 | b[7] << 7);
    }
    if (n % 8) {
        u8 v = 0;
        for (Py_ssize_t i = full * 8; i < n; i++) {
            ones += bytes[i];
            v |= (u8)(bytes[i] << (i - full * 8));
        }
        bytes[full] = v;
    }
    return n - ones;
}

static void free_col(Col *c) {
    free(c->valid);
    free(c->fixed);
    free(c->offs);
    free(c->sdata);
    for (int i = 0; i < c->nkids; i++) free_col(&c->kids[i]);
    free(c->kids);
    free(c->table);
}

static int build_kids(Scan *S, Col *c, PyObject *items, size_t rows, size_t scap, int depth);

/* Column c from a plan item: (name: bytes, kind), or (name, kind, [items]) for a struct (its
 * fields) and a list (one item, its element; the name unused). 0 with an exception set. */
static int build_col(Scan *S, Col *c, PyObject *item, size_t rows, size_t scap, int depth, int in_list) {
    const char *name;
    Py_ssize_t name_len;
    int kind;
    PyObject *kids = NULL;
    if (!PyTuple_Check(item)) {
        PyErr_SetString(PyExc_TypeError, "plan items must be tuples");
        return 0;
    }
    if (!PyArg_ParseTuple(item, "y#i|O!", &name, &name_len, &kind, &PyList_Type, &kids)) return 0;
    Py_ssize_t nk = kids ? PyList_Size(kids) : 0;
    if (kind < 0 || kind >= K_COUNT || (kind >= K_STRUCT) != (kids != NULL) || depth > MAX_PLAN_DEPTH || nk > 100000 ||
        (kind == K_STRUCT && nk < 1) || (kind == K_LIST && nk != 1)) {
        PyErr_SetString(PyExc_ValueError, "bad plan");
        return 0;
    }
    c->name = (const u8 *)name; /* the plan keeps the bytes alive */
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
    c->in_list = in_list;
    c->cap = (Py_ssize_t)rows;
    int ok = (c->valid = (u8 *)malloc(rows)) != NULL;
    if (WIDTH[kind]) ok &= (c->fixed = (u8 *)malloc(rows * (size_t)WIDTH[kind])) != NULL;
    if (kind == K_STRING || kind == K_LIST) {
        ok &= (c->offs = (int32_t *)malloc((rows + 1) * sizeof(int32_t))) != NULL;
        if (c->offs) c->offs[0] = 0;
    }
    if (kind == K_STRING) {
        c->scap = scap;
        ok &= (c->sdata = (u8 *)malloc(scap)) != NULL;
    }
    if (in_list) {
        Col **m = (Col **)realloc(S->marked, (size_t)(S->nmarked + 1) * sizeof(Col *));
        if (m) m[S->nmarked++] = c;
        ok &= m != NULL;
        if (m) S->marked = m;
    }
    if (!ok) {
        PyErr_NoMemory();
        return 0;
    }
    return kids ? build_kids(S, c, kids, rows, scap, depth + 1) : 1;
}

/* The kids of struct or list c (the record: the plan's top-level fields). */
static int build_kids(Scan *S, Col *c, PyObject *items, size_t rows, size_t scap, int depth) {
    Py_ssize_t n = PyList_Size(items);
    c->kids = (Col *)calloc((size_t)n, sizeof(Col));
    if (!c->kids) {
        PyErr_NoMemory();
        return 0;
    }
    c->nkids = (int)n;
    if (c->kind == K_STRUCT) {
        int tsize = 8;
        while (tsize < n * 2) tsize *= 2;
        c->table = (int *)calloc((size_t)tsize, sizeof(int));
        if (!c->table) {
            PyErr_NoMemory();
            return 0;
        }
        c->tmask = tsize - 1;
    }
    int in_list = c->in_list || c->kind == K_LIST;
    for (Py_ssize_t i = 0; i < n; i++) {
        Col *k = &c->kids[i];
        if (!build_col(S, k, PyList_GetItem(items, i), rows, scap, depth, in_list)) return 0;
        if (c->kind == K_STRUCT) {
            uint32_t h = hash_bytes(k->name, k->name_len) & (uint32_t)c->tmask;
            while (c->table[h]) h = (h + 1) & (uint32_t)c->tmask;
            c->table[h] = (int)i + 1;
        }
    }
    return 1;
}

/* (length, validity bitmap, data or None, offsets or None, null count, kids' tuples or None) */
static PyObject *col_result(Col *c) {
    Py_ssize_t n = c->len;
    PyObject *valid, *dat, *offs, *kids;
    Py_ssize_t nulls = pack_bits(c->valid, n);
    valid = PyBytes_FromStringAndSize((const char *)c->valid, (n + 7) / 8);
    if (c->kind == K_STRING) {
        dat = PyBytes_FromStringAndSize((const char *)c->sdata, (Py_ssize_t)c->offs[n]);
    } else if (WIDTH[c->kind]) {
        if (c->kind == K_BOOL) pack_bits(c->fixed, n);
        Py_ssize_t sz = c->kind == K_BOOL ? (n + 7) / 8 : n * WIDTH[c->kind];
        dat = PyBytes_FromStringAndSize((const char *)c->fixed, sz);
    } else {
        dat = Py_NewRef(Py_None);
    }
    offs = c->offs ? PyBytes_FromStringAndSize((const char *)c->offs, (n + 1) * 4) : Py_NewRef(Py_None);
    if (c->nkids) {
        kids = PyList_New(c->nkids);
        for (int i = 0; kids && i < c->nkids; i++) {
            PyObject *k = col_result(&c->kids[i]);
            if (!k) Py_CLEAR(kids);
            else PyList_SetItem(kids, i, k);
        }
    } else {
        kids = Py_NewRef(Py_None);
    }
    if (!valid || !dat || !offs || !kids) {
        Py_XDECREF(valid);
        Py_XDECREF(dat);
        Py_XDECREF(offs);
        Py_XDECREF(kids);
        return NULL;
    }
    return Py_BuildValue("(nNNNnN)", n, valid, dat, offs, nulls, kids);
}

const char gz_scan_doc[] = PyDoc_STR(
             "scan(plan, validity, offsets, data, offset, n, large) -> (status, rows, columns)\n\n"
             "plan: a list of (name: bytes, kind: int), or (name, kind, [plan items]) for a struct\n"
             "(its fields) or a list (its element). validity may be None. status: bytes, one a\n"
             "record (0 row, 1 no row, 2 fall back); columns: per field (length, validity bitmap,\n"
             "data or None, offsets or None, null count, the kids' columns or None).");

PyObject *gz_scan(PyObject *self, PyObject *args) {
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
    Py_ssize_t ncols = PyList_Size(plan);
    if (ncols < 1 || ncols > 100000 || n < 0 || offset < 0) {
        PyErr_SetString(PyExc_ValueError, "bad plan or sizes");
        return NULL;
    }
    Py_buffer vb = {0}, ob = {0}, db = {0};
    int have_v = 0, have_d = 0;
    PyObject *result = NULL, *status = NULL, *columns = NULL;
    Scan S = {0};
    Col *root = &S.root;
    root->kind = K_STRUCT;
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
    /* offset + n + 1 offsets of 8 bytes, counted without overflow (offset, n >= 0). */
    if (offset > PY_SSIZE_T_MAX / 8 - 1 - n) {
        PyErr_SetString(PyExc_OverflowError, "array offset and length out of range");
        goto done;
    }
    if (ob.len / osize < offset + n + 1 || (have_v && vb.len < (offset + n + 7) / 8)) {
        PyErr_SetString(PyExc_ValueError, "buffers too small");
        goto done;
    }
    Py_ssize_t total = 0; /* a size hint only: the rows' offsets are checked one by one below */
    if (n) {
        int64_t first = large ? ((const int64_t *)ob.buf)[offset] : ((const int32_t *)ob.buf)[offset];
        int64_t last = large ? ((const int64_t *)ob.buf)[offset + n] : ((const int32_t *)ob.buf)[offset + n];
        if (first >= 0 && last >= first && last <= (have_d ? db.len : 0)) total = (Py_ssize_t)(last - first);
    }
    /* One slot a record for every column (columns inside arrays grow); string data sized as
     * if the record's bytes were shared by the top-level fields (it grows too). */
    if (!build_kids(&S, root, plan, (size_t)n + 8, (size_t)(total / ncols) + 64, 0)) goto done;
    status = PyBytes_FromStringAndSize(NULL, n);
    if (!status) goto done;
    u8 *st = (u8 *)PyBytes_AsString(status);
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
            else PyErr_SetString(PyExc_OverflowError, "a column over 2 GiB of strings or 2^31 array elements");
            goto done;
        }
        st[i] = (u8)r;
        if (r == ROW_OK) S.row++;
    }
    columns = PyList_New(ncols);
    if (!columns) goto done;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        PyObject *t = col_result(&root->kids[i]);
        if (!t) goto done;
        PyList_SetItem(columns, i, t);
    }
    result = Py_BuildValue("(OnO)", status, S.row, columns);
done:
    Py_XDECREF(status);
    Py_XDECREF(columns);
    free_col(root);
    free(S.marked);
    PyBuffer_Release(&ob);
    if (have_v) PyBuffer_Release(&vb);
    if (have_d) PyBuffer_Release(&db);
    return result;
}
