#include "distributed.h"

#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <span>
#include <thread>
#include <utility>

#include "absl/strings/str_split.h"
#include "flags.h"
#include "fmt/format.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "run_setup.h"

namespace lms::examples {
namespace {

constexpr char kFaultVariable[] = "LMS_EXAMPLES_INJECT_FAULT";

// SplitMix64's finaliser.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

template <typename T>
bool parse_int(std::string_view text, T* out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

// The first environment variable of `names` that holds an integer >= 0.
int local_rank_from_environment() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    const char* value = std::getenv(name);
    int rank = 0;
    if (value != nullptr && parse_int(value, &rank) && rank >= 0) return rank;
  }
  return 0;
}

// "rank 1 has 'depth=5' where rank 0 has 'depth=4'": the first line where
// `text` differs from `root`.
std::string first_difference(int rank, const std::string& text, const std::string& root) {
  std::vector<std::string> mine = absl::StrSplit(text, '\n');
  std::vector<std::string> theirs = absl::StrSplit(root, '\n');
  size_t i = 0;
  while (i < mine.size() && i < theirs.size() && mine[i] == theirs[i]) ++i;
  auto line = [&](const std::vector<std::string>& lines) {
    return i < lines.size() ? fmt::format("'{}'", lines[i]) : std::string("nothing");
  };
  return fmt::format("rank {} has {} where rank 0 has {}", rank, line(mine), line(theirs));
}

}  // namespace

void add_distributed_flags(CLI::App& app, DistributedOptions& options) {
  CLI::App* group = app.add_option_group("data-parallel",
                                         "run under mpirun, one process per device; see README.md");
  flags::add_switch(*group, "--distributed", &options.enabled,
                    "train as one rank of `mpirun -np N ...`: rank r trains on the images\n"
                    "(subjects) r, r+N, ...; gradients averaged over the ranks; rank 0 logs\n"
                    "and writes the checkpoint; with --device cuda, NCCL on GPU <local rank>");
  flags::add_switch(*group, "--scale-lr", &options.scale_lr,
                    "learning rate x N (linear scaling rule, Goyal et al. 2017)");
  flags::add_real(*group, "--comm-timeout S", &options.comm_timeout_s,
                  "a rank waiting longer than S seconds for another fails",
                  {.min = 0, .min_open = true});
}

absl::Status check_distributed(const DistributedOptions& options) {
  if (options.scale_lr && !options.enabled) {
    return absl::InvalidArgumentError("--scale-lr needs --distributed (it scales by the ranks)");
  }
  if (!(options.comm_timeout_s > 0)) {
    return flags::bad_flag("--comm-timeout", fmt::format("{}", options.comm_timeout_s),
                           "seconds > 0");
  }
  return absl::OkStatus();
}

uint64_t rank_seed(uint64_t seed, int rank) {
  return rank == 0 ? seed : mix(seed ^ mix(static_cast<uint64_t>(rank)));
}

Ranks::Ranks() : null_log_(std::make_unique<std::ostream>(nullptr)) {}

absl::StatusOr<Ranks> Ranks::join(const DistributedOptions& options) {
  LMS_RETURN_IF_ERROR(check_distributed(options));
  Ranks ranks;
  if (!options.enabled) return ranks;
  if (!launched_by_mpi()) {
    return absl::FailedPreconditionError(
        "--distributed: this process was not started by mpirun; run `mpirun -np N <program> "
        "train --distributed ...` (or leave out --distributed for one process)");
  }
  LMS_ASSIGN_OR_RETURN(ranks.fault_, fault_from_environment());
  ranks.mpi_options_.timeout_s = options.comm_timeout_s;
  absl::StatusOr<std::unique_ptr<Communicator>> mpi = make_mpi_communicator(ranks.mpi_options_);
  if (!mpi.ok()) {
    return absl::Status(mpi.status().code(),
                        fmt::format("--distributed: {}", to_std(mpi.status().message())));
  }
  ranks.mpi_ = *std::move(mpi);
  ranks.comm_ = ranks.mpi_.get();
  ranks.local_rank_ = local_rank_from_environment();
  return ranks;
}

std::ostream& Ranks::root_log(std::ostream& log) const { return is_root() ? log : *null_log_; }

void Ranks::warn(std::ostream& log, std::string_view text) const {
  if (is_root()) {
    log << "warning: " << text << "\n";
  } else {
    std::cerr << fmt::format("rank {}: warning: {}\n", rank(), text);
  }
}

double Ranks::learning_rate(double lr, bool scale) const { return scale ? lr * size() : lr; }

