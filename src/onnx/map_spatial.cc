// The ONNX mappers of the convolution family, pooling, normalisation and
// Resize (Note [ONNX import]); map_ops.cc holds the rest and the table.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "onnx/importer.h"
#include "onnx/map_ops_internal.h"

namespace lms::onnx_import {
namespace {

bool all_equal(const std::vector<int64_t>& v, int64_t x) {
  return std::all_of(v.begin(), v.end(), [x](int64_t e) { return e == x; });
}

absl::StatusOr<Shape> input_shape(Importer& im, const NodeProto& n, int k) {
  LMS_ASSIGN_OR_RETURN(TensorId t, im.tensor_input(n, k));
  return im.graph.tensor(t).shape;
}

// Spatial rank r of x[N,C,S] for the convolution family and pooling.
absl::StatusOr<size_t> spatial_rank(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(Shape x, input_shape(im, n, 0));
  if (x.size() != 4 && x.size() != 5) {
    return Importer::error(n, absl::StrCat("input 0 has rank ", x.size(),
                                           "; lms supports 2-D (NCHW) and 3-D (NCDHW) only"));
  }
  return x.size() - 2;
}

// pads [b1..br, e1..er] -> symmetric per-dim pad; auto_pad NOTSET / VALID.
absl::StatusOr<std::vector<int64_t>> symmetric_pads(const NodeProto& n, size_t r) {
  const std::string auto_pad = attr_string(n, "auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID") {
    return refuse_attr(n, "auto_pad", auto_pad, "NOTSET, VALID (give explicit pads)");
  }
  std::vector<int64_t> pads = attr_ints(n, "pads");
  if (pads.empty() || auto_pad == "VALID") return std::vector<int64_t>(r, 0);
  for (size_t d = 0; d < r; ++d) {
    if (pads.size() != 2 * r || pads[d] != pads[d + r]) {
      return refuse_attr(n, "pads", list_str(pads),
                         "symmetric pads (begin = end per dimension; lms pads both sides alike)");
    }
  }
  pads.resize(r);
  return pads;
}

std::vector<int64_t> ints_or(const NodeProto& n, std::string_view name, size_t r, int64_t v) {
  std::vector<int64_t> a = attr_ints(n, name);
  return a.empty() ? std::vector<int64_t>(r, v) : a;
}

// A weight renamed onnx::* is the mark of a default (eval) export.
absl::Status check_exported_weight(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(const Value* w, im.input(n, 1));
  if (w != nullptr && w->initializer && n.input(1).rfind("onnx::", 0) == 0) {
    return Importer::error(
        n, absl::StrCat("weight '", n.input(1),
                        "' was renamed by the export: a default (eval) "
                        "export folds BatchNormalization into the convolutions; export with "
                        "training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False "
                        "(scripts/export_onnx.py)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TensorId>> conv_inputs(Importer& im, const NodeProto& n) {
  std::vector<TensorId> in;
  for (int k = 0; k < std::min(n.input_size(), 3); ++k) {
    if (!im.has_input(n, k)) continue;
    LMS_ASSIGN_OR_RETURN(TensorId t, im.tensor_input(n, k));
    in.push_back(t);
  }
  return in;
}

// Nearest Resize by integer factors is lms upsample when the sampling
// positions agree: asymmetric + floor, or the half-pixel modes with a
// rounding nearest_mode, both give y[i] = x[floor(i / s)] for integer s.
absl::Status check_nearest_modes(const NodeProto& n) {
  const std::string ct = attr_string(n, "coordinate_transformation_mode", "half_pixel");
  const std::string nm = attr_string(n, "nearest_mode", "round_prefer_floor");
  const bool half = ct == "half_pixel" || ct == "pytorch_half_pixel";
  const bool rounding = nm == "round_prefer_floor" || nm == "round_prefer_ceil";
  if ((ct == "asymmetric" && nm == "floor") || (half && rounding)) return absl::OkStatus();
  return refuse_attr(n, "coordinate_transformation_mode/nearest_mode", absl::StrCat(ct, "/", nm),
                     "asymmetric/floor, half_pixel or pytorch_half_pixel with round_prefer_floor "
                     "or round_prefer_ceil");
}

absl::StatusOr<std::vector<int64_t>> integer_scales(Importer& im, const NodeProto& n,
                                                    const Shape& x) {
  std::vector<double> scales;
  if (im.has_input(n, 2)) {
    LMS_ASSIGN_OR_RETURN(Const s, im.const_input(n, 2, "scales"));
    for (int64_t k = 0; k < s.numel(); ++k) scales.push_back(s.at(k));
  }
  if (scales.empty() && im.has_input(n, 3)) {
    LMS_ASSIGN_OR_RETURN(Const s, im.const_input(n, 3, "sizes"));
    for (int64_t k = 0; k < s.numel(); ++k) scales.push_back(s.at(k) / double(x.at(k)));
  }
  if (scales.size() != x.size()) return Importer::error(n, "needs scales or sizes for every dim");
  std::vector<int64_t> out;
  for (size_t d = 0; d < scales.size(); ++d) {
    const double s = scales[d];
    if (s < 1 || s != std::floor(s) || (d < 2 && s != 1)) {
      return Importer::error(n, absl::StrCat("scale ", s, " of dim ", d,
                                             " not supported; "
                                             "supported: 1 for N and C, integers >= 1 for the "
                                             "spatial dims"));
    }
    if (d >= 2) out.push_back(int64_t(s));
  }
  return out;
}

}  // namespace

// Grouped and depthwise convolution: lms's conv takes the group as it is
// (docs/ops.md); absent when 1, so the ungrouped kernels run.
absl::Status map_conv(Importer& im, const NodeProto& n) {
  LMS_RETURN_IF_ERROR(check_exported_weight(im, n));
  const int64_t group = attr_int(n, "group", 1);
  if (group < 1) return refuse_attr(n, "group", absl::StrCat(group), ">= 1");
  LMS_ASSIGN_OR_RETURN(size_t r, spatial_rank(im, n));
  LMS_ASSIGN_OR_RETURN(std::vector<int64_t> pad, symmetric_pads(n, r));
  LMS_ASSIGN_OR_RETURN(std::vector<TensorId> in, conv_inputs(im, n));
  Attrs a = {{"stride", ints_or(n, "strides", r, 1)},
             {"pad", pad},
             {"dilation", ints_or(n, "dilations", r, 1)}};
  if (group > 1) a["group"] = group;
  return im.add(n, OpKind::kConv, n.output(0), in, a).status();
}

absl::Status map_conv_transpose(Importer& im, const NodeProto& n) {
  LMS_RETURN_IF_ERROR(check_exported_weight(im, n));
  if (int64_t group = attr_int(n, "group", 1); group != 1) {
    return refuse_attr(n, "group", absl::StrCat(group), "1 (lms deconv has no groups)");
  }
  LMS_ASSIGN_OR_RETURN(size_t r, spatial_rank(im, n));
  if (auto d = attr_ints(n, "dilations"); !all_equal(d, 1)) {
    return refuse_attr(n, "dilations", list_str(d), "1 (lms deconv is dense)");
  }
  if (auto p = attr_ints(n, "output_padding"); !all_equal(p, 0)) {
    return refuse_attr(n, "output_padding", list_str(p), "0");
  }
  if (auto s = attr_ints(n, "output_shape"); !s.empty()) {
    return refuse_attr(n, "output_shape", list_str(s), "absent (give pads)");
  }
  LMS_ASSIGN_OR_RETURN(std::vector<int64_t> pad, symmetric_pads(n, r));
  LMS_ASSIGN_OR_RETURN(std::vector<TensorId> in, conv_inputs(im, n));
  Attrs a = {{"stride", ints_or(n, "strides", r, 1)}, {"pad", pad}};
  return im.add(n, OpKind::kDeconv, n.output(0), in, a).status();
}

absl::Status map_max_pool(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(size_t r, spatial_rank(im, n));
  if (n.output_size() > 1 && !n.output(1).empty()) {
    return Importer::error(n, "output 1 (Indices) not supported; lms max_pool has one output");
  }
  const int64_t ceil_mode = attr_int(n, "ceil_mode", 0);
  if (ceil_mode != 0 && ceil_mode != 1) {
    return refuse_attr(n, "ceil_mode", absl::StrCat(ceil_mode), "0 or 1");
  }
  if (auto d = attr_ints(n, "dilations"); !all_equal(d, 1)) {
    return refuse_attr(n, "dilations", list_str(d), "1");
  }
  if (int64_t s = attr_int(n, "storage_order", 0); s != 0) {
    return refuse_attr(n, "storage_order", absl::StrCat(s), "0");
  }
  LMS_ASSIGN_OR_RETURN(std::vector<int64_t> pad, symmetric_pads(n, r));
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(n, 0));
  Attrs a = {{"kernel", attr_ints(n, "kernel_shape")},
             {"stride", ints_or(n, "strides", r, 1)},
             {"pad", pad}};
  // PyTorch's ceil_mode rule (Note [Pooling ceil mode]): the models are its exports.
  if (ceil_mode == 1) a["ceil_mode"] = ceil_mode;
  return im.add(n, OpKind::kMaxPool, n.output(0), {x}, a).status();
}

// BatchNormalization onto batch_norm with its running statistics (inputs 3
// and 4, persistent tensors under their ONNX names). Training mode (opset
// 14+: training_mode; at 13, BatchNormalization-9, a node in training mode
// has more than one output) normalises with the batch statistics and
// training_graph adds the update of the running statistics at the step
// commit; OnnxImportOptions::eval_mode imports every node in eval mode
// (training = 0, normalising with the running statistics).
//
// ONNX's momentum weights the old value (running = running * m + batch *
// (1 - m), default 0.9) and torch.onnx.export writes 1 - PyTorch's momentum
// there, so lms's momentum (PyTorch's convention) is 1 - m. The variance
// follows PyTorch (unbiased), which is what an exported PyTorch model does;
// ONNX's reference uses the biased one.
absl::Status map_batch_norm(Importer& im, const NodeProto& n) {
  const bool training = im.opset >= 14 ? attr_int(n, "training_mode", 0) != 0 : n.output_size() > 1;
  const bool eval = im.options->eval_mode;
  if (!training && !eval) {
    return Importer::error(
        n,
        "inference mode (training_mode=0, running statistics): this is a default (eval) "
        "export; to train, export with training=torch.onnx.TrainingMode.TRAINING, "
        "do_constant_folding=False (scripts/export_onnx.py); to evaluate, import with "
        "OnnxImportOptions::eval_mode");
  }
  for (int k = 3; k < n.output_size(); ++k) {
    if (!n.output(k).empty()) {
      return Importer::error(n, absl::StrCat("output ", k, " (saved statistics) not supported"));
    }
  }
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(n, 0));
  LMS_ASSIGN_OR_RETURN(TensorId gamma, im.tensor_input(n, 1));
  LMS_ASSIGN_OR_RETURN(TensorId beta, im.tensor_input(n, 2));
  LMS_ASSIGN_OR_RETURN(TensorId mean, im.tensor_input(n, 3));
  LMS_ASSIGN_OR_RETURN(TensorId var, im.tensor_input(n, 4));
  for (TensorId t : {mean, var}) {
    // Updated in place in training: persistent. Eval mode only reads them.
    if (!eval && im.graph.tensor(t).role != TensorRole::kOptimizerState) {
      return Importer::error(n, absl::StrCat("the running statistic '", im.graph.tensor(t).name,
                                             "' must be an initializer that is not trained"));
    }
  }
  // Outputs 1 and 2 (the updated running statistics) are not values of the
  // forward graph: the update happens at the step commit. They may be
  // unused (as torch.onnx.export leaves them); a node or graph output
  // reading one is refused, since nothing in the step computes it.
  for (int k = 1; k < std::min(n.output_size(), 3); ++k) {
    if (n.output(k).empty()) continue;
    im.not_computed[n.output(k)] = absl::StrCat(
        "the updated running ", k == 1 ? "mean" : "variance", " of BatchNormalization '",
        n.output(0), "' is not a value of the forward graph: lms updates '",
        im.graph.tensor(k == 1 ? mean : var).name,
        "' in place at the step commit (read it with Session::read after the step)");
  }
  const double momentum = 1.0 - attr_float(n, "momentum", 0.9);
  if (!(momentum >= 0 && momentum <= 1)) {
    return Importer::error(n, absl::StrCat("momentum ", 1 - momentum, " must be in [0, 1]"));
  }
  return im
      .add(n, OpKind::kBatchNorm, n.output(0), {x, gamma, beta, mean, var},
           {{"eps", attr_float(n, "epsilon", 1e-5)},
            {"momentum", momentum},
            {"training", int64_t{eval ? 0 : 1}}})
      .status();
}

absl::Status map_instance_norm(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(n, 0));
  LMS_ASSIGN_OR_RETURN(TensorId gamma, im.tensor_input(n, 1));
  LMS_ASSIGN_OR_RETURN(TensorId beta, im.tensor_input(n, 2));
  return im
      .add(n, OpKind::kInstanceNorm, n.output(0), {x, gamma, beta},
           {{"eps", attr_float(n, "epsilon", 1e-5)}})
      .status();
}

// LayerNormalization-17 over the last axis with Scale and B (what
// torch.onnx.export writes for nn.LayerNorm at opset 17; fuse_layer_norm.cc
// rewrites the opset-14 decomposition into it). The optional Mean and
// InvStdDev outputs are not computed: layer_norm_bwd recomputes them.
absl::Status map_layer_norm(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(n, 0));
  const int64_t rank = static_cast<int64_t>(im.graph.tensor(x).shape.size());
  const int64_t axis = attr_int(n, "axis", -1);
  if (axis != -1 && axis != rank - 1) {
    return refuse_attr(n, "axis", absl::StrCat(axis),
                       absl::StrCat("-1 or ", rank - 1, " (the last axis of X)"));
  }
  const int64_t stash = attr_int(n, "stash_type", 1);
  if (stash != 1) return refuse_attr(n, "stash_type", absl::StrCat(stash), "1 (float)");
  if (!im.has_input(n, 2)) {
    return Importer::error(n, "needs its bias B (an initializer [C]); lms has no bias-free form");
  }
  LMS_ASSIGN_OR_RETURN(TensorId gamma, im.tensor_input(n, 1));
  LMS_ASSIGN_OR_RETURN(TensorId beta, im.tensor_input(n, 2));
  for (int k = 1; k < std::min(n.output_size(), 3); ++k) {
    if (n.output(k).empty()) continue;
    im.not_computed[n.output(k)] =
        absl::StrCat("the ", k == 1 ? "Mean" : "InvStdDev", " output of LayerNormalization '",
                     n.output(0), "' is not computed by lms (its backward recomputes it)");
  }
  return im
      .add(n, OpKind::kLayerNorm, n.output(0), {x, gamma, beta},
           {{"eps", attr_float(n, "epsilon", 1e-5)}})
      .status();
}

