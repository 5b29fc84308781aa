// The plain C ABI (mobiedit_c.h): lifecycle, results, error codes and messages.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "mobiedit/mobiedit_c.h"

namespace {

struct Target {
  std::vector<float> t;
  int forward_calls = 0;
  int fail_at = -1;     // forward returns nonzero on this call (1-based)
  int succeed_at = -1;  // check reports success on this call (1-based)
  int check_calls = 0;
};

int quad_forward(void* user, const float* D, int K, int d, float* L) {
  auto* s = static_cast<Target*>(user);
  if (++s->forward_calls == s->fail_at) return 42;
  for (int r = 0; r < K; ++r) {
    double acc = 0;
    for (int j = 0; j < d; ++j) {
      const double e = static_cast<double>(D[r * d + j]) - s->t[j];
      acc += e * e;
    }
    L[r] = static_cast<float>(acc);
  }
  return 0;
}

int count_check(void* user, const float*, int, int* ok) {
  auto* s = static_cast<Target*>(user);
  *ok = ++s->check_calls == s->succeed_at;
  return 0;
}

mobiedit_config_t small_config() {
  mobiedit_config_t c;
  REQUIRE(mobiedit_config_default(&c) == MOBIEDIT_OK);
  c.estimator = MOBIEDIT_EST_ANTITHETIC;
  c.n_dirs = 4;
  c.h = 1e-2;
  c.max_steps = 100;
  return c;
}

}  // namespace

TEST_CASE("create / configure / run / result / free") {
  mobiedit_engine_t* h = mobiedit_create();
  REQUIRE(h != nullptr);
  const mobiedit_config_t c = small_config();
  REQUIRE(mobiedit_configure(h, &c, 8) == MOBIEDIT_OK);
  CHECK(mobiedit_rows(h) == 8);
  Target s{std::vector<float>(8, 0.5f)};
  int32_t status = -1;
  REQUIRE(mobiedit_run(h, nullptr, quad_forward, nullptr, &s, &status) == MOBIEDIT_OK);
  CHECK(status == MOBIEDIT_MAX_STEPS);
  mobiedit_result_t r;
  REQUIRE(mobiedit_result(h, &r) == MOBIEDIT_OK);
  CHECK(r.status == MOBIEDIT_MAX_STEPS);
  CHECK(r.d == 8);
  CHECK(r.steps == 100);
  CHECK(r.evals == 800);
  CHECK(r.checks == 0);
  REQUIRE(r.history_len == 100);
  CHECK(r.history[99] < 0.5 * r.history[0]);
  CHECK(std::string(r.message).empty());
  CHECK(std::string(mobiedit_status_name(r.status)) == "MAX_STEPS");
  mobiedit_free(h);
}

TEST_CASE("whole-gradient steps on coordinate directions: defaults, run, and reset") {
  mobiedit_config_t c;
  REQUIRE(mobiedit_config_default(&c) == MOBIEDIT_OK);
  CHECK(c.normalise == MOBIEDIT_NORMALISE_SPREAD);
  c.estimator = MOBIEDIT_EST_FZOO;
  c.directions = MOBIEDIT_DIRECTIONS_COORDINATES;
  c.normalise = MOBIEDIT_NORMALISE_GRADIENT;
  c.optimizer = MOBIEDIT_OPT_SGD;
  c.lr = 0.05;
  c.n_dirs = 3;
  c.h = 1e-2;
  c.max_steps = 90;
  mobiedit_engine_t* h = mobiedit_create();
  REQUIRE(mobiedit_configure(h, &c, 9) == MOBIEDIT_OK);
  CHECK(mobiedit_rows(h) == 4);
  std::vector<std::vector<double>> runs;
  for (int run = 0; run < 2; ++run) {  // configure again: the slope table starts empty again
    if (run == 1) REQUIRE(mobiedit_configure(h, &c, 9) == MOBIEDIT_OK);
    Target s{std::vector<float>(9, 0.5f)};
    int32_t status = -1;
    REQUIRE(mobiedit_run(h, nullptr, quad_forward, nullptr, &s, &status) == MOBIEDIT_OK);
    mobiedit_result_t r;
    REQUIRE(mobiedit_result(h, &r) == MOBIEDIT_OK);
    REQUIRE(r.history_len == 90);
    CHECK(r.history[89] < 0.1 * r.history[0]);
    runs.emplace_back(r.history, r.history + r.history_len);
  }
  CHECK(runs[0] == runs[1]);
  mobiedit_free(h);
}

