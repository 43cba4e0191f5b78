// Seeded property tests of swap::layout_step (Note [Step layout]) over random
// DAG training graphs (tests/public/random_dags.h: branches, concat and add
// skips, far-apart consumers, 2-D and 3-D convolutions, pooling,
// upsampling), unchanged and rewritten by lms::rewrite (auto at a tight
// budget, and tflms with random `release_after` on its swap-outs), each laid
// out with random alignments, fetch sets and per-node workspaces.
//
// Every layout is checked against the graph and a brute-force reference:
//  - check_placement accepts it at its own arena and rejects it one byte
//    smaller; a quadratic pairwise scan finds no two buffers sharing both a
//    position and an address; offsets are aligned;
//  - arena_bytes is the top of the highest buffer and >= lower_bound_bytes;
//  - arena_in_use is, at every position, the sum of the placed sizes of the
//    buffers live there, and its maximum is lower_bound_bytes (and
//    placement_lower_bound of the buffers);
//  - the buffers are exactly the step's device tensors (activations,
//    gradients, swap-in outputs, read inputs), with the executor's live
//    ranges computed here from the schedule (producer or 0 to the last
//    consumer, a swap-out's release_after, or the end of the step when
//    fetched), plus one workspace per node with a workspace, at its position
//    only, each at its rounded size; tensor_offset / placed_bytes and
//    workspace_offset / workspace_placed agree with the buffers, and
//    everything else (persistent and host tensors) has kNoOffset;
//  - persistent_bytes is the rounded size of the persistent tensors;
//  - the same call gives the same offsets (Session::create relies on it);
//  - laid out with what lms::rewrite planned for (Graph::plan_record), the
//    figures are the report's.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "../public/random_dags.h"
#include "gtest/gtest.h"
#include "lms/config.h"
#include "lms/graph.h"
#include "lms/rewrite.h"
#include "swap/liveness.h"
#include "swap/placement.h"

