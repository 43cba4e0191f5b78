#include "swap/placement.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lms/ops.h"
#include "lms/rewrite.h"
#include "lms/training.h"
#include "swap/liveness.h"
#include "swap/release_plan.h"
#include "swap/replay.h"
#include "swap_test_util.h"

namespace lms::swap {
namespace {

using swap_test::parse_or_die;
using ::testing::HasSubstr;

constexpr uint64_t kUnit = 256;  // the alignment of most tests

// ---- A reference: the paper's quadratic loop, written independently ----

// Greedy placement in `order`: each buffer goes into the smallest gap (best
// fit, lowest on a tie) or the lowest gap (first fit) between the placed
// buffers whose ranges intersect its own, else on top of them.
std::vector<uint64_t> reference_place(const std::vector<PlacementBuffer>& buffers,
                                      const std::vector<int32_t>& order, uint64_t alignment,
                                      bool best_fit) {
  std::vector<uint64_t> offset(buffers.size(), 0);
  std::vector<int32_t> placed;
  for (int32_t i : order) {
    std::vector<std::pair<uint64_t, uint64_t>> taken;  // [start, end)
    for (int32_t j : placed) {
      if (buffers[j].last < buffers[i].first || buffers[i].last < buffers[j].first) continue;
      taken.push_back({offset[j], offset[j] + placed_size(buffers[j], alignment)});
    }
    std::sort(taken.begin(), taken.end());
    const uint64_t size = placed_size(buffers[i], alignment);
    uint64_t pos = 0, best = UINT64_MAX, best_gap = UINT64_MAX;
    for (const auto& [start, end] : taken) {
      if (start > pos && start - pos >= size && start - pos < best_gap &&
          (best_fit || best == UINT64_MAX)) {
        best = pos;
        best_gap = start - pos;
      }
      pos = std::max(pos, end);
    }
    offset[i] = best != UINT64_MAX ? best : pos;
    placed.push_back(i);
  }
  return offset;
}

// Ties after the key: longer range, earlier start, lower index.
bool reference_tie(const std::vector<PlacementBuffer>& b, int32_t x, int32_t y) {
  if (b[x].last - b[x].first != b[y].last - b[y].first) {
    return b[x].last - b[x].first > b[y].last - b[y].first;
  }
  return b[x].first != b[y].first ? b[x].first < b[y].first : x < y;
}

std::vector<int32_t> reference_size_order(const std::vector<PlacementBuffer>& b,
                                          uint64_t alignment) {
  std::vector<int32_t> order(b.size());
  for (size_t i = 0; i < b.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
    const uint64_t sx = placed_size(b[x], alignment), sy = placed_size(b[y], alignment);
    return sx != sy ? sx > sy : reference_tie(b, x, y);
  });
  return order;
}

std::vector<int32_t> reference_area_order(const std::vector<PlacementBuffer>& b,
                                          uint64_t alignment) {
  std::vector<int32_t> order(b.size());
  for (size_t i = 0; i < b.size(); ++i) order[i] = static_cast<int32_t>(i);
  auto area = [&](int32_t i) {
    return static_cast<double>(placed_size(b[i], alignment)) *
           static_cast<double>(int64_t{b[i].last} - b[i].first + 1);
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t x, int32_t y) { return area(x) > area(y); });
  return order;
}

// Live bytes by position, brute force.
std::vector<uint64_t> reference_breadth(const std::vector<PlacementBuffer>& b, uint64_t alignment) {
  int32_t end = 0;
  for (const PlacementBuffer& x : b) end = std::max(end, x.last + 1);
  std::vector<uint64_t> breadth(end, 0);
  for (const PlacementBuffer& x : b) {
    for (int32_t p = x.first; p <= x.last; ++p) breadth[p] += placed_size(x, alignment);
  }
  return breadth;
}

std::vector<int32_t> reference_breadth_order(const std::vector<PlacementBuffer>& b,
                                             uint64_t alignment) {
  const std::vector<uint64_t> breadth = reference_breadth(b, alignment);
  std::vector<uint64_t> key(b.size(), 0);
  for (size_t i = 0; i < b.size(); ++i) {
    for (int32_t p = b[i].first; p <= b[i].last; ++p) key[i] = std::max(key[i], breadth[p]);
  }
  std::vector<int32_t> order(b.size());
  for (size_t i = 0; i < b.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
    if (key[x] != key[y]) return key[x] > key[y];
    const uint64_t sx = placed_size(b[x], alignment), sy = placed_size(b[y], alignment);
    return sx != sy ? sx > sy : reference_tie(b, x, y);
  });
  return order;
}

uint64_t arena_of(const std::vector<PlacementBuffer>& b, const std::vector<uint64_t>& offset,
                  uint64_t alignment) {
  uint64_t arena = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    arena = std::max(arena, offset[i] + placed_size(b[i], alignment));
  }
  return arena;
}

// No two buffers with intersecting ranges share an address: every pair.
bool pairwise_disjoint(const std::vector<PlacementBuffer>& b, const Placement& p) {
  for (size_t i = 0; i < b.size(); ++i) {
    for (size_t j = i + 1; j < b.size(); ++j) {
      if (b[i].last < b[j].first || b[j].last < b[i].first) continue;
      const uint64_t ei = p.offset[i] + placed_size(b[i], p.alignment_bytes);
      const uint64_t ej = p.offset[j] + placed_size(b[j], p.alignment_bytes);
      if (p.offset[i] < ej && p.offset[j] < ei) return false;
    }
  }
  return true;
}

std::vector<uint64_t> in_units(const std::vector<uint64_t>& offsets) {
  std::vector<uint64_t> units;
  for (uint64_t o : offsets) units.push_back(o / kUnit);
  return units;
}

// Buffers given in alignment units.
std::vector<PlacementBuffer> unit_buffers(
    std::initializer_list<std::tuple<int32_t, int32_t, uint64_t>> list) {
  std::vector<PlacementBuffer> b;
  for (const auto& [first, last, units] : list) b.push_back({first, last, units * kUnit});
  return b;
}

