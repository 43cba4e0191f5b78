// Random DAG training graphs from the public builders alone (lms/graph.h,
// ops.h, training.h), for the seeded property tests: random_dag_test
// (tests/public) runs them on the CPU device, random_layout_test
// (tests/swap) lays out their steps.
//
// A graph is a random U-Net-like walk over resolution levels, NCHW (rank 2)
// or NCDHW (rank 3):
//   stem = relu(conv3(x))                                    level 0
//   then 6..11 random layers on the current tensor `cur`, each one of
//     conv (3 or 1 wide) + relu / leaky_relu / batch or instance norm + relu;
//     down (max pool or a stride-2 conv); up (upsample nearest / linear or a
//     stride-2 conv_transpose); a concat skip with one or two earlier
//     tensors of the level; an add / mul skip with an earlier tensor
//     (through a 1x1 conv when the channels differ); a two-way branch
//     (conv+relu beside conv+sigmoid, or a slice) merged by concat or add;
//   back up to level 0, each step concatenated with the oldest tensor of its
//   level (a far-apart consumer); then concat(cur, stem) and a 1x1
//   projection of the stem added before the head, so `stem` is read by its
//   first layer, the last concat and the last add, all far apart (relu
//   outputs are also read by their backward nodes);
//   loss = mse(head or sigmoid(head), target) or
//          soft_dice(softmax(head), target), plus sometimes
//          0.1 * mean of an early tensor (a second loss branch);
//   trained with SGD (momentum, weight decay) or Adam (with or without
//   gradient clipping).
// Sizes are small: 2-D graphs [2, C, 16, 16], 3-D graphs [1, C, 8, 8, 8],
// C <= 8 (a few KiB to 16 KiB per activation).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/graph.h"
#include "lms/ops.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/training.h"
#include "lms/types.h"

namespace lms::random_dags {

struct RandomDag {
  Graph train;
  int rank = 2;
  std::string description;  // the layers drawn, in order
};

namespace detail {

struct Feature {
  TensorId t = kNoTensor;
  int64_t channels = 0;
  int level = 0;
};

class Builder {
 public:
  Builder(uint64_t seed, int rank) : rng_(seed), rank_(rank), seed_(seed) {}

  absl::StatusOr<RandomDag> build() {
    const int64_t batch = rank_ == 2 ? 2 : 1;
    const int64_t size = rank_ == 2 ? 16 : 8;
    const int max_level = 2;
    const int64_t in_channels = 1 + static_cast<int64_t>(draw(3));
    Shape shape = {batch, in_channels};
    for (int i = 0; i < rank_; ++i) shape.push_back(size);
    const Feature x{g_.input("x", shape), in_channels, 0};
    const Feature stem = named_relu(conv(x, channels(), 3), "stem");
    add_feature(stem);
    Feature cur = stem;
    const int layers = 6 + static_cast<int>(draw(6));
    for (layer_ = 0; layer_ < layers; ++layer_) {
      switch (draw(7)) {
        case 0:
        case 1:
          describe("conv");
          cur = activation(conv(cur, channels(), coin() ? 3 : 1));
          break;
        case 2:
          if (cur.level < max_level) {
            cur = down(cur);
          } else {
            cur = up(cur);
          }
          break;
        case 3:
          if (cur.level > 0 && coin()) {
            cur = up(cur);
          } else if (cur.level < max_level) {
            cur = down(cur);
          } else {
            cur = up(cur);
          }
          break;
        case 4:
          cur = concat_skip(cur);
          break;
        case 5:
          cur = add_skip(cur);
          break;
        default:
          cur = branch(cur);
      }
      add_feature(cur);
    }
    // Back to level 0, each step concatenated with its level's oldest tensor.
    for (; cur.level > 0; ++layer_) {
      cur = up(cur);
      const Feature* old = earlier(cur.level, cur.t, /*oldest=*/true);
      if (old != nullptr) {
        describe("cat-oldest");
        cur = {concat(g_, name("cat_oldest"), {cur.t, old->t}), cur.channels + old->channels,
               cur.level};
      }
      add_feature(cur);
    }
    // The stem's far-apart consumers: the last concat and the residual add.
    cur = {concat(g_, "cat_stem", {cur.t, stem.t}), cur.channels + stem.channels, 0};
    cur = activation(conv(cur, stem.channels, 3));
    cur = {add(g_, "res_stem", cur.t, project(stem, cur.channels).t), cur.channels, 0};
    Shape target_shape = shape;
    TensorId loss = kNoTensor;
    switch (draw(3)) {
      case 0: {
        describe("| mse");
        const Feature head = conv(cur, 1, 1);
        target_shape[1] = 1;
        loss = mse_loss(g_, "loss", head.t, g_.input("target", target_shape));
        break;
      }
      case 1: {
        describe("| sigmoid-mse");
        const Feature head = conv(cur, 1, 1);
        target_shape[1] = 1;
        loss = mse_loss(g_, "loss", sigmoid(g_, "probs", head.t), g_.input("target", target_shape));
        break;
      }
      default: {
        describe("| dice");
        const Feature head = conv(cur, 2, 1);
        target_shape[1] = 2;
        loss = soft_dice_loss(g_, "loss", softmax(g_, "probs", head.t),
                              g_.input("target", target_shape));
      }
    }
    if (coin() && features_.size() > 2) {
      describe("+aux");
      const Feature& f = features_[1 + draw(features_.size() / 2)];
      const TensorId aux = scale(g_, "aux_scale", reduce_mean(g_, "aux_mean", f.t), 0.1);
      loss = add(g_, "total_loss", loss, aux);
    }
    LMS_RETURN_IF_ERROR(g_.status());
    Optimizer opt;
    if (coin()) {
      describe("sgd");
      opt = Sgd{.lr = 0.01, .momentum = coin() ? 0.9 : 0.0, .weight_decay = coin() ? 1e-4 : 0.0};
    } else {
      describe("adam");
      opt = Adam{.lr = 1e-3, .clip_norm = coin() ? 1.0 : 0.0};
    }
    RandomDag dag;
    LMS_ASSIGN_OR_RETURN(dag.train, training_graph(g_, loss, opt));
    dag.rank = rank_;
    dag.description = description_;
    return dag;
  }

