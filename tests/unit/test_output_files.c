/* Output files (core/file.h): written whole or not at all, never through a
 * planted link, never over a non-regular file; abandoned ones leave
 * nothing; identities by device and inode. */
#include "core/file.h"
#include "testlib.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static char dir[256];

static const char *in_dir(const char *name)
{
    static char buf[4][512];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, 512, "%s/%s", dir, name);
    return b;
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

static bool holds(const char *path, const char *text)
{
    char buf[256] = "";
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strcmp(buf, text) == 0;
}

/* Names in dir other than . and .., and how many start with prefix. */
static int count_entries(const char *prefix)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            n++;
    closedir(d);
    return n;
}

static sg_status write_text(const char *path, const char *text)
{
    sg_output *o;
    SG_TRY(sg_output_open(path, &o));
    fputs(text, sg_output_stream(o));
    return sg_output_commit(o);
}

static void test_commit_and_discard(void)
{
    const char *p = in_dir("a.npy");
    CHECK(write_text(p, "one") == SEGRT_OK && holds(p, "one"));
    CHECK(write_text(p, "two") == SEGRT_OK && holds(p, "two"));
    struct stat st;
    mode_t mask = umask(022);
    umask(mask);
    CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == (0644 & ~mask));
    sg_output *o;
    CHECK(sg_output_open(p, &o) == SEGRT_OK);
    fputs("three", sg_output_stream(o));
    CHECK(count_entries(".a.npy.segrt-") == 1);
    sg_output_discard(o);
    CHECK(holds(p, "two"));
    CHECK(count_entries(".a.npy.segrt-") == 0);
    sg_output_discard(NULL);
}

