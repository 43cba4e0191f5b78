// Model builders used by the examples, the bench harness and the tests.
//
//   lms::Graph g;
//   lms::models::VdsrConfig cfg{.batch = 16, .height = 64, .width = 64};
//   lms::models::ModelTensors m = lms::models::build_vdsr(g, cfg);
//   LMS_ASSIGN_OR_RETURN(lms::Graph train, lms::training_graph(g, m.loss, lms::Adam{1e-4}));
#pragma once

#include <cstdint>
#include <string>

#include "lms/graph.h"

namespace lms::models {

struct ModelTensors {
  TensorId input = kNoTensor;   // fed: "lr" (VDSR) or "image" (U-Net)
  TensorId target = kNoTensor;  // fed: "hr" (VDSR) or "labels" (U-Net)
  TensorId output = kNoTensor;  // prediction
  TensorId loss = kNoTensor;    // scalar
};

// VDSR (Kim, Lee, Lee, "Accurate Image Super-Resolution Using Very Deep
// Convolutional Networks", CVPR 2016): `depth` 3x3 conv layers of `channels`
// filters with ReLU between them (first 1->channels, last channels->1), a
// global residual (output = input + residual) and MSE against the target.
// Input and target are the Y channel, NCHW [batch, 1, height, width].
struct VdsrConfig {
  int64_t batch = 16;
  int64_t height = 41;
  int64_t width = 41;
  int64_t depth = 20;
  int64_t channels = 64;
  uint64_t seed = 1;
};
ModelTensors build_vdsr(Graph& g, const VdsrConfig& config);

// 3-D U-Net after Isensee et al. (BraTS 2017, arXiv 1802.10508), reduced:
// per level a context module (two 3x3x3 conv + instance norm + leaky ReLU),
// 2x max-pool down, nearest 2x upsampling + 3x3x3 conv up, skip connections
// by channel concat, a 1x1x1 conv to `classes` channels, softmax and soft Dice
// loss against one-hot labels. NCDHW [batch, in_channels, size, size, size];
// `size` must be divisible by 2^(levels-1). With `spatial_dims` = 2 the same
// network is built in 2-D (NCHW), a cheap stand-in for tests.
struct UnetConfig {
  int64_t batch = 1;
  int64_t in_channels = 4;
  int64_t classes = 4;
  int64_t size = 32;
  int64_t base_filters = 8;
  int64_t levels = 3;
  int spatial_dims = 3;
  uint64_t seed = 1;
};
ModelTensors build_unet(Graph& g, const UnetConfig& config);

}  // namespace lms::models
