// Overflow-checked integer arithmetic. Shape inference, tensor sizes and unit
// parsing use it instead of raw + - * so that absurd inputs (a pad of 2^62,
// two dims of 2^40) become errors: signed overflow is undefined behaviour and
// unsigned overflow silently wraps.
//
//   lms::Checked<int64_t> room = lms::Checked<int64_t>(x) + lms::Checked<int64_t>(pad) * 2 - k;
//   if (!room.ok()) return error("overflows int64");
//   int64_t r = room.value();
#pragma once

#include <optional>
#include <type_traits>

namespace lms {

// An integer that remembers whether any operation that produced it overflowed
// (or took an operand that had). value() is meaningful only when ok().
template <typename T>
class Checked {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);

 public:
  constexpr Checked(T value) : value_(value) {}  // NOLINT: implicit by design

  constexpr bool ok() const { return ok_; }
  constexpr T value() const { return value_; }
  constexpr std::optional<T> get() const { return ok_ ? std::optional<T>(value_) : std::nullopt; }

  friend constexpr Checked operator+(Checked a, Checked b) {
    return a.then(b, __builtin_add_overflow(a.value_, b.value_, &a.value_));
  }
  friend constexpr Checked operator-(Checked a, Checked b) {
    return a.then(b, __builtin_sub_overflow(a.value_, b.value_, &a.value_));
  }
  friend constexpr Checked operator*(Checked a, Checked b) {
    return a.then(b, __builtin_mul_overflow(a.value_, b.value_, &a.value_));
  }

 private:
  constexpr Checked then(Checked other, bool overflowed) {
    ok_ = ok_ && other.ok_ && !overflowed;
    return *this;
  }

  T value_;
  bool ok_ = true;
};

// a * b, a + b, a - b, or nullopt on overflow.
template <typename T>
constexpr std::optional<T> checked_mul(T a, T b) {
  return (Checked<T>(a) * b).get();
}
template <typename T>
constexpr std::optional<T> checked_add(T a, T b) {
  return (Checked<T>(a) + b).get();
}
template <typename T>
constexpr std::optional<T> checked_sub(T a, T b) {
  return (Checked<T>(a) - b).get();
}

}  // namespace lms
