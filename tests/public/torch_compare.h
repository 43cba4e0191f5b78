// The comparison every op test of tests/public makes with PyTorch's numbers
// (torch_reference.h): one training step of the op's small graph on the
// emulated device, its inputs set from the same tensors PyTorch was given,
// and each fetched tensor within a relative L2 error of PyTorch's.
//
//   std::optional<StepResult> r = torch_ref::one_step(*train, in,
//       {.written = {"x"}, .fed = {"target"}, .fetches = {"y", "loss", "x/grad"}});
//   ASSERT_TRUE(r.has_value());
//   torch_ref::expect_close_to_torch(*r, *ref, {"y", "loss", "x/grad"}, 1e-6);
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "lms/device.h"
#include "lms/graph.h"
#include "lms/session.h"
#include "torch_reference.h"

namespace lms::torch_ref {

struct StepSetup {
  std::vector<std::string> written;  // persistent tensors set from `in` (Session::write)
  std::vector<std::string> fed;      // float inputs fed from `in`
  std::vector<std::string> fetches;
  Int64Feeds int64_feeds;  // int64 inputs (class labels, token ids)
};

// One step of `train` on a fresh 64 MiB emulated device: every tensor of
// `in` that is a persistent tensor of the graph is written, every one that
// is an input is fed, the rest (PyTorch's outputs) are ignored.
inline std::optional<StepResult> one_step(const Graph& train, const TorchTensors& in,
                                          const std::vector<std::string>& fetches,
                                          const Int64Feeds& int64_feeds = {});

// One step of `train` on a fresh 64 MiB emulated device as `setup` says.
// Fails the calling test and returns nullopt on any error.
inline std::optional<StepResult> one_step(const Graph& train, const TorchTensors& in,
                                          const StepSetup& setup) {
  auto device = make_cpu_device({.capacity_bytes = 64 << 20, .host_pool_bytes = 1 << 20});
  if (!device.ok()) {
    ADD_FAILURE() << device.status();
    return std::nullopt;
  }
  auto session = Session::create(train, **device, {.fetches = setup.fetches});
  if (!session.ok()) {
    ADD_FAILURE() << session.status();
    return std::nullopt;
  }
  for (const std::string& name : setup.written) {
    if (absl::Status s = (*session)->write(name, in.at(name).values); !s.ok()) {
      ADD_FAILURE() << name << ": " << s;
      return std::nullopt;
    }
  }
  Feeds feeds;
  for (const std::string& name : setup.fed) feeds[name] = in.at(name).values;
  StepResult r;
  if (absl::Status s = (*session)->run(feeds, setup.int64_feeds, &r); !s.ok()) {
    ADD_FAILURE() << s;
    return std::nullopt;
  }
  return r;
}

inline std::optional<StepResult> one_step(const Graph& train, const TorchTensors& in,
                                          const std::vector<std::string>& fetches,
                                          const Int64Feeds& int64_feeds) {
  StepSetup setup{.fetches = fetches, .int64_feeds = int64_feeds};
  for (const auto& [name, tensor] : in) {
    const TensorId t = train.find_tensor(name);
    if (t == kNoTensor) continue;
    if (is_persistent(train.tensor(t).role)) setup.written.push_back(name);
    if (train.tensor(t).role == TensorRole::kInput) setup.fed.push_back(name);
  }
  return one_step(train, in, setup);
}

// Each of `names` fetched in `r` within `tolerance` relative L2 error of
// PyTorch's value in `ref`; the errors are printed.
inline void expect_close_to_torch(const StepResult& r, const TorchTensors& ref,
                                  const std::vector<std::string>& names, double tolerance) {
  for (const std::string& name : names) {
    const double err = relative_l2(r.fetched.at(name), ref.at(name).values);
    std::printf("  %-12s relative L2 error %.3g\n", name.c_str(), err);
    EXPECT_LE(err, tolerance) << name;
  }
}

}  // namespace lms::torch_ref
