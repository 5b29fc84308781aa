// The loop driver (spec §4) through the C++ API: convergence, every stop status, errors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "mobiedit/engine.hpp"

using mobiedit::Config;
using mobiedit::Engine;
using mobiedit::Status;

namespace {

constexpr int kD = 16;

std::vector<float> target() {
  std::vector<float> t(kD);
  for (int j = 0; j < kD; ++j) t[j] = 0.5f * static_cast<float>((j % 5) - 2);
  return t;
}

// forward for L(x) = sum_j (x_j - t_j)^2, counting calls.
struct Quadratic {
  std::vector<float> t = target();
  int calls = 0;
  int operator()(const float* D, int K, int d, float* L) {
    ++calls;
    for (int r = 0; r < K; ++r) {
      double s = 0.0;
      for (int j = 0; j < d; ++j) {
        const double e = static_cast<double>(D[r * d + j]) - t[j];
        s += e * e;
      }
      L[r] = static_cast<float>(s);
    }
    return 0;
  }
};

Config base_config(mobiedit::Estimator e, mobiedit::Optimizer o) {
  Config c;
  c.estimator = e;
  c.optimizer = o;
  c.n_dirs = 8;
  c.h = 1e-2;
  c.lr = o == mobiedit::Optimizer::Adam ? 0.05 : 0.01;
  c.max_steps = 300;
  return c;
}

double norm(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

}  // namespace

TEST_CASE("every estimator x optimizer reduces a quadratic loss") {
  for (auto e : {mobiedit::Estimator::Paper, mobiedit::Estimator::Fzoo,
                 mobiedit::Estimator::Antithetic}) {
    for (auto o : {mobiedit::Optimizer::Sgd, mobiedit::Optimizer::Adam}) {
      CAPTURE(mobiedit::estimator_name(e));
      CAPTURE(mobiedit::optimizer_name(o));
      Engine eng(base_config(e, o), kD);
      Quadratic q;
      CHECK(eng.run(std::ref(q), {}) == Status::MaxSteps);
      REQUIRE(eng.history().size() == 300u);
      CHECK(eng.history().back() < 0.5 * eng.history().front());
      CHECK(eng.steps() == 300);
      CHECK(eng.evals() == 300LL * eng.K());
    }
  }
}

TEST_CASE("rows per estimator") {
  Config c;
  c.n_dirs = 5;
  c.estimator = mobiedit::Estimator::Paper;
  CHECK(c.rows() == 15);
  c.estimator = mobiedit::Estimator::Fzoo;
  CHECK(c.rows() == 6);
  c.estimator = mobiedit::Estimator::Antithetic;
  CHECK(c.rows() == 10);
}

TEST_CASE("SUCCESS_LOSS stops at the evaluated point") {
  Config c = base_config(mobiedit::Estimator::Fzoo, mobiedit::Optimizer::Adam);
  c.loss_tol = 1.0;
  Engine eng(c, kD);
  Quadratic q;
  CHECK(eng.run(std::ref(q), {}) == Status::SuccessLoss);
  CHECK(eng.history().back() < 1.0);
  CHECK(eng.steps() < 300);
  CHECK(eng.steps() == q.calls);
}

TEST_CASE("SUCCESS_CHECK honours check_every and counts checks") {
  Config c = base_config(mobiedit::Estimator::Antithetic, mobiedit::Optimizer::Adam);
  c.check_every = 3;
  Engine eng(c, kD);
  Quadratic q;
  int calls = 0;
  auto check = [&](const float*, int d, int* ok) {
    CHECK(d == kD);
    *ok = ++calls == 4;
    return 0;
  };
  CHECK(eng.run(std::ref(q), check) == Status::SuccessCheck);
  CHECK(eng.steps() == 12);
  CHECK(eng.checks() == 4);
}

TEST_CASE("check_at base asks about the step's evaluated point, one forward later") {
  // the same points as check_at update (every check_every-th delta from the first update on), each
  // checked after the forward that evaluated it (FZOO's row 0) and before that step's update
  for (int every : {1, 3}) {
    Config c = base_config(mobiedit::Estimator::Fzoo, mobiedit::Optimizer::Adam);
    c.check_every = every;
    std::vector<std::vector<float>> at_update, at_base;
    std::vector<float> row0;
    auto run = [&](mobiedit::CheckAt when, std::vector<std::vector<float>>& seen) {
      c.check_at = when;
      Engine eng(c, kD);
      Quadratic q;
      auto fwd = [&](const float* D, int K, int d, float* L) {
        row0.assign(D, D + d);
        return q(D, K, d, L);
      };
      auto check = [&](const float* x, int d, int* ok) {
        if (when == mobiedit::CheckAt::Base) CHECK(std::memcmp(x, row0.data(), d * sizeof(float)) == 0);
        seen.emplace_back(x, x + d);
        *ok = seen.size() == 4;
        return 0;
      };
      CHECK(eng.run(fwd, check) == Status::SuccessCheck);
      CHECK(eng.checks() == 4);
      return eng.steps();
    };
    const std::int64_t update_steps = run(mobiedit::CheckAt::Update, at_update);
    const std::int64_t base_steps = run(mobiedit::CheckAt::Base, at_base);
    CHECK(update_steps == 4 * every);
    CHECK(base_steps == update_steps + 1);
    CHECK(at_update == at_base);
  }
}

TEST_CASE("PLATEAU when the loss stops improving") {
  Config c = base_config(mobiedit::Estimator::Fzoo, mobiedit::Optimizer::Sgd);
  c.patience = 3;
  c.min_rel_improve = 0.5;
  Engine eng(c, kD);
  auto flat = [](const float*, int K, int, float* L) {
    for (int r = 0; r < K; ++r) L[r] = 1.0f;
    return 0;
  };
  CHECK(eng.run(flat, {}) == Status::Plateau);
  CHECK(eng.steps() == 4);  // step 0 sets best; steps 1..3 do not improve
}

TEST_CASE("BUDGET when the next batch would exceed max_evals") {
  Config c = base_config(mobiedit::Estimator::Paper, mobiedit::Optimizer::Adam);
  c.n_dirs = 2;         // K = 6
  c.max_evals = 20;     // 3 batches fit (18), the 4th does not
  Engine eng(c, kD);
  Quadratic q;
  CHECK(eng.run(std::ref(q), {}) == Status::Budget);
  CHECK(eng.steps() == 3);
  CHECK(eng.evals() == 18);
}

TEST_CASE("NONFINITE loss leaves x untouched") {
  Config c = base_config(mobiedit::Estimator::Fzoo, mobiedit::Optimizer::Adam);
  Engine eng(c, kD);
  int calls = 0;
  Quadratic q;
  auto nan_at_3 = [&](const float* D, int K, int d, float* L) {
    q(D, K, d, L);
    if (++calls == 3) L[1] = std::numeric_limits<float>::quiet_NaN();
    return 0;
  };
  std::vector<float> x_before;
  for (int i = 0; i < 2; ++i) eng.step(nan_at_3, {});
  x_before = eng.x();
  CHECK(eng.step(nan_at_3, {}) == Status::NonFinite);
  CHECK(eng.x() == x_before);
  CHECK(eng.history().size() == 2u);
  CHECK(eng.message().find("non-finite loss") != std::string::npos);
}

TEST_CASE("NONFINITE delta after an overflowing update keeps the last finite x") {
  Config c = base_config(mobiedit::Estimator::Paper, mobiedit::Optimizer::Sgd);
  c.lr = 1e30;
  Engine eng(c, kD);
  auto huge = [](const float* D, int K, int d, float* L) {
    for (int r = 0; r < K; ++r) L[r] = (r % 3 == 0) ? 3e38f : -3e38f;
    (void)D;
    (void)d;
    return 0;
  };
  CHECK(eng.run(huge, {}) == Status::NonFinite);
  for (float v : eng.x()) CHECK(std::isfinite(v));
}

TEST_CASE("max_norm clamps every update") {
  Config c = base_config(mobiedit::Estimator::Antithetic, mobiedit::Optimizer::Adam);
  c.max_norm = 0.25;
  c.max_steps = 50;
  Engine eng(c, kD);
  Quadratic q;
  eng.run(std::ref(q), {});
  CHECK(norm(eng.x()) <= 0.25 * (1 + 1e-6));
  CHECK(norm(eng.x()) > 0.2);
}

TEST_CASE("a failing callback ends the run with ERROR and a message") {
  Engine eng(base_config(mobiedit::Estimator::Fzoo, mobiedit::Optimizer::Adam), kD);
  auto bad = [](const float*, int, int, float*) { return 7; };
  CHECK(eng.run(bad, {}) == Status::Error);
  CHECK(eng.message().find("error code") != std::string::npos);
  CHECK(eng.message().find("(7)") != std::string::npos);
  CHECK_THROWS_AS(eng.step(bad, {}), mobiedit::Error);

  Engine eng2(base_config(mobiedit::Estimator::Fzoo, mobiedit::Optimizer::Adam), kD);
  Quadratic q;
  auto bad_check = [](const float*, int, int*) { return 1; };
  CHECK(eng2.run(std::ref(q), bad_check) == Status::Error);
  CHECK(eng2.message().find("check callback") != std::string::npos);
}

TEST_CASE("an exception thrown by a callback sets ERROR and is rethrown") {
  Engine eng(base_config(mobiedit::Estimator::Fzoo, mobiedit::Optimizer::Adam), kD);
  auto thrower = [](const float*, int, int, float*) -> int { throw std::runtime_error("boom"); };
  CHECK_THROWS_WITH_AS(eng.run(thrower, {}), "boom", std::runtime_error);
  CHECK(eng.status() == Status::Error);
  CHECK(eng.message().find("boom") != std::string::npos);
}

TEST_CASE("reset restarts from x0 and reproduces the run exactly") {
  Config c = base_config(mobiedit::Estimator::Paper, mobiedit::Optimizer::Adam);
  c.max_steps = 20;
  Engine eng(c, kD);
  Quadratic q;
  std::vector<float> x0(kD, 0.1f);
  eng.reset(x0.data());
  eng.run(std::ref(q), {});
  const std::vector<float> first = eng.x();
  const std::vector<double> hist = eng.history();
  eng.reset(x0.data());
  CHECK(eng.status() == Status::Running);
  CHECK(eng.history().empty());
  eng.run(std::ref(q), {});
  CHECK(eng.x() == first);
  CHECK(eng.history() == hist);
  x0[3] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(eng.reset(x0.data()), mobiedit::Error);
}

TEST_CASE("invalid configs name the field") {
  auto field_of = [](Config c) -> std::string {
    try {
      c.validate();
    } catch (const mobiedit::Error& e) {
      CHECK(e.code() == mobiedit::ErrorCode::Config);
      return e.where();
    }
    return "";
  };
  Config c;
  c.h = 0.0;
  CHECK(field_of(c) == "ZOConfig.h");
  c = Config();
  c.lr = std::numeric_limits<double>::quiet_NaN();
  CHECK(field_of(c) == "ZOConfig.lr");
  c = Config();
  c.lr_min = 1.0;
  CHECK(field_of(c) == "ZOConfig.lr_min");
  c = Config();
  c.beta2 = 1.0;
  CHECK(field_of(c) == "ZOConfig.beta2");
  c = Config();
  c.max_evals = 14;  // < K = 15
  CHECK(field_of(c) == "ZOConfig.max_evals");
  c = Config();
  c.check_every = 0;
  CHECK(field_of(c) == "ZOConfig.check_every");
  c = Config();
  c.n_dirs = 0;
  CHECK(field_of(c) == "ZOConfig.n_dirs");
  CHECK(field_of(Config()).empty());
  CHECK_THROWS_AS(Engine(Config(), 0), mobiedit::Error);
  CHECK_THROWS_AS(mobiedit::parse_estimator("spsa"), mobiedit::Error);
}

TEST_CASE("cosine schedule goes from lr to lr_min") {
  Config c;
  c.lr = 1.0;
  c.lr_min = 0.1;
  c.max_steps = 10;
  c.lr_schedule = mobiedit::Schedule::Cosine;
  CHECK(mobiedit::lr_at(c, 0) == doctest::Approx(1.0));
  CHECK(mobiedit::lr_at(c, 5) == doctest::Approx(0.55));
  CHECK(mobiedit::lr_at(c, 10) == doctest::Approx(0.1));
  c.lr_schedule = mobiedit::Schedule::Constant;
  CHECK(mobiedit::lr_at(c, 7) == 1.0);
}

namespace {

float from_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// x after 10 steps on Quadratic with d = 10, as computed by the Python reference
// (mobiedit.zo, backend="python"; forward summing (x_j - t_j)^2 left to right in double).
void check_golden(const Config& c, const std::uint32_t (&bits)[10], bool exact) {
  Engine eng(c, 10);
  Quadratic q;
  REQUIRE(eng.run(std::ref(q), {}) == Status::MaxSteps);
  for (int j = 0; j < 10; ++j) {
    CAPTURE(j);
    if (exact) {
      std::uint32_t got;
      std::memcpy(&got, &eng.x()[j], sizeof got);
      CHECK(got == bits[j]);
    } else {
      CHECK(std::fabs(eng.x()[j] - from_bits(bits[j])) <= 1e-6);
    }
  }
}

}  // namespace

TEST_CASE("runs are bit-identical to the Python reference (golden; also under qemu-aarch64)") {
  Config fz;
  fz.estimator = mobiedit::Estimator::Fzoo;
  fz.optimizer = mobiedit::Optimizer::Adam;
  fz.n_dirs = 3;
  fz.h = 1e-2;
  fz.lr = 0.05;
  fz.max_steps = 10;
  fz.seed = 77;
  check_golden(fz, {0xbd85c647u, 0xbdf1d137u, 0x3e3add16u, 0x3d1c376eu, 0x3ed52aa2u, 0xbebaf8fcu,
                    0x3cec7421u, 0xbebedea6u, 0x3ed3cfb1u, 0x3eb7bb28u}, true);

  Config an = fz;
  an.estimator = mobiedit::Estimator::Antithetic;
  an.optimizer = mobiedit::Optimizer::Sgd;
  an.lr_min = 0.01;
  an.lr_schedule = mobiedit::Schedule::Cosine;
  an.momentum = 0.5;
  an.max_norm = 0.3;
  an.seed = (1ull << 40) + 5;
  check_golden(an, {0xbe126bfcu, 0xbdfe8e80u, 0xbbdf8643u, 0x3c317731u, 0x3e12357fu, 0xbdcba85bu,
                    0xbd70deadu, 0xbd4f7bfbu, 0x3d04fab9u, 0x3e03e1b2u}, true);

  Config pa = fz;
  pa.estimator = mobiedit::Estimator::Paper;
  pa.n_dirs = 2;
  pa.seed = 3;
  check_golden(pa, {0xbec663c0u, 0xbd10c1dau, 0x3de036c7u, 0x3e238107u, 0x3e80eba3u, 0xbe2d0890u,
                    0xbe33740au, 0x3e074bfcu, 0x3cb7b874u, 0x3eac0388u}, false);
}
