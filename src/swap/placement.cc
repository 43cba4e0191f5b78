// Static placement of a step's buffers (Note [Static placement] and Note
// [Step buffers]).
#include "swap/placement.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/align.h"
#include "lms/checked.h"
#include "lms/status.h"

namespace lms::swap {
namespace {

constexpr uint64_t kMaxArena = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
// A search that visited kGiveUp * max_scan intervals takes the top.
constexpr size_t kGiveUp = 16;
constexpr uint64_t kNoGap = std::numeric_limits<uint64_t>::max();

struct Interval {
  uint64_t start;
  uint64_t end;  // exclusive
};

// Disjoint address intervals in increasing order; touching intervals are
// merged, so a solid block is one entry. Most hold at most four, which stay
// inline (fewer cache misses than a pointer to them).
using IntervalSet = absl::InlinedVector<Interval, 4>;

// The first interval with start > x.
const Interval* first_above(const IntervalSet& set, uint64_t x) {
  return std::upper_bound(set.data(), set.data() + set.size(), x,
                          [](uint64_t v, const Interval& i) { return v < i.start; });
}

bool covers(const IntervalSet& set, uint64_t lo, uint64_t hi) {
  const Interval* it = first_above(set, lo);
  return it != set.data() && (it - 1)->end >= hi;
}

void add_interval(IntervalSet& set, uint64_t lo, uint64_t hi) {
  size_t first = static_cast<size_t>(first_above(set, lo) - set.data());
  if (first > 0 && set[first - 1].end >= lo) {
    --first;
    lo = set[first].start;
  }
  size_t last = first;
  while (last < set.size() && set[last].start <= hi) hi = std::max(hi, set[last++].end);
  if (first == last) {
    set.insert(set.begin() + first, Interval{lo, hi});
    return;
  }
  set[first] = {lo, hi};
  set.erase(set.begin() + first + 1, set.begin() + last);
}

// Placed buffers over a segment tree of compressed positions (Note [Static
// placement]): leaves are positions 0..n-1 at nodes n..2n-1, node v has
// children 2v and 2v+1, the root is 1. A buffer over leaves [l, r] is
// recorded in full() of its canonical nodes and in sub() of them and their
// ancestors. A placed buffer B and a range W intersect exactly when B's
// canonical node holding a shared leaf is an ancestor of W's canonical node
// holding it (B is in that ancestor's full()), or the same node or a
// descendant (B is in the canonical node's sub()).
class TimeAddressIndex {
 public:
  explicit TimeAddressIndex(int32_t leaves)
      : n_(leaves),
        full_(2 * static_cast<size_t>(leaves)),
        sub_(full_.size()),
        seen_(full_.size()) {}

