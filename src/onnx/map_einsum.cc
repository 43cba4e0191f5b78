// Einsum onto lms matmul (Note [Einsum as matmul]).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lms/status.h"
#include "onnx/map_ops_internal.h"

namespace lms::onnx_import {

// Note [Einsum as matmul]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The einsums attention code writes are batched matrix products:
// "bhid,bhjd->bhij" (q k^T) and "bhij,bhjd->bhid" (attention times v), as
// MaxViT's relative-position attention has them, five dims each. An Einsum
// of two operands imports as one lms matmul when
//  - its batch letters, those in both operands and the output, lead all
//    three terms in the same order, and the operands' sizes agree on them;
//  - each operand has two more letters: one it shares with the output and
//    the contraction letter, which both operands have and the output lacks;
//  - the output ends with the first operand's free letter, then the second's
//    (else the operands are swapped: (A B)^T = B^T A^T).
// An operand whose contraction letter comes first is read transposed
// (matmul's trans_a / trans_b). More than two batch dims are merged into
// one around the matmul (reshapes, copies), since matmul takes rank 4 at
// most. Anything else (ellipses, traces, sums over a letter, one or three
// operands) is refused, naming the equation.
namespace {

absl::Status refusal(const NodeProto& n, absl::string_view why) {
  return Importer::error(n, absl::StrCat("equation \"", attr_string(n, "equation", ""), "\": ", why,
                                         "; supported: a batched matrix product of two operands, "
                                         "as \"bhid,bhjd->bhij\""));
}

absl::StatusOr<std::vector<std::string>> split_equation(const NodeProto& n) {
  std::string eq;
  for (char c : attr_string(n, "equation", "")) {
    if (c != ' ') eq.push_back(c);
  }
  const auto arrow = eq.find("->");
  const auto comma = eq.find(',');
  auto refuse = [&](absl::string_view why) { return refusal(n, why); };
  if (arrow == std::string::npos || comma == std::string::npos || comma > arrow ||
      eq.find(',', comma + 1) != std::string::npos) {
    return refuse("not two operands with an explicit output");
  }
  if (eq.find('.') != std::string::npos) return refuse("ellipses are not supported");
  std::vector<std::string> t = {eq.substr(0, comma), eq.substr(comma + 1, arrow - comma - 1),
                                eq.substr(arrow + 2)};
  for (const std::string& s : t) {
    std::string sorted = s;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      return refuse(absl::StrCat("term \"", s, "\" repeats a letter"));
    }
  }
  if (t[0].size() != t[1].size() || t[0].size() != t[2].size() || t[0].size() < 2) {
    return refuse("the operands and the output must have one rank, at least 2");
  }
  return t;
}

}  // namespace

absl::Status map_einsum(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(std::vector<std::string> t, split_equation(n));
  const size_t rank = t[2].size(), batch = rank - 2;
  auto refuse = [&](absl::string_view why) { return refusal(n, why); };
  if (t[0].substr(0, batch) != t[2].substr(0, batch) ||
      t[1].substr(0, batch) != t[2].substr(0, batch)) {
    return refuse("the batch letters must lead every term in the same order");
  }
  const std::string a = t[0].substr(batch), b = t[1].substr(batch), y = t[2].substr(batch);
  // The contraction letter: in both operands, not in the output.
  char k = 0;
  for (char c : a) {
    if (b.find(c) != std::string::npos && y.find(c) == std::string::npos) k = c;
  }
  if (k == 0) return refuse("no letter is summed over");
  const char free_a = a[0] == k ? a[1] : a[0], free_b = b[0] == k ? b[1] : b[0];
  if (free_a == free_b || y.find(k) != std::string::npos) return refuse("not a matrix product");
  bool swap = false;
  if (y == std::string{free_b, free_a}) {
    swap = true;
  } else if (y != std::string{free_a, free_b}) {
    return refuse("the output must hold each operand's free letter");
  }
  LMS_ASSIGN_OR_RETURN(TensorId x0, im.tensor_input(n, 0));
  LMS_ASSIGN_OR_RETURN(TensorId x1, im.tensor_input(n, 1));
  const Shape s0 = im.graph.tensor(x0).shape, s1 = im.graph.tensor(x1).shape;
  if (s0.size() != rank || s1.size() != rank ||
      !std::equal(s0.begin(), s0.begin() + batch, s1.begin())) {
    return refuse(absl::StrCat("operands of shapes ", list_str(s0), " and ", list_str(s1),
                               " do not match the equation"));
  }
  // y = L R with L [.., p, k] (or [.., k, p]: trans_a) and R [.., k, q] (or
  // [.., q, k]: trans_b), p and q the output's last two letters: L is x0
  // and R is x1, or swapped where the output takes x1's free letter first.
  TensorId left = swap ? x1 : x0, right = swap ? x0 : x1;
  const std::string& lt = swap ? b : a;
  const std::string& rt = swap ? a : b;
  const int64_t trans_a = lt[0] == k ? 1 : 0, trans_b = rt[1] == k ? 1 : 0;
  // Merge the leading batch dims so that matmul sees rank 4 at most.
  Shape out(s0.begin(), s0.begin() + batch);
  const Shape& ls = swap ? s1 : s0;
  const Shape& rs = swap ? s0 : s1;
  out.push_back(ls[rank - 2 + (trans_a ? 1 : 0)]);
  out.push_back(rs[rank - 2 + (trans_b ? 0 : 1)]);
  auto merged = [&](TensorId x, const Shape& s,
                    const std::string& name) -> absl::StatusOr<TensorId> {
    if (rank <= 4) return x;
    int64_t lead = 1;
    for (size_t d = 0; d + 2 < batch + 1; ++d) lead *= s[d];
    std::vector<int64_t> dims = {lead};
    dims.insert(dims.end(), s.end() - 3, s.end());
    return im.add(n, OpKind::kReshape, absl::StrCat(n.output(0), "/", name), {x},
                  {{"shape", dims}});
  };
  LMS_ASSIGN_OR_RETURN(left, merged(left, ls, "left"));
  LMS_ASSIGN_OR_RETURN(right, merged(right, rs, "right"));
  const std::string product = rank <= 4 ? n.output(0) : absl::StrCat(n.output(0), "/product");
  LMS_ASSIGN_OR_RETURN(TensorId p, im.add(n, OpKind::kMatMul, product, {left, right},
                                          {{"trans_a", trans_a}, {"trans_b", trans_b}}));
  if (rank <= 4) return absl::OkStatus();
  return im.add(n, OpKind::kReshape, n.output(0), {p}, {{"shape", std::vector<int64_t>(out)}})
      .status();
}

}  // namespace lms::onnx_import
