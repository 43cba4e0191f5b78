// A failed step changes nothing (Note [Step commit]): on a swapped VDSR and
// a swapped U-Net-like net, trained with Adam and gradient clipping, the
// k-th device or pinned-host allocation of a step fails, for every k. Every
// persistent tensor (parameters, Adam moments, step counter) must be
// bit-identical to before the step, and a retry must equal one clean step.
#include <gtest/gtest.h>

#include <cinttypes>
#include <functional>

#include "faulty_device.h"
#include "lms/config.h"
#include "lms/rewrite.h"
#include "user_models.h"

namespace lms {
namespace {

using user::FaultyDevice;
using user::kMiB;

struct Model {
  std::string name;
  std::function<absl::StatusOr<Graph>(const Optimizer&)> build;
  Feeds feeds;
  // Swapped by the manual policy: gradients, whose second reader is their
  // update (the first is the clipping norm).
  std::vector<std::string> manual;
};

void check_every_failure_point(const Model& model, SwapPolicy policy) {
  SCOPED_TRACE(model.name + " " + std::string(policy_name(policy)));
  auto train = model.build(Adam{.lr = 1e-2, .clip_norm = 0.5});
  ASSERT_TRUE(train.ok()) << train.status();

  // For auto, a budget halfway between the working-set limit and the no-LMS
  // peak: the plan must swap, and it must fit.
  auto probe_device = make_cpu_device({.capacity_bytes = 256 * kMiB});
  ASSERT_TRUE(probe_device.ok()) << probe_device.status();
  Graph probe = *train;
  LmsConfig off;
  off.enabled = false;
  auto limits = rewrite(probe, off, **probe_device);
  ASSERT_TRUE(limits.ok()) << limits.status();
  // Other policies swap by rule and do not aim at a budget: they get room.
  const uint64_t budget = policy == SwapPolicy::kAuto
                              ? (limits->working_set_limit_bytes + limits->peak_bytes_after) / 2
                              : 2 * limits->peak_bytes_after;

  auto inner = make_cpu_device({.capacity_bytes = budget, .host_pool_bytes = 64 * kMiB});
  ASSERT_TRUE(inner.ok()) << inner.status();
  FaultyDevice device(std::move(*inner));
  Graph swapped = *train;
  LmsConfig config;
  config.policy = policy;
  // tflms swaps by rule (every tensor with a consumer 2+ nodes later);
  // manual swaps gradients, whose swap-ins for their updates would land among
  // the optimizer's updates if the plan did not move them before the commit.
  config.swapout_threshold = 2;
  config.tensors = model.manual;
  auto report = rewrite(swapped, config, device);
  ASSERT_TRUE(report.ok()) << report.status();
  if (policy == SwapPolicy::kAuto) {
    ASSERT_TRUE(report->fits) << report->summary();
  }
  ASSERT_FALSE(report->swapped.empty());
  {
    // Every swap-in is issued before the first node that writes persistent
    // state (the step counter's increment or an update).
    auto order = schedule(swapped);
    ASSERT_TRUE(order.ok()) << order.status();
    bool committed = false;
    int late_swap_ins = 0;
    for (NodeId id : *order) {
      const OpKind op = swapped.node(id).op;
      committed = committed || op == OpKind::kIncrement || op == OpKind::kAdamUpdate;
      if (committed && op == OpKind::kSwapIn) ++late_swap_ins;
    }
    EXPECT_EQ(late_swap_ins, 0);
  }
  std::printf("%s %s: budget %" PRIu64 " bytes, %zu tensors swapped\n", model.name.c_str(),
              policy_name(policy), budget, report->swapped.size());

  auto session = Session::create(swapped, device);
  ASSERT_TRUE(session.ok()) << session.status();
  Session& s = **session;
  StepResult r;
  {
    absl::Status first = s.run(model.feeds, &r);  // so Adam's state is not zero
    ASSERT_TRUE(first.ok()) << first << "\n" << report->summary();
  }
  const auto before = user::persistent_state(s);
  ASSERT_GT(before.count("optimizer/step"), 0u);

  // One clean step: the reference, and the number of allocations it makes.
  device.arm(0);
  ASSERT_TRUE(s.run(model.feeds, &r).ok());
  device.disarm();
  const int64_t allocations = device.allocations();
  const float clean_loss = r.fetched.at("loss")[0];
  const auto after = user::persistent_state(s);
  ASSERT_FALSE(user::differing(before, after).empty()) << "a step changed nothing";
  ASSERT_GT(r.bytes_d2h, 0u);
  std::printf("%s: %" PRId64 " allocations per step\n", model.name.c_str(), allocations);
  // Device buffers live in the session's arena (Note [Step layout]): a step
  // allocates only the pinned host block of each swap-out.
  int64_t swap_outs = 0;
  for (NodeId id = 0; id < swapped.num_nodes(); ++id)
    swap_outs += swapped.node(id).op == OpKind::kSwapOut;
  ASSERT_EQ(allocations, swap_outs);
  ASSERT_GT(allocations, 0);

  int surfaced = 0, recovered = 0;
  for (int64_t k = 1; k <= allocations; ++k) {
    SCOPED_TRACE(testing::Message() << "failing allocation " << k << " of " << allocations);
    for (const auto& [name, values] : before) ASSERT_TRUE(s.write(name, values).ok()) << name;
    device.arm(k);
    absl::Status failed = s.run(model.feeds, &r);
    device.disarm();
    ASSERT_TRUE(device.failed());
    if (failed.ok()) {
      // A pinned-host allocation that fails while swap-ins still hold host
      // blocks is retried once they are released: the step went on, and it
      // must be a clean step.
      ++recovered;
    } else {
      ++surfaced;
      ASSERT_EQ(failed.code(), absl::StatusCode::kResourceExhausted) << failed;
      ASSERT_NE(failed.message().find("injected"), std::string_view::npos) << failed;
      const std::vector<std::string> changed = user::differing(before, user::persistent_state(s));
      ASSERT_TRUE(changed.empty()) << "the failed step changed " << changed.size()
                                   << " persistent tensors, first '" << changed[0] << "'";
      // The retry equals one clean step.
      ASSERT_TRUE(s.run(model.feeds, &r).ok());
    }
    EXPECT_EQ(std::memcmp(&clean_loss, &r.fetched.at("loss")[0], sizeof(float)), 0);
    const std::vector<std::string> off_clean = user::differing(after, user::persistent_state(s));
    ASSERT_TRUE(off_clean.empty()) << "the retry differs from a clean step in " << off_clean.size()
                                   << " tensors, first '" << off_clean[0] << "'";
  }
  std::printf("%s: %d injected failures failed the step, %d were recovered within it\n",
              model.name.c_str(), surfaced, recovered);
  // The first swap-out's block cannot wait for a release: it surfaces.
  EXPECT_GT(surfaced, 0);
}

TEST(TransactionalStep, SwappedVdsrFailingEveryAllocation) {
  constexpr uint64_t kSeed = 8201;
  std::printf("seed %" PRIu64 "\n", kSeed);
  const Model model{"vdsr",
                    [](const Optimizer& opt) { return user::vdsr(2, 16, opt); },
                    user::vdsr_feeds(2, 16, kSeed),
                    {"conv2/w/grad", "conv5/w/grad", "conv7/w/grad"}};
  for (SwapPolicy p : {SwapPolicy::kAuto, SwapPolicy::kTflms, SwapPolicy::kManual}) {
    check_every_failure_point(model, p);
  }
}

TEST(TransactionalStep, SwappedUnetFailingEveryAllocation) {
  constexpr uint64_t kSeed = 8202;
  std::printf("seed %" PRIu64 "\n", kSeed);
  const Model model{"unet",
                    [](const Optimizer& opt) { return user::user_unet(2, 16, opt); },
                    user::user_unet_feeds(2, 16, kSeed),
                    {"stem/conv/w/grad", "e1/conv/w/grad", "stem", "d1/conv/w/grad"}};
  for (SwapPolicy p : {SwapPolicy::kAuto, SwapPolicy::kTflms, SwapPolicy::kManual}) {
    check_every_failure_point(model, p);
  }
}

}  // namespace
}  // namespace lms
