// What lms::import_onnx refuses, and that each refusal says why: the
// models come from tests/onnx/make_error_fixtures.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "lms/device.h"
#include "lms/onnx.h"
#include "lms/session.h"
#include "reference.h"

namespace lms {
namespace {

using onnx_test::data_dir;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string errors_dir() { return data_dir() + "/errors/"; }

absl::Status import_status(const std::string& path, const OnnxImportOptions& o = {}) {
  return import_onnx(path, o).status();
}

// A copy of the U-Net fixture cut to `keep` bytes, in the test's temp dir.
std::string truncated_copy(size_t keep, const std::string& name) {
  std::ifstream in(data_dir() + "/unet_small.onnx", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string path = testing::TempDir() + name;
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(keep));
  return path;
}

TEST(ImportErrors, MissingFileIsNotFound) {
  absl::Status s = import_status(errors_dir() + "no_such.onnx");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("no_such.onnx' not found"));
}

TEST(ImportErrors, TruncatedAndCorruptFilesAreInvalid) {
  for (size_t keep : {size_t{10}, size_t{1000}, size_t{5001}}) {
    absl::Status s = import_status(truncated_copy(keep, "cut.onnx"));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << keep << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("truncated or corrupt")) << keep;
  }
  const std::string path = testing::TempDir() + "garbage.onnx";
  std::ofstream(path) << "this is not a protobuf \xff\xff\xff\xff";
  EXPECT_THAT(std::string(import_status(path).message()), HasSubstr("truncated or corrupt"));
}

TEST(ImportErrors, MissingExternalDataFileIsNamed) {
  absl::Status s = import_status(errors_dir() + "external_missing.onnx");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("initializer 'w'"), HasSubstr("missing_weights.bin' not found")));
}

TEST(ImportErrors, ExternalDataIsRead) {
  auto m = import_onnx(errors_dir() + "external_ok.onnx");
  ASSERT_TRUE(m.ok()) << m.status();
  const Tensor& w = m->graph.tensor(m->graph.find_tensor("w"));
  ASSERT_EQ(w.init.kind, Init::Kind::kValues);
  ASSERT_EQ(w.init.values->size(), 16u);
  EXPECT_EQ((*w.init.values)[5], 5.0f / 16);  // np.arange(16) / 16
  // No metadata: the default rule makes a Conv weight trainable.
  EXPECT_EQ(m->parameters, std::vector<std::string>{"w"});
}

// Gather of int64 ids from a constant [V,D] table is an embedding; the
// table (np.arange(15) / 10 as [5,3]) is trainable by the default rule.
TEST(ImportErrors, GatherFromATableIsAnEmbedding) {
  auto m = import_onnx(errors_dir() + "embedding.onnx");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->parameters, std::vector<std::string>{"table"});
  auto device = make_cpu_device({});
  ASSERT_TRUE(device.ok()) << device.status();
  SessionOptions o;
  o.fetches = m->outputs;
  auto s = Session::create(m->graph, **device, o);
  ASSERT_TRUE(s.ok()) << s.status();
  StepResult r;
  ASSERT_TRUE((*s)->run({}, {{"ids", {4, 0, 2, 2}}}, &r).ok());
  const std::vector<float> want = {1.2f, 1.3f, 1.4f, 0.0f, 0.1f, 0.2f,
                                   0.6f, 0.7f, 0.8f, 0.6f, 0.7f, 0.8f};
  ASSERT_EQ(r.fetched["y"].size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_FLOAT_EQ(r.fetched["y"][k], want[k]) << k;
}

TEST(ImportErrors, UnknownDomainAndOpset) {
  EXPECT_THAT(std::string(import_status(errors_dir() + "unknown_domain.onnx").message()),
              AllOf(HasSubstr("domain 'com.example'"), HasSubstr("opsets 13 to 17")));
  EXPECT_THAT(std::string(import_status(errors_dir() + "opset18.onnx").message()),
              HasSubstr("ONNX opset 18 not supported; supported: 13 to 17"));
}

TEST(ImportErrors, DefaultEvalExportIsRecognised) {
  absl::Status s = import_status(errors_dir() + "eval_export.onnx");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("(Conv)"), HasSubstr("default (eval) export"),
                    HasSubstr("TrainingMode.TRAINING"), HasSubstr("scripts/export_onnx.py")));
}

TEST(ImportErrors, UnsupportedOpsAndAttributesNameNodeOpAndWhatIsSupported) {
  struct Case {
    const char* file;
    std::vector<const char*> parts;
  };
  const Case cases[] = {
      {"linear.onnx", {"ONNX node '/Gemm' (Gemm)", "op not supported", "transB", "supported: Add"}},
      {"grouped_conv.onnx", {"ONNX node 'conv1' (Conv)", "attribute group=2", "supported: 1"}},
      {"asymmetric_pads.onnx", {"'conv1' (Conv)", "attribute pads=[0,0,1,1]", "symmetric"}},
      {"broadcast_add.onnx", {"'add1' (Add)", "broadcasting [2,3,4,4] with [1,3,1,1]"}},
      {"dropout.onnx", {"'drop1' (Dropout)", "op not supported", "Dropout (ratio 0"}},
      {"symbolic_batch.onnx", {"input 'x'", "symbolic dimension 'N'", "input_shapes"}},
  };
  for (const Case& c : cases) {
    absl::Status s = import_status(errors_dir() + c.file);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.file << ": " << s;
    for (const char* part : c.parts) {
      EXPECT_THAT(std::string(s.message()), HasSubstr(part)) << c.file;
    }
  }
}

TEST(ImportErrors, SymbolicBatchIsReadWithAGivenShape) {
  auto m = import_onnx(errors_dir() + "symbolic_batch.onnx", {.input_shapes = {{"x", {7, 3}}}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->graph.tensor(m->graph.find_tensor("y")).shape, (Shape{7, 3}));
}

TEST(ImportErrors, TrainableNameThatIsNoInitializer) {
  absl::Status s = import_status(data_dir() + "/unet_small.onnx",
                                 {.trainable = std::vector<std::string>{"enc1.0.wieght"}});
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("trainable parameter 'enc1.0.wieght' is not an initializer"));
}

}  // namespace
}  // namespace lms
