// A user's small transformer-like model over int64 token ids, written with
// include/lms only: rank-3 [N,T,D] float tensors, ops along the last axis,
// trained with Adam. Planned with LMS through the Device overload of
// lms::rewrite at a budget between its working-set limit and its no-LMS
// peak, the step swaps or recomputes tensors and still gives the bits of
// the step without LMS, at the predicted peak.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "lms/config.h"
#include "lms/rewrite.h"
#include "user_models.h"

namespace lms {
namespace {

using user::kMiB;

struct Dims {
  int64_t batch, tokens, dim, vocab;
};
constexpr Dims kDims = {.batch = 4, .tokens = 32, .dim = 64, .vocab = 50};
constexpr int64_t kBatch = kDims.batch, kTokens = kDims.tokens, kDim = kDims.dim,
                  kVocab = kDims.vocab;
constexpr uint64_t kSeed = 4242;

//   x    = embedding(ids, table)                    [N,T,D]
//   h    = x * w + b                                per-token projection, w, b [N,T,D]
//   r    = concat(slice(h, D/2.., -1), slice(h, ..D/2, -1), -1)   halves swapped
//   p    = softmax(r, -1)                           over the last axis
//   m    = reduce_mean(p, 1)                        [N,1,D], mean over the tokens
//   loss = mse(m, target)
// The forward graph, its loss set.
Graph token_forward(const Dims& d) {
  Graph g;
  const TensorId ids = g.input("ids", {d.batch, d.tokens}, DType::kInt64);
  const TensorId target = g.input("target", {d.batch, 1, d.dim});
  const TensorId table = g.parameter("table", {d.vocab, d.dim}, Init::he_normal(1, d.dim));
  const TensorId w = g.parameter("w", {d.batch, d.tokens, d.dim}, Init::he_normal(2, 1));
  const TensorId b = g.parameter("b", {d.batch, d.tokens, d.dim}, Init::constant(0.1));
  const TensorId x = embedding(g, "embed", ids, table);
  const TensorId h = add(g, "proj/add", mul(g, "proj/mul", x, w), b);
  const TensorId lo = slice(g, "lo", h, 0, d.dim / 2, -1);
  const TensorId hi = slice(g, "hi", h, d.dim / 2, d.dim / 2, -1);
  const TensorId r = concat(g, "swap_halves", {hi, lo}, -1);
  const TensorId p = softmax(g, "softmax", r, -1);
  const TensorId m = reduce_mean(g, "token_mean", p, 1);
  g.set_loss(mse_loss(g, "loss", m, target));
  return g;
}

absl::StatusOr<Graph> token_model() {
  Graph g = token_forward(kDims);
  LMS_RETURN_IF_ERROR(g.status());
  return training_graph(g, g.loss(), Adam{.lr = 1e-2});
}

struct TokenFeeds {
  Feeds floats;
  Int64Feeds ids;
};

TokenFeeds token_feeds(uint64_t seed, const Dims& d = kDims) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int64_t> token(0, d.vocab - 1);
  std::uniform_real_distribution<float> u(0.0f, 2.0f / static_cast<float>(d.dim));
  TokenFeeds f;
  std::vector<int64_t> ids(d.batch * d.tokens);
  for (int64_t& id : ids) id = token(gen);
  std::vector<float> target(d.batch * d.dim);
  for (float& v : target) v = u(gen);
  f.ids["ids"] = std::move(ids);
  f.floats["target"] = std::move(target);
  return f;
}

struct TokenRun {
  absl::Status status;
  std::vector<std::vector<float>> losses;
  std::map<std::string, std::vector<float>> state;
  uint64_t peak = 0;
};

TokenRun run_steps(const Graph& graph, Device& device, const TokenFeeds& feeds, int steps) {
  TokenRun run;
  auto session = Session::create(graph, device, {.fetches = {"loss"}});
  if (!session.ok()) {
    run.status = session.status();
    return run;
  }
  for (int s = 0; s < steps && run.status.ok(); ++s) {
    StepResult r;
    run.status = (*session)->run(feeds.floats, feeds.ids, &r);
    if (!run.status.ok()) break;
    run.losses.push_back(r.fetched.at("loss"));
    run.peak = std::max(run.peak, r.peak_device_bytes);
  }
  run.state = user::persistent_state(**session);
  return run;
}

TEST(TokenModel, LmsStepsAreBitIdenticalAtThePredictedPeak) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  auto train = token_model();
  ASSERT_TRUE(train.ok()) << train.status();
  const TokenFeeds feeds = token_feeds(kSeed);
  constexpr int kSteps = 3;