  // The offset for `size` bytes over leaves [l, r]: the smallest gap that
  // holds it (best fit, lowest on a tie) or the lowest such gap (first fit);
  // the top of the addresses taken there when no gap does. After `max_scan`
  // intervals (0: no limit) a best-fit search settles for the best gap seen
  // so far or, when none fit yet, for the first one that fits from there;
  // after kGiveUp * max_scan, for the top.
  uint64_t find_offset(int32_t l, int32_t r, uint64_t size, bool best_fit, size_t max_scan) {
    gather(l, r);
    // Note [Short scans]: the merge below visits each interval of the sets
    // at most once, so where they hold at most max_scan in all it never
    // reaches max_scan and its answer depends only on the union of the
    // sets: the sorted sweep finds the same gap with no heap.
    size_t intervals = 0;
    for (const IntervalSet* s : sets_) intervals += s->size();
    if (max_scan == 0 || intervals <= max_scan) return sweep(size, best_fit);
    // Merge the sets' intervals in address order with one cursor per set
    // (a min-heap on the cursor's start); `pos` is the end of the addresses
    // taken so far, and a cursor start above it opens a gap.
    heap_.clear();
    for (const IntervalSet* s : sets_) {
      heap_.push_back({s->front().start, s->data(), s->data() + s->size()});
    }
    std::make_heap(heap_.begin(), heap_.end(), Later());
    const size_t give_up = max_scan > SIZE_MAX / kGiveUp ? SIZE_MAX : kGiveUp * max_scan;
    uint64_t pos = 0;
    uint64_t best = kNoGap;
    uint64_t best_gap = kNoGap;
    for (size_t scanned = 0; !heap_.empty(); ++scanned) {
      if (scanned == max_scan && max_scan > 0) {
        if (best != kNoGap) return best;
        best_fit = false;  // from here on the first gap that fits
      }
      if (scanned == give_up && max_scan > 0) {
        uint64_t top = pos;
        for (const IntervalSet* set : sets_) top = std::max(top, set->back().end);
        return top;
      }
      const Cursor top = heap_.front();
      if (top.start > pos) {
        const uint64_t gap = top.start - pos;
        if (gap >= size && gap < best_gap) {
          best = pos;
          best_gap = gap;
          if (!best_fit || gap == size) return best;
        }
      }
      pos = std::max(pos, top.it->end);
      // The set's first interval ending above pos: the next one, or a jump.
      const Interval* next = top.it + 1;
      if (next != top.end && next->end <= pos) {
        next = std::upper_bound(next, top.end, pos,
                                [](uint64_t v, const Interval& i) { return v < i.start; });
        if ((next - 1)->end > pos) --next;
      }
      std::pop_heap(heap_.begin(), heap_.end(), Later());
      if (next == top.end) {
        heap_.pop_back();
      } else {
        heap_.back() = {next->start, next, top.end};
        std::push_heap(heap_.begin(), heap_.end(), Later());
      }
    }
    return best != kNoGap ? best : pos;  // no gap holds it: the top
  }

  // Forgets every placed buffer (as a new index of the same leaves), keeping
  // the sets' storage for the next placement.
  void clear() {
    for (int32_t v : touched_) {
      full_[v].resize(0);
      sub_[v].resize(0);
    }
    touched_.clear();
  }

  void insert(int32_t l, int32_t r, uint64_t lo, uint64_t hi) {
    for_canonical(l, r, [&](int32_t c) {
      if (full_[c].empty() && sub_[c].empty()) touched_.push_back(c);
      add_interval(full_[c], lo, hi);
      for (int32_t u = c; u >= 1; u >>= 1) {
        IntervalSet& s = sub_[u];
        if (covers(s, lo, hi)) break;  // sub() of every ancestor covers it too
        if (s.empty() && full_[u].empty()) touched_.push_back(u);
        add_interval(s, lo, hi);
      }
    });
  }

 private:
  struct Cursor {
    uint64_t start;  // it->start, kept here for the heap
    const Interval* it;
    const Interval* end;
  };
  struct Later {  // the heap's order: the smallest start on top
    bool operator()(const Cursor& a, const Cursor& b) const { return a.start > b.start; }
  };

  template <typename F>
  void for_canonical(int32_t l, int32_t r, F&& f) {
    for (int32_t a = l + n_, b = r + n_ + 1; a < b; a >>= 1, b >>= 1) {
      if (a & 1) f(a++);
      if (b & 1) f(--b);
    }
  }

  // find_offset's answer from the union of sets_ alone (Note [Short
  // scans]): the sets' intervals sorted by start, swept in address order.
  uint64_t sweep(uint64_t size, bool best_fit) {
    all_.clear();
    for (const IntervalSet* s : sets_) all_.insert(all_.end(), s->begin(), s->end());
    std::sort(all_.begin(), all_.end(),
              [](const Interval& a, const Interval& b) { return a.start < b.start; });
    uint64_t pos = 0;
    uint64_t best = kNoGap;
    uint64_t best_gap = kNoGap;
    for (const Interval& i : all_) {
      if (i.start > pos) {
        const uint64_t gap = i.start - pos;
        if (gap >= size && gap < best_gap) {
          best = pos;
          best_gap = gap;
          if (!best_fit || gap == size) return best;
        }
      }
      pos = std::max(pos, i.end);
    }
    return best != kNoGap ? best : pos;
  }

