// What map_ops.cc and map_spatial.cc share: the refusal of an attribute
// value lms cannot express, and the mappers of the convolution family,
// pooling, normalisation and Resize that the table in map_ops.cc names.
#pragma once

#include <onnx/onnx_pb.h>

#include <string_view>

#include "absl/status/status.h"
#include "onnx/importer.h"

namespace lms::onnx_import {

using NodeProto = ::onnx::NodeProto;

// InvalidArgument naming the node, "attribute <attr>=<value> not supported;
// supported: <supported>".
absl::Status refuse_attr(const NodeProto& n, std::string_view attr, std::string_view value,
                         std::string_view supported);

absl::Status map_conv(Importer& im, const NodeProto& n);
absl::Status map_conv_transpose(Importer& im, const NodeProto& n);
absl::Status map_max_pool(Importer& im, const NodeProto& n);
absl::Status map_batch_norm(Importer& im, const NodeProto& n);
absl::Status map_instance_norm(Importer& im, const NodeProto& n);
absl::Status map_layer_norm(Importer& im, const NodeProto& n);
absl::Status map_resize(Importer& im, const NodeProto& n);
absl::Status map_avg_pool(Importer& im, const NodeProto& n);
absl::Status map_pad(Importer& im, const NodeProto& n);
absl::Status map_einsum(Importer& im, const NodeProto& n);
absl::Status map_global_avg_pool(Importer& im, const NodeProto& n);

}  // namespace lms::onnx_import