// Resize by integer scales onto upsample: nearest, or linear with
// half-pixel centres (F.interpolate's bilinear / trilinear with
// align_corners=False, exported as pytorch_half_pixel; the two modes agree
// for integer scales). align_corners=True samples other points, which lms's
// upsample does not: refused, naming the mode.
absl::Status map_resize(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(size_t r, spatial_rank(im, n));
  (void)r;
  const std::string mode = attr_string(n, "mode", "nearest");
  if (mode != "nearest" && mode != "linear") {
    return refuse_attr(n, "mode", mode, "nearest or linear");
  }
  if (mode == "nearest") {
    LMS_RETURN_IF_ERROR(check_nearest_modes(n));
  } else {
    const std::string ct = attr_string(n, "coordinate_transformation_mode", "half_pixel");
    if (ct != "half_pixel" && ct != "pytorch_half_pixel") {
      return refuse_attr(n, "coordinate_transformation_mode", ct,
                         "half_pixel or pytorch_half_pixel with mode linear (PyTorch's "
                         "align_corners=False)");
    }
  }
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(n, 0));
  LMS_ASSIGN_OR_RETURN(std::vector<int64_t> scale, integer_scales(im, n, im.graph.tensor(x).shape));
  return im.add(n, OpKind::kUpsample, n.output(0), {x}, {{"scale", scale}, {"mode", mode}})
      .status();
}

