#include "models.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
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

namespace {

// The first field of an IsenseeConfig that cannot build a network, named.
absl::Status validate(const IsenseeConfig& c) {
  const std::pair<const char*, int64_t> positive[] = {
      {"batch", c.batch},
      {"in_channels", c.in_channels},
      {"classes", c.classes},
      {"size", c.size},
      {"base_filters", c.base_filters},
      {"levels", c.levels},
      {"segmentation_levels", c.segmentation_levels}};
  for (const auto& [field, value] : positive) {
    if (value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("build_isensee_unet: ", field, " = ", value, " must be >= 1"));
    }
  }
  // Each of the levels - 1 stride-2 convs halves the side exactly.
  if (c.levels > 62 || c.size % (int64_t{1} << (c.levels - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("build_isensee_unet: size = ", c.size,
                                                   " must be divisible by 2^(levels-1) = 2^",
                                                   c.levels - 1, " (levels = ", c.levels, ")"));
  }
  return absl::OkStatus();
}

// Builds one network: the graph, the config and the running weight seed.
struct IsenseeLayers {
  Graph& g;
  const IsenseeConfig& c;
  uint64_t seed;

  TensorId conv(const std::string& name, TensorId x, int64_t filters, int64_t kernel,
                int64_t stride = 1, bool bias = true) {
    return conv3d(g, name, x, filters, {kernel},
                  {.stride = {stride}, .pad = {kernel / 2}, .bias = bias, .seed = seed++});
  }
  TensorId norm_act(const std::string& name, TensorId x) {
    return leaky_relu(g, name + "/act", instance_norm(g, name + "/norm", x), c.leaky_alpha);
  }
  // conv -> instance norm -> leaky ReLU; the norm makes a bias redundant.
  TensorId conv_block(const std::string& name, TensorId x, int64_t filters, int64_t kernel) {
    return norm_act(name, conv(name + "/conv", x, filters, kernel, 1, /*bias=*/false));
  }
};

// Pre-activation residual block (He et al., ECCV 2016): x + conv(act(conv(act(x)))).
TensorId context_module(IsenseeLayers& l, const std::string& name, TensorId x, int64_t filters) {
  TensorId h = l.norm_act(name + "/0", x);
  h = l.conv(name + "/0/conv", h, filters, 3, 1, /*bias=*/false);
  h = l.norm_act(name + "/1", h);
  h = l.conv(name + "/1/conv", h, filters, 3);
  return add(l.g, name + "/sum", x, h);
}

// The context outputs of every level, full resolution first.
std::vector<TensorId> build_context_pathway(IsenseeLayers& l, TensorId image) {
  std::vector<TensorId> outputs;
  TensorId x = l.conv("stem", image, l.c.base_filters, 3);
  for (int64_t level = 0; level < l.c.levels; ++level) {
    const int64_t filters = l.c.base_filters << level;
    if (level > 0) x = l.conv(absl::StrCat("down", level), x, filters, 3, /*stride=*/2);
    x = context_module(l, absl::StrCat("context", level), x, filters);
    outputs.push_back(x);
  }
  return outputs;
}

// The decoder's feature maps by level (index 0 = full resolution, 2 *
// base_filters channels; entries at levels >= 1 have base_filters << level).
std::vector<TensorId> build_localization_pathway(IsenseeLayers& l,
                                                 const std::vector<TensorId>& context) {
  const int64_t levels = l.c.levels;
  std::vector<TensorId> features(levels, kNoTensor);
  TensorId x = context[levels - 1];
  for (int64_t level = levels - 2; level >= 0; --level) {
    const int64_t filters = l.c.base_filters << level;
    const std::string up = absl::StrCat("up", level);
    x = l.conv_block(up, upsample(l.g, up + "/upsample", x, {2}, "nearest"), filters, 3);
    x = concat(l.g, absl::StrCat("skip", level), {context[level], x});
    const std::string loc = absl::StrCat("loc", level);
    // At level 0 the paper ends with the 3x3x3 conv (2 * base_filters).
    x = l.conv_block(loc + "/0", x, 2 * filters, 3);
    if (level > 0) x = l.conv_block(loc + "/1", x, filters, 1);
    features[level] = x;
  }
  if (levels == 1) features[0] = l.conv_block("loc0/0", x, 2 * l.c.base_filters, 3);
  return features;
}

// Segmentation logits at full resolution: level 0's 1x1x1 conv plus, with deep
// supervision, the lower levels' upsampled and summed into it.
TensorId build_segmentation(IsenseeLayers& l, const std::vector<TensorId>& features) {
  int64_t top = 1;
  if (l.c.deep_supervision)
    top = std::min(l.c.segmentation_levels, std::max<int64_t>(l.c.levels - 1, 1));
  TensorId sum = kNoTensor;
  for (int64_t level = top - 1; level >= 0; --level) {
    const std::string name = absl::StrCat("seg", level);
    TensorId seg = l.conv(name + "/conv", features[level], l.c.classes, 1);
    if (sum != kNoTensor) {
      sum = upsample(l.g, name + "/upsample", sum, {2}, "nearest");
      seg = add(l.g, name + "/sum", sum, seg);
    }
    sum = seg;
  }
  return sum;
}

}  // namespace

ModelTensors build_isensee_unet(Graph& g, const IsenseeConfig& c) {
  if (absl::Status s = validate(c); !s.ok()) {
    g.record_error(std::move(s));
    return {};
  }
  ModelTensors m;
  m.input = g.input("image", {c.batch, c.in_channels, c.size, c.size, c.size});
  m.target = g.input("labels", {c.batch, c.classes, c.size, c.size, c.size});
  IsenseeLayers layers{.g = g, .c = c, .seed = c.seed * 1000};
  const std::vector<TensorId> context = build_context_pathway(layers, m.input);
  const std::vector<TensorId> features = build_localization_pathway(layers, context);
  m.output = softmax(g, "probs", build_segmentation(layers, features));
  m.loss = soft_dice_loss(g, "loss", m.output, m.target);
  return m;
}

}  // namespace lms::models
