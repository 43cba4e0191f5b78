// The step's buffers and their layout (Note [Step buffers]), and the
// fingerprint that ties a layout to the graph it was made for; the
// placement itself is in placement.cc.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/align.h"
#include "lms/checked.h"
#include "lms/status.h"
#include "swap/placement.h"

namespace lms::swap {

absl::StatusOr<StepBuffers> step_buffers(const Graph& graph, const Liveness& live,
                                         const std::vector<uint64_t>& workspace_bytes) {
  if (live.tensors.size() != static_cast<size_t>(graph.num_tensors()) ||
      live.order.size() != static_cast<size_t>(graph.num_nodes()) ||
      live.workspace.size() != live.order.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step buffers: the liveness (", live.tensors.size(), " tensors, ",
                     live.order.size(), " positions) was not computed for this graph (",
                     graph.num_tensors(), " tensors, ", graph.num_nodes(), " nodes)"));
  }
  StepBuffers step;
  for (TensorId t = 0; t < graph.num_tensors(); ++t) {
    const TensorLife& life = live.tensors[t];
    if (life.persistent) {
      step.persistent_bytes += life.bytes;
      continue;
    }
    if (!life.on_device || life.first < 0) continue;
    // Per Note [Swap-out release], life.last already holds a swap_out's or
    // all_reduce's `release_after` (liveness.h, release_position).
    step.buffers.push_back({life.first, life.last, life.bytes});
    step.tensor.push_back(t);
    step.workspace_of.push_back(kNoNode);
  }
  for (int32_t p = 0; p < live.size(); ++p) {
    const NodeId n = live.order[p];
    uint64_t bytes = live.workspace[p];
    if (static_cast<size_t>(n) < workspace_bytes.size() && workspace_bytes[n] > 0) {
      bytes = std::max(bytes, rounded_size(workspace_bytes[n], live.alignment_bytes));
    }
    if (bytes == 0) continue;
    step.buffers.push_back({p, p, bytes});
    step.tensor.push_back(kNoTensor);
    step.workspace_of.push_back(n);
  }
  return step;
}

absl::StatusOr<StepLayout> layout_step(const Graph& graph, const LivenessOptions& options,
                                       uint64_t budget_bytes, int64_t search_placed_buffers) {
  StepLayout layout;
  LMS_ASSIGN_OR_RETURN(layout.live, analyze(graph, options));
  LMS_ASSIGN_OR_RETURN(layout.step, step_buffers(graph, layout.live, options.workspace_bytes));
  PlacementOptions po{.alignment_bytes = options.alignment_bytes,
                      .search_placed_buffers = search_placed_buffers};
  if (budget_bytes > layout.step.persistent_bytes) {
    po.arena_target_bytes = budget_bytes - layout.step.persistent_bytes;
  }
  LMS_ASSIGN_OR_RETURN(layout.placement, place_buffers(layout.step.buffers, po));
  layout.tensor_offset.assign(graph.num_tensors(), kNoOffset);
  layout.placed_bytes.assign(graph.num_tensors(), 0);
  layout.workspace_offset.assign(graph.num_nodes(), kNoOffset);
  layout.workspace_placed.assign(graph.num_nodes(), 0);
  std::vector<int64_t> delta(layout.live.order.size() + 1, 0);
  for (size_t i = 0; i < layout.step.buffers.size(); ++i) {
    const PlacementBuffer& b = layout.step.buffers[i];
    const uint64_t size = placed_size(b, options.alignment_bytes);
    if (layout.step.tensor[i] != kNoTensor) {
      layout.tensor_offset[layout.step.tensor[i]] = layout.placement.offset[i];
      layout.placed_bytes[layout.step.tensor[i]] = size;
    } else {
      layout.workspace_offset[layout.step.workspace_of[i]] = layout.placement.offset[i];
      layout.workspace_placed[layout.step.workspace_of[i]] = size;
    }
    delta[b.first] += static_cast<int64_t>(size);
    delta[b.last + 1] -= static_cast<int64_t>(size);
  }
  layout.arena_in_use.resize(layout.live.order.size());
  int64_t running = 0;
  for (size_t p = 0; p < layout.arena_in_use.size(); ++p) {
    running += delta[p];
    layout.arena_in_use[p] = static_cast<uint64_t>(running);
  }
  return layout;
}

namespace {

// FNV-1a over the bytes of what a layout depends on.
struct Fingerprint {
  uint64_t h = 14695981039346656037ull;
  void bytes(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  void add(std::string_view s) {
    add(static_cast<uint64_t>(s.size()));
    bytes(s.data(), s.size());
  }
  template <typename T>
  requires std::is_arithmetic_v<T> || std::is_enum_v<T>
  void add(T v) { bytes(&v, sizeof(v)); }
  template <typename T>
  void add(const std::vector<T>& v) {
    add(static_cast<uint64_t>(v.size()));
    for (const T& x : v) add(x);
  }
  void add_attr(const AttrValue& v) {
    add(static_cast<uint64_t>(v.index()));
    std::visit([this](const auto& x) { add(x); }, v);
  }
};

}  // namespace

uint64_t layout_fingerprint(const Graph& graph) {
  Fingerprint f;
  f.add(static_cast<int64_t>(graph.num_nodes()));
  for (NodeId id = 0; id < static_cast<NodeId>(graph.num_nodes()); ++id) {
    const Node& n = graph.node(id);
    f.add(n.name);
    f.add(n.op);
    f.add(n.inputs);
    f.add(n.outputs);
    f.add(n.control_inputs);
    for (const auto& [key, value] : n.attrs) {
      f.add(key);
      f.add_attr(value);
    }
  }
  f.add(static_cast<int64_t>(graph.num_tensors()));
  for (TensorId t = 0; t < static_cast<TensorId>(graph.num_tensors()); ++t) {
    const Tensor& tensor = graph.tensor(t);
    f.add(tensor.name);
    f.add(tensor.shape);
    f.add(tensor.dtype);
    f.add(tensor.role);
  }
  return f.h;
}

}  // namespace lms::swap
