#include "lms/session.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "graph/internal_checks.h"
#include "graph/low_precision.h"
#include "graph/op_registry.h"
#include "lms/device.h"
#include "lms/distributed.h"
#include "lms/profiler/event_sink.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "lms/units.h"
#include "runtime/capacity.h"
#include "runtime/executor.h"
#include "runtime/kernel_spec.h"
#include "runtime/stall_counter.h"
#include "swap/liveness.h"
#include "swap/placement.h"
#include "swap/release_plan.h"

namespace lms {
namespace {

// A float32 persistent tensor's values at creation, written to `v`
// (num_elements floats). He-normal draws come from a generator seeded per
// tensor (Init::seed), so tensors can be filled in any order or concurrently
// with the same bits.
void fill_initial_values(const Tensor& t, std::span<float> v) {
  switch (t.init.kind) {
    case Init::Kind::kZeros:
      std::fill(v.begin(), v.end(), 0.0f);
      break;
    case Init::Kind::kConstant:
      std::fill(v.begin(), v.end(), static_cast<float>(t.init.value));
      break;
    case Init::Kind::kHeNormal: {
      std::mt19937_64 gen(t.init.seed);
      std::normal_distribution<double> normal(0.0,
                                              std::sqrt(2.0 / static_cast<double>(t.init.fan_in)));
      for (float& x : v) x = static_cast<float>(normal(gen));
      break;
    }
    case Init::Kind::kValues:
      std::copy(t.init.values->begin(), t.init.values->end(),
                v.begin());  // size checked by add_leaf
      break;
  }
}

// Runs fill(i) for i in [0, n) on up to `threads` threads, each a contiguous
// share of the range.
template <typename F>
void parallel_for(size_t n, unsigned threads, F&& fill) {
  threads = std::max(1u, std::min<unsigned>(threads, static_cast<unsigned>(n)));
  if (threads <= 1) {
    for (size_t i = 0; i < n; ++i) fill(i);
    return;
  }
  std::vector<std::thread> pool;
  for (unsigned k = 1; k < threads; ++k) {
    pool.emplace_back([&, k] {
      for (size_t i = n * k / threads; i < n * (k + 1) / threads; ++i) fill(i);
    });
  }
  for (size_t i = 0; i < n / threads; ++i) fill(i);
  for (std::thread& th : pool) th.join();
}

// Per Note [One kernel per spec], each distinct spec is compiled once.
absl::StatusOr<std::vector<std::shared_ptr<Kernel>>> compile_kernels(const Graph& g,
                                                                     Device& device) {
  std::vector<std::shared_ptr<Kernel>> kernels(g.num_nodes());
  KernelCache cache;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (has_no_kernel(n)) continue;
    LMS_ASSIGN_OR_RETURN(kernels[id], cache.kernel(g, id, device));
  }
  return kernels;
}

absl::Status resolve_fetches(const Graph& g, SessionOptions& options, ExecutablePlan& plan) {
  if (options.fetches.empty() && g.loss() != kNoTensor) {
    options.fetches.push_back(g.tensor(g.loss()).name);
  }
  for (const std::string& name : options.fetches) {
    TensorId t = g.find_tensor(name);
    if (t == kNoTensor) {
      return absl::InvalidArgumentError(
          absl::StrCat("fetch '", name, "' is not a tensor of the graph"));
    }
    if (g.tensor(t).role == TensorRole::kHost) {
      return absl::InvalidArgumentError(absl::StrCat("fetch '", name, "' is a host swap tensor"));
    }
  }
  plan.fetch_names = options.fetches;
  return absl::OkStatus();
}

// The last sentence of a device out-of-memory error: what to do, given how
// the graph was planned.
std::string oom_hint(const PlanRecord& r) {
  if (!r.planned || !r.lms_enabled) {
    return "The step does not fit without LMS: plan it with lms::rewrite(graph, config, device) "
           "(LMS swaps activations to pinned host memory), or reduce the batch size.";
  }
  if (r.policy != SwapPolicy::kAuto) {
    return absl::StrCat("LMS policy ", policy_name(r.policy),
                        " swaps by rule and does not aim at a budget: use policy auto, which "
                        "plans to the device capacity, or reduce the batch size.");
  }
  if (r.budget_from_limit) {
    return absl::StrCat("LMS planned this graph for device_memory_limit ",
                        format_bytes(r.budget_bytes),
                        " and the step did not fit as planned: check RewriteReport::fits, "
                        "or reduce the batch size.");
  }
  return "LMS is on and the step did not fit as planned: check RewriteReport::fits (plan with "
         "the Device overload of lms::rewrite), or reduce the batch size.";
}

absl::Status with_hint(const absl::Status& s, const std::string& hint) {
  if (!absl::IsResourceExhausted(s) || hint.empty()) return s;
  return with_message(s, absl::StrCat(s.message(), " ", hint));
}

std::string join_sorted(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return absl::StrCat("{", absl::StrJoin(names, ", "), "}");
}

// Session::create refuses a graph planned for other facts than `device` and
// `fetches` give (Note [Honest fits]): its plan's "fits" would not hold.
absl::Status check_plan_record(const Graph& g, Device& device,
                               const std::vector<std::string>& fetches,
                               const std::vector<uint64_t>& workspaces) {
  const PlanRecord& r = g.plan_record();
  if (!r.planned) return absl::OkStatus();
  auto refuse = [](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat("Session::create: the graph was planned by lms::rewrite for ", what,
                     "; run lms::rewrite again on the original graph with this device and "
                     "fetch set"));
  };
  const AllocatorStats mem = device.memory_stats();
  if (!r.device_kind.empty() && r.device_kind != device.kind()) {
    return refuse(absl::StrCat("a ", r.device_kind, " device, not ", device.name()));
  }
  // Per Note [Capacity units], the plan and the device in allocator units.
  const uint64_t capacity = in_allocator_units(mem.capacity_bytes, mem.alignment_bytes);
  if (r.capacity_bytes != 0 &&
      in_allocator_units(r.capacity_bytes, mem.alignment_bytes) != capacity) {
    return refuse(absl::StrCat("a capacity of ", format_bytes(r.capacity_bytes), " (",
                               r.capacity_bytes, " bytes), but device ", device.name(), " has ",
                               format_bytes(mem.capacity_bytes), " (", mem.capacity_bytes,
                               " bytes)"));
  }
  if (absl::Status s =
          check_within_capacity("the planned budget", r.budget_bytes, mem, device.name());
      !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Session::create: ", s.message(),
                     "; run lms::rewrite again on the original graph with this device"));
  }
  if (r.alignment_bytes != 0 && r.alignment_bytes != mem.alignment_bytes) {
    return refuse(absl::StrCat("an allocator alignment of ", r.alignment_bytes,
                               " bytes, but the device aligns to ", mem.alignment_bytes));
  }
  if (join_sorted(fetches) != join_sorted(r.fetched)) {
    return refuse(absl::StrCat("the fetch set ", join_sorted(r.fetched),
                               " (RewriteOptions::fetched), but the session fetches ",
                               join_sorted(fetches), " (SessionOptions::fetches)"));
  }
  if (!r.workspaces_known) return absl::OkStatus();
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const uint64_t planned =
        id < static_cast<NodeId>(r.workspace_bytes.size()) ? r.workspace_bytes[id] : 0;
    if (planned != workspaces[id]) {
      return refuse(absl::StrCat("a kernel workspace of ", planned, " bytes for node '",
                                 g.node(id).name, "', but its kernel on device ", device.name(),
                                 " needs ", workspaces[id]));
    }
  }
  return absl::OkStatus();
}

