// Note [Auto planner]
// The unit of choice is an idle interval ("gap") of a tensor between two uses
// u_a < u_b. Swapping it with trigger g (u_a <= g < u_b) removes the tensor
// from positions u_a+1..g (plan_profile): the original (or the previous copy)
// is freed after u_a and a new copy is allocated after g. A later trigger
// frees more memory; an earlier one hides more of the H2D copy. The latest
// trigger that still hides the copy ("hidden trigger") is found by walking
// back from u_b over predicted compute times until they cover the copy time
// (latency + bytes / h2d bandwidth). Three phases, all on a segment tree that
// holds the exact step-order profile (plan_profile):
//  1. Gaps whose copy can be hidden, largest bytes x freed positions first,
//     are taken whenever their freed range touches a position over the limit.
//  2. While the peak is over the limit, among the gaps covering the peak
//     position q the one with most bytes per added stall second moves its
//     trigger to max(hidden trigger, q) (a stall, since the copy is late).
//  3. Chosen gaps whose bytes fit back under the limit are dropped, latest
//     choice first, so only what the budget requires is swapped.
// The stall estimate ignores queueing on the H2D stream; the simulator
// (simulator.h) predicts the step with it. The final plan is re-checked with
// plan_profile from scratch, so "fits" is never answered for a plan that does
// not fit the usable budget.
//
// Note [Joint planner]
// With recomputation (AutoOptions::actions recompute or joint) a gap may also
// be relieved by dropping the tensor after u_a and recomputing it right
// before u_b (Note [Recomputation] in insert.h): the same freed range as a
// swap triggered at u_b - 1, at the cost of running its producer again, plus
// the producers of any input not live there (a chain, costed with the
// current choices: an input is live unless its own gap there is recomputed,
// or swapped in later, which the chain forbids from then on by capping that
// gap's trigger). Copies are not free once the link is busy: the joint
// planner keeps the sum of chosen copy times (link seconds) and in phase 1
// takes a hidden swap only while that sum stays within the step's compute
// time (times link_share); in phase 2 a swap costs its added stall plus the link seconds it adds
// past the compute time, a recompute the seconds of its chain, and among the
// gaps covering the peak the one with most bytes per added second wins,
// swap or recompute. The copies' stall estimate ignores queueing, so the
// link's real capacity is less than the compute time: AutoOptions::link_share
// scales it, and the rewrite plans with several shares and keeps the plan the
// simulator predicts fastest. Recompute-only skips phase 1 and offers only
// recomputes; swap-only is Note [Auto planner] unchanged. The chain's
// intermediates live only between u_b - 1 and u_b, where node u_b's outputs
// and workspace are not allocated yet, so the profile at the positions does
// not count them; the rewritten graph's layout decides `fits` (Note [Honest
// fits]), and where the intermediates do not fit the rewrite plans again for
// less (Note [Placement-aware planning]).
//
// A swapped tensor's original is released after its last reader, and the
// compute stream waits there for its swap-out (Note [Swap-out release]):
// when the link is slow against one layer's compute, every swap costs that
// wait. With AutoOptions::defer_release the planner instead frees a swap's
// memory only from the position by which its swap-out is predicted done
// (Gap::free_from) and has the original released there (the swap_out's
// release_after), trading that stall for memory held a few positions
// longer; the rewrite plans both ways and keeps the faster prediction.
// Each free_from assumes its swap-out has the D2H stream to itself; once
// the choices are made the swap-outs are replayed in issue order and a
// release that would come before its queued copy is done moves later where
// the profile has room (phase_queue).
#include <algorithm>
#include <cmath>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lms/status.h"
#include "swap/planner.h"
#include "swap/range_max_tree.h"

namespace lms::swap {
namespace {

struct Gap {
  TensorId tensor;
  int32_t after;   // use before the gap
  int32_t before;  // use after the gap
  uint64_t bytes;
  double copy_s;           // H2D time of the tensor
  int32_t hidden_trigger;  // latest trigger that hides the copy (after: none)
  int32_t trigger;         // current trigger; == after while not chosen
  double seconds;          // idle compute time of the gap
  // First position a swap frees: after + 1, or with joint actions and
  // defer_release the first position by which the tensor's swap-out is
  // predicted done (its release is deferred there, Note [Joint planner]).
  int32_t free_from = 0;
  bool recompute = false;  // chosen, and restored by recomputation
  bool forced = false;     // swapped by phase_forced (AutoOptions::force_swap)
  int32_t cap = 0;         // latest swap trigger a chosen recompute allows
  double recompute_s = 0;  // the chain's compute seconds when chosen
};

// What recomputing a tensor right after a position needs, with the current
// choices (Note [Joint planner]).
struct Chain {
  bool ok = false;
  double seconds = 0;
  uint64_t transient = 0;          // bytes of the chain's intermediates
  std::vector<int32_t> leaf_gaps;  // gaps of the inputs read live there
  // Chosen recompute gaps of intermediates the chain computes again, whose
  // own restore comes later (Note [Shared recomputation]).
  std::vector<int32_t> inner_gaps;
};

class AutoPlanner {
 public:
  AutoPlanner(const Graph* graph, const Liveness& live, const std::vector<double>& times,
              const AutoOptions& options, uint64_t limit);
  absl::StatusOr<SwapPlan> run();

