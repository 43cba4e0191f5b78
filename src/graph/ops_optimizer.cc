// Optimizer ops of docs/ops.md. The update ops have no outputs: they write
// their mutated inputs (parameter and state) in place.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "graph/ops_internal.h"
#include "lms/status.h"

namespace lms::ops_internal {
namespace {

using Shapes = std::vector<Shape>;

decltype(OpDef::flops) per_param_element(double factor) {
  return [factor](const Attrs&, const Shapes& in, const Shapes&) { return factor * numel(in[0]); };
}

}  // namespace

void register_optimizer_ops(std::vector<OpSpec>& specs) {
  specs.push_back(
      make_schema_spec(OpKind::kGlobalNorm, [](const Attrs&, const Shapes& in, const Shapes&) {
        double n = 0;
        for (const Shape& s : in) n += 2 * numel(s);
        return n;
      }));
  // amp_update_scale: a few scalar operations.
  specs.push_back(make_schema_spec(OpKind::kAmpUpdateScale,
                                   [](const Attrs&, const Shapes&, const Shapes&) { return 4.0; },
                                   nullptr, {0, 1}));
  specs.push_back(make_schema_spec(OpKind::kIncrement,
                                   [](const Attrs&, const Shapes&, const Shapes&) { return 1.0; },
                                   nullptr, {0}));
  // SGD: weight decay, momentum, update (+ clipping scale) per element.
  specs.push_back(make_schema_spec(OpKind::kSgdUpdate, per_param_element(6), nullptr, {0, 2}));
  // Adam: two moment updates, bias corrections, sqrt and divide per element.
  specs.push_back(make_schema_spec(OpKind::kAdamUpdate, per_param_element(14), nullptr, {0, 2, 3}));
}

}  // namespace lms::ops_internal
