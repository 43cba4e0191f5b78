#include "swap/release_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "swap/liveness.h"

namespace lms::swap {
namespace {

absl::StatusOr<std::vector<bool>> fetched_flags(const Graph& g,
                                                const std::vector<std::string>& names) {
  std::vector<bool> fetched(g.num_tensors(), false);
  if (names.empty() && g.loss() != kNoTensor) fetched[g.loss()] = true;
  for (const std::string& name : names) {
    TensorId t = g.find_tensor(name);
    if (t == kNoTensor) {
      return absl::InvalidArgumentError(
          absl::StrCat("fetched tensor '", name, "' is not in the graph"));
    }
    fetched[t] = true;
  }
  return fetched;
}

}  // namespace

absl::StatusOr<ReleasePlan> release_plan(const Graph& g, const std::vector<std::string>& fetched) {
  ReleasePlan plan;
  LMS_ASSIGN_OR_RETURN(plan.order, schedule(g));
  LMS_ASSIGN_OR_RETURN(plan.fetched, fetched_flags(g, fetched));
  const int32_t n = static_cast<int32_t>(plan.order.size());
  std::vector<int32_t> position(g.num_nodes());
  for (int32_t p = 0; p < n; ++p) position[plan.order[p]] = p;
  plan.release_after.assign(n, {});
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    const Tensor& tensor = g.tensor(t);
    if (is_persistent(tensor.role) || tensor.role == TensorRole::kHost) continue;
    if (tensor.role == TensorRole::kInput) {
      if (tensor.consumers.empty()) continue;
      plan.inputs.push_back(t);
    }
    if (plan.fetched[t]) continue;
    int32_t release = tensor.producer != kNoNode ? position[tensor.producer] : 0;
    for (NodeId c : tensor.consumers) release = std::max(release, release_position(g, c, position));
    plan.release_after[release].push_back(t);
  }
  return plan;
}

}  // namespace lms::swap