 private:
  void collect_gaps();
  bool joint() const { return options_.actions == AutoActions::kJoint && graph_ != nullptr; }
  bool may_swap() const { return options_.actions != AutoActions::kRecompute || graph_ == nullptr; }
  bool may_recompute() const { return options_.actions != AutoActions::kSwap && graph_ != nullptr; }
  int32_t covering_gap(TensorId t, int32_t pos) const;
  bool chain(TensorId t, int32_t pos, int depth, Chain& out) const;
  bool live_leaves(TensorId t, int32_t pos, std::vector<int32_t>& out) const;
  int32_t hiding_trigger(int32_t lowest, int32_t use, double copy_s) const;
  std::vector<int32_t> recomputes_by_restore() const;
  void prefetch_leaf(Gap& leaf, int32_t pos);
  Chain recompute_chain(const Gap& gap) const;
  void choose_recompute(int32_t index, const Chain& c);
  void drop_recompute(int32_t index);
  double link_penalty(const Gap& gap) const {
    if (!joint() || gap.trigger > gap.after) return 0;
    const double t = options_.link_share * prefix_.back();
    return std::max(0.0, link_s_ + gap.copy_s - t) - std::max(0.0, link_s_ - t);
  }
  double stall(const Gap& gap, int32_t trigger) const {
    if (trigger <= gap.after) return 0;
    return std::max(0.0, gap.copy_s - (prefix_[gap.before] - prefix_[trigger + 1]));
  }
  bool host_allows(const Gap& gap) const;
  bool swap_allowed(const Gap& gap) const {
    return gap.tensor >= static_cast<TensorId>(options_.no_swap.size()) ||
           !options_.no_swap[gap.tensor];
  }
  bool recompute_allowed(const Gap& gap) const {
    return gap.tensor >= static_cast<TensorId>(options_.no_recompute.size()) ||
           !options_.no_recompute[gap.tensor];
  }
  void set_trigger(Gap& gap, int32_t trigger);
  // The first position the gap's choice frees.
  int32_t freed_from(const Gap& gap) const { return gap.recompute ? gap.after + 1 : gap.free_from; }
  void phase_forced();
  void phase_hidden();
  absl::Status phase_stall();
  absl::Status phase_stall_batched();
  absl::Status stuck(int32_t q) const;
  void phase_drop();
  void phase_share();
  absl::Status phase_leaves();
  void phase_queue();
  SwapPlan build_plan() const;
  std::string node_name(int32_t position) const;
  bool over() const { return tree_.global_max() > static_cast<int64_t>(limit_); }

