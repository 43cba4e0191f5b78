// Mapping of ONNX nodes onto the ops of docs/ops.md (Note [ONNX import]).
// Each mapper checks every attribute whose value lms cannot express
// exactly and refuses it naming the attribute; nothing is approximated.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <functional>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/broadcast.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "onnx/import_pass.h"
#include "onnx/importer.h"
#include "onnx/map_ops_internal.h"

namespace lms::onnx_import {

absl::Status refuse_attr(const NodeProto& n, std::string_view attr, std::string_view value,
                         std::string_view supported) {
  return Importer::error(n, absl::StrCat("attribute ", to_absl(attr), "=", to_absl(value),
                                         " not supported; supported: ", to_absl(supported)));
}

namespace {

absl::Status map_unary(Importer& im, const NodeProto& n, OpKind op, Attrs a) {
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(n, 0));
  return im.add(n, op, n.output(0), {x}, std::move(a)).status();
}

absl::Status map_binary(Importer& im, const NodeProto& n, OpKind op) {
  LMS_ASSIGN_OR_RETURN(TensorId a, im.tensor_input(n, 0));
  LMS_ASSIGN_OR_RETURN(TensorId b, im.tensor_input(n, 1));
  const Shape& sa = im.graph.tensor(a).shape;
  const Shape& sb = im.graph.tensor(b).shape;
  const std::optional<Shape> y = broadcast_shape(sa, sb);
  if (!y || (*y != sa && *y != sb)) {
    std::string clamped;
    for (int k = 0; k < 2; ++k) {
      if (auto it = im.clamped_slices.find(n.input(k)); it != im.clamped_slices.end()) {
        clamped = absl::StrCat("; ", it->second);
      }
    }
    return Importer::error(
        n, absl::StrCat("broadcasting '", n.input(0), "' ", list_str(sa), " with '", n.input(1),
                        "' ", list_str(sb),
                        " not supported; lms add / mul broadcast one operand to the other's "
                        "shape (NumPy rules: aligned at the last dimension, each equal or 1)",
                        clamped));
  }
  return im.add(n, op, n.output(0), {a, b}, {}).status();
}

// Div of a tensor by a one-element constant: lms scale by its inverse
// (ViT's q / sqrt(head_dim) before the scores). Anything else is refused.
absl::Status map_div(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(const Value* divisor, im.input(n, 1));
  if (divisor == nullptr || !divisor->constant || divisor->tensor != kNoTensor ||
      divisor->constant->numel() != 1 || divisor->constant->at(0) == 0) {
    return Importer::error(n,
                           "supported: a tensor divided by a nonzero one-element constant "
                           "(lms scale), or constants only (folded)");
  }
  return map_unary(im, n, OpKind::kScale, {{"factor", 1.0 / divisor->constant->at(0)}});
}

absl::Status map_concat(Importer& im, const NodeProto& n) {
  std::vector<TensorId> in;
  for (int k = 0; k < n.input_size(); ++k) {
    LMS_ASSIGN_OR_RETURN(TensorId t, im.tensor_input(n, k));
    in.push_back(t);
  }
  return im.add(n, OpKind::kConcat, n.output(0), in, {{"axis", attr_int(n, "axis", 1)}}).status();
}

absl::Status map_softmax(Importer& im, const NodeProto& n) {
  return map_unary(im, n, OpKind::kSoftmax, {{"axis", attr_int(n, "axis", -1)}});
}

// Static Slice with step 1 on each listed axis: one lms slice per axis that
// is cut, the last named after the ONNX output.
absl::Status map_slice(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(n, 0));
  const Shape dims = im.graph.tensor(x).shape;
  LMS_ASSIGN_OR_RETURN(Const starts, im.const_input(n, 1, "starts"));
  LMS_ASSIGN_OR_RETURN(Const ends, im.const_input(n, 2, "ends"));
  LMS_RETURN_IF_ERROR(check_slice_lengths(im, n));
  std::vector<std::array<int64_t, 4>> cuts;  // axis, begin, size, step
  for (int64_t k = 0; k < starts.numel(); ++k) {
    int64_t axis = k, step = 1;
    if (im.has_input(n, 3)) {
      LMS_ASSIGN_OR_RETURN(Const axes, im.const_input(n, 3, "axes"));
      axis = int64_t(axes.at(k));
      if (axis < 0) axis += int64_t(dims.size());
    }
    if (im.has_input(n, 4)) {
      LMS_ASSIGN_OR_RETURN(Const steps, im.const_input(n, 4, "steps"));
      step = int64_t(steps.at(k));
    }
    if (axis < 0 || axis >= int64_t(dims.size())) return Importer::error(n, "axes out of range");
    if (step != 1) {  // x[..., b::step, ...] over the whole axis (Swin's patch merging)
      const int64_t b = int64_t(starts.at(k)), dim = dims[axis];
      if (step < 1 || b < 0 || b >= step || ends.at(k) < double(dim) || dim % step != 0) {
        return Importer::error(
            n,
            absl::StrCat("steps=", step, " from ", b, " along axis ", axis, " of ", list_str(dims),
                         " not supported; supported: 1, or a step that "
                         "divides the axis, from a start below it to the end"));
      }
      cuts.push_back({axis, b, dim / step, step});
      continue;
    }
    const double dim = double(dims[axis]);
    auto clampi = [&](double v) { return int64_t(std::clamp(v < 0 ? v + dim : v, 0.0, dim)); };
    const int64_t b = clampi(starts.at(k)), e = clampi(ends.at(k));
    if (ends.at(k) > dim && ends.at(k) < double(INT64_MAX) / 2) {
      // An end past the axis but not ONNX's "to the end" sentinel.
      im.clamped_slices[n.output(0)] =
          absl::StrCat("'", n.output(0), "' is a Slice of '", n.input(0), "' ", list_str(dims),
                       " to ", int64_t(ends.at(k)), " along axis ", axis, ", which has only ",
                       dims[axis], " (a sequence longer than a position table?)");
    }
    if (e <= b)
      return Importer::error(n, "the slice is empty; lms tensors have no empty dimension");
    if (b != 0 || e != dims[axis]) cuts.push_back({axis, b, e - b, 1});
  }
  if (cuts.empty()) {
    im.alias(n.output(0), n.input(0));
    return absl::OkStatus();
  }
  std::vector<int64_t> shape(dims.begin(), dims.end());
  for (size_t c = 0; c < cuts.size(); ++c) {
    const auto [axis, begin, size, step] = cuts[c];
    const std::string out = c + 1 == cuts.size() ? n.output(0) : absl::StrCat(n.output(0), "/", c);
    if (step == 1) {
      Attrs a = {{"begin", begin}, {"size", size}, {"axis", axis}};
      LMS_ASSIGN_OR_RETURN(x, im.add(n, OpKind::kSlice, out, {x}, a));
      shape[axis] = size;
      continue;
    }
    // Every step-th element from `begin`: the axis split into [size, step],
    // one column of it sliced, the column's axis dropped (copies).
    std::vector<int64_t> split = shape;
    split[axis] = size;
    split.insert(split.begin() + axis + 1, step);
    const std::string base = absl::StrCat(n.output(0), "/", c);
    LMS_ASSIGN_OR_RETURN(x, im.add(n, OpKind::kReshape, base + "/split", {x}, {{"shape", split}}));
    LMS_ASSIGN_OR_RETURN(x, im.add(n, OpKind::kSlice, base + "/column", {x},
                                   {{"begin", begin}, {"size", int64_t{1}}, {"axis", axis + 1}}));
    shape[axis] = size;
    LMS_ASSIGN_OR_RETURN(x, im.add(n, OpKind::kReshape, out, {x}, {{"shape", shape}}));
  }
  return absl::OkStatus();
}

