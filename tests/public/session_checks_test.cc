// What Session and lms::rewrite refuse, seen from a user's program: null
// results, feeds that name no input, graphs planned for another device,
// capacity or fetch set, budgets above the capacity, plans without the facts
// to decide `fits`, and out-of-memory hints that match the situation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstring>

#include "faulty_device.h"
#include "lms/config.h"
#include "lms/rewrite.h"
#include "user_models.h"

namespace lms {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using user::kMiB;

constexpr int64_t kBatch = 2;
constexpr int64_t kSize = 16;
constexpr uint64_t kSeed = 8301;

Graph train_graph() {
  auto g = user::user_unet(kBatch, kSize, Adam{.lr = 1e-3});
  EXPECT_TRUE(g.ok()) << g.status();
  return *std::move(g);
}

std::unique_ptr<Device> cpu(uint64_t capacity) {
  auto d = make_cpu_device({.capacity_bytes = capacity, .host_pool_bytes = 64 * kMiB});
  EXPECT_TRUE(d.ok()) << d.status();
  return *std::move(d);
}

// The smallest budget of the auto policy's plan in the middle of the range.
// A budget `frac` of the way from the working-set limit to the peak without
// LMS.
uint64_t budget_between(const Graph& train, double frac) {
  auto big = cpu(256 * kMiB);
  Graph probe = train;
  LmsConfig off;
  off.enabled = false;
  auto r = rewrite(probe, off, *big);
  EXPECT_TRUE(r.ok()) << r.status();
  const double span = static_cast<double>(r->peak_bytes_after - r->working_set_limit_bytes);
  return r->working_set_limit_bytes + static_cast<uint64_t>(frac * span);
}

uint64_t mid_budget(const Graph& train) { return budget_between(train, 0.5); }

TEST(SessionChecks, NullResultAndUnknownFeedAreInvalidArgument) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  const Graph train = train_graph();
  auto device = cpu(256 * kMiB);
  auto session = Session::create(train, *device);
  ASSERT_TRUE(session.ok()) << session.status();
  const Feeds feeds = user::user_unet_feeds(kBatch, kSize, kSeed);
  const auto before = user::persistent_state(**session);

  absl::Status s = (*session)->run(feeds, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("result"));

