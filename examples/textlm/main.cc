// textlm: trains a byte-level language model exported from PyTorch
// (scripts/gpt_model.py) on a text with LMS, prints the held-out loss in
// bits per character, and checks the run against the same steps without LMS
// (textlm_train.h).
//
//   /usr/bin/python3 scripts/gpt_model.py out/gpt_kjv.onnx --vocab 256 --context 128
//   build-release/examples/textlm/textlm --model out/gpt_kjv.onnx --data data/text/kjv.txt
//       --capacity 48MiB --batch 16 --context 128 --steps 200
#include <iostream>
#include <optional>
#include <string>

#include "example_flags.h"
#include "flags.h"
#include "lms/strings.h"
#include "run_setup.h"
#include "textlm_train.h"

int main(int argc, char** argv) {
  namespace flags = lms::flags;
  lms::examples::TextLmOptions o;
  std::string losses_file;
  CLI::App app(
      "textlm: trains a byte-level language model exported from PyTorch on a text with LMS,\n"
      "prints the held-out loss in bits per character and checks the run against the same\n"
      "steps without LMS.",
      "textlm");
  app.footer("exit status: 0 on success, 1 when the run fails, 2 for bad flags.");
  flags::add_string(app, "--model FILE.onnx", &o.model,
                    "the decoder: one int64 input [B,T], logits [B,T,256]\n"
                    "(/usr/bin/python3 scripts/gpt_model.py out/gpt_kjv.onnx --vocab 256\n"
                    "--context 128)")
      ->required();
  flags::add_string(app, "--input NAME", &o.input, "the model's input");
  flags::add_string(app, "--data FILE", &o.data, "the text (scripts/fetch_data.sh)");
  flags::add_real(app, "--held-out", &o.held_out_fraction,
                  "the fraction of the text held out (its end)",
                  {.min = 0, .max = 1, .min_open = true, .max_open = true});
  flags::add_int(app, "--batch", &o.batch, "windows per step", {.min = 1, .max = 1 << 20});
  flags::add_int(app, "--context", &o.context, "bytes per window", {.min = 1, .max = 1 << 20});
  flags::add_int(app, "--steps", &o.steps, "training steps", {.min = 1, .max = 10000000});
  flags::add_real(app, "--lr", &o.lr, "Adam learning rate");
  flags::add_int(app, "--eval-every", &o.eval_every, "steps between held-out losses", {.min = 1});
  flags::add_int(app, "--eval-windows", &o.eval_windows, "held-out windows per evaluation",
                 {.min = 1, .max = 1 << 20});
  lms::examples::add_imported_model_flags(app, o, &losses_file, "the order of the windows");
  flags::add_switch(app, "--no-compare", &o.compare_without_lms, "skip the second run without LMS",
                    false);
  if (std::optional<int> exit = flags::parse_main(app, argc, argv, 2)) return *exit;
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
