// CudaDevice: creation without a device (runs everywhere), and with a device
// memory, OOM messages, copies, events between streams and error reporting.
#include "backend/cuda/cuda_device.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "lms/strings.h"
#include "lms/units.h"

namespace lms::cuda {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::unique_ptr<CudaDevice> make_device(uint64_t capacity = 64 * kMiB, uint64_t host = 16 * kMiB) {
  auto dev = CudaDevice::create({.capacity_bytes = capacity, .host_pool_bytes = host});
  EXPECT_TRUE(dev.ok()) << dev.status();
  return dev.ok() ? std::move(*dev) : nullptr;
}

void guarded_by_the_skip_rule() { LMS_SKIP_WITHOUT_CUDA(); }

// The skip rule: without a usable device a GPU test is skipped with the
// reason, unless LMS_REQUIRE_CUDA=1 makes it a failure naming the reason.
TEST(CudaSkipRule, RequireCudaTurnsASkipIntoAFailure) {
  const std::string reason = testing::no_device_reason();
  const char* old = std::getenv("LMS_REQUIRE_CUDA");
  const std::string saved = old != nullptr ? old : "";
  setenv("LMS_REQUIRE_CUDA", "1", 1);
  EXPECT_TRUE(testing::cuda_required());
  if (reason.empty()) {
    EXPECT_NO_FATAL_FAILURE(guarded_by_the_skip_rule());  // a device: nothing to skip
  } else {
    std::printf("reason: %s\n", reason.c_str());
    EXPECT_FATAL_FAILURE(guarded_by_the_skip_rule(), "LMS_REQUIRE_CUDA=1 but");
  }
  setenv("LMS_REQUIRE_CUDA", "0", 1);
  EXPECT_FALSE(testing::cuda_required());
  if (old != nullptr) {
    setenv("LMS_REQUIRE_CUDA", saved.c_str(), 1);
  } else {
    unsetenv("LMS_REQUIRE_CUDA");
  }
  EXPECT_EQ(testing::cuda_version_text(13000), "13.0");
  EXPECT_EQ(testing::cuda_version_text(12080), "12.8");
}

TEST(CudaDeviceCreate, ReturnsStatusNotCrashWhenNoDevice) {
  auto dev = CudaDevice::create({.capacity_bytes = 16 * kMiB, .host_pool_bytes = kMiB});
  const std::string reason = testing::no_device_reason();
  if (reason.empty()) {
    ASSERT_TRUE(dev.ok()) << dev.status();
    EXPECT_EQ((*dev)->name(), "cuda:0");
    return;
  }
  std::printf("%s\n", reason.c_str());
  ASSERT_FALSE(dev.ok());
  EXPECT_EQ(dev.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(to_std(dev.status().message()).find("no CUDA device"), std::string::npos)
      << dev.status();
}

TEST(CudaDeviceCreate, RejectsBadOrdinalAndZeroHostPool) {
  auto bad_ordinal = CudaDevice::create({.device_ordinal = 1000, .capacity_bytes = kMiB});
  EXPECT_FALSE(bad_ordinal.ok());
  auto zero_pool = CudaDevice::create({.capacity_bytes = kMiB, .host_pool_bytes = 0});
  EXPECT_FALSE(zero_pool.ok());
  LMS_SKIP_WITHOUT_CUDA();
  EXPECT_EQ(bad_ordinal.status().code(), absl::StatusCode::kInvalidArgument)
      << bad_ordinal.status();
  EXPECT_EQ(zero_pool.status().code(), absl::StatusCode::kInvalidArgument) << zero_pool.status();
}

TEST(CudaDevice, AllocateAndFreeAccountBytes) {
  LMS_SKIP_WITHOUT_CUDA();
  auto dev = make_device();
  ASSERT_NE(dev, nullptr);
  auto a = dev->allocate(1000);
  auto b = dev->allocate(3 * kMiB);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(dev->memory_stats().bytes_in_use, 1024 + 3 * kMiB);
  EXPECT_EQ(dev->memory_stats().capacity_bytes, 64 * kMiB);
  dev->deallocate(*a);
  dev->deallocate(*b);
  EXPECT_EQ(dev->memory_stats().bytes_in_use, 0u);
  EXPECT_EQ(dev->memory_stats().peak_bytes_in_use, 1024 + 3 * kMiB);
}

TEST(CudaDevice, OutOfMemoryNamesRequestAndCapacity) {
  LMS_SKIP_WITHOUT_CUDA();
  auto dev = make_device(8 * kMiB);
  ASSERT_NE(dev, nullptr);
  auto big = dev->allocate(9 * kMiB);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(to_std(big.status().message()));
  EXPECT_NE(msg.find("tried to allocate " + format_bytes(9 * kMiB)), std::string::npos) << msg;
  EXPECT_NE(msg.find("capacity " + format_bytes(8 * kMiB)), std::string::npos) << msg;
  auto host = dev->allocate_host(17 * kMiB);
  ASSERT_FALSE(host.ok());
  EXPECT_NE(to_std(host.status().message()).find("pinned host"), std::string::npos);
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(CudaDevice, UploadDownloadAndPinnedCopiesRoundTrip) {
  LMS_SKIP_WITHOUT_CUDA();
  auto dev = make_device();
  ASSERT_NE(dev, nullptr);
  const size_t n = 300000;
  const uint64_t bytes = n * sizeof(float);
  const std::vector<float> src = random_floats(n, 7);
  auto d1 = dev->allocate(bytes), d2 = dev->allocate(bytes);
  auto h = dev->allocate_host(bytes);
  ASSERT_TRUE(d1.ok() && d2.ok() && h.ok());
  ASSERT_TRUE(dev->upload(*d1, src.data(), bytes).ok());
  dev->copy_d2h(*h, *d1, bytes, "t");
  auto ev = dev->create_event();
  dev->record(*ev, StreamKind::kD2H);
  dev->wait(StreamKind::kH2D, *ev);  // H2D reads the host block only after D2H wrote it
  dev->copy_h2d(*d2, *h, bytes, "t");
  auto done = dev->create_event();
  dev->record(*done, StreamKind::kH2D);
  dev->wait(StreamKind::kCompute, *done);  // download runs on the compute stream
  std::vector<float> out(n, 0.0f);
  ASSERT_TRUE(dev->download(out.data(), *d2, bytes).ok());
  ASSERT_TRUE(dev->synchronize().ok());
  EXPECT_EQ(out, src);
}

TEST(CudaDevice, EventOrdersStreamsAndQueryCompletes) {
  LMS_SKIP_WITHOUT_CUDA();
  auto dev = make_device();
  ASSERT_NE(dev, nullptr);
  auto never = dev->create_event();
  EXPECT_TRUE(dev->query(*never));  // never recorded counts as complete
  const uint64_t bytes = 32 * kMiB;
  auto d = dev->allocate(bytes);
  auto h = dev->allocate_host(8 * kMiB);
  ASSERT_TRUE(d.ok() && h.ok());
  std::vector<float> ones(bytes / sizeof(float), 1.0f);
  ASSERT_TRUE(dev->upload(*d, ones.data(), bytes).ok());
  // Several large D2H copies, then an event; H2D writes the device buffer
  // only after waiting for it, so every D2H copy saw the ones.
  for (int i = 0; i < 4; ++i) dev->copy_d2h(*h, *d, 8 * kMiB, "ones");
  auto ev = dev->create_event();
  dev->record(*ev, StreamKind::kD2H);
  dev->wait(StreamKind::kH2D, *ev);
  std::vector<float> zeros(8 * kMiB / sizeof(float), 0.0f);
  auto zeros_host = dev->allocate_host(8 * kMiB);
  ASSERT_TRUE(zeros_host.ok());
  std::memcpy(*zeros_host, zeros.data(), 8 * kMiB);
  dev->copy_h2d(*d, *zeros_host, 8 * kMiB, "zeros");
  dev->synchronize(*ev);
  EXPECT_TRUE(dev->query(*ev));
  ASSERT_TRUE(dev->synchronize().ok());
  const float* host = static_cast<const float*>(*h);
  EXPECT_EQ(host[0], 1.0f);
  EXPECT_EQ(host[zeros.size() - 1], 1.0f);
}

TEST(CudaDevice, CopyOutsideRegionIsAsyncInvalidArgument) {
  LMS_SKIP_WITHOUT_CUDA();
  auto dev = make_device();
  ASSERT_NE(dev, nullptr);
  std::vector<float> host(16);
  dev->copy_h2d(host.data(), host.data(), 64, "bogus");
  absl::Status st = dev->synchronize();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(to_std(st.message()).find("bogus"), std::string::npos) << st;
  EXPECT_TRUE(dev->synchronize().ok());  // cleared
  EXPECT_FALSE(dev->upload(nullptr, host.data(), 64).ok());
}

// swap_out runs on a copy stream: no backend compiles a kernel for it.
TEST(CudaDevice, CompileOpWithoutKernelIsUnimplemented) {
  LMS_SKIP_WITHOUT_CUDA();
  auto dev = make_device();
  ASSERT_NE(dev, nullptr);
  KernelSpec spec;
  spec.name = "n";
  spec.op = OpKind::kSwapOut;
  auto k = dev->compile(spec);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(to_std(k.status().message()).find("kernel for op 'swap_out'"), std::string::npos);
}

// With capacity_bytes = 0 the region is sized after the context and the
// cuDNN handle exist: what stays free is the reserve, measured, and a
// convolution (cuDNN loading its kernels lazily) still runs within it.
TEST(CudaDevice, WholeGpuRegionLeavesTheReserveFreeAfterTheHandles) {
  LMS_SKIP_WITHOUT_CUDA();
  const uint64_t reserve = 256 * kMiB;
  auto dev =
      CudaDevice::create({.capacity_bytes = 0, .reserve_bytes = reserve, .host_pool_bytes = kMiB});
  ASSERT_TRUE(dev.ok()) << dev.status();
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  std::printf("handles took %llu bytes; region %llu; free after %llu of %llu\n",
              static_cast<unsigned long long>((*dev)->handle_bytes()),
              static_cast<unsigned long long>((*dev)->options().capacity_bytes),
              static_cast<unsigned long long>(free_bytes), static_cast<unsigned long long>(total));
  EXPECT_GT((*dev)->handle_bytes(), 0u);
  EXPECT_NEAR(static_cast<double>(free_bytes), static_cast<double>(reserve), 64.0 * kMiB);
  KernelSpec spec;
  spec.name = "conv";
  spec.op = OpKind::kConv;
  spec.input_shapes = {{2, 8, 16, 16, 16}, {8, 8, 3, 3, 3}};
  spec.output_shapes = {{2, 8, 16, 16, 16}};
  spec.attrs = {{"stride", std::vector<int64_t>{1, 1, 1}},
                {"pad", std::vector<int64_t>{1, 1, 1}},
                {"dilation", std::vector<int64_t>{1, 1, 1}}};
  auto k = (*dev)->compile(spec);
  ASSERT_TRUE(k.ok()) << k.status();
  auto x = (*dev)->allocate(2 * 8 * 4096 * 4);
  auto w = (*dev)->allocate(8 * 8 * 27 * 4);
  auto y = (*dev)->allocate(2 * 8 * 4096 * 4);
  auto ws = (*dev)->allocate(std::max<uint64_t>((*k)->workspace_bytes(), 1));
  ASSERT_TRUE(x.ok() && w.ok() && y.ok() && ws.ok());
  (*dev)->launch(**k,
                 {.inputs = {static_cast<float*>(*x), static_cast<float*>(*w)},
                  .outputs = {static_cast<float*>(*y)},
                  .workspace = *ws},
                 "conv", "conv");
  EXPECT_TRUE((*dev)->synchronize().ok());
}

// Records what the device reports; thread-safe (callbacks arrive on CUDA's
// callback thread).
class RecordingSink : public EventSink {
 public:
  explicit RecordingSink(bool live = false) : live_(live) {}
  bool wants_live_spans() const override { return live_; }
  void on_node(StreamKind s, std::string_view node, std::string_view, double a, double b) override {
    add(s, node, a, b);
  }
  void on_copy(StreamKind s, std::string_view t, uint64_t, double a, double b) override {
    add(s, t, a, b);
  }
  void on_memory(MemoryKind, uint64_t, double) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++memory_events_;
  }
  void on_stall(StreamKind, std::string_view, std::string_view, double, double) override {}
  void on_step(int64_t, double, double) override {}

  struct Span {
    StreamKind stream;
    std::string name;
    double start_s, end_s;
  };
  std::vector<Span> spans() {
    std::lock_guard<std::mutex> lock(mu_);
    return spans_;
  }
  int memory_events() {
    std::lock_guard<std::mutex> lock(mu_);
    return memory_events_;
  }

 private:
  void add(StreamKind s, std::string_view name, double a, double b) {
    std::lock_guard<std::mutex> lock(mu_);
    spans_.push_back({s, std::string(name), a, b});
  }
  const bool live_;
  std::mutex mu_;
  std::vector<Span> spans_;
  int memory_events_ = 0;
};

// Per Note [CUDA profiler events], spans timed by CUDA events arrive at
// synchronize(), live ones from host callbacks; either way they lie between
// the host's issue and the end of synchronize(), in stream order, without
// overlap on the one compute stream.
TEST(CudaDevice, TimedAndLiveSpansAreOrderedAndInsideTheStep) {
  LMS_SKIP_WITHOUT_CUDA();
  auto dev = make_device(256 * kMiB, kMiB);
  ASSERT_NE(dev, nullptr);
  const int64_t n = 32 * int64_t{1} << 20;  // 128 MiB of floats: ~0.1 ms a fill
  auto d = dev->allocate(n * 4);
  ASSERT_TRUE(d.ok());
  KernelSpec spec;
  spec.name = "fill";
  spec.op = OpKind::kFill;
  spec.attrs = {{"shape", std::vector<int64_t>{n}}, {"value", 1.0}};
  spec.output_shapes = {{n}};
  auto k = dev->compile(spec);
  ASSERT_TRUE(k.ok()) << k.status();
  for (bool live : {false, true}) {
    RecordingSink sink(live);
    dev->set_event_sink(&sink);
    const double issued_s = now_s();
    for (int i = 0; i < 8; ++i) {
      dev->launch(**k, {.inputs = {}, .outputs = {static_cast<float*>(*d)}},
                  "fill" + std::to_string(i), "fill");
    }
    if (!live) {
      EXPECT_TRUE(sink.spans().empty()) << "timed spans arrive at synchronize()";
    }
    ASSERT_TRUE(dev->synchronize().ok());
    const double synced_s = now_s();
    dev->set_event_sink(nullptr);
    const auto spans = sink.spans();
    ASSERT_EQ(spans.size(), 8u) << (live ? "live" : "timed");
    double busy = 0;
    for (size_t i = 0; i < spans.size(); ++i) {
      EXPECT_EQ(spans[i].name, "fill" + std::to_string(i));
      EXPECT_LT(spans[i].start_s, spans[i].end_s);
      EXPECT_GE(spans[i].start_s, issued_s - 1e-3);
      EXPECT_LE(spans[i].end_s, synced_s + 1e-3);
      if (i > 0) {
        EXPECT_GE(spans[i].start_s, spans[i - 1].end_s - 1e-5);
      }
      busy += spans[i].end_s - spans[i].start_s;
    }
    std::printf("%s spans: 8 fills of 128 MiB, busy %.3f ms of %.3f ms issue-to-sync\n",
                live ? "live" : "timed", busy * 1e3, (synced_s - issued_s) * 1e3);
  }
}

TEST(CudaDevice, SinkGetsCopiesKernelsAndMemoryWithOrderedStamps) {
  LMS_SKIP_WITHOUT_CUDA();
  auto dev = make_device();
  ASSERT_NE(dev, nullptr);
  RecordingSink sink;
  dev->set_event_sink(&sink);
  const uint64_t bytes = 4 * kMiB;
  auto d = dev->allocate(bytes);
  auto h = dev->allocate_host(bytes);
  ASSERT_TRUE(d.ok() && h.ok());
  KernelSpec spec;
  spec.name = "fill0";
  spec.op = OpKind::kFill;
  spec.attrs = {{"shape", std::vector<int64_t>{int64_t(bytes / 4)}}, {"value", 2.0}};
  spec.output_shapes = {{int64_t(bytes / 4)}};
  auto k = dev->compile(spec);
  ASSERT_TRUE(k.ok()) << k.status();
  dev->launch(**k, {.inputs = {}, .outputs = {static_cast<float*>(*d)}}, "fill0", "fill");
  auto ev = dev->create_event();
  dev->record(*ev, StreamKind::kCompute);
  dev->wait(StreamKind::kD2H, *ev);
  dev->copy_d2h(*h, *d, bytes, "filled");
  ASSERT_TRUE(dev->synchronize().ok());
  dev->set_event_sink(nullptr);
  EXPECT_EQ(static_cast<const float*>(*h)[bytes / 4 - 1], 2.0f);
  const auto spans = sink.spans();
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].name, "fill0");
  EXPECT_EQ(spans[0].stream, StreamKind::kCompute);
  EXPECT_EQ(spans[1].name, "filled");
  EXPECT_EQ(spans[1].stream, StreamKind::kD2H);
  for (const auto& s : spans) EXPECT_LE(s.start_s, s.end_s) << s.name;
  EXPECT_LE(spans[0].end_s, spans[1].end_s);  // the copy waited for the kernel
  EXPECT_EQ(sink.memory_events(), 2);         // one device and one host allocation
}

