/* Image files: PNG, JPEG and TIFF in, PNG and TIFF out.
 *
 * Reading goes through the field's libraries (libpng, libjpeg-turbo through
 * the libjpeg API, libtiff), so any file those read, segrt reads: 8- and
 * 16-bit grey, grey+alpha, RGB and RGBA; PNG palettes, low-bit grey and
 * tRNS expanded to full pixels; TIFF strips and tiles, contiguous and
 * separate planes, uncompressed or with any codec the system's libtiff has.
 * A multi-page TIFF (a microscopy z-stack) is read as a volume, its pages
 * the slowest axis, when every page (IFD) of its main chain has the same
 * width, height, samples, bits and sample format; SubIFDs are not pages.
 * Pages that differ, and pyramids (reduced-resolution pages: NewSubfileType
 * bit 0, or a page smaller than page 0 both ways), are refused naming the
 * page: no page is ever dropped. Pixel values are kept raw: no gamma,
 * colour profile or EXIF orientation is applied.
 *
 * Before anything the size of the image is allocated, each reader checks
 * what the header claims against what the file can hold: a PNG's rows
 * against its IDAT bytes times deflate's largest ratio, a JPEG's 8x8
 * blocks against its bits, a TIFF's strips and tiles against the file's
 * end and their codec's ratio (the caps and their reasons are in
 * image_png.c, image_jpeg.c and image_tiff.c). So a small file never costs
 * much more memory than its bytes could decode to.
 *
 * The format is told by the file's first bytes, never by its name. Errors
 * name the file: IO (cannot open or read), UNSUPPORTED (not PNG, JPEG or
 * TIFF, or a well-formed file of a kind segrt does not take: CMYK, 12-bit
 * JPEG, float or signed TIFF samples, TIFF pages that differ, pyramids...),
 * INVALID_MODEL (malformed or truncated; dims of zero; pixels over
 * SG_IMAGE_MAX_BYTES or more than the file's compressed data can decode
 * to, refused before anything that size is allocated). No library prints
 * to stderr, and none of their global handlers is touched, so readers are
 * thread-safe. */
#ifndef SG_IO_IMAGE_H
#define SG_IO_IMAGE_H

#include "core/file.h"
#include "core/tensor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most pixel bytes (width * height * depth * channels * bytes per
 * sample) one image or volume may take: 4 GiB. */
#define SG_IMAGE_MAX_BYTES ((uint64_t)4 << 30)

/* The most decoded bytes per byte of compressed data granted to a codec
 * with no bound of its own (arithmetic-coded JPEG, LZMA, WebP, LERC...):
 * 32768, zstd's bound (a 4-byte RLE block gives at most 128 KiB), the
 * loosest of the codecs that have one. Real images stay far below it
 * (xz turns zeros into 1/6800 of their size); a file past it is degenerate
 * or hostile. */
#define SG_IMAGE_UNBOUNDED_RATIO 32768

typedef struct sg_image {
    int32_t width, height;
    int32_t depth;    /* pages of a volume (a multi-page TIFF); 1 for a 2-D image */
    int32_t channels; /* 1 (grey), 2 (grey+alpha), 3 (RGB), 4 (RGBA) */
    int32_t bits;     /* 8 or 16 */
    void *pixels;     /* malloc'd, depth x height x width x channels, native-endian uint8/uint16 */
} sg_image;

typedef enum sg_image_format { SG_IMAGE_PNG, SG_IMAGE_JPEG, SG_IMAGE_TIFF, SG_IMAGE_UNKNOWN } sg_image_format;

/* What a read of a file would give, from its headers alone (see
 * sg_image_probe). */
typedef struct sg_image_info {
    sg_image_format format;
    int32_t width, height, depth, channels, bits; /* as sg_image_read's image will have them */
    uint64_t pixel_bytes;   /* the pixels sg_image_read allocates */
    uint64_t scratch_bytes; /* an upper estimate of what the read holds beside them at once (its buffers
                               and the libraries' that grow with the image; not the file, which is
                               mapped) */
} sg_image_info;

/* The format whose signature head starts with (n bytes; 8 are enough):
 * PNG's 8-byte signature, JPEG's SOI marker, TIFF or BigTIFF in either
 * byte order. */
sg_image_format sg_image_format_of_bytes(const void *head, size_t n);

/* The format path's extension names (.png, .jpg, .jpeg, .tif, .tiff, any
 * case), for choosing what to write; UNKNOWN for anything else. */
sg_image_format sg_image_format_of_name(const char *path);

