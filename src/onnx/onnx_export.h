/* Graph IR -> ONNX protobuf: the inverse of onnx_import.
 *
 * Plan files keep the optimized graph as an ONNX ModelProto and load it back
 * through sg_onnx_import, so that one hardened loader reads both user models
 * and segrt's own files. The export holds what that loader reads:
 *
 *   - ir_version, an opset import of the default domain (g->opset),
 *     producer name and version, metadata_props;
 *   - graph inputs with dtype and declared shape (known dims as dim_value,
 *     symbolic ones as dim_param with the symbol's name, unnamed unknown
 *     dims as empty dimensions);
 *   - graph outputs likewise, with the current (inferred) shape where none
 *     was declared;
 *   - every live node in order, op_type from the op table, attributes of
 *     every kind segrt stores (INT, FLOAT, STRING, INTS, FLOATS, STRINGS,
 *     TENSOR), "" for omitted optional inputs and outputs (trailing
 *     omitted inputs are left out, as the loader drops them);
 *   - an initializer, as little-endian raw_data, for every constant (a value
 *     with data that is not a graph input and that no live node computes)
 *     that a live node reads or that is a graph output.
 *
 * Not exported: dead nodes, symbol bindings (g->sym_size: shapes bound for
 * optimization must be bound again after loading), value_info for
 * intermediate values (the loader infers them), g->path, and aliasing
 * between constants that share one blob (each becomes its own initializer).
 * Graph inputs that carry data stay graph inputs; the data is not stored. */
#ifndef SG_ONNX_EXPORT_H
#define SG_ONNX_EXPORT_H

#include "graph/ir.h"

#include <stddef.h>
#include <stdint.h>

/* Serializes g into a new buffer (*out, *size; the caller frees *out).
 * Weights are packed straight from the graph's blobs, so the only large
 * allocation is the output. Errors: UNSUPPORTED (the model would exceed
 * protobuf's 2 GiB limit), INVALID_ARGUMENT (a graph the loader could not
 * read back: duplicate or empty value names, a value nothing defines, no
 * opset, constants whose data does not match their shape),
 * OUT_OF_MEMORY. */
sg_status sg_onnx_export(const sg_graph *g, uint8_t **out, size_t *size);

#endif
