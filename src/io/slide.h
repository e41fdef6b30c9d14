/* Whole-slide images read through OpenSlide (source_slide.c): what a slide
 * holds beside its pyramid, its associated images (label, macro,
 * thumbnail: the names are the vendor's) and its properties (OpenSlide's
 * "openslide.*" names, e.g. openslide.objective-power, openslide.vendor,
 * openslide.mpp-x, and the vendor's own). Every function here takes a
 * source opened by source_slide.c; for a source of another format the
 * count is 0, the property NULL and the read INVALID_ARGUMENT. */
#ifndef SG_IO_SLIDE_H
#define SG_IO_SLIDE_H

#include "io/source.h"

#include <stddef.h>
#include <stdint.h>

/* Whether OpenSlide takes path as a slide of a vendor other than
 * "generic-tiff" (what sg_source_open sends to the slide source); false in
 * a build without OpenSlide. */
bool sg_slide_detect(const char *path);

/* The slide opener for a source whose path is set (source.c): fills ops,
 * info (format "slide", vendor), state and max_all_bytes. Takes any file
 * OpenSlide reads, generic TIFF included; UNSUPPORTED for a file OpenSlide
 * does not take or in a build without OpenSlide. */
sg_status sg_source_open_slide_in(sg_source *s);

/* The number of associated images. */
size_t sg_slide_associated_count(const sg_source *s);

/* Associated image i (below the count): its name (owned by the source)
 * and size. */
sg_status sg_slide_associated_info(const sg_source *s, size_t i, const char **name, int64_t *height,
                                   int64_t *width);

/* Associated image name as RGB uint8, planar (R plane, G, B: 3 x height x
 * width bytes at dst, the size sg_slide_associated_info gives), transparent
 * pixels white as in read_region. */
sg_status sg_slide_read_associated(sg_source *s, const char *name, uint8_t *dst);

/* The value of property name, owned by the source; NULL where the slide
 * has none. */
const char *sg_slide_property(const sg_source *s, const char *name);

/* A level's JPEG tiles as complete JPEG streams, for a decoder beside
 * OpenSlide (slide_tiles.c): for a level stored as a tiled TIFF directory
 * of 8-bit RGB or YCbCr JPEG tiles (Aperio SVS, generic tiled TIFF and
 * the other TIFF-based formats), each tile whole (edge tiles too: the
 * level's pixels are the tiles' top-left part). */
typedef struct sg_slide_tiles sg_slide_tiles;

typedef struct sg_slide_tiles_info {
    int64_t tile_w, tile_h; /* pixels, multiples of 16 */
    int64_t across, down;   /* tiles per row and per column */
    bool ycbcr;             /* YCbCr, decoded to RGB; else the components are R, G, B as stored */
    size_t max_bytes;       /* the longest stream sg_slide_tiles_read gives */
} sg_slide_tiles_info;

/* The tiles of level `level` of s (a source of any format: the file is
 * read with libtiff). UNSUPPORTED, with the reason, for a level stored
 * otherwise (another codec, strips, missing tiles, not a TIFF): the
 * caller reads it through s. */
sg_status sg_slide_tiles_open(const sg_source *s, int32_t level, sg_slide_tiles **out);
const sg_slide_tiles_info *sg_slide_tiles_get_info(const sg_slide_tiles *t);

/* Tile (row, col) as one complete JPEG stream into dst (info.max_bytes at
 * least): *len its bytes. INVALID_MODEL for a tile whose stream is not a
 * 8-bit JPEG frame of the tile's size and 3 components
 * (RGB tiles: none subsampled), so a decoder never writes past the tile's
 * place. Safe from several threads at once (reads by offset). */
sg_status sg_slide_tiles_read(const sg_slide_tiles *t, int64_t row, int64_t col, uint8_t *dst, size_t *len);

/* NULL is fine. */
void sg_slide_tiles_close(sg_slide_tiles *t);

#endif
