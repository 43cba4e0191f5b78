// Training graphs: forward + reverse-mode gradient + optimizer updates.
//
//   lms::Graph g;  // forward model ending in a scalar loss
//   ...
//   LMS_ASSIGN_OR_RETURN(lms::Graph train,
//                        lms::training_graph(g, loss, lms::Adam{.lr = 1e-4, .clip_norm = 1}));
//   // train holds "<p>/grad" for every parameter p, "<p>/adam_m", "<p>/adam_v",
//   // "optimizer/step" and one "update/<p>" node per parameter.
#pragma once

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
struct Adam {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  double clip_norm = 0;  // > 0: clip by the global norm of all gradients
};

using Optimizer = std::variant<Sgd, Adam>;

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
//    every other reader of p (control edges), and after the increment.
// Parameters the loss does not depend on get no gradient and no update.
// The result's loss() is `loss`.
// Errors (InvalidArgument): `forward` has a recorded error; `loss` is not a
// tensor of `forward`, not a scalar, not produced by a node, or depends on no
// parameter; a gradient must pass through an op without a gradient rule
// (names the node and op); invalid optimizer hyper-parameters (names the
// field and the allowed range).
absl::StatusOr<Graph> training_graph(const Graph& forward, TensorId loss, const Optimizer& opt);

}  // namespace lms