namespace lms::swap {
namespace {

constexpr uint64_t kSeed = 0x4c41594f'55540001;  // "LAYOUT"
constexpr int kGraphs = 10;                      // per rank
constexpr int kFactDraws = 3;                    // layouts per graph variant

// max(alignment, ceil(bytes / alignment) * alignment), written here again.
uint64_t round_up(uint64_t bytes, uint64_t alignment) {
  return bytes == 0 ? alignment : (bytes + alignment - 1) / alignment * alignment;
}

struct Facts {
  uint64_t alignment = 256;
  std::vector<std::string> fetched;
  std::vector<uint64_t> workspace;  // by NodeId, possibly shorter than the graph
};

std::vector<uint64_t> random_workspaces(std::mt19937_64& rng, int32_t nodes, uint64_t alignment) {
  // Sometimes shorter than the graph (missing entries are 0), sometimes longer.
  const int32_t size = std::max<int32_t>(0, nodes + static_cast<int32_t>(rng() % 7) - 4);
  std::vector<uint64_t> ws(size, 0);
  for (uint64_t& w : ws) {
    switch (rng() % 8) {
      case 0:
        w = 1 + rng() % alignment;  // under one alignment unit
        break;
      case 1:
        w = alignment * (1 + rng() % 8);  // exact multiples
        break;
      case 2:
        w = rng() % 100000;  // up to ~100 KB: may set the arena's peak
        break;
      case 3:
        w = rng() % 5000;
        break;
      default:
        w = 0;
    }
  }
  return ws;
}

Facts random_facts(std::mt19937_64& rng, const Graph& g) {
  Facts f;
  const uint64_t alignments[] = {32, 256, 1024};
  f.alignment = alignments[rng() % 3];
  f.workspace = random_workspaces(rng, g.num_nodes(), f.alignment);
  if (rng() % 3 != 0) {
    // The loss and a few activations or gradients (swap-in outputs too).
    std::vector<std::string> candidates;
    for (TensorId t = 0; t < g.num_tensors(); ++t) {
      const Tensor& tensor = g.tensor(t);
      if (tensor.producer != kNoNode && !is_persistent(tensor.role) &&
          tensor.role != TensorRole::kHost) {
        candidates.push_back(tensor.name);
      }
    }
    if (rng() % 2 == 0) f.fetched.push_back(g.tensor(g.loss()).name);
    const int extra = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < extra && !candidates.empty(); ++i) {
      f.fetched.push_back(candidates[rng() % candidates.size()]);
    }
  }
  return f;
}

void check_layout(const Graph& g, const Facts& f, const std::string& what) {
  SCOPED_TRACE(what);
  SCOPED_TRACE(testing::Message() << "alignment " << f.alignment << ", " << f.fetched.size()
                                  << " fetches, " << f.workspace.size() << " workspace entries");
  const uint64_t a = f.alignment;
  auto layout = layout_step(g, {a, f.fetched, f.workspace});
  ASSERT_TRUE(layout.ok()) << layout.status();
  const StepLayout& l = *layout;
  const Placement& p = l.placement;
  const std::vector<PlacementBuffer>& buffers = l.step.buffers;
  const size_t n = buffers.size();
  ASSERT_EQ(p.offset.size(), n);
  ASSERT_EQ(l.step.tensor.size(), n);
  ASSERT_EQ(l.step.workspace_of.size(), n);
  EXPECT_EQ(p.alignment_bytes, a);

  // The placement is valid, and the arena is no larger than its top buffer.
  const absl::Status valid = check_placement(buffers, p, p.arena_bytes);
  EXPECT_TRUE(valid.ok()) << valid;
  uint64_t top = 0;
  for (size_t i = 0; i < n; ++i) top = std::max(top, p.offset[i] + placed_size(buffers[i], a));
  EXPECT_EQ(p.arena_bytes, top);
  if (p.arena_bytes > 0) {
    EXPECT_FALSE(check_placement(buffers, p, p.arena_bytes - 1).ok())
        << "a buffer should reach the top of the arena";
  }
  EXPECT_GE(p.arena_bytes, p.lower_bound_bytes);

  // Brute force: aligned, no two buffers overlap in time and address.
  int overlaps = 0;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(p.offset[i] % a, 0u) << "buffer " << i;
    EXPECT_GE(buffers[i].first, 0);
    EXPECT_LE(buffers[i].first, buffers[i].last);
    for (size_t j = i + 1; j < n && overlaps < 5; ++j) {
      const bool in_time =
          buffers[i].first <= buffers[j].last && buffers[j].first <= buffers[i].last;
      const bool in_space = p.offset[i] < p.offset[j] + placed_size(buffers[j], a) &&
                            p.offset[j] < p.offset[i] + placed_size(buffers[i], a);
      if (in_time && in_space) {
        ++overlaps;
        ADD_FAILURE() << "buffers " << i << " [" << buffers[i].first << ", " << buffers[i].last
                      << "] at " << p.offset[i] << " and " << j << " [" << buffers[j].first << ", "
                      << buffers[j].last << "] at " << p.offset[j] << " overlap";
      }
    }
  }

  // The schedule, positions and the fetch set, from the public API.
  auto order = schedule(g);
  ASSERT_TRUE(order.ok()) << order.status();
  const int32_t positions = static_cast<int32_t>(order->size());
  EXPECT_EQ(l.live.order, *order);
  std::vector<int32_t> pos(g.num_nodes(), -1);
  for (int32_t q = 0; q < positions; ++q) pos[(*order)[q]] = q;
  std::vector<bool> fetched(g.num_tensors(), false);
  if (f.fetched.empty()) fetched[g.loss()] = true;
  for (const std::string& name : f.fetched) fetched[g.find_tensor(name)] = true;

