/* ONNX protobuf -> graph IR. */
#ifndef SG_ONNX_IMPORT_H
#define SG_ONNX_IMPORT_H

#include "graph/ir.h"

#include <stddef.h>

/* The default-domain opsets segrt implements. */
#define SG_ONNX_OPSET_MIN 13
#define SG_ONNX_OPSET_MAX 23

/* Parses a serialized ModelProto into a new graph with nodes in topological
 * order, shapes inferred as far as the model allows. base_dir is the folder
 * external data files are resolved against (NULL: external data is an
 * error). name appears in messages. Messages do not carry the file name;
 * callers put it in front. */
sg_status sg_onnx_import(const void *data, size_t size, const char *base_dir, const char *name,
                         sg_graph **out);

/* Reads and imports a file; messages start with the path. */
sg_status sg_onnx_import_file(const char *path, sg_graph **out);

#endif
