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

#endif