  // Bytes in use by position, summed buffer by buffer.
  std::vector<uint64_t> in_use(positions, 0);
  for (const PlacementBuffer& b : buffers) {
    ASSERT_LT(b.last, positions);
    for (int32_t q = b.first; q <= b.last; ++q) in_use[q] += placed_size(b, a);
  }
  EXPECT_EQ(l.arena_in_use, in_use);
  const uint64_t max_in_use = in_use.empty() ? 0 : *std::max_element(in_use.begin(), in_use.end());
  EXPECT_EQ(max_in_use, p.lower_bound_bytes) << "max of arena_in_use vs lower_bound_bytes";
  EXPECT_EQ(placement_lower_bound(buffers, a), p.lower_bound_bytes);

  // Which buffer holds each tensor and each node's workspace.
  std::vector<int> buffer_of_tensor(g.num_tensors(), -1), buffer_of_workspace(g.num_nodes(), -1);
  for (size_t i = 0; i < n; ++i) {
    const TensorId t = l.step.tensor[i];
    const NodeId w = l.step.workspace_of[i];
    ASSERT_TRUE((t == kNoTensor) != (w == kNoNode))
        << "buffer " << i << " is tensor " << t << " and workspace of " << w;
    if (t != kNoTensor) {
      ASSERT_TRUE(t >= 0 && t < g.num_tensors());
      EXPECT_EQ(buffer_of_tensor[t], -1) << g.tensor(t).name << " in two buffers";
      buffer_of_tensor[t] = static_cast<int>(i);
    } else {
      ASSERT_TRUE(w >= 0 && w < g.num_nodes());
      EXPECT_EQ(buffer_of_workspace[w], -1) << g.node(w).name << " has two workspaces";
      buffer_of_workspace[w] = static_cast<int>(i);
    }
  }

  // Tensors: in the arena exactly when the executor allocates them in a
  // step, over the executor's live range, at their rounded size.
  ASSERT_EQ(l.tensor_offset.size(), static_cast<size_t>(g.num_tensors()));
  ASSERT_EQ(l.placed_bytes.size(), static_cast<size_t>(g.num_tensors()));
  uint64_t persistent = 0;
  size_t tensor_buffers = 0;
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    const Tensor& tensor = g.tensor(t);
    SCOPED_TRACE(tensor.name);
    const bool in_arena = !is_persistent(tensor.role) && tensor.role != TensorRole::kHost &&
                          !(tensor.role == TensorRole::kInput && tensor.consumers.empty());
    if (is_persistent(tensor.role)) persistent += round_up(tensor.bytes(), a);
    const int i = buffer_of_tensor[t];
    if (!in_arena) {
      EXPECT_EQ(i, -1);
      EXPECT_EQ(l.tensor_offset[t], kNoOffset);
      EXPECT_EQ(l.placed_bytes[t], 0u);
      continue;
    }
    ++tensor_buffers;
    ASSERT_NE(i, -1) << "not in the arena";
    const int32_t first = tensor.producer != kNoNode ? pos[tensor.producer] : 0;
    // The last reader, or later where a swap_out (last reader or not) names
    // a node in release_after (Note [Swap-out release]).
    int32_t last = first;
    for (NodeId c : tensor.consumers) {
      last = std::max(last, pos[c]);
      if (g.node(c).op != OpKind::kSwapOut) continue;
      auto it = g.node(c).attrs.find("release_after");
      if (it != g.node(c).attrs.end()) {
        const NodeId r = g.find_node(std::get<std::string>(it->second));
        ASSERT_NE(r, kNoNode);
        last = std::max(last, pos[r]);
      }
    }
    if (fetched[t]) last = positions - 1;
    EXPECT_EQ(buffers[i].first, first);
    EXPECT_EQ(buffers[i].last, last);
    EXPECT_EQ(placed_size(buffers[i], a), round_up(tensor.bytes(), a));
    EXPECT_EQ(l.tensor_offset[t], p.offset[i]);
    EXPECT_EQ(l.placed_bytes[t], round_up(tensor.bytes(), a));
  }
  EXPECT_EQ(l.step.persistent_bytes, persistent);
  EXPECT_EQ(l.device_bytes(), persistent + p.arena_bytes);

  // Workspaces: one buffer per node with one, at its position only.
  ASSERT_EQ(l.workspace_offset.size(), static_cast<size_t>(g.num_nodes()));
  ASSERT_EQ(l.workspace_placed.size(), static_cast<size_t>(g.num_nodes()));
  size_t workspace_buffers = 0;
  for (NodeId node = 0; node < g.num_nodes(); ++node) {
    SCOPED_TRACE(g.node(node).name);
    const uint64_t w = static_cast<size_t>(node) < f.workspace.size() ? f.workspace[node] : 0;
    const int i = buffer_of_workspace[node];
    if (w == 0) {
      EXPECT_EQ(i, -1);
      EXPECT_EQ(l.workspace_offset[node], kNoOffset);
      EXPECT_EQ(l.workspace_placed[node], 0u);
      continue;
    }
    ++workspace_buffers;
    ASSERT_NE(i, -1) << "workspace of " << w << " bytes not in the arena";
    EXPECT_EQ(buffers[i].first, pos[node]);
    EXPECT_EQ(buffers[i].last, pos[node]);
    EXPECT_EQ(placed_size(buffers[i], a), round_up(w, a));
    EXPECT_EQ(l.workspace_offset[node], p.offset[i]);
    EXPECT_EQ(l.workspace_placed[node], round_up(w, a));
  }
  EXPECT_EQ(n, tensor_buffers + workspace_buffers);

  // Deterministic: Session::create computes the same offsets as the planner.
  auto again = layout_step(g, {a, f.fetched, f.workspace});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->placement.offset, p.offset);
  EXPECT_EQ(again->placement.arena_bytes, p.arena_bytes);
}

