// Error type, Config validation and enum names (spec §2–§4); mirrors mobiedit/zo/config.py.
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <utility>

#include "mobiedit/engine.hpp"

namespace mobiedit {
namespace {

std::string compose(const std::string& where, const std::string& message, const std::string& fix) {
  std::string s = where.empty() ? message : where + ": " + message;
  if (!fix.empty()) s += " \xE2\x80\x94 fix: " + fix;  // " — fix: "
  return s;
}

[[noreturn]] void config_fail(const char* field, const std::string& message, const std::string& fix) {
  throw Error(ErrorCode::Config, std::string("ZOConfig.") + field, message, fix);
}

std::string interval(double lo, double hi, bool lo_open, bool hi_open) {
  std::ostringstream os;
  os << (lo_open ? "(" : "[") << lo << ", " << hi << (hi_open ? ")" : "]");
  return os.str();
}

void check_real(const char* field, double v, double lo, double hi, bool lo_open, bool hi_open) {
  const bool bad_lo = lo_open ? !(v > lo) : !(v >= lo);
  const bool bad_hi = hi_open ? !(v < hi) : !(v <= hi);
  if (!std::isfinite(v) || bad_lo || bad_hi) {
    std::ostringstream os;
    os << v << " is outside " << interval(lo, hi, lo_open, hi_open);
    config_fail(field, os.str(),
                std::string("set ") + field + " within " + interval(lo, hi, lo_open, hi_open));
  }
}

void check_int(const char* field, std::int64_t v, std::int64_t lo, std::int64_t hi) {
  if (v < lo || v > hi) {
    std::ostringstream os;
    os << v << " is outside [" << lo << ", " << hi << "]";
    std::ostringstream fix;
    fix << "set " << field << " within [" << lo << ", " << hi << "]";
    config_fail(field, os.str(), fix.str());
  }
}

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

}  // namespace

Error::Error(ErrorCode code, std::string where, const std::string& message, std::string fix)
    : std::runtime_error(compose(where, message, fix)),
      code_(code),
      where_(std::move(where)),
      message_(message),
      fix_(std::move(fix)) {}

int Config::rows() const noexcept {
  switch (estimator) {
    case Estimator::Paper: return 3 * n_dirs;
    case Estimator::Fzoo: return n_dirs + 1;
    case Estimator::Antithetic: return 2 * n_dirs;
  }
  return 0;
}

void Config::validate() const {
  if (estimator != Estimator::Paper && estimator != Estimator::Fzoo &&
      estimator != Estimator::Antithetic) {
    config_fail("estimator", "unknown estimator", "use one of paper, fzoo, antithetic");
  }
  check_int("n_dirs", n_dirs, 1, 1 << 20);
  check_real("h", h, 0.0, kInf, true, true);
  if (optimizer != Optimizer::Sgd && optimizer != Optimizer::Adam) {
    config_fail("optimizer", "unknown optimizer", "use one of sgd, adam");
  }
  check_real("lr", lr, 0.0, kInf, true, true);
  check_real("lr_min", lr_min, 0.0, lr, false, false);
  if (lr_schedule != Schedule::Constant && lr_schedule != Schedule::Cosine) {
    config_fail("lr_schedule", "unknown lr schedule", "use one of constant, cosine");
  }
  check_real("momentum", momentum, 0.0, 1.0, false, true);
  check_real("beta1", beta1, 0.0, 1.0, false, true);
  check_real("beta2", beta2, 0.0, 1.0, false, true);
  check_real("adam_eps", adam_eps, 0.0, kInf, true, true);
  check_real("max_norm", max_norm, 0.0, kInf, false, true);
  check_int("max_steps", max_steps, 1, kInt32Max);
  check_int("max_evals", max_evals, rows(), kInt64Max);
  check_int("check_every", check_every, 1, kInt32Max);
  check_real("loss_tol", loss_tol, 0.0, kInf, false, true);
  check_int("patience", patience, 0, kInt32Max);
  check_real("min_rel_improve", min_rel_improve, 0.0, 1.0, false, true);
  if (directions != Directions::Iid && directions != Directions::Coordinates) {
    config_fail("directions", "unknown directions", "use one of iid, coordinates");
  }
  if (normalise != Normalise::Spread && normalise != Normalise::Gradient) {
    config_fail("normalise", "unknown normalise", "use one of spread, gradient");
  }
  if (check_at != CheckAt::Update && check_at != CheckAt::Base) {
    config_fail("check_at", "unknown check_at", "use one of update, base");
  }
  if (normalise == Normalise::Gradient &&
      (estimator != Estimator::Fzoo || directions != Directions::Coordinates)) {
    config_fail("normalise",
                std::string("'gradient' needs estimator 'fzoo' on directions 'coordinates' (got '") +
                    estimator_name(estimator) + "' on '" + directions_name(directions) + "')",
                "set estimator='fzoo' and directions='coordinates', or normalise='spread'");
  }
}

const char* status_name(Status s) noexcept {
  switch (s) {
    case Status::Running: return "RUNNING";
    case Status::SuccessLoss: return "SUCCESS_LOSS";
    case Status::SuccessCheck: return "SUCCESS_CHECK";
    case Status::Plateau: return "PLATEAU";
    case Status::Budget: return "BUDGET";
    case Status::MaxSteps: return "MAX_STEPS";
    case Status::NonFinite: return "NONFINITE";
    case Status::Error: return "ERROR";
  }
  return "UNKNOWN";
}

const char* estimator_name(Estimator e) noexcept {
  switch (e) {
    case Estimator::Paper: return "paper";
    case Estimator::Fzoo: return "fzoo";
    case Estimator::Antithetic: return "antithetic";
  }
  return "unknown";
}

const char* optimizer_name(Optimizer o) noexcept {
  return o == Optimizer::Sgd ? "sgd" : o == Optimizer::Adam ? "adam" : "unknown";
}

const char* schedule_name(Schedule s) noexcept {
  return s == Schedule::Constant ? "constant" : s == Schedule::Cosine ? "cosine" : "unknown";
}

const char* directions_name(Directions d) noexcept {
  return d == Directions::Iid ? "iid" : d == Directions::Coordinates ? "coordinates" : "unknown";
}

Estimator parse_estimator(const std::string& name) {
  if (name == "paper") return Estimator::Paper;
  if (name == "fzoo") return Estimator::Fzoo;
  if (name == "antithetic") return Estimator::Antithetic;
  config_fail("estimator", "unknown value '" + name + "'", "use one of paper, fzoo, antithetic");
}

Optimizer parse_optimizer(const std::string& name) {
  if (name == "sgd") return Optimizer::Sgd;
  if (name == "adam") return Optimizer::Adam;
  config_fail("optimizer", "unknown value '" + name + "'", "use one of sgd, adam");
}

Schedule parse_schedule(const std::string& name) {
  if (name == "constant") return Schedule::Constant;
  if (name == "cosine") return Schedule::Cosine;
  config_fail("lr_schedule", "unknown value '" + name + "'", "use one of constant, cosine");
}

const char* normalise_name(Normalise n) noexcept {
  return n == Normalise::Spread ? "spread" : n == Normalise::Gradient ? "gradient" : "unknown";
}

const char* check_at_name(CheckAt c) noexcept {
  return c == CheckAt::Update ? "update" : c == CheckAt::Base ? "base" : "unknown";
}

CheckAt parse_check_at(const std::string& name) {
  if (name == "update") return CheckAt::Update;
  if (name == "base") return CheckAt::Base;
  config_fail("check_at", "unknown value '" + name + "'", "use one of update, base");
}

Normalise parse_normalise(const std::string& name) {
  if (name == "spread") return Normalise::Spread;
  if (name == "gradient") return Normalise::Gradient;
  config_fail("normalise", "unknown value '" + name + "'", "use one of spread, gradient");
}

Directions parse_directions(const std::string& name) {
  if (name == "iid") return Directions::Iid;
  if (name == "coordinates") return Directions::Coordinates;
  config_fail("directions", "unknown value '" + name + "'", "use one of iid, coordinates");
}

}  // namespace mobiedit