  Feeds typo = feeds;
  typo["imgae"] = typo.at("image");
  StepResult r;
  s = (*session)->run(typo, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("'imgae'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("image"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("mask"));

  // A feed of the wrong size fails the step too. None of them changed state.
  Feeds short_feed = feeds;
  short_feed["mask"].pop_back();
  s = (*session)->run(short_feed, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(user::differing(before, user::persistent_state(**session)).empty());
  EXPECT_TRUE((*session)->run(feeds, &r).ok());
}

// FeedView reads the caller's memory in place: the same step as Feeds, bit
// for bit; a view of the wrong dtype, a null one, or a name in both Feeds and
// Int64Feeds is an InvalidArgument naming the tensor, and changes nothing.
TEST(SessionChecks, FeedViewsRunTheSameStepAsFeeds) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  const Graph train = train_graph();
  auto a = cpu(256 * kMiB);
  auto b = cpu(256 * kMiB);
  auto copied = Session::create(train, *a);
  auto viewed = Session::create(train, *b);
  ASSERT_TRUE(copied.ok() && viewed.ok());
  const Feeds feeds = user::user_unet_feeds(kBatch, kSize, kSeed);
  FeedViews views;
  for (const auto& [name, values] : feeds) views[name] = {values.data(), values.size()};
  for (int step = 0; step < 2; ++step) {
    StepResult rc, rv;
    ASSERT_TRUE((*copied)->run(feeds, &rc).ok());
    ASSERT_TRUE((*viewed)->run_views(views, &rv).ok());
    EXPECT_EQ(
        std::memcmp(rc.fetched.at("loss").data(), rv.fetched.at("loss").data(), sizeof(float)), 0);
  }
  EXPECT_TRUE(
      user::differing(user::persistent_state(**copied), user::persistent_state(**viewed)).empty());

  const auto before = user::persistent_state(**viewed);
  StepResult r;
  FeedViews wrong = views;
  wrong["image"].dtype = DType::kInt64;
  absl::Status s = (*viewed)->run_views(wrong, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("'image' has dtype f32"));
  FeedViews null = views;
  null["mask"].data = nullptr;
  s = (*viewed)->run_views(null, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("'mask'"));
  const std::vector<int64_t> ids(feeds.at("mask").size(), 0);
  s = (*viewed)->run(feeds, {{"mask", ids}}, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("'mask' is in both Feeds and Int64Feeds"));
  EXPECT_TRUE(user::differing(before, user::persistent_state(**viewed)).empty());
}

TEST(SessionChecks, GraphPlannedForOtherFactsIsRefused) {
  const Graph train = train_graph();
  const uint64_t budget = mid_budget(train);
  auto device = cpu(budget);
  Graph planned = train;
  auto report = rewrite(planned, LmsConfig{}, *device);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(report->fits) << report->summary();
  EXPECT_TRUE(planned.plan_record().planned);
  EXPECT_TRUE(Session::create(planned, *device).ok());

  // Another capacity.
  auto bigger = cpu(2 * budget);
  auto s = Session::create(planned, *bigger);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("capacity"));

  // Another fetch set: a gradient kept to the end of the step was not planned.
  s = Session::create(planned, *device, {.fetches = {"loss", "head/w/grad"}});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("head/w/grad"));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("RewriteOptions::fetched"));
  // ... which planning with that fetch set fixes.
  Graph with_grad = train;
  RewriteOptions options;
  options.fetched = {"loss", "head/w/grad"};
  ASSERT_TRUE(rewrite(with_grad, LmsConfig{}, *device, options).ok());
  EXPECT_TRUE(Session::create(with_grad, *device, {.fetches = {"loss", "head/w/grad"}}).ok());

  // Another kind of device of the same capacity.
  user::FaultyDevice other(cpu(budget), "other-backend");
  s = Session::create(planned, other);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("cpu device"));

  // A budget above the device's capacity, given to a plan without a device.
  Graph by_limit = train;
  LmsConfig limit;
  limit.device_memory_limit = 4 * budget;
  ASSERT_TRUE(rewrite(by_limit, limit, {.device_capacity_bytes = 4 * budget}).ok());
  s = Session::create(by_limit, *device);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
}

TEST(SessionChecks, RewriteRefusesWhatItCannotPlanFor) {
  const Graph train = train_graph();
  auto device = cpu(8 * kMiB);
  // A limit above the device's capacity.
  Graph g = train;
  LmsConfig too_big;
  too_big.device_memory_limit = 16 * kMiB;
  auto r = rewrite(g, too_big, *device);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("device_memory_limit"));
  EXPECT_EQ(to_text(g), to_text(train)) << "a failed rewrite changed the graph";

  // A device that already holds memory: its free space is not the capacity.
  auto session = Session::create(train, *device);
  ASSERT_TRUE(session.ok()) << session.status();
  r = rewrite(g, LmsConfig{}, *device);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  session->reset();
  EXPECT_TRUE(rewrite(g, LmsConfig{}, *device).ok());

  // Without the kernel workspaces nothing can say the step fits.
  Graph guess = train;
  auto unknown = rewrite(guess, LmsConfig{}, {.device_capacity_bytes = 8 * kMiB});
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  EXPECT_FALSE(unknown->fits);
  EXPECT_THAT(unknown->fit_unknown_reason, HasSubstr("workspace"));
  EXPECT_THAT(unknown->summary(), HasSubstr("cannot say"));
  // Nor without a budget.
  Graph no_budget = train;
  LmsConfig off;
  off.enabled = false;
  unknown = rewrite(no_budget, off);
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  EXPECT_FALSE(unknown->fits);
  EXPECT_THAT(unknown->fit_unknown_reason, HasSubstr("budget"));
}

