// textlm: trains a byte-level language model exported from PyTorch
// (scripts/gpt_model.py) on a text with LMS, prints the held-out loss in
// bits per character, and checks the run against the same steps without LMS
// (textlm_train.h).
//
//   /usr/bin/python3 scripts/gpt_model.py out/gpt_kjv.onnx --vocab 256 --context 128
//   build-release/examples/textlm/textlm --model out/gpt_kjv.onnx --data data/text/kjv.txt
//       --capacity 48MiB --batch 16 --context 128 --steps 200
#include <iostream>
#include <string>
#include <vector>

#include "flags.h"
#include "lms/strings.h"
#include "run_setup.h"
#include "textlm_train.h"

int main(int argc, char** argv) {
  lms::examples::TextLmOptions o;
  std::vector<std::string> args(argv, argv + argc);
  args.insert(args.begin() + 1, "train");
  bool no_compare = false;
  std::string losses_file;
  const std::vector<lms::examples::Flag> flags = {
      {"model", &o.model},
      {"input", &o.input},
      {"data", &o.data},
      {"held-out", &o.held_out_fraction},
      {"batch", &o.batch, 1, 1 << 20},
      {"context", &o.context, 1, 1 << 20},
      {"steps", &o.steps, 1, 10000000},
      {"lr", &o.lr},
      {"eval-every", &o.eval_every, 1},
      {"eval-windows", &o.eval_windows, 1, 1 << 20},
      {"capacity", lms::examples::Bytes{&o.capacity_bytes}},
      {"lms", &o.lms_file},
      {"lms-set", lms::examples::StringList{&o.lms_sets}},
      {"threads", &o.threads, 0, lms::examples::kMaxThreads},
      {"seed", &o.seed},
      {"log-every", &o.log_every, 1},
      {"no-compare", &no_compare},
      {"losses", &losses_file},
  };
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (absl::Status s = lms::examples::parse_flags("textlm", "train", flags, rest); !s.ok()) {
    std::cerr << lms::to_std(s.message()) << "\n";
    return 2;
  }
  o.compare_without_lms = !no_compare;
  if (o.model.empty()) {
    std::cerr << "textlm: --model FILE.onnx is required (/usr/bin/python3 scripts/gpt_model.py "
                 "out/gpt_kjv.onnx --vocab 256 --context 128)\n";
    return 2;
  }
  if (!(o.held_out_fraction > 0 && o.held_out_fraction < 1)) {
    std::cerr << "textlm: --held-out must be in (0, 1), the fraction of the text held out\n";
    return 2;
  }
  absl::StatusOr<lms::examples::TextLmResult> r = lms::examples::train_text_lm(o, std::cout);
  if (!r.ok()) {
    std::cerr << lms::to_std(r.status().message()) << "\n";
    return 1;
  }
  if (!losses_file.empty()) {
    if (absl::Status s = lms::examples::write_losses(losses_file, r->losses); !s.ok()) {
      std::cerr << "textlm: " << lms::to_std(s.message()) << "\n";
      return 1;
    }
  }
  return 0;
}
