#include "backend/cpu/kernels/spatial_plan.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/align.h"

namespace lms::cpu {
namespace {

// Workspace slices start on cache-line boundaries (oneDNN's jit kernels are
// faster on aligned buffers; correctness does not depend on it).
constexpr uint64_t kSliceAlignBytes = 64;

dnnl::memory::format_tag plain_tag(size_t rank) {
  using tag = dnnl::memory::format_tag;
  switch (rank) {
    case 1:
      return tag::a;
    case 2:
      return tag::ab;
    case 3:
      return tag::abc;
    case 4:
      return tag::abcd;
    case 5:
      return tag::abcde;
    default:
      return tag::abcdef;
  }
}

}  // namespace

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::memory::desc plain_desc(const Shape& shape) {
  return dnnl::memory::desc(dnnl::memory::dims(shape.begin(), shape.end()),
                            dnnl::memory::data_type::f32, plain_tag(shape.size()));
}

dnnl::memory::desc any_desc(const Shape& shape) {
  return dnnl::memory::desc(dnnl::memory::dims(shape.begin(), shape.end()),
                            dnnl::memory::data_type::f32, dnnl::memory::format_tag::any);
}

bool onednn_avx512() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
  return (isa & avx512) == avx512;  // avx512_core and every ISA above it
}

int64_t blocked_channels() { return onednn_avx512() ? 16 : 8; }

dnnl::memory::desc blocked_desc(const Shape& shape) {
  using tag = dnnl::memory::format_tag;
  const bool wide = onednn_avx512();
  const bool rank4 = shape.size() == 4;
  const tag t =
      wide ? (rank4 ? tag::nChw16c : tag::nCdhw16c) : (rank4 ? tag::nChw8c : tag::nCdhw8c);
  return dnnl::memory::desc(dnnl::memory::dims(shape.begin(), shape.end()),
                            dnnl::memory::data_type::f32, t);
}

// Executes the steps of a PlanBuilder. The dnnl::memory objects are created
// once; run() only points them at this invocation's buffers.
class PlanKernel final : public Kernel {
 public:
  explicit PlanKernel(PlanBuilder&& b) : name_(std::move(b.name_)), ctx_(b.ctx_) {
    scratch_offset_ = align_up(b.workspace_bytes_, kSliceAlignBytes);
    total_bytes_ = b.scratch_bytes_ > 0 ? scratch_offset_ + b.scratch_bytes_ : b.workspace_bytes_;
    for (auto& s : b.steps_) {
      Step step{std::move(s.prim), {}, {}, std::move(s.custom), std::move(s.custom_buffers), {}};
      step.custom_ptrs.resize(step.custom_buffers.size());
      for (const StepArg& a : s.args) {
        dnnl::memory mem(a.desc, ctx_.engine, nullptr);
        step.args.emplace(a.arg, mem);
        step.bound.push_back({mem, a.buffer});
      }
      steps_.push_back(std::move(step));
    }
  }

  uint64_t workspace_bytes() const override { return total_bytes_; }

  absl::Status run(const KernelArgs& args) override {
    if (total_bytes_ > 0 && args.workspace == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("node '", name_, "' needs ", total_bytes_,
                                                     " bytes of workspace but got none"));
    }
    try {
      for (Step& step : steps_) {
        if (step.custom) {
          for (size_t i = 0; i < step.custom_buffers.size(); ++i) {
            step.custom_ptrs[i] = resolve(args, step.custom_buffers[i]);
            if (step.custom_ptrs[i] == nullptr) return missing_buffer(step.custom_buffers[i]);
          }
          absl::Status status = step.custom(step.custom_ptrs);
          if (!status.ok()) {
            return absl::InternalError(absl::StrCat("node '", name_, "': ", status.message()));
          }
          continue;
        }
        for (auto& [mem, ref] : step.bound) {
          void* ptr = resolve(args, ref);
          if (ptr == nullptr) return missing_buffer(ref);
          mem.set_data_handle(ptr);
        }
        step.prim.execute(ctx_.stream, step.args);
      }
      ctx_.stream.wait();
    } catch (const dnnl::error& e) {
      return absl::InternalError(
          absl::StrCat("oneDNN failed while running node '", name_, "': ", e.what()));
    }
    return absl::OkStatus();
  }

 private:
  struct Step {
    dnnl::primitive prim;
    std::unordered_map<int, dnnl::memory> args;
    std::vector<std::pair<dnnl::memory, BufferRef>> bound;
    PlanBuilder::CustomFn custom;
    std::vector<BufferRef> custom_buffers;
    std::vector<void*> custom_ptrs;  // what custom_buffers resolve to in this run
  };

  void* resolve(const KernelArgs& args, const BufferRef& ref) const {
    auto* ws = static_cast<char*>(args.workspace);
    switch (ref.kind) {
      case BufferRef::Kind::kInput:
        return ref.index < args.inputs.size() ? args.inputs[ref.index] : nullptr;
      case BufferRef::Kind::kOutput:
        return ref.index < args.outputs.size() ? args.outputs[ref.index] : nullptr;
      case BufferRef::Kind::kWorkspace:
        return ws + ref.index;
      case BufferRef::Kind::kScratch:
        return ws + scratch_offset_;
    }
    return nullptr;
  }

  absl::Status missing_buffer(const BufferRef& ref) const {
    const char* what = ref.kind == BufferRef::Kind::kInput ? "input" : "output";
    return absl::InvalidArgumentError(absl::StrCat("node '", name_, "': ", what, " ", ref.index,
                                                   " is missing or null in KernelArgs"));
  }

  std::string name_;
  CpuKernelContext ctx_;
  std::vector<Step> steps_;
  uint64_t scratch_offset_ = 0;
  uint64_t total_bytes_ = 0;
};

