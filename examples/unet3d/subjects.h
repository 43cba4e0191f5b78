// The volumes `unet3d` trains and evaluates on, from a data folder of one of
// two layouts:
//  - the MRI of scripts/fetch_data.sh (a folder holding aal.nii.gz): the
//    brain task of brain_task.h. Training subjects are ch2bet (skull
//    stripped) and ch2 (with skull), both the 1 mm average of 27 scans of one
//    person (Colin Holmes); the evaluation subject is ch2better, a separate
//    0.5 mm scan of the same person resampled onto the atlas grid. It is
//    another acquisition of the same subject, not an unseen person, so its
//    Dice measures fit to the anatomy and robustness to the scan, not
//    generalisation across people. Labels: the AAL atlas in 13 classes.
//  - a user's folder of NIfTI image / label-map pairs (for example BraTS, one
//    modality): <dir>/train/images/NAME.nii[.gz] with
//    <dir>/train/labels/NAME.nii[.gz], and <dir>/eval/... alike. Label values
//    are class ids 0..classes-1 (0 = background); every pair must share one
//    grid. Left-right flips keep the labels.
//
//   LMS_ASSIGN_OR_RETURN(DataSet train, load_subjects("data/mri", Split::kTrain, 0));
//   LMS_ASSIGN_OR_RETURN(DataSet cube, on_cube(train, 80));   // 80^3 voxels each
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mri_data.h"

namespace lms::unet3d {

enum class Split { kTrain, kEval };

struct Subject {
  std::string name;  // file name of the image
  BrainPair pair;    // normalised image and class labels on one grid
};

struct DataSet {
  std::string description;  // one line for logs: where the volumes came from
  std::vector<Subject> subjects;
  int classes = 0;                       // label classes, background included
  bool swap_left_right = false;          // flips swap L and R classes (the brain task)
  std::vector<std::string> class_names;  // by class id
};

// The most classes taken from a folder's labels without --classes (the
// largest label + 1): a stray label of 1e6 would otherwise make a million.
inline constexpr int kMaxInferredClasses = 256;

// The largest label of `labels` (read from `path`). InvalidArgument naming
// the file and the value for a label that is negative, not a whole number,
// or >= classes (classes 0: >= kMaxInferredClasses).
absl::StatusOr<int> check_label_map(const io::Volume& labels, const std::string& path, int classes);

// True when `dir` holds the fetched MRI (aal.nii.gz).
bool is_brain_folder(const std::string& dir);

// Loads the subjects of `split` (see the top of this file). `classes` 0
// takes the class count from the data (13 for the brain task; the largest
// training label + 1 for a user's folder); otherwise it must cover every
// label. Errors: NotFound naming the folder or the missing label file;
// those of read_nifti / load_brain (naming the file and the field);
// InvalidArgument naming the file for a label that is negative, not a whole
// number or >= classes, for grids that differ, for classes != 13 on the
// brain task and for a folder without any pair.
absl::StatusOr<DataSet> load_subjects(const std::string& dir, Split split, int classes);

// Every subject resampled with to_cube to side^3 voxels.
absl::StatusOr<DataSet> on_cube(const DataSet& data, int64_t side);

}  // namespace lms::unet3d