// Per Note [Event query], a query of a pending event (and a compute-stream wait
// on one with a sink set, which queries it) must not leave NotReady behind
// for the next kernel launch to report as its own failure.
TEST(CudaDevice, KernelAfterAPendingEventQuerySucceeds) {
  LMS_SKIP_WITHOUT_CUDA();
  auto dev = make_device(128 * kMiB, 64 * kMiB);
  ASSERT_NE(dev, nullptr);
  RecordingSink sink;
  dev->set_event_sink(&sink);
  const uint64_t bytes = 32 * kMiB;
  auto d = dev->allocate(bytes);
  auto h = dev->allocate_host(bytes);
  auto x = dev->allocate(4096);
  auto y = dev->allocate(4096);
  ASSERT_TRUE(d.ok() && h.ok() && x.ok() && y.ok());
  std::vector<float> values(1024);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) - 512.0f;
  ASSERT_TRUE(dev->upload(*x, values.data(), 4096).ok());
  KernelSpec spec;
  spec.name = "relu0";
  spec.op = OpKind::kRelu;
  spec.input_shapes = {{1024}};
  spec.output_shapes = {{1024}};
  auto k = dev->compile(spec);
  ASSERT_TRUE(k.ok()) << k.status();
  int pending = 0;
  for (int round = 0; round < 4; ++round) {
    // Copies long enough that the event is still pending when queried.
    for (int i = 0; i < 4; ++i) dev->copy_d2h(*h, *d, bytes, "big");
    auto ev = dev->create_event();
    dev->record(*ev, StreamKind::kD2H);
    pending += dev->query(*ev) ? 0 : 1;
    dev->wait(StreamKind::kCompute, *ev);  // queries the event again (sink set)
    dev->launch(**k, {.inputs = {static_cast<float*>(*x)}, .outputs = {static_cast<float*>(*y)}},
                "relu0", "relu");
    ASSERT_TRUE(dev->synchronize().ok()) << "round " << round;
  }
  dev->set_event_sink(nullptr);
  std::printf("events pending when queried: %d of 4\n", pending);
  std::vector<float> out(1024);
  ASSERT_TRUE(dev->download(out.data(), *y, 4096).ok());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], std::max(values[i], 0.0f)) << i;
}

}  // namespace
}  // namespace lms::cuda
