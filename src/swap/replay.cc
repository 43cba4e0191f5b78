#include "swap/replay.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "allocator/bfc_allocator.h"
#include "lms/status.h"
#include "swap/release_plan.h"

namespace lms::swap {
namespace {

// Hands out a fake address range; the allocator never dereferences it.
class FakeSubAllocator : public SubAllocator {
 public:
  void* alloc(uint64_t) override { return reinterpret_cast<void*>(uintptr_t{1} << 40); }
  void free(void*, uint64_t) override {}
};

class Replayer {
 public:
  Replayer(const Graph& g, const ReplayOptions& o, std::unique_ptr<BfcAllocator> alloc)
      : g_(g), options_(o), alloc_(std::move(alloc)), buffers_(g.num_tensors(), nullptr) {}

  absl::Status allocate(TensorId t, const std::string& context) {
    absl::StatusOr<void*> p = alloc_->allocate(g_.tensor(t).bytes());
    if (!p.ok()) {
      return absl::Status(p.status().code(), absl::StrCat(context, ": ", p.status().message()));
    }
    buffers_[t] = *p;
    return absl::OkStatus();
  }

  absl::Status issue(NodeId id, const std::vector<TensorId>& releases) {
    const Node& n = g_.node(id);
    std::string context = absl::StrCat("node '", n.name, "' (", n.op, ")");
    for (TensorId t : n.outputs) {
      if (g_.tensor(t).role != TensorRole::kHost) LMS_RETURN_IF_ERROR(allocate(t, context));
    }
    // The node's workspace, held while it runs (Note [Step buffers]).
    const uint64_t workspace = static_cast<size_t>(id) < options_.workspace_bytes.size()
                                   ? options_.workspace_bytes[id]
                                   : 0;
    if (workspace > 0) {
      absl::StatusOr<void*> p = alloc_->allocate(workspace);
      if (!p.ok()) {
        return absl::Status(p.status().code(),
                            absl::StrCat(context, " workspace: ", p.status().message()));
      }
      alloc_->deallocate(*p);
    }
    for (TensorId t : releases) release(t);
    return absl::OkStatus();
  }

  void release(TensorId t) {
    if (buffers_[t] == nullptr) return;
    alloc_->deallocate(buffers_[t]);
    buffers_[t] = nullptr;
  }

  BfcAllocator& allocator() { return *alloc_; }

 private:
  const Graph& g_;
  const ReplayOptions& options_;
  std::unique_ptr<BfcAllocator> alloc_;
  std::vector<void*> buffers_;
};

}  // namespace

absl::StatusOr<ReplayResult> replay_step(const Graph& graph, const ReplayOptions& options) {
  LMS_ASSIGN_OR_RETURN(ReleasePlan plan, release_plan(graph, options.fetched));
  LMS_ASSIGN_OR_RETURN(auto alloc, BfcAllocator::create(std::make_unique<FakeSubAllocator>(),
                                                        {.capacity_bytes = options.capacity_bytes,
                                                         .alignment = options.alignment_bytes}));
  Replayer r(graph, options, std::move(alloc));
  ReplayResult result;
  for (TensorId t = 0; t < graph.num_tensors(); ++t) {
    if (!is_persistent(graph.tensor(t).role)) continue;
    LMS_RETURN_IF_ERROR(
        r.allocate(t, absl::StrCat("persistent tensor '", graph.tensor(t).name, "'")));
  }
  result.persistent_bytes = r.allocator().stats().bytes_in_use;
  for (TensorId t : plan.inputs) {
    LMS_RETURN_IF_ERROR(r.allocate(t, absl::StrCat("graph input '", graph.tensor(t).name, "'")));
  }
  for (size_t p = 0; p < plan.order.size(); ++p) {
    LMS_RETURN_IF_ERROR(r.issue(plan.order[p], plan.release_after[p]));
  }
  AllocatorStats stats = r.allocator().stats();
  result.peak_bytes = stats.peak_bytes_in_use;
  result.peak_fragmentation = stats.fragmentation;
  return result;
}

}  // namespace lms::swap