// Expand (bidirectional broadcast to a constant shape): x added to zeros
// of the result's shape (a fill node, no persistent bytes), so that x's
// gradient is summed over the broadcast axes (ViT's class token expanded
// over the batch).
absl::Status map_expand(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(n, 0));
  LMS_ASSIGN_OR_RETURN(Const shape, im.const_input(n, 1, "shape"));
  const Shape dims = im.graph.tensor(x).shape;
  std::vector<int64_t> to;
  for (int64_t k = 0; k < shape.numel(); ++k) to.push_back(int64_t(shape.at(k)));
  const std::optional<Shape> y = broadcast_shape(dims, to);
  if (!y) {
    return Importer::error(n, absl::StrCat("input ", list_str(dims), " does not broadcast to ",
                                           list_str(to), " (NumPy rules)"));
  }
  if (*y == dims) {
    im.alias(n.output(0), n.input(0));
    return absl::OkStatus();
  }
  LMS_ASSIGN_OR_RETURN(TensorId zeros, im.add(n, OpKind::kFill, absl::StrCat(n.output(0), "/zeros"),
                                              {}, {{"shape", *y}, {"value", 0.0}}));
  return im.add(n, OpKind::kAdd, n.output(0), {zeros, x}, {}).status();
}

// Split along `axis` into the sizes of input 1 (opset 13 on), of the
// attribute `split` (before 13), or into equal parts, one per output (the
// last one smaller where opset 18's num_outputs does not divide the axis):
// one lms slice per output, an alias where an output is the whole input.
absl::Status map_split(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(n, 0));
  const Shape dims = im.graph.tensor(x).shape;
  const int64_t rank = static_cast<int64_t>(dims.size());
  int64_t axis = attr_int(n, "axis", 0);
  if (axis < -rank || axis >= rank) {
    return refuse_attr(
        n, "axis", absl::StrCat(axis),
        absl::StrCat("in [", -rank, ", ", rank - 1, "] for an input of rank ", rank));
  }
  if (axis < 0) axis += rank;
  const int64_t dim = dims[axis];
  const int64_t parts = n.output_size();
  std::vector<int64_t> sizes;
  if (im.has_input(n, 1)) {
    LMS_ASSIGN_OR_RETURN(Const split, im.const_input(n, 1, "split"));
    for (int64_t k = 0; k < split.numel(); ++k) sizes.push_back(int64_t(split.at(k)));
  } else if (find_attr(n, "split") != nullptr) {
    sizes = attr_ints(n, "split");
  } else {
    const int64_t chunk = (dim + parts - 1) / parts;
    for (int64_t k = 0; k < parts; ++k) sizes.push_back(std::min(chunk, dim - k * chunk));
  }
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  if (int64_t(sizes.size()) != parts || total != dim ||
      std::any_of(sizes.begin(), sizes.end(), [](int64_t s) { return s <= 0; })) {
    return Importer::error(
        n, absl::StrCat("split sizes [", absl::StrJoin(sizes, ","), "] for ", parts,
                        " outputs along axis ", axis, " of [", absl::StrJoin(dims, ","), "]",
                        "; allowed: one positive size per output, summing to ", dim));
  }
  int64_t begin = 0;
  for (int64_t k = 0; k < parts; ++k) {
    if (sizes[k] == dim) {
      im.alias(n.output(k), n.input(0));
    } else {
      LMS_RETURN_IF_ERROR(im.add(n, OpKind::kSlice, n.output(k), {x},
                                 {{"begin", begin}, {"size", sizes[k]}, {"axis", axis}})
                              .status());
    }
    begin += sizes[k];
  }
  return absl::OkStatus();
}

