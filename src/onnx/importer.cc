#include "onnx/importer.h"

#include <onnx/onnx_pb.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lms/status.h"
#include "lms/strings.h"

namespace lms::onnx_import {

absl::Status Importer::error(const ::onnx::NodeProto& n, std::string_view what) {
  const std::string& name = n.name().empty() && n.output_size() > 0 ? n.output(0) : n.name();
  return absl::InvalidArgumentError(
      absl::StrCat("ONNX node '", name, "' (", n.op_type(), "): ", to_absl(what)));
}

bool Importer::has_input(const ::onnx::NodeProto& n, int k) const {
  return k < n.input_size() && !n.input(k).empty();
}

absl::StatusOr<const Value*> Importer::input(const ::onnx::NodeProto& n, int k) const {
  if (!has_input(n, k)) return nullptr;
  if (auto nc = not_computed.find(n.input(k)); nc != not_computed.end()) {
    return error(n, absl::StrCat("input ", k, " '", n.input(k), "': ", nc->second));
  }
  auto it = values.find(n.input(k));
  if (it == values.end()) {
    return error(n, absl::StrCat("input ", k, " '", n.input(k),
                                 "' is produced by no earlier node, initializer or graph input "
                                 "(a truncated file or nodes out of order)"));
  }
  return &it->second;
}

absl::StatusOr<Const> Importer::const_input(const ::onnx::NodeProto& n, int k,
                                            std::string_view what) const {
  LMS_ASSIGN_OR_RETURN(const Value* v, input(n, k));
  if (v == nullptr || !v->constant) {
    return error(n, absl::StrCat(to_absl(what), " (input ", k,
                                 ") must be a constant for these input "
                                 "shapes (an initializer, Constant or folded shape "
                                 "arithmetic); it is computed at run time"));
  }
  return *v->constant;
}

absl::StatusOr<TensorId> Importer::tensor_input(const ::onnx::NodeProto& n, int k) {
  LMS_ASSIGN_OR_RETURN(const Value* cv, input(n, k));
  if (cv == nullptr) return error(n, absl::StrCat("input ", k, " is required"));
  // Per Note [Weight-side Transpose], Gemm / MatMul input B reads
  // the transpose of a trainable initializer through tensor_of; any other
  // reader gets a transpose node of the parameter, made once.
  if (!cv->transpose_of.empty() && trainable.contains(cv->transpose_of)) {
    if (cv->tensor != kNoTensor) return cv->tensor;
    LMS_ASSIGN_OR_RETURN(TensorId source, tensor_of(n, k, cv->transpose_of));
    absl::StatusOr<std::vector<TensorId>> outs = graph.add_node(
        OpKind::kTranspose, lms_name(n.input(k)), {source}, {{"perm", std::vector<int64_t>{1, 0}}});
    if (!outs.ok()) return error(n, std::string(outs.status().message()));
    values.at(n.input(k)).tensor = outs->front();
    return outs->front();
  }
  return tensor_of(n, k, n.input(k));
}

absl::StatusOr<TensorId> Importer::tensor_of(const ::onnx::NodeProto& n, int k,
                                             const std::string& name) {
  Value& v = values.at(name);
  if (v.tensor != kNoTensor) return v.tensor;
  if (!v.alias_of.empty()) {
    LMS_ASSIGN_OR_RETURN(TensorId t, tensor_of(n, k, v.alias_of));
    values.at(name).tensor = t;
    return t;
  }
  const Const& c = *v.constant;
  if (c.dtype != DType::kFloat32) {
    return error(n, absl::StrCat("input ", k, " '", name,
                                 "' is an int64 constant; lms holds persistent tensors in "
                                 "float32 only"));
  }
  if (c.numel() == 0) return error(n, absl::StrCat("input ", k, " is an empty tensor"));
  const std::string lms = lms_name(name);
  const Init init = Init::from_values(c.f);
  const bool trained = v.initializer && trainable.contains(name);
  v.tensor =
      trained ? graph.parameter(lms, c.dims, init) : graph.optimizer_state(lms, c.dims, init);
  if (v.tensor == kNoTensor) return error(n, std::string(graph.status().message()));
  return v.tensor;
}

std::string Importer::lms_name(std::string_view onnx_name) const {
  std::string s(onnx_name);
  for (char& ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (u <= ' ' || u == 0x7f ||
        std::string_view("(),=[]{}\"").find(ch) != std::string_view::npos) {
      ch = '_';
    }
  }
  if (s.empty()) s = "onnx_value";
  return graph.unique_name(s);
}

void Importer::set_const(const std::string& name, Const c) {
  Value v;
  v.constant = std::move(c);
  values[name] = std::move(v);
}

void Importer::set_tensor(const std::string& name, TensorId t) {
  Value v;
  v.tensor = t;
  values[name] = std::move(v);
}

void Importer::alias(const std::string& to, const std::string& from) {
  Value v = values.at(from);  // a copy: inserting `to` may rehash the map
  if (v.tensor == kNoTensor && v.initializer && v.alias_of.empty()) v.alias_of = from;
  values[to] = std::move(v);
}

absl::StatusOr<TensorId> Importer::add(const ::onnx::NodeProto& n, OpKind op,
                                       const std::string& out, std::vector<TensorId> inputs,
                                       Attrs attrs) {
  absl::StatusOr<std::vector<TensorId>> outs =
      graph.add_node(op, lms_name(out), std::move(inputs), std::move(attrs));
  if (!outs.ok()) return error(n, std::string(outs.status().message()));
  set_tensor(out, outs->front());
  return outs->front();
}

const ::onnx::AttributeProto* find_attr(const ::onnx::NodeProto& n, std::string_view name) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

int64_t attr_int(const ::onnx::NodeProto& n, std::string_view name, int64_t fallback) {
  const auto* a = find_attr(n, name);
  return a == nullptr ? fallback : a->i();
}

double attr_float(const ::onnx::NodeProto& n, std::string_view name, double fallback) {
  const auto* a = find_attr(n, name);
  return a == nullptr ? fallback : a->f();
}

std::string attr_string(const ::onnx::NodeProto& n, std::string_view name,
                        std::string_view fallback) {
  const auto* a = find_attr(n, name);
  return a == nullptr ? std::string(fallback) : a->s();
}

std::vector<int64_t> attr_ints(const ::onnx::NodeProto& n, std::string_view name) {
  const auto* a = find_attr(n, name);
  if (a == nullptr) return {};
  return {a->ints().begin(), a->ints().end()};
}

absl::StatusOr<std::vector<int64_t>> transpose_perm(const ::onnx::NodeProto& n, int64_t rank) {
  std::vector<int64_t> perm = attr_ints(n, "perm");
  if (perm.empty()) {
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
  }
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t d = 0; d < rank; ++d) {
    if (int64_t(sorted.size()) != rank || sorted[d] != d) {
      return Importer::error(n, absl::StrCat("attribute perm=", list_str(perm),
                                             " is not a permutation of the ", rank, " dims"));
    }
  }
  return perm;
}