// Note [Pad before AveragePool]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// torch.onnx exports F.avg_pool2d(x, k, s, p) with count_include_pad=True
// (PyTorch's default: Inception v3, MaxViT) as Pad(x, zeros) followed by
// AveragePool without pads. lms has no pad op; it takes such a Pad as the
// padding of the avg_pool that reads it: avg_pool(x, pad p,
// count_include_pad 1) divides every window by k as the padded AveragePool
// does, and never stores the padded tensor. The Pad must be constant mode
// with value 0, pad only the spatial dims and the same amount on both
// sides; its output is bound to nothing else (any other reader is refused,
// naming the Pad).
absl::Status map_pad(Importer& im, const NodeProto& n) {
  if (im.opset < 11) return Importer::error(n, "Pad before opset 11 (pads an attribute)");
  // (A Pad with all-zero pads was removed as an identity before.)
  LMS_ASSIGN_OR_RETURN(Const p, im.const_input(n, 1, "pads"));
  LMS_ASSIGN_OR_RETURN(size_t r, spatial_rank(im, n));
  const std::string mode = attr_string(n, "mode", "constant");
  if (mode != "constant") return refuse_attr(n, "mode", mode, "constant");
  if (im.has_input(n, 3)) return Importer::error(n, "input 3 (axes) is not supported");
  if (im.has_input(n, 2)) {
    LMS_ASSIGN_OR_RETURN(Const v, im.const_input(n, 2, "constant_value"));
    if (v.numel() != 1 || v.at(0) != 0) {
      return Importer::error(n, "constant_value must be 0 (the padding avg_pool counts)");
    }
  }
  const size_t rank = r + 2;
  if (p.numel() != int64_t(2 * rank)) {
    return Importer::error(n, absl::StrCat("pads holds ", p.numel(),
                                           " values for an input of "
                                           "rank ",
                                           rank, "; supported: ", 2 * rank));
  }
  std::vector<int64_t> pads;
  for (size_t d = 0; d < rank; ++d) {
    const auto before = int64_t(p.at(int64_t(d))), after = int64_t(p.at(int64_t(d + rank)));
    const bool spatial = d >= 2;
    if (before != after || before < 0 || (!spatial && before != 0)) {
      std::vector<int64_t> all;
      for (int64_t k = 0; k < p.numel(); ++k) all.push_back(int64_t(p.at(k)));
      return Importer::error(n, absl::StrCat("pads ", list_str(all),
                                             "; supported: 0 on N and C, the same non-negative "
                                             "amount before and after each spatial dim"));
    }
    if (spatial) pads.push_back(before);
  }
  im.pending_pads[n.output(0)] = {n.input(0), pads};
  im.not_computed[n.output(0)] =
      absl::StrCat("the output of Pad '", n.name(),
                   "' is taken only as the padding of an AveragePool without pads that reads it "
                   "(PyTorch's count_include_pad export); lms has no pad op");
  return absl::OkStatus();
}

