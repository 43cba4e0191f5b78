#include "subjects.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "brain_task.h"
#include "lms/status.h"

namespace lms::unet3d {
namespace {

namespace fs = std::filesystem;

bool is_nifti_name(const std::string& name) {
  return absl::EndsWith(name, ".nii") || absl::EndsWith(name, ".nii.gz");
}

absl::StatusOr<DataSet> load_brain_split(const std::string& dir, Split split, int classes) {
  if (classes != 0 && classes != kBrainClasses) {
    return absl::InvalidArgumentError(absl::StrCat("--classes ", classes, ": the brain task of ",
                                                   dir, " has ", kBrainClasses, " classes"));
  }
  DataSet d;
  d.classes = kBrainClasses;
  d.swap_left_right = true;
  for (std::string_view n : brain_class_names()) d.class_names.emplace_back(n);
  const std::vector<std::string> files =
      split == Split::kTrain ? std::vector<std::string>{"ch2bet.nii.gz", "ch2.nii.gz"}
                             : std::vector<std::string>{"ch2better.nii.gz"};
  for (const std::string& f : files) {
    LMS_ASSIGN_OR_RETURN(BrainPair p, load_brain(dir, f));
    d.subjects.push_back({f, std::move(p)});
  }
  d.description = split == Split::kTrain
                      ? absl::StrCat(dir, ": ch2bet + ch2 (1 mm), AAL atlas in 13 classes")
                      : absl::StrCat(dir,
                                     ": ch2better (0.5 mm, resampled to the atlas grid; another "
                                     "scan of the training subject), AAL atlas in 13 classes");
  return d;
}

absl::StatusOr<DataSet> load_folder_split(const std::string& dir, Split split, int classes) {
  const fs::path root = fs::path(dir) / (split == Split::kTrain ? "train" : "eval");
  const fs::path images = root / "images", labels = root / "labels";
  std::error_code ec;
  if (!fs::is_directory(images, ec)) {
    return absl::NotFoundError(absl::StrCat(
        images.string(),
        ": no such folder (--data takes the fetched MRI, a folder with aal.nii.gz, or a folder "
        "with train/images, train/labels, eval/images and eval/labels of NIfTI pairs)"));
  }
  std::vector<std::string> names;
  // The error_code forms throughout: a symbolic link that loops or dangles
  // makes the throwing forms of is_regular_file and operator++ throw.
  fs::directory_iterator it(images, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!is_nifti_name(name)) continue;
    std::error_code type_ec;
    const bool regular = it->is_regular_file(type_ec);
    if (type_ec) {
      return absl::InvalidArgumentError(
          absl::StrCat(it->path().string(), ": cannot be read: ", type_ec.message(),
                       " (a symbolic link that loops or points nowhere?)"));
    }
    if (regular) names.push_back(name);
  }
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat(images.string(), ": cannot list the folder: ", ec.message()));
  }
  std::sort(names.begin(), names.end());
  if (names.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(images.string(), ": no .nii or .nii.gz image in the folder"));
  }
  DataSet d;
  int max_label = 0;
  for (const std::string& name : names) {
    const std::string image_path = (images / name).string();
    const std::string label_path = (labels / name).string();
    if (!fs::exists(label_path, ec)) {
      return absl::NotFoundError(
          absl::StrCat(label_path, ": the label map of ", image_path, " is missing"));
    }
    BrainPair p;
    LMS_ASSIGN_OR_RETURN(p.image, io::read_nifti(image_path));
    LMS_ASSIGN_OR_RETURN(p.labels, io::read_nifti(label_path));
    LMS_RETURN_IF_ERROR(io::check_same_grid(p.image, p.labels, image_path, label_path));
    LMS_ASSIGN_OR_RETURN(const int most, check_label_map(p.labels, label_path, classes));
    max_label = std::max(max_label, most);
    normalise(p.image, p.labels);
    d.subjects.push_back({name, std::move(p)});
  }
  d.classes = classes > 0 ? classes : std::max(2, max_label + 1);
  for (int c = 0; c < d.classes; ++c)
    d.class_names.push_back(c == 0 ? "background" : absl::StrCat("class ", c));
  d.description = absl::StrCat(root.string(), ": ", d.subjects.size(), " image/label pairs, ",
                               d.classes, " classes");
  return d;
}

}  // namespace

absl::StatusOr<int> check_label_map(const io::Volume& labels, const std::string& path,
                                    int classes) {
  const int64_t limit = classes > 0 ? classes : kMaxInferredClasses;
  int max_label = 0;
  for (float v : labels.voxels) {
    const double l = std::round(static_cast<double>(v));
    if (!(l >= 0) || l != static_cast<double>(v) || l >= static_cast<double>(limit)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": label ", v, " is not a class id (whole numbers 0..", limit - 1,
          classes > 0 ? absl::StrCat(", --classes ", classes)
                      : absl::StrCat("; the class count is taken from the data up to ",
                                     kMaxInferredClasses, " classes, give --classes for more"),
          ")"));
    }
    max_label = std::max(max_label, static_cast<int>(l));
  }
  return max_label;
}

bool is_brain_folder(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / "aal.nii.gz", ec);
}

absl::StatusOr<DataSet> load_subjects(const std::string& dir, Split split, int classes) {
  if (classes < 0)
    return absl::InvalidArgumentError(absl::StrCat("--classes ", classes, " must be >= 0"));
  if (is_brain_folder(dir)) return load_brain_split(dir, split, classes);
  return load_folder_split(dir, split, classes);
}

absl::StatusOr<DataSet> on_cube(const DataSet& data, int64_t side) {
  DataSet out = data;
  for (Subject& s : out.subjects) {
    LMS_ASSIGN_OR_RETURN(s.pair, to_cube(s.pair, side));
  }
  return out;
}

}  // namespace lms::unet3d