Placement place_or_die(const std::vector<PlacementBuffer>& b, const PlacementOptions& o) {
  auto p = place_buffers(b, o);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : Placement{};
}

// ---- Hand-computed cases (sizes and offsets in units of 256 B) ----

TEST(Placement, EmptyAndSingleBuffers) {
  Placement p = place_or_die({}, {});
  EXPECT_EQ(p.arena_bytes, 0u);
  EXPECT_EQ(p.lower_bound_bytes, 0u);
  EXPECT_TRUE(p.offset.empty());
  // 1000 B round up to 1024 B; 0 B still take one unit.
  p = place_or_die({{3, 7, 1000}}, {});
  EXPECT_EQ(p.offset, (std::vector<uint64_t>{0}));
  EXPECT_EQ(p.arena_bytes, 1024u);
  EXPECT_EQ(p.lower_bound_bytes, 1024u);
  p = place_or_die({{0, 0, 0}}, {});
  EXPECT_EQ(p.arena_bytes, kUnit);
}

TEST(Placement, BuffersApartInTimeShareAddresses) {
  // A [0,1] 4 and B [2,3] 4 never live together: both at 0, arena 4 = bound.
  const auto b = unit_buffers({{0, 1, 4}, {2, 3, 4}});
  const Placement p = place_or_die(b, {});
  EXPECT_EQ(in_units(p.offset), (std::vector<uint64_t>{0, 0}));
  EXPECT_EQ(p.arena_bytes, 4 * kUnit);
  EXPECT_EQ(p.lower_bound_bytes, 4 * kUnit);
  // Touching ranges do conflict: [0,1] and [1,2] share position 1.
  const Placement q = place_or_die(unit_buffers({{0, 1, 4}, {1, 2, 4}}), {});
  EXPECT_EQ(in_units(q.offset), (std::vector<uint64_t>{0, 4}));
}

TEST(Placement, GreedyBySizeIsOptimalHere) {
  // A [0,3] 4, B [0,1] 3, C [2,3] 2, D [1,2] 1.
  // Live units: position 0: A+B = 7; 1: A+B+D = 8; 2: A+C+D = 7; 3: A+C = 6,
  // so no arena is below 8.
  // Greedy by size: A -> 0 [0,4). B meets A -> on top, 4 [4,7). C meets A
  // only -> on top of A, 4 [4,6). D meets A, B, C: [0,7) taken -> 7 [7,8).
  // Arena 8 = the bound, so greedy by breadth is not tried.
  const auto b = unit_buffers({{0, 3, 4}, {0, 1, 3}, {2, 3, 2}, {1, 2, 1}});
  const Placement p = place_or_die(b, {});
  EXPECT_EQ(in_units(p.offset), (std::vector<uint64_t>{0, 4, 4, 7}));
  EXPECT_EQ(p.arena_bytes, 8 * kUnit);
  EXPECT_EQ(p.lower_bound_bytes, 8 * kUnit);
  EXPECT_EQ(p.method, PlacementMethod::kGreedyBySize);
}

TEST(Placement, BestFitTakesTheSmallestGapFirstFitTheLowest) {
  // A [1,1] 8, F [3,3] 5, C [2,2]... in size order:
  //   A [1,1] 8 -> 0 [0,8).
  //   F [3,3] 5 -> 0 [0,5) (meets nothing placed).
  //   C [1,2] 4 meets A -> on top, 8 [8,12).
  //   G [2,2] 2 meets C only: gap [0,8) -> 0 [0,2).
  //   E [2,3] 1 (longer than Q, so first of the two 1s) meets F [0,5),
  //     C [8,12), G [0,2): gap [5,8) -> 5 [5,6).
  //   Q [2,2] 1 meets C, G, E: gaps [2,5) (3) and [6,8) (2): best fit
  //     takes 6, first fit takes 2.
  // Bound: position 1: A+C = 12 = the arena (C ends at 12).
  const auto b = unit_buffers({{1, 1, 8}, {3, 3, 5}, {1, 2, 4}, {2, 2, 2}, {2, 3, 1}, {2, 2, 1}});
  const Placement best = place_or_die(b, {});
  EXPECT_EQ(in_units(best.offset), (std::vector<uint64_t>{0, 0, 8, 0, 5, 6}));
  EXPECT_EQ(best.arena_bytes, 12 * kUnit);
  EXPECT_EQ(best.lower_bound_bytes, 12 * kUnit);
  const Placement first = place_or_die(b, {.best_fit = false});
  EXPECT_EQ(in_units(first.offset), (std::vector<uint64_t>{0, 0, 8, 0, 5, 2}));
  EXPECT_EQ(first.arena_bytes, 12 * kUnit);
}

TEST(Placement, GreedyByBreadthWinsWhereGreedyBySizeDoesNot) {
  // b0 [0,0] 4, b1 [1,1] 2, b2 [0,1] 3, b3 [1,1] 3.
  // Live: position 0: b0+b2 = 7; position 1: b1+b2+b3 = 8. Bound 8.
  // Greedy by size (b0; b2 before b3, longer; b1): b0 -> 0 [0,4); b2 meets
  // b0 -> 4 [4,7); b3 meets b2 only: gap [0,4) -> 0 [0,3); b1 meets b2 and
  // b3: gap [3,4) is 1 < 2 -> on top, 7 [7,9). Arena 9.
  // Greedy by breadth: keys (largest breadth in range) b1, b2, b3: 8, b0: 7;
  // order b2, b3, b1, b0: b2 -> 0 [0,3); b3 -> 3 [3,6); b1 -> 6 [6,8);
  // b0 meets b2 only -> 3 [3,7). Arena 8 = the bound: optimal.
  const auto b = unit_buffers({{0, 0, 4}, {1, 1, 2}, {0, 1, 3}, {1, 1, 3}});
  const Placement size = place_or_die(b, {.greedy_by_breadth = false, .greedy_by_area = false});
  EXPECT_EQ(in_units(size.offset), (std::vector<uint64_t>{0, 7, 4, 0}));
  EXPECT_EQ(size.arena_bytes, 9 * kUnit);
  const Placement breadth = place_or_die(b, {.greedy_by_size = false, .greedy_by_area = false});
  EXPECT_EQ(in_units(breadth.offset), (std::vector<uint64_t>{3, 6, 0, 3}));
  EXPECT_EQ(breadth.arena_bytes, 8 * kUnit);
  EXPECT_EQ(breadth.method, PlacementMethod::kGreedyByBreadth);
  const Placement both = place_or_die(b, {});
  EXPECT_EQ(both.offset, breadth.offset);
  EXPECT_EQ(both.arena_bytes, 8 * kUnit);
  EXPECT_EQ(both.lower_bound_bytes, 8 * kUnit);
  EXPECT_EQ(both.method, PlacementMethod::kGreedyByBreadth);
  EXPECT_STREQ(placement_method_name(both.method), "greedy by breadth");
}

