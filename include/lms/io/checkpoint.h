// Checkpoints: saved weights (and optimizer state) as named float tensors,
// plus the training step and string metadata (namespace lms::io, part of
// liblms).
//
//   std::vector<NamedTensor> ts = {{"conv1.w", {64, 1, 3, 3}, weights}};
//   LMS_RETURN_IF_ERROR(save_checkpoint("out/vdsr.ckpt", ts, step, {{"model", "vdsr"}}));
//   LMS_ASSIGN_OR_RETURN(Checkpoint ck, load_checkpoint("out/vdsr.ckpt"));
//   const NamedTensor* w = ck.find("conv1.w");
//
// File format, version 1, all integers little-endian:
//   header  "LMSCKPT\0" (8 bytes) | u32 version | u32 crc32 of payload |
//           u64 payload bytes
//   payload i64 step | u32 n_meta | n_meta x (u32 len, key, u32 len, value) |
//           u32 n_tensors | n_tensors x (u32 len, name, u32 rank,
//           rank x i64 dim, u64 count, count x f32 raw IEEE-754 bits)
// Floats are stored bit for bit, so a round trip is exact (NaN payloads too).
// Saving is atomic (see Note [Atomic write]): a failed save leaves an
// existing checkpoint at `path` untouched, and a save removes the temporary
// files that killed writers left behind (Note [Stale temporary files]).
//
// The format stores any step and any float (a round trip is exact), but a
// program that *uses* a checkpoint (resumes training, evaluates) reads it
// with load_usable_checkpoint, which also refuses a negative step and
// non-finite values (validate_checkpoint).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lms::io {

struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;  // e.g. OIHW for conv weights; {} is a scalar
  std::vector<float> data;     // row-major, product(shape) elements
};

struct Checkpoint {
  int64_t step = 0;
  std::map<std::string, std::string> meta;
  std::vector<NamedTensor> tensors;  // in saved order

  // The tensor called `name`, or nullptr.
  const NamedTensor* find(const std::string& name) const;
};

inline constexpr uint32_t kCheckpointVersion = 1;
inline constexpr int kMaxCheckpointRank = 8;

// Writes tensors, step and meta to `path` atomically.
// Errors: InvalidArgument for an empty or duplicate name, a negative
// dimension, rank > kMaxCheckpointRank, or data.size() != product(shape);
// errno-derived codes (NotFound, PermissionDenied, ResourceExhausted, ...)
// when the file cannot be written.
absl::Status save_checkpoint(const std::string& path, const std::vector<NamedTensor>& tensors,
                             int64_t step, const std::map<std::string, std::string>& meta);

// Reads a checkpoint written by save_checkpoint.
// Errors: errno-derived codes when the file cannot be read (NotFound, ...);
// DataLoss naming the path for a wrong magic, an unsupported version, a
// truncated file, a checksum mismatch or a malformed payload.
absl::StatusOr<Checkpoint> load_checkpoint(const std::string& path);

// What a program needs before it uses checkpoint values: step >= 0 and
// every value of every tensor finite (a NaN or Inf weight or optimizer
// moment means the run that wrote it diverged). OK or FailedPrecondition
// naming `path`, the field ("step") or the tensor, the index of its first
// non-finite value and how many there are, and what is allowed.
absl::Status validate_checkpoint_values(const std::vector<NamedTensor>& tensors, int64_t step,
                                        const std::string& path);
absl::Status validate_checkpoint(const Checkpoint& ck, const std::string& path);

// load_checkpoint, then validate_checkpoint: what `vdsr eval` and
// `vdsr train --resume` read. Errors of both.
absl::StatusOr<Checkpoint> load_usable_checkpoint(const std::string& path);

// CRC-32 (IEEE 802.3, as zlib's crc32) of the `size` bytes at `bytes`.
uint32_t crc32(const uint8_t* bytes, size_t size);

}  // namespace lms::io