  const Graph* graph_;
  const Liveness& live_;
  const AutoOptions& options_;
  const uint64_t limit_;
  std::vector<double> prefix_;  // prefix_[p] = compute time of positions < p
  RangeMaxTree tree_;
  std::vector<Gap> gaps_;
  std::vector<int32_t> chosen_;                // gap indices in order of choice
  std::vector<int32_t> tensor_gaps_;           // chosen gaps per tensor
  std::vector<std::vector<int32_t>> gaps_of_;  // by tensor, ascending `after`
  // By gap: chosen recomputes reading its tensor live in it, and, for a
  // chosen recompute, the gaps it reads live.
  std::vector<int32_t> dependents_;
  std::vector<std::vector<int32_t>> leaves_;
  uint64_t host_bytes_ = 0;
  double link_s_ = 0;  // chosen copies' H2D seconds
};

std::vector<int64_t> signed_profile(const Liveness& live) {
  MemoryProfile prof = memory_profile(live);
  return {prof.during.begin(), prof.during.end()};
}

AutoPlanner::AutoPlanner(const Graph* graph, const Liveness& live, const std::vector<double>& times,
                         const AutoOptions& options, uint64_t limit)
    : graph_(graph),
      live_(live),
      options_(options),
      limit_(limit),
      prefix_(live.size() + 1, 0),
      tree_(signed_profile(live)),
      tensor_gaps_(live.tensors.size(), 0) {
  for (int32_t p = 0; p < live.size(); ++p) {
    prefix_[p + 1] = prefix_[p] + (p < static_cast<int32_t>(times.size()) ? times[p] : 0);
  }
}

std::string AutoPlanner::node_name(int32_t position) const {
  if (graph_ == nullptr) return absl::StrCat("#", live_.order[position]);
  return graph_->node(live_.order[position]).name;
}

// The latest trigger g in [lowest, use - 1] whose compute g+1 .. use-1
// covers `copy_s`; `lowest` when none does.
int32_t AutoPlanner::hiding_trigger(int32_t lowest, int32_t use, double copy_s) const {
  int32_t lo = lowest, hi = use - 1;
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo + 1) / 2;
    if (prefix_[use] - prefix_[mid + 1] >= copy_s)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// The chosen recomputes, in order of restore.
std::vector<int32_t> AutoPlanner::recomputes_by_restore() const {
  std::vector<int32_t> work;
  for (int32_t i : chosen_) {
    if (gaps_[i].recompute && gaps_[i].trigger > gaps_[i].after) work.push_back(i);
  }
  std::stable_sort(work.begin(), work.end(),
                   [&](int32_t a, int32_t b) { return gaps_[a].trigger < gaps_[b].trigger; });
  return work;
}

void AutoPlanner::collect_gaps() {
  for (const IdleInterval& idle : idle_intervals(live_, {})) {
    const TensorLife& life = live_.tensors[idle.tensor];
    if (life.bytes < options_.min_tensor_bytes) continue;
    Gap gap{idle.tensor, idle.after, idle.before, life.bytes, 0, idle.after, idle.after, 0};
    gap.copy_s = options_.copy_latency_s +
                 static_cast<double>(live_.tensors[idle.tensor].bytes) / options_.h2d_bytes_per_s;
    gap.seconds = prefix_[idle.before] - prefix_[idle.after + 1];
    gap.hidden_trigger = hiding_trigger(idle.after, idle.before, gap.copy_s);
    gap.cap = idle.before - 1;
    gap.free_from = idle.after + 1;
    if (joint() && options_.defer_release) {
      const double out_s =
          options_.copy_latency_s + static_cast<double>(life.bytes) / options_.d2h_bytes_per_s;
      const int32_t issued = std::max(life.input ? life.uses.front() : life.first, 0);
      // Smallest p in [after + 1, before] with compute(issued+1 .. p-1) >= out_s.
      int32_t a = idle.after + 1, b = idle.before;
      while (a < b) {
        const int32_t mid = a + (b - a) / 2;
        if (prefix_[mid] - prefix_[std::min(issued + 1, mid)] >= out_s)
          b = mid;
        else
          a = mid + 1;
      }
      gap.free_from = a;
    }
    gaps_.push_back(gap);
  }
  dependents_.assign(gaps_.size(), 0);
  leaves_.assign(gaps_.size(), {});
  gaps_of_.assign(live_.tensors.size(), {});
  for (int32_t i = 0; i < static_cast<int32_t>(gaps_.size()); ++i) {
    gaps_of_[gaps_[i].tensor].push_back(i);
  }
  for (auto& list : gaps_of_) {
    std::sort(list.begin(), list.end(),
              [&](int32_t a, int32_t b) { return gaps_[a].after < gaps_[b].after; });
  }
}

// The gap of `t` idle right after `pos` (after <= pos < before), or -1.
int32_t AutoPlanner::covering_gap(TensorId t, int32_t pos) const {
  const std::vector<int32_t>& list = gaps_of_[t];
  auto it = std::upper_bound(list.begin(), list.end(), pos,
                             [&](int32_t p, int32_t g) { return p < gaps_[g].after; });
  if (it == list.begin()) return -1;
  const Gap& gap = gaps_[*(it - 1)];
  return gap.before > pos ? *(it - 1) : -1;
}

// Adds what recomputing `t` right after `pos` costs to `out`; false when
// some input is neither live there nor recomputable.
bool AutoPlanner::chain(TensorId t, int32_t pos, int depth, Chain& out) const {
  constexpr int kMaxDepth = 8;
  const NodeId producer = graph_->tensor(t).producer;
  if (depth > kMaxDepth || !recomputable(*graph_, producer)) return false;
  const int32_t p = live_.position[producer];
  out.seconds += prefix_[p + 1] - prefix_[p];
  for (TensorId in : graph_->node(producer).inputs) {
    const TensorLife& life = live_.tensors[in];
    if (life.persistent || life.fetched) continue;
    const bool used_later = !life.uses.empty() && life.uses.back() > pos;
    const int32_t g = used_later ? covering_gap(in, pos) : -1;
    // A recompute restored at or before pos is live there too (Note
    // [Shared recomputation]).
    if (used_later && (g < 0 || !gaps_[g].recompute || gaps_[g].trigger <= pos)) {
      if (g >= 0) out.leaf_gaps.push_back(g);
      continue;
    }
    if (g >= 0) out.inner_gaps.push_back(g);
    out.transient += life.bytes;
    if (!chain(in, pos, depth + 1, out)) return false;
  }
  return true;
}

// The gaps of the inputs that recomputing `t` right after `pos` reads live
// there, each once, however deep the chain: chain() stops at its depth, for
// costing, and a chain can grow past it when tensors it read live are chosen
// for recomputation later. False when some input is neither live there nor
// recomputable (a graph input, say).
bool AutoPlanner::live_leaves(TensorId t, int32_t pos, std::vector<int32_t>& out) const {
  absl::flat_hash_set<TensorId> seen;
  std::vector<TensorId> stack = {t};
  while (!stack.empty()) {
    const NodeId producer = graph_->tensor(stack.back()).producer;
    stack.pop_back();
    if (!recomputable(*graph_, producer)) return false;
    for (TensorId in : graph_->node(producer).inputs) {
      if (!seen.insert(in).second) continue;
      const TensorLife& life = live_.tensors[in];
      if (life.persistent || life.fetched) continue;
      const bool used_later = !life.uses.empty() && life.uses.back() > pos;
      const int32_t g = used_later ? covering_gap(in, pos) : -1;
      if (used_later && (g < 0 || !gaps_[g].recompute || gaps_[g].trigger <= pos)) {
        if (g >= 0) out.push_back(g);
        continue;
      }
      stack.push_back(in);
    }
  }
  return true;
}

Chain AutoPlanner::recompute_chain(const Gap& gap) const {
  Chain c;
  c.ok = chain(gap.tensor, gap.before - 1, 0, c);
  return c;
}

void AutoPlanner::choose_recompute(int32_t index, const Chain& c) {
  Gap& gap = gaps_[index];
  gap.recompute = true;
  gap.recompute_s = c.seconds;
  const int32_t pos = gap.before - 1;
  set_trigger(gap, pos);
  leaves_[index] = c.leaf_gaps;
  for (int32_t h : c.leaf_gaps) {
    ++dependents_[h];
    Gap& leaf = gaps_[h];
    leaf.cap = std::min(leaf.cap, pos);
    if (!leaf.recompute && leaf.trigger > pos) set_trigger(leaf, pos);
  }
}

void AutoPlanner::drop_recompute(int32_t index) {
  Gap& gap = gaps_[index];
  for (int32_t h : leaves_[index]) --dependents_[h];
  leaves_[index].clear();
  set_trigger(gap, gap.after);
  gap.recompute = false;
  gap.recompute_s = 0;
}

bool AutoPlanner::host_allows(const Gap& gap) const {
  if (options_.host_limit_bytes == 0 || tensor_gaps_[gap.tensor] > 0) return true;
  return host_bytes_ + gap.bytes <= options_.host_limit_bytes;
}

void AutoPlanner::set_trigger(Gap& gap, int32_t trigger) {
  const int64_t bytes = static_cast<int64_t>(gap.bytes);
  const int32_t from = freed_from(gap);
  tree_.add(from, gap.trigger, bytes);  // undo the old freed range
  tree_.add(from, trigger, -bytes);     // apply the new one
  const bool was = gap.trigger > gap.after, is = trigger > gap.after;
  gap.trigger = trigger;
  if (was == is || gap.recompute) return;
  link_s_ += is ? gap.copy_s : -gap.copy_s;
  int32_t& count = tensor_gaps_[gap.tensor];
  if (is && count++ == 0) host_bytes_ += gap.bytes;
  if (!is && --count == 0) host_bytes_ -= gap.bytes;
}

// AutoOptions::force_swap: each such tensor's longest idle interval is
// swapped at its hidden trigger, first, and kept through phase 3.
void AutoPlanner::phase_forced() {
  if (options_.force_swap.empty() || !may_swap()) return;
  for (TensorId t = 0; t < static_cast<TensorId>(gaps_of_.size()); ++t) {
    if (t >= static_cast<TensorId>(options_.force_swap.size()) || !options_.force_swap[t]) continue;
    int32_t longest = -1;
    for (int32_t i : gaps_of_[t]) {
      const Gap& gap = gaps_[i];
      if (gap.hidden_trigger <= gap.after || gap.free_from > gap.hidden_trigger) continue;
      if (longest < 0 || gap.seconds > gaps_[longest].seconds) longest = i;
    }
    if (longest < 0 || !host_allows(gaps_[longest]) || !swap_allowed(gaps_[longest])) continue;
    set_trigger(gaps_[longest], gaps_[longest].hidden_trigger);
    gaps_[longest].forced = true;
    chosen_.push_back(longest);
  }
}

void AutoPlanner::phase_hidden() {
  std::vector<int32_t> ranked;
  if (!may_swap()) return;
  for (int32_t i = 0; i < static_cast<int32_t>(gaps_.size()); ++i) {
    if (gaps_[i].hidden_trigger > gaps_[i].after) ranked.push_back(i);
  }
  auto area = [&](const Gap& g) {
    return static_cast<double>(g.bytes) * (g.hidden_trigger - g.after);
  };
  std::sort(ranked.begin(), ranked.end(), [&](int32_t a, int32_t b) {
    if (area(gaps_[a]) != area(gaps_[b])) return area(gaps_[a]) > area(gaps_[b]);
    if (gaps_[a].seconds != gaps_[b].seconds) return gaps_[a].seconds > gaps_[b].seconds;
    return a < b;
  });
  for (int32_t i : ranked) {
    if (!over()) return;
    Gap& gap = gaps_[i];
    if (gap.free_from > gap.hidden_trigger) continue;
    if (tree_.max(gap.free_from, gap.hidden_trigger) <= static_cast<int64_t>(limit_)) continue;
    if (!host_allows(gap) || !swap_allowed(gap)) continue;
    if (joint() && link_s_ + gap.copy_s > options_.link_share * prefix_.back()) continue;
    set_trigger(gap, gap.hidden_trigger);
    chosen_.push_back(i);
  }
}

absl::Status AutoPlanner::phase_stall() {
  if (may_recompute()) return phase_stall_batched();
  while (over()) {
    const int32_t q = tree_.argmax();
    int32_t best = -1;
    double best_score = -1;
    for (int32_t i = 0; i < static_cast<int32_t>(gaps_.size()); ++i) {
      const Gap& gap = gaps_[i];
      if (gap.after >= q || gap.before <= q || gap.trigger >= q || gap.recompute) continue;
      if (!host_allows(gap) || !swap_allowed(gap)) continue;
      const int32_t trigger = std::max(gap.hidden_trigger, q);
      if (trigger > gap.cap) continue;
      const double added = stall(gap, trigger) - stall(gap, gap.trigger) + link_penalty(gap);
      const double score = static_cast<double>(gap.bytes) / (added + 1e-6);
      if (score > best_score) best = i, best_score = score;
    }
    if (best < 0) return stuck(q);
    Gap& gap = gaps_[best];
    if (gap.trigger == gap.after) chosen_.push_back(best);
    set_trigger(gap, std::max(gap.hidden_trigger, q));
  }
  return absl::OkStatus();
}

absl::Status AutoPlanner::stuck(int32_t q) const {
  return absl::ResourceExhaustedError(absl::StrCat(
      "lms auto: device bytes during node '", node_name(q), "' stay at ", tree_.global_max(),
      " > usable budget ", limit_,
      " with every tensor idle there swapped out or recomputed (host_memory_limit may prevent "
      "more); raise device_memory_limit or reduce the batch"));
}

// Note [Jittered greedy]
// Phase 2 ranks candidates by bytes per added second, and on a network of
// equal layers (VDSR: every activation 4.5 MiB, every convolution about as
// fast) most candidates tie within the noise of the measured node times:
// which one goes first decides which chains later cost one convolution or
// several, and lms-bench ratio saw the same budget planned between 67% and
// 79% of ideal from one profile to the next. With AutoOptions::jitter_seed
// each candidate's score is scaled by a fixed factor within kJitter of 1
// drawn from the seed and the candidate, so each seed breaks the near-ties
// another way; the rewrite (src/swap/rewrite.cc) plans the best of its fixed
// variants again with LmsConfig::auto_search_plans seeds (12 by default) on
// graphs up to kJitterNodes nodes and
// keeps whichever plan the simulator predicts fastest: a small random
// search around the greedy, judged by the same model as the rest.
constexpr double kJitter = 0.1;

double jitter_factor(uint64_t seed, uint64_t key) {
  // splitmix64 of the seed and the key: deterministic across platforms.
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + key + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const double u = static_cast<double>(z >> 11) * 0x1.0p-53;  // [0, 1)
  return 1 + kJitter * (2 * u - 1);
}

// Phase 2 with recomputation: the gaps covering the peak position q are
// scored (bytes per added second; a recompute's chain counted once more for
// each chosen recompute that reads the tensor live, since its chain then
// grows by this one) and taken best first until q is within the limit. The
// choices change the scores (a neighbour of a recomputed tensor gets a
// longer chain, copies fill the link), so each candidate is scored again
// when it reaches the top and put back if it fell below the next one (lazy
// greedy). One scan per position relieved instead of one per gap keeps
// large graphs fast.
absl::Status AutoPlanner::phase_stall_batched() {
  struct Candidate {
    double score;
    int32_t gap;
    bool recompute;
    bool operator<(const Candidate& o) const {
      if (score != o.score) return score < o.score;
      return gap > o.gap;  // ties: the earlier gap first
    }
  };
  // The candidate's score with the current choices; < 0 when it is no
  // longer possible. `chain` receives the recompute's chain.
  auto score = [&](const Candidate& c, int32_t q, Chain& chain) -> double {
    const Gap& gap = gaps_[c.gap];
    if (gap.recompute || gap.trigger >= q) return -1;
    if (c.recompute) {
      if (gap.trigger != gap.after || !recompute_allowed(gap)) return -1;
      chain = recompute_chain(gap);
      if (!chain.ok) return -1;
      return static_cast<double>(gap.bytes) / (chain.seconds * (1 + dependents_[c.gap]) + 1e-6);
    }
    const int32_t trigger = std::max(gap.hidden_trigger, q);
    if (!may_swap() || trigger > gap.cap || gap.free_from > q || !host_allows(gap) ||
        !swap_allowed(gap)) {
      return -1;
    }
    const double added = stall(gap, trigger) - stall(gap, gap.trigger) + link_penalty(gap);
    return static_cast<double>(gap.bytes) / (added + 1e-6);
  };
  std::vector<Candidate> heap;
  Chain chain;
  auto jittered = [&](const Candidate& c, double score) {
    if (options_.jitter_seed == 0 || score < 0) return score;
    return score *
           jitter_factor(options_.jitter_seed, 2 * static_cast<uint64_t>(c.gap) + c.recompute);
  };
  while (over()) {
    const int32_t q = tree_.argmax();
    heap.clear();
    for (int32_t i = 0; i < static_cast<int32_t>(gaps_.size()); ++i) {
      const Gap& gap = gaps_[i];
      if (gap.after >= q || gap.before <= q) continue;
      for (bool recompute : {false, true}) {
        Candidate c{0, i, recompute};
        c.score = jittered(c, score(c, q, chain));
        if (c.score >= 0) heap.push_back(c);
      }
    }
    std::make_heap(heap.begin(), heap.end());
    bool took = false;
    while (!heap.empty() && tree_.max(q, q) > static_cast<int64_t>(limit_)) {
      std::pop_heap(heap.begin(), heap.end());
      Candidate c = heap.back();
      heap.pop_back();
      const double now = jittered(c, score(c, q, chain));
      if (now < 0) continue;
      if (!heap.empty() && now < heap.front().score) {
        c.score = now;
        heap.push_back(c);
        std::push_heap(heap.begin(), heap.end());
        continue;
      }
      Gap& gap = gaps_[c.gap];
      if (c.recompute) {
        chosen_.push_back(c.gap);
        choose_recompute(c.gap, chain);
      } else {
        if (gap.trigger == gap.after) chosen_.push_back(c.gap);
        set_trigger(gap, std::max(gap.hidden_trigger, q));
      }
      took = true;
    }
    if (!took) return stuck(q);
  }
  return absl::OkStatus();
}

void AutoPlanner::phase_drop() {
  for (auto it = chosen_.rbegin(); it != chosen_.rend(); ++it) {
    Gap& gap = gaps_[*it];
    if (gap.trigger == gap.after || gap.forced) continue;
    const int64_t with = tree_.max(freed_from(gap), gap.trigger) + static_cast<int64_t>(gap.bytes);
    if (with > static_cast<int64_t>(limit_)) continue;
    if (gap.recompute) {
      // Kept again: chains through this tensor now read it live.
      drop_recompute(*it);
    } else {
      set_trigger(gap, gap.after);
    }
  }
}

// Note [Shared recomputation]
// A recompute's chain computes again every intermediate not live at its
// restore, and each intermediate with a recompute of its own is computed a
// second time at its own restore: recomputing every other layer of a chain
// of convolutions costs one, recomputing two in a row three. Gradient
// checkpointing (Chen et al. 2016) instead recomputes a segment once and
// keeps it until its backward use. After phase 3 every chosen recompute
// whose chain passes through such an intermediate, in order of restore,
// moves that intermediate's restore to its own (the intermediate then is
// read live and recomputed once, held from there until its use) where the
// profile has room for it at the positions in between and its chain there
// reads nothing swapped in later. The chain is then looked at again, and
// the moved intermediate's own chain in turn. Compute only shrinks: the
// intermediate's chain at the earlier restore is exactly what the
// dependent's chain spent on it.
void AutoPlanner::phase_share() {
  if (!may_recompute() || !options_.share_recompute) return;
  std::vector<int32_t> work = recomputes_by_restore();
  for (size_t w = 0; w < work.size(); ++w) {
    const int32_t pos = gaps_[work[w]].trigger;
    for (bool moved = true; moved;) {
      moved = false;
      Chain c;
      if (!chain(gaps_[work[w]].tensor, pos, 0, c)) break;
      for (int32_t x : c.inner_gaps) {
        Gap& inner = gaps_[x];
        if (inner.trigger <= pos || pos <= inner.after) continue;
        if (tree_.max(pos + 1, inner.trigger) + static_cast<int64_t>(inner.bytes) >
            static_cast<int64_t>(limit_)) {
          continue;
        }
        Chain own;
        if (!chain(inner.tensor, pos, 0, own)) continue;
        bool live = true;
        for (int32_t h : own.leaf_gaps) live = live && gaps_[h].trigger <= pos;
        if (!live) continue;
        set_trigger(inner, pos);
        inner.recompute_s = own.seconds;
        work.push_back(x);
        moved = true;
        break;
      }
    }
  }
}

// A chain reads a swapped input live at its restore because choosing the
// recompute capped that input's swap-in there (Note [Joint planner]). A
// chain chosen earlier can grow afterwards: when a tensor it read live is
// itself chosen for recomputation, the chain now runs through that tensor's
// own chain, whose swapped inputs were capped only at the later restore.
// Once the choices are final, every recompute's chain is looked at again in
// order of restore, at any depth (live_leaves), and a swapped input it
// reads whose swap-in comes later
// is prefetched by the restore instead where the profile has room; where it
// has none the plan is refused (ResourceExhausted naming both), rather than
// handing the insertion a recompute it cannot build.
absl::Status AutoPlanner::phase_leaves() {
  if (!may_recompute()) return absl::OkStatus();
  // (leaf gap, restore) pairs for Note [Prefetch for recomputation], done
  // once every cap is in place: a cap is needed, a prefetch only helps.
  std::vector<std::pair<int32_t, int32_t>> reads;
  for (int32_t i : recomputes_by_restore()) {
    const int32_t pos = gaps_[i].trigger;
    // A chain that reads an input neither live nor recomputable is left
    // to the insertion, which refuses it.
    std::vector<int32_t> leaves;
    if (!live_leaves(gaps_[i].tensor, pos, leaves)) continue;
    for (int32_t h : leaves) {
      Gap& leaf = gaps_[h];
      if (leaf.recompute || leaf.trigger <= leaf.after) continue;
      if (leaf.trigger > pos) {
        if (tree_.max(pos + 1, leaf.trigger) + static_cast<int64_t>(leaf.bytes) >
            static_cast<int64_t>(limit_)) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "lms auto: the recompute of tensor '", graph_->tensor(gaps_[i].tensor).name,
              "' after '", node_name(pos), "' reads '", graph_->tensor(leaf.tensor).name,
              "', swapped in only after '", node_name(leaf.trigger),
              "', and the profile has no room to prefetch it earlier"));
        }
        leaf.cap = std::min(leaf.cap, pos);
        set_trigger(leaf, pos);
      }
      reads.emplace_back(h, pos);
    }
  }
  if (joint() && options_.prefetch_for_recompute) {
    for (const auto& [h, pos] : reads) prefetch_leaf(gaps_[h], pos);
  }
  return absl::OkStatus();
}