  // The sets whose union is the addresses taken over leaves [l, r].
  void gather(int32_t l, int32_t r) {
    sets_.clear();
    ++epoch_;
    for_canonical(l, r, [&](int32_t c) {
      if (!sub_[c].empty()) sets_.push_back(&sub_[c]);
      for (int32_t u = c >> 1; u >= 1 && seen_[u] != epoch_; u >>= 1) {
        seen_[u] = epoch_;
        if (!full_[u].empty()) sets_.push_back(&full_[u]);
      }
    });
  }

  int32_t n_;
  // By tree node (0 unused): full(), sub(), and the epoch_ of the last
  // gather() that took the node as an ancestor.
  std::vector<IntervalSet> full_;
  std::vector<IntervalSet> sub_;
  std::vector<uint32_t> seen_;
  uint32_t epoch_ = 0;
  std::vector<int32_t> touched_;  // the nodes whose full() or sub() is not empty
  std::vector<const IntervalSet*> sets_;
  std::vector<Cursor> heap_;
  std::vector<Interval> all_;  // sweep()'s
};

// Note [Direct scan]: on steps of at most kDirectBuffers buffers the
// placed buffers are kept in one array in address order and a gap search
// walks it, skipping those whose range misses the window: the paper's
// O(n^2) loop (Note [Static placement]). Its answer is the sweep's over the
// union of the addresses taken in the window, the same as
// TimeAddressIndex's where it sweeps (at most max_scan intervals, which
// steps this small do not reach: at most 119 on the 3-D U-Net's 390
// buffers), with no tree to climb, no sets to gather and nothing to sort:
// about twice as fast there.
constexpr size_t kDirectBuffers = 1024;

class DirectIndex {
 public:
  // As TimeAddressIndex::find_offset, always over the whole union (exact).
  uint64_t find_offset(int32_t l, int32_t r, uint64_t size, bool best_fit, size_t /*max_scan*/) {
    uint64_t pos = 0;
    uint64_t best = kNoGap;
    uint64_t best_gap = kNoGap;
    for (const Entry& e : placed_) {
      if (e.r < l || e.l > r) continue;
      if (e.start > pos) {
        const uint64_t gap = e.start - pos;
        if (gap >= size && gap < best_gap) {
          best = pos;
          best_gap = gap;
          if (!best_fit || gap == size) return best;
        }
      }
      pos = std::max(pos, e.end);
    }
    return best != kNoGap ? best : pos;
  }
  void clear() { placed_.clear(); }
  void insert(int32_t l, int32_t r, uint64_t lo, uint64_t hi) {
    auto at = std::upper_bound(placed_.begin(), placed_.end(), lo,
                               [](uint64_t v, const Entry& e) { return v < e.start; });
    placed_.insert(at, Entry{lo, hi, l, r});
  }

