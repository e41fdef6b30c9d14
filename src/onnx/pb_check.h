/* A bounded walk over protobuf wire format before protobuf-c parses it.
 *
 * protobuf-c's unpacker recurses once per nested message with no depth
 * limit, so a hostile file of a few megabytes of nested headers would
 * overflow the stack. This walk follows the message descriptors, rejects
 * nesting deeper than max_depth and reports truncation with the byte offset,
 * which protobuf-c does not. */
#ifndef SG_ONNX_PB_CHECK_H
#define SG_ONNX_PB_CHECK_H

#include "core/status.h"

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

sg_status sg_pb_check(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t size,
                      int max_depth);

#endif