// Note [Prefetch for recomputation]
// A recompute whose chain reads a swapped tensor live needs that tensor's
// swap-in done before the recompute runs, which is earlier than the
// tensor's own backward use, for which its trigger was timed (or capped at
// the recompute's restore by phase_leaves). With joint actions phase_leaves
// then moves each such swap-in earlier, to the latest trigger whose compute
// up to the restore hides the copy, or as far toward it as the profile has
// room for the tensor; the restore then does not wait for the link.
void AutoPlanner::prefetch_leaf(Gap& leaf, int32_t pos) {
  const int32_t want = hiding_trigger(freed_from(leaf), pos + 1, leaf.copy_s);
  if (want >= leaf.trigger) return;
  // Smallest g in [want, trigger - 1] whose added range has room; the room
  // only grows as g rises.
  const int64_t bytes = static_cast<int64_t>(leaf.bytes);
  int32_t a = want, b = leaf.trigger;  // b: none found
  while (a < b) {
    const int32_t mid = a + (b - a) / 2;
    if (tree_.max(mid + 1, leaf.trigger) + bytes <= static_cast<int64_t>(limit_))
      b = mid;
    else
      a = mid + 1;
  }
  if (a >= leaf.trigger) return;
  set_trigger(leaf, a);
  leaf.cap = std::min(leaf.cap, a);
}

