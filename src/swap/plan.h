// A swap plan: which tensors are copied to pinned host memory, after which
// node each swap-out is issued, and for each later group of consumers the
// trigger node after which its swap-in starts, or, for a restore marked
// `recompute`, after which the tensor is computed again from its producer's
// inputs (Note [Recomputation]). Planners produce it; the
// insertion pass (insert.h) applies it.
//
//   SwapPlan plan;
//   plan.items.push_back({.tensor = t, .swap_out_after = producer,
//                         .swap_ins = {{.trigger = g, .consumers = {c}}}});
//   LMS_RETURN_IF_ERROR(swap::validate_plan(graph, live, plan));
//   uint64_t peak = swap::plan_profile(live, plan).peak;
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "lms/graph.h"
#include "swap/liveness.h"

namespace lms::swap {

struct SwapPlan {
  struct SwapIn {
    NodeId trigger = kNoNode;       // the swap-in is issued right after this node
    std::vector<NodeId> consumers;  // later uses served by this copy
    // Recomputed instead of copied: right after `trigger` the tensor's
    // producer (and, where its inputs are gone too, theirs) runs again on the
    // compute stream; nothing crosses the link.
    bool recompute = false;
  };
  struct Item {
    TensorId tensor = kNoTensor;
    // The swap-out is issued right after this node (normally the producer).
    // Consumers not served by a swap-in read the original, which is freed
    // after the last of them or after the swap-out, whichever is later.
    NodeId swap_out_after = kNoNode;
    std::vector<SwapIn> swap_ins;
    // TFLMS sync_mode 1/3: this node gets a control input from the swap-out,
    // so it waits for the D2H copy. kNoNode: asynchronous.
    NodeId sync_before = kNoNode;
    // The original is not released before this node (the swap_out's
    // release_after, Note [Swap-out release]): the one by which its D2H copy
    // is predicted done, so the release does not wait for the copy. kNoNode:
    // released after its last reader as usual.
    NodeId release_after = kNoNode;
  };
  std::vector<Item> items;
};

// True when `node` may be run again to recompute its outputs: a forward op
// whose outputs depend only on its inputs and attributes (OpDef::recomputable
// in graph/op_registry.h: conv, deconv, upsample, relu, leaky_relu, sigmoid,
// softmax, add, mul, scale, concat, slice, max_pool, instance_norm,
// batch_norm, layer_norm, attention) with activation outputs.
bool recomputable(const Graph& graph, NodeId node);

// True when some restore of the item copies (a swap-out is needed).
bool copies(const SwapPlan::Item& item);

// One line per item:
//   swap conv1 out_after=conv1 in=[relu9@{relu_bwd3, conv_bwd_weights1}] sync_before=-
// with a recompute restore written recompute@{consumers}, and an item that
// only recomputes written
//   recompute relu3 in=[recompute@{relu_bwd3}]
std::string to_text(const SwapPlan& plan, const Graph& graph);

// Checks that `plan` can be applied to `graph` scheduled as `live`: each
// tensor an unswapped device tensor that is not persistent or fetched, listed
// once; swap_out_after at or after its producer; each trigger at or after
// swap_out_after; each served consumer a consumer of the tensor, after its
// trigger, served at most once; each trigger before live.commit.
// InvalidArgument naming the tensor otherwise.
absl::Status validate_plan(const Graph& graph, const Liveness& live, const SwapPlan& plan);

// Moves every swap-in triggered at or after live.commit to right before it
// (Note [Step commit]); the tflms, vdnn and manual rules pick
// triggers by distance and may land past it.
void clamp_to_commit(const Liveness& live, SwapPlan& plan);

// The memory profile of the graph after `plan` is inserted, over the original
// positions: a swapped tensor is freed after max(swap-out, unserved
// consumers) and each copy lives from the node after its trigger to its last
// served consumer. With the insertion order of insert.h (swap-outs, then
// swap-ins, right after their anchor node) no swap node's own value exceeds
// its neighbours', so the peak equals the rewritten graph's peak exactly.
// Requires a valid plan.
MemoryProfile plan_profile(const Liveness& live, const SwapPlan& plan);

// Bytes copied each way per step (unrounded tensor bytes); recompute
// restores copy nothing. host_bytes is what the pinned host pool must hold
// at most: one block per swapped tensor, each rounded up to
// `host_alignment` as the pool rounds it (every block of a step is held at
// once at worst).
struct PlanTraffic {
  uint64_t bytes_out = 0;
  uint64_t bytes_in = 0;
  uint64_t host_bytes = 0;  // pinned host bytes held (one block per tensor)
};
PlanTraffic plan_traffic(const Graph& graph, const SwapPlan& plan, uint64_t host_alignment);

}  // namespace lms::swap
