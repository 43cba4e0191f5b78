// attention through include/lms only: the output and the gradients of q, k
// and v against PyTorch's softmax(q·kᵀ·scale + mask)·v (torch/reference.py,
// in float64) on random data with fixed, printed seeds, causal and not, with
// T == S and T != S; the tensors the backward keeps are O(T) (no [T,S]
// probabilities in the training graph) at T = 256; and a small attention
// block planned with LMS at a tight budget, bit-identical to the step
// without LMS.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "budget_check.h"
#include "torch_compare.h"
#include "torch_reference.h"

namespace lms {
namespace {

using torch_ref::random_values;
using torch_ref::relative_l2;
using torch_ref::TorchTensors;
using user::kMiB;

struct AttentionCase {
  int64_t n, h, t, s, d;
  bool causal;
  uint64_t seed;
  double tolerance;  // relative L2 error against the float64 reference
};

// A training graph of mse_loss(attention(q, k, v), target) with q, k and v
// trained, so that their gradients are fetched as "<name>/grad".
absl::StatusOr<Graph> attention_training_graph(const AttentionCase& c, double scale) {
  Graph g;
  const TensorId q = g.parameter("q", {c.n, c.h, c.t, c.d}, Init{});
  const TensorId k = g.parameter("k", {c.n, c.h, c.s, c.d}, Init{});
  const TensorId v = g.parameter("v", {c.n, c.h, c.s, c.d}, Init{});
  const TensorId y = attention(g, "y", q, k, v, scale, c.causal);
  g.set_loss(mse_loss(g, "loss", y, g.input("target", {c.n, c.h, c.t, c.d})));
  LMS_RETURN_IF_ERROR(g.status());
  return training_graph(g, g.loss(), Sgd{.lr = 0.0});
}

void check_against_torch(const AttentionCase& c) {
  SCOPED_TRACE(testing::Message() << "N " << c.n << " H " << c.h << " T " << c.t << " S " << c.s
                                  << " D " << c.d << " causal " << c.causal);
  std::printf("attention seed %" PRIu64 "\n", c.seed);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  auto train = attention_training_graph(c, scale);
  ASSERT_TRUE(train.ok()) << train.status();

  std::mt19937_64 gen(c.seed);
  const Shape qs = {c.n, c.h, c.t, c.d}, ks = {c.n, c.h, c.s, c.d};
  TorchTensors in;
  in["q"] = {qs, random_values(num_elements(qs), gen, 2.0f)};
  in["k"] = {ks, random_values(num_elements(ks), gen, 2.0f)};
  in["v"] = {ks, random_values(num_elements(ks), gen, 1.0f)};
  in["target"] = {qs, random_values(num_elements(qs), gen, 1.0f)};
  auto ref = torch_ref::torch_reference(
      "attention", {{"scale", {scale}}, {"causal", {c.causal ? 1.0 : 0.0}}}, in);
  if (absl::IsUnavailable(ref.status())) GTEST_SKIP() << ref.status().message();
  ASSERT_TRUE(ref.ok()) << ref.status();

  // The node "y" has two outputs: y:0 the attention, y:1 the row log-sum-exp.
  const std::vector<std::string> fetches = {"y:0", "loss", "q/grad", "k/grad", "v/grad"};
  const std::optional<StepResult> r = torch_ref::one_step(*train, in, fetches);
  ASSERT_TRUE(r.has_value());
  for (const std::string& name : fetches) {
    const std::string ref_name = name == "y:0" ? "y" : name;
    const double err = relative_l2(r->fetched.at(name), ref->at(ref_name).values);
    std::printf("  %-7s relative L2 error %.3g\n", name.c_str(), err);
    EXPECT_LE(err, c.tolerance) << name;
  }
}

TEST(Attention, MatchesPyTorch) {
  check_against_torch({2, 3, 7, 7, 4, false, 81, 1e-5});
  check_against_torch({2, 3, 7, 7, 4, true, 82, 1e-5});
  check_against_torch({2, 3, 7, 5, 4, false, 83, 1e-5});  // T != S
  check_against_torch({1, 2, 5, 11, 8, false, 84, 1e-5});
}

// Many tiles of the CPU kernel (128 queries and keys each), T and S not
// multiples of a tile, and the head dims of real models.
TEST(Attention, MatchesPyTorchOverManyTilesAndHeadDims) {
  check_against_torch({1, 2, 300, 300, 32, true, 87, 1e-5});
  check_against_torch({1, 1, 257, 257, 64, true, 88, 1e-5});
  check_against_torch({2, 1, 130, 300, 80, false, 89, 1e-5});  // T != S
  check_against_torch({1, 1, 200, 129, 128, false, 90, 1e-5});
}

// The backward reads q, k, v, out and lse, so what a training step keeps between the forward and
// the backward is O(T), not the [N,H,T,S] probabilities.
TEST(Attention, SavedTensorsAreLinearInTheSequenceLength) {
  const AttentionCase c = {1, 2, 256, 256, 16, true, 85, 1e-4};
  auto train = attention_training_graph(c, 0.25);
  ASSERT_TRUE(train.ok()) << train.status();
  const int64_t probs_elements = c.h * c.t * c.s;  // one [H,T,S] probability tensor
  for (TensorId id = 0; id < train->num_tensors(); ++id) {
    EXPECT_LT(num_elements(train->tensor(id).shape), probs_elements) << train->tensor(id).name;
  }
  int backward_nodes = 0;
  uint64_t saved_bytes = 0;
  for (NodeId id = 0; id < train->num_nodes(); ++id) {
    const Node& node = train->node(id);
    if (node.op != OpKind::kAttentionBwd) continue;
    ++backward_nodes;
    for (TensorId in : node.inputs) {
      if (train->tensor(in).role != TensorRole::kGradient) saved_bytes += train->tensor(in).bytes();
    }
  }
  ASSERT_EQ(backward_nodes, 1);
  // q, k, v and out [N,H,T,D] and lse [N,H,T], float32.
  const uint64_t want = 4 * (4 * c.n * c.h * c.t * c.d + c.n * c.h * c.t);
  std::printf("saved for the backward: %" PRIu64 " bytes; one [H,T,S] tensor: %" PRId64 " bytes\n",
              saved_bytes, 4 * probs_elements);
  EXPECT_EQ(saved_bytes, want);
  EXPECT_LT(saved_bytes, static_cast<uint64_t>(4 * probs_elements) / 3);
  check_against_torch(c);
  check_against_torch({1, 2, 256, 256, 16, false, 86, 1e-4});
}

// prefix + name, appended (not operator+: gcc 12's -Wrestrict false
// positive on short string concatenations).
std::string named(std::string prefix, std::string_view name) {
  prefix.append(name);
  return prefix;
}

// `layers` blocks of: q, k, v projections of x[N*T, C] by linear layers,
// reshaped to [N,H,T,D] heads, causal attention, and an output projection;
// trained with SGD on the mse against a target.
absl::StatusOr<Graph> attention_block(int64_t n, int64_t t, int64_t h, int64_t d, int layers = 1) {
  const int64_t c = h * d;
  Graph g;
  TensorId x = g.input("x", {n * t, c});
  for (int layer = 0; layer < layers; ++layer) {
    std::string l;
    if (layers > 1) {
      l = "l";
      l.append(std::to_string(layer));
      l.push_back('/');
    }
    const uint64_t seed = 4 * static_cast<uint64_t>(layer);
    auto heads = [&](const std::string& name, uint64_t s) {
      const std::string base = named(l, name);
      const TensorId w = g.parameter(named(base, "/w"), {c, c}, Init::he_normal(seed + s, c));
      const TensorId p = linear(g, base, x, w);
      const TensorId r = reshape(g, named(base, "/heads"), p, {n, t, h, d});
      return transpose(g, named(base, "/nhtd"), r, {0, 2, 1, 3});
    };
    const TensorId q = heads("q", 1), k = heads("k", 2), v = heads("v", 3);
    const std::string attn = named(l, "attn");
    TensorId a = attention(g, attn, q, k, v, 1.0 / std::sqrt(static_cast<double>(d)), true);
    a = transpose(g, named(attn, "/ntd"), a, {0, 2, 1, 3});
    a = reshape(g, named(attn, "/rows"), a, {n * t, c});
    const TensorId wo = g.parameter(named(l, "out/w"), {c, c}, Init::he_normal(seed + 4, c));
    x = linear(g, named(l, "out"), a, wo);
  }
  g.set_loss(mse_loss(g, "loss", x, g.input("target", {n * t, c})));
  LMS_RETURN_IF_ERROR(g.status());
  return training_graph(g, g.loss(), Sgd{.lr = 0.05, .momentum = 0.9});
}

// The planner's view of the same property: planned at a tight budget, the
// block at T = 256 swaps or recomputes only tensors far smaller than one
// [H,T,S] probability tensor (none exists to choose).
TEST(Attention, PlannerMovesNoQuadraticTensor) {
  constexpr int64_t kN = 1, kT = 256, kH = 2, kD = 16;
  const uint64_t probs_bytes = 4 * kH * kT * kT;
  auto train = attention_block(kN, kT, kH, kD);
  ASSERT_TRUE(train.ok()) << train.status();
  std::printf("one [H,T,S] tensor %" PRIu64 " bytes\n", probs_bytes);
  const user::NoLmsReference ref = user::no_lms_reference(*train, {}, 0);
  ASSERT_TRUE(ref.ok);
  const std::optional<user::BudgetPlan> plan = user::first_plan_in_sweep(
      *train, ref, LmsConfig{}, 16,
      [](const Graph&, const RewriteReport& r) { return !r.decisions.empty(); });
  ASSERT_TRUE(plan.has_value()) << "no budget in [" << ref.working_set_limit_bytes << ", "
                                << ref.peak_bytes << ") moved a tensor";
  for (const TensorDecision& d : plan->report.decisions) {
    EXPECT_LT(d.bytes, probs_bytes / 8) << d.tensor;
  }
}

// The block trained with LMS at a tight budget, bit-identical to the step
// without LMS.
TEST(Attention, BlockWithLmsIsBitIdenticalAtATightBudget) {
  constexpr uint64_t kSeed = 87;
  constexpr int64_t kN = 2, kT = 32, kH = 4, kD = 16, kC = kH * kD;
  std::printf("seed %" PRIu64 "\n", kSeed);
  auto train = attention_block(kN, kT, kH, kD);
  ASSERT_TRUE(train.ok()) << train.status();
  std::mt19937_64 gen(kSeed);
  const Feeds feeds = {{"x", random_values(kN * kT * kC, gen, 2.0f)},
                       {"target", random_values(kN * kT * kC, gen, 1.0f)}};
  user::expect_lms_steps_bit_identical(*train, feeds, 3);
}

// The planner may run attention again (its outputs depend on q, k and v
// only): the clone computes the same out and lse bits, so steps stay
// bit-identical. Two blocks, so that the first one's tensors are idle
// while the second one's backward sets the peak.
TEST(Attention, RecomputedAttentionIsBitIdentical) {
  constexpr uint64_t kSeed = 88;
  constexpr int64_t kN = 2, kT = 32, kH = 4, kD = 16, kC = kH * kD;
  std::printf("seed %" PRIu64 "\n", kSeed);
  auto train = attention_block(kN, kT, kH, kD, 2);
  ASSERT_TRUE(train.ok()) << train.status();
  std::mt19937_64 gen(kSeed);
  const Feeds feeds = {{"x", random_values(kN * kT * kC, gen, 2.0f)},
                       {"target", random_values(kN * kT * kC, gen, 1.0f)}};
  const user::NoLmsReference ref = user::no_lms_reference(*train, feeds, 3);
  ASSERT_TRUE(ref.ok);
  const std::optional<user::BudgetPlan> plan =
      user::first_plan_recomputing(*train, ref, OpKind::kAttention, 2);
  ASSERT_TRUE(plan.has_value()) << "no budget planned to run attention again";
  user::expect_steps_bit_identical(*plan, feeds, ref);
}

}  // namespace
}  // namespace lms