TEST_CASE("step-wise API, check callback, and step after the end") {
  mobiedit_engine_t* h = mobiedit_create();
  const mobiedit_config_t c = small_config();
  REQUIRE(mobiedit_configure(h, &c, 8) == MOBIEDIT_OK);
  Target s{std::vector<float>(8, 0.5f)};
  s.succeed_at = 3;
  std::vector<float> x0(8, 0.25f);
  REQUIRE(mobiedit_reset(h, x0.data()) == MOBIEDIT_OK);
  int32_t status = MOBIEDIT_RUNNING;
  int n = 0;
  while (status == MOBIEDIT_RUNNING) {
    REQUIRE(mobiedit_step(h, quad_forward, count_check, &s, &status) == MOBIEDIT_OK);
    ++n;
  }
  CHECK(status == MOBIEDIT_SUCCESS_CHECK);
  CHECK(n == 3);
  CHECK(mobiedit_step(h, quad_forward, nullptr, &s, &status) == MOBIEDIT_ERR_STATE);
  CHECK(std::string(mobiedit_last_error(h)).find("reset") != std::string::npos);
  mobiedit_free(h);
}

TEST_CASE("a failing callback returns MOBIEDIT_ERR_CALLBACK with status ERROR") {
  mobiedit_engine_t* h = mobiedit_create();
  const mobiedit_config_t c = small_config();
  REQUIRE(mobiedit_configure(h, &c, 8) == MOBIEDIT_OK);
  Target s{std::vector<float>(8, 0.5f)};
  s.fail_at = 5;
  int32_t status = -1;
  CHECK(mobiedit_run(h, nullptr, quad_forward, nullptr, &s, &status) == MOBIEDIT_ERR_CALLBACK);
  CHECK(status == MOBIEDIT_ERROR);
  const std::string msg = mobiedit_last_error(h);
  CHECK(msg.find("forward callback returned error code at step 4 (42)") != std::string::npos);
  mobiedit_result_t r;
  REQUIRE(mobiedit_result(h, &r) == MOBIEDIT_OK);
  CHECK(r.status == MOBIEDIT_ERROR);
  CHECK(r.steps == 5);
  mobiedit_free(h);
}

TEST_CASE("argument and config errors return codes and name the field") {
  CHECK(mobiedit_configure(nullptr, nullptr, 8) == MOBIEDIT_ERR_INVALID_ARGUMENT);
  CHECK(std::string(mobiedit_last_error(nullptr)).find("null engine") != std::string::npos);
  mobiedit_engine_t* h = mobiedit_create();
  int32_t status = 0;
  CHECK(mobiedit_run(h, nullptr, quad_forward, nullptr, nullptr, &status) == MOBIEDIT_ERR_STATE);
  CHECK(std::string(mobiedit_last_error(h)).find("mobiedit_configure") != std::string::npos);
  mobiedit_result_t r;
  CHECK(mobiedit_result(h, &r) == MOBIEDIT_ERR_STATE);
  CHECK(mobiedit_rows(h) == -1);

  mobiedit_config_t c = small_config();
  c.struct_size = 8;
  CHECK(mobiedit_configure(h, &c, 8) == MOBIEDIT_ERR_INVALID_ARGUMENT);
  CHECK(std::string(mobiedit_last_error(h)).find("struct_size") != std::string::npos);
  c = small_config();
  c.optimizer = 9;
  CHECK(mobiedit_configure(h, &c, 8) == MOBIEDIT_ERR_CONFIG);
  CHECK(std::string(mobiedit_last_error(h)).find("ZOConfig.optimizer") != std::string::npos);
  c = small_config();
  c.directions = 2;
  CHECK(mobiedit_configure(h, &c, 8) == MOBIEDIT_ERR_CONFIG);
  CHECK(std::string(mobiedit_last_error(h)).find("ZOConfig.directions") != std::string::npos);
  c = small_config();
  c.normalise = 2;
  CHECK(mobiedit_configure(h, &c, 8) == MOBIEDIT_ERR_CONFIG);
  CHECK(std::string(mobiedit_last_error(h)).find("ZOConfig.normalise") != std::string::npos);
  c = small_config();
  c.check_at = 2;
  CHECK(mobiedit_configure(h, &c, 8) == MOBIEDIT_ERR_CONFIG);
  CHECK(std::string(mobiedit_last_error(h)).find("ZOConfig.check_at") != std::string::npos);
  c = small_config();
  c.normalise = MOBIEDIT_NORMALISE_GRADIENT;  // antithetic on iid directions: refused
  CHECK(mobiedit_configure(h, &c, 8) == MOBIEDIT_ERR_CONFIG);
  CHECK(std::string(mobiedit_last_error(h)).find("ZOConfig.normalise") != std::string::npos);
  c = small_config();
  c.momentum = 1.5;
  CHECK(mobiedit_configure(h, &c, 8) == MOBIEDIT_ERR_CONFIG);
  CHECK(std::string(mobiedit_last_error(h)).find("ZOConfig.momentum") != std::string::npos);
  c = small_config();
  CHECK(mobiedit_configure(h, &c, 0) == MOBIEDIT_ERR_INVALID_ARGUMENT);
  REQUIRE(mobiedit_configure(h, &c, 8) == MOBIEDIT_OK);
  CHECK(std::string(mobiedit_last_error(h)).empty());
  CHECK(mobiedit_run(h, nullptr, nullptr, nullptr, nullptr, &status) ==
        MOBIEDIT_ERR_INVALID_ARGUMENT);
  std::vector<float> bad(8, 0.0f);
  bad[2] = NAN;
  CHECK(mobiedit_reset(h, bad.data()) == MOBIEDIT_ERR_NUMERICAL);
  mobiedit_free(h);
  mobiedit_free(nullptr);
}

