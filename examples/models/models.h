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

// 3-D U-Net after Isensee et al. (BraTS 2017, arXiv 1802.10508), reduced (the
// full network is build_isensee_unet below):
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

// Isensee et al.'s 3-D U-Net (Isensee, Kickingereder, Wick, Bendszus,
// Maier-Hein, "Brain Tumor Segmentation and Radiomics Survival Prediction:
// Contribution to the BRATS 2017 Challenge", arXiv 1802.10508, section 2.2
// and figure 2), NCDHW. Level l (0 = full resolution) has base_filters << l
// filters at size / 2^l.
//  - Context pathway: a 3x3x3 conv to base_filters, then per level a context
//    module, a pre-activation residual block: x + conv(lrelu(in(conv(lrelu(
//    in(x)))))) with 3x3x3 convs. Levels are joined by a 3x3x3 conv with
//    stride 2 that doubles the filters.
//  - Localization pathway, per level from levels-2 up to 0: an upsampling
//    module (nearest 2x upsampling, 3x3x3 conv halving the filters), concat
//    with the context output of that level, then a localization module
//    (3x3x3 conv, 1x1x1 conv halving the filters); at level 0 a single
//    3x3x3 conv keeps 2 * base_filters, as in the paper's figure.
//  - Deep supervision: 1x1x1 segmentation convs to `classes` channels on the
//    outputs of the top min(segmentation_levels, levels - 1) decoder levels;
//    from the lowest up, each is upsampled 2x (nearest) and added to the next
//    one's. Without deep supervision only level 0's segmentation conv is kept.
//  - softmax over channels and the multi-class soft Dice loss
//    (soft_dice_loss) against one-hot labels.
// Every decoder conv is followed by instance norm and leaky ReLU (slope
// leaky_alpha); the stem, the stride-2 convs and the segmentation convs are
// linear. Differences from the paper: no dropout (lms has no dropout op; the
// paper uses p = 0.3 between the context module's convs), instance norm has
// learnt gamma/beta, and the Dice loss is lms's mean over (n, c) of the
// per-class Dice.
// Feeds "image" [batch, in_channels, size, size, size] and "labels"
// [batch, classes, size, size, size]; output "probs" has the labels' shape.
// A bad config records an InvalidArgument naming the field in g.status() and
// returns kNoTensor everywhere: size not divisible by 2^(levels-1), or
// batch, in_channels, classes, size, base_filters, levels or
// segmentation_levels below 1.
struct IsenseeConfig {
  int64_t batch = 1;
  int64_t in_channels = 4;  // BraTS: T1, T1c, T2, FLAIR
  int64_t classes = 4;      // background and three tumour regions
  int64_t size = 128;       // cube side, voxels
  int64_t base_filters = 16;
  int64_t levels = 5;
  int64_t segmentation_levels = 3;  // decoder levels summed by deep supervision
  double leaky_alpha = 0.01;
  bool deep_supervision = true;
  uint64_t seed = 1;
};
ModelTensors build_isensee_unet(Graph& g, const IsenseeConfig& config);

}  // namespace lms::models
