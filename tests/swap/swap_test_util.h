// Graphs and helpers shared by the swap tests.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lms/graph.h"
#include "lms/ops.h"
#include "lms/training.h"

namespace lms::swap_test {

// 1 KiB activations (256 floats), positions in comments:
//   a = relu(x)     0     x [0,0]   a [0,4] (uses 1, 4)
//   b = relu(a)     1     b [1,3]
//   c = relu(b)     2     c [2,3]
//   e = add(b, c)   3     e [3,4]
//   d = add(e, a)   4     d [4,5]
//   loss = mean(d)  5     loss [5,5] (fetched, 256 B)
// Profile: 2, 2, 3, 4, 3, 1.25 KiB: needs 4 KiB without swaps; swapping `a`
// over its idle interval (1, 4) with the swap-in after `e` gives 2, 2, 2, 3,
// 3, 1.25 KiB, so 3 KiB with one swap (= the working set of e and of d).
inline constexpr char kSkipGraph[] = R"(input x f32[1,1,16,16]
node a = relu(x) -> a f32[1,1,16,16] activation
node b = relu(a) -> b f32[1,1,16,16] activation
node c = relu(b) -> c f32[1,1,16,16] activation
node e = add(b, c) -> e f32[1,1,16,16] activation
node d = add(e, a) -> d f32[1,1,16,16] activation
node loss = reduce_mean(d) -> loss f32[] activation
loss loss
)";

inline Graph parse_or_die(const std::string& text) {
  auto g = parse_graph(text);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? std::move(*g) : Graph{};
}

// A small training graph: conv(1->4)/relu/conv(4->4)/relu/conv(4->1), MSE
// against a target, SGD. N=2, 8x8 images.
inline Graph conv_training_graph() {
  Graph g;
  TensorId x = g.input("image", {2, 1, 8, 8});
  TensorId target = g.input("target", {2, 1, 8, 8});
  TensorId h = relu(g, "relu1", conv2d(g, "conv1", x, 4, {3}, {.pad = {1, 1}, .seed = 1}));
  h = relu(g, "relu2", conv2d(g, "conv2", h, 4, {3}, {.pad = {1, 1}, .seed = 2}));
  TensorId y = conv2d(g, "conv3", h, 1, {3}, {.pad = {1, 1}, .seed = 3});
  TensorId loss = mse_loss(g, "loss", y, target);
  EXPECT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, loss, Sgd{.lr = 0.01});
  EXPECT_TRUE(train.ok()) << train.status();
  return train.ok() ? std::move(*train) : Graph{};
}

// A random forward chain with skip connections: `n` nodes of relu / scale /
// add(previous, an earlier tensor), all of shape [1, channels, 8, 8] with
// channels drawn per graph so sizes vary across seeds; loss = mean(last).
inline Graph random_chain(uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  Graph g;
  const int64_t channels = 1 + static_cast<int64_t>(rng() % 8);
  std::vector<TensorId> ts = {g.input("x", {1, channels, 8, 8})};
  for (int i = 0; i < n; ++i) {
    std::string name = "n";
    name += std::to_string(i);
    const uint64_t kind = rng() % 3;
    TensorId prev = ts.back();
    if (kind == 0 || ts.size() < 3) {
      ts.push_back(relu(g, name, prev));
    } else if (kind == 1) {
      ts.push_back(scale(g, name, prev, 0.5));
    } else {
      TensorId skip = ts[rng() % (ts.size() - 1)];
      ts.push_back(add(g, name, prev, skip));
    }
  }
  TensorId loss = reduce_mean(g, "loss", ts.back());
  g.set_loss(loss);
  EXPECT_TRUE(g.status().ok()) << g.status();
  return g;
}

}  // namespace lms::swap_test