// The layout with what lms::rewrite planned for gives the report's figures.
void expect_report_figures(const Graph& g, const RewriteReport& rep, const std::string& what) {
  SCOPED_TRACE(what);
  const PlanRecord& record = g.plan_record();
  ASSERT_TRUE(record.planned);
  auto l = layout_step(g, {record.alignment_bytes, record.fetched, record.workspace_bytes},
                       record.budget_bytes, record.placement_search_buffers);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->placement.arena_bytes, rep.arena_bytes);
  EXPECT_EQ(l->placement.lower_bound_bytes, rep.arena_lower_bound_bytes);
  EXPECT_EQ(l->step.persistent_bytes, rep.arena_persistent_bytes);
  EXPECT_EQ(l->device_bytes(), rep.peak_bytes_after);
  EXPECT_EQ(rep.fits, rep.peak_bytes_after <= rep.budget_bytes);
}

int count_op(const Graph& g, OpKind op) {
  int n = 0;
  for (NodeId i = 0; i < g.num_nodes(); ++i) n += g.node(i).op == op;
  return n;
}

struct Tally {
  int layouts = 0;
  int swapped_graphs = 0;
  int release_after = 0;
};

void check_graph(uint64_t seed, int rank, Tally& tally) {
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15);  // the draws of this graph alone
  auto dag = random_dags::random_dag(seed, rank);
  ASSERT_TRUE(dag.ok()) << dag.status();
  const Graph& base = dag->train;
  std::vector<std::pair<std::string, Graph>> variants;
  variants.emplace_back("unchanged", base);

  // The budget figures with LMS off and small kernel workspaces.
  std::vector<uint64_t> workspaces(base.num_nodes(), 0);
  for (uint64_t& w : workspaces) w = rng() % 4 == 0 ? rng() % 4096 : 0;
  LmsConfig off;
  off.enabled = false;
  Graph probe = base;
  auto limits = rewrite(
      probe, off,
      PlanningFacts{.device_capacity_bytes = uint64_t{1} << 30, .workspace_bytes = workspaces});
  ASSERT_TRUE(limits.ok()) << limits.status();
  expect_report_figures(probe, *limits, "LMS off");
  const uint64_t b0 = limits->peak_bytes_after, w = limits->working_set_limit_bytes;
  ASSERT_LT(w, b0);

  // Auto at a quarter of the way from the working-set limit to B0.
  const uint64_t budget = w + (b0 - w) / 4;
  Graph automatic = base;
  auto rep = rewrite(automatic, LmsConfig{},
                     PlanningFacts{.device_capacity_bytes = budget, .workspace_bytes = workspaces});
  std::printf("seed %#" PRIx64 " rank %d: %d nodes; B0 %" PRIu64 ", W %" PRIu64 ", budget %" PRIu64
              ": ",
              seed, rank, base.num_nodes(), b0, w, budget);
  if (rep.ok()) {
    std::printf("auto swaps %zu, arena %" PRIu64 " bound %" PRIu64 "\n", rep->swapped.size(),
                rep->arena_bytes, rep->arena_lower_bound_bytes);
    EXPECT_TRUE(rep->fits) << rep->summary();
    EXPECT_GT(count_op(automatic, OpKind::kSwapOut), 0);
    expect_report_figures(automatic, *rep, "auto");
    variants.emplace_back("auto", std::move(automatic));
  } else {
    std::printf("auto: %s\n", std::string(rep.status().message()).c_str());
    EXPECT_EQ(rep.status().code(), absl::StatusCode::kResourceExhausted) << rep.status();
  }

  // TFLMS swaps many tensors; some swap-outs keep their source longer.
  Graph tflms = base;
  LmsConfig cfg;
  cfg.policy = SwapPolicy::kTflms;
  cfg.swapout_threshold = static_cast<int32_t>(rng() % 3);
  cfg.swapin_ahead = 1 + static_cast<int32_t>(rng() % 3);
  cfg.sync_mode = static_cast<int32_t>(rng() % 4);
  auto trep = rewrite(tflms, cfg, PlanningFacts{.device_capacity_bytes = uint64_t{1} << 30});
  ASSERT_TRUE(trep.ok()) << trep.status();
  auto order = schedule(tflms);
  ASSERT_TRUE(order.ok()) << order.status();
  int release_after = 0;
  for (NodeId n = 0; n < tflms.num_nodes(); ++n) {
    if (tflms.node(n).op != OpKind::kSwapOut || rng() % 2 != 0) continue;
    tflms.mutable_node(n).attrs["release_after"] = tflms.node((*order)[rng() % order->size()]).name;
    ++release_after;
  }
  auto same_order = schedule(tflms);
  ASSERT_TRUE(same_order.ok()) << same_order.status();
  ASSERT_EQ(*same_order, *order) << "an attribute changed the schedule";
  tally.release_after += release_after;
  variants.emplace_back("tflms", std::move(tflms));

  for (const auto& [name, g] : variants) {
    if (count_op(g, OpKind::kSwapOut) > 0) ++tally.swapped_graphs;
    for (int k = 0; k < kFactDraws; ++k) {
      check_layout(g, random_facts(rng, g), name + " draw " + std::to_string(k));
      ++tally.layouts;
    }
  }
}

TEST(RandomLayout, ValidTightAndConsistentOnRandomTrainingGraphs) {
  std::printf("random layout test seed %#" PRIx64 ", %d graphs per rank\n", kSeed, kGraphs);
  std::mt19937_64 rng(kSeed);
  Tally tally;
  for (int i = 0; i < 2 * kGraphs; ++i) {
    const int rank = 2 + i % 2;
    const uint64_t seed = rng();
    SCOPED_TRACE(testing::Message() << "graph seed " << std::hex << std::showbase << seed
                                    << std::dec << " rank " << rank);
    check_graph(seed, rank, tally);
  }
  std::printf("%d layouts checked; %d graph variants with swaps, %d release_after attributes\n",
              tally.layouts, tally.swapped_graphs, tally.release_after);
  EXPECT_GE(tally.swapped_graphs, kGraphs);  // the swap paths were exercised
  EXPECT_GT(tally.release_after, 0);
}

}  // namespace
}  // namespace lms::swap
