// Shared machinery of the non-spatial CPU kernels (element-wise, normalisation,
// losses, optimizer updates): one Kernel class that runs a fixed sequence of
// steps, each either a oneDNN primitive or a plain loop. Attribute and shape
// validation is op_schema/spec_checks.h, shared with the CUDA backend.
//
//   auto k = std::make_unique<StepKernel>(spec, ctx);
//   uint64_t mean = k->layout().add_floats(c);           // temp device buffer
//   k->add_primitive(pd, dnnl::batch_normalization_forward(pd),
//                    {{DNNL_ARG_SRC, in(0), md}, {DNNL_ARG_MEAN, ws(mean), stat_md}});
//   k->add_loop([=](const KernelArgs& a) { ...; return absl::OkStatus(); });
//
// Note [Pointwise workspace]: every temporary a kernel needs (oneDNN
// scratchpad in scratchpad_mode::user, batch-norm statistics, tiled
// parameters) lives in KernelArgs::workspace, so the device allocator sees
// every byte. The layout is: temp buffers in the order added (each aligned to
// kWorkspaceAlign), then one scratchpad region of the largest scratchpad of
// any step (steps run one after another, so they share it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backend/cpu/kernels/cpu_kernels.h"
#include "backend/kernel.h"
#include "dnnl.hpp"
#include "op_schema/op_dims.h"
#include "op_schema/spec_checks.h"

namespace lms::cpu::pointwise {

inline constexpr uint64_t kWorkspaceAlign = 64;  // bytes, a cache line / AVX-512 vector

// ---- oneDNN helpers --------------------------------------------------------

// Dense row-major (NCHW / NCDHW) f32 descriptor of `dims`.
dnnl::memory::desc plain_desc(const Shape& dims);
// One-dimensional f32 descriptor of n elements (element-wise ops see any
// shape as flat).
dnnl::memory::desc flat_desc(int64_t n);
// Attributes every primitive is created with: scratchpad_mode::user.
dnnl::primitive_attr user_scratchpad_attr();
// A matmul's attributes: scratchpad_mode::user, and when `accumulate` a sum
// post-op (dst += src · weights).
dnnl::primitive_attr matmul_attr(bool accumulate);

// Every label of a cross-entropy in [0, C) or equal to ignore_index, else
// the error naming the first that is not (bad_class_label); returns the
// number of rows that count (M). Shared by softmax_cross_entropy and
// linear_cross_entropy.
absl::StatusOr<int64_t> count_labelled_rows(const KernelSpec& spec, const int64_t* labels,
                                            const CrossEntropyDims& d);

// ---- StepKernel ------------------------------------------------------------

// Where a primitive argument's memory lives at run time.
struct Slot {
  enum Kind : uint8_t { kInput, kOutput, kWorkspace };
  Kind kind;
  uint64_t index;  // input / output index, or byte offset into the workspace
};
inline Slot in(uint64_t i) { return {Slot::kInput, i}; }
inline Slot out(uint64_t i) { return {Slot::kOutput, i}; }
inline Slot ws(uint64_t offset_bytes) { return {Slot::kWorkspace, offset_bytes}; }

struct Binding {
  int arg;  // DNNL_ARG_*
  Slot slot;
  dnnl::memory::desc md;
};

// Byte layout of the workspace (Note [Pointwise workspace]).
class WorkspaceLayout {
 public:
  // Reserves n floats; returns their byte offset.
  uint64_t add_floats(int64_t n);
  void need_scratchpad(uint64_t bytes);
  uint64_t scratchpad_offset() const;
  uint64_t total_bytes() const;

 private:
  uint64_t buffers_end_ = 0;
  uint64_t scratchpad_bytes_ = 0;
};

// Pointer into the workspace at a byte offset of the layout.
inline float* ws_floats(const KernelArgs& args, uint64_t offset_bytes) {
  return reinterpret_cast<float*>(static_cast<char*>(args.workspace) + offset_bytes);
}

// A kernel made of steps run in order on the calling thread.
class StepKernel final : public Kernel {
 public:
  using Loop = std::function<absl::Status(const KernelArgs&)>;

