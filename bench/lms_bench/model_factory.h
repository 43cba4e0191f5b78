// What lms-bench sweeps: a "model factory" builds the training graph of one
// size (VDSR: the batch; 3-D U-Net: the volume side) and the feeds of each
// step, so the table and search logic (sweep.h, search.h) are independent of
// the model and testable on tiny networks.
//
//   lms::bench::VdsrBenchModel m{.depth = 4, .channels = 8, .crop = 16};
//   LMS_ASSIGN_OR_RETURN(lms::bench::ModelFactory f, lms::bench::vdsr_factory(m, nullptr));
//   LMS_ASSIGN_OR_RETURN(lms::Graph train, f.build(/*batch=*/8));
//   LMS_ASSIGN_OR_RETURN(lms::Feeds feeds, f.feeds(/*batch=*/8, /*step=*/0));
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/graph.h"
#include "lms/session.h"
#include "lms/training.h"

namespace lms::bench {

struct ModelFactory {
  std::string model;               // "vdsr", "unet3d" (file names, JSON)
  std::string size_label;          // "batch" or "size" (table header, JSON)
  int64_t size_step = 1;           // valid sizes are positive multiples of this
  int64_t max_search_size = 4096;  // the search stops doubling here
  std::string data_note;           // where the feeds come from (printed)
  // The training graph (forward + backward + optimizer) of one size.
  std::function<absl::StatusOr<Graph>(int64_t size)> build;
  // The graph inputs of training step `step` (0-based) at `size`.
  std::function<absl::StatusOr<Feeds>(int64_t size, int64_t step)> feeds;
  // Its int64 inputs (class labels), for a model that has them; empty: none.
  std::function<absl::StatusOr<Int64Feeds>(int64_t size, int64_t step)> int64_feeds;
};

// Real VDSR training pairs: fills lr and hr (NCHW [batch, 1, crop, crop])
// for a step. vdsr_data.h makes one from a photo folder.
using VdsrBatchSource = std::function<absl::Status(int64_t step, int64_t batch, int64_t crop,
                                                   std::vector<float>* lr, std::vector<float>* hr)>;

// VDSR (Kim et al., CVPR 2016) trained with Adam, as examples/vdsr does.
struct VdsrBenchModel {
  int64_t depth = 20;
  int64_t channels = 64;
  int64_t crop = 48;  // square patch side (pixels)
  uint64_t seed = 1;  // weights and random batches
  double lr = 1e-4;
  double clip_norm = 0.4;
  TrainingOptions training;           // data_parallel for lms-bench scaling
  DType precision = DType::kFloat32;  // --precision (autocast_training_graph)
};

// The training graph of the forward graph `forward` (loss `loss`) with
// `opt`, after lms::autocast to `precision` unless that is float32 (f16
// with dynamic loss scaling, LossScaling's defaults).
absl::StatusOr<Graph> autocast_training_graph(Graph& forward, TensorId loss, DType precision,
                                              const Optimizer& opt,
                                              const TrainingOptions& training = {});

// ", mixed precision bf16 (lms::autocast)" for a data note; "" for float32.
std::string precision_note(DType precision);

// "fp32", "bf16", "fp16" (--precision) -> the dtype; InvalidArgument
// naming the word and the allowed ones otherwise.
absl::StatusOr<DType> parse_precision(const std::string& word);

// Random batches (uniform [0, 1) targets, inputs = targets + small noise,
// seeded by (seed, step)) when `source` is empty. InvalidArgument for
// depth < 2, channels < 1 or crop < 1.
absl::StatusOr<ModelFactory> vdsr_factory(const VdsrBenchModel& model, VdsrBatchSource source);

// Real 3-D U-Net training volumes: fills image (NCDHW [1, 1, size, size,
// size]) and one-hot labels ([1, classes, size, size, size]) for a step.
// unet3d_data.h makes one from the MRI folder.
using Unet3dBatchSource = std::function<absl::Status(
    int64_t step, int64_t size, std::vector<float>* image, std::vector<float>* labels)>;

// Classes of the MRI task (examples/unet3d's kBrainClasses: background and
// 12 AAL region groups); the U-Net's classes with --data.
inline constexpr int64_t kMriClasses = 13;

enum class UnetArch {
  kReduced,  // models::build_unet: context modules, max-pool, one segmentation conv
  kIsensee,  // models::build_isensee_unet: residual context, stride-2 convs, deep supervision
};

// A 3-D U-Net after Isensee et al. (BraTS 2017), batch 1.
struct Unet3dBenchModel {
  UnetArch arch = UnetArch::kReduced;
  int64_t in_channels = 4;
  int64_t classes = 4;
  int64_t base_filters = 8;
  int64_t levels = 3;
  int64_t segmentation_levels = 3;  // kIsensee: decoder levels summed by deep supervision
  int spatial_dims = 3;             // 2 builds the reduced network in 2-D (tests)
  uint64_t seed = 1;
  double lr = 1e-4;
  DType precision = DType::kFloat32;  // --precision (autocast_training_graph)
};

// Sizes are multiples of 2^(levels-1). Feeds: from `source` when set (its
// buffers must have the model's shapes: InvalidArgument naming the sizes
// otherwise), else "image" N(0, 1) noise and "labels" random one-hot over
// `classes`, seeded by (seed, step). InvalidArgument for levels outside 1..8,
// a channel count < 1, classes < 2, spatial_dims not 2/3, or kIsensee in 2-D
// or with segmentation_levels < 1.
absl::StatusOr<ModelFactory> unet_factory(const Unet3dBenchModel& model,
                                          Unet3dBatchSource source = nullptr);

}  // namespace lms::bench
