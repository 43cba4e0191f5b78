// A user's program against the installed lms: builds a small net with a
// concat skip, plans it with LMS for a device too small to train it without,
// and trains a few steps with the installed example config
// (<prefix>/share/lms/lms.toml, the path in argv[1]). Exits 0 only if the
// config loads, the plan fits, the steps swap, the loss falls and the step
// without LMS runs out of memory.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "lms/config.h"
#include "lms/device.h"
#include "lms/graph.h"
#include "lms/ops.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/training.h"

namespace {

absl::StatusOr<lms::Graph> model() {
  lms::Graph g;
  const lms::TensorId x = g.input("x", {4, 1, 32, 32});
  const lms::TensorId y = g.input("y", {4, 1, 32, 32});
  lms::TensorId h = lms::relu(g, "r1", lms::conv2d(g, "c1", x, 8, {3}, {.pad = {1}, .seed = 1}));
  lms::TensorId d = lms::relu(g, "r2", lms::conv2d(g, "c2", h, 8, {3}, {.pad = {1}, .seed = 2}));
  d = lms::relu(g, "r3", lms::conv2d(g, "c3", d, 8, {3}, {.pad = {1}, .seed = 3}));
  const lms::TensorId cat = lms::concat(g, "cat", {d, h});
  const lms::TensorId out = lms::conv2d(g, "head", cat, 1, {3}, {.pad = {1}, .seed = 4});
  const lms::TensorId loss = lms::mse_loss(g, "loss", out, y);
  LMS_RETURN_IF_ERROR(g.status());
  return lms::training_graph(g, loss, lms::Adam{.lr = 1e-2});
}

absl::Status run(const char* config_path) {
  LMS_ASSIGN_OR_RETURN(lms::LmsConfig cfg, lms::LmsConfig::from_file(config_path));
  LMS_ASSIGN_OR_RETURN(lms::Graph train, model());
  std::mt19937_64 gen(5);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> x(4 * 32 * 32), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = 0.5f * (x[i] = u(gen));
  const lms::Feeds feeds = {{"x", x}, {"y", y}};

  // The limits, on a roomy device.
  LMS_ASSIGN_OR_RETURN(auto roomy, lms::make_cpu_device({.capacity_bytes = 64 << 20}));
  lms::LmsConfig off;
  off.enabled = false;
  lms::Graph probe = train;
  LMS_ASSIGN_OR_RETURN(lms::RewriteReport limits, lms::rewrite(probe, off, *roomy));
  const uint64_t budget = (limits.working_set_limit_bytes + limits.peak_bytes_after) / 2;

  LMS_ASSIGN_OR_RETURN(auto device, lms::make_cpu_device({.capacity_bytes = budget}));
  lms::Graph plain = train;
  LMS_ASSIGN_OR_RETURN(lms::RewriteReport no_lms, lms::rewrite(plain, off, *device));
  if (no_lms.fits) return absl::InternalError("the budget is not tight: it fits without LMS");

  lms::Graph swapped = train;
  LMS_ASSIGN_OR_RETURN(lms::RewriteReport report, lms::rewrite(swapped, cfg, *device));
  std::printf("%s", report.summary().c_str());
  if (!report.fits) return absl::InternalError("the LMS plan does not fit");
  LMS_ASSIGN_OR_RETURN(auto session, lms::Session::create(swapped, *device));
  float first = 0, last = 0;
  uint64_t swapped_bytes = 0;
  for (int step = 0; step < 5; ++step) {
    lms::StepResult r;
    LMS_RETURN_IF_ERROR(session->run(feeds, &r));
    last = r.fetched.at("loss")[0];
    if (step == 0) first = last;
    swapped_bytes += r.bytes_d2h;
    std::printf("step %d: loss %.6f, peak %llu of %llu bytes\n", step, last,
                static_cast<unsigned long long>(r.peak_device_bytes),
                static_cast<unsigned long long>(budget));
  }
  if (swapped_bytes == 0) return absl::InternalError("nothing was swapped");
  if (!(std::isfinite(last) && last < first)) return absl::InternalError("the loss did not fall");
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <lms.toml>\n", argv[0]);
    return 2;
  }
  const absl::Status s = run(argv[1]);
  if (!s.ok()) {
    std::fprintf(stderr, "consumer: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("consumer: trained with LMS through the installed package\n");
  return 0;
}