 private:
  uint64_t draw(uint64_t n) { return rng_() % n; }
  bool coin() { return draw(2) == 0; }
  int64_t channels() { return 2 + static_cast<int64_t>(draw(7)); }  // 2..8

  std::string name(const std::string& what) {
    std::string n = "l";
    n += std::to_string(layer_);
    n += '/';
    n += what;
    n += std::to_string(++names_);
    return n;
  }
  void describe(const std::string& what) {
    if (!description_.empty()) description_ += " ";
    description_ += what;
  }
  void add_feature(const Feature& f) { features_.push_back(f); }

  Feature conv(const Feature& x, int64_t out, int64_t kernel, int64_t stride = 1) {
    ConvLayerOptions o;
    o.pad = {kernel / 2};
    if (stride != 1) o.stride = {stride};
    o.bias = draw(4) != 0;
    o.seed = seed_ * 1000 + static_cast<uint64_t>(names_);
    const std::string n = name("conv");
    const TensorId y =
        rank_ == 2 ? conv2d(g_, n, x.t, out, {kernel}, o) : conv3d(g_, n, x.t, out, {kernel}, o);
    return {y, out, x.level + (stride == 2 ? 1 : 0)};
  }

  Feature named_relu(const Feature& x, const std::string& n) {
    return {relu(g_, n, x.t), x.channels, x.level};
  }

  Feature activation(const Feature& x) {
    switch (draw(6)) {
      case 0:
        return {leaky_relu(g_, name("lrelu"), x.t, 0.1), x.channels, x.level};
      case 1:
        return {relu(g_, name("relu"), batch_norm(g_, name("bn"), x.t)), x.channels, x.level};
      case 2:
        return {relu(g_, name("relu"), instance_norm(g_, name("in"), x.t)), x.channels, x.level};
      default:
        return {relu(g_, name("relu"), x.t), x.channels, x.level};
    }
  }

  // An earlier feature of `level` other than `not_this`: the oldest, or one
  // of the oldest half (far-apart consumers); nullptr if none.
  const Feature* earlier(int level, TensorId not_this, bool oldest = false) {
    std::vector<const Feature*> found;
    for (const Feature& f : features_) {
      if (f.level == level && f.t != not_this) found.push_back(&f);
    }
    if (found.empty()) return nullptr;
    if (oldest) return found.front();
    return found[draw((found.size() + 1) / 2)];
  }

  Feature project(const Feature& x, int64_t out) { return x.channels == out ? x : conv(x, out, 1); }

