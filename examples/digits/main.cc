// digits: trains a PyTorch classifier exported to ONNX on scikit-learn's
// handwritten digits with LMS, then prints the held-out accuracy
// (digits_train.h).
//
//   scripts/export_torchvision.py resnet18-digits 1,1,32,32 out/resnet18_digits.onnx --classes 10
//   build-release/examples/digits/digits --model out/resnet18_digits.onnx
//       --data data/digits/digits.csv.gz --capacity 64MiB --batch 64 --epochs 3
//       [--losses FILE]   every step's loss, one per line
#include <iostream>
#include <string>
#include <vector>

#include "digits_train.h"
#include "flags.h"
#include "lms/strings.h"
#include "run_setup.h"

int main(int argc, char** argv) {
  lms::examples::DigitsOptions o;
  std::string losses_file;
  std::vector<std::string> args(argv, argv + argc);
  args.insert(args.begin() + 1, "train");
  const std::vector<lms::examples::Flag> flags = {
      {"model", &o.model},
      {"data", &o.data},
      {"side", &o.side, 8, 1024},
      {"batch", &o.batch, 1, 1 << 20},
      {"epochs", &o.epochs, 1, 100000},
      {"max-steps", &o.max_steps, 0},
      {"lr", &o.lr},
      {"momentum", &o.momentum},
      {"weight-decay", &o.weight_decay},
      {"capacity", lms::examples::Bytes{&o.capacity_bytes}},
      {"lms", &o.lms_file},
      {"lms-set", lms::examples::StringList{&o.lms_sets}},
      {"threads", &o.threads, 0, lms::examples::kMaxThreads},
      {"seed", &o.seed},
      {"log-every", &o.log_every, 1},
      {"losses", &losses_file},
  };
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (absl::Status s = lms::examples::parse_flags("digits", "train", flags, rest); !s.ok()) {
    std::cerr << lms::to_std(s.message()) << "\n";
    return 2;
  }
  if (o.model.empty()) {
    std::cerr << "digits: --model FILE.onnx is required (scripts/export_torchvision.py "
                 "resnet18-digits 1,1,32,32 out/resnet18_digits.onnx --classes 10)\n";
    return 2;
  }
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
