/*
 * What the sources of pyspark_gazette._jsonscan share: the kinds of the scanner's plan (K_*) and
 * of the joiner's parts (P_*), which module.c exports to Python (native.py keeps the same numbers
 * as its fallback, and a unit test holds them equal), and a few helpers.
 *
 * Only plain C99 and CPython's limited API of 3.11 are used (setup.py defines Py_LIMITED_API
 * 0x030B0000 on CPython 3.11+: one abi3 build serves CPython 3.11 and later; the buffer protocol
 * joined the limited API in 3.11); unsigned __int128 only where the compiler has it (join.c has a
 * 64-bit path for the others).
 */
#ifndef GZ_JSONSCAN_COMMON_H
#define GZ_JSONSCAN_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>


/* Field kinds of scan()'s plan (scan.c); exported as SCAN_KINDS. */
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
    K_STRUCT = 11,   /* struct: its fields are the column's kids */
    K_LIST = 12,     /* list (int32 offsets): kids[0] is the element column */
    K_COUNT = 13
};

/* Part kinds of join() (join.c); exported as PART_KINDS. encode.py's _joined builds them. */
enum {
    P_TEXT = 0,   /* a constant: the same bytes every row */
    P_RAW = 1,    /* a string column of JSON text, copied as it is */
    P_STRING = 2, /* a string column, written as a JSON string (quoted, escaped as json.dumps) */
    P_INT = 3,    /* signed integers of width 1, 2, 4 or 8 */
    P_BOOL = 4,   /* booleans (a bitmap) */
    P_MICROS = 5, /* timestamp[us] as "YYYY-MM-DDTHH:MM:SS.ffffff" (+ "Z" with a zone), quoted */
    P_DATE = 6,   /* date32 as "YYYY-MM-DD", quoted */
    P_DOUBLE = 7, /* float64 as Arrow's cast to string writes it (see write_double) */
    P_DECIMAL = 8 /* decimal128 of a scale as Arrow's cast to string writes it (see write_decimal) */
};

typedef unsigned char u8;

/* The per-value functions, inlined into the object loop (as one function they were ~20% faster
 * than as calls, measured on bench_read's click events). */
#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

/* unsigned __int128 where the compiler has it; GZ_NO_INT128 forces the portable 64-bit path
 * (make native-strict builds and tests both). */
#if defined(__SIZEOF_INT128__) && !defined(GZ_NO_INT128)
#define GZ_HAVE_INT128 1
#else
#define GZ_HAVE_INT128 0
#endif

/* Functions the module's other sources call: not exported from the shared library. */
#if defined(__GNUC__)
#define GZ_INTERNAL __attribute__((visibility("hidden")))
#else
#define GZ_INTERNAL
#endif

/* Exact powers of ten as doubles (10^22 is the last one a double holds exactly); a static
 * table in each source that uses it, so the compiler sees its values. */
static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

GZ_INTERNAL PyObject *gz_scan(PyObject *self, PyObject *args);
GZ_INTERNAL extern const char gz_scan_doc[];
GZ_INTERNAL PyObject *gz_join(PyObject *self, PyObject *args);
GZ_INTERNAL extern const char gz_join_doc[];

#endif