  Feature down(const Feature& x) {
    if (coin()) {
      describe("pool");
      const TensorId y =
          rank_ == 2 ? max_pool2d(g_, name("pool"), x.t, 2) : max_pool3d(g_, name("pool"), x.t, 2);
      return {y, x.channels, x.level + 1};
    }
    describe("conv-s2");
    return activation(conv(x, channels(), 3, 2));
  }

  Feature up(const Feature& x) {
    switch (draw(3)) {
      case 0:
        describe("up-nearest");
        return {upsample(g_, name("up"), x.t, {2}, "nearest"), x.channels, x.level - 1};
      case 1:
        describe("up-linear");
        return {upsample(g_, name("up"), x.t, {2}, "linear"), x.channels, x.level - 1};
      default: {
        describe("deconv");
        // Kernel 2 pad 0 or kernel 4 pad 1, stride 2: twice the size.
        const bool wide = coin();
        const int64_t out = channels();
        ConvLayerOptions o;
        o.stride = {2};
        o.pad = {wide ? 1 : 0};
        o.bias = coin();
        o.seed = seed_ * 1000 + static_cast<uint64_t>(names_);
        const TensorId y = conv_transpose(g_, name("deconv"), x.t, out, {wide ? 4 : 2}, o);
        return activation({y, out, x.level - 1});
      }
    }
  }

  Feature concat_skip(const Feature& x) {
    const Feature* a = earlier(x.level, x.t);
    if (a == nullptr) {
      describe("conv");
      return activation(conv(x, channels(), 3));
    }
    std::vector<TensorId> inputs = {x.t, a->t};
    int64_t c = x.channels + a->channels;
    const Feature* b = coin() ? earlier(x.level, x.t) : nullptr;
    if (b != nullptr) {
      describe("cat3");
      inputs.push_back(b->t);
      c += b->channels;
    } else {
      describe("cat");
    }
    if (coin()) std::swap(inputs[0], inputs[1]);
    const Feature y{concat(g_, name("cat"), inputs), c, x.level};
    // Keep channel counts small: a 1x1 conv after a wide concat.
    return c > 12 ? activation(conv(y, channels(), 1)) : y;
  }

  Feature add_skip(const Feature& x) {
    const Feature* a = earlier(x.level, x.t);
    if (a == nullptr) {
      describe("conv");
      return activation(conv(x, channels(), 3));
    }
    const Feature p = project(*a, x.channels);
    if (draw(4) == 0) {
      describe("mul");
      return {mul(g_, name("mul"), x.t, p.t), x.channels, x.level};
    }
    describe("add");
    return {add(g_, name("add"), x.t, p.t), x.channels, x.level};
  }

  Feature branch(const Feature& x) {
    const int64_t c = channels();
    const Feature left = activation(conv(x, c, 3));
    Feature right;
    if (x.channels >= 2 && draw(3) == 0) {
      const int64_t size = x.channels / 2;
      right = {
          slice(g_, name("slice"), x.t, static_cast<int64_t>(draw(x.channels - size + 1)), size),
          size, x.level};
    } else {
      const Feature r = conv(x, c, 1);
      right = {sigmoid(g_, name("sigmoid"), r.t), c, x.level};
    }
    if (right.channels == left.channels && coin()) {
      describe("branch-add");
      return {add(g_, name("merge"), left.t, right.t), c, x.level};
    }
    describe("branch-cat");
    return {concat(g_, name("merge"), {left.t, right.t}), left.channels + right.channels, x.level};
  }

  std::mt19937_64 rng_;
  int rank_;
  uint64_t seed_;
  Graph g_;
  std::vector<Feature> features_;
  std::string description_;
  int layer_ = 0;
  int names_ = 0;
};

}  // namespace detail

// A random training graph of `rank` (2: NCHW, 3: NCDHW) from `seed`.
inline absl::StatusOr<RandomDag> random_dag(uint64_t seed, int rank) {
  return detail::Builder(seed, rank).build();
}

// Feeds for every graph input of `graph`: uniform [0, 1) from `seed`
// ("target" too, which suits both mse and the dice loss).
inline Feeds random_feeds(const Graph& graph, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Feeds feeds;
  for (TensorId t = 0; t < graph.num_tensors(); ++t) {
    const Tensor& tensor = graph.tensor(t);
    if (tensor.role != TensorRole::kInput) continue;
    std::vector<float> values(static_cast<size_t>(num_elements(tensor.shape)));
    for (float& v : values) v = u(gen);
    feeds.emplace(tensor.name, std::move(values));
  }
  return feeds;
}

}  // namespace lms::random_dags
