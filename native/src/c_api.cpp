// Plain C ABI over the C++ engine (mobiedit/mobiedit_c.h). No exception crosses this boundary:
// each entry point converts mobiedit::Error / std::bad_alloc into a code + the handle's message.
#include "mobiedit/mobiedit_c.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "mobiedit/engine.hpp"

struct mobiedit_engine_t {
  std::unique_ptr<mobiedit::Engine> engine;
  std::string last_error;
};

namespace {

using mobiedit::ErrorCode;

constexpr const char* kNullHandle = "null engine handle — fix: call mobiedit_create() first";

int code_of(ErrorCode c) noexcept { return static_cast<int>(c); }

// Run f(); translate exceptions into a code and (if h) the handle's message.
template <typename F>
int guarded(mobiedit_engine_t* h, F&& f) noexcept {
  try {
    if (h != nullptr) h->last_error.clear();
    return f();
  } catch (const mobiedit::Error& e) {
    if (h != nullptr) h->last_error = e.what();
    return code_of(e.code());
  } catch (const std::bad_alloc&) {
    if (h != nullptr) h->last_error = "out of memory";
    return MOBIEDIT_ERR_INTERNAL;
  } catch (const std::exception& e) {
    if (h != nullptr) h->last_error = e.what();
    return MOBIEDIT_ERR_INTERNAL;
  } catch (...) {
    if (h != nullptr) h->last_error = "unknown internal error";
    return MOBIEDIT_ERR_INTERNAL;
  }
}

[[noreturn]] void invalid(const char* where, const std::string& message, const char* fix) {
  throw mobiedit::Error(ErrorCode::InvalidArgument, where, message, fix);
}

mobiedit::Engine& configured(mobiedit_engine_t* h) {
  if (!h->engine) {
    throw mobiedit::Error(ErrorCode::State, "engine", "not configured",
                          "call mobiedit_configure() first");
  }
  return *h->engine;
}

template <typename E>
E enum_field(int32_t v, int32_t count, const char* field, const char* fix) {
  if (v < 0 || v >= count) {
    throw mobiedit::Error(ErrorCode::Config, std::string("ZOConfig.") + field,
                          "unknown value " + std::to_string(v), fix);
  }
  return static_cast<E>(v);
}

mobiedit::Config to_cpp(const mobiedit_config_t& c) {
  if (c.struct_size != sizeof(mobiedit_config_t)) {
    invalid("mobiedit_config_t.struct_size", "is " + std::to_string(c.struct_size),
            "fill the struct with mobiedit_config_default() (header/library mismatch?)");
  }
  mobiedit::Config out;
  out.estimator = enum_field<mobiedit::Estimator>(c.estimator, 3, "estimator",
                                                  "use MOBIEDIT_EST_PAPER/FZOO/ANTITHETIC");
  out.optimizer = enum_field<mobiedit::Optimizer>(c.optimizer, 2, "optimizer",
                                                  "use MOBIEDIT_OPT_SGD/ADAM");
  out.lr_schedule = enum_field<mobiedit::Schedule>(c.lr_schedule, 2, "lr_schedule",
                                                   "use MOBIEDIT_LR_CONSTANT/COSINE");
  out.directions = enum_field<mobiedit::Directions>(c.directions, 2, "directions",
                                                    "use MOBIEDIT_DIRECTIONS_IID/COORDINATES");
  out.normalise = enum_field<mobiedit::Normalise>(c.normalise, 2, "normalise",
                                                  "use MOBIEDIT_NORMALISE_SPREAD/GRADIENT");
  out.check_at = enum_field<mobiedit::CheckAt>(c.check_at, 2, "check_at",
                                               "use MOBIEDIT_CHECK_AT_UPDATE/BASE");
  out.n_dirs = c.n_dirs;
  out.h = c.h;
  out.lr = c.lr;
  out.lr_min = c.lr_min;
  out.momentum = c.momentum;
  out.beta1 = c.beta1;
  out.beta2 = c.beta2;
  out.adam_eps = c.adam_eps;
  out.max_norm = c.max_norm;
  out.loss_tol = c.loss_tol;
  out.min_rel_improve = c.min_rel_improve;
  out.max_steps = c.max_steps;
  out.max_evals = c.max_evals;
  out.check_every = c.check_every;
  out.patience = c.patience;
  out.seed = c.seed;
  return out;
}

mobiedit::ForwardFn wrap(mobiedit_forward_fn f, void* user) {
  return [f, user](const float* D, int K, int d, float* L) { return f(user, D, K, d, L); };
}

mobiedit::CheckFn wrap(mobiedit_check_fn f, void* user) {
  if (f == nullptr) return {};
  return [f, user](const float* x, int d, int* ok) { return f(user, x, d, ok); };
}

int after_steps(mobiedit_engine_t* h, mobiedit::Status s, int32_t* status_out) {
  if (status_out != nullptr) *status_out = static_cast<int32_t>(s);
  if (s == mobiedit::Status::Error) {
    h->last_error = h->engine->message();
    return MOBIEDIT_ERR_CALLBACK;
  }
  return MOBIEDIT_OK;
}

}  // namespace

