/* Whole-file reads and mappings, and output files (see file.h). */
#include "core/file.h"

#include "core/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *not_regular(mode_t mode);

sg_status sg_open_input(const char *path, int *fd)
{
    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer. */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (f < 0)
        return sg_error(SEGRT_ERROR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    const char *what = fstat(f, &st) != 0 ? "one that cannot be examined" : not_regular(st.st_mode);
    if (what) {
        close(f);
        return sg_error(SEGRT_ERROR_IO, "%s: not a regular file (%s)", path, what);
    }
    int flags = fcntl(f, F_GETFL);
    if (flags < 0 || fcntl(f, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int err = errno;
        close(f);
        return sg_error(SEGRT_ERROR_IO, "%s: cannot open: %s", path, strerror(err));
    }
    *fd = f;
    return SEGRT_OK;
}

/* path opened by sg_open_input, its size checked against max_bytes. */
static sg_status open_sized(const char *path, uint64_t max_bytes, const char *limit, int *fd, size_t *size)
{
    SG_TRY(sg_open_input(path, fd));
    struct stat st;
    if (fstat(*fd, &st) != 0) {
        int err = errno;
        close(*fd);
        return sg_error(SEGRT_ERROR_IO, "%s: cannot read: %s", path, strerror(err));
    }
    if ((uint64_t)st.st_size > max_bytes) {
        close(*fd);
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: %lld bytes, more than %s", path, (long long)st.st_size,
                        limit);
    }
    *size = (size_t)st.st_size;
    return SEGRT_OK;
}

sg_status sg_read_file(const char *path, uint64_t max_bytes, const char *limit, uint8_t **out, size_t *size)
{
    int fd;
    size_t n;
    SG_TRY(open_sized(path, max_bytes, limit, &fd, &n));
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return sg_error(SEGRT_ERROR_IO, "%s: cannot read: %s", path, strerror(errno));
    }
    uint8_t *buf = sg_malloc(n ? n : 1);
    if (!buf) {
        fclose(f);
        return sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", path);
    }
    size_t got = fread(buf, 1, n, f);
    fclose(f);
    if (got != n) {
        free(buf);
        return sg_error(SEGRT_ERROR_IO, "%s: read %zu of %zu bytes", path, got, n);
    }
    *out = buf;
    *size = n;
    return SEGRT_OK;
}

sg_status sg_map_file(const char *path, uint64_t max_bytes, const char *limit, sg_mapped_file *out)
{
    memset(out, 0, sizeof *out);
    int fd;
    size_t n;
    SG_TRY(open_sized(path, max_bytes, limit, &fd, &n));
    if (n == 0) { /* mmap refuses a length of 0 */
        close(fd);
        out->data = (const uint8_t *)"";
        return SEGRT_OK;
    }
    void *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd); /* the mapping keeps the file */
    if (p == MAP_FAILED)
        return sg_error(SEGRT_ERROR_IO, "%s: cannot map: %s", path, strerror(err));
    out->data = p;
    out->size = n;
    return SEGRT_OK;
}

void sg_unmap_file(sg_mapped_file *m)
{
    if (m && m->size)
        munmap((void *)(uintptr_t)m->data, m->size);
    if (m)
        memset(m, 0, sizeof *m);
}

void sg_map_will_read(const sg_mapped_file *m)
{
    if (m && m->size)
        madvise((void *)(uintptr_t)m->data, m->size, MADV_SEQUENTIAL | MADV_WILLNEED);
}

/* Output files (file.h) ---------------------------------------------------------- */

/* The outputs open in this process, for sg_output_abandon_all, which runs
 * in a signal handler and so may only read what is already in place:
 * fixed slots, each claimed and released with lock-free atomic operations
 * on its state. A slot holds the folder's descriptor and the temporary
 * file's name, written while the slot is BUSY and read by the handler
 * only once it is LIVE. */
#define OUTPUT_SLOTS 256
enum { SLOT_FREE, SLOT_BUSY, SLOT_LIVE, SLOT_ABANDONED };
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "sg_output_abandon_all needs lock-free atomic ints");

static struct output_slot {
    _Atomic int state;
    int dirfd;
    char name[NAME_MAX + 1];
} output_slots[OUTPUT_SLOTS];

struct sg_output {
    struct output_slot *slot;
    int dirfd, fd;
    FILE *stream;
    char *path; /* as given */
    const char *base; /* the last component of path */
};

/* path split at its last '/': the folder ("." when none) into dir, and
 * the file name. INVALID_ARGUMENT when there is no file name. */
static sg_status split_path(const char *path, char *dir, size_t cap, const char **base)
{
    if (!path || !*path)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "an empty output path");
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    if (!**base || strcmp(*base, ".") == 0 || strcmp(*base, "..") == 0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: names a folder, not a file", path);
    if (strlen(*base) > NAME_MAX)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the file name is longer than %d bytes", path, NAME_MAX);
    size_t n = slash ? (size_t)(slash - path) : 1;
    if (slash && n == 0)
        n = 1; /* "/name": the root */
    if (n >= cap)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the path is too long", path);
    memcpy(dir, slash ? path : ".", n);
    dir[n] = '\0';
    return SEGRT_OK;
}