// ReduceMean (axes an attribute through opset 17): over everything without
// keepdims gives a scalar; over listed axes, one lms reduce_mean per axis (a
// mean of equal-sized means is the mean), then, without keepdims, a reshape
// that drops them (x.mean(dim=(2, 3)), global pooling as users write it).
absl::Status map_reduce_mean(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(n, 0));
  const Shape dims = im.graph.tensor(x).shape;
  const int64_t rank = int64_t(dims.size());
  std::vector<int64_t> axes = attr_ints(n, "axes");
  const int64_t keep = attr_int(n, "keepdims", 1);
  if (keep != 0 && keep != 1) return refuse_attr(n, "keepdims", absl::StrCat(keep), "0 or 1");
  for (int64_t& a : axes) {
    if (a < -rank || a >= rank) {
      return refuse_attr(
          n, "axes", list_str(attr_ints(n, "axes")),
          absl::StrCat("axes in [", -rank, ", ", rank - 1, "] for a tensor of rank ", rank));
    }
    a = a < 0 ? a + rank : a;
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) {
    return refuse_attr(n, "axes", list_str(attr_ints(n, "axes")), "distinct axes");
  }
  const bool all = axes.empty() || int64_t(axes.size()) == rank;
  if (all && keep == 0) return im.add(n, OpKind::kReduceMean, n.output(0), {x}, {}).status();
  if (axes.empty())
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  for (size_t c = 0; c < axes.size(); ++c) {
    const bool last = c + 1 == axes.size() && keep == 1;
    const std::string out = last ? n.output(0) : absl::StrCat(n.output(0), "/", c);
    LMS_ASSIGN_OR_RETURN(x, im.add(n, OpKind::kReduceMean, out, {x}, {{"axis", axes[c]}}));
  }
  if (keep == 1) return absl::OkStatus();
  std::vector<int64_t> kept;
  for (int64_t a = 0; a < rank; ++a) {
    if (!std::binary_search(axes.begin(), axes.end(), a)) kept.push_back(dims[a]);
  }
  return im.add(n, OpKind::kReshape, n.output(0), {x}, {{"shape", kept}}).status();
}

