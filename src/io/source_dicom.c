/* DICOM series as region sources: a folder (walked recursively) or a
 * list of files, read through GDCM (dicom_gdcm.h).
 *
 * Series. Files are grouped by SeriesInstanceUID. Where several series are
 * found and none is chosen (sg_source_options.series_uid, the command's
 * --series UID) the open fails listing each (UID, modality, slice count,
 * description). In a folder, files GDCM does not take as DICOM (text, a
 * stray file) and DICOM files without pixel data (DICOMDIR, structured
 * reports, RT structures) are skipped; a file with DICOM's preamble that
 * GDCM cannot parse is an error naming it, since skipping it would hide a
 * slice. In a list, every file must be a DICOM image.
 *
 * Slices. Each file is a slice, or each frame of a multi-frame file:
 * enhanced CT/MR (per-frame PlanePositionSequence and
 * PlaneOrientationSequence, shared or per frame, and
 * PixelValueTransformationSequence for rescale) or RT Dose
 * (GridFrameOffsetVector along the normal). They are sorted by
 * ImagePositionPatient . normal, the normal being the row direction cross
 * the column direction of ImageOrientationPatient, never by file name,
 * InstanceNumber or SliceLocation; the spacing between slices is the median
 * difference of those projections (SliceThickness is not a spacing). A
 * single slice takes SpacingBetweenSlices, else SliceThickness, else 1.
 *
 * Refused with a one-line error naming the series: slices of different
 * sizes, sample formats or pixel spacing; orientations that differ by more
 * than 1e-4 in a direction cosine; two slices at one position (a 4-D or
 * multi-echo series); a gap over 1.5 times the median step (missing
 * slices); any other step off the median by more than 1 % (uneven
 * spacing); positions that do not advance along the normal (gantry tilt);
 * more than one slice without position or orientation.
 *
 * allow_uneven (sg_source_options) takes missing slices and uneven
 * spacing instead, resampled to even spacing along the normal: the step
 * is the median of the steps, the grid runs from the first slice to the
 * last (round(extent / step) + 1 slices; a last grid slice past the last
 * slice, by under half a step, takes its values), and each grid slice is
 * the linear interpolation by position of the two slices around it (a
 * grid slice on a slice is that slice's values exactly). Its values are
 * float32 (float64 for 32-bit samples; colour stays uint8, rounded), the
 * geometry is exact for the grid, and sg_source_notice says what was
 * done. The other refusals stand.
 *
 * References (io/dicom_seg.h, sg_source_dicom_refs): each sorted slice's
 * SOP class and instance (and frame in a multi-frame file) and position,
 * and the study, patient and frame of reference of the series' first
 * slice's file, for a DICOM SEG.
 *
 * Geometry (source.h's model, LPS as DICOM is): origin the first sorted
 * slice's ImagePositionPatient; direction columns (i, j, k): the row
 * direction cosines, the column direction cosines, the normal; spacing:
 * the slice step, then PixelSpacing (between rows, between columns; 1
 * where absent). Without position and orientation (a secondary capture, a
 * radiograph) the geometry is unknown (identity).
 *
 * Values. Samples are read as stored (unused high bits cleared, signed
 * samples sign-extended from BitsStored), then RescaleSlope and
 * RescaleIntercept of their own slice are applied. The dtype: where every
 * slice's rescale is the identity, the stored type (uint8, int8, uint16,
 * int16, int32; uint32 widened to int64); where every slope and intercept
 * is a whole number and every stored value (by BitsStored and sign) maps
 * into int16, int16 (a CT in HU); otherwise float32 (float64 for 32-bit
 * samples, which float32 would round). Colour (RGB, or YBR_FULL converted
 * to RGB) is 3 uint8 channels, never rescaled. MONOCHROME1 keeps its stored
 * values (no inversion, as ITK); PALETTE COLOR and 1-bit data are
 * refused. */
#include "io/source.h"

#include "core/file.h"
#include "core/mem.h"

#include <string.h>

#ifndef SEGRT_HAVE_DICOM

sg_status sg_source_open_dicom(sg_source *s, const char *const *paths, size_t n)
{
    (void)paths;
    (void)n;
    return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: DICOM, and segrt was built without DICOM support", s->path);
}

const struct sg_dicom_refs *sg_source_dicom_refs(const sg_source *s)
{
    (void)s;
    return NULL;
}

sg_status sg_dicom_list(const char *const *paths, size_t n, sg_dicom_series_info **out, size_t *count)
{
    (void)n;
    *out = NULL;
    *count = 0;
    return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: DICOM, and segrt was built without DICOM support",
                    paths && paths[0] ? paths[0] : "");
}

#else

#include "io/dicom_gdcm.h"
#include "io/dicom_seg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* At most this many files are looked at in a folder, and this deep. */
#define DICOM_MAX_FILES 200000
#define DICOM_MAX_DEPTH 32
/* The decoded files kept for the next regions. */
#define DICOM_CACHE_BYTES ((uint64_t)64 << 20)
#define DICOM_CACHE_SLOTS 64
/* At most this many threads decode the files of one region. */
#define DICOM_READ_THREADS 16

typedef struct dcm_file {
    char *path;
    sg_dcm_header h;
    /* Native little-endian pixel data (the structural walk found it, of a
     * defined length): its value's offset and length in the file, read
     * directly instead of through GDCM's decoder and its forked child. */
    bool native;
    uint64_t pixel_off, pixel_len;
} dcm_file;

typedef struct dcm_slice {
    int32_t file, frame;
    double pos[3], proj, slope, intercept;
} dcm_slice;

typedef struct dcm_cached {
    int32_t file; /* -1: empty */
    uint8_t *data;
    size_t cap; /* bytes at data, reused for the next file (fresh pages cost more than the decoding) */
    int32_t planar;
    bool ybr;
    uint64_t stamp;
} dcm_cached;

/* Decoded files kept for the next slices: the source's own, and one for
 * each thread of a region read in parallel. */
typedef struct dcm_cache {
    dcm_cached slot[DICOM_CACHE_SLOTS];
    int n, max; /* max: the slots the budget allows, at least 1 */
    uint64_t clock;
} dcm_cache;

/* A grid slice of a resampled series: (1 - w) x slice a + w x slice b. */
typedef struct dcm_blend {
    int64_t a, b;
    double w;
} dcm_blend;

typedef struct dicom_state {
    dcm_file *files;
    size_t n_files;
    dcm_slice *slices;
    int64_t n_slices;
    int32_t rows, cols, samples, bits_allocated, bits_stored;
    bool is_signed;
    size_t sample_bytes, frame_bytes, file_bytes_max;
    dcm_cache cache;
    char series[96]; /* for messages: "series UID" */
    dcm_blend *blend; /* allow_uneven: one per grid slice; NULL when the slices are the grid */
    int64_t n_grid;
    sg_dcm_slice_ref *refs;
    sg_dicom_refs dicom_refs;
    char notice[512];
} dicom_state;

/* --- files ---------------------------------------------------------------- */

typedef struct path_list {
    char **p;
    size_t n, cap;
} path_list;

static sg_status list_add(path_list *l, const char *path)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        char **p = realloc(l->p, cap * sizeof *p);
        if (!p)
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory listing files", path);
        l->p = p;
        l->cap = cap;
    }
    if (!(l->p[l->n] = strdup(path)))
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory listing files", path);
    l->n++;
    return SEGRT_OK;
}

static void list_free(path_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->p[i]);
    free(l->p);
    memset(l, 0, sizeof *l);
}

/* Regular files under dir, recursively; links to folders are not
 * followed (no loops), links to files are. */
