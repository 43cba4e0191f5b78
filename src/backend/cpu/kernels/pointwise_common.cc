#include "backend/cpu/kernels/pointwise_common.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/align.h"
#include "lms/status.h"

namespace lms::cpu::pointwise {
namespace {

std::string attr_value_str(const AttrValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return absl::StrCat(*i, " (int)");
  if (const auto* d = std::get_if<double>(&v)) return absl::StrCat(*d, " (real)");
  if (const auto* s = std::get_if<std::string>(&v)) return absl::StrCat("\"", *s, "\" (str)");
  return absl::StrCat("[", absl::StrJoin(std::get<std::vector<int64_t>>(v), ","), "] (ints)");
}

absl::StatusOr<const AttrValue*> find_attr(const KernelSpec& spec, absl::string_view key,
                                           absl::string_view type) {
  auto it = spec.attrs.find(key);
  if (it == spec.attrs.end()) {
    return invalid(spec, absl::StrCat("missing attribute '", key, "' (", type, ")"));
  }
  return &it->second;
}

absl::Status check_dims(const KernelSpec& spec, const Shape& shape, absl::string_view what) {
  for (int64_t d : shape) {
    if (d < 1) {
      return invalid(spec, absl::StrCat(what, " has shape ", shape_str(shape),
                                        "; every dimension must be >= 1"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status invalid(const KernelSpec& spec, absl::string_view msg) {
  return absl::InvalidArgumentError(
      absl::StrCat("node '", spec.name, "' (op ", spec.op, "): ", msg));
}

std::string shape_str(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

absl::StatusOr<double> real_attr(const KernelSpec& spec, absl::string_view key) {
  LMS_ASSIGN_OR_RETURN(const AttrValue* v, find_attr(spec, key, "real"));
  double value;
  if (const auto* d = std::get_if<double>(v)) {
    value = *d;
  } else if (const auto* i = std::get_if<int64_t>(v)) {
    value = static_cast<double>(*i);
  } else {
    return invalid(spec, absl::StrCat("attribute '", key, "' is ", attr_value_str(*v),
                                      "; a real is required"));
  }
  if (!std::isfinite(value)) {
    return invalid(spec, absl::StrCat("attribute '", key, "' is ", value, "; it must be finite"));
  }
  return value;
}

absl::StatusOr<double> real_attr_in(const KernelSpec& spec, absl::string_view key, double lo,
                                    bool lo_open, double hi, bool hi_open,
                                    absl::string_view allowed) {
  LMS_ASSIGN_OR_RETURN(double v, real_attr(spec, key));
  const bool lo_ok = lo_open ? v > lo : v >= lo;
  const bool hi_ok = hi_open ? v < hi : v <= hi;
  if (!lo_ok || !hi_ok) {
    return invalid(spec, absl::StrCat("attribute '", key, "' is ", v, "; allowed: ", allowed));
  }
  return v;
}

absl::StatusOr<int64_t> int_attr(const KernelSpec& spec, absl::string_view key) {
  LMS_ASSIGN_OR_RETURN(const AttrValue* v, find_attr(spec, key, "int"));
  if (const auto* i = std::get_if<int64_t>(v)) return *i;
  return invalid(
      spec, absl::StrCat("attribute '", key, "' is ", attr_value_str(*v), "; an int is required"));
}

absl::StatusOr<std::vector<int64_t>> ints_attr(const KernelSpec& spec, absl::string_view key) {
  LMS_ASSIGN_OR_RETURN(const AttrValue* v, find_attr(spec, key, "ints"));
  if (const auto* l = std::get_if<std::vector<int64_t>>(v)) return *l;
  return invalid(spec, absl::StrCat("attribute '", key, "' is ", attr_value_str(*v),
                                    "; an int list is required"));
}

absl::Status check_arity(const KernelSpec& spec, size_t min_in, size_t max_in, size_t n_out) {
  const size_t n_in = spec.input_shapes.size();
  if (n_in < min_in || n_in > max_in) {
    const std::string allowed =
        min_in == max_in ? absl::StrCat(min_in) : absl::StrCat(min_in, " to ", max_in);
    return invalid(spec, absl::StrCat("has ", n_in, " inputs; allowed: ", allowed));
  }
  if (spec.output_shapes.size() != n_out) {
    return invalid(spec,
                   absl::StrCat("has ", spec.output_shapes.size(), " outputs; allowed: ", n_out));
  }
  for (size_t i = 0; i < n_in; ++i) {
    LMS_RETURN_IF_ERROR(check_dims(spec, spec.input_shapes[i], absl::StrCat("input ", i)));
  }
  for (size_t i = 0; i < n_out; ++i) {
    LMS_RETURN_IF_ERROR(check_dims(spec, spec.output_shapes[i], absl::StrCat("output ", i)));
  }
  return absl::OkStatus();
}

absl::Status check_same_shape(const KernelSpec& spec, const Shape& got, const Shape& want,
                              absl::string_view what) {
  if (got == want) return absl::OkStatus();
  return invalid(spec,
                 absl::StrCat(what, " has shape ", shape_str(got), "; expected ", shape_str(want)));
}

absl::Status check_scalar(const KernelSpec& spec, const Shape& shape, absl::string_view what) {
  if (shape.size() <= 1 && num_elements(shape) == 1) return absl::OkStatus();
  return invalid(spec, absl::StrCat(what, " has shape ", shape_str(shape),
                                    "; a scalar ([] or [1]) is required"));
}

absl::Status check_rank(const KernelSpec& spec, const Shape& shape, size_t min_rank,
                        size_t max_rank, absl::string_view what) {
  if (shape.size() >= min_rank && shape.size() <= max_rank) return absl::OkStatus();
  return invalid(spec, absl::StrCat(what, " has shape ", shape_str(shape), " (rank ", shape.size(),
                                    "); allowed ranks: ", min_rank, " to ", max_rank));
}

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
      op_(spec.op),
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
