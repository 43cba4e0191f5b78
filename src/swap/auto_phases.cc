// The auto planner's phases and the state each choice updates
// (swap/auto_planner.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lms/status.h"
#include "swap/auto_planner.h"

namespace lms::swap {

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
// another way; the rewrite (src/swap/search.cc) plans the best of its fixed
// variants again with LmsConfig::auto_search_plans seeds (12 by default) on
// graphs up to SearchOptions::jitter_nodes nodes and
// keeps whichever plan the simulator predicts fastest: a small random
// search around the greedy, judged by the same model as the rest.
namespace {

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

}  // namespace

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

}  // namespace lms::swap