  auto big = make_cpu_device({.capacity_bytes = 256 * kMiB, .host_pool_bytes = 256 * kMiB});
  ASSERT_TRUE(big.ok()) << big.status();
  LmsConfig off;
  off.enabled = false;
  Graph plain = *train;
  auto limits = rewrite(plain, off, **big);
  ASSERT_TRUE(limits.ok()) << limits.status();
  ASSERT_TRUE(limits->fits) << limits->summary();
  const TokenRun reference = run_steps(plain, **big, feeds, kSteps);
  ASSERT_TRUE(reference.status.ok()) << reference.status;
  EXPECT_EQ(reference.peak, limits->peak_bytes_after);
  // Training moves the loss: the gradients reach the table and w, b.
  ASSERT_EQ(reference.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_NE(reference.losses.front()[0], reference.losses.back()[0]);

  const uint64_t low = limits->working_set_limit_bytes, high = limits->peak_bytes_after;
  std::printf("working-set limit %" PRIu64 " bytes, no-LMS peak %" PRIu64 " bytes\n", low, high);
  ASSERT_LT(low, high);
  // From low up: the first budget LMS plans to fit with a tensor swapped or
  // recomputed (the lowest budgets leave too little room for the persistent
  // tensors plus the largest node's working set, and say so).
  bool checked = false;
  for (int i = 0; i < 16 && !checked; ++i) {
    const uint64_t budget = low + (high - low) * i / 16;
    SCOPED_TRACE(testing::Message() << "budget " << budget);
    auto device = make_cpu_device({.capacity_bytes = budget, .host_pool_bytes = 256 * kMiB});
    ASSERT_TRUE(device.ok()) << device.status();
    Graph g = *train;
    auto lms = rewrite(g, LmsConfig{}, **device);
    if (!lms.ok() || !lms->fits) {
      std::printf("budget %" PRIu64 ": %s\n", budget,
                  lms.ok() ? "does not fit" : std::string(lms.status().message()).c_str());
      continue;
    }
    if (lms->swapped.empty() && lms->recomputed.empty()) {
      std::printf("budget %" PRIu64 ": fits without swaps\n", budget);
      continue;
    }
    std::printf("budget %" PRIu64 ": %zu swapped, %zu recomputed, predicted peak %" PRIu64 "\n",
                budget, lms->swapped.size(), lms->recomputed.size(), lms->peak_bytes_after);
    for (const std::string& t : lms->swapped) std::printf("  swapped %s\n", t.c_str());
    for (const std::string& t : lms->recomputed) std::printf("  recomputed %s\n", t.c_str());
    EXPECT_LE(lms->peak_bytes_after, budget);
    const TokenRun step = run_steps(g, **device, feeds, kSteps);
    ASSERT_TRUE(step.status.ok()) << step.status;
    EXPECT_EQ(step.peak, lms->peak_bytes_after);
    ASSERT_EQ(step.losses.size(), reference.losses.size());
    for (size_t k = 0; k < step.losses.size(); ++k) {
      EXPECT_TRUE(user::same_bits(step.losses[k], reference.losses[k])) << "step " << k;
    }
    EXPECT_EQ(user::differing(step.state, reference.state), std::vector<std::string>{});
    checked = true;
  }
  EXPECT_TRUE(checked) << "no budget in [" << low << ", " << high
                       << ") planned to fit with a tensor swapped or recomputed";
}

// The int64 ids, read by embedding and again by embedding_bwd, swapped out
// and back in by the manual policy: 8 bytes an id both ways, same bits.
TEST(TokenModel, SwappedInt64IdsGiveTheSameBits) {
  auto train = token_model();
  ASSERT_TRUE(train.ok()) << train.status();
  const TokenFeeds feeds = token_feeds(kSeed);
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = 16 * kMiB});
  ASSERT_TRUE(device.ok()) << device.status();
  LmsConfig off;
  off.enabled = false;
  Graph plain = *train;
  ASSERT_TRUE(rewrite(plain, off, **device).ok());
  const TokenRun reference = run_steps(plain, **device, feeds, 2);
  ASSERT_TRUE(reference.status.ok()) << reference.status;

  LmsConfig manual;
  manual.policy = SwapPolicy::kManual;
  manual.tensors = {"ids"};
  Graph g = *train;
  auto plan = rewrite(g, manual, **device);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->swapped, std::vector<std::string>{"ids"}) << plan->summary();
  EXPECT_EQ(plan->bytes_out_per_step, uint64_t{kBatch * kTokens * 8});
  const TokenRun step = run_steps(g, **device, feeds, 2);
  ASSERT_TRUE(step.status.ok()) << step.status;
  for (size_t k = 0; k < step.losses.size(); ++k) {
    EXPECT_TRUE(user::same_bits(step.losses[k], reference.losses[k])) << "step " << k;
  }
  EXPECT_EQ(user::differing(step.state, reference.state), std::vector<std::string>{});
  EXPECT_EQ(step.peak, plan->peak_bytes_after);
}

