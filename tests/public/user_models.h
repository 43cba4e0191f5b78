// Models and helpers for the tests written as a user's program: everything
// here goes through include/lms alone (and the example model builders).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lms/autocast.h"
#include "lms/device.h"
#include "lms/graph.h"
#include "lms/ops.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/training.h"
#include "models.h"

namespace lms::user {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

// A user's own 2-D segmentation net, U-Net-like, NCHW:
//   stem = relu(conv3x3(image))                       [N, 8, S, S]
//   e1   = relu(batch_norm(conv3x3(pool(stem))))       [N, 16, S/2, S/2]
//   mid  = relu(conv3x3(pool(e1)))                     [N, 16, S/4, S/4]
//   d1   = relu(conv3x3(concat(up(mid), e1)))          skip by concat
//   d2   = relu(conv3x3(concat(up(d1), stem)))         skip by concat
//   out  = sigmoid(conv1x1(d2 + stem))
//   loss = mse(out, mask)
// `stem` is read by three far-apart consumers: the first pool, the last
// concat and the residual add before the head.
// With `autocast`, the forward graph is autocast (lms/autocast.h) first.
inline absl::StatusOr<Graph> user_unet(int64_t batch, int64_t size, const Optimizer& opt,
                                       const TrainingOptions& options = {},
                                       std::optional<AutocastOptions> autocast = std::nullopt) {
  Graph g;
  const TensorId image = g.input("image", {batch, 1, size, size});
  const TensorId mask = g.input("mask", {batch, 1, size, size});
  const ConvLayerOptions same{.pad = {1}};
  auto conv = [&](const char* name, TensorId x, int64_t channels, uint64_t seed) {
    ConvLayerOptions o = same;
    o.seed = seed;
    return conv2d(g, name, x, channels, {3}, o);
  };
  const TensorId stem = relu(g, "stem", conv("stem/conv", image, 8, 1));
  const TensorId e1 = relu(
      g, "e1", batch_norm(g, "e1/bn", conv("e1/conv", max_pool2d(g, "pool1", stem, 2), 16, 2)));
  const TensorId mid = relu(g, "mid", conv("mid/conv", max_pool2d(g, "pool2", e1, 2), 16, 3));
  const TensorId d1 =
      relu(g, "d1", conv("d1/conv", concat(g, "cat1", {upsample(g, "up1", mid, {2}), e1}), 16, 4));
  const TensorId d2 =
      relu(g, "d2", conv("d2/conv", concat(g, "cat2", {upsample(g, "up2", d1, {2}), stem}), 8, 5));
  const TensorId res = add(g, "res", d2, stem);
  const TensorId out = sigmoid(g, "out", conv2d(g, "head", res, 1, {1}, {.seed = 6}));
  g.set_loss(mse_loss(g, "loss", out, mask));
  LMS_RETURN_IF_ERROR(g.status());
  if (autocast) LMS_RETURN_IF_ERROR(lms::autocast(g, *autocast).status());
  return training_graph(g, g.loss(), opt, options);
}

inline Feeds user_unet_feeds(int64_t batch, int64_t size, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> image(batch * size * size), mask(image.size());
  for (float& v : image) v = u(gen);
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = image[i] > 0.5f ? 1.0f : 0.0f;
  return {{"image", std::move(image)}, {"mask", std::move(mask)}};
}

// VDSR from the example model builders, NCHW [batch, 1, size, size].
inline absl::StatusOr<Graph> vdsr(int64_t batch, int64_t size, const Optimizer& opt,
                                  const TrainingOptions& options = {}) {
  Graph g;
  const models::ModelTensors m = models::build_vdsr(
      g, {.batch = batch, .height = size, .width = size, .depth = 8, .channels = 8, .seed = 3});
  LMS_RETURN_IF_ERROR(g.status());
  return training_graph(g, m.loss, opt, options);
}

inline Feeds vdsr_feeds(int64_t batch, int64_t size, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> lr(batch * size * size), hr(lr.size());
  for (size_t i = 0; i < lr.size(); ++i) {
    hr[i] = u(gen);
    lr[i] = hr[i] + 0.1f * (u(gen) - 0.5f);
  }
  return {{"lr", std::move(lr)}, {"hr", std::move(hr)}};
}

// A fixed batch for Isensee's 3-D U-Net (NCDHW): a normal image and a
// one-hot label map by the image's value (below -0.5, above 0.5, between),
// so that the classes can be learnt. Needs c.classes >= 3.
inline Feeds isensee_feeds(const models::IsenseeConfig& c, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t voxels = c.size * c.size * c.size;
  std::vector<float> image(c.batch * voxels), labels(c.batch * c.classes * voxels, 0.0f);
  for (float& v : image) v = normal(gen);
  for (int64_t n = 0; n < c.batch; ++n) {
    for (int64_t i = 0; i < voxels; ++i) {
      const float v = image[n * voxels + i];
      const int64_t k = v < -0.5f ? 0 : (v > 0.5f ? 1 : 2);
      labels[(n * c.classes + k) * voxels + i] = 1.0f;
    }
  }
  return {{"image", std::move(image)}, {"labels", std::move(labels)}};
}

// Every persistent tensor (parameters, optimizer state, step counter) by name.
inline std::map<std::string, std::vector<float>> persistent_state(const Session& s) {
  std::map<std::string, std::vector<float>> state;
  for (const std::string& name : s.persistent_tensors()) {
    absl::StatusOr<std::vector<float>> v = s.read(name);
    if (v.ok()) state.emplace(name, *std::move(v));
  }
  return state;
}

// Names of the tensors whose bits differ (empty when identical).
inline std::vector<std::string> differing(const std::map<std::string, std::vector<float>>& a,
                                          const std::map<std::string, std::vector<float>>& b) {
  std::vector<std::string> out;
  for (const auto& [name, values] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.size() != values.size() ||
        std::memcmp(it->second.data(), values.data(), values.size() * sizeof(float)) != 0) {
      out.push_back(name);
    }
  }
  if (a.size() != b.size()) out.push_back("<a different set of tensors>");
  return out;
}