TEST(Placement, GreedyByAreaPlacesLongLivedBuffersFirst) {
  // b0 [2,2] 4, b1 [0,5] 2, b2 [1,3] 2, b3 [0,0] 5. Live: position 0: b1+b3
  // = 7; 1: b1+b2 = 4; 2: b0+b1+b2 = 8; bound 8.
  // Greedy by size (b3, b0, b1, b2): b3 -> 0; b0 meets none -> 0; b1 meets
  // b3 and b0 -> 5; b2 meets b0 [0,4) and b1 [5,7): gap 1 < 2 -> 7. Arena 9.
  // Greedy by breadth (keys b0 b1 b2: 8, b3: 7; order b0, b1, b2, b3): b0
  // -> 0; b1 -> 4; b2 -> 6; b3 meets b1 [4,6): gap 4 < 5 -> 6. Arena 11.
  // Greedy by area (size x positions: b1 12, b2 6, b3 5, b0 4): b1 -> 0;
  // b2 -> 2; b3 meets b1 -> 2; b0 meets b1 and b2 [0,4) -> 4. Arena 8 = the
  // bound.
  const auto b = unit_buffers({{2, 2, 4}, {0, 5, 2}, {1, 3, 2}, {0, 0, 5}});
  EXPECT_EQ(place_or_die(b, {.greedy_by_breadth = false, .greedy_by_area = false}).arena_bytes,
            9 * kUnit);
  EXPECT_EQ(place_or_die(b, {.greedy_by_size = false, .greedy_by_area = false}).arena_bytes,
            11 * kUnit);
  const Placement area = place_or_die(b, {.greedy_by_size = false, .greedy_by_breadth = false});
  EXPECT_EQ(in_units(area.offset), (std::vector<uint64_t>{4, 0, 2, 2}));
  const Placement all = place_or_die(b, {});
  EXPECT_EQ(all.offset, area.offset);
  EXPECT_EQ(all.arena_bytes, 8 * kUnit);
  EXPECT_EQ(all.lower_bound_bytes, 8 * kUnit);
  EXPECT_EQ(all.method, PlacementMethod::kGreedyByArea);
  EXPECT_STREQ(placement_method_name(all.method), "greedy by area");
}

TEST(Placement, NestedEqualActivationsStackToTheBound) {
  // Forward activation k lives [k, 2n-1-k]: all overlap at the turn, so the
  // bound is n units and greedy by size stacks them k -> k.
  const int32_t n = 50;
  std::vector<PlacementBuffer> b;
  for (int32_t k = 0; k < n; ++k) b.push_back({k, 2 * n - 1 - k, kUnit});
  const Placement p = place_or_die(b, {});
  for (int32_t k = 0; k < n; ++k) EXPECT_EQ(p.offset[k], static_cast<uint64_t>(k) * kUnit);
  EXPECT_EQ(p.arena_bytes, n * kUnit);
  EXPECT_EQ(p.lower_bound_bytes, n * kUnit);
}

// ---- Errors and the checker ----

TEST(Placement, RefusesBadInput) {
  auto p = place_buffers({{0, 1, 10}}, {.alignment_bytes = 0});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("alignment"));
  p = place_buffers({{0, 1, 10}, {3, 2, 10}}, {});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("buffer 1 has live range [3, 2]"));
  p = place_buffers({{-1, 2, 10}}, {});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  p = place_buffers({{0, 0, uint64_t{1} << 62}, {1, 1, uint64_t{1} << 62}}, {});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("2^63 - 1"));
  p = place_buffers({{0, 0, UINT64_MAX}}, {});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  p = place_buffers({{0, 1, 10}},
                    {.greedy_by_size = false, .greedy_by_breadth = false, .greedy_by_area = false});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("no heuristic"));
}

