/* A small test harness: CHECK records failures and keeps going; each test
 * program ends with "N passed, N failed" and exits non-zero on failure. */
#ifndef SG_TESTLIB_H
#define SG_TESTLIB_H

#include <stdio.h>

extern int sg_test_passed, sg_test_failed;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (cond) {                                                              \
            sg_test_passed++;                                                    \
        } else {                                                                 \
            sg_test_failed++;                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                        \
    } while (0)

#define CHECK_MSG(cond, ...)                                                     \
    do {                                                                         \
        if (cond) {                                                              \
            sg_test_passed++;                                                    \
        } else {                                                                 \
            sg_test_failed++;                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
        }                                                                        \
    } while (0)

/* Prints the summary line and returns the exit code. */
int sg_test_finish(const char *name);

/* $SEGRT_MODELS/file: a file of the test models, which
 * tests/models/make_models.py generates (ctest's models.generate does, into
 * the build's test-models/ folder, and sets SEGRT_MODELS). Exits with a
 * message saying so when SEGRT_MODELS is not set. The string is static. */
const char *sg_test_model(const char *file);

#endif
