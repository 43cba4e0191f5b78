#include "models.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lms/ops.h"

namespace lms::models {

ModelTensors build_vdsr(Graph& g, const VdsrConfig& c) {
  ModelTensors m;
  m.input = g.input("lr", {c.batch, 1, c.height, c.width});
  m.target = g.input("hr", {c.batch, 1, c.height, c.width});
  TensorId h = m.input;
  for (int64_t i = 1; i <= c.depth; ++i) {
    bool last = i == c.depth;
    std::string name = absl::StrCat("conv", i);
    h = conv2d(g, name, h, last ? 1 : c.channels, {3},
               {.pad = {1}, .bias = true, .seed = c.seed * 1000 + static_cast<uint64_t>(i)});
    if (!last) h = relu(g, absl::StrCat("relu", i), h);
  }
  m.output = add(g, "residual", m.input, h);
  m.loss = mse_loss(g, "loss", m.output, m.target);
  return m;
}

namespace {

// Two conv + instance norm + leaky ReLU blocks (Isensee et al.'s context module).
TensorId context_module(Graph& g, const std::string& name, TensorId x, int64_t filters,
                        const UnetConfig& c, uint64_t& seed) {
  for (int i = 0; i < 2; ++i) {
    std::string n = absl::StrCat(name, "/", i);
    ConvLayerOptions o{.pad = {1}, .bias = false, .seed = seed++};
    x = c.spatial_dims == 3 ? conv3d(g, n + "/conv", x, filters, {3}, o)
                            : conv2d(g, n + "/conv", x, filters, {3}, o);
    x = instance_norm(g, n + "/norm", x);
    x = leaky_relu(g, n + "/act", x, 0.01);
  }
  return x;
}

}  // namespace

ModelTensors build_unet(Graph& g, const UnetConfig& c) {
  ModelTensors m;
  Shape shape = {c.batch, c.in_channels};
  Shape label_shape = {c.batch, c.classes};
  for (int d = 0; d < c.spatial_dims; ++d) {
    shape.push_back(c.size);
    label_shape.push_back(c.size);
  }
  m.input = g.input("image", shape);
  m.target = g.input("labels", label_shape);
  uint64_t seed = c.seed * 1000;
  std::vector<int64_t> unit(c.spatial_dims, 2);
  std::vector<TensorId> skips;
  TensorId x = m.input;
  for (int64_t level = 0; level < c.levels; ++level) {
    int64_t filters = c.base_filters << level;
    x = context_module(g, absl::StrCat("down", level), x, filters, c, seed);
    if (level + 1 < c.levels) {
      skips.push_back(x);
      x = max_pool(
          g, absl::StrCat("pool", level), x,
          {.kernel = unit, .stride = unit, .pad = std::vector<int64_t>(c.spatial_dims, 0)});
    }
  }
  for (int64_t level = c.levels - 2; level >= 0; --level) {
    int64_t filters = c.base_filters << level;
    x = upsample(g, absl::StrCat("up", level), x, unit, "nearest");
    x = concat(g, absl::StrCat("skip", level), {skips[level], x});
    x = context_module(g, absl::StrCat("dec", level), x, filters, c, seed);
  }
  ConvLayerOptions head{.bias = true, .seed = seed++};
  x = c.spatial_dims == 3 ? conv3d(g, "head", x, c.classes, {1}, head)
                          : conv2d(g, "head", x, c.classes, {1}, head);
  m.output = softmax(g, "probs", x);
  m.loss = soft_dice_loss(g, "loss", m.output, m.target);
  return m;
}

}  // namespace lms::models
