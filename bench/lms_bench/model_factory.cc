#include "model_factory.h"

#include <optional>
#include <random>
#include <utility>

#include "fmt/format.h"
#include "lms/autocast.h"
#include "lms/io/host_memory.h"
#include "lms/status.h"
#include "lms/training.h"
#include "lms/units.h"
#include "models.h"

namespace lms::bench {
namespace {

// One generator per (seed, step): a step's feeds never depend on the steps
// drawn before it, so LMS off and on train on identical batches.
std::mt19937_64 step_rng(uint64_t seed, int64_t step) {
  std::seed_seq seq{seed, static_cast<uint64_t>(step), uint64_t{0x6c6d73}};
  return std::mt19937_64(seq);
}

absl::Status check_size(const ModelFactory& f, int64_t size) {
  if (size < 1 || size % f.size_step != 0) {
    return absl::InvalidArgumentError(fmt::format("{} {}: {} {} must be a positive multiple of {}",
                                                  f.model, f.size_label, f.size_label, size,
                                                  f.size_step));
  }
  return absl::OkStatus();
}

// The feeds are host buffers sized by the command's flags; a search or a
// confirming step must not reach std::bad_alloc (Note [Host memory limit]).
absl::Status check_feed_bytes(const ModelFactory& f, int64_t size, std::optional<uint64_t> bytes) {
  const uint64_t limit = io::host_memory_limit_bytes();
  if (bytes && *bytes <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(
      fmt::format("{} {} {}: the input buffers need more than the {} of host memory", f.model,
                  f.size_label, size, format_bytes(limit)));
}

Feeds random_vdsr_feeds(int64_t batch, int64_t crop, uint64_t seed, int64_t step) {
  std::mt19937_64 rng = step_rng(seed, step);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::normal_distribution<float> noise(0.0f, 0.05f);
  const size_t n = static_cast<size_t>(batch * crop * crop);
  std::vector<float> hr(n), lr(n);
  for (size_t i = 0; i < n; ++i) {
    hr[i] = pixel(rng);
    lr[i] = hr[i] + noise(rng);
  }
  Feeds feeds;
  feeds.emplace("lr", std::move(lr));
  feeds.emplace("hr", std::move(hr));
  return feeds;
}

}  // namespace

absl::StatusOr<Graph> autocast_training_graph(Graph& forward, TensorId loss, DType precision,
                                              const Optimizer& opt,
                                              const TrainingOptions& training) {
  TrainingOptions options = training;
  if (precision != DType::kFloat32) {
    forward.set_loss(loss);
    LMS_RETURN_IF_ERROR(autocast(forward, {.dtype = precision}).status());
    loss = forward.loss();
    // f16 trains with PyTorch's GradScaler defaults.
    if (precision == DType::kFloat16 && !options.loss_scaling) {
      options.loss_scaling = LossScaling{};
    }
  }
  return training_graph(forward, loss, opt, options);
}

std::string precision_note(DType precision) {
  if (precision == DType::kFloat32) return "";
  return fmt::format(", mixed precision {} (lms::autocast)", dtype_name(precision));
}

absl::StatusOr<DType> parse_precision(const std::string& word) {
  if (word == "fp32") return DType::kFloat32;
  if (word == "bf16") return DType::kBFloat16;
  if (word == "fp16") return DType::kFloat16;
  return absl::InvalidArgumentError(fmt::format("--precision {}: allowed fp32, bf16, fp16", word));
}

absl::StatusOr<ModelFactory> vdsr_factory(const VdsrBenchModel& m, VdsrBatchSource source) {
  if (m.depth < 2 || m.channels < 1 || m.crop < 1) {
    return absl::InvalidArgumentError(
        fmt::format("vdsr: depth {} (>= 2), channels {} (>= 1) and crop {} (>= 1) out of range",
                    m.depth, m.channels, m.crop));
  }
  ModelFactory f;
  f.model = "vdsr";
  f.size_label = "batch";
  f.data_note = source ? "real photo patches" : "random data";
  f.data_note += precision_note(m.precision);
  f.build = [m, check = f](int64_t batch) -> absl::StatusOr<Graph> {
    LMS_RETURN_IF_ERROR(check_size(check, batch));
    Graph g;
    models::ModelTensors t = models::build_vdsr(g, {.batch = batch,
                                                    .height = m.crop,
                                                    .width = m.crop,
                                                    .depth = m.depth,
                                                    .channels = m.channels,
                                                    .seed = m.seed});
    LMS_RETURN_IF_ERROR(g.status());
    return autocast_training_graph(g, t.loss, m.precision,
                                   Adam{.lr = m.lr, .clip_norm = m.clip_norm}, m.training);
  };
  f.feeds = [m, source, check = f](int64_t batch, int64_t step) -> absl::StatusOr<Feeds> {
    LMS_RETURN_IF_ERROR(
        check_feed_bytes(check, batch, io::checked_product({2, batch, m.crop, m.crop, 4})));
    if (!source) return random_vdsr_feeds(batch, m.crop, m.seed, step);
    std::vector<float> lr, hr;
    LMS_RETURN_IF_ERROR(source(step, batch, m.crop, &lr, &hr));
    Feeds feeds;
    feeds.emplace("lr", std::move(lr));
    feeds.emplace("hr", std::move(hr));
    return feeds;
  };
  return f;
}

namespace {

Feeds random_unet_feeds(const Unet3dBenchModel& m, int64_t size, int64_t step) {
  std::mt19937_64 rng = step_rng(m.seed, step);
  int64_t voxels = 1;
  for (int d = 0; d < m.spatial_dims; ++d) voxels *= size;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> image(static_cast<size_t>(m.in_channels * voxels));
  for (float& v : image) v = normal(rng);
  // One-hot NC...: channel c of voxel v at index c * voxels + v (batch 1).
  std::uniform_int_distribution<int64_t> cls(0, m.classes - 1);
  std::vector<float> labels(static_cast<size_t>(m.classes * voxels), 0.0f);
  for (int64_t v = 0; v < voxels; ++v) labels[static_cast<size_t>(cls(rng) * voxels + v)] = 1.0f;
  Feeds feeds;
  feeds.emplace("image", std::move(image));
  feeds.emplace("labels", std::move(labels));
  return feeds;
}

}  // namespace

absl::StatusOr<ModelFactory> unet_factory(const Unet3dBenchModel& m, Unet3dBatchSource source) {
  const bool isensee = m.arch == UnetArch::kIsensee;
  if (m.levels < 1 || m.levels > 8 || m.in_channels < 1 || m.classes < 2 || m.base_filters < 1 ||
      (m.spatial_dims != 2 && m.spatial_dims != 3)) {
    return absl::InvalidArgumentError(fmt::format(
        "unet: levels {} (1..8), in_channels {} (>= 1), classes {} (>= 2), base_filters {} "
        "(>= 1), spatial_dims {} (2 or 3) out of range",
        m.levels, m.in_channels, m.classes, m.base_filters, m.spatial_dims));
  }
  if (isensee && (m.spatial_dims != 3 || m.segmentation_levels < 1)) {
    return absl::InvalidArgumentError(
        fmt::format("unet: the Isensee U-Net is 3-D only (spatial_dims {}) with "
                    "segmentation_levels >= 1 ({})",
                    m.spatial_dims, m.segmentation_levels));
  }
  ModelFactory f;
  f.model = m.spatial_dims == 3 ? "unet3d" : "unet2d";
  f.size_label = "size";
  f.size_step = int64_t{1} << (m.levels - 1);
  f.max_search_size = m.spatial_dims == 3 ? 512 : 8192;
  f.data_note = source ? "real volumes" : "random volumes, random one-hot labels";
  f.data_note += precision_note(m.precision);
  f.build = [m, isensee, check = f](int64_t size) -> absl::StatusOr<Graph> {
    LMS_RETURN_IF_ERROR(check_size(check, size));
    Graph g;
    models::ModelTensors t =
        isensee ? models::build_isensee_unet(g, {.batch = 1,
                                                 .in_channels = m.in_channels,
                                                 .classes = m.classes,
                                                 .size = size,
                                                 .base_filters = m.base_filters,
                                                 .levels = m.levels,
                                                 .segmentation_levels = m.segmentation_levels,
                                                 .deep_supervision = true,
                                                 .seed = m.seed})
                : models::build_unet(g, {.batch = 1,
                                         .in_channels = m.in_channels,
                                         .classes = m.classes,
                                         .size = size,
                                         .base_filters = m.base_filters,
                                         .levels = m.levels,
                                         .spatial_dims = m.spatial_dims,
                                         .seed = m.seed});
    LMS_RETURN_IF_ERROR(g.status());
    return autocast_training_graph(g, t.loss, m.precision, Adam{.lr = m.lr});
  };
  f.feeds = [m, source, check = f](int64_t size, int64_t step) -> absl::StatusOr<Feeds> {
    const int64_t third = m.spatial_dims == 3 ? size : 1;
    LMS_RETURN_IF_ERROR(check_feed_bytes(
        check, size, io::checked_product({m.in_channels + m.classes, size, size, third, 4})));
    if (!source) return random_unet_feeds(m, size, step);
    std::vector<float> image, labels;
    LMS_RETURN_IF_ERROR(source(step, size, &image, &labels));
    const size_t voxels = static_cast<size_t>(size * size * third);
    if (image.size() != static_cast<size_t>(m.in_channels) * voxels ||
        labels.size() != static_cast<size_t>(m.classes) * voxels) {
      return absl::InvalidArgumentError(fmt::format(
          "{} size {}: the data source gave {} image and {} label values; the model takes {} x {} "
          "and {} x {}",
          check.model, size, image.size(), labels.size(), m.in_channels, voxels, m.classes,
          voxels));
    }
    Feeds feeds;
    feeds.emplace("image", std::move(image));
    feeds.emplace("labels", std::move(labels));
    return feeds;
  };
  return f;
}

}  // namespace lms::bench