// Gather of int64 ids (a graph tensor) from a float [V,D] table along axis 0.
//
// Rows `at` (constant indices of shape idx.dims) of a float [V,D] graph
// tensor x, a trainable table as Swin's relative position bias: y =
// one_hot @ x, reshaped to idx.dims + [D], one_hot a constant [K,V] of 0 and
// 1 (K = at.size()). Each y element is its row's single product (1 * x,
// plus zeros), so the values are x's exactly; the table's gradient
// one_hot^T @ dy sums each row's dy as PyTorch's index backward does. lms
// holds persistent tensors in float32 only, so the indices cannot be an
// int64 constant for the embedding op.
absl::Status gather_rows_by_one_hot(Importer& im, const NodeProto& n, TensorId x, const Const& idx,
                                    const std::vector<int64_t>& at) {
  const Shape dims = im.graph.tensor(x).shape;
  const int64_t k = static_cast<int64_t>(at.size()), v = dims[0];
  auto values = std::make_shared<std::vector<float>>(static_cast<size_t>(k * v), 0.0f);
  for (int64_t r = 0; r < k; ++r) (*values)[static_cast<size_t>(r * v + at[r])] = 1.0f;
  const TensorId one_hot = im.graph.optimizer_state(im.lms_name(n.output(0) + "/one_hot"), {k, v},
                                                    Init::from_values(std::move(values)));
  if (one_hot == kNoTensor) return Importer::error(n, std::string(im.graph.status().message()));
  const bool flat = idx.dims.size() == 1;
  const std::string rows = flat ? n.output(0) : absl::StrCat(n.output(0), "/rows");
  LMS_ASSIGN_OR_RETURN(TensorId y, im.add(n, OpKind::kMatMul, rows, {one_hot, x},
                                          {{"trans_a", int64_t{0}}, {"trans_b", int64_t{0}}}));
  if (flat) return absl::OkStatus();
  std::vector<int64_t> shape(idx.dims.begin(), idx.dims.end());
  shape.push_back(dims[1]);
  return im.add(n, OpKind::kReshape, n.output(0), {y}, {{"shape", shape}}).status();
}

// Gather of constant indices from a float graph tensor: one index (a
// scalar, which drops the axis, or [1]) or a run of consecutive ones is a
// slice (ViT's x[:, 0], the class token's output).
absl::Status map_gather_constant_indices(Importer& im, const NodeProto& n, const Const& idx) {
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(n, 0));
  const Shape dims = im.graph.tensor(x).shape;
  const int64_t rank = static_cast<int64_t>(dims.size());
  int64_t axis = attr_int(n, "axis", 0);
  if (axis < -rank || axis >= rank) {
    return refuse_attr(n, "axis", absl::StrCat(axis),
                       absl::StrCat("in [", -rank, ", ", rank - 1, "] for data of rank ", rank));
  }
  if (axis < 0) axis += rank;
  std::vector<int64_t> at;
  for (int64_t k = 0; k < idx.numel(); ++k) {
    int64_t i = int64_t(idx.at(k));
    if (i < 0) i += dims[axis];
    if (i < 0 || i >= dims[axis]) {
      return Importer::error(
          n, absl::StrCat("index ", int64_t(idx.at(k)), " is out of range [", -dims[axis], ", ",
                          dims[axis], ") of axis ", axis, " of ", list_str(dims)));
    }
    at.push_back(i);
  }
  bool run = !at.empty() && idx.dims.size() <= 1;
  for (size_t k = 1; k < at.size() && run; ++k) run = at[k] == at[k - 1] + 1;
  if (!run) {
    if (axis == 0 && rank == 2 && !at.empty()) return gather_rows_by_one_hot(im, n, x, idx, at);
    return Importer::error(n, absl::StrCat("constant indices must be one index or a run of "
                                           "consecutive ones (a slice), or any rows of a "
                                           "[V,D] table (axis 0); got data ",
                                           list_str(dims), ", axis ", axis));
  }
  const bool drop_axis = idx.dims.empty();
  const std::string sliced = drop_axis ? absl::StrCat(n.output(0), "/slice") : n.output(0);
  LMS_ASSIGN_OR_RETURN(
      TensorId y, im.add(n, OpKind::kSlice, sliced, {x},
                         {{"begin", at.front()}, {"size", int64_t(at.size())}, {"axis", axis}}));
  if (!drop_axis) return absl::OkStatus();
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != axis) shape.push_back(dims[d]);
  }
  return im.add(n, OpKind::kReshape, n.output(0), {y}, {{"shape", shape}}).status();
}

absl::Status map_gather(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(const Value* data, im.input(n, 0));
  LMS_ASSIGN_OR_RETURN(const Value* ids, im.input(n, 1));
  if (data == nullptr || ids == nullptr) return Importer::error(n, "two inputs are required");
  // Constant indices into a float graph tensor, or into a trainable table
  // (an initializer not made a graph tensor yet; constant data and indices
  // were folded before).
  const bool float_data = data->tensor != kNoTensor
                              ? im.graph.tensor(data->tensor).dtype == DType::kFloat32
                              : data->constant && data->constant->dtype == DType::kFloat32;
  if (ids->constant && ids->tensor == kNoTensor && float_data) {
    const Const idx = *ids->constant;
    return map_gather_constant_indices(im, n, idx);
  }
  const bool table = data->constant && data->constant->dtype == DType::kFloat32 &&
                     data->constant->dims.size() == 2;
  if (!table || ids->tensor == kNoTensor || attr_int(n, "axis", 0) != 0 ||
      im.graph.tensor(ids->tensor).dtype != DType::kInt64) {
    return Importer::error(n,
                           "supported: int64 ids (a graph tensor) gathered along axis 0 from a "
                           "constant float [V,D] table (an embedding), or constants only");
  }
  LMS_ASSIGN_OR_RETURN(TensorId t, im.tensor_input(n, 0));
  return im.add(n, OpKind::kEmbedding, n.output(0), {ids->tensor, t}, {}).status();
}

