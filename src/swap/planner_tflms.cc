// TFLMS v2 (arXiv 1807.02037) and the manual list, which applies the same
// rule to named tensors.
#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "swap/planner.h"

namespace lms::swap {
namespace {

// Groups the far uses (ascending positions) into swap-ins.
std::vector<SwapPlan::SwapIn> group_far_uses(const Liveness& live, const std::vector<int32_t>& far,
                                             int32_t anchor, const TflmsOptions& options) {
  std::vector<SwapPlan::SwapIn> ins;
  int32_t group_first = -1, prev = -1;
  auto close = [&] {
    if (group_first < 0) return;
    const bool sync_in = options.sync_mode == 2 || options.sync_mode == 3;
    int32_t trigger = sync_in ? group_first - 1 : group_first - options.swapin_ahead;
    ins.back().trigger = live.order[std::max(anchor, trigger)];
  };
  for (int32_t use : far) {
    if (group_first < 0 || use - prev > options.swapin_groupby) {
      close();
      ins.emplace_back();
      group_first = use;
    }
    ins.back().consumers.push_back(live.order[use]);
    prev = use;
  }
  close();
  return ins;
}

// The TFLMS item for the tensor anchored at position `anchor`, or nothing if
// no use lies beyond the threshold.
std::optional<SwapPlan::Item> tflms_item(const Liveness& live, TensorId t, int32_t anchor,
                                         const TflmsOptions& options) {
  std::vector<int32_t> far;
  for (int32_t use : live.tensors[t].uses) {
    if (use - anchor > options.swapout_threshold) far.push_back(use);
  }
  if (far.empty()) return std::nullopt;
  SwapPlan::Item item;
  item.tensor = t;
  item.swap_out_after = live.order[anchor];
  item.swap_ins = group_far_uses(live, far, anchor, options);
  const bool sync_out = options.sync_mode == 1 || options.sync_mode == 3;
  if (sync_out && anchor + 1 < live.size()) item.sync_before = live.order[anchor + 1];
  return item;
}

}  // namespace

SwapPlan plan_tflms(const Liveness& live, const TflmsOptions& options) {
  SwapPlan plan;
  for (TensorId t = 0; t < static_cast<TensorId>(live.tensors.size()); ++t) {
    const TensorLife& life = live.tensors[t];
    if (!life.on_device || life.persistent || life.fetched || life.input) continue;
    if (life.role != TensorRole::kActivation || life.bytes < options.min_tensor_bytes) continue;
    if (auto item = tflms_item(live, t, life.first, options)) plan.items.push_back(*item);
  }
  return plan;
}

absl::StatusOr<SwapPlan> plan_manual(const Graph& graph, const Liveness& live,
                                     const std::vector<std::string>& tensors,
                                     const TflmsOptions& options) {
  SwapPlan plan;
  absl::flat_hash_set<TensorId> seen;
  for (const std::string& name : tensors) {
    TensorId t = graph.find_tensor(name);
    if (t == kNoTensor) {
      return absl::InvalidArgumentError(
          absl::StrCat("lms manual policy: tensor '", name, "' is not in the graph"));
    }
    const TensorLife& life = live.tensors[t];
    if (!life.on_device || life.persistent || life.fetched || life.uses.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "lms manual policy: tensor '", name, "' is a ", role_name(life.role),
          life.fetched ? " fetched" : "", " tensor", life.uses.empty() ? " without consumers" : "",
          "; only activations, gradients and graph inputs that are read can be swapped"));
    }
    if (!seen.insert(t).second) continue;
    const int32_t anchor = life.input ? life.uses.front() : life.first;
    auto item = tflms_item(live, t, anchor, options);
    if (!item) {
      return absl::InvalidArgumentError(absl::StrCat(
          "lms manual policy: tensor '", name, "' has no consumer more than swapout_threshold=",
          options.swapout_threshold, " nodes after it is produced; lower swapout_threshold"));
    }
    plan.items.push_back(*item);
  }
  return plan;
}

}  // namespace lms::swap
