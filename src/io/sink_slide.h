/* The pyramidal tiled BigTIFF writer behind sink.h's pyramid option
 * (sink_slide.c). Private to src/io. */
#ifndef SG_IO_SINK_SLIDE_H
#define SG_IO_SINK_SLIDE_H

#include "core/file.h"
#include "io/sink.h"

#include <stdint.h>

typedef struct sg_slide_writer sg_slide_writer;

/* Checks d's pyramid fields (2-D, uint8 or uint16, 1 to 4 channels, tiles
 * of 16 to 4096 in steps of 16, mpp both known or both 0) and starts the
 * file in o; INVALID_ARGUMENT or UNSUPPORTED naming o's path otherwise. */
sg_status sg_slide_writer_open(sg_output *o, const sg_sink_desc *d, sg_slide_writer **out);
/* The next row of level 0, interleaved (channels per pixel). */
sg_status sg_slide_writer_row(sg_slide_writer *w, const uint8_t *row);
/* Appends the reduced levels, ends the file (every row must be in) and
 * frees w; the caller commits o. */
sg_status sg_slide_writer_finish(sg_slide_writer *w);
/* Frees w and removes its scratch files; the caller discards o. NULL is
 * fine. */
void sg_slide_writer_free(sg_slide_writer *w);

#endif