PlanBuilder::PlanBuilder(std::string name, const CpuKernelContext& ctx)
    : name_(std::move(name)), ctx_(ctx) {}

BufferRef PlanBuilder::reserve(uint64_t bytes) {
  BufferRef ref{BufferRef::Kind::kWorkspace, align_up(workspace_bytes_, kSliceAlignBytes)};
  workspace_bytes_ = ref.index + bytes;
  return ref;
}

BufferRef PlanBuilder::bind_input(int index, const dnnl::memory::desc& user,
                                  const dnnl::memory::desc& want) {
  BufferRef user_ref{BufferRef::Kind::kInput, static_cast<uint64_t>(index)};
  if (user == want) return user_ref;
  BufferRef internal = reserve(want.get_size());
  add_reorder(user_ref, user, internal, want, &steps_);
  return internal;
}

BufferRef PlanBuilder::bind_output(int index, const dnnl::memory::desc& user,
                                   const dnnl::memory::desc& want) {
  BufferRef user_ref{BufferRef::Kind::kOutput, static_cast<uint64_t>(index)};
  if (user == want) return user_ref;
  BufferRef internal = reserve(want.get_size());
  add_reorder(internal, want, user_ref, user, &output_reorders_);
  return internal;
}

void PlanBuilder::add_step(dnnl::primitive prim, std::vector<StepArg> args,
                           const dnnl::memory::desc& scratchpad) {
  uint64_t scratch = scratchpad.get_size();
  if (scratch > 0) {
    args.push_back({DNNL_ARG_SCRATCHPAD, {BufferRef::Kind::kScratch, 0}, scratchpad});
    scratch_bytes_ = std::max(scratch_bytes_, scratch);
  }
  steps_.push_back({std::move(prim), std::move(args)});
}

void PlanBuilder::add_custom_step(CustomFn fn, std::vector<BufferRef> buffers) {
  Step step;
  step.custom = std::move(fn);
  step.custom_buffers = std::move(buffers);
  steps_.push_back(std::move(step));
}

void PlanBuilder::add_reorder(BufferRef from, const dnnl::memory::desc& from_md, BufferRef to,
                              const dnnl::memory::desc& to_md, std::vector<Step>* steps) {
  dnnl::reorder::primitive_desc pd(ctx_.engine, from_md, ctx_.engine, to_md,
                                   user_scratchpad_attr());
  std::vector<StepArg> args = {{DNNL_ARG_FROM, from, from_md}, {DNNL_ARG_TO, to, to_md}};
  uint64_t scratch = pd.scratchpad_desc().get_size();
  if (scratch > 0) {
    args.push_back({DNNL_ARG_SCRATCHPAD, {BufferRef::Kind::kScratch, 0}, pd.scratchpad_desc()});
    scratch_bytes_ = std::max(scratch_bytes_, scratch);
  }
  steps->push_back({dnnl::reorder(pd), std::move(args)});
}

std::unique_ptr<Kernel> PlanBuilder::finish() {
  for (Step& s : output_reorders_) steps_.push_back(std::move(s));
  output_reorders_.clear();
  return std::make_unique<PlanKernel>(std::move(*this));
}

}  // namespace lms::cpu
