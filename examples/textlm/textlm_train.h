// The textlm example: a byte-level language model the user brings as an ONNX
// file (the GPT-2-style decoder of scripts/gpt_model.py: int64 ids [B,T] in,
// logits [B,T,256] out), imported (lms::import_onnx), given a next-byte
// cross-entropy over every position (lms::attach_loss with
// CrossEntropy::classes_last), trained with Adam under a device capacity it
// needs LMS for (lms::rewrite), and evaluated on held-out text in bits per
// character. The same steps run once more without LMS on a device large
// enough for them: every step's loss, every held-out loss and the trained
// weights must be the same bits.
//
//   TextLmOptions o{.model = "out/gpt_kjv.onnx", .capacity_bytes = 64 << 20};
//   LMS_ASSIGN_OR_RETURN(TextLmResult r, train_text_lm(o, std::cout));
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace lms::examples {

struct TextLmOptions {
  std::string data = "data/text/kjv.txt";  // text_data.h
  std::string model;                       // ONNX decoder: one int64 input [B,T], logits [B,T,256]
  std::string input = "ids";               // its input (scripts/gpt_model.py's name)
  double held_out_fraction = 0.1;          // the end of the text
  int64_t batch = 16;
  int64_t context = 128;  // tokens (bytes) per window; the model's position table must hold them
  int64_t steps = 200;
  double lr = 3e-3;  // Adam (beta1 0.9, beta2 0.999, eps 1e-8)
  int64_t eval_every = 100;
  int64_t eval_windows = 64;                     // held-out windows of `context` bytes
  uint64_t capacity_bytes = uint64_t{64} << 20;  // the device's memory
  std::string lms_file;                          // LMS config (TOML); defaults when empty
  std::vector<std::string> lms_sets;             // key=value overrides
  int threads = 0;                               // compute threads, 0 = all cores
  uint64_t seed = 1;                             // the order of the windows
  bool compare_without_lms = true;               // the second run, without LMS
  int64_t log_every = 25;                        // steps between loss lines
  std::string precision = "fp32";                // fp32, bf16 or fp16 (apply_precision)
};

struct TextLmResult {
  int64_t train_bytes = 0;
  int64_t held_out_bytes = 0;
  uint64_t no_lms_peak_bytes = 0;  // the training step's peak without LMS
  uint64_t lms_peak_bytes = 0;     // planned with LMS (= measured, checked)
  int64_t swapped = 0;
  int64_t recomputed = 0;
  std::vector<double> losses;  // every step's, nats per byte
  // (steps trained, held-out bits per character): before training, every
  // eval_every steps and after the last.
  std::vector<std::pair<int64_t, double>> held_out_bits;
  bool compared = false;       // the run without LMS was made
  bool bit_identical = false;  // its losses, held-out losses and weights equal the LMS run's
  double train_s = 0;          // the LMS run's steps
};

// Errors: those of read_text, lms::import_onnx, lms::attach_loss,
// lms::rewrite (ResourceExhausted when even LMS cannot fit the capacity) and
// the session; InvalidArgument when the model does not take one int64 input
// and give logits [B,T,256], or the held-out text is shorter than a window;
// FailedPrecondition when a step's measured peak is not the planned one.
absl::StatusOr<TextLmResult> train_text_lm(const TextLmOptions& options, std::ostream& log);

}  // namespace lms::examples
