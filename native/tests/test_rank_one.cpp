// ROME rank-one factors (spec §5) through the C++ API.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "mobiedit/engine.hpp"

TEST_CASE("w . k* == 1 and W_new k* == v*") {
  const int din = 5, dout = 3;
  const std::vector<float> k{0.5f, -1.0f, 2.0f, 0.25f, 1.5f};
  const std::vector<float> c{1.0f, -0.5f, 1.0f, 0.0f, 2.0f};  // some C^-1 k*
  const std::vector<float> W{1, 0, 0, 1, 0, 0, 2, 0, 0, 1, 0, 0, 1, 1, 1};  // [3, 5]
  std::vector<float> wk(dout, 0.0f);
  for (int o = 0; o < dout; ++o) {
    for (int i = 0; i < din; ++i) wk[o] += W[o * din + i] * k[i];
  }
  const std::vector<float> v{1.0f, 2.0f, -3.0f};
  std::vector<float> u(dout), w(din);
  mobiedit::rank_one(k.data(), v.data(), wk.data(), c.data(), din, dout, u.data(), w.data());
  double wk_dot = 0;
  for (int i = 0; i < din; ++i) wk_dot += static_cast<double>(w[i]) * k[i];
  CHECK(wk_dot == doctest::Approx(1.0).epsilon(1e-6));
  for (int o = 0; o < dout; ++o) {
    CHECK(u[o] == doctest::Approx(v[o] - wk[o]));
    double out = 0;
    for (int i = 0; i < din; ++i) out += (W[o * din + i] + static_cast<double>(u[o]) * w[i]) * k[i];
    CHECK(out == doctest::Approx(v[o]).epsilon(1e-5));
  }
}

TEST_CASE("c == nullptr means c = k*") {
  const std::vector<float> k{3.0f, 4.0f};
  const std::vector<float> v{1.0f}, wk{0.0f};
  std::vector<float> u(1), w(2);
  mobiedit::rank_one(k.data(), v.data(), wk.data(), nullptr, 2, 1, u.data(), w.data());
  CHECK(w[0] == doctest::Approx(3.0 / 25.0));
  CHECK(w[1] == doctest::Approx(4.0 / 25.0));
}

TEST_CASE("degenerate or non-finite inputs raise Numerical errors") {
  const std::vector<float> k{1.0f, 0.0f}, c{0.0f, 1.0f}, v{1.0f}, wk{0.0f};
  std::vector<float> u(1), w(2);
  try {
    mobiedit::rank_one(k.data(), v.data(), wk.data(), c.data(), 2, 1, u.data(), w.data());
    FAIL("expected an error for c . k = 0");
  } catch (const mobiedit::Error& e) {
    CHECK(e.code() == mobiedit::ErrorCode::Numerical);
    CHECK(e.where() == "c");
  }
  const std::vector<float> vnan{std::numeric_limits<float>::quiet_NaN()};
  CHECK_THROWS_AS(
      mobiedit::rank_one(k.data(), vnan.data(), wk.data(), nullptr, 2, 1, u.data(), w.data()),
      mobiedit::Error);
  CHECK_THROWS_AS(mobiedit::rank_one(k.data(), v.data(), wk.data(), nullptr, 0, 1, u.data(), w.data()),
                  mobiedit::Error);
}