// InvalidArgument naming a feed that is no graph input, with the inputs.
template <typename FeedMap>
absl::Status check_feed_names(const Graph& g, const FeedMap& feeds) {
  for (const auto& [name, values] : feeds) {
    const TensorId t = g.find_tensor(name);
    if (t != kNoTensor && g.tensor(t).role == TensorRole::kInput) continue;
    std::vector<std::string> inputs;
    for (TensorId i = 0; i < g.num_tensors(); ++i) {
      if (g.tensor(i).role == TensorRole::kInput) inputs.push_back(g.tensor(i).name);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("Session::run: feed '", name,
                     "' is not an input of the graph; inputs: ", join_sorted(inputs)));
  }
  return absl::OkStatus();
}

// By position: pinned host blocks whose last reader (a swap_in) is there.
std::vector<std::vector<TensorId>> host_releases(const Graph& g, const std::vector<NodeId>& order) {
  std::vector<int32_t> position(g.num_nodes());
  for (int32_t p = 0; p < static_cast<int32_t>(order.size()); ++p) position[order[p]] = p;
  std::vector<std::vector<TensorId>> releases(order.size());
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    const Tensor& tensor = g.tensor(t);
    if (tensor.role != TensorRole::kHost) continue;
    int32_t last = position[tensor.producer];
    for (NodeId c : tensor.consumers) last = std::max(last, position[c]);
    releases[last].push_back(t);
  }
  return releases;
}

