#include "scaling.h"

#include <algorithm>
#include <thread>

#include "fmt/format.h"
#include "lms/facts.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "lms/units.h"

namespace lms::bench {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// rank 0's text on every rank.

// lms::rewrite on every rank from rank 0's measured facts (lms::gather_facts
// with the communicator), so the ranks plan alike: node times measured on
// each rank differ a little, plans made from them may too, and
// Session::create refuses ranks whose plans differ (Note [Rank agreement]).
absl::StatusOr<RewriteReport> rewrite_alike(Graph& graph, const LmsConfig& cfg, Device& device,
                                            const RewriteOptions& ro, Communicator& comm) {
  GatherOptions go{.rewrite = ro, .measure_times = cfg.enabled};
  LMS_ASSIGN_OR_RETURN(PlanningFacts facts, gather_facts(graph, cfg, device, &comm, go));
  return rewrite(graph, cfg, device, ro, facts);
}

// One row on the ranks of `comm`: the step times of every timed step (the
// slowest rank's), rank 0's swapped bytes and the mean loss.
absl::StatusOr<ScalingRow> run_row(Communicator& comm, const ScalingOptions& o, std::ostream& err) {
  VdsrBenchModel m = o.model;
  m.training.data_parallel = DataParallel{};
  LMS_ASSIGN_OR_RETURN(ModelFactory f, vdsr_factory(m, nullptr));
  LMS_ASSIGN_OR_RETURN(Graph train, f.build(o.batch));
  LMS_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, make_device(o.device));
  RewriteOptions ro;
  ro.fetched = {"loss"};
  LmsConfig cfg = o.config;
  if (o.budget_fraction < 1) {
    Graph probe = train;
    LmsConfig off = cfg;
    off.enabled = false;
    LMS_ASSIGN_OR_RETURN(RewriteReport peak,
                         rewrite(probe, off, *device, ro, {.ranks = comm.size()}));
    cfg.device_memory_limit =
        static_cast<uint64_t>(o.budget_fraction * static_cast<double>(peak.peak_bytes_after));
  }
  LMS_ASSIGN_OR_RETURN(RewriteReport rep, rewrite_alike(train, cfg, *device, ro, comm));
  if (!rep.fits) {
    return absl::ResourceExhaustedError(fmt::format("batch {} does not fit {} even with LMS: {}",
                                                    o.batch, format_bytes(o.device.capacity_bytes),
                                                    rep.summary()));
  }
  LMS_ASSIGN_OR_RETURN(
      std::unique_ptr<Session> session,
      Session::create(train, *device, {.fetches = {"loss"}, .communicator = &comm}));
  ScalingRow row;
  row.budget_bytes = rep.budget_bytes;
  row.ranks = comm.size();
  row.global_batch = o.batch * comm.size();
  for (NodeId id = 0; id < train.num_nodes(); ++id) {
    if (train.node(id).op == OpKind::kAllReduce) ++row.all_reduce_buckets;
  }
  std::vector<double> times;
  float loss = 0;
  for (int step = 0; step <= o.steps; ++step) {
    // Each rank its own batch: the global batch of step s is the ranks'
    // batches s*k .. s*k + k-1 of the random source.
    LMS_ASSIGN_OR_RETURN(Feeds feeds, f.feeds(o.batch, int64_t{step} * comm.size() + comm.rank()));
    StepResult r;
    LMS_RETURN_IF_ERROR(session->run(feeds, &r));
    if (step == 0) continue;  // warm-up
    times.push_back(r.step_s);
    row.swapped_bytes = r.bytes_d2h;
    loss = r.fetched.at("loss")[0];
  }
  // The slowest rank's time per step, and the mean loss.
  std::ostringstream mine;
  mine.precision(17);
  for (double t : times) mine << t << " ";
  LMS_ASSIGN_OR_RETURN(std::vector<std::string> all, comm.all_gather(mine.str()));
  std::vector<double> slowest(times.size(), 0);
  for (const std::string& text : all) {
    std::istringstream in(text);
    for (double& s : slowest) {
      double t = 0;
      in >> t;
      s = std::max(s, t);
    }
  }
  std::vector<double> sum = {loss};
  LMS_RETURN_IF_ERROR(comm.all_reduce_sum(sum));
  row.loss = static_cast<float>(sum[0] / comm.size());
  row.step_s = median(slowest);
  row.samples_per_s = static_cast<double>(row.global_batch) / std::max(row.step_s, 1e-12);
  if (comm.rank() == 0) {
    err << fmt::format("scaling: {} rank(s), step {:.3f} s, loss {:.5g}\n", row.ranks, row.step_s,
                       row.loss);
  }
  return row;
}

}  // namespace