TEST(Placement, CheckerCatchesOverlapsAndOutOfArenaBuffers) {
  const auto b = unit_buffers({{0, 3, 4}, {0, 1, 3}, {2, 3, 2}, {1, 2, 1}});
  Placement p = place_or_die(b, {});
  ASSERT_TRUE(check_placement(b, p, p.arena_bytes).ok());

  Placement overlap = p;
  overlap.offset[3] = 5 * kUnit;  // D [1,2] onto B [1,1] at [4,7)
  absl::Status st = check_placement(b, overlap, overlap.arena_bytes);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("buffer 1 (positions [0, 1], bytes [1024, 1792))"));
  EXPECT_THAT(st.message(), HasSubstr("buffer 3 (positions [1, 2], bytes [1280, 1536))"));
  EXPECT_THAT(st.message(), HasSubstr("overlap"));

  // Same offset, same time: caught too.
  Placement same = p;
  same.offset[2] = 0;  // C [2,3] onto A [0,3] at 0
  st = check_placement(b, same, same.arena_bytes);
  EXPECT_THAT(st.message(), HasSubstr("buffer 0"));
  EXPECT_THAT(st.message(), HasSubstr("buffer 2"));

  // Moving a buffer where nothing lives at its time is fine.
  Placement moved = p;
  moved.offset[2] = 0;
  moved.offset[0] = 4 * kUnit;  // A up, C down: A [4,8) meets B [4,7) now
  EXPECT_FALSE(check_placement(b, moved, UINT64_MAX).ok());

  st = check_placement(b, p, 7 * kUnit);  // D ends at 8 units
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("buffer 3"));
  EXPECT_THAT(st.message(), HasSubstr("outside the arena of 1792 bytes"));

  Placement high = p;
  high.offset[2] = 100 * kUnit;  // beyond arena_bytes
  st = check_placement(b, high, UINT64_MAX);
  EXPECT_THAT(st.message(), HasSubstr("buffer 2"));
  EXPECT_THAT(st.message(), HasSubstr("outside the arena"));

  Placement misaligned = p;
  misaligned.offset[1] += 8;
  EXPECT_THAT(check_placement(b, misaligned, UINT64_MAX).message(),
              HasSubstr("not at a multiple of the alignment"));

  Placement short_list = p;
  short_list.offset.pop_back();
  EXPECT_THAT(check_placement(b, short_list, UINT64_MAX).message(), HasSubstr("3 offsets for 4"));
}

// ---- Properties over random live-range sets ----

enum class RangeShape { kMixed, kEqualSizes, kNested, kSinglePosition, kTrainingLike };

const char* shape_name(RangeShape s) {
  switch (s) {
    case RangeShape::kMixed:
      return "mixed";
    case RangeShape::kEqualSizes:
      return "equal sizes";
    case RangeShape::kNested:
      return "nested";
    case RangeShape::kSinglePosition:
      return "single positions";
    default:
      return "training-like";
  }
}

std::vector<PlacementBuffer> random_buffers(std::mt19937_64& rng, RangeShape shape, size_t count) {
  std::vector<PlacementBuffer> b;
  const int32_t positions = 1 + static_cast<int32_t>(rng() % (count + 1));
  auto pos = [&] { return static_cast<int32_t>(rng() % positions); };
  // A few size classes so that many sizes are equal, and odd byte counts.
  const uint64_t classes[] = {1, 3, 4, 16, 17, 64};
  auto bytes = [&] {
    return rng() % 4 == 0 ? rng() % (70 * kUnit) : classes[rng() % 6] * kUnit - rng() % 2;
  };
  for (size_t i = 0; i < count; ++i) {
    switch (shape) {
      case RangeShape::kMixed: {
        const int32_t first = pos();
        const int32_t len = rng() % 5 == 0 ? pos() : static_cast<int32_t>(rng() % 4);
        b.push_back({first, std::min(positions - 1, first + len), bytes()});
        break;
      }
      case RangeShape::kEqualSizes: {
        const int32_t first = pos();
        b.push_back(
            {first, std::min(positions - 1, first + static_cast<int32_t>(rng() % 6)), 4 * kUnit});
        break;
      }
      case RangeShape::kNested: {
        // Nested pairs around the middle plus short buffers in between.
        const int32_t k = static_cast<int32_t>(rng() % (positions / 2 + 1));
        if (rng() % 3 == 0) {
          const int32_t first = pos();
          b.push_back({first, first, bytes()});
        } else {
          b.push_back({k, std::max(k, positions - 1 - k), bytes()});
        }
        break;
      }
      case RangeShape::kSinglePosition: {
        const int32_t first = pos();
        b.push_back({first, first, bytes()});
        break;
      }
      case RangeShape::kTrainingLike: {
        // Two buffers per position: an activation kept to its mirror with
        // probability 1/3, else read soon; a workspace or small tensor.
        const int32_t p = std::min(positions - 1, static_cast<int32_t>(i / 2));
        if (i % 2 == 0) {
          int32_t last = std::min(positions - 1, p + 1 + static_cast<int32_t>(rng() % 3));
          if (p < positions / 2 && rng() % 3 == 0) last = positions - 1 - p;
          b.push_back({p, last, (uint64_t{64} << (2 * ((p / 40) % 3))) * kUnit});
        } else {
          b.push_back({p, std::min(positions - 1, p + static_cast<int32_t>(rng() % 3)),
                       256 + rng() % (16 * kUnit)});
        }
        break;
      }
    }
  }
  return b;
}

void expect_valid(const std::vector<PlacementBuffer>& b, const Placement& p, uint64_t alignment,
                  const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(p.offset.size(), b.size());
  EXPECT_TRUE(check_placement(b, p, p.arena_bytes).ok()) << check_placement(b, p, p.arena_bytes);
  EXPECT_GE(p.arena_bytes, p.lower_bound_bytes);
  EXPECT_EQ(p.arena_bytes, arena_of(b, p.offset, alignment));
  EXPECT_EQ(p.alignment_bytes, alignment);
  for (size_t i = 0; i < b.size(); ++i) {
    ASSERT_EQ(p.offset[i] % alignment, 0u) << "buffer " << i;
    ASSERT_LE(p.offset[i] + placed_size(b[i], alignment), p.arena_bytes) << "buffer " << i;
  }
  if (b.size() <= 1500) {
    EXPECT_TRUE(pairwise_disjoint(b, p));
  }
  // The bound is the most bytes live at one position.
  if (b.size() <= 5000) {
    const std::vector<uint64_t> breadth = reference_breadth(b, alignment);
    const uint64_t bound = breadth.empty() ? 0 : *std::max_element(breadth.begin(), breadth.end());
    EXPECT_EQ(p.lower_bound_bytes, bound);
    EXPECT_EQ(placement_lower_bound(b, alignment), bound);
  }
}

// Scan limits: the default, none, and small ones that make searches settle
// early (first fit after 1 or 8 intervals, the top after 16 or 128).
constexpr size_t kScans[] = {256, 0, 1, 8};