// An AveragePool reading a Pad's output (Note [Pad before AveragePool]).
absl::Status map_padded_avg_pool(Importer& im, const NodeProto& n,
                                 const Importer::PendingPad& padded) {
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_of(n, 0, padded.input));
  const size_t r = padded.pads.size();
  LMS_ASSIGN_OR_RETURN(std::vector<int64_t> own, symmetric_pads(n, r));
  if (!all_equal(own, 0)) {
    return refuse_attr(n, "pads", list_str(own), "0 on the output of a Pad (padded once)");
  }
  if (auto d = attr_ints(n, "dilations"); !all_equal(d, 1)) {
    return refuse_attr(n, "dilations", list_str(d), "1");
  }
  const int64_t ceil_mode = attr_int(n, "ceil_mode", 0);
  if (ceil_mode != 0 && ceil_mode != 1) {
    return refuse_attr(n, "ceil_mode", absl::StrCat(ceil_mode), "0 or 1");
  }
  Attrs a = {{"kernel", attr_ints(n, "kernel_shape")},
             {"stride", ints_or(n, "strides", r, 1)},
             {"pad", padded.pads},
             {"count_include_pad", int64_t{1}}};
  if (ceil_mode == 1) a["ceil_mode"] = ceil_mode;
  return im.add(n, OpKind::kAvgPool, n.output(0), {x}, a).status();
}

