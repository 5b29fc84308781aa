// MobiEdit native ZO engine: C++17 API (spec docs/zo_spec.md §2–§5).
//
// The engine runs the forward-only value search of spec §4 and computes the same numbers as the
// Python reference mobiedit/zo (bit-identical for Rademacher and coordinate directions; Gaussians
// within libm rounding). It depends on the C++ standard library only and holds no global state: every run's
// state lives in one Engine object, which is not thread-safe (one thread at a time).
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "mobiedit/philox.hpp"

namespace mobiedit {

enum class Estimator { Paper = 0, Fzoo = 1, Antithetic = 2 };
enum class Optimizer { Sgd = 0, Adam = 1 };
enum class Schedule { Constant = 0, Cosine = 1 };
// How directions are drawn: the estimator's own i.i.d. kind (Gaussian for paper, Rademacher
// otherwise) or signed coordinate vectors, a fresh permutation per cycle of d (philox.hpp).
enum class Directions { Iid = 0, Coordinates = 1 };
// How FZOO sizes a step: by the spread of the step's own losses, or (coordinate directions
// only) by the whole gradient's norm estimated from every coordinate's latest slope (spec §2).
enum class Normalise { Spread = 0, Gradient = 1 };
// When the loop's check runs (docs/zo_spec.md §4): after the update, on the new delta (Update);
// or from the second step on, on the step's evaluated point before its update (Base).
enum class CheckAt { Update = 0, Base = 1 };
enum class Status {
  Running = 0,
  SuccessLoss = 1,
  SuccessCheck = 2,
  Plateau = 3,
  Budget = 4,
  MaxSteps = 5,
  NonFinite = 6,
  Error = 7,
};
enum class ErrorCode {
  InvalidArgument = 1,  // wrong pointer / size / shape
  Config = 2,           // a configuration field is out of range
  State = 3,            // call not allowed in the engine's current state
  Callback = 4,         // a callback failed
  Numerical = 5,        // NaN/Inf or a singular quantity
  Internal = 6,         // out of memory or a bug
};

// The one exception type of the library. what() = "<where>: <message> — fix: <fix>".
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string where, const std::string& message, std::string fix);
  ErrorCode code() const noexcept { return code_; }
  const std::string& where() const noexcept { return where_; }
  const std::string& message() const noexcept { return message_; }
  const std::string& fix() const noexcept { return fix_; }

 private:
  ErrorCode code_;
  std::string where_;
  std::string message_;
  std::string fix_;
};

// Every knob of the loop; defaults equal mobiedit.zo.ZOConfig's. validate() throws
// Error(ErrorCode::Config) naming the first invalid field.
struct Config {
  Estimator estimator = Estimator::Paper;
  int n_dirs = 5;
  double h = 1e-3;
  Optimizer optimizer = Optimizer::Adam;
  double lr = 0.05;
  double lr_min = 0.0;
  Schedule lr_schedule = Schedule::Constant;
  double momentum = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double adam_eps = 1e-8;
  double max_norm = 0.0;        // 0 disables the clamp
  std::int64_t max_steps = 200;
  std::int64_t max_evals = 1000000;
  std::int64_t check_every = 1;
  double loss_tol = 0.0;        // 0 disables SUCCESS_LOSS
  std::int64_t patience = 0;    // 0 disables PLATEAU
  double min_rel_improve = 0.0;
  std::uint64_t seed = 0;
  Directions directions = Directions::Iid;
  Normalise normalise = Normalise::Spread;  // Gradient: fzoo on coordinates only
  CheckAt check_at = CheckAt::Update;

  // Rows per forward batch K: paper 3n, fzoo n+1, antithetic 2n.
  int rows() const noexcept;
  void validate() const;
};

// forward: evaluate the K rows of deltas [K, d] (row-major) and write K losses; return 0, or
// nonzero on failure (the run then stops with Status::Error).
using ForwardFn = std::function<int(const float* deltas, int K, int d, float* losses_out)>;
// check: write a nonzero *ok_out if x [d] passes the success test; return 0, nonzero on failure.
using CheckFn = std::function<int(const float* x, int d, int* ok_out)>;