static sg_status walk(const char *root, const char *dir, int depth, path_list *out)
{
    if (depth > DICOM_MAX_DEPTH)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: folders nested deeper than %d", root, DICOM_MAX_DEPTH);
    DIR *d = opendir(dir);
    if (!d)
        return sg_error(SEGRT_ERROR_IO, "%s: cannot open the folder: %s", dir, strerror(errno));
    path_list subdirs = {0};
    sg_status st = SEGRT_OK;
    struct dirent *e;
    while (st == SEGRT_OK && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        size_t n = strlen(dir) + strlen(e->d_name) + 2;
        char *p = malloc(n);
        if (!p) {
            st = sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory listing files", root);
            break;
        }
        snprintf(p, n, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
            st = list_add(&subdirs, p);
        else if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
            st = out->n >= DICOM_MAX_FILES
                     ? sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: more than %d files", root, DICOM_MAX_FILES)
                     : list_add(out, p);
        free(p);
    }
    closedir(d);
    for (size_t i = 0; st == SEGRT_OK && i < subdirs.n; i++)
        st = walk(root, subdirs.p[i], depth + 1, out);
    list_free(&subdirs);
    return st;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Whether a file may be DICOM at all: the preamble's "DICM", or a data
 * set that starts with a group 0002 or 0008 element (files written
 * without the preamble). Anything else is not handed to GDCM. */
static bool maybe_dicom(const char *path, bool *preamble)
{
    *preamble = false;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return false;
    uint8_t h[132];
    ssize_t n = read(fd, h, sizeof h);
    close(fd);
    if (n >= 132 && memcmp(h + 128, "DICM", 4) == 0)
        return *preamble = true;
    return n >= 8 && (h[1] == 0 && (h[0] == 0x02 || h[0] == 0x08)) && h[3] == 0;
}

/* --- a structural check before GDCM ------------------------------------------
 *
 * GDCM asserts (and so aborts the process) on some malformed files, a
 * wrong file-meta group length among them. So before a file reaches it,
 * its elements are walked here: the file meta group (explicit VR little
 * endian), then the data set in its transfer syntax, items and sequences
 * of undefined length included; every length must lie
 * inside its file and item, nesting at most 16 deep, to the end of the
 * file (elements after the pixel data too). A deflated data set
 * is left to GDCM (zlib's own checks). */

typedef struct dcm_walk {
    const uint8_t *p;
    size_t n;
    bool implicit, big;
    bool jpeg;         /* a JPEG (IJG) transfer syntax: each frame's header is checked (jpeg_header_sound) */
    bool encapsulated; /* a transfer syntax whose pixel data are fragments (not native, not deflated) */
    size_t *pixel_at, *pixel_len; /* where the top level's pixel data value lies, when of a defined length */
} dcm_walk;

/* Whether a JPEG frame's header (its markers up to the first SOS) is one
 * GDCM's JPEG codecs read without asserting. They read it with the IJG
 * library and then assert (abort the process) on any warning it gave
 * (extraneous bytes between markers, a JFIF version other than 1, an
 * unknown Adobe transform, data ending before the scan), on a component
 * count other than 1, 3 or 4, and on a progressive frame of a precision
 * other than 8 or 12. So: SOI; marker segments framed by their lengths
 * with nothing between them (fill bytes allowed); one SOF of baseline,
 * extended, progressive or lossless Huffman coding with a precision that
 * coding allows and 1 or 3 components; APP0 JFIF of version 1; APP14
 * Adobe with transform 0 to 2; an SOS within the fragment. Stricter than
 * the standard (a header split over fragments is refused), which costs
 * nothing for files writers make. */
static bool jpeg_header_sound(const uint8_t *p, size_t n)
{
    if (n < 4 || p[0] != 0xff || p[1] != 0xd8)
        return false;
    size_t i = 2;
    bool sof = false;
    for (;;) {
        if (i >= n || p[i] != 0xff)
            return false;
        while (i < n && p[i] == 0xff)
            i++;
        if (i + 2 >= n)
            return false;
        uint8_t m = p[i++];
        size_t len = (size_t)p[i] << 8 | p[i + 1];
        if (len < 2 || len > n - i)
            return false;
        const uint8_t *seg = p + i + 2;
        size_t sl = len - 2;
        if (m >= 0xc0 && m <= 0xc3) {
            int prec = sl >= 6 ? seg[0] : 0, comps = sl >= 6 ? seg[5] : 0;
            bool prec_ok = m == 0xc0 ? prec == 8 : m == 0xc3 ? prec >= 2 && prec <= 16 : prec == 8 || prec == 12;
            if (sof || !prec_ok || (comps != 1 && comps != 3) || sl != 6 + 3 * (size_t)comps)
                return false;
            sof = true;
        } else if (m == 0xda) {
            return sof && sl >= 1 && sl == 4 + 2 * (size_t)seg[0];
        } else if (m == 0xe0) {
            if (sl >= 14 && memcmp(seg, "JFIF", 5) == 0 && seg[5] != 1)
                return false;
        } else if (m == 0xee) {
            if (sl >= 12 && memcmp(seg, "Adobe", 5) == 0 && seg[11] > 2)
                return false;
        } else if (m != 0xc4 && m != 0xdb && m != 0xdd && m != 0xfe && !(m >= 0xe1 && m <= 0xef)) {
            return false; /* SOI again, EOI, RSTn, other codings, reserved */
        }
        i += len;
    }
}

static uint16_t rd16(const dcm_walk *w, size_t at)
{
    const uint8_t *b = w->p + at;
    return w->big ? (uint16_t)(b[0] << 8 | b[1]) : (uint16_t)(b[1] << 8 | b[0]);
}

static uint32_t rd32(const dcm_walk *w, size_t at)
{
    const uint8_t *b = w->p + at;
    return w->big ? (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3]
                  : (uint32_t)b[3] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[1] << 8 | b[0];
}

static bool long_vr(const uint8_t *vr)
{
    static const char *const vrs[] = {"OB", "OD", "OF", "OL", "OV", "OW", "SQ", "SV", "UC", "UN", "UR", "UT", "UV"};
    for (size_t i = 0; i < sizeof vrs / sizeof *vrs; i++)
        if (vr[0] == vrs[i][0] && vr[1] == vrs[i][1])
            return true;
    return false;
}

/* Whether vr is one of PS3.5's value representations (GDCM asserts on
 * others in explicit VR). */
static bool known_vr(const uint8_t *vr)
{
    static const char vrs[] = "AEASATCSDADSDTFLFDISLOLTOBODOFOLOVOWPNSHSLSQSSSTSVTMUCUIULUNURUSUTUV";
    for (size_t i = 0; i + 1 < sizeof vrs; i += 2)
        if (vr[0] == vrs[i] && vr[1] == vrs[i + 1])
            return true;
    return false;
}

static bool walk_set(const dcm_walk *w, size_t *at, size_t end, int depth, bool in_item);

/* Items of a sequence (or pixel data fragments) from *at: to end when the
 * length is defined, else to the sequence delimiter. */
static bool walk_items(const dcm_walk *w, size_t *at, size_t end, bool undefined, int depth, bool fragments)
{
    while (*at < end) {
        if (end - *at < 8)
            return false;
        uint16_t g = rd16(w, *at), e = rd16(w, *at + 2);
        uint32_t len = rd32(w, *at + 4);
        *at += 8;
        if (g != 0xfffe)
            return false;
        if (e == 0xe0dd)
            return undefined && len == 0;
        if (e != 0xe000)
            return false;
        if (len == 0xffffffffu) {
            if (fragments || !walk_set(w, at, end, depth + 1, true))
                return false;
        } else {
            if (len > end - *at)
                return false;
            size_t item_end = *at + len;
            if (!fragments && !walk_set(w, at, item_end, depth + 1, false))
                return false;
            /* A fragment that starts a JPEG frame (the offset table does not). */
            if (fragments && w->jpeg && len >= 2 && w->p[*at] == 0xff && w->p[*at + 1] == 0xd8 &&
                !jpeg_header_sound(w->p + *at, len))
                return false;
            *at = item_end;
        }
    }
    return !undefined && *at == end;
}

/* A data set from *at to end (or, in an item of undefined length, to its
 * delimiter): the whole file at the top level, since GDCM's full read
 * allocates what an element after the pixel data claims. */
static bool walk_set(const dcm_walk *w, size_t *at, size_t end, int depth, bool in_item)
{
    if (depth > 16)
        return false;
    while (*at < end) {
        if (end - *at < 8)
            return false;
        uint16_t g = rd16(w, *at), e = rd16(w, *at + 2);
        if (g == 0xfffe && e == 0xe00d) {
            *at += 8;
            return in_item && rd32(w, *at - 4) == 0;
        }
        uint32_t len;
        bool sq = false, un = false;
        if (w->implicit || g == 0xfffe) {
            len = rd32(w, *at + 4);
            *at += 8;
        } else {
            const uint8_t *vr = w->p + *at + 4;
            if (!known_vr(vr))
                return false;
            sq = vr[0] == 'S' && vr[1] == 'Q';
            un = vr[0] == 'U' && vr[1] == 'N';
            if (long_vr(vr)) {
                if (end - *at < 12)
                    return false;
                len = rd32(w, *at + 8);
                *at += 12;
            } else {
                len = rd16(w, *at + 6);
                *at += 8;
            }
        }
        bool pixels = g == 0x7fe0 && e == 0x0010 && depth == 0;
        if (len == 0xffffffffu) {
            /* Sequences (SQ, UN, or implicit VR's) and encapsulated pixels;
             * a UN sequence's items are implicit VR little endian. */
            dcm_walk inner = *w;
            if (un)
                inner.implicit = true, inner.big = false;
            if (!walk_items(&inner, at, end, true, depth, pixels))
                return false;
        } else {
            if (len > end - *at)
                return false;
            size_t value_end = *at + len;
            if (sq || (w->implicit && !pixels && len >= 8 && rd16(w, *at) == 0xfffe && rd16(w, *at + 2) == 0xe000)) {
                if (!walk_items(w, at, value_end, false, depth, false))
                    return false;
            }
            /* Pixel data of a defined length that starts with an item, or
             * in a transfer syntax of fragments: encapsulated pixels, which
             * PS3.5 gives an undefined length. GDCM reads such fragments on
             * past the defined length, up to a delimiter, taking whatever
             * the bytes there claim as a fragment's length (a 2 KiB file
             * made it allocate 3.7 GB): refused. */
            if (pixels && (w->encapsulated || (len >= 8 && rd16(w, *at) == 0xfffe && rd16(w, *at + 2) == 0xe000)))
                return false;
            if (pixels && w->pixel_at) {
                *w->pixel_at = *at;
                *w->pixel_len = len;
            }
            *at = value_end;
        }
    }
    return !in_item;
}

/* Whether the file's structure is sound enough to hand to GDCM; and,
 * into df, where its pixel data lie when they are native little endian. */
static bool dicom_sound(const char *path, bool preamble, dcm_file *df)
{
    sg_mapped_file m;
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", sg_last_error());
    sg_status st = sg_map_file(path, (uint64_t)1 << 40, "a DICOM file", &m);
    sg_error(SEGRT_OK, "%s", saved);
    if (st != SEGRT_OK)
        return false;
    size_t pixel_at = 0, pixel_len = 0;
    dcm_walk w = {m.data, m.size, false, false, false, false, NULL, NULL}, meta = w;
    size_t at = preamble ? 132 : 0;
    bool ok = true, deflated = false;
    /* The file meta group: explicit VR little endian, group 0002. */
    size_t meta_end = 0;
    while (ok && at + 8 <= m.size && rd16(&meta, at) == 0x0002) {
        uint16_t e = rd16(&meta, at + 2);
        const uint8_t *vr = m.data + at + 4;
        size_t head = long_vr(vr) ? 12 : 8;
        if (!known_vr(vr) || at + head > m.size) {
            ok = false;
            break;
        }
        uint32_t len = head == 12 ? rd32(&meta, at + 8) : rd16(&meta, at + 6);
        if (len == 0xffffffffu || len > m.size - at - head) {
            ok = false;
            break;
        }
        if (e == 0x0000 && len == 4)
            meta_end = at + head + 4 + rd32(&meta, at + head);
        if (e == 0x0010) {
            const char *ts = (const char *)m.data + at + head;
            w.implicit = len >= 17 && strncmp(ts, "1.2.840.10008.1.2", 17) == 0 && (len == 17 || ts[17] == 0);
            w.big = len >= 19 && strncmp(ts, "1.2.840.10008.1.2.2", 19) == 0;
            deflated = len >= 22 && strncmp(ts, "1.2.840.10008.1.2.1.99", 22) == 0;
            /* JPEG baseline, extended, lossless (1.2.840.10008.1.2.4.50 to .70): GDCM's IJG codecs. */
            int sub = 0;
            for (uint32_t k = 20; len >= 22 && strncmp(ts, "1.2.840.10008.1.2.4.", 20) == 0 && k < len && k < 24 &&
                                  ts[k] >= '0' && ts[k] <= '9';
                 k++)
                sub = sub * 10 + (ts[k] - '0');
            w.jpeg = sub >= 50 && sub <= 70;
            size_t tl = len;
            while (tl > 0 && (ts[tl - 1] == 0 || ts[tl - 1] == ' '))
                tl--;
            bool native = (tl == 17 || tl == 19 || tl == 22) && strncmp(ts, "1.2.840.10008.1.2", 17) == 0 &&
                          (tl == 17 || strncmp(ts + 17, ".1", 2) == 0 || strncmp(ts + 17, ".2", 2) == 0) &&
                          (tl != 22 || strncmp(ts + 19, ".99", 3) == 0);
            w.encapsulated = !native;
        }
        at += head + len;
    }
    if (ok && meta_end && meta_end != at)
        ok = false; /* a group length that disagrees with the group */
    if (ok && !preamble && at == 0) {
        /* No meta group: GDCM guesses; take implicit VR little endian when
         * the first element's VR is not letters. */
        const uint8_t *vr = m.data + 4;
        w.implicit = m.size >= 8 && !(vr[0] >= 'A' && vr[0] <= 'Z' && vr[1] >= 'A' && vr[1] <= 'Z');
    }
    if (ok && !deflated) {
        w.pixel_at = &pixel_at;
        w.pixel_len = &pixel_len;
        ok = walk_set(&w, &at, m.size, 0, false);
    }
    df->native = ok && !deflated && !w.big && !w.encapsulated && pixel_at > 0;
    df->pixel_off = pixel_at;
    df->pixel_len = pixel_len;
    sg_unmap_file(&m);
    return ok;
}

/* --- sorting and checks ---------------------------------------------------- */

static int cmp_proj(const void *a, const void *b)
{
    double x = ((const dcm_slice *)a)->proj, y = ((const dcm_slice *)b)->proj;
    return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double dot3(const double *a, const double *b)
{
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

/* --- reading ---------------------------------------------------------------- */

static void cache_clear(dcm_cache *c)
{
    for (int i = 0; i < c->n; i++) {
        free(c->slot[i].data);
        c->slot[i] = (dcm_cached){.file = -1};
    }
    c->n = 0;
}

static void dicom_close(sg_source *s)
{
    dicom_state *st = s->state;
    if (!st)
        return;
    for (size_t i = 0; i < st->n_files; i++) {
        free(st->files[i].path);
        sg_dcm_header_free(&st->files[i].h);
    }
    free(st->files);
    free(st->slices);
    free(st->blend);
    free(st->refs);
    cache_clear(&st->cache);
    free(st);
}

static uint8_t clamp8(double v)
{
    return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)lrint(v);
}

/* YBR_FULL to RGB in place (PS3.3 C.7.6.3.1.2), interleaved or planar. */
static void ybr_to_rgb(uint8_t *p, size_t pixels, bool planar)
{
    for (size_t i = 0; i < pixels; i++) {
        uint8_t *y = planar ? p + i : p + 3 * i;
        size_t step = planar ? pixels : 1;
        double Y = y[0], Cb = y[step] - 128.0, Cr = y[2 * step] - 128.0;
        y[0] = clamp8(Y + 1.402 * Cr);
        y[step] = clamp8(Y - 0.344136 * Cb - 0.714136 * Cr);
        y[2 * step] = clamp8(Y + 1.772 * Cb);
    }
}

/* Whether file df's pixels can be read as they lie: native little endian
 * on a little-endian host, whole bytes per sample, exactly the frames the
 * header says (a byte of padding to an even length allowed). Anything
 * else (big endian, 1-bit, subsampled YBR, a length that disagrees) goes
 * through GDCM, which knows those cases. */
static bool native_fits(const dcm_file *df, size_t bytes)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    int32_t b = df->h.bits_allocated;
    return df->native && (b == 8 || b == 16 || b == 32) && (df->pixel_len == bytes || df->pixel_len == bytes + 1);
#else
    (void)df, (void)bytes;
    return false;
#endif
}

/* Native pixel data straight from the file, as GDCM's decoder gives them. */
static sg_status read_native(const dcm_file *df, uint8_t *dst, size_t bytes)
{
    int fd;
    SG_TRY(sg_open_input(df->path, &fd));
    size_t done = 0;
    while (done < bytes) {
        ssize_t r = pread(fd, dst + done, bytes - done, (off_t)(df->pixel_off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            close(fd);
            return e ? sg_error(SEGRT_ERROR_IO, "%s: %s", df->path, strerror(e))
                     : sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: the file changed while segrt read it (its pixel "
                                                           "data end early)",
                                df->path);
        }
        done += (size_t)r;
    }
    close(fd);
    return SEGRT_OK;
}

/* File df's pixels decoded into c->data (frame_bytes x frames, allocated
 * by the caller), colour turned into RGB. Touches nothing shared: the
 * threads of a parallel read call it at once. */
static sg_status decode_file(const dicom_state *st, const dcm_file *df, dcm_cached *c)
{
    size_t bytes = st->frame_bytes * (size_t)df->h.frames;
    char err[512], pi[SG_DCM_TEXT];
    int32_t planar = 0;
    if (native_fits(df, bytes)) {
        /* GDCM's decoder refuses a photometric interpretation it does not
         * know; the native path does the same, naming it. */
        const char *ph = df->h.photometric;
        bool known = df->h.samples == 1 ? strcmp(ph, "MONOCHROME1") == 0 || strcmp(ph, "MONOCHROME2") == 0
                                        : strcmp(ph, "RGB") == 0 || strcmp(ph, "YBR_FULL") == 0;
        if (!known)
            return sg_error(SEGRT_ERROR_INVALID_MODEL,
                            "%s: photometric interpretation \"%s\" for %d samples a pixel: segrt reads "
                            "MONOCHROME1, MONOCHROME2, RGB and YBR_FULL",
                            df->path, ph, df->h.samples);
        SG_TRY(read_native(df, c->data, bytes));
        planar = df->h.samples > 1 ? df->h.planar : 0;
        snprintf(pi, sizeof pi, "%s", df->h.photometric);
    } else if (sg_dcm_decode(df->path, &df->h, c->data, bytes, &planar, pi, err, sizeof err) != SG_DCM_OK)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: %s", df->path, err);
    if (st->samples == 3) {
        if (strcmp(pi, "YBR_FULL") == 0)
            for (int32_t k = 0; k < df->h.frames; k++)
                ybr_to_rgb(c->data + st->frame_bytes * (size_t)k, (size_t)st->rows * (size_t)st->cols, planar);
        else if (strcmp(pi, "RGB") != 0)
            return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: colour pixels decoded as %s; segrt takes RGB and YBR_FULL",
                            df->path, pi);
    }
    c->planar = planar;
    return SEGRT_OK;
}

/* The decoded pixels of file f (from cache, or decoded now into it). */
static sg_status decoded(const dicom_state *st, dcm_cache *cache, int32_t f, const dcm_cached **out)
{
    for (int i = 0; i < cache->n; i++)
        if (cache->slot[i].file == f) {
            cache->slot[i].stamp = ++cache->clock;
            *out = &cache->slot[i];
            return SEGRT_OK;
        }
    const dcm_file *df = &st->files[f];
    size_t bytes = st->frame_bytes * (size_t)df->h.frames;
    dcm_cached *c;
    if (cache->n < cache->max) {
        c = &cache->slot[cache->n++];
    } else {
        c = &cache->slot[0];
        for (int i = 1; i < cache->n; i++)
            if (cache->slot[i].stamp < c->stamp)
                c = &cache->slot[i];
    }
    c->file = -1;
    if (c->cap < bytes || !c->data) {
        free(c->data);
        c->cap = 0;
        if (!(c->data = sg_malloc(bytes ? bytes : 1)))
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes of pixels", df->path, bytes);
        c->cap = bytes;
    }
    SG_TRY(decode_file(st, df, c));
    c->file = f;
    c->stamp = ++cache->clock;
    *out = c;
    return SEGRT_OK;
}

/* Sample i of a decoded frame as stored: unused bits cleared, sign
 * extended from BitsStored. */
static int64_t stored_value(const dicom_state *st, const uint8_t *p)
{
    uint64_t u;
    switch (st->sample_bytes) {
    case 1:
        u = p[0];
        break;
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        u = v;
        break;
    }
    default: {
        uint32_t v;
        memcpy(&v, p, 4);
        u = v;
        break;
    }
    }
    int bits = st->bits_stored;
    if (bits < 64)
        u &= ((uint64_t)1 << bits) - 1;
    if (st->is_signed && bits < 64 && (u >> (bits - 1)) & 1)
        return (int64_t)(u | ~(((uint64_t)1 << bits) - 1));
    return (int64_t)u;
}

/* n samples as stored (stored_value's), `step` samples apart from p,
 * into v: the loops by sample size, since this runs for every voxel. */
static void stored_row(const dicom_state *st, const uint8_t *p, size_t step, int64_t n, int64_t *v)
{
    int bits = st->bits_stored;
    uint64_t mask = bits < 64 ? ((uint64_t)1 << bits) - 1 : ~(uint64_t)0;
    /* Two's complement sign extension of a masked value: (u ^ s) - s. */
    uint64_t sign = st->is_signed && bits < 64 ? (uint64_t)1 << (bits - 1) : 0;
    switch (st->sample_bytes) {
    case 1:
        for (int64_t x = 0; x < n; x++)
            v[x] = (int64_t)(((p[(size_t)x * step] & mask) ^ sign) - sign);
        return;
    case 2:
        for (int64_t x = 0; x < n; x++) {
            uint16_t u;
            memcpy(&u, p + (size_t)x * step * 2, 2);
            v[x] = (int64_t)(((u & mask) ^ sign) - sign);
        }
        return;
    default:
        for (int64_t x = 0; x < n; x++) {
            uint32_t u;
            memcpy(&u, p + (size_t)x * step * 4, 4);
            v[x] = (int64_t)(((u & mask) ^ sign) - sign);
        }
        return;
    }
}

/* n values into o as dtype t: rescaled (v x slope + intercept, stored as
 * sg_dtype_store_f64 stores) or as they are (sg_dtype_store_i64's way). */
static void store_row(sg_dtype t, void *o, const int64_t *v, int64_t n, bool rescale, double slope, double intercept)
{
    if (t == SEGRT_DTYPE_FLOAT32) {
        float *f = o;
        if (rescale)
            for (int64_t x = 0; x < n; x++)
                f[x] = (float)((double)v[x] * slope + intercept);
        else
            for (int64_t x = 0; x < n; x++)
                f[x] = (float)v[x];
    } else if (t == SEGRT_DTYPE_INT16 && !rescale) {
        int16_t *d = o;
        for (int64_t x = 0; x < n; x++)
            d[x] = (int16_t)v[x];
    } else if (t == SEGRT_DTYPE_INT16) {
        /* A CT in HU: whole slope and intercept that keep every stored
         * value within int16 (the dtype says so), so the double is whole
         * and in range, and the cast is sg_dtype_store_f64's. */
        int16_t *d = o;
        for (int64_t x = 0; x < n; x++)
            d[x] = (int16_t)(int64_t)((double)v[x] * slope + intercept);
    } else if (t == SEGRT_DTYPE_UINT16 && !rescale) {
        uint16_t *d = o;
        for (int64_t x = 0; x < n; x++)
            d[x] = (uint16_t)v[x];
    } else if (rescale) {
        for (int64_t x = 0; x < n; x++)
            sg_dtype_store_f64(t, o, x, (double)v[x] * slope + intercept);
    } else {
        for (int64_t x = 0; x < n; x++)
            sg_dtype_store_i64(t, o, x, v[x]);
    }
}

/* The box's rows and columns of slice sl (decoded in c) as values
 * (rescaled, colour as stored) into out: channel, then row, column. */
static void slice_values(const dicom_state *st, const dcm_cached *c, const dcm_slice *sl, const sg_box *box,
                         double *out)
{
    const uint8_t *frame = c->data + st->frame_bytes * (size_t)sl->frame;
    size_t pixels = (size_t)st->rows * (size_t)st->cols;
    bool rescale = st->samples == 1 && (sl->slope != 1 || sl->intercept != 0);
    for (int32_t ch = 0; ch < st->samples; ch++)
        for (int64_t y = 0; y < box->size[1]; y++) {
            size_t row = (size_t)(box->start[1] + y) * (size_t)st->cols;
            for (int64_t x = 0; x < box->size[2]; x++) {
                size_t px = row + (size_t)(box->start[2] + x);
                size_t at = c->planar ? (size_t)ch * pixels + px : px * (size_t)st->samples + (size_t)ch;
                double v = (double)stored_value(st, frame + at * st->sample_bytes);
                *out++ = rescale ? v * sl->slope + sl->intercept : v;
            }
        }
}

/* What one thread of a region read fills: slices z0 to z1 of the box,
 * through its own cache and buffers. */
typedef struct region_part {
    sg_source *s;
    const sg_box *box;
    void *dst;
    int64_t z0, z1;
    dcm_cache *cache;
    sg_status status;
    char error[1024];
} region_part;

/* Grid slices z0 to z1 of a resampled series: each blended from its two
 * slices (the first decoded and taken before the second is, since the
 * cache may hold one file). */
static sg_status resampled_slices(region_part *rp)
{
    const sg_source *s = rp->s;
    const dicom_state *st = s->state;
    const sg_box *box = rp->box;
    sg_dtype t = s->info.dtype;
    size_t oes = segrt_dtype_size(t);
    size_t plane = (size_t)(box->size[0] * box->size[1] * box->size[2]);
    size_t n = (size_t)st->samples * (size_t)(box->size[1] * box->size[2]);
    double *va = sg_malloc(sizeof(double) * n * 2);
    if (!va)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory reading a slice", s->path);
    double *vb = va + n;
    bool whole = t != SEGRT_DTYPE_FLOAT32 && t != SEGRT_DTYPE_FLOAT64;
    size_t HW = (size_t)(box->size[1] * box->size[2]);
    for (int64_t z = rp->z0; z < rp->z1; z++) {
        const dcm_blend *bl = &st->blend[box->start[0] + z];
        const dcm_cached *c;
        sg_status r = decoded(st, rp->cache, st->slices[bl->a].file, &c);
        if (r == SEGRT_OK)
            slice_values(st, c, &st->slices[bl->a], box, va);
        if (r == SEGRT_OK && bl->w > 0 && (r = decoded(st, rp->cache, st->slices[bl->b].file, &c)) == SEGRT_OK)
            slice_values(st, c, &st->slices[bl->b], box, vb);
        if (r != SEGRT_OK) {
            free(va);
            return r;
        }
        for (int32_t ch = 0; ch < st->samples; ch++) {
            uint8_t *o = (uint8_t *)rp->dst + ((size_t)ch * plane + (size_t)z * HW) * oes;
            for (size_t i = 0; i < HW; i++) {
                size_t k = (size_t)ch * HW + i;
                double v = bl->w > 0 ? va[k] * (1 - bl->w) + vb[k] * bl->w : va[k];
                sg_dtype_store_f64(t, o, (int64_t)i, whole ? floor(v + 0.5) : v);
            }
        }
    }
    free(va);
    return SEGRT_OK;
}

/* Slices z0 to z1 of the box, as stored and rescaled by their own slice. */
static sg_status plain_slices(region_part *rp)
{
    const sg_source *s = rp->s;
    const dicom_state *st = s->state;
    const sg_box *box = rp->box;
    sg_dtype t = s->info.dtype;
    size_t oes = segrt_dtype_size(t);
    int64_t W = box->size[2], H = box->size[1], D = box->size[0];
    size_t plane = (size_t)(W * H * D);
    size_t pixels = (size_t)st->rows * (size_t)st->cols;
    int64_t *v = sg_malloc(sizeof *v * (size_t)(W ? W : 1));
    if (!v)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory reading a slice", s->path);
    for (int64_t z = rp->z0; z < rp->z1; z++) {
        const dcm_slice *sl = &st->slices[box->start[0] + z];
        const dcm_cached *c;
        sg_status r = decoded(st, rp->cache, sl->file, &c);
        if (r != SEGRT_OK) {
            free(v);
            return r;
        }
        const uint8_t *frame = c->data + st->frame_bytes * (size_t)sl->frame;
        bool rescale = st->samples == 1 && (sl->slope != 1 || sl->intercept != 0);
        for (int32_t ch = 0; ch < st->samples; ch++)
            for (int64_t y = 0; y < H; y++) {
                size_t px = (size_t)(box->start[1] + y) * (size_t)st->cols + (size_t)box->start[2];
                size_t at = c->planar ? (size_t)ch * pixels + px : px * (size_t)st->samples + (size_t)ch;
                stored_row(st, frame + at * st->sample_bytes, c->planar ? 1 : (size_t)st->samples, W, v);
                store_row(t, (uint8_t *)rp->dst + ((size_t)ch * plane + (size_t)((z * H + y) * W)) * oes, v, W,
                          rescale, sl->slope, sl->intercept);
            }
    }
    free(v);
    return SEGRT_OK;
}

static void *region_thread(void *arg)
{
    region_part *rp = arg;
    const dicom_state *st = rp->s->state;
    rp->status = st->blend ? resampled_slices(rp) : plain_slices(rp);
    if (rp->status != SEGRT_OK)
        snprintf(rp->error, sizeof rp->error, "%s", sg_last_error());
    return NULL;
}

/* The threads a read of the box takes: one per few slices up to the
 * machine's cores, but one where a file holds several slices (a
 * multi-frame file decoded by each thread would cost its whole size
 * each time) or the box is small. Decoding (a file read, or GDCM's
 * forked decoder) and turning samples into values run at a few hundred
 * MB/s a core, so a CT of 400 files takes a second on one. */
static int region_threads(const dicom_state *st, const sg_box *box)
{
    if (st->n_files < (size_t)st->n_slices)
        return 1;
    uint64_t voxels = (uint64_t)box->size[0] * (uint64_t)box->size[1] * (uint64_t)box->size[2];
    if (box->size[0] < 4 || voxels < ((uint64_t)1 << 20))
        return 1;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t t = cores < 1 ? 1 : cores > DICOM_READ_THREADS ? DICOM_READ_THREADS : cores;
    return (int)(t < box->size[0] / 2 ? t : box->size[0] / 2);
}

static sg_status dicom_read_region(sg_source *s, int32_t level, const sg_box *box, void *dst)
{
    (void)level;
    dicom_state *st = s->state;
    int threads = region_threads(st, box);
    if (threads <= 1) {
        region_part one = {.s = s, .box = box, .dst = dst, .z0 = 0, .z1 = box->size[0], .cache = &st->cache};
        return st->blend ? resampled_slices(&one) : plain_slices(&one);
    }
    region_part parts[DICOM_READ_THREADS];
    dcm_cache caches[DICOM_READ_THREADS];
    pthread_t tid[DICOM_READ_THREADS];
    bool started[DICOM_READ_THREADS] = {false};
    int64_t D = box->size[0];
    for (int i = 0; i < threads; i++) {
        /* Two slots: a resampled grid slice takes two files, the next
         * grid slice mostly the same two. */
        caches[i] = (dcm_cache){.max = 2};
        parts[i] = (region_part){.s = s,
                                 .box = box,
                                 .dst = dst,
                                 .z0 = D * i / threads,
                                 .z1 = D * (i + 1) / threads,
                                 .cache = &caches[i]};
    }
    /* The calling thread takes the first part; a thread that does not
     * start leaves its part to the calling thread after. */
    for (int i = 1; i < threads; i++)
        started[i] = pthread_create(&tid[i], NULL, region_thread, &parts[i]) == 0;
    region_thread(&parts[0]);
    for (int i = 1; i < threads; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        else
            region_thread(&parts[i]);
    }
    sg_status rc = SEGRT_OK;
    for (int i = 0; i < threads; i++) {
        cache_clear(&caches[i]);
        if (rc == SEGRT_OK && parts[i].status != SEGRT_OK)
            rc = sg_error(parts[i].status, "%s", parts[i].error);
    }
    return rc;
}

static const sg_source_ops dicom_ops = {
    .read_region = dicom_read_region,
    .close = dicom_close,
};

/* --- opening ----------------------------------------------------------------- */

typedef struct series_entry {
    const char *uid, *modality, *description;
    int64_t slices;
    size_t first;
} series_entry;

/* The series of the files, in order of first appearance. */
static sg_status series_of(sg_source *s, const dcm_file *files, size_t n, series_entry **out, size_t *count)
{
    series_entry *e = sg_calloc(n ? n : 1, sizeof *e);
    if (!e)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory", s->path);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < k && strcmp(e[j].uid, files[i].h.series_uid) != 0)
            j++;
        if (j == k) {
            e[k].uid = files[i].h.series_uid;
            e[k].modality = files[i].h.modality;
            e[k].description = files[i].h.description;
            e[k].first = i;
            k++;
        }
        e[j].slices += files[i].h.frames;
    }
    *out = e;
    *count = k;
    return SEGRT_OK;
}

