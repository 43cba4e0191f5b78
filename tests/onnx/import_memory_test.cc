// Host memory running out during an import (Note [Host memory at import]):
// lms::import_onnx returns ResourceExhausted naming the stage and the node,
// never lets std::bad_alloc escape. The model (make_error_fixtures.py,
// ones_like.onnx) is x + ones(x.shape), the ones folded from
// ConstantOfShape(Shape(x)) for the given shape: 24 bytes at [2, 3], 4 GiB
// at [32768, 32768], imported in a forked child whose address space may
// grow by 1 GiB only (capped_child.h). Sanitizer runtimes reserve terabytes
// of address space, so there the cap means nothing and the test skips.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "../common/capped_child.h"
#include "lms/onnx.h"
#include "reference.h"

namespace lms {
namespace {

using testing_support::ChildResult;
using testing_support::run_capped;

constexpr rlim_t kChildGrowthBytes = rlim_t{1} << 30;

std::string model_path() { return onnx_test::data_dir() + "/errors/ones_like.onnx"; }

TEST(ImportHostMemory, TheModelImportsAtASmallShape) {
  auto m = import_onnx(model_path(), {.input_shapes = {{"x", {2, 3}}}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->outputs.size(), 1u);
}

TEST(ImportHostMemory, RunningOutIsResourceExhaustedNamingTheNode) {
  if (!testing_support::kCapAddressSpace) {
    GTEST_SKIP() << "a sanitizer runtime reserves terabytes of address space: no cap applies";
  }
  const ChildResult r = run_capped(
      [] {
        auto m = import_onnx(model_path(), {.input_shapes = {{"x", {32768, 32768}}}});
        return m.ok() ? std::string("imported") : m.status().ToString();
      },
      kChildGrowthBytes, /*above_current=*/true);
  std::printf("child: %s\n", r.text.c_str());
  ASSERT_TRUE(r.exited) << "the child died instead of returning a status: " << r.text;
  EXPECT_EQ(r.text.rfind("RESOURCE_EXHAUSTED: ", 0), 0u) << r.text;
  EXPECT_NE(r.text.find("host memory ran out while visiting the nodes, at node 'ones' "
                        "(ConstantOfShape)"),
            std::string::npos)
      << r.text;
  EXPECT_NE(r.text.find("ones_like.onnx"), std::string::npos) << r.text;
}

}  // namespace
}  // namespace lms
