// The loop driver (spec §4): Engine construction, reset, step and run.
// Mirrors mobiedit/zo/loop.py (ZOLoop) statement for statement.
#include "mobiedit/engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <string>
#include <utility>

#include "numeric.hpp"

namespace mobiedit {
namespace {

std::string at_step(const char* what, std::int64_t step) {
  return std::string(what) + " at step " + std::to_string(step);
}

}  // namespace

Engine::Engine(const Config& cfg, int d) : cfg_(cfg), d_(d), K_(0) {
  cfg_.validate();
  if (d < 1) {
    throw Error(ErrorCode::InvalidArgument, "d", "delta length " + std::to_string(d) + " < 1",
                "pass the hidden size (>= 1)");
  }
  K_ = cfg_.rows();
  const auto ud = static_cast<std::size_t>(d);
  const auto un = static_cast<std::size_t>(cfg_.n_dirs);
  const auto uk = static_cast<std::size_t>(K_);
  x_.assign(ud, 0.0f);
  x_new_.assign(ud, 0.0f);
  g_.assign(ud, 0.0f);
  m_.assign(ud, 0.0f);
  v_.assign(ud, 0.0f);
  acc_.assign(ud, 0.0);
  coef_.assign(un, 0.0);
  U_.assign(un * ud, 0.0f);
  if (cfg_.directions == Directions::Coordinates) {
    perm_.assign(ud, 0);
    sign_.assign(ud, 0.0f);
  }
  if (cfg_.normalise == Normalise::Gradient) {
    slopes_.assign(ud, 0.0);
    seen_.assign(ud, 0);
    coords_.assign(un, 0);
  }
  D_.assign(uk * ud, 0.0f);
  L_.assign(uk, 0.0f);
  reset(nullptr);
}

void Engine::reset(const float* x0) {
  const auto d = static_cast<std::size_t>(d_);
  if (x0 != nullptr && !detail::all_finite(x0, d)) {
    throw Error(ErrorCode::Numerical, "x0", "contains NaN or Inf", "pass a finite start delta");
  }
  if (x0 != nullptr) {
    std::memcpy(x_.data(), x0, d * sizeof(float));
  } else {
    std::fill(x_.begin(), x_.end(), 0.0f);
  }
  std::fill(m_.begin(), m_.end(), 0.0f);
  std::fill(v_.begin(), v_.end(), 0.0f);
  history_.clear();
  std::fill(slopes_.begin(), slopes_.end(), 0.0);
  std::fill(seen_.begin(), seen_.end(), std::uint8_t{0});
  n_seen_ = 0;
  step_idx_ = steps_ = evals_ = checks_ = since_best_ = 0;
  best_ = std::numeric_limits<double>::infinity();
  status_ = Status::Running;
  message_.clear();
}

Status Engine::finish(Status s, std::string message) {
  status_ = s;
  message_ = std::move(message);
  return s;
}

Status Engine::step(const ForwardFn& forward, const CheckFn& check) {
  if (status_ != Status::Running) {
    throw Error(ErrorCode::State, "Engine::step",
                std::string("run already finished with ") + status_name(status_),
                "call reset() to start a new run");
  }
  if (!forward) {
    throw Error(ErrorCode::InvalidArgument, "forward", "no forward callback", "pass one");
  }
  const std::int64_t step = step_idx_;
  if (evals_ + K_ > cfg_.max_evals) return finish(Status::Budget, "");
  propose(step);
  ++steps_;
  int rc = 0;
  try {
    rc = forward(D_.data(), K_, d_, L_.data());
  } catch (const std::exception& e) {
    finish(Status::Error, at_step("forward callback threw", step) + ": " + e.what());
    throw;
  } catch (...) {
    finish(Status::Error, at_step("forward callback threw", step));
    throw;
  }
  if (rc != 0) {
    return finish(Status::Error,
                  at_step("forward callback returned error code", step) + " (" +
                      std::to_string(rc) + ")");
  }
  evals_ += K_;
  if (!detail::all_finite(L_.data(), L_.size())) {
    return finish(Status::NonFinite, at_step("non-finite loss", step));
  }
  const double base = estimate();
  history_.push_back(base);
  if (cfg_.loss_tol > 0.0 && base < cfg_.loss_tol) return finish(Status::SuccessLoss, "");
  if (cfg_.check_at == CheckAt::Base && check_point(check, step, step)) {
    return status_ == Status::Error ? status_ : finish(Status::SuccessCheck, "");
  }
  if (base < best_ * (1.0 - cfg_.min_rel_improve)) {
    best_ = base;
    since_best_ = 0;
  } else {
    ++since_best_;
  }
  update(step);
  if (!detail::all_finite(x_new_.data(), x_new_.size())) {
    return finish(Status::NonFinite, at_step("non-finite delta after update", step));
  }
  x_.swap(x_new_);
  step_idx_ = step + 1;
  if (cfg_.check_at == CheckAt::Update && check_point(check, step, step + 1)) {
    return status_ == Status::Error ? status_ : finish(Status::SuccessCheck, "");
  }
  if (cfg_.patience > 0 && since_best_ >= cfg_.patience) return finish(Status::Plateau, "");
  if (step_idx_ >= cfg_.max_steps) return finish(Status::MaxSteps, "");
  return Status::Running;
}

bool Engine::check_point(const CheckFn& check, std::int64_t step, std::int64_t point) {
  return check && point >= 1 && point % cfg_.check_every == 0 && call_check(check, step);
}

// Calls check(x); returns true if it passed or failed (status_ is then Error).
bool Engine::call_check(const CheckFn& check, std::int64_t step) {
  ++checks_;
  int ok = 0;
  int rc = 0;
  try {
    rc = check(x_.data(), d_, &ok);
  } catch (const std::exception& e) {
    finish(Status::Error, at_step("check callback threw", step) + ": " + e.what());
    throw;
  } catch (...) {
    finish(Status::Error, at_step("check callback threw", step));
    throw;
  }
  if (rc != 0) {
    finish(Status::Error, at_step("check callback returned error code", step) + " (" +
                              std::to_string(rc) + ")");
    return true;
  }
  return ok != 0;
}

Status Engine::run(const ForwardFn& forward, const CheckFn& check) {
  while (status_ == Status::Running) step(forward, check);
  return status_;
}

}  // namespace mobiedit
