// digits: trains a PyTorch classifier exported to ONNX on scikit-learn's
// handwritten digits with LMS, then prints the held-out accuracy
// (digits_train.h).
//
//   scripts/export_torchvision.py resnet18-digits 1,1,32,32 out/resnet18_digits.onnx --classes 10
//   build-release/examples/digits/digits --model out/resnet18_digits.onnx
//       --data data/digits/digits.csv.gz --capacity 64MiB --batch 64 --epochs 3
//       [--losses FILE]   every step's loss, one per line
#include <iostream>
#include <optional>
#include <string>

#include "digits_train.h"
#include "example_flags.h"
#include "flags.h"
#include "lms/strings.h"
#include "run_setup.h"

int main(int argc, char** argv) {
  namespace flags = lms::flags;
  lms::examples::DigitsOptions o;
  std::string losses_file;
  CLI::App app(
      "digits: trains a PyTorch classifier exported to ONNX on scikit-learn's handwritten digits\n"
      "with LMS, then prints the held-out accuracy.",
      "digits");
  app.footer("exit status: 0 on success, 1 when the run fails, 2 for bad flags.");
  flags::add_string(app, "--model FILE.onnx", &o.model,
                    "the classifier: input \"input\" [B,1,side,side], logits [B,10]\n"
                    "(scripts/export_torchvision.py resnet18-digits 1,1,32,32\n"
                    "out/resnet18_digits.onnx --classes 10)")
      ->required();
  flags::add_string(app, "--data FILE.csv.gz", &o.data, "the digits (scripts/fetch_data.sh)");
  flags::add_int(app, "--side", &o.side, "images scaled up to N x N", {.min = 8, .max = 1024});
  flags::add_int(app, "--batch", &o.batch, "images per step", {.min = 1, .max = 1 << 20});
  flags::add_int(app, "--epochs", &o.epochs, "passes over the training images",
                 {.min = 1, .max = 100000});
  flags::add_int(app, "--max-steps", &o.max_steps, "stop after N steps, 0 = no limit");
  flags::add_real(app, "--lr", &o.lr, "SGD learning rate (constant)");
  flags::add_real(app, "--momentum", &o.momentum, "SGD momentum");
  flags::add_real(app, "--weight-decay", &o.weight_decay, "SGD weight decay");
  lms::examples::add_imported_model_flags(app, o, &losses_file,
                                          "the split and the order of the batches");
  if (std::optional<int> exit = flags::parse_main(app, argc, argv, 2)) return *exit;
  absl::StatusOr<lms::examples::DigitsResult> r = lms::examples::train_digits(o, std::cout);
  if (!r.ok()) {
    std::cerr << lms::to_std(r.status().message()) << "\n";
    return 1;
  }
  if (!losses_file.empty()) {
    if (absl::Status s = lms::examples::write_losses(losses_file, r->losses); !s.ok()) {
      std::cerr << "digits: " << lms::to_std(s.message()) << "\n";
      return 1;
    }
  }
  return 0;
}
