#include "testlib.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int sg_test_passed, sg_test_failed;

int sg_test_finish(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, sg_test_passed, sg_test_failed);
    return sg_test_failed ? 1 : 0;
}

const char *sg_test_model(const char *file)
{
    static char buf[4096];
    const char *dir = getenv("SEGRT_MODELS");
    if (!dir || !dir[0]) {
        fprintf(stderr, "SEGRT_MODELS is not set: it names the folder of the test models, which "
                        "`python tests/models/make_models.py DIR` writes (ctest runs it as the test "
                        "models.generate, into the build's test-models/, and sets SEGRT_MODELS)\n");
        exit(1);
    }
    snprintf(buf, sizeof buf, "%s/%s", dir, file);
    return buf;
}

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif

#ifdef TEST_ASAN
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));
size_t __sanitizer_get_allocated_size(const volatile void *p);

/* Bytes allocated since the hooks went in and not freed, and their most.
 * Blocks from before are freed too, so live may dip below zero. */
static int64_t live_bytes, peak_bytes;

static void on_malloc(const volatile void *p, size_t size)
{
    (void)p;
    live_bytes += (int64_t)size;
    if (live_bytes > peak_bytes)
        peak_bytes = live_bytes;
}

static void on_free(const volatile void *p)
{
    live_bytes -= (int64_t)__sanitizer_get_allocated_size(p);
}
#endif

#ifndef TEST_ASAN
/* The child's address space now, from /proc/self/statm (in pages). */
static size_t address_space(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (f) {
        if (fscanf(f, "%lu", &pages) != 1)
            pages = 0;
        fclose(f);
    }
    return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}
#endif

int sg_test_small_memory(size_t budget, int (*fn)(void *arg, char *text, size_t cap), void *arg, char *text,
                         size_t cap)
{
    int fds[2];
    if (cap == 0 || pipe(fds) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close(fds[0]);
        char *out = calloc(1, cap);
        int rc = out ? 0 : 125;
#ifdef TEST_ASAN
        __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
#else
        struct rlimit lim;
        lim.rlim_cur = lim.rlim_max = address_space() + budget;
        if (setrlimit(RLIMIT_AS, &lim) != 0)
            rc = 125;
#endif
        if (rc == 0)
            rc = fn(arg, out, cap);
#ifdef TEST_ASAN
        if (peak_bytes > (int64_t)budget) {
            snprintf(out, cap, "held %lld bytes at once, over the budget of %zu", (long long)peak_bytes, budget);
            rc = SG_TEST_OVER_BUDGET;
        }
#endif
        if (out && write(fds[1], out, strlen(out)) < 0)
            rc = 125;
        _exit(rc);
    }
    close(fds[1]);
    size_t got = 0;
    for (ssize_t k; got + 1 < cap && (k = read(fds[0], text + got, cap - 1 - got)) > 0;)
        got += (size_t)k;
    text[got] = '\0';
    close(fds[0]);
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}
