// The digits example: a classifier the user brings as an ONNX file
// (torchvision's resnet18 adapted to 32x32 single-channel inputs and 10
// classes by scripts/export_torchvision.py resnet18-digits), imported
// (lms::import_onnx), given a cross-entropy loss (lms::attach_loss), trained
// with SGD under a device capacity it needs LMS for (lms::rewrite), then
// evaluated on held-out digits with its running batch-norm statistics
// (OnnxImportOptions::eval_mode, the trained weights copied by name).
//
//   DigitsOptions o{.model = "out/resnet18_digits.onnx", .capacity_bytes = 64 << 20};
//   LMS_ASSIGN_OR_RETURN(DigitsResult r, train_digits(o, std::cout));
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lms::examples {

struct DigitsOptions {
  std::string data = "data/digits/digits.csv.gz";  // digits_data.h
  std::string model;           // ONNX classifier: input "input" [B,1,side,side], logits [B,10]
  int64_t side = 32;           // the images are scaled up to side x side
  double test_fraction = 0.2;  // held out
  int64_t batch = 64;
  int64_t epochs = 3;
  int64_t max_steps = 0;  // > 0: stop after this many steps (tests)
  double lr = 0.05;       // SGD with momentum and weight decay, a constant rate
  double momentum = 0.9;
  double weight_decay = 5e-4;
  uint64_t capacity_bytes = uint64_t{64} << 20;  // the device's memory
  std::string lms_file;                          // LMS config (TOML); defaults when empty
  std::vector<std::string> lms_sets;             // key=value overrides
  int threads = 0;                               // compute threads, 0 = all cores
  uint64_t seed = 1;                             // the split and the order of the batches
  int64_t log_every = 10;                        // steps between loss lines
  std::string precision = "fp32";                // fp32, bf16 or fp16 (apply_precision)
};

struct DigitsResult {
  int64_t train_images = 0;
  int64_t test_images = 0;
  uint64_t no_lms_peak_bytes = 0;  // the training step's peak without LMS
  uint64_t lms_peak_bytes = 0;     // planned with LMS (= measured, checked)
  int64_t swapped = 0;
  int64_t recomputed = 0;
  std::vector<double> losses;  // every step's
  double test_accuracy = 0;    // fraction of the held-out images
  double train_s = 0;
};

// Errors: those of read_digits, lms::import_onnx, lms::attach_loss,
// lms::rewrite (ResourceExhausted when even LMS cannot fit the capacity) and
// the session; FailedPrecondition when a step's measured peak is not the
// planned one.
absl::StatusOr<DigitsResult> train_digits(const DigitsOptions& options, std::ostream& log);

}  // namespace lms::examples
