#include "onnx/importer.h"

#include <onnx/onnx_pb.h>

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
  Value& v = values[n.input(k)];
  if (v.tensor != kNoTensor) return v.tensor;
  const Const& c = *v.constant;
  if (c.dtype != DType::kFloat32) {
    return error(n, absl::StrCat("input ", k, " '", n.input(k),
                                 "' is an int64 constant; lms holds persistent tensors in "
                                 "float32 only"));
  }
  if (c.numel() == 0) return error(n, absl::StrCat("input ", k, " is an empty tensor"));
  const std::string name = lms_name(n.input(k));
  const Init init = Init::from_values(c.f);
  const bool trained = v.initializer && trainable.contains(n.input(k));
  v.tensor =
      trained ? graph.parameter(name, c.dims, init) : graph.optimizer_state(name, c.dims, init);
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

std::string list_str(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ","), "]");
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
