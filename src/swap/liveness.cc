// The planner-side implementation of Note [Memory accounting].
#include "swap/liveness.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/align.h"
#include "graph/op_registry.h"
#include "lms/status.h"

namespace lms::swap {
namespace {

absl::StatusOr<absl::flat_hash_set<TensorId>> fetched_set(const Graph& graph,
                                                          const LivenessOptions& options) {
  absl::flat_hash_set<TensorId> fetched;
  if (options.fetched.empty()) {
    if (graph.loss() != kNoTensor) fetched.insert(graph.loss());
    return fetched;
  }
  for (const std::string& name : options.fetched) {
    TensorId t = graph.find_tensor(name);
    if (t == kNoTensor) {
      return absl::InvalidArgumentError(
          absl::StrCat("liveness: fetched tensor '", name, "' is not in the graph"));
    }
    fetched.insert(t);
  }
  return fetched;
}

TensorLife tensor_life(const Graph& graph, const Liveness& live, TensorId id, bool fetched) {
  const Tensor& t = graph.tensor(id);
  TensorLife life;
  life.bytes = rounded_size(t.bytes(), live.alignment_bytes);
  life.persistent = is_persistent(t.role);
  life.input = t.role == TensorRole::kInput;
  life.fetched = fetched;
  life.role = t.role;
  for (NodeId c : t.consumers) life.uses.push_back(live.position[c]);
  std::sort(life.uses.begin(), life.uses.end());
  if (t.role == TensorRole::kHost || life.persistent) {
    life.on_device = life.persistent;
    return life;
  }
  if (life.input && life.uses.empty() && !fetched) return life;  // never uploaded
  life.on_device = true;
  life.first = life.input ? 0 : live.position[t.producer];
  life.last = life.uses.empty() ? life.first : life.uses.back();
  // The latest release position over the readers: a swap_out that is not
  // the last reader may still hold the buffer longer (release_after).
  for (NodeId c : t.consumers) {
    life.last = std::max(life.last, release_position(graph, c, live.position));
  }
  if (fetched) life.last = live.size() - 1;
  return life;
}

}  // namespace

int32_t release_position(const Graph& graph, NodeId reader, const std::vector<int32_t>& position) {
  const Node& n = graph.node(reader);
  int32_t pos = position[reader];
  if (n.op != OpKind::kSwapOut && n.op != OpKind::kAllReduce) return pos;
  auto it = n.attrs.find("release_after");
  if (it == n.attrs.end()) return pos;
  const std::string* name = std::get_if<std::string>(&it->second);
  const NodeId r = name != nullptr ? graph.find_node(*name) : kNoNode;
  return r != kNoNode ? std::max(pos, position[r]) : pos;
}

int32_t commit_position(const Graph& graph, const std::vector<NodeId>& order) {
  for (int32_t p = 0; p < static_cast<int32_t>(order.size()); ++p) {
    if (!op_def(graph.node(order[p]).op).mutated_inputs.empty()) return p;
  }
  return static_cast<int32_t>(order.size());
}

absl::StatusOr<Liveness> analyze(const Graph& graph, const LivenessOptions& options) {
  if (options.alignment_bytes == 0) {
    return absl::InvalidArgumentError("liveness: alignment_bytes must be positive");
  }
  Liveness live;
  live.alignment_bytes = options.alignment_bytes;
  LMS_ASSIGN_OR_RETURN(live.order, schedule(graph));
  LMS_ASSIGN_OR_RETURN(auto fetched, fetched_set(graph, options));
  live.position.assign(graph.num_nodes(), -1);
  live.commit = commit_position(graph, live.order);
  // Per Note [Step buffers], each node's workspace is a buffer of
  // the step's arena, live only while that node runs.
  live.workspace.assign(live.order.size(), 0);
  for (int32_t p = 0; p < live.size(); ++p) {
    NodeId n = live.order[p];
    live.position[n] = p;
    if (static_cast<size_t>(n) < options.workspace_bytes.size() && options.workspace_bytes[n] > 0) {
      live.workspace[p] = rounded_size(options.workspace_bytes[n], options.alignment_bytes);
    }
  }
  live.persistent_bytes = 0;
  live.tensors.reserve(graph.num_tensors());
  for (TensorId id = 0; id < graph.num_tensors(); ++id) {
    live.tensors.push_back(tensor_life(graph, live, id, fetched.contains(id)));
    const TensorLife& life = live.tensors.back();
    if (life.persistent) live.persistent_bytes += life.bytes;
  }
  return live;
}

MemoryProfile memory_profile(const Liveness& live) {
  const int32_t n = live.size();
  std::vector<int64_t> delta(n + 1, 0);
  for (const TensorLife& t : live.tensors) {
    if (!t.on_device || t.persistent || t.first < 0) continue;
    delta[t.first] += static_cast<int64_t>(t.bytes);
    delta[t.last + 1] -= static_cast<int64_t>(t.bytes);
  }
  MemoryProfile prof;
  prof.during.resize(n);
  int64_t running = 0;
  for (int32_t p = 0; p < n; ++p) {
    running += delta[p];
    prof.during[p] = live.persistent_bytes + static_cast<uint64_t>(running) + live.workspace[p];
    if (prof.during[p] > prof.peak || prof.peak_position < 0) {
      prof.peak = prof.during[p];
      prof.peak_position = p;
    }
  }
  return prof;
}

std::vector<uint64_t> working_sets(const Liveness& live) {
  const int32_t n = live.size();
  std::vector<int64_t> fetched_delta(n + 1, 0);
  std::vector<int64_t> held_delta(n + 1, 0);  // held between two uses
  std::vector<uint64_t> sets(n, live.persistent_bytes);
  for (const TensorLife& t : live.tensors) {
    if (!t.on_device || t.persistent || t.first < 0) continue;
    if (t.fetched) {
      fetched_delta[t.first] += static_cast<int64_t>(t.bytes);
      fetched_delta[n] -= static_cast<int64_t>(t.bytes);
      continue;
    }
    if (!t.input) sets[t.first] += t.bytes;
    // A graph input is resident from position 0 and cannot be swapped out
    // before its first read, so it belongs to every working set until then.
    const int32_t unswappable_end = t.input && !t.uses.empty() ? t.uses.front() : t.first;
    for (int32_t p = t.input ? 0 : unswappable_end; p < unswappable_end; ++p) sets[p] += t.bytes;
    // Between two uses the tensor stays unless idle_intervals offers that
    // gap to the planners: a later use at or past the commit keeps it.
    int32_t prev = t.input ? (t.uses.empty() ? t.first : t.uses.front()) : t.first;
    for (int32_t use : t.uses) {
      sets[use] += t.bytes;
      if (use >= live.commit && use > prev + 1) {
        held_delta[prev + 1] += static_cast<int64_t>(t.bytes);
        held_delta[use] -= static_cast<int64_t>(t.bytes);
      }
      prev = std::max(prev, use);
    }
  }
  int64_t running = 0, held = 0;
  for (int32_t p = 0; p < n; ++p) {
    running += fetched_delta[p];
    held += held_delta[p];
    sets[p] += static_cast<uint64_t>(running + held) + live.workspace[p];
  }
  return sets;
}

WorkingSetLimit working_set_limit(const Liveness& live) {
  const std::vector<uint64_t> sets = working_sets(live);
  WorkingSetLimit limit;
  for (int32_t p = 0; p < live.size(); ++p) {
    if (sets[p] > limit.bytes || limit.position < 0) limit = {sets[p], p};
  }
  return limit;
}

std::vector<IdleInterval> idle_intervals(const Liveness& live,
                                         const std::vector<double>& node_time_s) {
  std::vector<double> prefix(live.size() + 1, 0);
  for (int32_t p = 0; p < live.size(); ++p) {
    prefix[p + 1] = prefix[p] + (p < static_cast<int32_t>(node_time_s.size()) ? node_time_s[p] : 0);
  }
  std::vector<IdleInterval> gaps;
  for (TensorId t = 0; t < static_cast<TensorId>(live.tensors.size()); ++t) {
    const TensorLife& life = live.tensors[t];
    if (!life.on_device || life.persistent || life.fetched || life.uses.empty()) continue;
    // A graph input is anchored at its first read (it has no producer).
    int32_t prev = life.input ? life.uses.front() : life.first;
    for (int32_t use : life.uses) {
      if (use > prev + 1 && use < live.commit)
        gaps.push_back({t, prev, use, prefix[use] - prefix[prev + 1]});
      prev = std::max(prev, use);
    }
  }
  return gaps;
}

}  // namespace lms::swap
