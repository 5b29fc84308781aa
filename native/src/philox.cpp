// Perturbation directions from Philox4x32-10 (spec §1); mirrors mobiedit/zo/rng.py.
#include "mobiedit/philox.hpp"

#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

namespace mobiedit {
namespace {

constexpr double kTwoPowM32 = 1.0 / 4294967296.0;
constexpr double kTwoPi = 2.0 * 3.14159265358979323846;

inline double uniform01(std::uint32_t w) noexcept {
  return (static_cast<double>(w) + 0.5) * kTwoPowM32;
}

inline float rademacher_of(std::uint32_t w) noexcept { return (w >> 31) == 0u ? 1.0f : -1.0f; }

// Box–Muller on one word pair; computed in double, rounded to float once.
inline void box_muller(std::uint32_t w_even, std::uint32_t w_odd, float* z) noexcept {
  const double r = std::sqrt(-2.0 * std::log(uniform01(w_even)));
  const double th = kTwoPi * uniform01(w_odd);
  z[0] = static_cast<float>(r * std::cos(th));
  z[1] = static_cast<float>(r * std::sin(th));
}

}  // namespace

void fill_rademacher(std::uint64_t seed, std::uint32_t step, std::uint32_t row,
                     std::uint32_t stream, int d, float* out) noexcept {
  const PhiloxKey key = seed_to_key(seed);
  const int full = d / 4;
  for (int b = 0; b < full; ++b) {
    const PhiloxCounter w =
        philox4x32_10({static_cast<std::uint32_t>(b), row, step, stream}, key);
    for (int i = 0; i < 4; ++i) out[4 * b + i] = rademacher_of(w[i]);
  }
  if (full * 4 < d) {
    const PhiloxCounter w =
        philox4x32_10({static_cast<std::uint32_t>(full), row, step, stream}, key);
    for (int i = 0; full * 4 + i < d; ++i) out[4 * full + i] = rademacher_of(w[i]);
  }
}

void fill_gaussian(std::uint64_t seed, std::uint32_t step, std::uint32_t row,
                   std::uint32_t stream, int d, float* out) noexcept {
  const PhiloxKey key = seed_to_key(seed);
  const int blocks = (d + 3) / 4;
  for (int b = 0; b < blocks; ++b) {
    const PhiloxCounter w =
        philox4x32_10({static_cast<std::uint32_t>(b), row, step, stream}, key);
    float z[4];
    box_muller(w[0], w[1], z);
    box_muller(w[2], w[3], z + 2);
    for (int i = 0; i < 4 && 4 * b + i < d; ++i) out[4 * b + i] = z[i];
  }
}

void coordinate_cycle(std::uint64_t seed, std::uint64_t cycle, std::uint32_t stream, int d,
                      std::int32_t* perm, float* sign) noexcept {
  const PhiloxKey key = seed_to_key(seed);
  const auto lo = static_cast<std::uint32_t>(cycle & 0xFFFFFFFFu);
  const auto hi = static_cast<std::uint32_t>(cycle >> 32);
  auto word = [&](int i) {  // word i of the cycle's 2d words
    return philox4x32_10({static_cast<std::uint32_t>(i / 4), lo, hi, stream}, key)[i % 4];
  };
  for (int k = 0; k < d; ++k) perm[k] = k;
  for (int k = d - 1; k > 0; --k) {
    const auto r = static_cast<int>(
        (static_cast<std::uint64_t>(word(k)) * static_cast<std::uint64_t>(k + 1)) >> 32);
    std::swap(perm[k], perm[r]);
  }
  for (int k = 0; k < d; ++k) sign[k] = rademacher_of(word(d + k));
}

void fill_coordinates(std::uint64_t seed, std::uint32_t step, std::uint32_t stream, int n, int d,
                      float* out, std::int32_t* perm, float* sign) noexcept {
  if (n <= 0 || d <= 0) return;
  const auto ud = static_cast<std::size_t>(d);
  std::memset(out, 0, static_cast<std::size_t>(n) * ud * sizeof(float));
  const auto scale = static_cast<float>(std::sqrt(static_cast<double>(d)));
  std::uint64_t have = ~std::uint64_t{0};  // the cycle held in perm/sign
  for (int i = 0; i < n; ++i) {
    const std::uint64_t t =
        static_cast<std::uint64_t>(step) * static_cast<std::uint64_t>(n) + static_cast<std::uint64_t>(i);
    const std::uint64_t c = t / ud;
    const auto j = static_cast<std::size_t>(t % ud);
    if (c != have) {
      coordinate_cycle(seed, c, stream, d, perm, sign);
      have = c;
    }
    out[static_cast<std::size_t>(i) * ud + static_cast<std::size_t>(perm[j])] = sign[j] * scale;
  }
}

void fill_directions(DirectionKind kind, std::uint64_t seed, std::uint32_t step,
                     std::uint32_t stream, int n, int d, float* out) {
  if (kind == DirectionKind::Coordinates) {
    if (n <= 0 || d <= 0) return;
    std::vector<std::int32_t> perm(static_cast<std::size_t>(d));
    std::vector<float> sign(static_cast<std::size_t>(d));
    fill_coordinates(seed, step, stream, n, d, out, perm.data(), sign.data());
    return;
  }
  for (int r = 0; r < n; ++r) {
    float* row = out + static_cast<std::size_t>(r) * static_cast<std::size_t>(d);
    if (kind == DirectionKind::Gaussian) {
      fill_gaussian(seed, step, static_cast<std::uint32_t>(r), stream, d, row);
    } else {
      fill_rademacher(seed, step, static_cast<std::uint32_t>(r), stream, d, row);
    }
  }
}

}  // namespace mobiedit