extern "C" {

int mobiedit_abi_version(void) { return MOBIEDIT_ABI_VERSION; }

int mobiedit_config_default(mobiedit_config_t* out) {
  if (out == nullptr) return MOBIEDIT_ERR_INVALID_ARGUMENT;
  const mobiedit::Config c;
  std::memset(out, 0, sizeof(*out));
  out->struct_size = sizeof(mobiedit_config_t);
  out->estimator = static_cast<int32_t>(c.estimator);
  out->n_dirs = c.n_dirs;
  out->optimizer = static_cast<int32_t>(c.optimizer);
  out->lr_schedule = static_cast<int32_t>(c.lr_schedule);
  out->directions = static_cast<int32_t>(c.directions);
  out->normalise = static_cast<int32_t>(c.normalise);
  out->check_at = static_cast<int32_t>(c.check_at);
  out->h = c.h;
  out->lr = c.lr;
  out->lr_min = c.lr_min;
  out->momentum = c.momentum;
  out->beta1 = c.beta1;
  out->beta2 = c.beta2;
  out->adam_eps = c.adam_eps;
  out->max_norm = c.max_norm;
  out->loss_tol = c.loss_tol;
  out->min_rel_improve = c.min_rel_improve;
  out->max_steps = c.max_steps;
  out->max_evals = c.max_evals;
  out->check_every = c.check_every;
  out->patience = c.patience;
  out->seed = c.seed;
  return MOBIEDIT_OK;
}

mobiedit_engine_t* mobiedit_create(void) { return new (std::nothrow) mobiedit_engine_t(); }

int mobiedit_configure(mobiedit_engine_t* h, const mobiedit_config_t* cfg, int32_t d) {
  if (h == nullptr) return MOBIEDIT_ERR_INVALID_ARGUMENT;
  return guarded(h, [&] {
    if (cfg == nullptr) invalid("cfg", "is NULL", "pass a mobiedit_config_t");
    h->engine = std::make_unique<mobiedit::Engine>(to_cpp(*cfg), d);
    return MOBIEDIT_OK;
  });
}

int32_t mobiedit_rows(const mobiedit_engine_t* h) {
  return (h == nullptr || !h->engine) ? -1 : h->engine->K();
}

int mobiedit_reset(mobiedit_engine_t* h, const float* x0) {
  if (h == nullptr) return MOBIEDIT_ERR_INVALID_ARGUMENT;
  return guarded(h, [&] {
    configured(h).reset(x0);
    return MOBIEDIT_OK;
  });
}

int mobiedit_step(mobiedit_engine_t* h, mobiedit_forward_fn forward, mobiedit_check_fn check,
                  void* user, int32_t* status_out) {
  if (h == nullptr) return MOBIEDIT_ERR_INVALID_ARGUMENT;
  return guarded(h, [&] {
    if (forward == nullptr) invalid("forward", "is NULL", "pass a forward callback");
    const mobiedit::Status s = configured(h).step(wrap(forward, user), wrap(check, user));
    return after_steps(h, s, status_out);
  });
}

int mobiedit_run(mobiedit_engine_t* h, const float* x0, mobiedit_forward_fn forward,
                 mobiedit_check_fn check, void* user, int32_t* status_out) {
  if (h == nullptr) return MOBIEDIT_ERR_INVALID_ARGUMENT;
  return guarded(h, [&] {
    if (forward == nullptr) invalid("forward", "is NULL", "pass a forward callback");
    mobiedit::Engine& e = configured(h);
    e.reset(x0);
    return after_steps(h, e.run(wrap(forward, user), wrap(check, user)), status_out);
  });
}

int mobiedit_result(const mobiedit_engine_t* h, mobiedit_result_t* out) {
  if (h == nullptr || out == nullptr) return MOBIEDIT_ERR_INVALID_ARGUMENT;
  if (!h->engine) return MOBIEDIT_ERR_STATE;
  const mobiedit::Engine& e = *h->engine;
  out->status = static_cast<int32_t>(e.status());
  out->d = e.d();
  out->steps = e.steps();
  out->evals = e.evals();
  out->checks = e.checks();
  out->x = e.x().data();
  out->history_len = static_cast<int64_t>(e.history().size());
  out->history = e.history().data();
  out->message = e.message().c_str();
  return MOBIEDIT_OK;
}

void mobiedit_free(mobiedit_engine_t* h) { delete h; }

const char* mobiedit_last_error(const mobiedit_engine_t* h) {
  return h == nullptr ? kNullHandle : h->last_error.c_str();
}

const char* mobiedit_status_name(int32_t status) {
  if (status < 0 || status > MOBIEDIT_ERROR) return "UNKNOWN";
  return mobiedit::status_name(static_cast<mobiedit::Status>(status));
}

int mobiedit_rank_one(const float* k, const float* v, const float* wk, const float* c,
                      int32_t d_in, int32_t d_out, float* u_out, float* w_out, char* err,
                      size_t err_len) {
  mobiedit_engine_t scratch;
  const int rc = guarded(&scratch, [&] {
    mobiedit::rank_one(k, v, wk, c, d_in, d_out, u_out, w_out);
    return MOBIEDIT_OK;
  });
  if (rc != MOBIEDIT_OK && err != nullptr && err_len > 0) {
    const std::size_t n = std::min(err_len - 1, scratch.last_error.size());
    std::memcpy(err, scratch.last_error.data(), n);
    err[n] = '\0';
  }
  return rc;
}

int mobiedit_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
  if (counter == nullptr || key == nullptr || out == nullptr) {
    return MOBIEDIT_ERR_INVALID_ARGUMENT;
  }
  const mobiedit::PhiloxCounter r = mobiedit::philox4x32_10(
      {counter[0], counter[1], counter[2], counter[3]}, {key[0], key[1]});
  for (int i = 0; i < 4; ++i) out[i] = r[i];
  return MOBIEDIT_OK;
}

int mobiedit_directions(int32_t kind, uint64_t seed, uint32_t step, uint32_t stream, int32_t n,
                        int32_t d, float* out) {
  if (out == nullptr || n < 0 || d < 0 ||
      (kind != MOBIEDIT_DIR_RADEMACHER && kind != MOBIEDIT_DIR_GAUSSIAN &&
       kind != MOBIEDIT_DIR_COORDINATES)) {
    return MOBIEDIT_ERR_INVALID_ARGUMENT;
  }
  try {
    mobiedit::fill_directions(static_cast<mobiedit::DirectionKind>(kind), seed, step, stream, n,
                              d, out);
  } catch (const std::bad_alloc&) {
    return MOBIEDIT_ERR_INTERNAL;
  }
  return MOBIEDIT_OK;
}

}  // extern "C"