static sg_status series_error(sg_source *s, sg_status code, const char *lead, const series_entry *e, size_t k)
{
    char buf[1536];
    size_t at = 0;
    for (size_t j = 0; j < k && at < sizeof buf - 8; j++) {
        int w = snprintf(buf + at, sizeof buf - at, "%s%s (%s, %lld slice%s%s%s%s)", j ? "; " : "",
                         e[j].uid[0] ? e[j].uid : "(no SeriesInstanceUID)", e[j].modality[0] ? e[j].modality : "?",
                         (long long)e[j].slices, e[j].slices == 1 ? "" : "s", e[j].description[0] ? ", \"" : "",
                         e[j].description, e[j].description[0] ? "\"" : "");
        if (w < 0)
            break;
        at += (size_t)w;
    }
    if (at >= sizeof buf - 8)
        snprintf(buf + sizeof buf - 8, 8, "...");
    return sg_error(code, "%s: %s: %s", s->path, lead, buf);
}

/* Reads the headers of the candidate files: *files (n of them) are the
 * DICOM images among them. */
static sg_status read_headers(sg_source *s, const path_list *paths, bool listed, dcm_file **files, size_t *n,
                              size_t *skipped)
{
    dcm_file *f = sg_calloc(paths->n ? paths->n : 1, sizeof *f);
    if (!f)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory", s->path);
    *files = f;
    *n = 0;
    *skipped = 0;
    for (size_t i = 0; i < paths->n; i++) {
        const char *p = paths->p[i];
        bool preamble;
        if (!maybe_dicom(p, &preamble)) {
            if (listed) {
                int fd;
                SG_TRY(sg_open_input(p, &fd));
                close(fd);
                return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: not a DICOM file", p);
            }
            (*skipped)++;
            continue;
        }
        char err[512];
        dcm_file *d = &f[*n];
        if (!dicom_sound(p, preamble, d)) {
            if (listed || preamble)
                return sg_error(SEGRT_ERROR_INVALID_MODEL,
                                "%s: a malformed DICOM file (an element's length or the "
                                "file meta group does not fit the file)",
                                p);
            (*skipped)++;
            continue;
        }
        int rc = sg_dcm_read_header(p, &d->h, err, sizeof err);
        if (rc == SG_DCM_NOT_DICOM && (listed || preamble))
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: a DICOM file GDCM cannot parse", p);
        if (rc == SG_DCM_ERROR)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: %s", p, err);
        if (rc != SG_DCM_OK || !d->h.has_pixels) {
            if (rc == SG_DCM_OK && listed) {
                sg_dcm_header_free(&d->h);
                return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: a DICOM file without pixel data (%s)", p,
                                d->h.sop_class[0] ? d->h.sop_class : "no SOP class");
            }
            sg_dcm_header_free(&d->h);
            (*skipped)++;
            continue;
        }
        if (!(d->path = strdup(p)))
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory", s->path);
        (*n)++;
    }
    return SEGRT_OK;
}