  StepKernel(const KernelSpec& spec, const CpuKernelContext& ctx);

  WorkspaceLayout& layout() { return layout_; }
  // Adds a oneDNN primitive whose scratchpad (if any) is bound automatically.
  void add_primitive(const dnnl::primitive_desc_base& pd, dnnl::primitive prim,
                     const std::vector<Binding>& bindings);
  // Adds a plain loop. It must be deterministic and must not throw; a non-OK
  // status (a bad value found at run time) stops the kernel.
  void add_loop(Loop loop);

  uint64_t workspace_bytes() const override { return layout_.total_bytes(); }
  absl::Status run(const KernelArgs& args) override;

 private:
  struct BoundMemory {
    int arg;
    Slot slot;
    dnnl::memory mem;
  };
  struct Step {
    dnnl::primitive prim;  // empty for a loop step
    std::vector<BoundMemory> memories;
    Loop loop;
  };

  absl::Status check_args(const KernelArgs& args) const;
  absl::Status run_primitive(Step& step, const KernelArgs& args);

  std::string name_;
  std::string op_;  // op_name of the node's op, for messages
  size_t n_inputs_;
  size_t n_outputs_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  WorkspaceLayout layout_;
  std::vector<Step> steps_;
};

// ---- Families (each returns a null kernel for an op that is not its own) ----

// relu, leaky_relu, sigmoid, softmax (+ _bwd), add, mul, scale, concat, slice, fill.
absl::StatusOr<std::unique_ptr<Kernel>> create_elementwise_kernel(const KernelSpec& spec,
                                                                  const CpuKernelContext& ctx);
// embedding (+ _bwd): int64 ids in input 0.
absl::StatusOr<std::unique_ptr<Kernel>> create_embedding_kernel(const KernelSpec& spec,
                                                                const CpuKernelContext& ctx);
// linear, linear_bwd_weights, matmul.
absl::StatusOr<std::unique_ptr<Kernel>> create_linear_kernel(const KernelSpec& spec,
                                                             const CpuKernelContext& ctx);
// instance_norm, batch_norm, layer_norm (+ _bwd), bn_stats_update.
absl::StatusOr<std::unique_ptr<Kernel>> create_norm_kernel(const KernelSpec& spec,
                                                           const CpuKernelContext& ctx);
// layer_norm (+ _bwd) (layer_norm_kernels.cc; create_norm_kernel forwards).
absl::StatusOr<std::unique_ptr<Kernel>> create_layer_norm_kernel(const KernelSpec& spec,
                                                                 const CpuKernelContext& ctx);
// attention (+ _bwd) (attention_kernels.cc; create_elementwise_kernel forwards).
absl::StatusOr<std::unique_ptr<Kernel>> create_attention_kernel(const KernelSpec& spec,
                                                                const CpuKernelContext& ctx);
// mse_loss, soft_dice_loss, softmax_cross_entropy, reduce_mean (+ _bwd).
absl::StatusOr<std::unique_ptr<Kernel>> create_loss_kernel(const KernelSpec& spec,
                                                           const CpuKernelContext& ctx);
// softmax_cross_entropy (+ _bwd): int64 labels in input 1.
absl::StatusOr<std::unique_ptr<Kernel>> create_cross_entropy_kernel(const KernelSpec& spec,
                                                                    const CpuKernelContext& ctx);
// linear_cross_entropy (+ _bwd): int64 labels in input 2
// (linear_xent_kernels.cc; create_loss_kernel forwards).
absl::StatusOr<std::unique_ptr<Kernel>> create_linear_xent_kernel(const KernelSpec& spec,
                                                                  const CpuKernelContext& ctx);
// global_norm, increment, sgd_update, adam_update.
absl::StatusOr<std::unique_ptr<Kernel>> create_optimizer_kernel(const KernelSpec& spec,
                                                                const CpuKernelContext& ctx);

}  // namespace lms::cpu::pointwise
