/*
 * module.c: pyspark_gazette._jsonscan, one extension module built from several sources (setup.py):
 *
 *   scan.c    the read side: scan(), the JSON scanner of typed reads (spark/read/typed.py)
 *   join.c    the write side: join(), the joiner of JSON rows (spark/write/encode.py)
 *   common.h  what they share: the kinds (K_*, P_*) and a few helpers
 *
 * The kinds are exported as SCAN_KINDS and PART_KINDS (dicts of name -> number): native.py uses
 * them, and keeps the same numbers as its fallback where the extension is not built.
 */
#include "common.h"

static PyMethodDef methods[] = {{"scan", gz_scan, METH_VARARGS, gz_scan_doc},
                                {"join", gz_join, METH_VARARGS, gz_join_doc},
                                {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jsonscan",
                                    "A JSON scanner for typed reads (see typed.py), and the joiner of JSON rows for writes (encode.py).",
                                    -1, methods, NULL, NULL, NULL, NULL};

typedef struct {
    const char *name;
    int kind;
} Named;

static const Named SCAN_KINDS[] = {{"string", K_STRING}, {"long", K_LONG},     {"int", K_INT},
                                   {"short", K_SHORT},   {"byte", K_BYTE},     {"double", K_DOUBLE},
                                   {"float", K_FLOAT},   {"bool", K_BOOL},     {"timestamp", K_TIMESTAMP},
                                   {"ntz", K_NTZ},       {"date", K_DATE},     {"struct", K_STRUCT},
                                   {"list", K_LIST},     {NULL, 0}};

static const Named PART_KINDS[] = {{"text", P_TEXT},     {"raw", P_RAW},       {"string", P_STRING},
                                   {"int", P_INT},       {"bool", P_BOOL},     {"micros", P_MICROS},
                                   {"date", P_DATE},     {"double", P_DOUBLE}, {"decimal", P_DECIMAL},
                                   {NULL, 0}};

/* m.attr = {name: kind, ...}; -1 on error (m keeps its reference either way). */
static int add_kinds(PyObject *m, const char *attr, const Named *kinds) {
    PyObject *d = PyDict_New();
    if (!d) return -1;
    for (const Named *k = kinds; k->name; k++) {
        PyObject *v = PyLong_FromLong(k->kind);
        if (!v || PyDict_SetItemString(d, k->name, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return -1;
        }
        Py_DECREF(v);
    }
    if (PyModule_AddObject(m, attr, d) < 0) {
        Py_DECREF(d);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__jsonscan(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (add_kinds(m, "SCAN_KINDS", SCAN_KINDS) < 0 || add_kinds(m, "PART_KINDS", PART_KINDS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
