// Where the digits tests find scikit-learn's digits: the copy
// scripts/fetch_data.sh makes, else the file of Debian's python3-sklearn;
// empty when neither exists (the tests skip).
#pragma once

#include <filesystem>
#include <string>

namespace lms::examples {

inline std::string digits_file() {
  for (const std::string& p :
       {std::string(LMS_SOURCE_DIR) + "/data/digits/digits.csv.gz",
        std::string("/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz")}) {
    if (std::filesystem::exists(p)) return p;
  }
  return "";
}

}  // namespace lms::examples
