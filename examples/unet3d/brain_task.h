// The segmentation task of examples/unet3d on the MRI of scripts/fetch_data.sh
// (data/mri): the 116 regions of the AAL atlas (Tzourio-Mazoyer et al.,
// NeuroImage 2002; aal.nii.gz, in the space of the ch2 T1 volumes) grouped
// into 13 classes: background, five lobes per hemisphere, subcortical grey
// matter and the cerebellum. The grouping follows AAL's own region codes
// (aal.nii.txt, "index name code"): the code's first digit is the lobe (2
// frontal, 3 insula, 4 limbic, 5 occipital, 6 parietal, 7 subcortical, 8
// temporal, 9 cerebellum), its last digit the hemisphere (1 left, 2 right,
// 0 midline). Insula and limbic regions form one class per hemisphere.
//
//   LMS_ASSIGN_OR_RETURN(std::vector<int> to_class, lms::unet3d::aal_classes(text, path));
//   int c = to_class[aal_index];  // 0 for an index the table does not name
//   std::vector<double> dice = lms::unet3d::dice_per_class(pred, ref, kBrainClasses);
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace lms::unet3d {

inline constexpr int kBrainClasses = 13;

// "background", "frontal L", "frontal R", ..., "cerebellum", by class.
const std::array<std::string_view, kBrainClasses>& brain_class_names();

// The class of each AAL index (the vector's size is the largest index + 1;
// index 0 and indices the table leaves out are background). `text` is the
// content of aal.nii.txt, `path` its name for messages. InvalidArgument
// naming the file, the line and what was wrong (not three fields, an index
// or code that is not a positive integer, a lobe digit outside 2..9, a
// hemisphere digit outside 0..2, an index listed twice).
absl::StatusOr<std::vector<int>> aal_classes(std::string_view text, const std::string& path);

// The class a left-right mirror turns `c` into (left and right swap;
// background, subcortical and cerebellum stay), for flip augmentation.
int mirrored_class(int c);

// Dice coefficient of each class, 2 |P and R| / (|P| + |R|) over voxels
// labelled c in `pred` (P) and in `ref` (R); 1 for a class absent from both.
// The label maps must have the same size; labels outside [0, classes) are
// counted in no class. InvalidArgument for different sizes or classes < 1.
absl::StatusOr<std::vector<double>> dice_per_class(const std::vector<int32_t>& pred,
                                                   const std::vector<int32_t>& ref, int classes);

}  // namespace lms::unet3d
