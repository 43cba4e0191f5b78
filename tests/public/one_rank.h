// A Communicator of one rank for tests written as a user's program: the
// all-reduce is out = scale * in, run as a host task on the communication
// stream like the MPI engine's; all_gather returns this rank's text. It
// counts its reductions and gathers.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lms/device.h"
#include "lms/distributed.h"

namespace lms::user {

class OneRank : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string engine() const override { return "one-rank test double"; }
  absl::Status all_reduce_sum(std::span<double>) override { return absl::OkStatus(); }
  absl::StatusOr<std::vector<std::string>> all_gather(std::string_view mine) override {
    ++gathers;
    return std::vector<std::string>{std::string(mine)};
  }
  absl::Status barrier() override { return absl::OkStatus(); }
  absl::Status enqueue_all_reduce(Device& device, std::span<const float* const> in,
                                  std::span<float* const> out, std::span<const int64_t> counts,
                                  float scale, std::string_view name) override {
    ++reductions;
    std::vector<const float*> i(in.begin(), in.end());
    std::vector<float*> o(out.begin(), out.end());
    std::vector<int64_t> c(counts.begin(), counts.end());
    return device.enqueue_host_task(
        StreamKind::kComm,
        [i, o, c, scale] {
          for (size_t k = 0; k < i.size(); ++k) {
            for (int64_t e = 0; e < c[k]; ++e) o[k][e] = scale * i[k][e];
          }
          return absl::OkStatus();
        },
        name);
  }
  [[noreturn]] void abort(const absl::Status& why) override {
    std::fprintf(stderr, "abort: %s\n", std::string(why.message()).c_str());
    std::abort();
  }
  int reductions = 0;
  int gathers = 0;
};

}  // namespace lms::user