std::string list_str(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ","), "]");
}

absl::StatusOr<std::vector<int64_t>> resolve_reshape(const ::onnx::NodeProto& n,
                                                     const std::vector<int64_t>& x,
                                                     std::vector<int64_t> shape) {
  const bool allow_zero = attr_int(n, "allowzero", 0) != 0;
  int64_t known = 1, x_numel = 1, infer = -1;
  for (int64_t d : x) x_numel *= d;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0 && !allow_zero) {
      if (d >= x.size()) {
        return Importer::error(n, absl::StrCat("shape ", list_str(shape), " copies dim ", d,
                                               " (a 0) of an input of rank ", x.size()));
      }
      shape[d] = x[d];
    }
    if (shape[d] < -1 || (shape[d] == -1 && infer >= 0)) {
      return Importer::error(n, absl::StrCat("shape ", list_str(shape),
                                             " not supported; supported: dims >= 0 "
                                             "with at most one -1"));
    }
    if (shape[d] == -1) {
      infer = int64_t(d);
    } else {
      known *= shape[d];
    }
  }
  if (infer >= 0 && known > 0 && x_numel % known == 0) shape[infer] = x_numel / known;
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (numel != x_numel) {
    return Importer::error(n, absl::StrCat("shape ", list_str(shape), " does not hold the ",
                                           x_numel, " elements of input ", list_str(x),
                                           "; supported: the same element count (0 copies the "
                                           "input's dim unless allowzero, one -1 is inferred)"));
  }
  return shape;
}

absl::Status check_slice_lengths(const Importer& im, const ::onnx::NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(Const starts, im.const_input(n, 1, "starts"));
  for (int k = 2; k <= 4; ++k) {
    if (!im.has_input(n, k)) continue;
    LMS_ASSIGN_OR_RETURN(Const c, im.const_input(n, k, "ends, axes and steps"));
    if (c.numel() != starts.numel()) {
      return Importer::error(
          n, absl::StrCat("input ", k, " holds ", c.numel(), " values, starts ", starts.numel()));
    }
  }
  return absl::OkStatus();
}

}  // namespace lms::onnx_import
