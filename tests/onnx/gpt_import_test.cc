// An imported GPT-2-style decoder (scripts/gpt_model.py, exported at test
// time by Debian's /usr/bin/python3 with dynamic batch and sequence axes, a
// 64-token vocabulary and a 16-position table): every causal attention
// becomes one attention op at any sequence length up to the table, so no
// [T,T] tensor is in the graph; and a user's bad inputs: a token id out of
// range, ids fed as floats, and a sequence longer than the position table
// are each an InvalidArgument naming the tensor; a failed step changes no
// persistent tensor, and the step after it equals a first step. Skips with
// the reason without torch.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "lms/device.h"
#include "lms/loss.h"
#include "lms/onnx.h"
#include "lms/session.h"
#include "lms/training.h"

namespace lms {
namespace {

constexpr int64_t kVocab = 64;
constexpr int64_t kContext = 16;
constexpr int64_t kBatch = 2;

// Exports the model into a fresh folder of its own (tests of this file run
// side by side, so a shared name would be removed under another test) and
// returns its path; empty when it cannot.
std::string export_gpt() {
  std::string dir = (std::filesystem::temp_directory_path() / "lms_gpt.XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) return "";
  const std::string model = dir + "/gpt.onnx";
  const std::string command =
      "/usr/bin/python3 " + std::string(LMS_SOURCE_DIR) + "/scripts/gpt_model.py " + model +
      " --layers 1 --width 32 --heads 2 --vocab " + std::to_string(kVocab) + " --context " +
      std::to_string(kContext) + " --seed 4 > /dev/null 2>&1";
  if (std::system(command.c_str()) == 0) return model;
  std::filesystem::remove_all(dir);
  return "";
}

absl::StatusOr<Graph> training_graph_at(const std::string& model, int64_t context) {
  auto m = import_onnx(model, {.input_shapes = {{"ids", {kBatch, context}}}});
  if (!m.ok()) return m.status();
  auto loss =
      attach_loss(m->graph, m->outputs.at(0), CrossEntropy{.labels = "next", .classes_last = true});
  if (!loss.ok()) return loss.status();
  return training_graph(m->graph, *loss, Adam{.lr = 1e-3});
}

std::vector<int64_t> tokens(int64_t salt) {
  std::vector<int64_t> v(static_cast<size_t>(kBatch * kContext));
  for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<int64_t>((k * 7 + salt) % kVocab);
  return v;
}

std::vector<std::vector<float>> state(const Session& s) {
  std::vector<std::vector<float>> out;
  for (const std::string& name : s.persistent_tensors()) out.push_back(*s.read(name));
  return out;
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k].size() != b[k].size() ||
        std::memcmp(a[k].data(), b[k].data(), a[k].size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

TEST(GptErrors, BadIdsAndDtypesFailTheStepNamingTheTensorAndChangeNothing) {
  const std::string model = export_gpt();
  if (model.empty()) GTEST_SKIP() << "/usr/bin/python3 with torch and onnx is needed";
  auto train = training_graph_at(model, kContext);
  ASSERT_TRUE(train.ok()) << train.status();
  auto device = make_cpu_device({.capacity_bytes = uint64_t{256} << 20});
  ASSERT_TRUE(device.ok()) << device.status();
  auto session = Session::create(*train, **device, {.fetches = {"loss"}});
  ASSERT_TRUE(session.ok()) << session.status();
  const auto before = state(**session);

  // An id past the vocabulary, at position 5 of the batch.
  std::vector<int64_t> bad = tokens(1);
  bad[5] = kVocab + 3;
  StepResult r;
  absl::Status s = (*session)->run({}, {{"ids", bad}, {"next", tokens(2)}}, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  const std::string message(s.message());
  std::printf("id out of range: %s\n", message.c_str());
  EXPECT_NE(message.find(std::to_string(kVocab + 3)), std::string::npos);
  EXPECT_NE(message.find("position 5"), std::string::npos);
  EXPECT_NE(message.find("[0, " + std::to_string(kVocab) + ")"), std::string::npos);
  EXPECT_TRUE(same_bits(state(**session), before));

  // A next token past the vocabulary: the loss names its label.
  std::vector<int64_t> bad_next = tokens(2);
  bad_next[9] = -7;
  s = (*session)->run({}, {{"ids", tokens(1)}, {"next", bad_next}}, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  std::printf("label out of range: %s\n", std::string(s.message()).c_str());
  EXPECT_NE(std::string(s.message()).find("-7"), std::string::npos);
  EXPECT_TRUE(same_bits(state(**session), before));

  // Ids fed as floats.
  const std::vector<float> as_floats(static_cast<size_t>(kBatch * kContext), 1.0f);
  s = (*session)->run({{"ids", as_floats}}, {{"next", tokens(2)}}, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  std::printf("ids as floats: %s\n", std::string(s.message()).c_str());
  EXPECT_NE(std::string(s.message()).find("ids"), std::string::npos);
  EXPECT_TRUE(same_bits(state(**session), before));

  // The session is still usable, and its next step is a first step: the
  // same loss and weights as a fresh session's.
  ASSERT_TRUE((*session)->run({}, {{"ids", tokens(1)}, {"next", tokens(2)}}, &r).ok());
  auto fresh = Session::create(*train, **device, {.fetches = {"loss"}});
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  StepResult f;
  ASSERT_TRUE((*fresh)->run({}, {{"ids", tokens(1)}, {"next", tokens(2)}}, &f).ok());
  EXPECT_EQ(std::memcmp(r.fetched.at("loss").data(), f.fetched.at("loss").data(), sizeof(float)),
            0);
  EXPECT_TRUE(same_bits(state(**session), state(**fresh)));
  std::filesystem::remove_all(std::filesystem::path(model).parent_path());
}

TEST(GptImport, EachCausalAttentionIsOneOpAtEverySequenceLength) {
  const std::string model = export_gpt();
  if (model.empty()) GTEST_SKIP() << "/usr/bin/python3 with torch and onnx is needed";
  for (int64_t t : {int64_t{1}, int64_t{5}, kContext}) {
    auto m = import_onnx(model, {.input_shapes = {{"ids", {kBatch, t}}}});
    ASSERT_TRUE(m.ok()) << m.status();
    int attention = 0, softmax = 0;
    for (int32_t k = 0; k < m->graph.num_nodes(); ++k) {
      attention += m->graph.node(k).op == OpKind::kAttention;
      softmax += m->graph.node(k).op == OpKind::kSoftmax;
      if (m->graph.node(k).op == OpKind::kAttention) {
        EXPECT_EQ(std::get<int64_t>(m->graph.node(k).attrs.at("causal")), 1);
      }
    }
    EXPECT_EQ(attention, 1) << "T = " << t;
    EXPECT_EQ(softmax, 0) << "T = " << t;
  }
  std::filesystem::remove_all(std::filesystem::path(model).parent_path());
}

TEST(GptErrors, ASequenceLongerThanThePositionTableIsRefusedAtImport) {
  const std::string model = export_gpt();
  if (model.empty()) GTEST_SKIP() << "/usr/bin/python3 with torch and onnx is needed";
  auto train = training_graph_at(model, 2 * kContext);
  ASSERT_FALSE(train.ok());
  EXPECT_EQ(train.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(train.status().message());
  std::printf("context %lld: %s\n", static_cast<long long>(2 * kContext), message.c_str());
  EXPECT_NE(message.find("'pos' [16,32] to 32 along axis 0, which has only 16"), std::string::npos);
  std::filesystem::remove_all(std::filesystem::path(model).parent_path());
}

}  // namespace
}  // namespace lms