TEST(PlacementProperty, ValidBoundedAndDeterministicOnRandomSets) {
  const uint64_t seed = 0x706c616365;  // "place"
  std::printf("placement property seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  double worst_gap = 0;
  for (int round = 0; round < 120; ++round) {
    const RangeShape shape = static_cast<RangeShape>(round % 5);
    const size_t count = 1 + rng() % (round % 10 == 9 ? 3000 : 300);
    const uint64_t alignment = round % 7 == 0 ? 512 : kUnit;
    const std::vector<PlacementBuffer> b = random_buffers(rng, shape, count);
    const PlacementOptions options{.alignment_bytes = alignment,
                                   .greedy_by_size = round % 3 != 1,
                                   .greedy_by_breadth = round % 3 != 2,
                                   .best_fit = round % 4 != 3,
                                   .max_scan = kScans[(round / 4) % 4]};
    const std::string what =
        absl::StrCat(shape_name(shape), ", round ", round, ", ", count, " buffers");
    const Placement p = place_or_die(b, options);
    expect_valid(b, p, alignment, what);
    const Placement again = place_or_die(b, options);
    EXPECT_EQ(again.offset, p.offset) << what;
    EXPECT_EQ(again.method, p.method) << what;
    if (p.lower_bound_bytes > 0) {
      worst_gap = std::max(
          worst_gap,
          static_cast<double>(p.arena_bytes) / static_cast<double>(p.lower_bound_bytes) - 1);
    }
  }
  std::printf("worst arena / lower bound - 1 over the rounds (all options): %.2f%%\n",
              100 * worst_gap);
}

// Per Note [Random tie orders], with an arena target below the heuristics'
// arena, the random tie orders never give a larger arena, stay valid and
// deterministic, stop as soon as one fits the target, and find smaller
// arenas on sets with many equal sizes.
TEST(PlacementProperty, RandomTieOrdersOnlyShrinkTheArena) {
  const uint64_t seed = 0x7469657321;  // "ties!"
  std::printf("random tie orders seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  int smaller = 0, rounds = 0;
  double gap_before = 0, gap_after = 0;
  for (int round = 0; round < 300; ++round) {
    const RangeShape shapes[] = {RangeShape::kTrainingLike, RangeShape::kEqualSizes,
                                 RangeShape::kMixed};
    const RangeShape shape = shapes[round % 3];
    const std::vector<PlacementBuffer> b = random_buffers(rng, shape, 20 + rng() % 300);
    const std::string what = absl::StrCat(shape_name(shape), ", round ", round);
    const Placement plain = place_or_die(b, {.alignment_bytes = kUnit});
    if (plain.arena_bytes == plain.lower_bound_bytes) continue;
    ++rounds;
    // Aim at the bound: every order is tried unless one reaches it.
    PlacementOptions options{.alignment_bytes = kUnit};
    options.arena_target_bytes = plain.lower_bound_bytes;
    options.squeaky_rounds = 0;  // the random orders alone
    const Placement searched = place_or_die(b, options);
    expect_valid(b, searched, kUnit, what);
    EXPECT_LE(searched.arena_bytes, plain.arena_bytes) << what;
    EXPECT_EQ(place_or_die(b, options).offset, searched.offset) << what;
    smaller += searched.arena_bytes < plain.arena_bytes;
    const double bound = static_cast<double>(plain.lower_bound_bytes);
    gap_before += static_cast<double>(plain.arena_bytes) / bound - 1;
    gap_after += static_cast<double>(searched.arena_bytes) / bound - 1;
    // A target the first arena already meets changes nothing.
    options.arena_target_bytes = plain.arena_bytes;
    EXPECT_EQ(place_or_die(b, options).offset, plain.offset) << what;
  }
  std::printf("%d of %d sets placed smaller; mean gap over the bound %.2f%% -> %.2f%%\n", smaller,
              rounds, 100 * gap_before / std::max(rounds, 1),
              100 * gap_after / std::max(rounds, 1));
  EXPECT_GT(rounds, 10);
  EXPECT_GT(smaller, 0);
}

// Per Note [Squeaky wheel], with an arena target below the heuristics' arena,
// the reorders never give a larger arena, stay valid and deterministic, and
// find smaller arenas; the winning reorder says which round it was. The
// last sets have VDSR's shape: activations of one size nested around the
// forward/backward boundary and, at the positions between them, a
// workspace of two activations live at one position.
TEST(PlacementProperty, SqueakyWheelOnlyShrinksTheArena) {
  const uint64_t seed = 0x737175656179;  // "squeay"
  std::printf("squeaky wheel seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  int smaller = 0, rounds = 0;
  double gap_before = 0, gap_after = 0;
  for (int round = 0; round < 400; ++round) {
    std::vector<PlacementBuffer> b;
    std::string what;
    if (round < 300) {
      const RangeShape shapes[] = {RangeShape::kTrainingLike, RangeShape::kEqualSizes,
                                   RangeShape::kMixed};
      const RangeShape shape = shapes[round % 3];
      b = random_buffers(rng, shape, 20 + rng() % 300);
      what = absl::StrCat(shape_name(shape), ", round ", round);
    } else {
      // Layers 0..L-1: activation k lives [k, 2L - k] (nested), each
      // backward position has a short-lived gradient, and every position a
      // workspace of 2 units with probability 1/2.
      const int32_t layers = 6 + static_cast<int32_t>(rng() % 20);
      for (int32_t k = 0; k < layers; ++k) b.push_back({k, 2 * layers - k, 4 * kUnit});
      for (int32_t q = layers; q < 2 * layers; ++q) b.push_back({q, q + 1, 4 * kUnit});
      for (int32_t q = 0; q <= 2 * layers; ++q) {
        if (rng() % 2) b.push_back({q, q, 8 * kUnit});
      }
      what = absl::StrCat("vdsr-like, ", layers, " layers, round ", round);
    }
    PlacementOptions plain_options{.alignment_bytes = kUnit};
    const Placement plain = place_or_die(b, plain_options);
    if (plain.arena_bytes == plain.lower_bound_bytes) continue;
    ++rounds;
    PlacementOptions options = plain_options;
    options.arena_target_bytes = plain.lower_bound_bytes;
    options.random_orders = 0;  // the reorders alone
    const Placement searched = place_or_die(b, options);
    expect_valid(b, searched, kUnit, what);
    EXPECT_LE(searched.arena_bytes, plain.arena_bytes) << what;
    const Placement again = place_or_die(b, options);
    EXPECT_EQ(again.offset, searched.offset) << what;
    EXPECT_EQ(again.squeaky_round, searched.squeaky_round) << what;
    EXPECT_EQ(searched.squeaky_round > 0, searched.arena_bytes < plain.arena_bytes) << what;
    EXPECT_LE(searched.squeaky_round, options.squeaky_rounds) << what;
    smaller += searched.arena_bytes < plain.arena_bytes;
    const double bound = static_cast<double>(plain.lower_bound_bytes);
    gap_before += static_cast<double>(plain.arena_bytes) / bound - 1;
    gap_after += static_cast<double>(searched.arena_bytes) / bound - 1;
    // No reorder with rounds 0, or with a work budget short of one
    // placement (PlacementOptions::search_placed_buffers).
    PlacementOptions no_work = options;
    no_work.search_placed_buffers = static_cast<int64_t>(b.size()) - 1;
    EXPECT_EQ(place_or_die(b, no_work).offset, plain.offset) << what;
    options.squeaky_rounds = 0;
    EXPECT_EQ(place_or_die(b, options).offset, plain.offset) << what;
  }
  std::printf("%d of %d sets placed smaller; mean gap over the bound %.2f%% -> %.2f%%\n", smaller,
              rounds, 100 * gap_before / std::max(rounds, 1),
              100 * gap_after / std::max(rounds, 1));
  EXPECT_GT(rounds, 10);
  EXPECT_GT(smaller, rounds / 10);
}

// With no scan limit, the index gives exactly the offsets of the paper's
// quadratic loop, for each heuristic and gap choice.
TEST(PlacementProperty, SameOffsetsAsTheQuadraticReference) {
  const uint64_t seed = 0x72656665;  // "refe"
  std::printf("placement reference seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 100; ++round) {
    const RangeShape shape = static_cast<RangeShape>(round % 5);
    const std::vector<PlacementBuffer> b = random_buffers(rng, shape, 1 + rng() % 400);
    const bool best_fit = round % 3 != 0;
    const std::string what = absl::StrCat(shape_name(shape), ", round ", round);
    const Placement size = place_or_die(
        b,
        {.greedy_by_breadth = false, .greedy_by_area = false, .best_fit = best_fit, .max_scan = 0});
    EXPECT_EQ(size.offset, reference_place(b, reference_size_order(b, kUnit), kUnit, best_fit))
        << what;
    const Placement breadth = place_or_die(
        b, {.greedy_by_size = false, .greedy_by_area = false, .best_fit = best_fit, .max_scan = 0});
    EXPECT_EQ(breadth.offset,
              reference_place(b, reference_breadth_order(b, kUnit), kUnit, best_fit))
        << what;
    const Placement area = place_or_die(
        b,
        {.greedy_by_size = false, .greedy_by_breadth = false, .best_fit = best_fit, .max_scan = 0});
    EXPECT_EQ(area.offset, reference_place(b, reference_area_order(b, kUnit), kUnit, best_fit))
        << what;
    // All three: the smallest arena, the earlier heuristic on a tie.
    const Placement all =
        place_or_die(b, {.breadth_if_gap_above = 0, .best_fit = best_fit, .max_scan = 0});
    const Placement* want = &size;
    if (breadth.arena_bytes < want->arena_bytes) want = &breadth;
    if (want->arena_bytes > want->lower_bound_bytes && area.arena_bytes < want->arena_bytes) {
      want = &area;
    }
    EXPECT_EQ(all.offset, want->offset) << what;
    EXPECT_EQ(all.arena_bytes, want->arena_bytes) << what;
  }
}

TEST(PlacementProperty, HugeSetsStayValid) {
  const uint64_t seed = 0x68756765;  // "huge"
  std::printf("placement huge seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (RangeShape shape :
       {RangeShape::kTrainingLike, RangeShape::kMixed, RangeShape::kSinglePosition}) {
    const std::vector<PlacementBuffer> b = random_buffers(rng, shape, 100000);
    const Placement p = place_or_die(b, {});
    expect_valid(b, p, kUnit, shape_name(shape));
    std::printf(
        "%s, 100000 buffers: arena %llu, lower bound %llu (+%.3f%%), %s\n", shape_name(shape),
        static_cast<unsigned long long>(p.arena_bytes),
        static_cast<unsigned long long>(p.lower_bound_bytes),
        100.0 * (static_cast<double>(p.arena_bytes) / static_cast<double>(p.lower_bound_bytes) - 1),
        placement_method_name(p.method));
  }
}

// ---- Real graphs ----

// A random network from the public builders: 2-D or 3-D convolutions on
// random earlier tensors (multi-consumer), ReLU, add branches and concat, an
// MSE loss, trained with Adam.
Graph random_network(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Graph g;
  const bool three_d = rng() % 3 == 0;
  const int64_t s = three_d ? 4 : 8;
  const Shape shape = three_d ? Shape{2, 2, s, s, s} : Shape{2, 2, s, s};
  std::vector<TensorId> ts = {g.input("image", shape)};
  std::vector<int64_t> channels = {2};
  const int layers = 3 + static_cast<int>(rng() % 10);
  for (int i = 0; i < layers; ++i) {
    const std::string name = absl::StrCat("l", i);
    const size_t a = rng() % ts.size();
    switch (rng() % 4) {
      case 0:
      case 1: {
        const int64_t c = 1 + static_cast<int64_t>(rng() % 4);
        const ConvLayerOptions o{.pad = {1}, .seed = seed * 100 + i};
        ts.push_back(three_d ? conv3d(g, name, ts[a], c, {3}, o)
                             : conv2d(g, name, ts[a], c, {3}, o));
        channels.push_back(c);
        break;
      }
      case 2: {
        // add needs equal shapes: a tensor with the same channel count.
        size_t b = rng() % ts.size();
        for (size_t k = 0; k < ts.size() && channels[b] != channels[a]; ++k)
          b = (b + 1) % ts.size();
        ts.push_back(add(g, name, relu(g, absl::StrCat(name, "/relu"), ts[a]), ts[b]));
        channels.push_back(channels[a]);
        break;
      }
      default: {
        const size_t b = rng() % ts.size();
        ts.push_back(concat(g, name, {ts[a], ts[b]}));
        channels.push_back(channels[a] + channels[b]);
      }
    }
  }
  const ConvLayerOptions o{.pad = {1}, .seed = seed};
  TensorId out =
      three_d ? conv3d(g, "head", ts.back(), 1, {3}, o) : conv2d(g, "head", ts.back(), 1, {3}, o);
  Shape target_shape = shape;
  target_shape[1] = 1;
  TensorId loss = mse_loss(g, "loss", out, g.input("target", target_shape));
  EXPECT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, loss, Adam{1e-3});
  EXPECT_TRUE(train.ok()) << train.status();
  return train.ok() ? std::move(*train) : Graph{};
}

// step_buffers() has the executor's live ranges: each tensor buffer starts
// at its producer (0 for inputs) and ends where release_plan() frees it (the
// end of the step for fetched tensors).
void expect_release_plan_ranges(const Graph& g, const Liveness& live, const StepBuffers& step) {
  auto plan = release_plan(g, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<int32_t> released(g.num_tensors(), -1);
  for (int32_t p = 0; p < static_cast<int32_t>(plan->release_after.size()); ++p) {
    for (TensorId t : plan->release_after[p]) released[t] = p;
  }
  size_t tensors = 0;
  for (size_t i = 0; i < step.buffers.size(); ++i) {
    const TensorId t = step.tensor[i];
    if (t == kNoTensor) continue;
    ++tensors;
    const Tensor& tensor = g.tensor(t);
    SCOPED_TRACE(tensor.name);
    EXPECT_EQ(step.buffers[i].first,
              tensor.producer == kNoNode ? 0 : live.position[tensor.producer]);
    EXPECT_EQ(step.buffers[i].last, plan->fetched[t] ? live.size() - 1 : released[t]);
  }
  // Every device tensor the executor allocates in a step is there.
  size_t allocated = plan->inputs.size();
  for (NodeId n : plan->order) {
    for (TensorId t : g.node(n).outputs) allocated += g.tensor(t).role != TensorRole::kHost;
  }
  EXPECT_EQ(tensors, allocated);
}

TEST(PlacementGraphs, RandomTrainingGraphsPlaceValidly) {
  const uint64_t seed = 0x67726170;  // "grap"
  std::printf("placement graph seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 25; ++round) {
    const uint64_t graph_seed = rng();
    SCOPED_TRACE(testing::Message() << "graph seed " << graph_seed);
    const Graph g = random_network(graph_seed);
    ASSERT_GT(g.num_nodes(), 0);
    // Without workspaces: the bound plus the persistent tensors is the
    // profile peak, and the BFC replay's peak in use is the same bytes.
    auto live = analyze(g, {});
    ASSERT_TRUE(live.ok()) << live.status();
    auto step = step_buffers(g, *live, {});
    ASSERT_TRUE(step.ok()) << step.status();
    expect_release_plan_ranges(g, *live, *step);
    EXPECT_EQ(step->persistent_bytes, live->persistent_bytes);
    const Placement p = place_or_die(step->buffers, {});
    expect_valid(step->buffers, p, kUnit, "graph");
    EXPECT_EQ(p.lower_bound_bytes + step->persistent_bytes, memory_profile(*live).peak);
    auto replay = replay_step(g, {.capacity_bytes = uint64_t{1} << 32});
    ASSERT_TRUE(replay.ok()) << replay.status();
    EXPECT_EQ(replay->peak_bytes, p.lower_bound_bytes + step->persistent_bytes);

    // Per-node workspaces: one buffer each at its node's position.
    std::vector<uint64_t> workspace(g.num_nodes(), 0);
    for (NodeId n = 0; n < g.num_nodes(); ++n) {
      if (rng() % 2 == 0) workspace[n] = rng() % 20000;
    }
    auto with_ws = step_buffers(g, *live, workspace);
    ASSERT_TRUE(with_ws.ok()) << with_ws.status();
    size_t ws_buffers = 0;
    for (size_t i = 0; i < with_ws->buffers.size(); ++i) {
      if (with_ws->workspace_of[i] == kNoNode) continue;
      ++ws_buffers;
      const NodeId n = with_ws->workspace_of[i];
      EXPECT_EQ(with_ws->tensor[i], kNoTensor);
      EXPECT_EQ(with_ws->buffers[i].first, live->position[n]);
      EXPECT_EQ(with_ws->buffers[i].last, live->position[n]);
      EXPECT_EQ(with_ws->buffers[i].bytes, rounded_size(workspace[n], kUnit));
    }
    EXPECT_EQ(ws_buffers, static_cast<size_t>(std::count_if(workspace.begin(), workspace.end(),
                                                            [](uint64_t w) { return w > 0; })));
    const Placement q = place_or_die(with_ws->buffers, {});
    expect_valid(with_ws->buffers, q, kUnit, "graph with workspaces");
    std::printf(
        "graph %2d: %3d nodes, %3zu buffers: arena %llu, bound %llu (+%.2f%%); "
        "with workspaces %llu, bound %llu (+%.2f%%)\n",
        round, g.num_nodes(), step->buffers.size(), static_cast<unsigned long long>(p.arena_bytes),
        static_cast<unsigned long long>(p.lower_bound_bytes),
        100.0 * (static_cast<double>(p.arena_bytes) / static_cast<double>(p.lower_bound_bytes) - 1),
        static_cast<unsigned long long>(q.arena_bytes),
        static_cast<unsigned long long>(q.lower_bound_bytes),
        100.0 *
            (static_cast<double>(q.arena_bytes) / static_cast<double>(q.lower_bound_bytes) - 1));
  }
}

TEST(PlacementGraphs, SwappedGraphs) {
  Graph g = swap_test::conv_training_graph();
  LmsConfig config;
  config.policy = SwapPolicy::kTflms;
  auto rep = rewrite(g, config, PlanningFacts{.device_capacity_bytes = uint64_t{1} << 30});
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_FALSE(rep->swapped.empty());
  auto live = analyze(g, {});
  ASSERT_TRUE(live.ok()) << live.status();
  auto step = step_buffers(g, *live, {});
  ASSERT_TRUE(step.ok()) << step.status();
  expect_release_plan_ranges(g, *live, *step);
  const Placement p = place_or_die(step->buffers, {});
  expect_valid(step->buffers, p, kUnit, "swapped");
  EXPECT_EQ(p.lower_bound_bytes + step->persistent_bytes, memory_profile(*live).peak);
}

// The skip graph with `a` swapped out after its last near read (b), as a
// planner that waits for that read would place it.
constexpr char kLateSwapOut[] = R"(input x f32[1,1,16,16]
node a = relu(x) -> a f32[1,1,16,16] activation
node b = relu(a) -> b f32[1,1,16,16] activation
node swap_out/a = swap_out(a) -> swap_out/a f32[1,1,16,16] host
node c = relu(b) -> c f32[1,1,16,16] activation
node e = add(b, c) -> e f32[1,1,16,16] activation
node swap_in/a/0 = swap_in(swap_out/a) after(e) -> swap_in/a/0 f32[1,1,16,16] activation
node d = add(e, swap_in/a/0) -> d f32[1,1,16,16] activation
node loss = reduce_mean(d) -> loss f32[] activation
loss loss
)";

TEST(PlacementGraphs, ReleaseAfterKeepsTheSwappedSource) {
  // Positions: a 0, b 1, swap_out/a 2, c 3, e 4, swap_in/a/0 5, d 6, loss 7.
  Graph g = parse_or_die(kLateSwapOut);
  auto buffer_of_a = [&](const StepBuffers& step) {
    const auto it = std::find(step.tensor.begin(), step.tensor.end(), g.find_tensor("a"));
    return it == step.tensor.end() ? PlacementBuffer{-1, -1, 0}
                                   : step.buffers[it - step.tensor.begin()];
  };
  for (const char* release_after : {"", "e"}) {
    SCOPED_TRACE(release_after);
    if (*release_after != 0)
      g.mutable_node(g.find_node("swap_out/a")).attrs["release_after"] = release_after;
    auto live = analyze(g, {});
    ASSERT_TRUE(live.ok()) << live.status();
    ASSERT_EQ(live->position[g.find_node("swap_out/a")], 2);
    auto step = step_buffers(g, *live, {});
    ASSERT_TRUE(step.ok()) << step.status();
    expect_release_plan_ranges(g, *live, *step);
    // Freed after the swap_out (2), or held to e (4) with release_after.
    EXPECT_EQ(buffer_of_a(*step).first, 0);
    EXPECT_EQ(buffer_of_a(*step).last, *release_after != 0 ? 4 : 2);
    const Placement p = place_or_die(step->buffers, {});
    expect_valid(step->buffers, p, kUnit, "release_after");
  }
}

TEST(PlacementGraphs, RefusesALivenessOfAnotherGraph) {
  const Graph g = swap_test::conv_training_graph();
  const Graph other = swap_test::random_chain(1, 5);
  auto live = analyze(other, {});
  ASSERT_TRUE(live.ok());
  auto step = step_buffers(g, *live, {});
  EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(step.status().message(), HasSubstr("not computed for this graph"));
}

TEST(PlacementGraphs, RewriteReportsTheArena) {
  Graph g = swap_test::conv_training_graph();
  std::vector<uint64_t> workspace(g.num_nodes(), 0);
  workspace[g.find_node("conv2")] = 1 << 20;
  PlanningFacts facts{.device_capacity_bytes = uint64_t{1} << 30, .workspace_bytes = workspace};
  LmsConfig config;
  config.policy = SwapPolicy::kTflms;
  Graph expected = g;
  auto rep = rewrite(g, config, facts);
  ASSERT_TRUE(rep.ok()) << rep.status();
  // The same figures from the rewritten graph, per-node workspaces included.
  auto live = analyze(g, {.workspace_bytes = workspace});
  ASSERT_TRUE(live.ok());
  auto step = step_buffers(g, *live, workspace);
  ASSERT_TRUE(step.ok());
  const Placement p = place_or_die(step->buffers, {});
  EXPECT_EQ(rep->arena_bytes, p.arena_bytes);
  EXPECT_EQ(rep->arena_lower_bound_bytes, p.lower_bound_bytes);
  EXPECT_EQ(rep->arena_persistent_bytes, step->persistent_bytes);
  EXPECT_GE(rep->arena_bytes, rep->arena_lower_bound_bytes);
  EXPECT_GE(rep->arena_lower_bound_bytes, uint64_t{1} << 20);  // the workspace's node
  EXPECT_THAT(rep->summary(), HasSubstr("static arena"));
  EXPECT_THAT(rep->summary(), HasSubstr("lower bound"));

  LmsConfig off;
  off.enabled = false;
  auto disabled = rewrite(expected, off, facts);
  ASSERT_TRUE(disabled.ok()) << disabled.status();
  EXPECT_GT(disabled->arena_bytes, 0u);
  EXPECT_GE(disabled->arena_bytes, disabled->arena_lower_bound_bytes);
  EXPECT_THAT(disabled->summary(), HasSubstr("static arena"));
}

}  // namespace
}  // namespace lms::swap
