// Philox4x32-10 known answers and the direction generators (spec §1).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "mobiedit/philox.hpp"

using mobiedit::PhiloxCounter;

TEST_CASE("philox4x32_10 matches the Random123 known answers") {
  CHECK(mobiedit::philox4x32_10({0, 0, 0, 0}, {0, 0}) ==
        PhiloxCounter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(mobiedit::philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                {0xffffffffu, 0xffffffffu}) ==
        PhiloxCounter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(mobiedit::philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                                {0xa4093822u, 0x299f31d0u}) ==
        PhiloxCounter{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("seed splits into (low, high) key words; golden value shared with rng.py") {
  const std::uint64_t seed = 0x123456789ABCDEFull;
  const auto key = mobiedit::seed_to_key(seed);
  CHECK(key[0] == 0x89ABCDEFu);
  CHECK(key[1] == 0x01234567u);
  CHECK(mobiedit::philox4x32_10({1, 2, 3, 4}, key) ==
        PhiloxCounter{0x99d4cb09u, 0x26c3c56bu, 0x74661f47u, 0x327c8526u});
}

TEST_CASE("Rademacher directions equal the Python reference (golden)") {
  std::vector<float> out(14, 0.0f);
  mobiedit::fill_directions(mobiedit::DirectionKind::Rademacher, 0x123456789ABCDEFull, 5, 0, 2, 7,
                            out.data());
  const std::vector<float> want{-1, 1, -1, 1, -1, 1, -1, -1, 1, -1, -1, 1, -1, -1};
  CHECK(out == want);
}

TEST_CASE("Gaussian directions equal the Python reference (golden, 1e-6)") {
  std::vector<float> out(14, 0.0f);
  mobiedit::fill_directions(mobiedit::DirectionKind::Gaussian, 0x123456789ABCDEFull, 5, 0, 2, 7,
                            out.data());
  const double want[14] = {-0.8303371667861938, 0.15247352421283722, -0.9204275608062744,
                           0.585373044013977,   -0.2751295268535614, 0.5804771184921265,
                           -0.44842973351478577, -0.21671350300312042, 0.5375760793685913,
                           -0.25708428025245667, -0.9378284215927124, 1.4488859176635742,
                           -1.0057291984558105,  -0.937150776386261};
  for (int i = 0; i < 14; ++i) CHECK(std::fabs(out[i] - want[i]) <= 1e-6);
}

TEST_CASE("a short direction is the prefix of a longer one (tail words discarded)") {
  for (int kind = 0; kind < 2; ++kind) {
    std::vector<float> longer(12), shorter(9);
    const auto k = static_cast<mobiedit::DirectionKind>(kind);
    mobiedit::fill_directions(k, 7, 3, 0, 1, 12, longer.data());
    mobiedit::fill_directions(k, 7, 3, 0, 1, 9, shorter.data());
    for (int j = 0; j < 9; ++j) CHECK(shorter[j] == longer[j]);
  }
}

TEST_CASE("directions differ across step, row, stream and seed") {
  const int d = 64;
  std::vector<float> a(d), b(d);
  mobiedit::fill_rademacher(1, 0, 0, 0, d, a.data());
  mobiedit::fill_rademacher(1, 1, 0, 0, d, b.data());
  CHECK(a != b);
  mobiedit::fill_rademacher(1, 0, 1, 0, d, b.data());
  CHECK(a != b);
  mobiedit::fill_rademacher(1, 0, 0, 1, d, b.data());
  CHECK(a != b);
  mobiedit::fill_rademacher(2, 0, 0, 0, d, b.data());
  CHECK(a != b);
  mobiedit::fill_rademacher(1, 0, 0, 0, d, b.data());
  CHECK(a == b);
}

TEST_CASE("Gaussian samples have mean ~0 and variance ~1") {
  const int n = 64, d = 1024;
  std::vector<float> z(static_cast<std::size_t>(n) * d);
  mobiedit::fill_directions(mobiedit::DirectionKind::Gaussian, 99, 0, 0, n, d, z.data());
  double s = 0, ss = 0;
  int non_finite = 0;
  for (float v : z) {
    non_finite += !std::isfinite(v);
    s += v;
    ss += static_cast<double>(v) * v;
  }
  const double mean = s / static_cast<double>(z.size());
  const double var = ss / static_cast<double>(z.size()) - mean * mean;
  CHECK(non_finite == 0);
  CHECK(std::fabs(mean) < 0.02);
  CHECK(std::fabs(var - 1.0) < 0.03);
}

TEST_CASE("Rademacher signs are balanced") {
  std::vector<float> r(4096);
  mobiedit::fill_rademacher(5, 0, 0, 0, 4096, r.data());
  int plus = 0, other = 0;
  for (float v : r) {
    other += !(v == 1.0f || v == -1.0f);
    plus += v > 0;
  }
  CHECK(other == 0);
  CHECK(plus > 1900);
  CHECK(plus < 2200);
}