 private:
  struct Entry {
    uint64_t start;
    uint64_t end;  // exclusive
    int32_t l, r;  // leaves
  };
  std::vector<Entry> placed_;  // by start
};

// Buffers with positions compressed to leaves (order kept, so intersections
// are kept) and sizes rounded.
struct Problem {
  std::vector<int32_t> l, r;  // by buffer: leaves
  std::vector<uint64_t> size;
  int32_t leaves = 0;
  std::vector<int64_t> breadth;  // by leaf: live bytes
  uint64_t lower_bound = 0;
};

absl::StatusOr<Problem> make_problem(const std::vector<PlacementBuffer>& buffers,
                                     uint64_t alignment) {
  if (alignment == 0)
    return absl::InvalidArgumentError("placement: alignment_bytes must be positive");
  const size_t n = buffers.size();
  if (n > (size_t{1} << 28)) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement: ", n, " buffers, more than 2^28 are not supported"));
  }
  Problem p;
  p.size.resize(n);
  std::vector<int32_t> points;
  points.reserve(2 * n);
  Checked<uint64_t> total = 0;
  for (size_t i = 0; i < n; ++i) {
    const PlacementBuffer& b = buffers[i];
    if (b.first < 0 || b.first > b.last) {
      return absl::InvalidArgumentError(absl::StrCat("placement: buffer ", i, " has live range [",
                                                     b.first, ", ", b.last,
                                                     "]; need 0 <= first <= last"));
    }
    p.size[i] = b.bytes <= kMaxArena ? placed_size(b, alignment) : kMaxArena + 1;
    total = total + p.size[i];
    if (!total.ok() || total.value() > kMaxArena) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement: the buffers' sizes add up to more than 2^63 - 1 bytes (buffer ",
                       i, " has ", b.bytes, " bytes)"));
    }
    points.push_back(b.first);
    points.push_back(b.last);
  }
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  p.leaves = static_cast<int32_t>(points.size());
  auto leaf = [&](int32_t x) {
    return static_cast<int32_t>(std::lower_bound(points.begin(), points.end(), x) - points.begin());
  };
  p.l.resize(n);
  p.r.resize(n);
  std::vector<int64_t> delta(points.size() + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    p.l[i] = leaf(buffers[i].first);
    p.r[i] = leaf(buffers[i].last);
    delta[p.l[i]] += static_cast<int64_t>(p.size[i]);
    delta[p.r[i] + 1] -= static_cast<int64_t>(p.size[i]);
  }
  p.breadth.resize(points.size());
  int64_t running = 0;
  for (size_t x = 0; x < points.size(); ++x) {
    running += delta[x];
    p.breadth[x] = running;
    p.lower_bound = std::max(p.lower_bound, static_cast<uint64_t>(running));
  }
  return p;
}

// Places the buffers in `order` with `index` (over p.leaves leaves, cleared
// here); nullopt as soon as the arena would exceed `give_up_above` (a
// placement already found is at least as good).
template <typename Index>
std::optional<Placement> place_in_order(const Problem& p, const std::vector<int32_t>& order,
                                        const PlacementOptions& options, PlacementMethod method,
                                        uint64_t give_up_above, Index& index) {
  Placement out;
  out.offset.assign(p.size.size(), 0);
  out.lower_bound_bytes = p.lower_bound;
  out.alignment_bytes = options.alignment_bytes;
  out.method = method;
  if (p.leaves == 0) return out;
  index.clear();
  for (int32_t i : order) {
    const uint64_t offset =
        index.find_offset(p.l[i], p.r[i], p.size[i], options.best_fit, options.max_scan);
    index.insert(p.l[i], p.r[i], offset, offset + p.size[i]);
    out.offset[i] = offset;
    out.arena_bytes = std::max(out.arena_bytes, offset + p.size[i]);
    if (out.arena_bytes > give_up_above) return std::nullopt;
  }
  return out;
}

// Ties after the heuristic's key: longer live range (in positions), then
// earlier start, then lower rank (the index, or a random permutation's rank
// in the search of Note [Random tie orders]).
using Ranks = std::vector<uint32_t>;

bool tie_order(const std::vector<PlacementBuffer>& buffers, const Ranks& rank, int32_t a,
               int32_t b) {
  const int64_t la = int64_t{buffers[a].last} - buffers[a].first;
  const int64_t lb = int64_t{buffers[b].last} - buffers[b].first;
  if (la != lb) return la > lb;
  if (buffers[a].first != buffers[b].first) return buffers[a].first < buffers[b].first;
  return rank[a] < rank[b];
}

std::vector<int32_t> size_order(const Problem& p, const std::vector<PlacementBuffer>& buffers,
                                const Ranks& rank) {
  std::vector<int32_t> order(p.size.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    if (p.size[a] != p.size[b]) return p.size[a] > p.size[b];
    return tie_order(buffers, rank, a, b);
  });
  return order;
}