/* The candidate files: a folder's, walked and sorted, or the list. */
static sg_status gather(sg_source *s, const char *const *paths, size_t n, path_list *list, bool *listed)
{
    *listed = paths != NULL;
    if (paths) {
        for (size_t i = 0; i < n; i++)
            SG_TRY(paths[i] ? list_add(list, paths[i])
                            : sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: file %zu of the series is NULL", s->path, i));
        return SEGRT_OK;
    }
    struct stat sb;
    if (stat(s->path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        SG_TRY(walk(s->path, s->path, 0, list));
        if (list->n > 1)
            qsort(list->p, list->n, sizeof *list->p, cmp_str);
        return SEGRT_OK;
    }
    *listed = true;
    return list_add(list, s->path);
}

sg_status sg_dicom_list(const char *const *paths, size_t n, sg_dicom_series_info **out, size_t *count)
{
    *out = NULL;
    *count = 0;
    if (!paths || n == 0 || !paths[0])
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "listing DICOM series needs a folder or files");
    sg_source s;
    memset(&s, 0, sizeof s);
    s.path = (char *)paths[0];
    struct stat sb;
    bool folder = n == 1 && stat(paths[0], &sb) == 0 && S_ISDIR(sb.st_mode);
    path_list list = {0};
    bool listed;
    sg_status rc = gather(&s, folder ? NULL : paths, n, &list, &listed);
    dcm_file *files = NULL;
    size_t n_files = 0, skipped = 0;
    if (rc == SEGRT_OK)
        rc = read_headers(&s, &list, false, &files, &n_files, &skipped);
    list_free(&list);
    series_entry *e = NULL;
    size_t k = 0;
    if (rc == SEGRT_OK && n_files == 0)
        rc = sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: no DICOM image among %zu file(s)", s.path, skipped);
    if (rc == SEGRT_OK)
        rc = series_of(&s, files, n_files, &e, &k);
    sg_dicom_series_info *o = NULL;
    if (rc == SEGRT_OK && !(o = sg_calloc(k, sizeof *o)))
        rc = sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory", s.path);
    for (size_t j = 0; rc == SEGRT_OK && j < k; j++) {
        snprintf(o[j].uid, sizeof o[j].uid, "%s", e[j].uid);
        snprintf(o[j].modality, sizeof o[j].modality, "%s", e[j].modality);
        snprintf(o[j].description, sizeof o[j].description, "%s", e[j].description);
        o[j].slices = e[j].slices;
        o[j].rows = files[e[j].first].h.rows;
        o[j].cols = files[e[j].first].h.cols;
    }
    free(e);
    for (size_t i = 0; files && i < n_files; i++) {
        free(files[i].path);
        sg_dcm_header_free(&files[i].h);
    }
    free(files);
    if (rc != SEGRT_OK) {
        free(o);
        return rc;
    }
    *out = o;
    *count = k;
    return SEGRT_OK;
}

/* Every check of the series' files against the first, and the sample
 * format. */
static sg_status check_files(sg_source *s, dicom_state *st)
{
    const sg_dcm_header *h0 = &st->files[0].h;
    for (size_t i = 0; i < st->n_files; i++) {
        const sg_dcm_header *h = &st->files[i].h;
        if (h->rows != h0->rows || h->cols != h0->cols || h->samples != h0->samples ||
            h->bits_allocated != h0->bits_allocated || h->bits_stored != h0->bits_stored ||
            h->pixel_representation != h0->pixel_representation)
            return sg_error(SEGRT_ERROR_INVALID_MODEL,
                            "%s: %s: slices of different sizes or sample formats: %s is %dx%d, %d sample(s) of %d "
                            "bits, %s is %dx%d, %d of %d",
                            s->path, st->series, st->files[0].path, (int)h0->cols, (int)h0->rows, (int)h0->samples,
                            (int)h0->bits_allocated, st->files[i].path, (int)h->cols, (int)h->rows, (int)h->samples,
                            (int)h->bits_allocated);
        if (h->has_spacing != h0->has_spacing ||
            (h->has_spacing && (fabs(h->spacing[0] - h0->spacing[0]) > 1e-4 * fabs(h0->spacing[0]) + 1e-6 ||
                                fabs(h->spacing[1] - h0->spacing[1]) > 1e-4 * fabs(h0->spacing[1]) + 1e-6)))
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: %s: slices with different PixelSpacing (%s and %s)",
                            s->path, st->series, st->files[0].path, st->files[i].path);
    }
    if (h0->rows < 1 || h0->cols < 1)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: %s: images of %dx%d pixels", s->path, st->series, (int)h0->cols,
                        (int)h0->rows);
    if (h0->bits_allocated != 8 && h0->bits_allocated != 16 && h0->bits_allocated != 32)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: %s: %d bits allocated per sample; segrt reads 8, 16 and 32",
                        s->path, st->series, (int)h0->bits_allocated);
    if (h0->bits_stored < 1 || h0->bits_stored > h0->bits_allocated)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: %s: BitsStored %d of %d allocated", s->path, st->series,
                        (int)h0->bits_stored, (int)h0->bits_allocated);
    if (h0->samples != 1 && h0->samples != 3)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: %s: %d samples per pixel; segrt reads 1 (grey) and 3 (colour)",
                        s->path, st->series, (int)h0->samples);
    if (strcmp(h0->photometric, "PALETTE COLOR") == 0)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: %s: PALETTE COLOR images are not supported", s->path, st->series);
    if (h0->samples == 3 && h0->bits_allocated != 8)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: %s: colour samples of %d bits; segrt reads 8-bit colour", s->path,
                        st->series, (int)h0->bits_allocated);
    st->rows = h0->rows;
    st->cols = h0->cols;
    st->samples = h0->samples;
    st->bits_allocated = h0->bits_allocated;
    st->bits_stored = h0->bits_stored;
    st->is_signed = h0->pixel_representation == 1;
    st->sample_bytes = (size_t)h0->bits_allocated / 8;
    st->frame_bytes = (size_t)st->rows * (size_t)st->cols * (size_t)st->samples * st->sample_bytes;
    for (size_t i = 0; i < st->n_files; i++) {
        size_t b = st->frame_bytes * (size_t)st->files[i].h.frames;
        if (b > st->file_bytes_max)
            st->file_bytes_max = b;
    }
    /* The slots the cache's budget allows: at least one. */
    uint64_t slots = DICOM_CACHE_BYTES / (st->file_bytes_max ? st->file_bytes_max : 1);
    st->cache.max = slots < 1 ? 1 : slots > DICOM_CACHE_SLOTS ? DICOM_CACHE_SLOTS : (int)slots;
    if (st->file_bytes_max > s->max_bytes)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: %s: a file of %zu bytes of pixels, more than the %llu allowed",
                        s->path, st->series, st->file_bytes_max, (unsigned long long)s->max_bytes);
    return SEGRT_OK;
}