bool has_all_reduce(const Graph& g) {
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    if (g.node(id).op == OpKind::kAllReduce) return true;
  }
  return false;
}

// What Note [Rank agreement] compares: digests of the graph's text (with its
// swap nodes, so the LMS plan), of what it was planned for, and of the
// persistent tensors' initial values.
struct RankDigest {
  std::string graph, plan, values;
};

std::string digest(std::string_view bytes) {
  return absl::StrCat(absl::Hex(std::hash<std::string_view>{}(bytes), absl::kZeroPad16));
}

std::string plan_record_text(const PlanRecord& r) {
  return absl::StrCat(r.planned, ";", r.lms_enabled, ";", policy_name(r.policy), ";", r.device_kind,
                      ";", r.capacity_bytes, ";", r.budget_bytes, ";", r.budget_from_limit, ";",
                      r.alignment_bytes, ";", absl::StrJoin(r.fetched, ","), ";",
                      absl::StrJoin(r.workspace_bytes, ","));
}

}  // namespace

class Session::Impl {
 public:
  Impl(const Graph& g, Device& d, SessionOptions o)
      : device_(d), options_(std::move(o)), stall_counter_(options_.sink) {
    plan_.graph = &g;
  }
  // A session of a graph the session rewrote owns it.
  Impl(std::shared_ptr<const Graph> g, Device& d, SessionOptions o) : Impl(*g, d, std::move(o)) {
    owned_graph_ = std::move(g);
  }
  // A StepPlan's session shares its graph and takes its layout.
  Impl(const StepPlan& step, Device& d, SessionOptions o) : Impl(step.graph(), d, std::move(o)) {
    owned_graph_ = step.shared_graph();
    planned_ = step.layout();
  }
  ~Impl() {
    (void)device_.synchronize();
    // The device's memory counter in the trace is the session's view of its
    // arena (StallCounter); freeing the arena is not a step's event.
    if (options_.sink != nullptr) device_.set_event_sink(nullptr);
    for (void* p : plan_.persistent) {
      if (p != nullptr) device_.deallocate(p);
    }
    if (plan_.arena != nullptr) device_.deallocate(plan_.arena);
  }

  absl::Status init() {
    const Graph& g = *plan_.graph;
    // A StepPlan's graph was verified where it was planned (Note [Internal
    // graph checks]); a caller's graph is verified here.
    if (owned_graph_ == nullptr || internal_checks()) LMS_RETURN_IF_ERROR(verify(g));
    LMS_ASSIGN_OR_RETURN(plan_.order, schedule(g));
    LMS_RETURN_IF_ERROR(resolve_fetches(g, options_, plan_));
    LMS_ASSIGN_OR_RETURN(plan_.kernels, compile_kernels(g, device_));
    plan_.workspace_bytes.assign(g.num_nodes(), 0);
    for (NodeId id = 0; id < g.num_nodes(); ++id) {
      if (plan_.kernels[id]) plan_.workspace_bytes[id] = plan_.kernels[id]->workspace_bytes();
    }
    LMS_RETURN_IF_ERROR(check_plan_record(g, device_, plan_.fetch_names, plan_.workspace_bytes));
    if (const PlannedLayout* planned = planned_layout(); planned && planned->release) {
      plan_.release = *planned->release;  // lms::rewrite's result
    } else {
      LMS_ASSIGN_OR_RETURN(plan_.release, swap::release_plan(g, plan_.fetch_names));
    }
    plan_.commit = swap::commit_position(g, plan_.order);
    plan_.oom_hint = oom_hint(g.plan_record());
    plan_.host_release_after = host_releases(g, plan_.order);
    LMS_RETURN_IF_ERROR(lay_out());
    LMS_RETURN_IF_ERROR(allocate_persistent());
    LMS_RETURN_IF_ERROR(check_rank_agreement());
    plan_.communicator = options_.communicator;
    LMS_RETURN_IF_ERROR(allocate_arena());
    stall_counter_.set_memory_by_position(&planned_by_node_, &planned_by_swap_in_);
    executor_ = std::make_unique<Executor>(plan_, device_, &stall_counter_);
    return absl::OkStatus();
  }

