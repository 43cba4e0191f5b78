// Deterministic mutation fuzzing of parse_graph: mutated text of valid graphs
// must give a Status (no crash, no hang: the work is bounded by the iteration
// count), and every accepted text must re-serialise to text that parses back
// to the same text. The seed is fixed and printed so that a failure can be
// replayed; the run takes well under a second without sanitizers.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "graph/text_parser.h"
#include "gtest/gtest.h"
#include "lms/graph.h"
#include "lms/ops.h"
#include "lms/training.h"

namespace lms {
namespace {

constexpr uint64_t kSeed = 0x6c6d732d74657874;  // "lms-text"

// Every op family with attributes, extreme reals and seeds, and a training
// step (backward ops with input_shape / weight_shape / has_bias, optimizer
// attributes and state).
std::string training_text() {
  Graph g;
  TensorId x = g.input("x", {2, 3, 8, 8});
  TensorId t = g.input("t", {2, 2, 8, 8});
  TensorId h =
      conv2d(g, "c1", x, 4, {3}, {.pad = {1}, .seed = std::numeric_limits<uint64_t>::max()});
  h = leaky_relu(g, "lr", instance_norm(g, "in", h), -0.0);
  h = upsample(g, "up", max_pool2d(g, "pool", h, 2), {2}, "linear");
  h = concat(g, "cat", {h, scale(g, "sc", slice(g, "sl", h, 1, 2), 1e-300)});
  h = conv_transpose(g, "dc", h, 2, {3}, {.pad = {1}, .seed = uint64_t{1} << 63});
  TensorId y = softmax(g, "sm", batch_norm(g, "bn", h));
  TensorId loss = add(g, "loss_sum", soft_dice_loss(g, "dice", y, t), mse_loss(g, "mse", y, t));
  EXPECT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, loss, Adam{1e-3, 0.9, 0.999, 1e-8, 1e-4, 1.0});
  EXPECT_TRUE(train.ok()) << train.status();
  return train.ok() ? to_text(*train) : "";
}

// Small hand-written graphs with 3-D ops, swap ops and control edges,
// initialisers of every kind and reals at the edges of the double range.
const char kSwapText[] = R"(input x f32[1,2,4,4,4]
parameter w f32[2,2,3,3,3] he_normal(seed=9223372036854775807,fan_in=54)
parameter g f32[2] constant(-4.9406564584124654e-324)
parameter b f32[2] zeros
optimizer_state s f32[] constant(1.7976931348623157e+308)
node c = conv(x, w) {dilation=[1,1,1], pad=[1,1,1], stride=[1,1,1]} -> c f32[1,2,4,4,4] activation
node r = relu(c) -> r f32[1,2,4,4,4] activation
node so = swap_out(r) -> so f32[1,2,4,4,4] host
node n = instance_norm(r, g, b) {eps=1.0000000000000001e-05} -> n f32[1,2,4,4,4] activation
node si = swap_in(so) after(n) -> si f32[1,2,4,4,4] activation
node m = mul(si, n) -> m f32[1,2,4,4,4] activation
node f = fill() {shape=[], value=-0.0} -> f f32[] activation
node l = reduce_mean(m) -> l f32[] activation
node inc = increment(s) -> ()
loss l
)";

// Insertions that hit the number, string and structure paths of the parser.
const std::vector<std::string>& insertions() {
  static const auto* const kInsertions = new std::vector<std::string>{
      "0",
      "7",
      "-",
      "-1",
      "9223372036854775807",
      "9223372036854775808",
      "-9223372036854775808",
      "18446744073709551615",
      "18446744073709551616",
      "4611686018427387904",
      "1099511627776",
      "1e308",
      "1e400",
      "-0.0",
      "4.9406564584124654e-324",
      "nan",
      "inf",
      "\"",
      "\\",
      "\\\"",
      "\\x",
      "\\n",
      ",",
      "{",
      "}",
      "[",
      "]",
      "(",
      ")",
      "=",
      " ",
      "\n",
      "\r",
      "\t",
      "#",
      "->",
      "after(",
      "{a=\"x\\\"y\"}",
      std::string(1, '\0'),
      "\xff",
      "\xc3\xa9",
  };
  return *kInsertions;
}

