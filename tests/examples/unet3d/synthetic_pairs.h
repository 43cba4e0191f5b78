// A synthetic NIfTI image / label-map pair for the unet3d program tests
// (unet3d_program_test, unet3d_distributed_test), in the folder layout of
// subjects.h: <root>/images/<name> and <root>/labels/<name>.
#pragma once

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "lms/io/nifti.h"
#include "lms/status.h"

namespace lms::unet3d {

// A 22 x 20 x 18 volume (1 mm): class 1 in a ball around the centre, class 2
// in the slab x < 6, background elsewhere; intensity 100 per class step plus
// uniform noise from `seed`, so the classes are learnable.
inline absl::Status write_synthetic_pair(const std::filesystem::path& root, const std::string& name,
                                         uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> noise(0, 30);
  io::Volume image, labels;
  for (io::Volume* v : {&image, &labels}) {
    v->dims = {22, 20, 18};
    v->spacing_mm = {1, 1, 1};
    v->voxels.resize(22 * 20 * 18);
  }
  for (int64_t z = 0; z < 18; ++z)
    for (int64_t y = 0; y < 20; ++y)
      for (int64_t x = 0; x < 22; ++x) {
        const double r2 = (x - 11.0) * (x - 11.0) + (y - 10.0) * (y - 10.0) + (z - 9.0) * (z - 9.0);
        const int c = r2 < 36 ? 1 : (x < 6 ? 2 : 0);
        const size_t i = image.index(x, y, z);
        labels.voxels[i] = static_cast<float>(c);
        image.voxels[i] = 100.0f * static_cast<float>(c) + noise(rng);
      }
  std::filesystem::create_directories(root / "images");
  std::filesystem::create_directories(root / "labels");
  LMS_RETURN_IF_ERROR(
      io::write_nifti((root / "images" / name).string(), image, io::NiftiType::kFloat32));
  return io::write_nifti_labels((root / "labels" / name).string(), labels);
}

}  // namespace lms::unet3d
