/* sg_child_wait: see child.h. */
#include "core/child.h"
#include "core/clock.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* How often the child's state is read, seconds (at most). */
#define SAMPLE_S 0.25

/* The child's scheduler state and CPU time (user + system, in clock
 * ticks) from /proc/PID/stat; false where it cannot be read. */
static bool sample(pid_t pid, char *state, unsigned long long *ticks)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name, in parentheses, may hold anything: the fields
     * start after its last ')'. State is field 3, utime and stime 14, 15. */
    const char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", state, &ut, &st) != 3)
        return false;
    *ticks = ut + st;
    return true;
}

/* A descriptor that polls readable when pid ends (Linux 5.3 and later),
 * or -1: the wait then naps between looks. */
static int pid_fd(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    return -1;
#endif
}

int sg_child_wait(pid_t pid, double stuck_seconds, int *status, bool *stuck)
{
    *stuck = false;
    int fd = pid_fd(pid);
    int rc = 0;
    long nap_ns = 50000; /* without a pidfd: 50 us, doubling up to 10 ms */
    double interval = stuck_seconds / 4 < SAMPLE_S ? stuck_seconds / 4 : SAMPLE_S;
    double t = sg_now_seconds(), next = t + interval, since = t;
    unsigned long long last = 0;
    bool seen = false;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR) {
            rc = -1;
            break;
        }
        double left = next - sg_now_seconds();
        if (fd >= 0) {
            struct pollfd p = {fd, POLLIN, 0};
            poll(&p, 1, left > 0 ? (int)(left * 1000) + 1 : 0);
        } else if (left > 0) {
            struct timespec ts = {0, nap_ns};
            nanosleep(&ts, NULL);
            nap_ns = nap_ns < 10000000 ? 2 * nap_ns : nap_ns;
        }
        t = sg_now_seconds();
        if (t < next)
            continue;
        next = t + interval;
        char state = 0;
        unsigned long long ticks = 0;
        if (!sample(pid, &state, &ticks))
            continue;
        if (!seen || ticks != last || state != 'S') {
            seen = true;
            last = ticks;
            since = t;
        } else if (t - since >= stuck_seconds) {
            kill(pid, SIGKILL);
            while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
            }
            *stuck = true;
            break;
        }
    }
    if (fd >= 0)
        close(fd);
    return rc;
}