/* True when path opens and starts with a signature sg_image_read takes;
 * false on any error (and the thread's error message is left alone). */
bool sg_image_is_image_file(const char *path);

/* Reads the image at path into *out (pixels owned by the caller: free with
 * sg_image_free). Errors as in the header comment. */
sg_status sg_image_read(const char *path, sg_image *out);

/* What sg_image_read(path) would give, reading only headers (and, for
 * PNG and TIFF, the lists of where the compressed data lies), with every
 * check the read makes before it allocates: a file the probe passes fails
 * later only for bad compressed data. For estimating a job's memory before
 * reading anything. Errors as sg_image_read's. */
sg_status sg_image_probe(const char *path, sg_image_info *out);

/* Reads an image held in memory (n bytes); name is used in messages. */
sg_status sg_image_read_memory(const void *bytes, size_t n, const char *name, sg_image *out);

/* As sg_image_read_memory, refusing images whose pixels would take more than
 * max_bytes (at most SG_IMAGE_MAX_BYTES), and capping what the libraries
 * allocate on their own to about that: the fuzzer's form. */
sg_status sg_image_read_memory_max(const void *bytes, size_t n, const char *name, uint64_t max_bytes,
                                   sg_image *out);

/* sg_image_probe for bytes in memory, and with a caller's cap: the same
 * answers as sg_image_read_memory and sg_image_read_memory_max. */
sg_status sg_image_probe_memory(const void *bytes, size_t n, const char *name, sg_image_info *out);
sg_status sg_image_probe_memory_max(const void *bytes, size_t n, const char *name, uint64_t max_bytes,
                                    sg_image_info *out);

/* Writes img to path as the extension says: .png (8/16-bit grey, grey+alpha,
 * RGB, RGBA) or .tif/.tiff (the same, deflate-compressed with horizontal
 * prediction, a volume's slices as its pages, the slowest axis, as
 * sg_image_read reads them; BigTIFF past 2 GiB of pixels), whole or not at
 * all (an output of core/file.h, opened, written and committed). Errors:
 * INVALID_ARGUMENT (an extension that is not PNG or TIFF, a malformed img),
 * UNSUPPORTED (.jpg: segrt writes no lossy format; a volume to .png),
 * IO (cannot write). */
sg_status sg_image_write(const char *path, const sg_image *img);

/* The same into an open output, which the caller commits or discards. */
sg_status sg_image_write_to(sg_output *o, const sg_image *img);

/* Whether path's extension names an image format segrt writes, as
 * sg_image_write would answer before writing anything. */
sg_status sg_image_check_writable_name(const char *path);

/* Frees img's pixels and zeroes it. NULL or an empty image is fine. */
void sg_image_free(sg_image *img);

/* The image as a float32 1 x C x H x W tensor, or 1 x C x D x H x W for a
 * volume (depth > 1), out->data malloc'd and owned by the caller, with the
 * raw sample values (0..255 or 0..65535). The alpha channel of grey+alpha
 * and RGBA is dropped unless keep_alpha. */
sg_status sg_image_to_tensor(const sg_image *img, bool keep_alpha, sg_tensor *out);

/* A label map as an 8-bit (uint8 labels) or 16-bit (uint16) grey image,
 * pixels copied. labels is H x W, or has leading dims of 1 in front of
 * H x W (N=1 x 1 x H x W from segrt's sliding window); from rank 5 on,
 * N=1 x 1 x D x H x W (a 3-D job's) is a volume of D pages.
 * INVALID_ARGUMENT for another dtype, a leading dim other than 1, or an
 * empty map. */
sg_status sg_image_from_labels(const sg_tensor *labels, sg_image *out);

/* The height and width of a label map: the last two dims of labels, all
 * dims before them 1, both > 0. INVALID_ARGUMENT otherwise (any dtype is
 * accepted here; callers check theirs). */
sg_status sg_image_label_dims(const sg_tensor *labels, int64_t *height, int64_t *width);

/* --- shared by the readers and writers (image.c, image_*.c) ------------- */

/* Checks the dims (each > 0 and within int32; pixel bytes at most
 * max_bytes), then allocates out->pixels and fills in the rest of out
 * (depth 1). INVALID_MODEL naming name and the dims when they are refused. */
sg_status sg_image_alloc(int64_t width, int64_t height, int32_t channels, int32_t bits, uint64_t max_bytes,
                         const char *name, sg_image *out);

/* Fills info's width to bits and pixel_bytes from the dims after checking
 * them as sg_image_alloc does (depth pages; scratch_bytes is left alone);
 * INVALID_MODEL naming name and the dims when they are refused. */
