// Dynamic loss scaling (TrainingOptions::loss_scaling, PyTorch's
// GradScaler) through include/lms only, on a user's U-Net (user_models.h)
// with fixed, printed seeds:
// - with a power-of-two scale an f32 model trains bit-identically to the
//   same model without loss scaling (scaling by 2^k and back is exact), for
//   SGD with clipping and for Adam, while the scale grows as GradScaler's;
// - a step whose gradients hold an inf or a NaN changes no parameter, no
//   optimizer state and not Adam's step count, and halves the scale;
// - the scale's sequence over good and bad steps is GradScaler.update's;
// - an f16 model trains with it, and without it training_graph says why;
//   fields out of range name the field.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "same_run.h"
#include "user_models.h"

namespace lms {
namespace {

using user::kMiB;

constexpr uint64_t kSeed = 57;
constexpr int64_t kBatch = 2, kSize = 16;

std::unique_ptr<Session> unet_session(const Graph& train, std::unique_ptr<Device>& device) {
  auto d = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = kMiB});
  EXPECT_TRUE(d.ok()) << d.status();
  if (!d.ok()) return nullptr;
  device = *std::move(d);
  auto s = Session::create(train, *device);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

float read_scalar(const Session& s, const char* name) {
  auto v = s.read(name);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() && !v->empty() ? (*v)[0] : std::numeric_limits<float>::quiet_NaN();
}

// The persistent state less the loss-scaling scalars.
std::map<std::string, std::vector<float>> model_state(const Session& s) {
  std::map<std::string, std::vector<float>> state = user::persistent_state(s);
  state.erase("amp/scale");
  state.erase("amp/growth_tracker");
  return state;
}

TEST(LossScaling, PowerOfTwoScaleTrainsF32BitIdentically) {
  std::printf("user U-Net, seed %" PRIu64 "\n", kSeed);
  const Feeds feeds = user::user_unet_feeds(kBatch, kSize, kSeed);
  for (const Optimizer& opt : {Optimizer(Sgd{.lr = 0.05, .momentum = 0.9, .clip_norm = 0.5}),
                               Optimizer(Adam{.lr = 1e-3, .clip_norm = 0.5})}) {
    SCOPED_TRACE(std::holds_alternative<Sgd>(opt) ? "sgd" : "adam");
    auto plain = user::user_unet(kBatch, kSize, opt);
    auto scaled =
        user::user_unet(kBatch, kSize, opt,
                        {.loss_scaling = LossScaling{.init_scale = 1024, .growth_interval = 2}});
    ASSERT_TRUE(plain.ok()) << plain.status();
    ASSERT_TRUE(scaled.ok()) << scaled.status();
    std::unique_ptr<Device> d1, d2;
    auto a = unet_session(*plain, d1);
    auto b = unet_session(*scaled, d2);
    ASSERT_TRUE(a && b);
    for (int step = 0; step < 3; ++step) {
      StepResult ra, rb;
      ASSERT_TRUE(a->run(feeds, &ra).ok());
      ASSERT_TRUE(b->run(feeds, &rb).ok());
      EXPECT_TRUE(user::same_bits(ra.fetched.at("loss"), rb.fetched.at("loss"))) << step;
    }
    EXPECT_EQ(user::differing(model_state(*a), model_state(*b)), std::vector<std::string>{});
    // Three good steps at interval 2: grown once (after the second), then
    // one step counted.
    EXPECT_EQ(read_scalar(*b, "amp/scale"), 2048.0f);
    EXPECT_EQ(read_scalar(*b, "amp/growth_tracker"), 1.0f);
  }
}

TEST(LossScaling, ANonFiniteGradientSkipsTheStepAndBacksOff) {
  std::printf("user U-Net, seed %" PRIu64 "\n", kSeed);
  const Feeds good = user::user_unet_feeds(kBatch, kSize, kSeed);
  Feeds bad = good;
  bad.at("image")[7] = std::numeric_limits<float>::infinity();
  auto train = user::user_unet(kBatch, kSize, Adam{.lr = 1e-3}, {.loss_scaling = LossScaling{}});
  ASSERT_TRUE(train.ok()) << train.status();
  std::unique_ptr<Device> device;
  auto s = unet_session(*train, device);
  ASSERT_TRUE(s);
  StepResult r;
  ASSERT_TRUE(s->run(good, &r).ok());
  EXPECT_EQ(read_scalar(*s, "amp/growth_tracker"), 1.0f);
  const auto before = model_state(*s);
  ASSERT_TRUE(s->run(bad, &r).ok());  // skipped, not failed
  EXPECT_FALSE(std::isfinite(r.fetched.at("loss")[0]));
  EXPECT_EQ(user::differing(model_state(*s), before), std::vector<std::string>{});
  EXPECT_EQ(read_scalar(*s, "optimizer/step"), 1.0f);
  EXPECT_EQ(read_scalar(*s, "amp/scale"), 32768.0f);
  EXPECT_EQ(read_scalar(*s, "amp/growth_tracker"), 0.0f);
  ASSERT_TRUE(s->run(good, &r).ok());
  EXPECT_TRUE(std::isfinite(r.fetched.at("loss")[0]));
  EXPECT_FALSE(user::differing(model_state(*s), before).empty()) << "the good step did not train";
  EXPECT_EQ(read_scalar(*s, "optimizer/step"), 2.0f);
  EXPECT_EQ(read_scalar(*s, "amp/growth_tracker"), 1.0f);
}

// GradScaler.update over good (g) and bad (b) steps, growth_interval 3,
// growth 2, backoff 0.5 from 8: g g g -> 16 (tracker 0), b -> 8, g g -> 8
// (tracker 2), b -> 4 (tracker 0), g g g -> 8.
TEST(LossScaling, TheScaleFollowsGradScalerUpdate) {
  const Feeds good = user::user_unet_feeds(kBatch, kSize, kSeed);
  Feeds bad = good;
  bad.at("image")[3] = std::numeric_limits<float>::quiet_NaN();
  auto train =
      user::user_unet(kBatch, kSize, Sgd{.lr = 0.01},
                      {.loss_scaling = LossScaling{.init_scale = 8, .growth_interval = 3}});
  ASSERT_TRUE(train.ok()) << train.status();
  std::unique_ptr<Device> device;
  auto s = unet_session(*train, device);
  ASSERT_TRUE(s);
  const std::string steps = "gggbggbggg";
  const float scales[] = {8, 8, 16, 8, 8, 8, 4, 4, 4, 8};
  const float trackers[] = {1, 2, 0, 0, 1, 2, 0, 1, 2, 0};
  for (size_t i = 0; i < steps.size(); ++i) {
    StepResult r;
    ASSERT_TRUE(s->run(steps[i] == 'g' ? good : bad, &r).ok()) << i;
    EXPECT_EQ(read_scalar(*s, "amp/scale"), scales[i]) << "after step " << i + 1;
    EXPECT_EQ(read_scalar(*s, "amp/growth_tracker"), trackers[i]) << "after step " << i + 1;
  }
}

// The U-Net autocast to f16 with loss scaling trains (its loss falls) and
// keeps its scale; without loss scaling training_graph refuses it.
TEST(LossScaling, AnF16ModelTrainsWithItAndIsRefusedWithout) {
  std::printf("user U-Net in f16, seed %" PRIu64 "\n", kSeed);
  const Feeds feeds = user::user_unet_feeds(kBatch, kSize, kSeed);
  auto train = user::user_unet(kBatch, kSize, Adam{.lr = 3e-3}, {.loss_scaling = LossScaling{}},
                               AutocastOptions{.dtype = DType::kFloat16});
  ASSERT_TRUE(train.ok()) << train.status();
  std::unique_ptr<Device> device;
  auto s = unet_session(*train, device);
  ASSERT_TRUE(s);
  std::vector<float> losses;
  for (int step = 0; step < 15; ++step) {
    StepResult r;
    ASSERT_TRUE(s->run(feeds, &r).ok());
    losses.push_back(r.fetched.at("loss")[0]);
  }
  std::printf("f16 loss %.5f -> %.5f\n", losses.front(), losses.back());
  EXPECT_LT(losses.back(), 0.9f * losses.front());
  EXPECT_EQ(read_scalar(*s, "amp/scale"), 65536.0f);

  auto refused =
      user::user_unet(kBatch, kSize, Adam{}, {}, AutocastOptions{.dtype = DType::kFloat16});
  ASSERT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("loss_scaling"), std::string_view::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("f16"), std::string_view::npos) << refused.status();
}

TEST(LossScaling, FieldsOutOfRangeNameTheField) {
  struct Case {
    LossScaling ls;
    const char* field;
  };
  for (const Case& c :
       {Case{{.init_scale = 0}, "init_scale"}, Case{{.growth_factor = 1.0}, "growth_factor"},
        Case{{.backoff_factor = 1.0}, "backoff_factor"},
        Case{{.growth_interval = 0}, "growth_interval"}}) {
    auto train = user::user_unet(kBatch, kSize, Sgd{}, {.loss_scaling = c.ls});
    ASSERT_TRUE(absl::IsInvalidArgument(train.status())) << c.field;
    EXPECT_NE(train.status().message().find(c.field), std::string_view::npos) << train.status();
  }
}

}  // namespace
}  // namespace lms