/* What a name that exists is, for a message; NULL for a regular file. */
static const char *not_regular(mode_t mode)
{
    if (S_ISREG(mode))
        return NULL;
    if (S_ISLNK(mode))
        return "a symbolic link (give the file it points to)";
    if (S_ISDIR(mode))
        return "a folder";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode) || S_ISBLK(mode))
        return "a device";
    return "not a regular file";
}

/* The destination base in dirfd must be absent or a regular file. */
static sg_status check_destination(int dirfd, const char *base, const char *path)
{
    struct stat st;
    if (fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT)
            return SEGRT_OK;
        return sg_error(SEGRT_ERROR_IO, "%s: cannot examine the output: %s", path, strerror(errno));
    }
    const char *what = not_regular(st.st_mode);
    if (what)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: the output exists and is %s; segrt writes outputs only as regular files", path, what);
    return SEGRT_OK;
}

/* Opens path's folder (O_PATH would not do: faccessat and fsync need a real
 * descriptor) and checks the folder and the destination. */
static sg_status open_folder(const char *path, int *dirfd, const char **base)
{
    char dir[PATH_MAX];
    SG_TRY(split_path(path, dir, sizeof dir, base));
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        if (err == ENOENT)
            return sg_error(SEGRT_ERROR_IO, "%s: the folder %s does not exist", path, dir);
        if (err == ENOTDIR)
            return sg_error(SEGRT_ERROR_IO, "%s: %s is not a folder", path, dir);
        return sg_error(SEGRT_ERROR_IO, "%s: cannot open the folder %s: %s", path, dir, strerror(err));
    }
    sg_status s = check_destination(fd, *base, path);
    if (s == SEGRT_OK && faccessat(fd, ".", W_OK | X_OK, AT_EACCESS) != 0)
        s = sg_error(SEGRT_ERROR_IO, "%s: cannot write in the folder %s: %s", path, dir,
                     strerror(errno));
    if (s != SEGRT_OK) {
        close(fd);
        return s;
    }
    *dirfd = fd;
    return SEGRT_OK;
}

sg_status sg_output_check(const char *path)
{
    int dirfd;
    const char *base;
    SG_TRY(open_folder(path, &dirfd, &base));
    close(dirfd);
    return SEGRT_OK;
}

static struct output_slot *claim_slot(void)
{
    for (int i = 0; i < OUTPUT_SLOTS; i++) {
        int free_state = SLOT_FREE;
        if (atomic_compare_exchange_strong(&output_slots[i].state, &free_state, SLOT_BUSY))
            return &output_slots[i];
    }
    return NULL;
}

/* 64 unpredictable bits for a temporary name. getrandom only fails where
 * the kernel lacks it; O_EXCL keeps the name safe even then. */
static uint64_t random_bits(void)
{
    uint64_t v;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v)
        return v;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    static _Atomic uint64_t fallback;
    return ((uint64_t)t.tv_nsec << 20) ^ (uint64_t)t.tv_sec ^ ((uint64_t)getpid() << 40) ^
           atomic_fetch_add(&fallback, 0x9e3779b97f4a7c15ull);
}