/* The even grid of a series with missing slices or uneven steps (sorted
 * slices with their projections): from the first slice to the last at
 * the median step, each grid slice blended from the slices around it. */
static sg_status plan_grid(sg_source *s, dicom_state *st, double step, double least, double most)
{
    int64_t n = st->n_slices;
    double first = st->slices[0].proj, extent = st->slices[n - 1].proj - first;
    double g = floor(extent / step + 0.5) + 1;
    if (!(g >= 2) || g > 1e6)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: %s: %.4g mm of slices at a step of %.4g mm", s->path,
                        st->series, extent, step);
    int64_t m = (int64_t)g;
    if (!(st->blend = sg_calloc((size_t)m, sizeof *st->blend)))
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory for %lld slices", s->path, (long long)m);
    st->n_grid = m;
    int64_t b = 0;
    for (int64_t z = 0; z < m; z++) {
        double p = first + (double)z * step;
        while (b < n && st->slices[b].proj < p - 1e-6)
            b++;
        dcm_blend *bl = &st->blend[z];
        if (b == n) { /* past the last slice (under half a step): its values */
            bl->a = bl->b = n - 1;
        } else if (b == 0 || fabs(st->slices[b].proj - p) <= 1e-6) {
            bl->a = bl->b = b;
        } else {
            bl->a = b - 1;
            bl->b = b;
            bl->w = (p - st->slices[b - 1].proj) / (st->slices[b].proj - st->slices[b - 1].proj);
        }
    }
    snprintf(st->notice, sizeof st->notice,
             "%s: %s: missing slices or uneven spacing (steps of %.4g to %.4g mm): resampled from %lld slices to %lld "
             "at %.4g mm, linearly along the normal",
             s->path, st->series, least, most, (long long)n, (long long)m, step);
    s->notice = st->notice;
    return SEGRT_OK;
}