  // Note [Rank agreement]: data-parallel ranks must run the same step, or
  // their all-reduces pair different gradients (or hang on a bucket one rank
  // does not have). Session::create compares, across the ranks, digests of
  // the graph (its text, which holds the LMS plan's swap nodes), of what it
  // was planned for (Graph::plan_record) and of the persistent tensors'
  // initial values, and fails naming the ranks that differ from rank 0.
  absl::Status check_rank_agreement() {
    Communicator* comm = options_.communicator;
    const Graph& g = *plan_.graph;
    if (comm == nullptr) {
      if (!has_all_reduce(g)) return absl::OkStatus();
      return absl::InvalidArgumentError(
          "the graph has all_reduce nodes (TrainingOptions::data_parallel) but "
          "SessionOptions::communicator is null; pass the communicator of the ranks");
    }
    const std::string mine =
        absl::StrCat(digest(to_text(g)), " ", digest(plan_record_text(g.plan_record())), " ",
                     digest(initial_digest_source_));
    LMS_ASSIGN_OR_RETURN(std::vector<std::string> all, comm->all_gather(mine));
    std::vector<std::string> problems;
    const char* what[] = {"the graph (model, shapes, LMS swap plan)",
                          "what the graph was planned for (device, capacity, budget, policy)",
                          "the initial parameters (seeds)"};
    const std::vector<std::string> root = absl::StrSplit(all[0], ' ');
    for (size_t part = 0; part < 3; ++part) {
      std::vector<int> ranks;
      for (size_t r = 1; r < all.size(); ++r) {
        const std::vector<std::string> theirs = absl::StrSplit(all[r], ' ');
        if (theirs.size() != 3 || theirs[part] != root[part]) ranks.push_back(static_cast<int>(r));
      }
      if (!ranks.empty()) {
        problems.push_back(absl::StrCat(what[part], " differs on rank(s) ",
                                        absl::StrJoin(ranks, ", "), " from rank 0's"));
      }
    }
    if (problems.empty()) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("data-parallel ranks disagree: ", absl::StrJoin(problems, "; "),
                     ". Every rank must build the same model with the same LMS config and seeds "
                     "(this is rank ",
                     comm->rank(), " of ", comm->size(), ")"));
  }

  // Allocates every persistent tensor and uploads its initial values. The
  // values are staged in host memory, up to kStagingBytes at a time, drawn
  // on the host's cores (a tensor per task), and each stage goes to the
  // device in one upload_many.
  absl::Status allocate_persistent() {
    constexpr uint64_t kStagingBytes = uint64_t{64} << 20;
    const Graph& g = *plan_.graph;
    plan_.persistent.assign(g.num_tensors(), nullptr);
    std::vector<float> staging;
    std::vector<std::pair<TensorId, size_t>> staged;  // tensor, first float in staging
    auto flush = [&]() -> absl::Status {
      parallel_for(staged.size(), std::thread::hardware_concurrency(), [&](size_t i) {
        const Tensor& tensor = g.tensor(staged[i].first);
        fill_initial_values(tensor, std::span<float>(staging.data() + staged[i].second,
                                                     tensor.bytes() / sizeof(float)));
      });
      std::vector<Device::Upload> uploads;
      uploads.reserve(staged.size());
      for (const auto& [t, first] : staged) {
        const uint64_t bytes = g.tensor(t).bytes();
        if (options_.communicator != nullptr) {
          initial_digest_source_ += digest(
              std::string_view(reinterpret_cast<const char*>(staging.data() + first), bytes));
        }
        uploads.push_back({plan_.persistent[t], staging.data() + first, bytes});
      }
      LMS_RETURN_IF_ERROR(device_.upload_many(uploads));
      staging.clear();
      staged.clear();
      return absl::OkStatus();
    };
    for (TensorId t = 0; t < g.num_tensors(); ++t) {
      const Tensor& tensor = g.tensor(t);
      if (!is_persistent(tensor.role)) continue;
      absl::StatusOr<void*> p = device_.allocate(tensor.bytes());
      if (!p.ok()) {
        return with_failure_site(
            absl::Status(p.status().code(),
                         absl::StrCat("allocating persistent tensor '", tensor.name, "' (",
                                      role_name(tensor.role), "): ", p.status().message())),
            {kStagePersistent, tensor.name});
      }
      plan_.persistent[t] = *p;
      if (tensor.dtype != DType::kFloat32) {
        return absl::InternalError(absl::StrCat("persistent tensor '", tensor.name, "' is ",
                                                dtype_name(tensor.dtype),
                                                "; initial values are float32 only"));
      }
      const size_t floats = tensor.bytes() / sizeof(float);
      if (!staged.empty() && (staging.size() + floats) * sizeof(float) > kStagingBytes) {
        LMS_RETURN_IF_ERROR(flush());
      }
      staged.emplace_back(t, staging.size());
      staging.resize(staging.size() + floats);
    }
    return flush();
  }

  // Per Note [Step layout], the same layout the planner computed for
  // `fits`, from the same facts (check_plan_record), the plan's budget
  // (Note [Random tie orders]) and placement search bound included.
  // The layout is the StepPlan's own where it was computed from every fact
  // this session has (check_plan_record compared them); otherwise it is
  // computed here, the same way, from the graph's plan record.
  // The StepPlan's layout where it was computed from every fact this
  // session has; null otherwise.
  const PlannedLayout* planned_layout() const {
    const PlanRecord& r = plan_.graph->plan_record();
    if (planned_ != nullptr && r.planned && r.workspaces_known &&
        r.alignment_bytes == device_.memory_stats().alignment_bytes) {
      return planned_.get();
    }
    return nullptr;
  }

  absl::Status lay_out() {
    const Graph& g = *plan_.graph;
    const AllocatorStats mem = device_.memory_stats();
    const PlanRecord& r = g.plan_record();
    swap::StepLayout computed;
    const swap::StepLayout* planned = nullptr;
    if (const PlannedLayout* result = planned_layout(); result != nullptr) {
      planned = &result->layout;
      reused_planned_layout_ = true;
    } else {
      const int64_t search_bound =
          r.planned ? r.placement_search_buffers : swap::PlacementOptions{}.search_placed_buffers;
      LMS_ASSIGN_OR_RETURN(computed, swap::layout_step(g,
                                                       {std::max<uint64_t>(mem.alignment_bytes, 1),
                                                        plan_.fetch_names, plan_.workspace_bytes},
                                                       r.budget_bytes, search_bound));
    }
    const swap::StepLayout& layout = planned != nullptr ? *planned : computed;
    plan_.tensor_offset = layout.tensor_offset;
    plan_.placed_bytes = layout.placed_bytes;
    plan_.workspace_offset = layout.workspace_offset;
    plan_.workspace_placed = layout.workspace_placed;
    plan_.persistent_bytes = layout.step.persistent_bytes;
    arena_bytes_ = layout.placement.arena_bytes;
    plan_.planned_bytes.resize(layout.arena_in_use.size());
    for (size_t p = 0; p < plan_.planned_bytes.size(); ++p) {
      plan_.planned_bytes[p] = plan_.persistent_bytes + layout.arena_in_use[p];
      const Node& n = g.node(plan_.order[p]);
      if (n.op == OpKind::kSwapIn) {
        planned_by_swap_in_[g.tensor(n.outputs[0]).name] = plan_.planned_bytes[p];
      } else if (n.op != OpKind::kSwapOut) {
        planned_by_node_[n.name] = plan_.planned_bytes[p];
      }
    }
    return absl::OkStatus();
  }

  // The arena: one block right after the persistent tensors, held for the
  // session. Every buffer of a step lives inside it (Note [Step layout]).
  absl::Status allocate_arena() {
    if (arena_bytes_ == 0) return absl::OkStatus();
    absl::StatusOr<void*> p = device_.allocate(arena_bytes_);
    if (!p.ok()) {
      return with_hint(
          with_failure_site(
              absl::Status(
                  p.status().code(),
                  absl::StrCat("allocating the step's arena of ", format_bytes(arena_bytes_), " (",
                               arena_bytes_, " bytes) after ", format_bytes(plan_.persistent_bytes),
                               " of persistent tensors: ", p.status().message())),
              {kStageArena, ""}),
          plan_.oom_hint);
    }
    plan_.arena = static_cast<std::byte*>(*p);
    return absl::OkStatus();
  }

  absl::Status run(const Feeds& feeds, const Int64Feeds& int64_feeds, StepResult* result) {
    FeedViews views;
    for (const auto& [name, values] : feeds) {
      views[name] = {values.data(), values.size(), DType::kFloat32};
    }
    for (const auto& [name, values] : int64_feeds) {
      if (views.contains(name)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Session::run: feed '", name, "' is in both Feeds and Int64Feeds; feed it once"));
      }
      views[name] = {values.data(), values.size(), DType::kInt64};
    }
    return run(views, result);
  }

  absl::Status run(const FeedViews& feeds, StepResult* result) {
    if (result == nullptr) {
      return absl::InvalidArgumentError(
          "Session::run: result is null; pass a StepResult to receive the fetched tensors and "
          "the step's figures");
    }
    LMS_RETURN_IF_ERROR(check_feed_names(*plan_.graph, feeds));
    device_.set_event_sink(&stall_counter_);
    stall_counter_.reset();
    device_.reset_peak_memory();
    double start = now_s();
    absl::Status s = executor_->run(feeds, completed_steps_, result);
    double end = now_s();
    device_.set_event_sink(options_.sink);
    if (options_.sink != nullptr) options_.sink->on_step(steps_, start, end);
    ++steps_;
    LMS_RETURN_IF_ERROR(s);
    ++completed_steps_;  // dropout's counter: a failed step does not advance it
    result->step_s = end - start;
    result->stall_s = stall_counter_.compute_stall_s();  // Note [Stall]
    result->peak_device_bytes = device_.memory_stats().peak_bytes_in_use;
    result->peak_pinned_host_bytes = device_.host_stats().peak_bytes_in_use;
    return absl::OkStatus();
  }

  absl::StatusOr<TensorId> persistent_id(std::string_view name) const {
    TensorId t = plan_.graph->find_tensor(name);
    if (t == kNoTensor || plan_.persistent[t] == nullptr) {
      return absl::NotFoundError(absl::StrCat(
          "'", to_absl(name),
          "' is not a persistent tensor (parameter or optimizer state) of the session"));
    }
    return t;
  }

  absl::StatusOr<std::vector<float>> read(std::string_view name) const {
    LMS_ASSIGN_OR_RETURN(TensorId t, persistent_id(name));
    const Tensor& tensor = plan_.graph->tensor(t);
    std::vector<float> v(num_elements(tensor.shape));
    LMS_RETURN_IF_ERROR(device_.synchronize());
    LMS_RETURN_IF_ERROR(device_.download(v.data(), plan_.persistent[t], tensor.bytes()));
    return v;
  }

  absl::Status write(std::string_view name, const std::vector<float>& values) {
    LMS_ASSIGN_OR_RETURN(TensorId t, persistent_id(name));
    const Tensor& tensor = plan_.graph->tensor(t);
    if (static_cast<int64_t>(values.size()) != num_elements(tensor.shape)) {
      return absl::InvalidArgumentError(absl::StrCat("'", to_absl(name), "' has ",
                                                     num_elements(tensor.shape), " values, got ",
                                                     values.size()));
    }
    LMS_RETURN_IF_ERROR(device_.synchronize());
    return device_.upload(plan_.persistent[t], values.data(), tensor.bytes());
  }

  std::vector<std::string> persistent_tensors() const {
    std::vector<std::string> names;
    for (TensorId t = 0; t < plan_.graph->num_tensors(); ++t) {
      if (plan_.persistent[t] != nullptr) names.push_back(plan_.graph->tensor(t).name);
    }
    return names;
  }

  const std::vector<uint64_t>& workspace_bytes() const { return plan_.workspace_bytes; }
  bool reused_planned_layout() const { return reused_planned_layout_; }

 private:
  Device& device_;
  SessionOptions options_;
  StallCounter stall_counter_;
  ExecutablePlan plan_;
  uint64_t arena_bytes_ = 0;
  bool reused_planned_layout_ = false;  // lay_out() took the StepPlan's layout
  // A StepPlan's graph (plan_.graph points into it) and layout; null for a
  // session of a graph the caller owns.
  std::shared_ptr<const Graph> owned_graph_;
  std::shared_ptr<const PlannedLayout> planned_;
  std::string initial_digest_source_;  // Note [Rank agreement]
  // Planned device bytes while a node runs (by node name) and while a
  // swap-in's copy runs (by its output's name): the memory counter over
  // device time (StallCounter).
  absl::flat_hash_map<std::string, uint64_t> planned_by_node_;
  absl::flat_hash_map<std::string, uint64_t> planned_by_swap_in_;
  std::unique_ptr<Executor> executor_;
  int64_t steps_ = 0;
  int64_t completed_steps_ = 0;  // KernelArgs::step
};

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

