#include "evaluate.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <utility>

#include "dataset.h"
#include "fmt/format.h"
#include "lms/io/checkpoint.h"
#include "lms/io/image.h"
#include "lms/io/image_ops.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "models.h"
#include "run_setup.h"
#include "setup.h"

namespace lms::vdsr {
namespace {

constexpr int kPanelGap = 4;  // white pixels between the side-by-side panels

struct ModelShape {
  int64_t depth = 0;
  int64_t channels = 0;
};

// Depth = the number of consecutive "conv<k>/w" tensors, channels = conv1's
// output channels, as models::build_vdsr names them.
absl::StatusOr<ModelShape> model_shape(const io::Checkpoint& ck, const std::string& path) {
  LMS_RETURN_IF_ERROR(examples::check_model_entry(ck, path, "vdsr", "vdsr"));
  ModelShape m;
  while (ck.find(fmt::format("conv{}/w", m.depth + 1)) != nullptr) ++m.depth;
  const io::NamedTensor* w1 = ck.find("conv1/w");
  if (m.depth < 2 || w1 == nullptr || w1->shape.size() != 4) {
    return absl::DataLossError(
        fmt::format("checkpoint '{}' holds no VDSR weights (conv1/w, conv2/w, ...)", path));
  }
  m.channels = w1->shape[0];
  return m;
}

// The window of Note [Eval crop].
absl::StatusOr<ImagePair> centre_window(const ImagePair& full, int side) {
  int w = side == 0 ? full.hr.width : std::min(side, full.hr.width);
  int h = side == 0 ? full.hr.height : std::min(side, full.hr.height);
  int x = (full.hr.width - w) / 2, y = (full.hr.height - h) / 2;
  ImagePair p;
  p.name = full.name;
  LMS_ASSIGN_OR_RETURN(p.hr, io::crop(full.hr, x, y, w, h));
  LMS_ASSIGN_OR_RETURN(p.lr_up, io::crop(full.lr_up, x, y, w, h));
  return p;
}

// VDSR's output for one window, by a forward-only session with the
// checkpoint's parameters.
absl::StatusOr<io::Plane> super_resolve(const ImagePair& p, const ModelShape& m,
                                        const io::Checkpoint& ck, Device& device) {
  Graph g;
  models::ModelTensors t = models::build_vdsr(g, {.batch = 1,
                                                  .height = p.hr.height,
                                                  .width = p.hr.width,
                                                  .depth = m.depth,
                                                  .channels = m.channels});
  LMS_RETURN_IF_ERROR(g.status());
  const std::string out_name = g.tensor(t.output).name;
  LMS_ASSIGN_OR_RETURN(auto session, Session::create(g, device, {.fetches = {out_name}}));
  LMS_RETURN_IF_ERROR(restore_session(*session, g, ck, /*parameters_only=*/true));
  Feeds feeds = {{"lr", p.lr_up.data}, {"hr", p.hr.data}};
  StepResult r;
  absl::Status s = session->run(feeds, &r);
  if (!s.ok()) {
    return absl::Status(
        s.code(), fmt::format("{} ({}x{} window; a smaller --eval-crop needs less memory): {}",
                              p.name, p.hr.width, p.hr.height, to_std(s.message())));
  }
  return io::Plane{p.hr.width, p.hr.height, std::move(r.fetched.at(out_name))};
}

absl::StatusOr<EvalRow> score(const ImagePair& p, const io::Plane& sr, int scale) {
  LMS_ASSIGN_OR_RETURN(io::Plane gt, io::quantize_8bit(p.hr));
  LMS_ASSIGN_OR_RETURN(io::Plane bic, io::quantize_8bit(p.lr_up));
  LMS_ASSIGN_OR_RETURN(io::Plane out, io::quantize_8bit(sr));
  EvalRow row{p.name, p.hr.width, p.hr.height, 0, 0};
  LMS_ASSIGN_OR_RETURN(row.psnr_bicubic_db, io::psnr(bic, gt, scale));
  LMS_ASSIGN_OR_RETURN(row.psnr_vdsr_db, io::psnr(out, gt, scale));
  return row;
}

// bicubic | VDSR | ground truth, grey, separated by white gaps.
absl::Status write_side_by_side(const ImagePair& p, const io::Plane& sr, const std::string& path) {
  const io::Plane* panels[3] = {&p.lr_up, &sr, &p.hr};
  int w = p.hr.width, h = p.hr.height;
  io::Image img{3 * w + 2 * kPanelGap, h, 1, {}};
  img.data.assign(static_cast<size_t>(img.width) * h, 1.0f);
  for (int k = 0; k < 3; ++k) {
    for (int y = 0; y < h; ++y) {
      std::copy_n(panels[k]->data.begin() + static_cast<ptrdiff_t>(y) * w, w,
                  img.data.begin() + static_cast<ptrdiff_t>(y) * img.width + k * (w + kPanelGap));
    }
  }
  return io::write_png(img, path);
}

void print_table(const EvalResult& r, std::ostream& log) {
  log << fmt::format("{:<24} {:>9}  {:>12}  {:>10}  {:>8}\n", "image", "window", "bicubic dB",
                     "VDSR dB", "gain dB");
  for (const EvalRow& row : r.rows) {
    log << fmt::format("{:<24} {:>9}  {:12.3f}  {:10.3f}  {:+8.3f}\n", row.name,
                       fmt::format("{}x{}", row.width, row.height), row.psnr_bicubic_db,
                       row.psnr_vdsr_db, row.psnr_vdsr_db - row.psnr_bicubic_db);
  }
  log << fmt::format("{:<24} {:>9}  {:12.3f}  {:10.3f}  {:+8.3f}\n", "mean", "", r.mean_bicubic_db,
                     r.mean_vdsr_db, r.mean_vdsr_db - r.mean_bicubic_db);
}

}  // namespace

absl::StatusOr<EvalResult> evaluate(const EvalOptions& opts, std::ostream& log) {
  LMS_ASSIGN_OR_RETURN(io::Checkpoint ck, io::load_usable_checkpoint(opts.checkpoint));
  LMS_ASSIGN_OR_RETURN(ModelShape m, model_shape(ck, opts.checkpoint));
  std::string dir = (std::filesystem::path(opts.run.data_dir) / "eval").string();
  std::vector<std::string> warnings;
  LMS_ASSIGN_OR_RETURN(Dataset data,
                       Dataset::load(dir, {opts.scale, opts.run.max_images}, &warnings));
  for (const std::string& w : warnings) log << "warning: skipped " << w << "\n";
  LMS_ASSIGN_OR_RETURN(auto device, make_device(opts.run, LinkConfig{}));
  log << fmt::format("model: VDSR depth {} channels {} from {} (step {}); {} images from {}\n",
                     m.depth, m.channels, opts.checkpoint, ck.step, data.pairs().size(), dir);
  EvalResult result;
  for (const ImagePair& full : data.pairs()) {
    LMS_ASSIGN_OR_RETURN(ImagePair p, centre_window(full, opts.eval_crop));
    LMS_ASSIGN_OR_RETURN(io::Plane sr, super_resolve(p, m, ck, *device));
    LMS_ASSIGN_OR_RETURN(EvalRow row, score(p, sr, opts.scale));
    result.rows.push_back(std::move(row));
    if (!opts.out.empty() && result.rows.size() == 1) {
      LMS_RETURN_IF_ERROR(write_side_by_side(p, sr, opts.out));
    }
  }
  for (const EvalRow& row : result.rows) {
    result.mean_bicubic_db += row.psnr_bicubic_db / static_cast<double>(result.rows.size());
    result.mean_vdsr_db += row.psnr_vdsr_db / static_cast<double>(result.rows.size());
  }
  print_table(result, log);
  if (!opts.out.empty())
    log << fmt::format("side by side (bicubic | VDSR | ground truth): {}\n", opts.out);
  return result;
}

}  // namespace lms::vdsr