/* The slices of the series, sorted, with the geometry and the dtype. */
static sg_status build_slices(sg_source *s, dicom_state *st)
{
    int64_t n = 0;
    for (size_t i = 0; i < st->n_files; i++)
        n += st->files[i].h.frames;
    if (!(st->slices = sg_calloc((size_t)n, sizeof *st->slices)))
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory for %lld slices", s->path, (long long)n);
    st->n_slices = n;
    const sg_dcm_header *h0 = &st->files[0].h;
    double X[3], Y[3], N[3] = {0, 0, 1};
    bool oriented = h0->has_orientation;
    for (int a = 0; a < 3; a++) {
        X[a] = h0->orientation[a];
        Y[a] = h0->orientation[3 + a];
    }
    int64_t k = 0;
    bool positioned = true;
    for (size_t i = 0; i < st->n_files; i++) {
        const sg_dcm_header *h = &st->files[i].h;
        for (int32_t f = 0; f < h->frames; f++, k++) {
            dcm_slice *sl = &st->slices[k];
            sl->file = (int32_t)i;
            sl->frame = f;
            const double *o = h->frame_orientation ? h->frame_orientation + 6 * f : h->orientation;
            if (h->has_orientation != h0->has_orientation)
                oriented = false;
            for (int a = 0; a < 6 && oriented; a++)
                if (fabs(o[a] - h0->orientation[a]) > 1e-4)
                    return sg_error(SEGRT_ERROR_INVALID_MODEL,
                                    "%s: %s: mixed orientations: %s (frame %d) is not oriented as %s", s->path,
                                    st->series, st->files[i].path, (int)f + 1, st->files[0].path);
            sl->slope = h->frame_rescale ? h->frame_rescale[2 * f] : h->slope;
            sl->intercept = h->frame_rescale ? h->frame_rescale[2 * f + 1] : h->intercept;
            if (!isfinite(sl->slope) || !isfinite(sl->intercept))
                return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: a rescale that is not finite", st->files[i].path);
            if (h->frame_position)
                memcpy(sl->pos, h->frame_position + 3 * f, sizeof sl->pos);
            else if (h->has_position)
                memcpy(sl->pos, h->position, sizeof sl->pos);
            else
                positioned = false;
        }
    }
    /* The normal, from orientation cosines that must be unit and orthogonal. */
    if (oriented) {
        double lx = sqrt(dot3(X, X)), ly = sqrt(dot3(Y, Y));
        if (fabs(lx - 1) > 1e-3 || fabs(ly - 1) > 1e-3 || fabs(dot3(X, Y)) > 1e-3)
            return sg_error(SEGRT_ERROR_INVALID_MODEL,
                            "%s: %s: ImageOrientationPatient is not two orthogonal unit vectors", s->path, st->series);
        for (int a = 0; a < 3; a++)
            X[a] /= lx, Y[a] /= ly;
        N[0] = X[1] * Y[2] - X[2] * Y[1];
        N[1] = X[2] * Y[0] - X[0] * Y[2];
        N[2] = X[0] * Y[1] - X[1] * Y[0];
    }
    /* A multi-frame file without per-frame positions: RT Dose's offsets
     * along the normal, or frames stacked at the slice spacing the file
     * states; in file order with no geometry where it has no position and
     * orientation. */
    bool stacked = st->n_files == 1 && n > 1 && !h0->frame_position;
    if (stacked) {
        double step = h0->spacing_between > 0 ? h0->spacing_between : h0->thickness > 0 ? h0->thickness : 1.0;
        positioned = oriented && h0->has_position;
        for (int64_t z = 0; positioned && z < n; z++) {
            double off = h0->frame_offsets ? h0->frame_offsets[z] : (double)z * step;
            for (int a = 0; a < 3; a++)
                st->slices[z].pos[a] = h0->position[a] + off * N[a];
        }
    }
    if (n > 1 && !stacked && (!positioned || !oriented))
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "%s: %s: %lld slices without ImagePositionPatient and ImageOrientationPatient to order them",
                        s->path, st->series, (long long)n);
    sg_source_info *in = &s->info;
    sg_geometry *g = &in->geometry;
    double sp0 = h0->has_spacing && h0->spacing[0] > 0 ? h0->spacing[0] : 1.0;
    double sp1 = h0->has_spacing && h0->spacing[1] > 0 ? h0->spacing[1] : 1.0;
    double step = h0->spacing_between > 0 ? h0->spacing_between : h0->thickness > 0 ? h0->thickness : 1.0;
    if (positioned && oriented) {
        for (int64_t z = 0; z < n; z++)
            st->slices[z].proj = dot3(st->slices[z].pos, N);
        qsort(st->slices, (size_t)n, sizeof *st->slices, cmp_proj);
        if (n > 1) {
            double *steps = malloc(sizeof(double) * (size_t)(n - 1));
            if (!steps)
                return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory", s->path);
            for (int64_t z = 0; z + 1 < n; z++)
                steps[z] = st->slices[z + 1].proj - st->slices[z].proj;
            qsort(steps, (size_t)(n - 1), sizeof *steps, cmp_double);
            double median = steps[(n - 1) / 2], least = steps[0], most = steps[n - 2];
            free(steps);
            bool uneven = false;
            for (int64_t z = 0; z + 1 < n; z++) {
                const dcm_slice *a = &st->slices[z], *b = &st->slices[z + 1];
                double d = b->proj - a->proj;
                const char *fa = st->files[a->file].path, *fb = st->files[b->file].path;
                if (d < 1e-3 || !(median > 1e-3))
                    return sg_error(SEGRT_ERROR_INVALID_MODEL,
                                    "%s: %s: two slices at one position (%.4g mm along the normal): %s and %s (a 4-D "
                                    "or multi-echo series?)",
                                    s->path, st->series, a->proj, fa, fb);
                if (d > 1.5 * median && !s->allow_uneven)
                    return sg_error(SEGRT_ERROR_INVALID_MODEL,
                                    "%s: %s: missing slice(s): a gap of %.4g mm between %s and %s, the median step "
                                    "is %.4g mm (allow_uneven, --allow-uneven, resamples to even spacing)",
                                    s->path, st->series, d, fa, fb, median);
                if (fabs(d - median) > 0.01 * median + 1e-4) {
                    if (!s->allow_uneven)
                        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                                        "%s: %s: uneven slice spacing: a step of %.4g mm between %s and %s, the "
                                        "median is %.4g mm (allow_uneven, --allow-uneven, resamples to even spacing)",
                                        s->path, st->series, d, fa, fb, median);
                    uneven = true;
                }
                double off = 0;
                for (int c = 0; c < 3; c++) {
                    double e = b->pos[c] - a->pos[c] - d * N[c];
                    off += e * e;
                }
                if (sqrt(off) > 0.01 * d + 1e-3)
                    return sg_error(SEGRT_ERROR_INVALID_MODEL,
                                    "%s: %s: slice positions do not advance along the slice normal (gantry tilt or "
                                    "a sheared series): %s to %s",
                                    s->path, st->series, fa, fb);
            }
            step = median;
            if (uneven)
                SG_TRY(plan_grid(s, st, median, least, most));
        }
        g->known = true;
        for (int a = 0; a < 3; a++) {
            g->origin[a] = st->slices[0].pos[a];
            g->direction[a][0] = X[a];
            g->direction[a][1] = Y[a];
            g->direction[a][2] = N[a];
        }
    }
    in->format = "dicom";
    in->n_dims = 3;
    in->channels = st->samples;
    in->n_levels = 1;
    in->dims[0][0] = st->blend ? st->n_grid : n, in->dims[0][1] = st->rows, in->dims[0][2] = st->cols;
    in->spacing[0] = step, in->spacing[1] = sp0, in->spacing[2] = sp1;
    in->tile[0] = 1, in->tile[1] = st->rows, in->tile[2] = st->cols;
    /* The dtype rule of the header comment. */
    sg_dtype stored = st->sample_bytes == 1   ? (st->is_signed ? SEGRT_DTYPE_INT8 : SEGRT_DTYPE_UINT8)
                      : st->sample_bytes == 2 ? (st->is_signed ? SEGRT_DTYPE_INT16 : SEGRT_DTYPE_UINT16)
                                              : (st->is_signed ? SEGRT_DTYPE_INT32 : SEGRT_DTYPE_INT64);
    bool identity = true, whole = true;
    double lo = st->is_signed ? -ldexp(1, st->bits_stored - 1) : 0;
    double hi = st->is_signed ? ldexp(1, st->bits_stored - 1) - 1 : ldexp(1, st->bits_stored) - 1;
    bool fits16 = true;
    for (int64_t z = 0; z < n; z++) {
        const dcm_slice *sl = &st->slices[z];
        if (sl->slope != 1 || sl->intercept != 0)
            identity = false;
        if (sl->slope != floor(sl->slope) || sl->intercept != floor(sl->intercept))
            whole = false;
        double a = lo * sl->slope + sl->intercept, b = hi * sl->slope + sl->intercept;
        if (a < -32768 || a > 32767 || b < -32768 || b > 32767)
            fits16 = false;
    }
    if (st->samples > 1)
        in->dtype = stored;
    else if (st->blend)
        in->dtype = st->sample_bytes == 4 ? SEGRT_DTYPE_FLOAT64 : SEGRT_DTYPE_FLOAT32;
    else if (identity)
        in->dtype = stored;
    else if (whole && fits16)
        in->dtype = SEGRT_DTYPE_INT16;
    else
        in->dtype = st->sample_bytes == 4 ? SEGRT_DTYPE_FLOAT64 : SEGRT_DTYPE_FLOAT32;
    return SEGRT_OK;
}