// Cast of a float tensor to float is the identity; other casts of run-time
// tensors have no lms op.
absl::Status map_cast(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(n, 0));
  const int64_t to = attr_int(n, "to", 0);
  const bool is_float = to == ::onnx::TensorProto::FLOAT;
  if (!is_float || im.graph.tensor(x).dtype != DType::kFloat32) {
    return refuse_attr(n, "to", absl::StrCat(to), "float on a float tensor (identity)");
  }
  im.alias(n.output(0), n.input(0));
  return absl::OkStatus();
}

// Input B of Gemm / MatMul as linear's w, and whether linear reads it
// transposed (trans_b); the transpose of a constant is read through its
// source with trans_b flipped (Note [Weight-side Transpose]).
struct LinearWeight {
  TensorId w = kNoTensor;
  bool trans_b = false;
};

absl::StatusOr<LinearWeight> linear_weight(Importer& im, const NodeProto& n, bool trans_b) {
  LMS_ASSIGN_OR_RETURN(const Value* b, im.input(n, 1));
  if (b == nullptr) return Importer::error(n, "input 1 (B) is required");
  LinearWeight out;
  if (const std::string source = b->transpose_of; !source.empty()) {
    LMS_ASSIGN_OR_RETURN(out.w, im.tensor_of(n, 1, source));
    out.trans_b = !trans_b;
  } else {
    LMS_ASSIGN_OR_RETURN(out.w, im.tensor_input(n, 1));
    out.trans_b = trans_b;
  }
  if (const Shape& s = im.graph.tensor(out.w).shape; s.size() != 2) {
    return Importer::error(n, absl::StrCat("input 1 (B) has shape ", list_str(s),
                                           "; supported: rank 2 (lms linear's weight)"));
  }
  return out;
}

// Input 0 (A) of Gemm: rank 2, as linear's x[N,C].
absl::StatusOr<TensorId> linear_input(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(TensorId a, im.tensor_input(n, 0));
  if (const Shape& s = im.graph.tensor(a).shape; s.size() != 2) {
    return Importer::error(n, absl::StrCat("input 0 (A) has shape ", list_str(s),
                                           "; supported: rank 2 (lms linear multiplies [N,C] "
                                           "by a matrix)"));
  }
  return a;
}

// Gemm's C as linear's bias b[cols]: C of shape [cols] as it is, [1,cols]
// through a reshape (so the gradient reaches C in its own shape).
absl::StatusOr<TensorId> gemm_bias(Importer& im, const NodeProto& n, int64_t cols) {
  if (!im.has_input(n, 2)) return kNoTensor;
  LMS_ASSIGN_OR_RETURN(TensorId c, im.tensor_input(n, 2));
  const Shape s = im.graph.tensor(c).shape;
  if (s == Shape{cols}) return c;
  if (s != Shape{1, cols}) {
    return Importer::error(n, absl::StrCat("input 2 (C) has shape ", list_str(s),
                                           "; supported: [N] or [1,N] with N = ", cols,
                                           " (a bias per output column), or absent"));
  }
  return im.add(n, OpKind::kReshape, absl::StrCat(n.output(0), "/bias"), {c},
                {{"shape", Shape{cols}}});
}

// Gemm with alpha = beta = 1 and transA = 0 is linear (docs/ops.md).
absl::Status map_gemm(Importer& im, const NodeProto& n) {
  if (double alpha = attr_float(n, "alpha", 1.0); alpha != 1.0) {
    return refuse_attr(n, "alpha", absl::StrCat(alpha), "1 (lms linear does not scale)");
  }
  if (double beta = attr_float(n, "beta", 1.0); beta != 1.0 && im.has_input(n, 2)) {
    return refuse_attr(n, "beta", absl::StrCat(beta), "1 (lms linear adds the bias unscaled)");
  }
  if (int64_t t = attr_int(n, "transA", 0); t != 0) {
    return refuse_attr(n, "transA", absl::StrCat(t), "0 (lms linear reads x[N,C] as it is)");
  }
  const int64_t trans_b = attr_int(n, "transB", 0);
  if (trans_b != 0 && trans_b != 1) {
    return refuse_attr(n, "transB", absl::StrCat(trans_b), "0 or 1");
  }
  LMS_ASSIGN_OR_RETURN(TensorId a, linear_input(im, n));
  LMS_ASSIGN_OR_RETURN(LinearWeight w, linear_weight(im, n, trans_b == 1));
  const Shape& ws = im.graph.tensor(w.w).shape;
  LMS_ASSIGN_OR_RETURN(TensorId bias, gemm_bias(im, n, w.trans_b ? ws[0] : ws[1]));
  std::vector<TensorId> in = {a, w.w};
  if (bias != kNoTensor) in.push_back(bias);
  return im.add(n, OpKind::kLinear, n.output(0), in, {{"trans_b", int64_t{w.trans_b}}}).status();
}

