/* A label map's regions as GeoJSON polygons, in the form QuPath's GeoJSON
 * import reads as classified annotations.
 *
 * Regions are 4-connected: the pixels of one label joined through shared
 * edges. A region so made is always one valid OGC polygon (its interior is
 * connected), whereas pixels joined only at a corner would need a ring that
 * touches itself, which GEOS (and so QuPath and shapely) calls invalid, or
 * a MultiPolygon. Holes follow the same rule: each hole is a 4-connected
 * part of everything else (other labels, label 0) that the region encloses,
 * so two hole pixels meeting at a corner are two holes touching at that
 * point, and a pocket meeting the outside only at a corner is a hole
 * touching the exterior ring there; OGC allows rings of one polygon to
 * touch at single points. Every ring is thus simple.
 *
 * The algorithm, in three passes over the map:
 *   1. Components: every pixel of a label > 0 gets the number of its
 *      4-connected region (flood fill with an explicit stack), numbered in
 *      the order of their first pixels in raster order.
 *   2. Rings: the region's boundary is the set of pixel edges between one of
 *      its pixels and a pixel not in it (or the map's outside), directed so
 *      that the region lies on their left in (x, y) coordinates. From each
 *      such edge along a pixel's top that no ring has taken yet, in raster
 *      order, the ring through it is followed edge by edge: at each corner
 *      it turns right when the pixel ahead on the right is in the region,
 *      else goes on when the pixel ahead on the left is, else turns left.
 *      Turning right first keeps two pixels of the region that meet at a
 *      corner on one side of the ring, which makes each ring the border with
 *      one 4-connected part of the complement, hence simple. Each ring
 *      starts at a corner (its first top edge in raster order has no top
 *      edge before it), and the first ring of a region is its exterior: the
 *      row above a region's first pixel holds none of its pixels, so that
 *      pixel's top edge borders the outside. Only the ring's start (a pixel
 *      number) is kept, in a list per region.
 *   3. Output: region by region, each ring is followed again from its start,
 *      its corners written as they come (so collinear vertices never appear),
 *      the first corner repeated to close it. With the region on the left,
 *      exteriors come out counter-clockwise and holes clockwise in (x, y),
 *      as RFC 7946 asks, for any positive scale.
 * Memory: the map of region numbers (4 bytes a pixel), a bit a pixel for
 * the top edges taken, the flood fill's stack (at most 4 bytes a pixel of
 * the largest region), 4 bytes a region and 8 a ring (its start, found
 * and then sorted by region); the polygons themselves are streamed to the
 * file, never held. */
#ifndef SG_PIPELINE_GEOJSON_H
#define SG_PIPELINE_GEOJSON_H

#include "core/status.h"

#include <stdint.h>

/* Writes the regions of every label but 0 of labels (height x width,
 * row-major) to path as a GeoJSON FeatureCollection, whole or not at all
 * (core/file.h's sg_output): one Feature per region, in the order of their
 * first pixels in raster order, its geometry a Polygon (exterior ring, then
 * holes) following the pixels' edges, in level-0 pixels: the corner at
 * column c, row r of the map is x = c * scale[1] + offset[1],
 * y = r * scale[0] + offset[0] (printed with %.17g, so exact for what a
 * double holds). Its properties:
 *   {"objectType": "annotation",
 *    "classification": {"name": NAME, "color": [r, g, b]}}
 * NAME is names[label] where label < n_names and that is not NULL, else
 * "class LABEL"; the colour colors[label] where label < n_colors, else the
 * overlay's palette (overlay.h's sg_overlay_color), so that the polygons
 * and the overlay picture agree. names and colors may be NULL with counts
 * 0. scale NULL means 1, offset NULL means 0.
 *
 * A map of zeros (or of no pixels: height or width 0) gives an empty
 * FeatureCollection. Errors name path: INVALID_ARGUMENT for a negative
 * height or width, NULL labels or path, a scale not finite and positive,
 * an offset not finite, corners' coordinates that overflow, a negative
 * count or NULL array with a positive count, a name that is not UTF-8, or
 * a map of 2^32 - 1 pixels or more; OUT_OF_MEMORY; IO when the file cannot be
 * written. */
sg_status sg_labels_write_geojson(const uint8_t *labels, int64_t height, int64_t width, const double scale[2],
                                  const double offset[2], const char *const *names, int32_t n_names,
                                  const uint8_t (*colors)[3], int32_t n_colors, const char *path);

#endif