const char* status_name(Status s) noexcept;
const char* estimator_name(Estimator e) noexcept;
const char* optimizer_name(Optimizer o) noexcept;
const char* schedule_name(Schedule s) noexcept;
const char* directions_name(Directions d) noexcept;
const char* normalise_name(Normalise n) noexcept;
const char* check_at_name(CheckAt c) noexcept;
// Parse names as used by mobiedit.zo ("paper", "sgd", "cosine", ...); throw Error(Config).
Estimator parse_estimator(const std::string& name);
Optimizer parse_optimizer(const std::string& name);
Schedule parse_schedule(const std::string& name);
Directions parse_directions(const std::string& name);
Normalise parse_normalise(const std::string& name);
CheckAt parse_check_at(const std::string& name);

// One run of the value search. Invariants: status() == Running until a stop rule fires; x()
// always holds finite values (a non-finite update is discarded and ends the run NonFinite).
class Engine {
 public:
  // Validates cfg (Error(Config)) and d >= 1 (Error(InvalidArgument)); starts at x = 0.
  Engine(const Config& cfg, int d);

  // Start a new run at x0 (d floats; nullptr means zeros). Throws Error(InvalidArgument /
  // Numerical) for a non-finite x0; the previous run's results are discarded.
  void reset(const float* x0);
  // One iteration of the spec's loop; returns the status (Running if not finished).
  // Throws Error(State) if the run is already finished. A callback returning nonzero ends the
  // run with Status::Error (message() says which); an exception thrown by a callback does too
  // and is then rethrown.
  Status step(const ForwardFn& forward, const CheckFn& check);
  // step() until the status is no longer Running.
  Status run(const ForwardFn& forward, const CheckFn& check);

  Status status() const noexcept { return status_; }
  const std::vector<float>& x() const noexcept { return x_; }
  const std::vector<double>& history() const noexcept { return history_; }
  const std::string& message() const noexcept { return message_; }
  std::int64_t steps() const noexcept { return steps_; }
  std::int64_t evals() const noexcept { return evals_; }
  std::int64_t checks() const noexcept { return checks_; }
  int d() const noexcept { return d_; }
  int K() const noexcept { return K_; }
  const Config& config() const noexcept { return cfg_; }

 private:
  Status finish(Status s, std::string message);
  void propose(std::int64_t step);
  double estimate();
  double estimate_gradient_scaled();
  void update(std::int64_t step);
  bool call_check(const CheckFn& check, std::int64_t step);
  // call_check at the loop's point-th delta (every check_every-th from the first update on)
  bool check_point(const CheckFn& check, std::int64_t step, std::int64_t point);

  Config cfg_;
  int d_;
  int K_;
  std::vector<float> x_, x_new_, g_, U_, D_, L_, m_, v_, sign_;
  std::vector<std::int32_t> perm_;  // coordinate directions' scratch (d each)
  std::vector<double> acc_, coef_, history_;
  std::vector<double> slopes_;       // normalise=gradient: latest slope per coordinate (d)
  std::vector<std::uint8_t> seen_;   // normalise=gradient: coordinate measured this run (d)
  std::vector<std::size_t> coords_;  // normalise=gradient: each row's coordinate (n)
  std::int64_t n_seen_ = 0;
  std::int64_t step_idx_ = 0, steps_ = 0, evals_ = 0, checks_ = 0, since_best_ = 0;
  double best_ = 0.0;
  Status status_ = Status::Running;
  std::string message_;
};

// Learning rate of 0-based step (spec §3).
double lr_at(const Config& cfg, std::int64_t step) noexcept;

// ROME rank-one factors (spec §5): u = v - wk [d_out]; w = c / (c . k) [d_in] (c may be
// nullptr: c = k). Throws Error(InvalidArgument) for null pointers / sizes < 1 and
// Error(Numerical) for non-finite inputs or a zero / negligible c . k.
void rank_one(const float* k, const float* v, const float* wk, const float* c, int d_in,
              int d_out, float* u_out, float* w_out);

}  // namespace mobiedit