absl::Status Ranks::attach_device(Device& device) {
  if (mpi_ == nullptr || device.device_kind() != DeviceKind::kCuda) return absl::OkStatus();
  LMS_ASSIGN_OR_RETURN(nccl_, make_nccl_communicator(device, *mpi_, mpi_options_));
  comm_ = nccl_.get();
  return absl::OkStatus();
}

void Ranks::detach_device() {
  nccl_.reset();
  comm_ = mpi_.get();
}

absl::StatusOr<double> Ranks::sum(double value) {
  if (comm_ == nullptr) return value;
  double values[] = {value};
  LMS_RETURN_IF_ERROR(comm_->all_reduce_sum(values));
  return values[0];
}

absl::StatusOr<double> Ranks::mean(double value) {
  LMS_ASSIGN_OR_RETURN(double total, sum(value));
  return total / size();
}

absl::Status Ranks::check_same(std::string_view what, const std::string& text) {
  if (comm_ == nullptr) return absl::OkStatus();
  LMS_ASSIGN_OR_RETURN(std::vector<std::string> all, comm_->all_gather(text));
  std::vector<std::string> differences;
  for (int r = 1; r < size(); ++r) {
    if (all[r] != all[0]) differences.push_back(first_difference(r, all[r], all[0]));
  }
  if (differences.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      fmt::format("--distributed: {} differ across ranks: {} (every rank must be started with "
                  "the same flags and files)",
                  what, fmt::join(differences, "; ")));
}

absl::Status Ranks::check_same_settings(const std::map<std::string, std::string>& settings) {
  std::string text;
  for (const auto& [key, value] : settings) text += fmt::format("{}={}\n", key, value);
  return check_same("settings", text);
}

absl::StatusOr<std::string> Ranks::from_root(const std::string& text) {
  if (comm_ == nullptr) return text;
  LMS_ASSIGN_OR_RETURN(std::vector<std::string> all,
                       comm_->all_gather(is_root() ? std::string_view(text) : ""));
  return std::move(all[0]);
}

absl::Status Ranks::barrier() { return comm_ == nullptr ? absl::OkStatus() : comm_->barrier(); }

absl::Status Ranks::fail(const absl::Status& error) {
  if (comm_ == nullptr || size() == 1) return error;
  std::cout.flush();
  std::cerr << fmt::format("rank {}: error: {}\n", rank(), to_std(error.message()));
  std::cerr.flush();
  comm_->abort(error);
  std::abort();  // not reached; GCC does not carry [[noreturn]] through a virtual call
}

absl::StatusOr<Ranks::Fault> Ranks::fault_from_environment() {
  const char* value = std::getenv(kFaultVariable);
  Fault fault;
  if (value == nullptr) return fault;
  std::vector<std::string> parts = absl::StrSplit(value, ':');
  if (parts.size() != 3 || !parse_int(parts[0], &fault.rank) || !parse_int(parts[1], &fault.step) ||
      (parts[2] != "fail" && parts[2] != "kill" && parts[2] != "hang")) {
    return absl::InvalidArgumentError(
        fmt::format("{}: bad value '{}' (RANK:STEP:fail, RANK:STEP:kill or RANK:STEP:hang)",
                    kFaultVariable, value));
  }
  fault.mode = parts[2];
  return fault;
}

absl::Status Ranks::inject_fault(int64_t step) const {
  if (fault_.rank != rank() || fault_.step != step) return absl::OkStatus();
  if (fault_.mode == "kill") std::raise(SIGKILL);
  if (fault_.mode == "hang") std::this_thread::sleep_for(std::chrono::hours(1));
  return absl::InternalError(fmt::format("injected fault at step {} ({})", step, kFaultVariable));
}

std::string data_parallel_summary(const Ranks& ranks, int64_t batch_per_rank, double lr,
                                  bool scale_lr) {
  if (!ranks.distributed()) return "";
  return fmt::format("data parallel: {} ranks ({}), global batch {} ({} per rank), lr {}{}\n",
                     ranks.size(), ranks.communicator()->engine(), batch_per_rank * ranks.size(),
                     batch_per_rank, ranks.learning_rate(lr, scale_lr),
                     scale_lr ? fmt::format(" (--scale-lr: {} x {})", lr, ranks.size()) : "");
}

absl::Status save_on_root(Ranks& ranks, const Session& session, const Graph& graph,
                          const std::string& path, int64_t step,
                          const std::map<std::string, std::string>& meta) {
  if (ranks.is_root()) LMS_RETURN_IF_ERROR(save_session(session, graph, path, step, meta));
  return ranks.barrier();
}

}  // namespace lms::examples
