// Counter-based generator Philox4x32-10 and the perturbation directions built on it (spec §1).
//
// Contract: pure functions of their arguments (no hidden state); the words are bit-identical to
// mobiedit/zo/rng.py. Element j of direction `row` at loop `step` uses counter
// (j / 4, row, step, stream) under key (seed & 0xFFFFFFFF, seed >> 32) and output word j % 4.
// Coordinate directions (DirectionKind::Coordinates) follow rng.py's module docstring: slot
// t = step * n + row of cycles of d slots; cycle c's permutation and signs come from the 2d words
// of counters (b, c & 0xFFFFFFFF, c >> 32, stream) — Fisher–Yates from the last slot down, slot k
// swapping with (w_k * (k + 1)) >> 32, sign +1 where word d + k's top bit is 0.
#pragma once

#include <array>
#include <cstdint>

namespace mobiedit {

using PhiloxCounter = std::array<std::uint32_t, 4>;
using PhiloxKey = std::array<std::uint32_t, 2>;

inline constexpr std::uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr std::uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr std::uint32_t kPhiloxW0 = 0x9E3779B9u;
inline constexpr std::uint32_t kPhiloxW1 = 0xBB67AE85u;
inline constexpr std::uint32_t kStreamDirections = 0;

// Philox4x32 with 10 rounds (Salmon et al. 2011).
inline PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) noexcept {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kPhiloxW0;
      k[1] += kPhiloxW1;
    }
    const std::uint64_t p0 = static_cast<std::uint64_t>(kPhiloxM0) * c[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kPhiloxM1) * c[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32);
    const auto lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32);
    const auto lo1 = static_cast<std::uint32_t>(p1);
    c = PhiloxCounter{hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

inline PhiloxKey seed_to_key(std::uint64_t seed) noexcept {
  return PhiloxKey{static_cast<std::uint32_t>(seed & 0xFFFFFFFFu),
                   static_cast<std::uint32_t>(seed >> 32)};
}

enum class DirectionKind { Rademacher = 0, Gaussian = 1, Coordinates = 2 };

// Write d Rademacher signs (+1 if the word's top bit is 0, else -1) of direction `row`.
void fill_rademacher(std::uint64_t seed, std::uint32_t step, std::uint32_t row,
                     std::uint32_t stream, int d, float* out) noexcept;

// Write d standard normals of direction `row` (Box–Muller on word pairs, computed in double).
void fill_gaussian(std::uint64_t seed, std::uint32_t step, std::uint32_t row,
                   std::uint32_t stream, int d, float* out) noexcept;

// Write cycle `cycle`'s permutation perm[d] and signs sign[d] of the coordinate directions.
void coordinate_cycle(std::uint64_t seed, std::uint64_t cycle, std::uint32_t stream, int d,
                      std::int32_t* perm, float* sign) noexcept;

// Write n coordinate directions [n, d] of `step` (one nonzero per row, +-float(sqrt(d))); perm
// and sign are scratch buffers of d elements each.
void fill_coordinates(std::uint64_t seed, std::uint32_t step, std::uint32_t stream, int n, int d,
                      float* out, std::int32_t* perm, float* sign) noexcept;

// Write n directions [n, d] (row-major) of the given kind (Coordinates allocates its scratch:
// may throw std::bad_alloc).
void fill_directions(DirectionKind kind, std::uint64_t seed, std::uint32_t step,
                     std::uint32_t stream, int n, int d, float* out);

}  // namespace mobiedit