// MatMul (numpy.matmul) of operands of rank 2 to 4. A rank-2 A by a rank-2
// B is linear without a bias, as Gemm; any other is lms matmul, its batch
// dimensions broadcast. A transposed constant B is read through its source
// with trans_b (Note [Weight-side Transpose]).
absl::Status map_matmul(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(TensorId a, im.tensor_input(n, 0));
  LMS_ASSIGN_OR_RETURN(const Value* bv, im.input(n, 1));
  if (bv == nullptr) return Importer::error(n, "input 1 (B) is required");
  LinearWeight b;
  if (const std::string source = bv->transpose_of; !source.empty()) {
    LMS_ASSIGN_OR_RETURN(b.w, im.tensor_of(n, 1, source));
    b.trans_b = true;
  } else {
    LMS_ASSIGN_OR_RETURN(b.w, im.tensor_input(n, 1));
  }
  const Shape as = im.graph.tensor(a).shape, bs = im.graph.tensor(b.w).shape;
  for (const auto& [k, s] : {std::pair{0, as}, std::pair{1, bs}}) {
    if (s.size() < 2 || s.size() > 4) {
      return Importer::error(
          n, absl::StrCat("input ", k, k == 0 ? " (A)" : " (B)", " has shape ", list_str(s),
                          "; supported: rank 2 to 4 (lms matmul; a 1-D "
                          "operand has no lms op)"));
    }
  }
  if (as.size() == 2 && bs.size() == 2) {
    return im.add(n, OpKind::kLinear, n.output(0), {a, b.w}, {{"trans_b", int64_t{b.trans_b}}})
        .status();
  }
  return im
      .add(n, OpKind::kMatMul, n.output(0), {a, b.w},
           {{"trans_a", int64_t{0}}, {"trans_b", int64_t{b.trans_b}}})
      .status();
}

// Clip's bound (input 1 min, 2 max): a constant scalar from opset 11, an
// attribute before (Clip-6). Absent, the float limit: Clip-6's default and
// what ONNX Runtime uses for an absent input, so only infinities differ
// from an unbounded side (they become +-FLT_MAX).
absl::StatusOr<double> clip_bound(Importer& im, const NodeProto& n, int k) {
  const std::string_view name = k == 1 ? "min" : "max";
  const double absent = k == 1 ? -double(FLT_MAX) : double(FLT_MAX);
  if (im.opset < 11) return attr_float(n, name, absent);
  if (!im.has_input(n, k)) return absent;
  LMS_ASSIGN_OR_RETURN(Const c, im.const_input(n, k, name));
  if (c.numel() != 1) {
    return Importer::error(n, absl::StrCat(to_absl(name), " (input ", k, ") holds ", c.numel(),
                                           " values; supported: one (a scalar)"));
  }
  return c.at(0);
}

// Clip onto lms clip (ReLU6 is Clip(0, 6)).
absl::Status map_clip(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(double lo, clip_bound(im, n, 1));
  LMS_ASSIGN_OR_RETURN(double hi, clip_bound(im, n, 2));
  return map_unary(im, n, OpKind::kClip, {{"min", lo}, {"max", hi}});
}

// The seed of an imported Dropout: FNV-1a (64-bit) of the node's name (its
// first output's where it has none), so an import of the same file draws
// the same masks; PyTorch's generator cannot be reproduced.
int64_t dropout_seed(const NodeProto& n) {
  const std::string& name = n.name().empty() && n.output_size() > 0 ? n.output(0) : n.name();
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  return static_cast<int64_t>(h);
}

// Dropout in training mode with ratio > 0 (opset 12+: ratio and
// training_mode are constant inputs) onto lms dropout; the identity cases
// were removed before (fold.cc). Output 1, the mask, may be unused (as
// torch.onnx.export leaves it); a node or graph output reading it is
// refused, since lms never stores a mask.
absl::Status map_dropout(Importer& im, const NodeProto& n) {
  if (n.output_size() > 1 && !n.output(1).empty()) {
    im.not_computed[n.output(1)] =
        absl::StrCat("the mask of Dropout '", n.output(0),
                     "' is not supported: lms regenerates the dropout mask and never stores it");
  }
  double ratio = 0.5;
  if (im.has_input(n, 1)) {
    LMS_ASSIGN_OR_RETURN(Const r, im.const_input(n, 1, "ratio"));
    if (r.numel() != 1) {
      return Importer::error(n, absl::StrCat("ratio (input 1) holds ", r.numel(),
                                             " values; supported: one (a scalar)"));
    }
    ratio = r.at(0);
  }
  if (!(ratio >= 0.0 && ratio < 1.0)) {
    return Importer::error(n, absl::StrCat("ratio ", ratio, " is outside [0, 1)"));
  }
  return map_unary(im, n, OpKind::kDropout, {{"ratio", ratio}, {"seed", dropout_seed(n)}});
}

