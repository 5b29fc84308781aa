// Internal numeric helpers shared by the engine's translation units. Every reduction runs left
// to right in double so that results match mobiedit/zo bit for bit (see docs/zo_spec.md).
#pragma once

#include <cmath>
#include <cstddef>

namespace mobiedit {
namespace detail {

// f32(f64(x) + s * f64(u)), element-wise over n values.
inline void perturb(const float* x, const float* u, double s, std::size_t n, float* out) noexcept {
  for (std::size_t j = 0; j < n; ++j) {
    out[j] = static_cast<float>(static_cast<double>(x[j]) + s * static_cast<double>(u[j]));
  }
}

// Sum of n floats widened to double, left to right.
inline double seq_sum(const float* v, std::size_t n, std::size_t stride = 1) noexcept {
  double total = 0.0;
  for (std::size_t i = 0; i < n; ++i) total += static_cast<double>(v[i * stride]);
  return total;
}

// Population std of n floats (widened to double): sqrt(sum((v - mean)^2) / n).
inline double population_std(const float* v, std::size_t n) noexcept {
  const double mean = seq_sum(v, n) / static_cast<double>(n);
  double ss = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double dv = static_cast<double>(v[i]) - mean;
    ss += dv * dv;
  }
  return std::sqrt(ss / static_cast<double>(n));
}

// Dot product of float vectors: products in double, summed left to right.
inline double seq_dot(const float* a, const float* b, std::size_t n) noexcept {
  double total = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    total += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  }
  return total;
}

inline bool all_finite(const float* v, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i])) return false;
  }
  return true;
}

}  // namespace detail
}  // namespace mobiedit