std::vector<int32_t> breadth_order(const Problem& p, const std::vector<PlacementBuffer>& buffers,
                                   const Ranks& rank) {
  // key[i]: the largest breadth over buffer i's leaves, from a max segment
  // tree over the leaves (bottom-up, as TimeAddressIndex).
  const size_t n = p.breadth.size();
  std::vector<int64_t> tree(2 * n);
  std::copy(p.breadth.begin(), p.breadth.end(), tree.begin() + static_cast<ptrdiff_t>(n));
  for (size_t v = n; v-- > 1;) tree[v] = std::max(tree[2 * v], tree[2 * v + 1]);
  std::vector<int64_t> key(p.size.size(), 0);
  for (size_t i = 0; i < key.size(); ++i) {
    for (size_t a = p.l[i] + n, b = p.r[i] + n + 1; a < b; a >>= 1, b >>= 1) {
      if (a & 1) key[i] = std::max(key[i], tree[a++]);
      if (b & 1) key[i] = std::max(key[i], tree[--b]);
    }
  }
  std::vector<int32_t> order(p.size.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    if (key[a] != key[b]) return key[a] > key[b];
    if (p.size[a] != p.size[b]) return p.size[a] > p.size[b];
    return tie_order(buffers, rank, a, b);
  });
  return order;
}

std::vector<int32_t> area_order(const Problem& p, const std::vector<PlacementBuffer>& buffers,
                                const Ranks& rank) {
  std::vector<double> key(p.size.size());
  for (size_t i = 0; i < key.size(); ++i) {
    const double length = static_cast<double>(int64_t{buffers[i].last} - buffers[i].first + 1);
    key[i] = static_cast<double>(p.size[i]) * length;
  }
  std::vector<int32_t> order(p.size.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    if (key[a] != key[b]) return key[a] > key[b];
    return rank[a] < rank[b];
  });
  return order;
}

// A permutation of 0..n-1 from `seed`: Fisher-Yates on splitmix64, the same
// on every platform (std::shuffle's algorithm is the library's).
Ranks random_ranks(size_t n, uint64_t seed) {
  Ranks rank(n);
  std::iota(rank.begin(), rank.end(), 0u);
  uint64_t state = seed;
  auto next = [&state] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (size_t i = n; i > 1; --i) std::swap(rank[i - 1], rank[next() % i]);
  return rank;
}

std::string describe(const std::vector<PlacementBuffer>& buffers, const Placement& placement,
                     size_t i, uint64_t size) {
  return absl::StrCat("buffer ", i, " (positions [", buffers[i].first, ", ", buffers[i].last,
                      "], bytes [", placement.offset[i], ", ", placement.offset[i] + size, "))");
}

}  // namespace

const char* placement_method_name(PlacementMethod method) {
  switch (method) {
    case PlacementMethod::kGreedyBySize:
      return "greedy by size";
    case PlacementMethod::kGreedyByBreadth:
      return "greedy by breadth";
    case PlacementMethod::kGreedyByArea:
      return "greedy by area";
  }
  return "?";
}

uint64_t placed_size(const PlacementBuffer& buffer, uint64_t alignment) {
  return rounded_size(buffer.bytes, alignment);
}

uint64_t placement_lower_bound(const std::vector<PlacementBuffer>& buffers, uint64_t alignment) {
  auto p = make_problem(buffers, alignment);
  return p.ok() ? p->lower_bound : 0;
}

