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

/* Runs fn(arg, text, cap) in a forked child that may allocate at most
 * budget bytes more than it holds when it starts, and returns fn's result
 * (0 to 124), with what fn wrote to text (cap bytes) copied back into
 * text; -1 when the child crashed. The budget is RLIMIT_AS: a larger
 * allocation fails (and the code under test reports running out of
 * memory). Under AddressSanitizer, whose shadow memory RLIMIT_AS would
 * break, malloc and free hooks track the most the child held at once
 * instead, and more than the budget ends the run with SG_TEST_OVER_BUDGET,
 * text saying how much. Either way a reader that allocates a claimed
 * size before checking it cannot pass a test that expects its refusal. */
#define SG_TEST_OVER_BUDGET 126
int sg_test_small_memory(size_t budget, int (*fn)(void *arg, char *text, size_t cap), void *arg, char *text,
                         size_t cap);

#endif