// With deferred releases each gap's free_from assumed its swap-out had the
// D2H link to itself from its issue. The copies queue on one stream, so the
// chosen swap-outs are replayed in issue order (FIFO) and a release that
// would come before its copy is done moves to the first position that
// starts after it, where the profile has room to hold the tensor that much
// longer; otherwise it stays, and the compute stream waits there for the
// rest of the copy (Note [Joint planner]).
void AutoPlanner::phase_queue() {
  if (!joint() || !options_.defer_release) return;
  struct Out {
    double issue_s;
    int32_t gap;  // the tensor's first chosen gap, when it is a swap
    uint64_t bytes;
  };
  std::vector<Out> outs;
  for (const std::vector<int32_t>& list : gaps_of_) {
    int32_t first = -1;
    bool copied = false;
    for (int32_t i : list) {
      const Gap& gap = gaps_[i];
      if (gap.trigger == gap.after) continue;
      if (first < 0) first = i;
      copied = copied || !gap.recompute;
    }
    if (!copied) continue;  // kept or only recomputed: no swap-out
    const Gap& gap = gaps_[first];
    const TensorLife& life = live_.tensors[gap.tensor];
    const int32_t issued = std::max(life.input ? life.uses.front() : life.first, 0);
    outs.push_back({prefix_[issued + 1], gap.recompute ? -1 : first, gap.bytes});
  }
  std::stable_sort(outs.begin(), outs.end(),
                   [](const Out& a, const Out& b) { return a.issue_s < b.issue_s; });
  double link_free_s = 0;
  for (const Out& out : outs) {
    const double done_s = std::max(out.issue_s, link_free_s) + options_.copy_latency_s +
                          static_cast<double>(out.bytes) / options_.d2h_bytes_per_s;
    link_free_s = done_s;
    if (out.gap < 0) continue;  // recomputed first: no release waits for the copy
    Gap& gap = gaps_[out.gap];
    const auto at = std::lower_bound(prefix_.begin(), prefix_.end(), done_s);
    const int32_t p = static_cast<int32_t>(at - prefix_.begin());
    if (p <= gap.free_from || p > gap.trigger) continue;
    const int64_t bytes = static_cast<int64_t>(gap.bytes);
    if (tree_.max(gap.free_from, p - 1) + bytes > static_cast<int64_t>(limit_)) continue;
    tree_.add(gap.free_from, p - 1, bytes);
    gap.free_from = p;
  }
}

