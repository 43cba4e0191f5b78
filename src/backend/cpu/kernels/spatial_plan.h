// Shared machinery of the spatial kernels (conv, deconv, upsample, max_pool):
// a kernel is a fixed list of oneDNN primitives ("steps") whose arguments are
// bound to the node's inputs, outputs or slices of the kernel workspace.
//
//   PlanBuilder b(spec.name, ctx);
//   BufferRef src = b.bind_input(0, user_md, pd.src_desc());   // reorders if needed
//   BufferRef dst = b.bind_output(0, user_md, pd.dst_desc());  // reorders after
//   b.add_step(dnnl::convolution_forward(pd), {{DNNL_ARG_SRC, src, pd.src_desc()}, ...},
//              pd.scratchpad_desc());
//   return b.finish();  // a Kernel; workspace_bytes() covers every buffer
//
// Note [Spatial workspace]: all scratch memory comes from KernelArgs::workspace
// so that device-memory accounting is exact. Reorder buffers and intermediates
// are live during the whole run() and get disjoint slices; oneDNN scratchpads
// (dnnl::scratchpad_mode::user) are live only during their own step and share
// one slice sized by the largest of them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/cpu/kernels/cpu_kernels.h"
#include "backend/kernel.h"
#include "dnnl.hpp"

namespace lms::cpu {

// Where a primitive argument lives during run().
struct BufferRef {
  enum class Kind : uint8_t { kInput, kOutput, kWorkspace, kScratch };
  Kind kind = Kind::kWorkspace;
  uint64_t index = 0;  // input/output index, or byte offset into the workspace
};

struct StepArg {
  int arg;  // DNNL_ARG_*
  BufferRef buffer;
  dnnl::memory::desc desc;
};

// Primitive attributes with a user-provided scratchpad (see Note above).
dnnl::primitive_attr user_scratchpad_attr();

// Plain (NCHW / NCDHW, or OIHW-style for weights) descriptor of a shape.
dnnl::memory::desc plain_desc(const Shape& shape);
// Same dims with the oneDNN-chosen layout (format_tag::any).
dnnl::memory::desc any_desc(const Shape& shape);
// The device's blocked activation layout of an NCHW / NCDHW shape (kLayoutAttr
// in lms/types.h): nChw16c / nCdhw16c where oneDNN runs AVX-512 kernels, else
// nChw8c / nCdhw8c, the layouts oneDNN's convolutions pick on those ISAs.
dnnl::memory::desc blocked_desc(const Shape& shape);
// Channels per block of blocked_desc: 16 or 8.
int64_t blocked_channels();
// Whether oneDNN runs its AVX-512 kernels here (avx512_core or above in
// dnnl::get_effective_cpu_isa(), which DNNL_MAX_CPU_ISA can lower): only
// then does oneDNN 2.6 have Winograd convolutions.
bool onednn_avx512();

class PlanBuilder {
 public:
  PlanBuilder(std::string name, const CpuKernelContext& ctx);

  // Reserves a live-for-the-whole-run slice of the workspace.
  BufferRef reserve(uint64_t bytes);
  // Binds input `index` (stored as `user`) to a primitive expecting `want`;
  // adds a reorder step into a workspace slice when the layouts differ.
  BufferRef bind_input(int index, const dnnl::memory::desc& user, const dnnl::memory::desc& want);
  // Binds output `index`; when the layouts differ the primitive writes a
  // workspace slice and a reorder to the user buffer runs after the steps
  // added so far (call finish() to append the pending reorders).
  BufferRef bind_output(int index, const dnnl::memory::desc& user, const dnnl::memory::desc& want);
  void add_step(dnnl::primitive prim, std::vector<StepArg> args,
                const dnnl::memory::desc& scratchpad);
  // A step of our own code (no oneDNN primitive): run() calls `fn` with the
  // pointers `buffers` resolve to, in order.
  using CustomFn = std::function<absl::Status(const std::vector<void*>& buffers)>;
  void add_custom_step(CustomFn fn, std::vector<BufferRef> buffers);
  // Appends the pending output reorders and returns the kernel.
  std::unique_ptr<Kernel> finish();

 private:
  struct Step {
    dnnl::primitive prim;
    std::vector<StepArg> args;
    CustomFn custom;  // set for a custom step (prim and args unused)
    std::vector<BufferRef> custom_buffers;
  };
  void add_reorder(BufferRef from, const dnnl::memory::desc& from_md, BufferRef to,
                   const dnnl::memory::desc& to_md, std::vector<Step>* steps);

  std::string name_;
  CpuKernelContext ctx_;
  std::vector<Step> steps_;
  std::vector<Step> output_reorders_;
  uint64_t workspace_bytes_ = 0;
  uint64_t scratch_bytes_ = 0;

  friend class PlanKernel;
};

}  // namespace lms::cpu
