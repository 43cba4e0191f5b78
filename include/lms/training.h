// Training graphs: forward + reverse-mode gradient + optimizer updates.
//
//   lms::Graph g;  // forward model ending in a scalar loss
//   ...
//   LMS_ASSIGN_OR_RETURN(lms::Graph train,
//                        lms::training_graph(g, loss, lms::Adam{.lr = 1e-4, .clip_norm = 1}));
//   // train holds "<p>/grad" for every parameter p, "<p>/adam_m", "<p>/adam_v",
//   // "optimizer/step" and one "update/<p>" node per parameter.
#pragma once

#include <cstdint>
#include <optional>
#include <variant>

#include "absl/status/statusor.h"
#include "lms/graph.h"

namespace lms {

// Stochastic gradient descent with momentum and L2 weight decay:
// g' = g + wd*p; v = momentum*v + g'; p -= lr*v.
struct Sgd {
  double lr = 0.01;
  double momentum = 0;
  double weight_decay = 0;
  double clip_norm = 0;  // > 0: clip by the global norm of all gradients
};

// Adam (Kingma & Ba, ICLR 2015) with L2 weight decay and bias correction.
//
// Learning-rate schedule: with decay_steps = T > 0, step t (1, 2, ...) uses
// lr * max(0, 1 - (t - 1) / T)^decay_power, the "poly" schedule of nnU-Net
// (Isensee et al., Nature Methods 2021; power 0.9): lr at step 1, falling to
// lr * (1/T)^decay_power at step T, and 0 from step T + 1 on (the moments
// still update). With decay_steps = 0 the rate stays lr. The schedule reads
// the step counter "optimizer/step", so a checkpoint carries it along.
struct Adam {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  double clip_norm = 0;      // > 0: clip by the global norm of all gradients
  int64_t decay_steps = 0;   // T of the poly schedule; 0 = constant lr
  double decay_power = 0.9;  // > 0; used only with decay_steps > 0
};

using Optimizer = std::variant<Sgd, Adam>;

// Data-parallel training (lms/distributed.h): the gradients are averaged over
// the ranks by all_reduce nodes, bucketed as PyTorch DDP buckets them (Li et
// al., "PyTorch Distributed", VLDB 2020):
//  - parameters in the order their gradients become final in the backward
//    schedule, packed into buckets of at most bucket_bytes (a larger
//    gradient is a bucket of its own);
//  - one node "all_reduce/<k>" per bucket, scheduled right after its last
//    gradient is final, so it runs on the communication stream while the
//    backward pass goes on; its output i (kGradient, named
//    "all_reduce/<k>:<i>" or "all_reduce/<k>" for one input) is the mean
//    over the ranks of its input i, and that is what the optimizer reads.
//    "<p>/grad" stays this rank's own gradient.
//  - the attribute release_after names the first node that reads a bucket's
//    output: the rank's own gradients stay in device memory until then, so
//    the compute stream never waits for the exchange before it must.
struct DataParallel {
  uint64_t bucket_bytes = uint64_t{25} << 20;  // DDP's default bucket_cap_mb = 25
};

// Dynamic loss scaling as PyTorch's GradScaler (torch.cuda.amp.GradScaler;
// Micikevicius et al., "Mixed Precision Training", ICLR 2018), for f16
// models whose small gradients would underflow. The defaults are
// GradScaler's.
//  - The persistent scalars "amp/scale" (init_scale) and
//    "amp/growth_tracker" (0) are optimizer state: checkpoints carry them.
//  - The backward pass is seeded with the scale instead of 1, so every
//    gradient is the loss's times the scale; "<p>/grad" holds that.
//  - "optimizer/global_norm" over all gradients decides the step: when it
//    is not finite (a gradient holds an inf or a NaN), the updates and
//    Adam's step increment change nothing, so parameters and optimizer
//    state keep their bits. Otherwise each update reads its gradient times
//    float(1 / double(scale)) (GradScaler's unscale_), and clipping (the
//    optimizers' clip_norm) takes the norm of those unscaled gradients.
//  - "amp/update_scale", after every update, multiplies the scale by
//    backoff_factor and zeroes the tracker on a skipped step, or adds one to
//    the tracker on a good one, and after growth_interval good steps in a
//    row multiplies the scale by growth_factor and zeroes the tracker
//    (GradScaler.update).
// Running statistics of batch norm are updated either way, as PyTorch
// updates them in the forward pass.
struct LossScaling {
  double init_scale = 65536.0;     // 2^16; > 0 and finite
  double growth_factor = 2.0;      // > 1
  double backoff_factor = 0.5;     // in (0, 1)
  int64_t growth_interval = 2000;  // >= 1
};

struct TrainingOptions {
  std::optional<DataParallel> data_parallel = std::nullopt;  // unset: single-process training
  // Unset: no loss scaling. A forward graph with f16 tensors needs it.
  std::optional<LossScaling> loss_scaling = std::nullopt;
};

// A copy of `forward` extended with the backward pass from `loss` and one
// optimizer step:
//  - reverse-mode autodiff seeded with fill(1) of shape [] ("grad/seed"),
//    visiting forward nodes in reverse schedule order; backward nodes are
//    named "grad/<forward node>/..." and produce kGradient tensors; several
//    gradient contributions to one tensor are summed with `add` nodes;
//  - for every parameter p that the loss depends on, the tensor "<p>/grad"
//    (p's shape) holds dloss/dp;
//  - optimizer state: "<p>/velocity" (Sgd) or "<p>/adam_m", "<p>/adam_v" and
//    the shared step counter "optimizer/step" advanced by the node
//    "optimizer/increment" (Adam), all zero-initialised;
//  - with clip_norm > 0, "optimizer/global_norm" over all "<p>/grad" feeds
//    every update's norm input;
//  - one node "update/<p>" (sgd_update / adam_update) per parameter, after
//    every other reader of p (control edges), and after the increment;
//  - one node "bn_stats/<b>" (bn_stats_update) per training-mode batch_norm
//    node b with running statistics (lms/ops.h BatchNormOptions), after
//    every update and every other reader of the statistics: the running
//    mean and variance change at the step commit, as PyTorch updates them.
// Parameters the loss does not depend on get no gradient and no update.
// The result's loss() is `loss`.
// Errors (InvalidArgument): `forward` has a recorded error; `loss` is not a
// tensor of `forward`, not a scalar, not produced by a node, or depends on no
// parameter; a gradient must pass through an op without a gradient rule
// (names the node and op; an eval-mode batch_norm is one); a training-mode
// batch_norm with running statistics over 1 element per channel; invalid
// optimizer hyper-parameters (names the field and the allowed range;
// decay_steps < 0, decay_power <= 0 or not finite).
// With options.data_parallel: the all_reduce nodes described at
// DataParallel; InvalidArgument also for bucket_bytes = 0.
// With options.loss_scaling: the nodes and state described at LossScaling;
// InvalidArgument for a field out of its range (naming it). A forward graph
// with an f16 tensor and no loss_scaling is InvalidArgument naming the
// tensor: its gradients would underflow (PyTorch pairs f16 autocast with
// GradScaler); bf16 keeps float32's exponent range and needs none.
absl::StatusOr<Graph> training_graph(const Graph& forward, TensorId loss, const Optimizer& opt,
                                     const TrainingOptions& options = {});

}  // namespace lms