/* What a SEG references: each sorted slice's instance, and the study of
 * the first slice's file. */
static sg_status keep_refs(sg_source *s, dicom_state *st)
{
    if (!(st->refs = sg_calloc((size_t)st->n_slices, sizeof *st->refs)))
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory", s->path);
    for (int64_t k = 0; k < st->n_slices; k++) {
        const dcm_slice *sl = &st->slices[k];
        const sg_dcm_header *h = &st->files[sl->file].h;
        sg_dcm_slice_ref *r = &st->refs[k];
        memcpy(r->sop_class, h->sop_class, sizeof r->sop_class);
        memcpy(r->sop_instance, h->sop_instance, sizeof r->sop_instance);
        r->frame = h->frames > 1 ? sl->frame + 1 : 0;
        memcpy(r->position, sl->pos, sizeof r->position);
    }
    sg_dicom_refs *d = &st->dicom_refs;
    char err[512];
    const char *first = st->files[st->slices[0].file].path;
    if (sg_dcm_read_study(first, &d->study, err, sizeof err) != SG_DCM_OK)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: %s", first, err);
    d->slices = st->refs;
    d->n_slices = st->n_slices;
    d->resampled = st->blend != NULL;
    memcpy(d->orientation, st->files[0].h.orientation, sizeof d->orientation);
    d->thickness = st->files[0].h.thickness;
    return SEGRT_OK;
}