// AveragePool onto avg_pool: count_include_pad passes through (ONNX's
// default 0 divides by the window's elements inside x). Its input may be a
// Pad's output (Note [Pad before AveragePool]).
absl::Status map_avg_pool(Importer& im, const NodeProto& n) {
  if (auto padded = im.pending_pads.find(n.input(0)); padded != im.pending_pads.end()) {
    return map_padded_avg_pool(im, n, padded->second);
  }
  LMS_ASSIGN_OR_RETURN(size_t r, spatial_rank(im, n));
  const int64_t ceil_mode = attr_int(n, "ceil_mode", 0);
  if (ceil_mode != 0 && ceil_mode != 1) {
    return refuse_attr(n, "ceil_mode", absl::StrCat(ceil_mode), "0 or 1");
  }
  if (auto d = attr_ints(n, "dilations"); !all_equal(d, 1)) {
    return refuse_attr(n, "dilations", list_str(d), "1");
  }
  const int64_t include = attr_int(n, "count_include_pad", 0);
  if (include != 0 && include != 1) {
    return refuse_attr(n, "count_include_pad", absl::StrCat(include), "0 or 1");
  }
  LMS_ASSIGN_OR_RETURN(std::vector<int64_t> pad, symmetric_pads(n, r));
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(n, 0));
  Attrs a = {{"kernel", attr_ints(n, "kernel_shape")},
             {"stride", ints_or(n, "strides", r, 1)},
             {"pad", pad},
             {"count_include_pad", include}};
  if (ceil_mode == 1) a["ceil_mode"] = ceil_mode;
  return im.add(n, OpKind::kAvgPool, n.output(0), {x}, a).status();
}

// GlobalAveragePool is avg_pool with the window and stride all of S (as
// lms's global_avg_pool builder).
absl::Status map_global_avg_pool(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(size_t r, spatial_rank(im, n));
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(n, 0));
  const Shape& s = im.graph.tensor(x).shape;
  const std::vector<int64_t> window(s.begin() + 2, s.end());
  Attrs a = {{"kernel", window}, {"stride", window}, {"pad", std::vector<int64_t>(r, 0)}};
  return im.add(n, OpKind::kAvgPool, n.output(0), {x}, a).status();
}

}  // namespace lms::onnx_import
