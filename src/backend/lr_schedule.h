// The learning rate of adam_update's optional poly schedule (docs/ops.md),
// shared by the CPU and CUDA kernels so that both compute it the same way.
#pragma once

#include <cmath>

#ifndef LMS_HOST_DEVICE
#ifdef __CUDACC__
#define LMS_HOST_DEVICE __host__ __device__
#else
#define LMS_HOST_DEVICE
#endif
#endif

namespace lms {

// lr * max(0, 1 - (t - 1) / decay_steps)^decay_power at step t >= 1
// (nnU-Net's "poly" schedule); lr itself when decay_steps <= 0.
LMS_HOST_DEVICE inline double poly_lr(double lr, double t, double decay_steps, double decay_power) {
  if (!(decay_steps > 0)) return lr;
  const double left = 1.0 - (t - 1.0) / decay_steps;
  return left <= 0 ? 0.0 : lr * pow(left, decay_power);
}

}  // namespace lms