// Unsqueeze / Squeeze of a graph tensor (constant axes) onto lms reshape:
// a copy (Swin's attention adds its mask through x.unsqueeze(1)). Of a
// constant, they were folded.
absl::Status map_unsqueeze(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(n, 0));
  const Shape& s = im.graph.tensor(x).shape;
  LMS_ASSIGN_OR_RETURN(std::vector<int64_t> dims,
                       reshaped_dims(im, n, std::vector<int64_t>(s.begin(), s.end())));
  return im.add(n, OpKind::kReshape, n.output(0), {x}, {{"shape", dims}}).status();
}

// Flatten onto lms reshape, [d0*..*d(axis-1), d(axis)*..*d(r-1)]: a copy
// (docs/ops.md, reshape).
absl::Status map_flatten(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(n, 0));
  const Shape s = im.graph.tensor(x).shape;
  const int64_t rank = int64_t(s.size());
  int64_t axis = attr_int(n, "axis", 1);
  if (axis < -rank || axis > rank) {
    return refuse_attr(n, "axis", absl::StrCat(axis),
                       absl::StrCat("[-", rank, ", ", rank, "] for input ", list_str(s)));
  }
  if (axis < 0) axis += rank;
  Shape y = {1, 1};
  for (int64_t d = 0; d < rank; ++d) y[d < axis ? 0 : 1] *= s[d];
  return im.add(n, OpKind::kReshape, n.output(0), {x}, {{"shape", y}}).status();
}

// Reshape of a run-time tensor by a constant shape onto lms reshape (a
// copy); a Reshape of a constant is folded (fold.cc).
absl::Status map_reshape(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(n, 0));
  LMS_ASSIGN_OR_RETURN(Const spec, im.const_input(n, 1, "shape"));
  std::vector<int64_t> dims;
  for (int64_t k = 0; k < spec.numel(); ++k) dims.push_back(int64_t(spec.at(k)));
  LMS_ASSIGN_OR_RETURN(Shape y, resolve_reshape(n, im.graph.tensor(x).shape, dims));
  return im.add(n, OpKind::kReshape, n.output(0), {x}, {{"shape", y}}).status();
}

// Transpose of a run-time tensor onto lms transpose (a copy); perm absent:
// the dims reversed. A Transpose of a constant is folded (fold.cc), and
// one of a rank-2 constant read as Gemm / MatMul input B becomes transB.
absl::Status map_transpose(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(n, 0));
  const auto rank = static_cast<int64_t>(im.graph.tensor(x).shape.size());
  LMS_ASSIGN_OR_RETURN(const std::vector<int64_t> perm, transpose_perm(n, rank));
  if (rank > SumToPlan::kMaxRank) {
    return Importer::error(
        n, absl::StrCat("input 0 has rank ", rank, "; supported: rank 1 to ", SumToPlan::kMaxRank));
  }
  return im.add(n, OpKind::kTranspose, n.output(0), {x}, {{"perm", perm}}).status();
}

using Mapper = std::function<absl::Status(Importer&, const NodeProto&)>;

