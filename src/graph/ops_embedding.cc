// Embedding lookup of docs/ops.md: rows of a float32 table picked by int64
// ids, and its gradient, the rows of dy summed into a table of zeros.
#include "absl/strings/str_cat.h"
#include "graph/ops_internal.h"
#include "lms/checked.h"
#include "lms/status.h"

namespace lms::ops_internal {
namespace {

using Shapes = std::vector<Shape>;

// The ids are integers: they get no gradient (a request for one is declined).
absl::Status embedding_grad(GradContext& ctx) {
  const TensorId dy = ctx.output_grads[0];
  if (dy != kNoTensor && wants(ctx, 1)) {
    Attrs a = {{"weight_shape", input_shape(ctx, 1)}};
    LMS_ASSIGN_OR_RETURN(ctx.input_grads[1], add_grad_node1(ctx, OpKind::kEmbeddingBwd, "table",
                                                            {fwd_input(ctx, 0), dy}, a));
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

// Bytes read and written: the ids (8 bytes each), the rows read or
// accumulated (one per id) and the output.
double embedding_bytes(const Attrs&, const Shapes& in, const Shapes& out) {
  const double ids = numel(in[0]);
  return ids * static_cast<double>(dtype_bytes(DType::kInt64)) +
         2.0 * numel(out[0]) * static_cast<double>(dtype_bytes(DType::kFloat32));
}

}  // namespace

void register_embedding_ops(std::vector<OpSpec>& specs) {
  specs.push_back(make_schema_spec(
      OpKind::kEmbedding, [](const Attrs&, const Shapes&, const Shapes&) { return 0.0; },
      embedding_grad));
  specs.back().def.bytes = embedding_bytes;
  specs.back().def.recomputable = true;
  // One add per element of dy.
  specs.push_back(
      make_schema_spec(OpKind::kEmbeddingBwd,
                       [](const Attrs&, const Shapes& in, const Shapes&) { return numel(in[1]); }));
  specs.back().def.backward = true;
  specs.back().def.bytes = [](const Attrs& a, const Shapes& in, const Shapes& out) {
    return embedding_bytes(a, in, {in[1]}) + numel(out[0]) * 4.0;
  };
}

}  // namespace lms::ops_internal