// Mostly one edit (so that enough mutants stay valid to test the round
// trip), sometimes up to four: byte flips, insertions, deletions,
// truncations, and duplications or deletions of whole lines.
std::string mutate(std::string text, std::mt19937_64& rng) {
  const int edits = rng() % 4 == 0 ? 2 + static_cast<int>(rng() % 3) : 1;
  for (int i = 0; i < edits && !text.empty(); ++i) {
    const size_t at = rng() % text.size();
    switch (rng() % 7) {
      case 0:
        text[at] = static_cast<char>(rng() % 256);
        break;
      case 1:
      case 2: {
        const auto& ins = insertions();
        text.insert(at, ins[rng() % ins.size()]);
        break;
      }
      case 3:
        text.erase(at, 1 + rng() % 8);
        break;
      case 4:
        text.resize(at);
        break;
      default: {
        // The line around `at`, duplicated (a redefinition) or dropped.
        const size_t begin =
            text.rfind('\n', at) == std::string::npos ? 0 : text.rfind('\n', at) + 1;
        size_t end = text.find('\n', at);
        end = end == std::string::npos ? text.size() : end + 1;
        const std::string line = text.substr(begin, end - begin);
        if (rng() % 2 == 0) {
          text.insert(rng() % (text.size() + 1), line);
        } else {
          text.erase(begin, end - begin);
        }
        break;
      }
    }
  }
  return text;
}

TEST(GraphTextFuzz, MutatedTextGivesAStatusAndAcceptedTextRoundTrips) {
  std::printf("graph text fuzz seed %llu\n", static_cast<unsigned long long>(kSeed));
  std::mt19937_64 rng(kSeed);
  const std::vector<std::string> bases = {training_text(), kSwapText};
  for (const std::string& base : bases) {
    auto g = parse_graph(base);
    ASSERT_TRUE(g.ok()) << g.status() << "\n" << base;
    ASSERT_EQ(to_text(*g), base);
  }
  constexpr int kIterations = 3000;
  int accepted = 0;
  for (int i = 0; i < kIterations; ++i) {
    const std::string text = mutate(bases[i % bases.size()], rng);
    auto g = parse_graph(text);
    if (!g.ok()) {
      EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << absl::CEscape(text);
      continue;
    }
    ++accepted;
    (void)verify(*g);  // any answer, but no crash
    const std::string once = to_text(*g);
    auto again = parse_graph(once);
    ASSERT_TRUE(again.ok()) << "iteration " << i << ": " << again.status() << "\ninput:\n"
                            << absl::CEscape(text) << "\nto_text:\n"
                            << absl::CEscape(once);
    ASSERT_EQ(to_text(*again), once) << "iteration " << i << ", input:\n" << absl::CEscape(text);
  }
  std::printf("%d of %d mutations accepted\n", accepted, kIterations);
  EXPECT_GT(accepted, 0);            // some mutations stay valid
  EXPECT_LT(accepted, kIterations);  // and most do not
}

// Attribute values of random bits: every int, every double (NaN payloads
// aside), every byte string reads back exactly.
TEST(GraphTextFuzz, RandomAttributeValuesRoundTrip) {
  std::printf("attribute value fuzz seed %llu\n", static_cast<unsigned long long>(kSeed));
  std::mt19937_64 rng(kSeed);
  for (int i = 0; i < 3000; ++i) {
    AttrValue v;
    switch (i % 4) {
      case 0:
        v = static_cast<int64_t>(rng());
        break;
      case 1: {
        const double d = std::bit_cast<double>(rng());
        v = std::isnan(d) ? std::numeric_limits<double>::quiet_NaN() : d;
        break;
      }
      case 2: {
        std::string s(rng() % 12, '\0');
        for (char& ch : s) ch = static_cast<char>(rng() % 256);
        v = s;
        break;
      }
      default: {
        std::vector<int64_t> list(rng() % 4);
        for (int64_t& e : list) e = static_cast<int64_t>(rng());
        v = list;
        break;
      }
    }
    const std::string text = attr_value_text(v);
    auto parsed = parse_attr_value_text(text);
    ASSERT_TRUE(parsed.ok()) << absl::CEscape(text) << ": " << parsed.status();
    ASSERT_EQ(attr_value_text(*parsed), text);
    if (const double* d = std::get_if<double>(&v)) {
      ASSERT_EQ(std::bit_cast<uint64_t>(std::get<double>(*parsed)), std::bit_cast<uint64_t>(*d))
          << text;
    } else {
      ASSERT_EQ(*parsed, v) << absl::CEscape(text);
    }
  }
}

}  // namespace
}  // namespace lms
