// The causal mask computed from positions (Note [Causal mask from
// positions]): its nodes by structure, then its constants in O(t).
#include "onnx/causal_mask.h"

#include <cmath>
#include <optional>

namespace lms::onnx_import {
namespace {

using NodeProto = ::onnx::NodeProto;

// The largest rank of a mask operand: it is added to [N,H,T,S] scores.
constexpr size_t kMaxMaskRank = 4;

bool has_form(const NodeProto& n, const char* op, int inputs) {
  return n.op_type() == op && n.input_size() == inputs && n.output_size() == 1;
}

bool is_comparison(const NodeProto& n) {
  return has_form(n, "Greater", 2) || has_form(n, "Less", 2);
}

// Input `k` of `n` as a constant the walk has bound (never a trainable
// initializer, whose values training changes); nullptr else.
const Const* constant_of(const Importer& im, const NodeProto& n, int k) {
  auto v = im.input(n, k);
  if (!v.ok() || *v == nullptr || !(*v)->constant || im.trainable.contains(n.input(k))) {
    return nullptr;
  }
  const Const* c = &*(*v)->constant;
  return c->dims.size() <= kMaxMaskRank ? c : nullptr;
}

std::optional<double> scalar_of(const Importer& im, const NodeProto& n, int k) {
  const Const* c = constant_of(im, n, k);
  if (c == nullptr || c->numel() != 1 || c->dtype != DType::kFloat32) return std::nullopt;
  return c->at(0);
}

// Which of the last two axes `c`'s t values lie along, every other dim 1:
// -1 (a rank-1 vector broadcasts as a row too) or -2; 0 for neither.
int position_axis(const Const& c, int64_t t) {
  const size_t r = c.dims.size();
  if (r == 0 || c.numel() != t) return 0;
  if (c.dims[r - 1] == t) return -1;
  if (r >= 2 && c.dims[r - 2] == t && c.dims[r - 1] == 1) return -2;
  return 0;
}

// Whether comparison `cmp` is "key position > query position": its larger
// side (Greater's input 0, Less's input 1) varies along the keys (the last
// axis), its smaller side along the queries, both the same strictly
// increasing positions. Then it is true exactly where key > query.
bool compares_key_after_query(const Importer& im, const NodeProto& cmp, int64_t t) {
  const int big = cmp.op_type() == "Greater" ? 0 : 1;
  const Const* key = constant_of(im, cmp, big);
  const Const* query = constant_of(im, cmp, 1 - big);
  if (key == nullptr || query == nullptr || key->dtype != query->dtype || t < 1) return false;
  // One position: "key > query" must be false, so the values are equal.
  if (t > 1 && (position_axis(*key, t) != -1 || position_axis(*query, t) != -2)) return false;
  if (key->numel() != t || query->numel() != t) return false;
  for (int64_t k = 0; k < t; ++k) {
    if (key->at(k) != query->at(k)) return false;
    if (k > 0 && !(key->at(k) > key->at(k - 1))) return false;
  }
  return true;
}

// Cast(float) -> Mul by a finite masking constant (0 * -inf would be NaN).
bool masks_by_mul(const Importer& im, const NodeProto& cast, const NodeProto& mul) {
  if (attr_int(cast, "to", 0) != ::onnx::TensorProto::FLOAT) return false;
  const int k = mul.input(0) == cast.output(0) ? 1 : 0;
  const std::optional<double> c = scalar_of(im, mul, k);
  return c && std::isfinite(*c) && *c <= kMaskLimit;
}

// Where(cond, c, 0) with c masking (-inf allowed).
bool masks_by_where(const Importer& im, const NodeProto& where) {
  const std::optional<double> c = scalar_of(im, where, 1);
  const std::optional<double> zero = scalar_of(im, where, 2);
  return c && zero && *c <= kMaskLimit && *zero == 0.0;
}

}  // namespace

std::vector<int> causal_mask_nodes(const ::onnx::GraphProto& g, const std::string& mask,
                                   const SoleProducer& from) {
  if (const int mul = from(mask, "Mul"); mul >= 0 && has_form(g.node(mul), "Mul", 2)) {
    for (int k : {0, 1}) {
      const int cast = from(g.node(mul).input(k), "Cast");
      if (cast < 0 || !has_form(g.node(cast), "Cast", 1)) continue;
      const int cmp =
          std::max(from(g.node(cast).input(0), "Greater"), from(g.node(cast).input(0), "Less"));
      if (cmp >= 0 && is_comparison(g.node(cmp))) return {cmp, cast, mul};
    }
    return {};
  }
  if (const int where = from(mask, "Where"); where >= 0 && has_form(g.node(where), "Where", 3)) {
    const std::string& cond = g.node(where).input(0);
    const int cmp = std::max(from(cond, "Greater"), from(cond, "Less"));
    if (cmp >= 0 && is_comparison(g.node(cmp)) && g.node(where).input(1) != cond &&
        g.node(where).input(2) != cond) {
      return {cmp, where};
    }
  }
  return {};
}

bool is_causal_mask_from_positions(const Importer& im, const ::onnx::GraphProto& g,
                                   const std::vector<int>& nodes, int64_t t) {
  if (nodes.size() < 2 || !compares_key_after_query(im, g.node(nodes[0]), t)) return false;
  if (nodes.size() == 3) return masks_by_mul(im, g.node(nodes[1]), g.node(nodes[2]));
  return nodes.size() == 2 && masks_by_where(im, g.node(nodes[1]));
}

}  // namespace lms::onnx_import