sg_status sg_output_open(const char *path, sg_output **out)
{
    *out = NULL;
    int dirfd;
    const char *base;
    SG_TRY(open_folder(path, &dirfd, &base));
    sg_output *o = sg_calloc(1, sizeof *o);
    char *copy = o ? sg_malloc(strlen(path) + 1) : NULL;
    struct output_slot *slot = copy ? claim_slot() : NULL;
    if (!slot) {
        close(dirfd);
        free(copy);
        free(o);
        return copy ? sg_error(SEGRT_ERROR_IO, "%s: more than %d outputs open at once", path,
                               OUTPUT_SLOTS)
                    : sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", path);
    }
    strcpy(copy, path);
    o->path = copy;
    o->base = copy + (base - path);
    o->dirfd = dirfd;
    o->slot = slot;
    slot->dirfd = dirfd;
    /* ".NAME.segrt-<16 hex>", the name cut to fit NAME_MAX. */
    int keep = (int)strlen(base), room = NAME_MAX - (1 + 7 + 16);
    keep = keep < room ? keep : room;
    int fd = -1, err = EEXIST;
    for (int attempt = 0; attempt < 16 && fd < 0 && err == EEXIST; attempt++) {
        snprintf(slot->name, sizeof slot->name, ".%.*s.segrt-%016llx", keep, base,
                 (unsigned long long)random_bits());
        /* LIVE before the file exists: a signal in between then removes a
         * name that is not there yet, which is harmless, rather than miss
         * a file that is. */
        atomic_store(&slot->state, SLOT_LIVE);
        /* Read as well: libtiff reads back what it wrote to link pages. */
        fd = openat(dirfd, slot->name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        err = fd < 0 ? errno : 0;
        if (fd < 0)
            atomic_store(&slot->state, SLOT_BUSY);
    }
    if (fd < 0) {
        sg_status s = sg_error(SEGRT_ERROR_IO, "%s: cannot create a temporary file beside it: %s", path,
                               strerror(err));
        atomic_store(&slot->state, SLOT_FREE);
        close(dirfd);
        free(copy);
        free(o);
        return s;
    }
    o->fd = fd;
    *out = o;
    return SEGRT_OK;
}

int sg_output_fd(sg_output *o) { return o->fd; }

FILE *sg_output_stream(sg_output *o)
{
    if (!o->stream)
        o->stream = fdopen(o->fd, "wb");
    return o->stream;
}

const char *sg_output_path(const sg_output *o) { return o->path; }

/* Takes the slot back from LIVE; false when sg_output_abandon_all took it
 * first (the file is gone then). */
static bool take_slot(sg_output *o)
{
    int live = SLOT_LIVE;
    return atomic_compare_exchange_strong(&o->slot->state, &live, SLOT_BUSY);
}

static void release(sg_output *o)
{
    if (o->stream)
        fclose(o->stream);
    else if (o->fd >= 0)
        close(o->fd);
    atomic_store(&o->slot->state, SLOT_FREE);
    close(o->dirfd);
    free(o->path);
    free(o);
}

sg_status sg_output_commit(sg_output *o)
{
    if (!take_slot(o)) {
        sg_status s = sg_error(SEGRT_ERROR_IO, "%s: the run was interrupted; nothing written", o->path);
        release(o);
        return s;
    }
    int err = 0;
    if (o->stream && (fflush(o->stream) != 0 || ferror(o->stream)))
        err = errno ? errno : EIO;
    if (!err && fsync(o->fd) != 0)
        err = errno;
    int closed = o->stream ? fclose(o->stream) : close(o->fd);
    o->stream = NULL;
    o->fd = -1;
    if (!err && closed != 0)
        err = errno;
    sg_status s = SEGRT_OK;
    if (err)
        s = sg_error(SEGRT_ERROR_IO, "%s: write failed: %s", o->path, strerror(err));
    /* Checked again: the destination may have changed kind during the run. */
    if (s == SEGRT_OK)
        s = check_destination(o->dirfd, o->base, o->path);
    if (s == SEGRT_OK && renameat(o->dirfd, o->slot->name, o->dirfd, o->base) != 0)
        s = sg_error(SEGRT_ERROR_IO, "%s: cannot rename the finished file into place: %s", o->path, strerror(errno));
    if (s != SEGRT_OK)
        unlinkat(o->dirfd, o->slot->name, 0);
    else if (fsync(o->dirfd) != 0 && errno != EINVAL && errno != EROFS)
        s = sg_error(SEGRT_ERROR_IO, "%s: cannot sync its folder: %s", o->path, strerror(errno));
    release(o);
    return s;
}

void sg_output_discard(sg_output *o)
{
    if (!o)
        return;
    if (take_slot(o))
        unlinkat(o->dirfd, o->slot->name, 0);
    release(o);
}

void sg_output_abandon_all(void)
{
    int saved = errno;
    for (int i = 0; i < OUTPUT_SLOTS; i++) {
        struct output_slot *slot = &output_slots[i];
        int live = SLOT_LIVE;
        if (atomic_compare_exchange_strong(&slot->state, &live, SLOT_BUSY)) {
            unlinkat(slot->dirfd, slot->name, 0);
            atomic_store(&slot->state, SLOT_ABANDONED);
        }
    }
    errno = saved;
}

sg_status sg_file_identity(const char *path, sg_file_id *id)
{
    memset(id, 0, sizeof *id);
    struct stat st;
    if (stat(path, &st) == 0) {
        id->exists = true;
        id->dev = (uint64_t)st.st_dev;
        id->ino = (uint64_t)st.st_ino;
        return SEGRT_OK;
    }
    char dir[PATH_MAX];
    const char *base;
    SG_TRY(split_path(path, dir, sizeof dir, &base));
    if (stat(dir, &st) != 0)
        return sg_error(SEGRT_ERROR_IO, "%s: the folder %s does not exist", path, dir);
    id->dev = (uint64_t)st.st_dev;
    id->ino = (uint64_t)st.st_ino;
    snprintf(id->name, sizeof id->name, "%s", base);
    return SEGRT_OK;
}

bool sg_file_id_equal(const sg_file_id *a, const sg_file_id *b)
{
    return a->exists == b->exists && a->dev == b->dev && a->ino == b->ino &&
           (a->exists || strcmp(a->name, b->name) == 0);
}

void segrt_abandon_outputs(void) { sg_output_abandon_all(); }