absl::StatusOr<std::unique_ptr<Session>> Session::create(const Graph& graph, Device& device,
                                                         SessionOptions options) {
  std::unique_ptr<Impl> impl;
  if (!graph.plan_record().planned && has_low_precision_nodes(graph) && verify(graph).ok()) {
    // Per Note [Low-precision lowering], bf16 / f16 nodes run in float32
    // between casts; a planned graph was lowered before it was planned.
    PassPipeline widen;
    widen.add(std::make_unique<WidenLowPrecisionPass>());
    auto lowered = std::make_shared<Graph>(graph);
    LMS_RETURN_IF_ERROR(widen.run(*lowered).status());
    impl = std::make_unique<Impl>(std::shared_ptr<const Graph>(std::move(lowered)), device,
                                  std::move(options));
  } else {
    impl = std::make_unique<Impl>(graph, device, std::move(options));
  }
  LMS_RETURN_IF_ERROR(impl->init());
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Session>> Session::create(const StepPlan& plan, Device& device,
                                                         SessionOptions options) {
  auto impl = std::make_unique<Impl>(plan, device, std::move(options));
  LMS_RETURN_IF_ERROR(impl->init());
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

absl::Status Session::run(const Feeds& feeds, StepResult* result) {
  return impl_->run(feeds, Int64Feeds{}, result);
}

absl::Status Session::run(const Feeds& feeds, const Int64Feeds& int64_feeds, StepResult* result) {
  return impl_->run(feeds, int64_feeds, result);
}

absl::Status Session::run_views(const FeedViews& feeds, StepResult* result) {
  return impl_->run(feeds, result);
}
absl::StatusOr<std::vector<float>> Session::read(std::string_view name) const {
  return impl_->read(name);
}
absl::Status Session::write(std::string_view name, const std::vector<float>& values) {
  return impl_->write(name, values);
}
std::vector<std::string> Session::persistent_tensors() const { return impl_->persistent_tensors(); }
const std::vector<uint64_t>& Session::workspace_bytes() const { return impl_->workspace_bytes(); }
bool Session::reused_planned_layout() const { return impl_->reused_planned_layout(); }

absl::StatusOr<std::vector<uint64_t>> kernel_workspace_bytes(const Graph& graph, Device& device) {
  // Per Note [One kernel per spec], nodes of one spec compile once.
  KernelCache cache;
  std::vector<uint64_t> bytes(graph.num_nodes(), 0);
  for (NodeId id = 0; id < graph.num_nodes(); ++id) {
    if (has_no_kernel(graph.node(id))) continue;
    LMS_ASSIGN_OR_RETURN(std::shared_ptr<Kernel> kernel, cache.kernel(graph, id, device));
    bytes[id] = kernel->workspace_bytes();
  }
  return bytes;
}

}  // namespace lms