sg_status sg_image_check_dims(int64_t width, int64_t height, int64_t depth, int32_t channels, int32_t bits,
                              uint64_t max_bytes, const char *name, sg_image_info *info);

/* Allocates out->pixels for info's dims (already checked) and fills in the
 * rest of out. */
sg_status sg_image_alloc_info(const sg_image_info *info, const char *name, sg_image *out);

/* Bytes of one row, of one page and of all pixels of img. */
size_t sg_image_row_bytes(const sg_image *img);
size_t sg_image_page_bytes(const sg_image *img);
size_t sg_image_bytes(const sg_image *img);

/* The image info describes, for messages: "30000x30000x3, 8-bit (2.7 GB)",
 * "512x512x1, 40 pages, 16-bit (21.0 MB)". Returns buf. */
const char *sg_image_describe(const sg_image_info *info, char *buf, size_t cap);

/* n bytes in decimal units for messages: "68 bytes", "2.7 GB". Returns buf. */
const char *sg_image_format_bytes(uint64_t n, char *buf, size_t cap);

/* Copies a library's message into buf (cap bytes) as one line: newlines
 * and other control characters become spaces, trailing spaces are cut. */
void sg_image_one_line(char *buf, size_t cap, const char *msg);

/* Each decoder fills *info from the headers, with every check made before
 * the pixels are allocated (sg_image_check_dims, then what the file's data
 * can decode to); then, unless out is NULL (a probe), fills *out (zeroed
 * first). On an error, which names name, out->pixels is freed. A reader
 * added later keeps this contract: nothing the size of the claim is
 * allocated until the claim is checked, and the probe stops just there. */
sg_status sg_png_decode(const void *bytes, size_t n, const char *name, uint64_t max_bytes, sg_image_info *info,
                        sg_image *out);
sg_status sg_jpeg_decode(const void *bytes, size_t n, const char *name, uint64_t max_bytes, sg_image_info *info,
                         sg_image *out);
sg_status sg_tiff_decode_memory(const void *bytes, size_t n, const char *name, uint64_t max_bytes,
                                sg_image_info *info, sg_image *out);
/* Reads a TIFF by path (memory-mapped by libtiff, so that only the
 * directories and the pages' data are touched). */
sg_status sg_tiff_decode_file(const char *path, uint64_t max_bytes, sg_image_info *info, sg_image *out);

/* Each encoder writes img (already checked) into the open output o; errors
 * name o's destination. */
sg_status sg_png_encode(const sg_image *img, sg_output *o);
sg_status sg_tiff_encode(const sg_image *img, sg_output *o);

/* --- streaming, for region sources and sinks (source_image.c, sink.c) --- */

/* A PNG decoded row by row from bytes (which stay valid while it is
 * open), as sg_image_read would decode it: header is the probe's answer
 * for the same bytes, and the rows are sg_image_row_bytes of it. An
 * interlaced PNG cannot be streamed (its last pass fills every other
 * row): *interlaced is set, *out stays NULL, and the status is OK. */
typedef struct sg_png_rows sg_png_rows;
sg_status sg_png_rows_open(const void *bytes, size_t n, const char *name, const sg_image_info *header,
                           sg_png_rows **out, bool *interlaced);
/* The next row into row. Errors as sg_image_read's, naming the file. */
sg_status sg_png_rows_next(sg_png_rows *r, void *row);
void sg_png_rows_close(sg_png_rows *r);

/* A JPEG decoded scanline by scanline, as sg_png_rows (a progressive file
 * is buffered whole by libjpeg, as in the whole read). */
typedef struct sg_jpeg_rows sg_jpeg_rows;
sg_status sg_jpeg_rows_open(const void *bytes, size_t n, const char *name, const sg_image_info *header,
                            sg_jpeg_rows **out);
sg_status sg_jpeg_rows_next(sg_jpeg_rows *r, void *row);
void sg_jpeg_rows_close(sg_jpeg_rows *r);

/* A PNG written row by row into an output (shape: dims, channels and
 * bits; pixels unused; interleaved rows, host order): sg_png_encode is
 * this writer fed every row, so both write the same bytes. finish fails
 * (INVALID_ARGUMENT) when rows are missing; both finish and free free w. */
typedef struct sg_png_writer sg_png_writer;
sg_status sg_png_writer_open(sg_output *o, const sg_image *shape, sg_png_writer **out);
sg_status sg_png_writer_row(sg_png_writer *w, const void *row);
sg_status sg_png_writer_finish(sg_png_writer *w);
void sg_png_writer_free(sg_png_writer *w);

#endif
