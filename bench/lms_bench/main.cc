// lms-bench: see bench.h and bench/README.md.
#include <iostream>
#include <string>
#include <vector>

#include "bench.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return lms::bench::run_main(args, std::cout, std::cerr);
}
