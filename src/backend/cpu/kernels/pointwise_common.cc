#include "backend/cpu/kernels/pointwise_common.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/align.h"
#include "lms/status.h"

namespace lms::cpu::pointwise {

dnnl::memory::desc plain_desc(const Shape& dims) {
  dnnl::memory::dims strides(dims.size());
  int64_t stride = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= dims[i];
  }
  return dnnl::memory::desc(dnnl::memory::dims(dims.begin(), dims.end()),
                            dnnl::memory::data_type::f32, strides);
}

dnnl::memory::desc flat_desc(int64_t n) {
  return dnnl::memory::desc({n}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::primitive_attr matmul_attr(bool accumulate) {
  dnnl::primitive_attr attr = user_scratchpad_attr();
  if (accumulate) {
    dnnl::post_ops sum;
    sum.append_sum(1.f);
    attr.set_post_ops(sum);
  }
  return attr;
}

absl::StatusOr<int64_t> count_labelled_rows(const KernelSpec& spec, const int64_t* labels,
                                            const CrossEntropyDims& d) {
  int64_t rows = 0;
  for (int64_t n = 0; n < d.n; ++n) {
    if (labels[n] == d.ignore_index) continue;
    if (labels[n] < 0 || labels[n] >= d.c) return bad_class_label(spec, n, labels[n], d);
    ++rows;
  }
  return rows;
}

uint64_t WorkspaceLayout::add_floats(int64_t n) {
  const uint64_t offset = buffers_end_;
  buffers_end_ = align_up(offset + static_cast<uint64_t>(n) * sizeof(float), kWorkspaceAlign);
  return offset;
}

void WorkspaceLayout::need_scratchpad(uint64_t bytes) {
  scratchpad_bytes_ = std::max(scratchpad_bytes_, align_up(bytes, kWorkspaceAlign));
}

uint64_t WorkspaceLayout::scratchpad_offset() const { return buffers_end_; }

uint64_t WorkspaceLayout::total_bytes() const { return buffers_end_ + scratchpad_bytes_; }

StepKernel::StepKernel(const KernelSpec& spec, const CpuKernelContext& ctx)
    : name_(spec.name),
      op_(op_name(spec.op)),
      n_inputs_(spec.input_shapes.size()),
      n_outputs_(spec.output_shapes.size()),
      engine_(ctx.engine),
      stream_(ctx.stream) {}

void StepKernel::add_primitive(const dnnl::primitive_desc_base& pd, dnnl::primitive prim,
                               const std::vector<Binding>& bindings) {
  Step step;
  step.prim = std::move(prim);
  for (const Binding& b : bindings) {
    step.memories.push_back({b.arg, b.slot, dnnl::memory(b.md, engine_, nullptr)});
  }
  const dnnl::memory::desc scratch_md = pd.scratchpad_desc();
  if (scratch_md.get_size() > 0) {
    layout_.need_scratchpad(scratch_md.get_size());
    step.memories.push_back(
        {DNNL_ARG_SCRATCHPAD, ws(0), dnnl::memory(scratch_md, engine_, nullptr)});
  }
  steps_.push_back(std::move(step));
}

void StepKernel::add_loop(Loop loop) {
  Step step;
  step.loop = std::move(loop);
  steps_.push_back(std::move(step));
}

absl::Status StepKernel::check_args(const KernelArgs& args) const {
  auto bad = [&](absl::string_view msg) {
    return absl::InvalidArgumentError(absl::StrCat("node '", name_, "' (op ", op_, "): ", msg));
  };
  if (args.inputs.size() != n_inputs_ || args.outputs.size() != n_outputs_) {
    return bad(absl::StrCat("run with ", args.inputs.size(), " inputs and ", args.outputs.size(),
                            " outputs; the kernel was built for ", n_inputs_, " and ", n_outputs_));
  }
  for (const float* p : args.inputs) {
    if (p == nullptr) return bad("an input pointer is null");
  }
  for (const float* p : args.outputs) {
    if (p == nullptr) return bad("an output pointer is null");
  }
  if (workspace_bytes() > 0 && args.workspace == nullptr) {
    return bad(absl::StrCat("needs a workspace of ", workspace_bytes(),
                            " bytes but KernelArgs::workspace is null"));
  }
  return absl::OkStatus();
}

absl::Status StepKernel::run_primitive(Step& step, const KernelArgs& args) {
  char* workspace = static_cast<char*>(args.workspace);
  try {
    std::unordered_map<int, dnnl::memory> arg_map;
    for (BoundMemory& m : step.memories) {
      void* ptr = nullptr;
      if (m.arg == DNNL_ARG_SCRATCHPAD) {
        ptr = workspace + layout_.scratchpad_offset();
      } else if (m.slot.kind == Slot::kInput) {
        ptr = args.inputs[m.slot.index];
      } else if (m.slot.kind == Slot::kOutput) {
        ptr = args.outputs[m.slot.index];
      } else {
        ptr = workspace + m.slot.index;
      }
      m.mem.set_data_handle(ptr);
      arg_map.emplace(m.arg, m.mem);
    }
    step.prim.execute(stream_, arg_map);
    stream_.wait();
  } catch (const dnnl::error& e) {
    return absl::InternalError(
        absl::StrCat("oneDNN failed to run node '", name_, "' (op ", op_, "): ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status StepKernel::run(const KernelArgs& args) {
  LMS_RETURN_IF_ERROR(check_args(args));
  for (Step& step : steps_) {
    if (step.loop) {
      LMS_RETURN_IF_ERROR(step.loop(args));
    } else {
      LMS_RETURN_IF_ERROR(run_primitive(step, args));
    }
  }
  return absl::OkStatus();
}

}  // namespace lms::cpu::pointwise