// What run_steps saw: every step's fetches in order, the persistent state
// after the last step, and the largest measured device peak.
struct StepsRun {
  absl::Status status;
  std::vector<std::vector<float>> fetched;
  std::map<std::string, std::vector<float>> state;
  uint64_t peak = 0;
};

// Runs `steps` steps of `graph` on `device` with `feeds` (and the int64
// inputs in `int64_feeds`), fetching `names`; stops at the first error
// (kept in status).
inline StepsRun run_steps(const Graph& graph, Device& device, const Feeds& feeds,
                          const std::vector<std::string>& names, int steps,
                          const Int64Feeds& int64_feeds = {}) {
  StepsRun run;
  SessionOptions opts;
  opts.fetches = names;
  auto session = Session::create(graph, device, opts);
  if (!session.ok()) {
    run.status = session.status();
    return run;
  }
  for (int s = 0; s < steps && run.status.ok(); ++s) {
    StepResult r;
    run.status = (*session)->run(feeds, int64_feeds, &r);
    if (!run.status.ok()) break;
    for (const std::string& n : names) run.fetched.push_back(r.fetched.at(n));
    run.peak = std::max(run.peak, r.peak_device_bytes);
  }
  run.state = persistent_state(**session);
  return run;
}

// Isensee's 3-D U-Net at test size: 16^3, one channel, three classes, four
// base filters, three levels.
inline models::IsenseeConfig tiny_isensee() {
  return {.batch = 1,
          .in_channels = 1,
          .classes = 3,
          .size = 16,
          .base_filters = 4,
          .levels = 3,
          .seed = 7};
}

// The models the planner tests train as a user would: VDSR (batch 4, 24x24,
// a chain of equal layers), the U-Net above (batch 2, 32x32, concat skips and
// a tensor read by three far-apart consumers) and tiny_isensee() (deep
// supervision), each with Adam and feeds drawn from `seed`. The first
// model's error if one does not build.
struct NamedModel {
  std::string name;
  Graph graph;
  Feeds feeds;
};

inline absl::StatusOr<std::vector<NamedModel>> planner_test_models(uint64_t seed) {
  std::vector<NamedModel> out;
  LMS_ASSIGN_OR_RETURN(Graph v, vdsr(4, 24, Adam{.lr = 1e-3}));
  out.push_back({"vdsr", std::move(v), vdsr_feeds(4, 24, seed)});
  LMS_ASSIGN_OR_RETURN(Graph u, user_unet(2, 32, Adam{.lr = 1e-3, .clip_norm = 1.0}));
  out.push_back({"user_unet", std::move(u), user_unet_feeds(2, 32, seed)});
  const models::IsenseeConfig c = tiny_isensee();
  Graph g;
  const models::ModelTensors m = models::build_isensee_unet(g, c);
  LMS_ASSIGN_OR_RETURN(Graph i, training_graph(g, m.loss, Adam{.lr = 5e-3}));
  out.push_back({"isensee_unet3d", std::move(i), isensee_feeds(c, seed)});
  return out;
}

// The loss and the gradients of the first and the last parameter.
inline std::vector<std::string> loss_and_edge_gradients(const Graph& g) {
  std::vector<std::string> params;
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    if (g.tensor(t).role == TensorRole::kParameter) params.push_back(g.tensor(t).name);
  }
  return {g.tensor(g.loss()).name, params.front() + "/grad", params.back() + "/grad"};
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace lms::user