const struct sg_dicom_refs *sg_source_dicom_refs(const sg_source *s)
{
    return s && s->ops == &dicom_ops ? &((const dicom_state *)s->state)->dicom_refs : NULL;
}

sg_status sg_source_open_dicom(sg_source *s, const char *const *paths, size_t n)
{
    dicom_state *st = sg_calloc(1, sizeof *st);
    if (!st)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory opening the series", s->path);
    s->ops = &dicom_ops;
    s->state = st;
    s->max_all_bytes = (uint64_t)64 << 30;
    path_list list = {0};
    bool listed;
    sg_status rc = gather(s, paths, n, &list, &listed);
    dcm_file *files = NULL;
    size_t n_files = 0, skipped = 0;
    if (rc == SEGRT_OK)
        rc = read_headers(s, &list, listed, &files, &n_files, &skipped);
    st->files = files;
    st->n_files = n_files;
    list_free(&list);
    if (rc != SEGRT_OK)
        return rc;
    if (n_files == 0)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: no DICOM image among %zu file(s)", s->path, skipped);
    series_entry *e = NULL;
    size_t k = 0;
    SG_TRY(series_of(s, files, n_files, &e, &k));
    size_t chosen = 0;
    if (s->series_uid) {
        while (chosen < k && strcmp(e[chosen].uid, s->series_uid) != 0)
            chosen++;
        if (chosen == k) {
            char lead[200];
            snprintf(lead, sizeof lead, "no series %.80s; the series are", s->series_uid);
            rc = series_error(s, SEGRT_ERROR_INVALID_ARGUMENT, lead, e, k);
            free(e);
            return rc;
        }
    } else if (k > 1) {
        char lead[128];
        snprintf(lead, sizeof lead, "%zu DICOM series; choose one by its UID (series_uid, --series UID)", k);
        rc = series_error(s, SEGRT_ERROR_INVALID_ARGUMENT, lead, e, k);
        free(e);
        return rc;
    }
    /* Keep the chosen series' files only, in order. */
    const char *uid = e[chosen].uid;
    char keep[SG_DCM_TEXT];
    snprintf(keep, sizeof keep, "%s", uid);
    free(e);
    size_t w = 0;
    for (size_t i = 0; i < n_files; i++) {
        if (strcmp(files[i].h.series_uid, keep) == 0) {
            files[w++] = files[i];
        } else {
            free(files[i].path);
            sg_dcm_header_free(&files[i].h);
        }
    }
    st->n_files = w;
    snprintf(st->series, sizeof st->series, "series %s", keep[0] ? keep : "(no SeriesInstanceUID)");
    SG_TRY(check_files(s, st));
    SG_TRY(build_slices(s, st));
    return keep_refs(s, st);
}

#endif
