// swap_out / swap_in (inserted by lms::rewrite): a copy between device memory
// and pinned host memory; the output has the input's shape and no FLOPs.
// all_reduce (training_graph with TrainingOptions::data_parallel): output i
// is the mean over the ranks of input i, computed on the communication
// stream. swap_out and all_reduce take the optional string attribute
// release_after (Note [Swap-out release]).
#include "graph/ops_internal.h"

namespace lms::ops_internal {

void register_swap_ops(std::vector<OpSpec>& specs) {
  auto copy = [](const Attrs&, const std::vector<Shape>& in) -> absl::StatusOr<std::vector<Shape>> {
    return std::vector<Shape>{in[0]};
  };
  auto no_flops = [](const Attrs&, const std::vector<Shape>&, const std::vector<Shape>&) {
    return 0.0;
  };
  auto same_shapes = [](const Attrs& attrs,
                        const std::vector<Shape>& in) -> absl::StatusOr<std::vector<Shape>> {
    auto it = attrs.find("release_after");
    if (it != attrs.end() && !std::holds_alternative<std::string>(it->second)) {
      return absl::InvalidArgumentError("attribute 'release_after' must be a node name (a string)");
    }
    return in;
  };
  specs.push_back(make_spec(OpKind::kSwapOut, 1, 1, {}, same_shapes, no_flops));
  specs.back().optional_attrs = {"release_after"};
  specs.back().def.exec = OpExec::kCopyToHost;
  specs.push_back(make_spec(OpKind::kSwapIn, 1, 1, {}, copy, no_flops));
  specs.back().def.exec = OpExec::kCopyToDevice;
  specs.push_back(make_spec(OpKind::kAllReduce, 1, -1, {}, same_shapes, no_flops));
  specs.back().optional_attrs = {"release_after"};
  specs.back().def.exec = OpExec::kCollective;
}

}  // namespace lms::ops_internal