// The gradients of the table and of w, b (through embedding_bwd, concat,
// slice, softmax and reduce_mean along axes) match central finite
// differences of the loss of the forward graph with the same weights.
TEST(TokenModel, GradientsMatchFiniteDifferences) {
  constexpr uint64_t kGradSeed = 4243;
  std::printf("seed %" PRIu64 "\n", kGradSeed);
  const Dims d = {.batch = 2, .tokens = 4, .dim = 8, .vocab = 5};
  Graph forward_graph = token_forward(d);
  ASSERT_TRUE(forward_graph.status().ok()) << forward_graph.status();
  auto train = training_graph(forward_graph, forward_graph.loss(), Sgd{.lr = 0.0});
  ASSERT_TRUE(train.ok()) << train.status();
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = 16 * kMiB});
  ASSERT_TRUE(device.ok()) << device.status();
  auto trainer =
      Session::create(*train, **device, {.fetches = {"loss", "table/grad", "w/grad", "b/grad"}});
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto forward = Session::create(forward_graph, **device);
  ASSERT_TRUE(forward.ok()) << forward.status();
  const TokenFeeds feeds = token_feeds(kGradSeed, d);
  StepResult r;
  ASSERT_TRUE((*trainer)->run(feeds.floats, feeds.ids, &r).ok());
  for (const char* p : {"table", "w", "b"}) {
    std::vector<float> w = *(*trainer)->read(p);
    const std::vector<float>& grad = r.fetched.at(std::string(p) + "/grad");
    ASSERT_EQ(grad.size(), w.size()) << p;
    double largest = 0;
    for (size_t i = 0; i < w.size(); i += 3) {
      const float eps = 1e-2f;
      auto loss_at = [&](float v) {
        std::vector<float> wp = w;
        wp[i] = v;
        EXPECT_TRUE((*forward)->write(p, wp).ok());
        StepResult fr;
        EXPECT_TRUE((*forward)->run(feeds.floats, feeds.ids, &fr).ok());
        return static_cast<double>(fr.fetched.at("loss")[0]);
      };
      const double numeric = (loss_at(w[i] + eps) - loss_at(w[i] - eps)) / (2 * eps);
      largest = std::max(largest, std::fabs(numeric));
      EXPECT_NEAR(grad[i], numeric, 2e-6 + 0.02 * std::fabs(numeric)) << p << "[" << i << "]";
    }
    std::printf("%s: largest |d loss / d %s[i]| checked %.3g\n", p, p, largest);
    EXPECT_GT(largest, 1e-5) << p << ": the check must see a gradient";
    ASSERT_TRUE((*forward)->write(p, w).ok());
  }
}

// One tensor of a reference fixture: dtype ("i64", "f32", "f64"), shape and
// values, row-major (ids exact as int64, the rest as double).
struct RefTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<int64_t> ints;
  std::vector<double> reals;
};

// Reads the fixture tests/public/token_model_reference.py writes: `#`
// comment lines, then `<name> <dtype> <d0,d1,... or []> <values...>` lines.
absl::StatusOr<std::map<std::string, RefTensor>> read_reference(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot open " + path);
  std::map<std::string, RefTensor> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string name, shape;
    RefTensor t;
    words >> name >> t.dtype >> shape;
    if (shape != "[]") {
      std::istringstream dims(shape);
      for (std::string d; std::getline(dims, d, ',');) t.shape.push_back(std::stoll(d));
    }
    for (std::string v; words >> v;) {
      if (t.dtype == "i64") {
        t.ints.push_back(std::strtoll(v.c_str(), nullptr, 10));
      } else {
        t.reals.push_back(std::strtod(v.c_str(), nullptr));
      }
    }
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    if (static_cast<size_t>(n) != t.ints.size() + t.reals.size()) {
      return absl::InvalidArgumentError(path + ": " + name + " has " +
                                        std::to_string(t.ints.size() + t.reals.size()) +
                                        " values for its shape " + shape);
    }
    out[name] = std::move(t);
  }
  return out;
}

std::vector<float> as_floats(const RefTensor& t) {
  return std::vector<float>(t.reals.begin(), t.reals.end());
}

// ||got - want|| / ||want||, both as double.
double relative_l2(const std::vector<float>& got, const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff) / std::sqrt(norm);
}