static void test_refused_destinations(void)
{
    /* A link at the destination is refused, whatever it points at; the
     * file it points at is untouched. */
    put(in_dir("target"), "keep");
    CHECK(symlink(in_dir("target"), in_dir("link.npy")) == 0);
    CHECK(sg_output_check(in_dir("link.npy")) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(sg_last_error(), "symbolic link") != NULL);
    CHECK(write_text(in_dir("link.npy"), "evil") == SEGRT_ERROR_INVALID_ARGUMENT && holds(in_dir("target"), "keep"));
    CHECK(symlink(in_dir("nowhere"), in_dir("dangling.npy")) == 0);
    CHECK(write_text(in_dir("dangling.npy"), "evil") == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(access(in_dir("nowhere"), F_OK) != 0);
    CHECK(mkfifo(in_dir("fifo.npy"), 0644) == 0);
    CHECK(write_text(in_dir("fifo.npy"), "x") == SEGRT_ERROR_INVALID_ARGUMENT && strstr(sg_last_error(), "FIFO"));
    CHECK(mkdir(in_dir("sub.npy"), 0755) == 0);
    CHECK(write_text(in_dir("sub.npy"), "x") == SEGRT_ERROR_INVALID_ARGUMENT && strstr(sg_last_error(), "folder"));
    CHECK(write_text("/dev/null", "x") == SEGRT_ERROR_INVALID_ARGUMENT && strstr(sg_last_error(), "device"));
    int sock = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", in_dir("sock.npy"));
    CHECK(bind(sock, (struct sockaddr *)&addr, sizeof addr) == 0);
    CHECK(write_text(in_dir("sock.npy"), "x") == SEGRT_ERROR_INVALID_ARGUMENT && strstr(sg_last_error(), "socket"));
    close(sock);
    CHECK(write_text(in_dir("missing/x.npy"), "x") == SEGRT_ERROR_IO && strstr(sg_last_error(), "does not exist"));
    CHECK(write_text(in_dir("target/x.npy"), "x") == SEGRT_ERROR_IO && strstr(sg_last_error(), "not a folder"));
    CHECK(write_text(in_dir("sub.npy/"), "x") == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(write_text("", "x") == SEGRT_ERROR_INVALID_ARGUMENT);
}

/* The destination turning into a FIFO during the run is refused at
 * commit, and the FIFO stays. */
static void test_destination_changes_kind(void)
{
    const char *p = in_dir("late.npy");
    sg_output *o;
    CHECK(sg_output_open(p, &o) == SEGRT_OK);
    fputs("data", sg_output_stream(o));
    CHECK(mkfifo(p, 0644) == 0);
    CHECK(sg_output_commit(o) == SEGRT_ERROR_INVALID_ARGUMENT);
    struct stat st;
    CHECK(lstat(p, &st) == 0 && S_ISFIFO(st.st_mode));
    CHECK(count_entries(".late.npy.segrt-") == 0);
}

static void test_abandon(void)
{
    put(in_dir("b.npy"), "before");
    sg_output *o1, *o2;
    CHECK(sg_output_open(in_dir("b.npy"), &o1) == SEGRT_OK);
    CHECK(sg_output_open(in_dir("c.npy"), &o2) == SEGRT_OK);
    fputs("partial", sg_output_stream(o1));
    CHECK(count_entries(".b.npy.segrt-") == 1 && count_entries(".c.npy.segrt-") == 1);
    segrt_abandon_outputs();
    CHECK(count_entries(".b.npy.segrt-") == 0 && count_entries(".c.npy.segrt-") == 0);
    CHECK(sg_output_commit(o1) == SEGRT_ERROR_IO && strstr(sg_last_error(), "interrupted"));
    sg_output_discard(o2);
    CHECK(holds(in_dir("b.npy"), "before"));
    CHECK(access(in_dir("c.npy"), F_OK) != 0);
    /* The slots are free again. */
    CHECK(write_text(in_dir("b.npy"), "after") == SEGRT_OK && holds(in_dir("b.npy"), "after"));
}

/* Outputs of one name opened by many threads get names of their own; the
 * destination ends as one whole write. */
static void *writer(void *arg)
{
    char text[32];
    snprintf(text, sizeof text, "writer %d", (int)(intptr_t)arg);
    return (void *)(intptr_t)(write_text(in_dir("race.npy"), text) == SEGRT_OK);
}

static void test_threads(void)
{
    pthread_t t[16];
    for (int i = 0; i < 16; i++)
        pthread_create(&t[i], NULL, writer, (void *)(intptr_t)i);
    int ok = 0;
    for (int i = 0; i < 16; i++) {
        void *r;
        pthread_join(t[i], &r);
        ok += (int)(intptr_t)r;
    }
    CHECK(ok == 16);
    char buf[64] = "";
    FILE *f = fopen(in_dir("race.npy"), "rb");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    CHECK(strncmp(buf, "writer ", 7) == 0 && strlen(buf) <= 9);
    CHECK(count_entries(".race.npy.segrt-") == 0);
}

static void test_identity(void)
{
    put(in_dir("x"), "x");
    CHECK(link(in_dir("x"), in_dir("y")) == 0);
    sg_file_id a, b, c, d;
    CHECK(sg_file_identity(in_dir("x"), &a) == SEGRT_OK && sg_file_identity(in_dir("y"), &b) == SEGRT_OK);
    CHECK(a.exists && sg_file_id_equal(&a, &b));
    CHECK(sg_file_identity(in_dir("new.npy"), &c) == SEGRT_OK && !c.exists);
    char other[600];
    snprintf(other, sizeof other, "%s/./sub.npy/../new.npy", dir);
    CHECK(sg_file_identity(other, &d) == SEGRT_OK && sg_file_id_equal(&c, &d));
    CHECK(!sg_file_id_equal(&a, &c));
    CHECK(sg_file_identity(in_dir("missing/new.npy"), &d) == SEGRT_ERROR_IO);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/segrt-outputs-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    test_commit_and_discard();
    test_refused_destinations();
    test_destination_changes_kind();
    test_abandon();
    test_threads();
    test_identity();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        return 1;
    return sg_test_finish("test_output_files");
}