namespace {

// place_buffers() for a valid problem, with `index` (empty) serving every
// placement.
template <typename Index>
Placement place_with(const Problem& p, const std::vector<PlacementBuffer>& buffers,
                     const PlacementOptions& options, Index& index) {
  Ranks identity(buffers.size());
  std::iota(identity.begin(), identity.end(), 0u);
  std::optional<Placement> best;
  auto gap_above = [&](const Placement& placed) {
    return static_cast<double>(placed.arena_bytes) >
           static_cast<double>(placed.lower_bound_bytes) *
               (1 + std::max(0.0, options.breadth_if_gap_above));
  };
  const std::pair<bool, PlacementMethod> methods[] = {
      {options.greedy_by_size, PlacementMethod::kGreedyBySize},
      {options.greedy_by_breadth, PlacementMethod::kGreedyByBreadth},
      {options.greedy_by_area, PlacementMethod::kGreedyByArea}};
  auto order_of = [&](PlacementMethod method, const Ranks& rank) {
    switch (method) {
      case PlacementMethod::kGreedyBySize:
        return size_order(p, buffers, rank);
      case PlacementMethod::kGreedyByBreadth:
        return breadth_order(p, buffers, rank);
      case PlacementMethod::kGreedyByArea:
        break;
    }
    return area_order(p, buffers, rank);
  };
  // Note [Repeated orders]: a placement depends only on its order, and
  // every order placed here ended at or above the best arena (it became
  // the best, or lost to it, or was abandoned above it). So an order placed
  // before (by a heuristic or a squeaky round) is not placed again by
  // heuristics(): it would be abandoned. The random tie orders often repeat
  // the heuristics' own (a tie among equal keys is rare for greedy by
  // size: on the 3-D U-Net of bench/plan_speed_bench.cc 4,062 of 6,601),
  // and the first placement of each heuristic, kept whole where it was not
  // abandoned, opens its squeaky rounds.
  absl::flat_hash_set<std::vector<int32_t>> placed_orders;
  std::optional<Placement> first_placed[3];  // by PlacementMethod: of the identity ranks
  // Runs the heuristics with ties broken by `rank`: greedy by size always,
  // the other two while the best arena is above the gap; a placement
  // replaces the best only when its arena is strictly smaller.
  auto heuristics = [&](const Ranks& rank) {
    for (const auto& [on, method] : methods) {
      if (!on || (method != PlacementMethod::kGreedyBySize && best && !gap_above(*best))) continue;
      std::vector<int32_t> order = order_of(method, rank);
      if (placed_orders.contains(order)) continue;
      std::optional<Placement> placed =
          place_in_order(p, order, options, method, best ? best->arena_bytes - 1 : kNoGap, index);
      placed_orders.insert(std::move(order));
      if (!placed) continue;
      if (&rank == &identity) first_placed[static_cast<int>(method)] = placed;
      best = std::move(placed);
    }
  };
  heuristics(identity);
  auto missed = [&] { return best->arena_bytes > options.arena_target_bytes && gap_above(*best); };
  // PlacementOptions::search_placed_buffers: each placement of the search
  // spends buffers.size() of it.
  const auto n = static_cast<int64_t>(buffers.size());
  int64_t work_left = options.arena_target_bytes > 0 ? options.search_placed_buffers : 0;
  auto afford = [&](int64_t placements) {
    if (work_left < placements * n) return false;
    work_left -= placements * n;
    return true;
  };
  // No placement is smaller than the lower bound: past the target, the
  // search could only shrink an arena that misses anyway.
  const bool search = work_left > 0 && p.lower_bound <= options.arena_target_bytes;
  // Note [Squeaky wheel]
  if (search && missed()) {
    for (const auto& [on, method] : methods) {
      if (!on || !missed() || !afford(1)) continue;
      std::vector<int32_t> order = order_of(method, identity);
      std::optional<Placement>& placed = first_placed[static_cast<int>(method)];
      if (!placed) placed = place_in_order(p, order, options, method, kNoGap, index);
      for (int32_t round = 1; round <= options.squeaky_rounds && missed() && afford(1); ++round) {
        std::vector<int32_t> next;
        next.reserve(order.size());
        for (int32_t i : order) {
          if (placed->offset[i] + p.size[i] > options.arena_target_bytes) next.push_back(i);
        }
        if (next.empty() || next.size() == order.size()) break;
        for (int32_t i : order) {
          if (placed->offset[i] + p.size[i] <= options.arena_target_bytes) next.push_back(i);
        }
        order = std::move(next);
        placed = place_in_order(p, order, options, method, kNoGap, index);  // never abandoned
        placed_orders.insert(order);
        if (placed->arena_bytes < best->arena_bytes) {
          best = *placed;
          best->squeaky_round = round;
        }
      }
    }
  }
  // Note [Random tie orders]
  if (search) {
    for (int32_t seed = 1; seed <= options.random_orders; ++seed) {
      if (!missed() || !afford(3)) break;
      heuristics(random_ranks(buffers.size(), static_cast<uint64_t>(seed)));
    }
  }
  return std::move(*best);
}

}  // namespace

