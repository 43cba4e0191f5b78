// vdsr: train and evaluate VDSR x2 super-resolution on the lms runtime.
// See README.md in this folder and `vdsr --help`.
#include <iostream>
#include <string>
#include <vector>

#include "cli.h"
#include "evaluate.h"
#include "trainer.h"

namespace {

int fail(const absl::Status& s) {
  std::cerr << "vdsr: error: " << s.message() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace lms::vdsr;
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<Command> cmd = parse_command_line(args);
  if (!cmd.ok()) return fail(cmd.status());
  switch (cmd->kind) {
    case CommandKind::kHelp:
      std::cout << cmd->help;
      return 0;
    case CommandKind::kTrain: {
      absl::StatusOr<TrainResult> r = train(cmd->train, std::cout);
      return r.ok() ? 0 : fail(r.status());
    }
    case CommandKind::kEval: {
      absl::StatusOr<EvalResult> r = evaluate(cmd->eval, std::cout);
      return r.ok() ? 0 : fail(r.status());
    }
  }
  return 1;
}