// The loss and every parameter's gradient of one step match PyTorch's on
// the same weights, ids and target (tests/data/token_model_reference.txt,
// written by tests/public/token_model_reference.py in float64 from float32
// inputs; the ctest TokenModelReference.FixtureIsCurrent checks that the
// script still writes it): relative L2 error <= 1e-5 each.
TEST(TokenModel, MatchesThePyTorchReference) {
  const std::string path = std::string(LMS_SOURCE_DIR) + "/tests/data/token_model_reference.txt";
  auto ref = read_reference(path);
  ASSERT_TRUE(ref.ok()) << ref.status();
  for (const char* name :
       {"ids", "target", "table", "w", "b", "loss", "table/grad", "w/grad", "b/grad"}) {
    ASSERT_EQ(ref->count(name), 1u) << path << " lacks " << name;
  }
  const RefTensor& ids = ref->at("ids");
  const RefTensor& table = ref->at("table");
  ASSERT_EQ(ids.shape.size(), 2u);
  ASSERT_EQ(table.shape.size(), 2u);
  const Dims d = {.batch = ids.shape[0],
                  .tokens = ids.shape[1],
                  .dim = table.shape[1],
                  .vocab = table.shape[0]};
  std::printf("reference %s: N=%" PRId64 " T=%" PRId64 " D=%" PRId64 " V=%" PRId64 "\n",
              path.c_str(), d.batch, d.tokens, d.dim, d.vocab);
  Graph forward_graph = token_forward(d);
  ASSERT_TRUE(forward_graph.status().ok()) << forward_graph.status();
  auto train = training_graph(forward_graph, forward_graph.loss(), Sgd{.lr = 0.0});
  ASSERT_TRUE(train.ok()) << train.status();
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = 16 * kMiB});
  ASSERT_TRUE(device.ok()) << device.status();
  auto session =
      Session::create(*train, **device, {.fetches = {"loss", "table/grad", "w/grad", "b/grad"}});
  ASSERT_TRUE(session.ok()) << session.status();
  for (const char* p : {"table", "w", "b"}) {
    ASSERT_TRUE((*session)->write(p, as_floats(ref->at(p))).ok()) << p;
  }
  StepResult r;
  ASSERT_TRUE(
      (*session)->run({{"target", as_floats(ref->at("target"))}}, {{"ids", ids.ints}}, &r).ok());
  constexpr double kTolerance = 1e-5;
  for (const char* name : {"loss", "table/grad", "w/grad", "b/grad"}) {
    const std::vector<double>& want = ref->at(name).reals;
    const std::vector<float>& got = r.fetched.at(name);
    ASSERT_EQ(got.size(), want.size()) << name;
    const double err = relative_l2(got, want);
    std::printf("%s: relative L2 error %.3g\n", name, err);
    // A zero reference would make the relative error meaningless.
    EXPECT_TRUE(std::any_of(want.begin(), want.end(), [](double v) { return v != 0; })) << name;
    EXPECT_LE(err, kTolerance) << name;
  }
  // The ids never name the table's last row: its gradient is exactly zero.
  const std::vector<float>& dtable = r.fetched.at("table/grad");
  for (int64_t k = (d.vocab - 1) * d.dim; k < d.vocab * d.dim; ++k) {
    EXPECT_EQ(dtable[k], 0.0f) << "table/grad[" << k << "]";
    EXPECT_EQ(ref->at("table/grad").reals[k], 0.0) << "reference table/grad[" << k << "]";
  }
}

// A float feed for the int64 input, or an int64 feed for a float input, is
// an InvalidArgument naming the tensor and its dtype.
TEST(TokenModel, FeedOfTheWrongDtypeIsRefused) {
  auto train = token_model();
  ASSERT_TRUE(train.ok()) << train.status();
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = 16 * kMiB});
  ASSERT_TRUE(device.ok()) << device.status();
  auto session = Session::create(*train, **device);
  ASSERT_TRUE(session.ok()) << session.status();
  TokenFeeds feeds = token_feeds(kSeed);
  StepResult r;

  Feeds as_float = feeds.floats;
  as_float["ids"] = std::vector<float>(kBatch * kTokens, 0.0f);
  absl::Status s = (*session)->run(as_float, Int64Feeds{}, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("'ids' has dtype i64"), absl::string_view::npos) << s;

  Int64Feeds as_int = feeds.ids;
  as_int["target"] = std::vector<int64_t>(kBatch * kDim, 0);
  Feeds no_target;
  s = (*session)->run(no_target, as_int, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("'target' has dtype f32"), absl::string_view::npos) << s;

  // An id outside [0, V): the step fails naming the embedding node.
  feeds.ids["ids"][5] = kVocab;
  s = (*session)->run(feeds.floats, feeds.ids, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("node 'embed'"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("id 50 at position 5"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace lms
