/* Tensor data kept in files beside the model (ONNX "external data"). */
#ifndef SG_ONNX_EXTERNAL_DATA_H
#define SG_ONNX_EXTERNAL_DATA_H

#include "core/status.h"

#include <stddef.h>
#include <stdint.h>

/* Reads size bytes at offset from the file `location`, which must be a
 * relative path that stays inside base_dir (after resolving symbolic links).
 * tensor names the tensor in messages. */
sg_status sg_external_data_read(const char *base_dir, const char *location, int64_t offset,
                                size_t size, const char *tensor, void *dst);

#endif