std::vector<int> scaling_rank_counts(int world) {
  std::vector<int> counts;
  for (int k = 1; k < world; k *= 2) counts.push_back(k);
  counts.push_back(std::max(world, 1));
  return counts;
}

absl::StatusOr<ScalingResult> run_scaling(Communicator& world, const ScalingOptions& o,
                                          std::ostream& err) {
  if (!(o.budget_fraction > 0 && o.budget_fraction <= 1)) {
    return absl::InvalidArgumentError(
        fmt::format("scaling: budget fraction {} must be in (0, 1]", o.budget_fraction));
  }
  if (o.steps < 1 || o.batch < 1) {
    return absl::InvalidArgumentError(
        fmt::format("scaling: steps ({}) and batch ({}) must be >= 1", o.steps, o.batch));
  }
  ScalingResult result;
  result.world_ranks = world.size();
  result.threads_per_rank = o.device.compute_threads;
  result.cores = static_cast<int>(std::thread::hardware_concurrency());
  for (int k : scaling_rank_counts(world.size())) {
    LMS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, make_mpi_subset(world, k));
    absl::StatusOr<ScalingRow> row = ScalingRow{};
    if (sub != nullptr) row = run_row(*sub, o, err);
    // A failed row fails every rank (Note [Failed ranks]); the caller aborts.
    LMS_RETURN_IF_ERROR(row.status());
    LMS_RETURN_IF_ERROR(world.barrier());
    if (world.rank() == 0) result.rows.push_back(*row);
  }
  if (world.rank() == 0 && !result.rows.empty()) {
    const double base = result.rows.front().samples_per_s;
    for (ScalingRow& r : result.rows) {
      r.speedup = r.samples_per_s / base;
      r.efficiency = r.speedup / r.ranks;
    }
  }
  return result;
}

std::string format_scaling(const ScalingResult& r) {
  std::string out = fmt::format(
      "data-parallel VDSR with LMS (budget {} per rank), {} rank(s) launched; {} compute "
      "thread(s) per rank on {} core(s){}\n",
      r.rows.empty() ? std::string("-") : format_bytes(r.rows.front().budget_bytes), r.world_ranks,
      r.threads_per_rank, r.cores,
      r.world_ranks * std::max(r.threads_per_rank, 1) > r.cores
          ? " (oversubscribed: ranks share cores, so efficiency falls for that reason alone)"
          : "");
  out +=
      fmt::format("{:>6} {:>12} {:>12} {:>14} {:>9} {:>11} {:>9} {:>12}\n", "ranks", "global batch",
                  "step (s)", "samples/s", "speedup", "efficiency", "buckets", "swap out/step");
  for (const ScalingRow& row : r.rows) {
    out +=
        fmt::format("{:>6} {:>12} {:>12.3f} {:>14.2f} {:>8.2f}x {:>10.1f}% {:>9} {:>12}\n",
                    row.ranks, row.global_batch, row.step_s, row.samples_per_s, row.speedup,
                    100 * row.efficiency, row.all_reduce_buckets, format_bytes(row.swapped_bytes));
  }
  return out;
}

nlohmann::json to_json(const ScalingResult& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const ScalingRow& row : r.rows) {
    rows.push_back({{"ranks", row.ranks},
                    {"global_batch", row.global_batch},
                    {"step_s", row.step_s},
                    {"samples_per_s", row.samples_per_s},
                    {"speedup", row.speedup},
                    {"efficiency", row.efficiency},
                    {"all_reduce_buckets", row.all_reduce_buckets},
                    {"budget_bytes", row.budget_bytes},
                    {"swapped_bytes_per_step", row.swapped_bytes},
                    {"loss", row.loss}});
  }
  return {{"mode", "scaling"},
          {"world_ranks", r.world_ranks},
          {"threads_per_rank", r.threads_per_rank},
          {"cores", r.cores},
          {"rows", rows}};
}

}  // namespace lms::bench
