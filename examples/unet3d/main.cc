// unet3d: train, evaluate and apply Isensee et al.'s 3-D U-Net to MRI on the
// lms runtime. See `unet3d --help`.
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "unet3d_cli.h"
#include "unet3d_evaluate.h"
#include "unet3d_trainer.h"

namespace {

int fail(const absl::Status& s) {
  std::cerr << "unet3d: error: " << s.message() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace lms::unet3d;
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<Command> cmd = parse_command_line(args);
  if (!cmd.ok()) return fail(cmd.status());
  switch (cmd->kind) {
    case CommandKind::kHelp:
      std::cout << cmd->help;
      return 0;
    case CommandKind::kTrain: {
      cmd->train.live_progress = isatty(STDOUT_FILENO) != 0;
      absl::StatusOr<TrainResult> r = train(cmd->train, std::cout);
      return r.ok() ? 0 : fail(r.status());
    }
    case CommandKind::kEval: {
      absl::StatusOr<EvalResult> r = evaluate(cmd->eval, std::cout);
      return r.ok() ? 0 : fail(r.status());
    }
    case CommandKind::kPredict: {
      absl::StatusOr<PredictResult> r = predict(cmd->predict, std::cout);
      return r.ok() ? 0 : fail(r.status());
    }
  }
  return 1;
}