SwapPlan AutoPlanner::build_plan() const {
  absl::btree_map<TensorId, std::vector<const Gap*>> by_tensor;
  for (const Gap& gap : gaps_) {
    if (gap.trigger > gap.after) by_tensor[gap.tensor].push_back(&gap);
  }
  SwapPlan plan;
  for (auto& [t, gaps] : by_tensor) {
    const TensorLife& life = live_.tensors[t];
    std::sort(gaps.begin(), gaps.end(),
              [](const Gap* a, const Gap* b) { return a->after < b->after; });
    SwapPlan::Item item;
    item.tensor = t;
    item.swap_out_after = live_.order[life.input ? life.uses.front() : life.first];
    // The original, released in the first chosen gap, waits there for the
    // swap-out's predicted end (joint; Note [Joint planner]).
    const Gap& first = *gaps.front();
    if (!first.recompute && first.free_from > first.after + 1) {
      item.release_after = live_.order[first.free_from - 1];
    }
    for (size_t k = 0; k < gaps.size(); ++k) {
      const int32_t end = k + 1 < gaps.size() ? gaps[k + 1]->after : life.uses.back();
      SwapPlan::SwapIn in;
      in.trigger = live_.order[gaps[k]->trigger];
      in.recompute = gaps[k]->recompute;
      for (int32_t use : life.uses) {
        if (use >= gaps[k]->before && use <= end) in.consumers.push_back(live_.order[use]);
      }
      item.swap_ins.push_back(std::move(in));
    }
    plan.items.push_back(std::move(item));
  }
  return plan;
}