TEST(SessionChecks, OutOfMemoryHintMatchesTheSituation) {
  const Graph train = train_graph();
  const Feeds feeds = user::user_unet_feeds(kBatch, kSize, kSeed);
  // The budget lies between the working-set limit and the peak of a plan
  // that swaps nothing (the rule below). Such a plan takes least-workspace
  // kernels where the fast ones do not fit, and with AVX2's 8-channel blocks
  // that alone fits halfway: then the budget moves halfway between that
  // plan's own working-set limit and peak.
  LmsConfig rule;
  rule.policy = SwapPolicy::kTflms;
  rule.swapout_threshold = 1000;  // swaps nothing
  uint64_t budget = mid_budget(train);
  for (int attempt = 0; attempt < 4; ++attempt) {
    Graph probe = train;
    auto device = cpu(budget);
    auto nothing = rewrite(probe, rule, *device);
    ASSERT_TRUE(nothing.ok()) << nothing.status();
    std::printf("budget %" PRIu64 " B: a plan swapping nothing %s (peak %" PRIu64
                " B, working-set limit %" PRIu64 " B)\n",
                budget, nothing->fits ? "fits" : "does not fit", nothing->peak_bytes_after,
                nothing->working_set_limit_bytes);
    if (!nothing->fits) break;
    budget = (nothing->working_set_limit_bytes + nothing->peak_bytes_after) / 2;
  }
  auto small = cpu(budget);
  StepResult r;

  // Not planned at all: the hint suggests LMS. The step's arena is laid out
  // at Session::create, so a step that cannot fit is refused there.
  auto plain = Session::create(train, *small);
  ASSERT_EQ(plain.status().code(), absl::StatusCode::kResourceExhausted) << plain.status();
  EXPECT_THAT(std::string(plain.status().message()), HasSubstr("lms::rewrite"));
  EXPECT_THAT(std::string(plain.status().message()), Not(HasSubstr("device_memory_limit")));
  EXPECT_EQ(small->memory_stats().bytes_in_use, 0u);

  // LMS on, planned by rule (tflms): the hint names the policy.
  Graph tflms = train;
  auto rep = rewrite(tflms, rule, *small);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_FALSE(rep->fits);
  auto by_rule = Session::create(tflms, *small);
  ASSERT_EQ(by_rule.status().code(), absl::StatusCode::kResourceExhausted) << by_rule.status();
  EXPECT_THAT(std::string(by_rule.status().message()), HasSubstr("policy tflms"));
  EXPECT_THAT(std::string(by_rule.status().message()), Not(HasSubstr("Enable LMS")));

  // Planned by auto: it fits, and the session runs.
  Graph planned = train;
  auto fit = rewrite(planned, LmsConfig{}, *small);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_TRUE(fit->fits);
  auto session = Session::create(planned, *small);
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_TRUE((*session)->run(feeds, &r).ok());
}

TEST(SessionChecks, CudaFactorySaysWhyItIsUnavailable) {
  auto gpu = make_cuda_device({.device_ordinal = 0, .capacity_bytes = 64 * kMiB});
  if (gpu.ok()) {
    std::printf("a GPU is present: %s\n", (*gpu)->name().c_str());
    EXPECT_EQ((*gpu)->kind(), "cuda");
    return;
  }
  std::printf("make_cuda_device: %s\n", gpu.status().ToString().c_str());
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kUnimplemented) << gpu.status();
  if (!cuda_backend_built()) {
    EXPECT_THAT(std::string(gpu.status().message()), HasSubstr("no CUDA backend"));
  }
  // A bad ordinal is never accepted.
  auto bad = make_cuda_device({.device_ordinal = -1});
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace lms