const std::map<std::string, Mapper, std::less<>>& mappers() {
  static const auto* m = new std::map<std::string, Mapper, std::less<>>{
      {"AveragePool", map_avg_pool},
      {"BatchNormalization", map_batch_norm},
      {"Cast", map_cast},
      {"Clip", map_clip},
      {"Concat", map_concat},
      {"Conv", map_conv},
      {"Dropout", map_dropout},
      {"Einsum", map_einsum},
      {"ConvTranspose", map_conv_transpose},
      {"Flatten", map_flatten},
      {"Expand", map_expand},
      {"Gather", map_gather},
      {"Gemm", map_gemm},
      {"GlobalAveragePool", map_global_avg_pool},
      {"HardSigmoid",
       [](Importer& im, const NodeProto& n) {
         return map_unary(
             im, n, OpKind::kHardSigmoid,
             {{"alpha", attr_float(n, "alpha", 0.2)}, {"beta", attr_float(n, "beta", 0.5)}});
       }},
      {"HardSwish",
       [](Importer& im, const NodeProto& n) { return map_unary(im, n, OpKind::kHardSwish, {}); }},
      {"InstanceNormalization", map_instance_norm},
      {"LayerNormalization", map_layer_norm},
      {"LeakyRelu",
       [](Importer& im, const NodeProto& n) {
         return map_unary(im, n, OpKind::kLeakyRelu, {{"alpha", attr_float(n, "alpha", 0.01)}});
       }},
      {"MatMul", map_matmul},
      {"MaxPool", map_max_pool},
      {"Div", map_div},
      {"Mul", [](Importer& im, const NodeProto& n) { return map_binary(im, n, OpKind::kMul); }},
      {"Add", [](Importer& im, const NodeProto& n) { return map_binary(im, n, OpKind::kAdd); }},
      {"ReduceMean", map_reduce_mean},
      {"Reshape", map_reshape},
      {"Relu",
       [](Importer& im, const NodeProto& n) { return map_unary(im, n, OpKind::kRelu, {}); }},
      {"Resize", map_resize},
      {"Sigmoid",
       [](Importer& im, const NodeProto& n) { return map_unary(im, n, OpKind::kSigmoid, {}); }},
      {"Slice", map_slice},
      {"Tanh",
       [](Importer& im, const NodeProto& n) { return map_unary(im, n, OpKind::kTanh, {}); }},
      {"Softmax", map_softmax},
      {"Split", map_split},
      {"Squeeze", map_unsqueeze},
      {"Unsqueeze", map_unsqueeze},
      {"Pad", map_pad},
      {"Transpose", map_transpose},
  };
  return *m;
}

// The ops of the nodes the fusions write (import_pass.h).
const std::map<std::string, Mapper, std::less<>>& fused_mappers() {
  static const auto* m = new std::map<std::string, Mapper, std::less<>>{
      {"Attention", map_fused_attention},
      {"Gelu", map_fused_gelu},
  };
  return *m;
}

}  // namespace

std::string_view supported_ops() {
  return "Add (one operand may broadcast to the other's shape), AveragePool (ceil_mode 1 with "
         "count_include_pad 0, or a last window inside the padding), "
         "BatchNormalization (training mode, or eval_mode), Cast "
         "(float to "
         "float), Clip (constant min / max), Concat, Conv (grouped and depthwise too), "
         "ConvTranspose (group 1), Div (by a one-element constant, a scale), Dropout (training "
         "mode, ratio in (0, 1); seeded from the node "
         "name), Einsum (a batched matrix product of two operands), Expand (to a constant shape), "
         "Flatten (a copy), Gather (embedding; or one or "
         "consecutive constant indices, a slice; or any constant rows of a [V,D] table), GELU as "
         "exported at opsets 14 to 17 "
         "(Div or Mul by a constant / Erf / Add 1 / Mul by x / Mul 0.5, one gelu node), "
         "scaled dot-product attention as exported from PyTorch (MatMul(q, Transpose(k)) / Mul "
         "or Div by a constant, or q scaled first / optional Add of a causal mask, a constant or "
         "computed from the positions / Softmax / MatMul by v, 4-D or 3-D as "
         "nn.MultiheadAttention, one attention node), Gemm "
         "(alpha = beta = 1, "
         "transA 0), GlobalAveragePool, HardSigmoid, HardSwish, InstanceNormalization, "
         "LayerNormalization (last axis, with B; also fused from PyTorch's opset-14 "
         "decomposition), LeakyRelu, MatMul (A and B of rank 2 to 4, batch dimensions broadcast), "
         "MaxPool (ceil_mode too), Mul (broadcast as Add), Pad (zeros on the spatial dims, read "
         "by an AveragePool: its padding), ReduceMean (keepdims 0 or 1), Relu, "
         "Reshape (constant shape; a copy), "
         "Resize (nearest, or linear with half-pixel centres; "
         "integer scales), Sigmoid, Slice (static; step 1, or a step dividing the axis over all of "
         "it), Softmax, Split (constant sizes or "
         "equal parts), Squeeze and Unsqueeze (a copy), Tanh, Transpose (rank 1 to 8; a "
         "copy); folded: Constant, "
         "ConstantOfShape, Shape and Gather / Unsqueeze / Squeeze / Reshape / Concat / Slice / "
         "Cast / Add / Sub / Mul / Div / Equal / Less / Greater / Where / Range / Transpose of "
         "constants (a rank-2 constant "
         "transposed into "
         "Gemm / MatMul input B becomes transB); removed: Identity, Dropout (ratio 0 or not "
         "training), all-zero Pad, AveragePool with kernel 1, one-input Concat";
}

absl::Status map_node(Importer& im, const NodeProto& n) {
  const auto& table = n.domain() == kFusedDomain ? fused_mappers() : mappers();
  auto it = table.find(n.op_type());
  if (it != table.end()) return it->second(im, n);
  return Importer::error(
      n, absl::StrCat("op not supported by lms; supported: ", to_absl(supported_ops())));
}

}  // namespace lms::onnx_import