absl::StatusOr<SwapPlan> AutoPlanner::run() {
  if (!over()) return SwapPlan{};
  collect_gaps();
  phase_forced();
  phase_hidden();
  LMS_RETURN_IF_ERROR(phase_stall());
  phase_drop();
  phase_share();
  LMS_RETURN_IF_ERROR(phase_leaves());
  phase_queue();
  SwapPlan plan = build_plan();
  const MemoryProfile check = plan_profile(live_, plan);
  if (check.peak > limit_) {
    return absl::InternalError(absl::StrCat("lms auto: planned profile peaks at ", check.peak,
                                            " > usable budget ", limit_, " (planner bug)"));
  }
  return plan;
}

}  // namespace

uint64_t usable_budget(uint64_t budget_bytes, double fragmentation_reserve) {
  return static_cast<uint64_t>(
      std::floor(static_cast<double>(budget_bytes) * (1.0 - fragmentation_reserve)));
}

absl::StatusOr<SwapPlan> plan_auto(const Graph* graph, const Liveness& live,
                                   const std::vector<double>& node_time_s,
                                   const AutoOptions& options) {
  if (options.budget_bytes == 0) {
    return absl::InvalidArgumentError("lms auto: the device budget must be positive");
  }
  if (!(options.fragmentation_reserve >= 0 && options.fragmentation_reserve < 1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "lms auto: fragmentation_reserve %g is outside [0, 1)", options.fragmentation_reserve));
  }
  const uint64_t limit = usable_budget(options.budget_bytes, options.fragmentation_reserve);
  const WorkingSetLimit ws = working_set_limit(live);
  if (ws.position >= 0 && ws.bytes > limit) {
    std::string name = graph != nullptr ? graph->node(live.order[ws.position]).name
                                        : absl::StrCat("#", live.order[ws.position]);
    return absl::ResourceExhaustedError(absl::StrFormat(
        "lms auto: node '%s' needs %d bytes (its inputs, outputs and workspace, persistent and "
        "fetched tensors, unread graph inputs) but the usable device budget is %d bytes "
        "(%d minus fragmentation_reserve %g); raise device_memory_limit or reduce the batch",
        name, ws.bytes, limit, options.budget_bytes, options.fragmentation_reserve));
  }
  AutoPlanner planner(graph, live, node_time_s, options, limit);
  return planner.run();
}

}  // namespace lms::swap