absl::StatusOr<Placement> place_buffers(const std::vector<PlacementBuffer>& buffers,
                                        const PlacementOptions& options) {
  if (!options.greedy_by_size && !options.greedy_by_breadth && !options.greedy_by_area) {
    return absl::InvalidArgumentError(
        "placement: no heuristic chosen; set at least one of greedy_by_size, greedy_by_breadth "
        "and greedy_by_area");
  }
  LMS_ASSIGN_OR_RETURN(Problem p, make_problem(buffers, options.alignment_bytes));
  // Note [Direct scan].
  if (buffers.size() <= kDirectBuffers) {
    DirectIndex index;
    return place_with(p, buffers, options, index);
  }
  TimeAddressIndex index(p.leaves);
  return place_with(p, buffers, options, index);
}

absl::Status check_placement(const std::vector<PlacementBuffer>& buffers,
                             const Placement& placement, uint64_t arena_limit) {
  const uint64_t alignment = placement.alignment_bytes;
  if (alignment == 0) return absl::InvalidArgumentError("placement: alignment_bytes is 0");
  if (placement.offset.size() != buffers.size()) {
    return absl::InvalidArgumentError(absl::StrCat("placement: ", placement.offset.size(),
                                                   " offsets for ", buffers.size(), " buffers"));
  }
  const uint64_t limit = std::min(arena_limit, placement.arena_bytes);
  std::vector<uint64_t> size(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    const PlacementBuffer& b = buffers[i];
    if (b.first < 0 || b.first > b.last) {
      return absl::InvalidArgumentError(absl::StrCat("placement: buffer ", i, " has live range [",
                                                     b.first, ", ", b.last,
                                                     "]; need 0 <= first <= last"));
    }
    if (b.bytes > kMaxArena) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement: buffer ", i, " has ", b.bytes, " bytes, over 2^63 - 1"));
    }
    size[i] = placed_size(b, alignment);
    if (placement.offset[i] % alignment != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement: ", describe(buffers, placement, i, size[i]),
                       " is not at a multiple of the alignment ", alignment));
    }
    if (placement.offset[i] > limit || size[i] > limit - placement.offset[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "placement: ", describe(buffers, placement, i, size[i]), " lies outside the arena of ",
          limit, " bytes (arena_bytes ", placement.arena_bytes, ", limit ", arena_limit, ")"));
    }
  }
  // Sweep over positions with the live buffers by offset: a new buffer
  // overlaps a live one exactly when it overlaps its neighbour below or
  // above, as the live buffers are disjoint.
  std::vector<int32_t> by_first(buffers.size());
  std::iota(by_first.begin(), by_first.end(), 0);
  std::sort(by_first.begin(), by_first.end(), [&](int32_t a, int32_t b) {
    return buffers[a].first != buffers[b].first ? buffers[a].first < buffers[b].first : a < b;
  });
  using Ending = std::pair<int32_t, int32_t>;  // (last, buffer)
  std::priority_queue<Ending, std::vector<Ending>, std::greater<>> ending;
  absl::btree_map<uint64_t, int32_t> live;  // offset -> buffer
  auto overlap = [&](int32_t a, int32_t b) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement: ", describe(buffers, placement, a, size[a]), " and ",
                     describe(buffers, placement, b, size[b]), " overlap in time and address"));
  };
  for (int32_t i : by_first) {
    while (!ending.empty() && ending.top().first < buffers[i].first) {
      live.erase(placement.offset[ending.top().second]);
      ending.pop();
    }
    const uint64_t lo = placement.offset[i];
    const uint64_t hi = lo + size[i];
    auto above = live.lower_bound(lo);
    if (above != live.end() && above->first < hi) return overlap(above->second, i);
    if (above != live.begin()) {
      auto below = std::prev(above);
      if (below->first + size[below->second] > lo) return overlap(below->second, i);
    }
    live.emplace_hint(above, lo, i);
    ending.emplace(buffers[i].last, i);
  }
  return absl::OkStatus();
}

}  // namespace lms::swap