TEST_CASE("rank-one, philox and directions through the C ABI") {
  const float k[3] = {1.0f, 2.0f, 2.0f};
  const float v[2] = {1.0f, -1.0f};
  const float wk[2] = {0.5f, 0.5f};
  float u[2], w[3];
  char err[128] = "untouched";
  REQUIRE(mobiedit_rank_one(k, v, wk, nullptr, 3, 2, u, w, err, sizeof err) == MOBIEDIT_OK);
  CHECK(u[0] == 0.5f);
  CHECK(u[1] == -1.5f);
  CHECK(w[0] == doctest::Approx(1.0 / 9.0));
  CHECK(w[2] == doctest::Approx(2.0 / 9.0));
  const float zero[3] = {0, 0, 0};
  CHECK(mobiedit_rank_one(zero, v, wk, nullptr, 3, 2, u, w, err, sizeof err) ==
        MOBIEDIT_ERR_NUMERICAL);
  CHECK(std::string(err).find("c . k*") != std::string::npos);
  char tiny[4];
  CHECK(mobiedit_rank_one(nullptr, v, wk, nullptr, 3, 2, u, w, tiny, sizeof tiny) ==
        MOBIEDIT_ERR_INVALID_ARGUMENT);
  CHECK(std::strlen(tiny) == 3);

  const uint32_t ctr[4] = {0, 0, 0, 0}, key[2] = {0, 0};
  uint32_t out[4];
  REQUIRE(mobiedit_philox4x32_10(ctr, key, out) == MOBIEDIT_OK);
  CHECK(out[0] == 0x6627e8d5u);
  CHECK(out[3] == 0x9b00dbd8u);
  std::vector<float> dirs(14);
  REQUIRE(mobiedit_directions(MOBIEDIT_DIR_RADEMACHER, 0x123456789ABCDEFull, 5, 0, 2, 7,
                              dirs.data()) == MOBIEDIT_OK);
  CHECK(dirs[1] == 1.0f);
  CHECK(dirs[13] == -1.0f);
  CHECK(mobiedit_directions(5, 0, 0, 0, 1, 1, dirs.data()) == MOBIEDIT_ERR_INVALID_ARGUMENT);
  // coordinate directions: seed 3, d 10 — cycle 0 is perm {2,0,9,5,8,3,1,4,6,7}, signs
  // {-,+,+,+,-,...} (tests/test_coordinate_directions.py pins the same draw)
  std::vector<float> cd(20);
  REQUIRE(mobiedit_directions(MOBIEDIT_DIR_COORDINATES, 3, 1, 0, 2, 10, cd.data()) == MOBIEDIT_OK);
  const float s10 = static_cast<float>(std::sqrt(10.0));
  CHECK(cd[9] == s10);       // step 1 row 0 = slot 2: +e_9
  CHECK(cd[10 + 5] == s10);  // step 1 row 1 = slot 3: +e_5
  int nonzero = 0;
  for (float x : cd) nonzero += x != 0.0f;
  CHECK(nonzero == 2);
  CHECK(mobiedit_abi_version() == MOBIEDIT_ABI_VERSION);
}
