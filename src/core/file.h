/* Reading or mapping a whole file, with the checks every reader needs, and
 * writing one whole or not at all. */
#ifndef SG_CORE_FILE_H
#define SG_CORE_FILE_H

#include "core/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Opens path for reading when it is a regular file (links followed), as
 * a descriptor (the caller closes it). The open does not block: a FIFO or
 * a device is refused, never waited on. IO naming path: "cannot open:
 * REASON" or "not a regular file (a FIFO)". */
sg_status sg_open_input(const char *path, int *fd);

/* Reads the regular file at path into a new buffer (*out, freed by the
 * caller; never NULL on success, even for an empty file). A file over
 * max_bytes fails with INVALID_MODEL, "PATH: N bytes, more than LIMIT"
 * where limit says what the cap is. Other failures are IO errors naming
 * the file. */
sg_status sg_read_file(const char *path, uint64_t max_bytes, const char *limit, uint8_t **out, size_t *size);

/* A regular file mapped read-only, for readers that look at a header and
 * then at parts of the file: the kernel reads in only the pages touched,
 * and they are page cache, not the process's memory. data is never NULL
 * (an empty file maps to an empty string). The file must not shrink while
 * it is mapped: a read past its new end raises SIGBUS (libtiff maps its
 * files the same way). */
typedef struct sg_mapped_file {
    const uint8_t *data;
    size_t size;
} sg_mapped_file;

/* Maps path (opened as sg_open_input opens it); errors as sg_read_file's.
 * sg_unmap_file takes a zeroed or already unmapped file too. */
sg_status sg_map_file(const char *path, uint64_t max_bytes, const char *limit, sg_mapped_file *out);
void sg_unmap_file(sg_mapped_file *m);
/* Tells the kernel that the whole mapping will be read, in order: it
 * reads ahead and maps pages in larger runs (a parser's pass over a model). */
void sg_map_will_read(const sg_mapped_file *m);

/* Output files: written whole or not at all, and never redirected.
 *
 * sg_output_open creates a temporary file beside the destination, named
 * ".NAME.segrt-XXXXXXXXXXXXXXXX" (random; O_CREAT|O_EXCL|O_NOFOLLOW, mode
 * 0644 less the umask), through a descriptor of the destination's folder
 * that every later step uses; the caller writes it through sg_output_fd or
 * sg_output_stream; sg_output_commit flushes and fsyncs it and renames it
 * over the destination, sg_output_discard removes it. So a link planted at
 * any name segrt uses cannot make it write elsewhere (the temporary name
 * cannot exist yet, and rename replaces a name, it does not follow it),
 * and the destination holds either its previous file or the whole new one.
 *
 * A destination that exists must be a regular file: a symbolic link,
 * directory, device, FIFO or socket is refused (segrt never replaces
 * /dev/null or a pipe with a file), when opened and again when committed.
 *
 * Every open output is also listed where sg_output_abandon_all, which is
 * async-signal-safe, can remove its temporary file when the process is
 * interrupted. After SIGKILL a ".NAME.segrt-*" file may remain; no later
 * run opens or reads such a name, and it can be deleted. */
typedef struct sg_output sg_output;

/* Whether path may be written as an output, without creating anything:
 * its folder exists, is a folder and is writable (IO naming path and the
 * folder otherwise), and path does not exist or is a regular file
 * (INVALID_ARGUMENT naming path and what it is otherwise). */
sg_status sg_output_check(const char *path);

/* Checks path as sg_output_check does and creates its temporary file. */
sg_status sg_output_open(const char *path, sg_output **out);

/* The open temporary file, as a descriptor and (made on first use) a
 * stream over it; both stay owned by the output. */
int sg_output_fd(sg_output *o);
FILE *sg_output_stream(sg_output *o);

/* The destination, as given to sg_output_open. */
const char *sg_output_path(const sg_output *o);

/* Flushes, fsyncs and closes the temporary file and renames it over the
 * destination; frees o whatever happens (the temporary file is removed on
 * failure). IO naming the destination when something fails. */
sg_status sg_output_commit(sg_output *o);

/* Removes the temporary file and frees o. NULL is fine. */
void sg_output_discard(sg_output *o);

/* Removes the temporary file of every output this process has open, and
 * marks them so that their commit fails. Async-signal-safe: made for a
 * SIGINT or SIGTERM handler. */
void sg_output_abandon_all(void);

/* Identity of a file, or of the name where one would be: the device and
 * inode of an existing file (links followed), else those of its folder and
 * the file name. Two paths with equal identities name the same file. */
typedef struct sg_file_id {
    bool exists;
    uint64_t dev, ino;
    char name[256]; /* when !exists: the last path component */
} sg_file_id;

/* Fills *id for path. IO naming path when its folder does not exist. */
sg_status sg_file_identity(const char *path, sg_file_id *id);
bool sg_file_id_equal(const sg_file_id *a, const sg_file_id *b);

#endif
