#include "search.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <utility>

#include "fmt/format.h"
#include "lms/device.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/status.h"

namespace lms::bench {
namespace {

double now_s() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// Bisects k in (lo, hi) where probe(lo * step) held (or lo == 0) and
// probe(hi * step) failed.
absl::StatusOr<int64_t> bisect(const std::function<absl::StatusOr<bool>(int64_t)>& probe,
                               int64_t step, int64_t lo, int64_t hi) {
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    LMS_ASSIGN_OR_RETURN(bool ok, probe(mid * step));
    (ok ? lo : hi) = mid;
  }
  return lo * step;
}

// Graphs and workspaces by size, shared by the three probes.
class Prober {
 public:
  Prober(const ModelFactory& f, const SearchSpec& spec) : f_(f), spec_(spec) {}

  absl::Status init() {
    // The rows' device: kernel workspaces depend on the thread count
    // (oneDNN scratchpads), and the Device overload plans within the
    // device's pinned host pool (on CUDA pinned up front, on the CPU device
    // reserved lazily).
    LMS_ASSIGN_OR_RETURN(device_, make_device(spec_.device));
    return absl::OkStatus();
  }

  // Whether the program without LMS that the table's rows run fits the
  // device (Note [Fair baseline]; Note [Limit search]).
  absl::StatusOr<bool> fits_without_lms(int64_t size) {
    LMS_ASSIGN_OR_RETURN(const Prepared* p, prepare(size));
    Graph copy = p->train;
    auto rep = plan_without_lms(copy, spec_.config, *device_, p->loss);
    if (absl::IsResourceExhausted(rep.status())) return false;
    LMS_RETURN_IF_ERROR(rep.status());
    return rep->fits;
  }

  // The LMS rows' plan (run_case.h): the Device overload, with the config's
  // time model.
  absl::StatusOr<bool> fits_with_lms(int64_t size) {
    LMS_ASSIGN_OR_RETURN(const Prepared* p, prepare(size));
    LmsConfig cfg = spec_.config;
    cfg.enabled = true;
    Graph copy = p->train;
    auto rep = rewrite(copy, cfg, *device_, {.fetched = {p->loss}});
    if (absl::IsResourceExhausted(rep.status())) return false;
    LMS_RETURN_IF_ERROR(rep.status());
    return rep->fits;
  }

  absl::StatusOr<bool> working_set_fits(int64_t size) {
    LMS_ASSIGN_OR_RETURN(const Prepared* p, prepare(size));
    LMS_ASSIGN_OR_RETURN(RewriteReport rep,
                         plan_figures_without_lms(p->train, spec_.config, *device_, p->loss));
    return rep.working_set_limit_bytes <= rep.budget_bytes;
  }

  int probes() const { return probes_; }

 private:
  struct Prepared {
    Graph train;
    std::string loss;
  };

  absl::StatusOr<const Prepared*> prepare(int64_t size) {
    ++probes_;
    auto it = cache_.find(size);
    if (it != cache_.end()) return it->second.get();
    auto p = std::make_unique<Prepared>();
    LMS_ASSIGN_OR_RETURN(p->train, f_.build(size));
    p->loss = p->train.tensor(p->train.loss()).name;
    // Only the latest few sizes are probed again (bisection narrows down).
    if (cache_.size() > 8) cache_.erase(cache_.begin());
    return cache_.emplace(size, std::move(p)).first->second.get();
  }

  const ModelFactory& f_;
  const SearchSpec& spec_;
  std::unique_ptr<Device> device_;
  std::map<int64_t, std::unique_ptr<Prepared>> cache_;
  int probes_ = 0;
};

// One real step at `size`; true when it ran.
absl::StatusOr<bool> real_step(const ModelFactory& f, const SearchSpec& spec, bool lms,
                               int64_t size) {
  CaseSpec c;
  c.size = size;
  c.lms = lms;
  c.steps = 1;
  c.config = spec.config;
  c.device = spec.device;
  LMS_ASSIGN_OR_RETURN(CaseResult row, run_case(f, c));
  return row.ok;
}

// Confirms `*max` with a real step; on failure bisects below it with real
// steps and records the disagreement.
absl::Status confirm(const ModelFactory& f, const SearchSpec& spec, bool lms, int64_t* max,
                     bool* confirmed, std::string* notes) {
  if (*max == 0) return absl::OkStatus();
  LMS_ASSIGN_OR_RETURN(bool ok, real_step(f, spec, lms, *max));
  if (ok) {
    *confirmed = true;
    return absl::OkStatus();
  }
  auto probe = [&](int64_t s) { return real_step(f, spec, lms, s); };
  LMS_ASSIGN_OR_RETURN(int64_t real_max, bisect(probe, f.size_step, 0, *max / f.size_step));
  *notes += fmt::format(
      "LMS {}: the replay fitted {} {} but a real step ran out of memory; "
      "largest by real steps: {}\n",
      lms ? "on" : "off", f.size_label, *max, real_max);
  *max = real_max;
  *confirmed = real_max > 0;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> search_max(const std::function<absl::StatusOr<bool>(int64_t)>& probe,
                                   int64_t step, int64_t max_size, bool* capped) {
  if (capped != nullptr) *capped = false;
  if (step < 1 || max_size < step) {
    return absl::InvalidArgumentError(
        fmt::format("search_max: step {} must be >= 1 and max_size {} >= step", step, max_size));
  }
  const int64_t max_k = max_size / step;
  LMS_ASSIGN_OR_RETURN(bool ok, probe(step));
  if (!ok) return 0;
  int64_t lo = 1;
  while (lo < max_k) {
    int64_t k = std::min(lo * 2, max_k);
    LMS_ASSIGN_OR_RETURN(ok, probe(k * step));
    if (!ok) return bisect(probe, step, lo, k);
    lo = k;
  }
  if (capped != nullptr) *capped = true;
  return lo * step;
}

absl::StatusOr<Limits> search_limits(const ModelFactory& f, const SearchSpec& spec) {
  Limits lim;
  double start = now_s();
  {
    // The probe device is gone before the confirming steps make theirs
    // (on CUDA each holds the capacity and pins the host pool).
    Prober prober(f, spec);
    LMS_RETURN_IF_ERROR(prober.init());
    const int64_t step = f.size_step, cap = f.max_search_size;
    LMS_ASSIGN_OR_RETURN(
        lim.no_lms_max, search_max([&](int64_t s) { return prober.fits_without_lms(s); }, step, cap,
                                   &lim.no_lms_capped));
    LMS_ASSIGN_OR_RETURN(lim.working_set_max,
                         search_max([&](int64_t s) { return prober.working_set_fits(s); }, step,
                                    cap, &lim.working_set_capped));
    LMS_ASSIGN_OR_RETURN(lim.lms_max, search_max([&](int64_t s) { return prober.fits_with_lms(s); },
                                                 step, cap, &lim.lms_capped));
    lim.probes = prober.probes();
  }
  lim.search_s = now_s() - start;
  if (spec.confirm) {
    start = now_s();
    LMS_RETURN_IF_ERROR(
        confirm(f, spec, false, &lim.no_lms_max, &lim.no_lms_confirmed, &lim.notes));
    LMS_RETURN_IF_ERROR(confirm(f, spec, true, &lim.lms_max, &lim.lms_confirmed, &lim.notes));
    lim.confirm_s = now_s() - start;
  }
  return lim;
}

}  // namespace lms::bench
