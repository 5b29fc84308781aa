/* MobiEdit native ZO engine: plain C ABI (for Android JNI / other languages).
 *
 * Semantics: docs/zo_spec.md. Every function returns a mobiedit_code (0 = MOBIEDIT_OK) unless
 * noted; on a nonzero code, mobiedit_last_error(handle) gives a one-line message naming the
 * argument/field and a fix. No function throws or aborts; no global state (all state is in the
 * handle; the handle is not thread-safe: use one thread at a time per handle).
 *
 * Lifetimes: pointers in mobiedit_result_t and the string of mobiedit_last_error are owned by
 * the handle and stay valid until the next call on that handle (or mobiedit_free).
 */
#ifndef MOBIEDIT_MOBIEDIT_C_H
#define MOBIEDIT_MOBIEDIT_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define MOBIEDIT_API __declspec(dllexport)
#else
#define MOBIEDIT_API __attribute__((visibility("default")))
#endif

#define MOBIEDIT_ABI_VERSION 2  /* 2: mobiedit_config_t.check_at (sizeof grew) */

typedef enum mobiedit_code {
  MOBIEDIT_OK = 0,
  MOBIEDIT_ERR_INVALID_ARGUMENT = 1, /* null pointer, bad size, bad struct_size */
  MOBIEDIT_ERR_CONFIG = 2,           /* a config field is out of range */
  MOBIEDIT_ERR_STATE = 3,            /* e.g. step after the run finished, or not configured */
  MOBIEDIT_ERR_CALLBACK = 4,         /* a callback returned nonzero: status is ERROR */
  MOBIEDIT_ERR_NUMERICAL = 5,        /* NaN/Inf input or singular quantity */
  MOBIEDIT_ERR_INTERNAL = 6          /* out of memory or a bug */
} mobiedit_code;

typedef enum mobiedit_status {
  MOBIEDIT_RUNNING = 0,
  MOBIEDIT_SUCCESS_LOSS = 1,
  MOBIEDIT_SUCCESS_CHECK = 2,
  MOBIEDIT_PLATEAU = 3,
  MOBIEDIT_BUDGET = 4,
  MOBIEDIT_MAX_STEPS = 5,
  MOBIEDIT_NONFINITE = 6,
  MOBIEDIT_ERROR = 7
} mobiedit_status;

typedef enum mobiedit_estimator {
  MOBIEDIT_EST_PAPER = 0,
  MOBIEDIT_EST_FZOO = 1,
  MOBIEDIT_EST_ANTITHETIC = 2
} mobiedit_estimator;

typedef enum mobiedit_optimizer { MOBIEDIT_OPT_SGD = 0, MOBIEDIT_OPT_ADAM = 1 } mobiedit_optimizer;

typedef enum mobiedit_schedule {
  MOBIEDIT_LR_CONSTANT = 0,
  MOBIEDIT_LR_COSINE = 1
} mobiedit_schedule;

typedef enum mobiedit_direction_kind {
  MOBIEDIT_DIR_RADEMACHER = 0,
  MOBIEDIT_DIR_GAUSSIAN = 1,
  MOBIEDIT_DIR_COORDINATES = 2
} mobiedit_direction_kind;

/* mobiedit_config_t.directions: the estimator's own i.i.d. kind, or coordinate directions. */
typedef enum mobiedit_config_directions {
  MOBIEDIT_DIRECTIONS_IID = 0,
  MOBIEDIT_DIRECTIONS_COORDINATES = 1
} mobiedit_config_directions;

/* mobiedit_config_t.normalise: FZOO's step size from the step's own loss spread, or (FZOO on
 * coordinate directions only) from the whole gradient's norm (docs/zo_spec.md §2). */
typedef enum mobiedit_config_normalise {
  MOBIEDIT_NORMALISE_SPREAD = 0,
  MOBIEDIT_NORMALISE_GRADIENT = 1
} mobiedit_config_normalise;

/* mobiedit_config_t.check_at: the loop's check after the update, on the new delta; or, from the
 * second step on, on the step's evaluated point before its update (FZOO's row 0: a host answers
 * it from that row, docs/zo_spec.md §4). */
typedef enum mobiedit_config_check_at {
  MOBIEDIT_CHECK_AT_UPDATE = 0,
  MOBIEDIT_CHECK_AT_BASE = 1
} mobiedit_config_check_at;

/* Fill with mobiedit_config_default(); struct_size guards against ABI mismatch. */
typedef struct mobiedit_config_t {
  uint32_t struct_size; /* = sizeof(mobiedit_config_t) */
  int32_t estimator;    /* mobiedit_estimator */
  int32_t n_dirs;
  int32_t optimizer;    /* mobiedit_optimizer */
  int32_t lr_schedule;  /* mobiedit_schedule */
  double h;
  double lr;
  double lr_min;
  double momentum;
  double beta1;
  double beta2;
  double adam_eps;
  double max_norm;        /* 0 disables */
  double loss_tol;        /* 0 disables */
  double min_rel_improve;
  int64_t max_steps;
  int64_t max_evals;
  int64_t check_every;
  int64_t patience;       /* 0 disables */
  uint64_t seed;
  int32_t directions;     /* mobiedit_config_directions */
  int32_t normalise;      /* mobiedit_config_normalise (fills what was the struct's tail padding:
                             sizeof is unchanged, and mobiedit_config_default() sets SPREAD) */
  int32_t check_at;       /* mobiedit_config_check_at (mobiedit_config_default() sets UPDATE) */
} mobiedit_config_t;

typedef struct mobiedit_result_t {
  int32_t status; /* mobiedit_status */
  int32_t d;
  int64_t steps;  /* forward calls made */
  int64_t evals;  /* losses evaluated (K per forward call) */
  int64_t checks; /* check calls made */
  const float* x; /* [d], current delta */
  int64_t history_len;
  const double* history; /* [history_len], base loss per completed estimate */
  const char* message;   /* "" or detail for NONFINITE / ERROR */
} mobiedit_result_t;

typedef struct mobiedit_engine_t mobiedit_engine_t;

/* Evaluate K rows of deltas [K, d] (row-major) and write K losses. Return 0, nonzero on error. */
typedef int (*mobiedit_forward_fn)(void* user, const float* deltas, int K, int d,
                                   float* losses_out);
/* Set *ok_out nonzero if x [d] passes the success test. Return 0, nonzero on error. */
typedef int (*mobiedit_check_fn)(void* user, const float* x, int d, int* ok_out);

MOBIEDIT_API int mobiedit_abi_version(void);
/* Defaults equal mobiedit.zo.ZOConfig's. Returns MOBIEDIT_ERR_INVALID_ARGUMENT for NULL. */
MOBIEDIT_API int mobiedit_config_default(mobiedit_config_t* out);

/* A new, unconfigured engine; NULL only when out of memory. */
MOBIEDIT_API mobiedit_engine_t* mobiedit_create(void);
/* Validate cfg, size the engine for deltas of length d and reset to x = 0. */
MOBIEDIT_API int mobiedit_configure(mobiedit_engine_t* h, const mobiedit_config_t* cfg, int32_t d);
/* Rows per forward batch (K) of the configured estimator, or -1 if not configured. */
MOBIEDIT_API int32_t mobiedit_rows(const mobiedit_engine_t* h);
/* Start a new run at x0 [d] (NULL: zeros). */
MOBIEDIT_API int mobiedit_reset(mobiedit_engine_t* h, const float* x0);
/* One loop iteration. *status_out (may be NULL) gets the status (MOBIEDIT_RUNNING if not done).
 * Returns MOBIEDIT_ERR_CALLBACK if a callback failed (status ERROR), MOBIEDIT_ERR_STATE if the
 * run had already finished. check may be NULL. */
MOBIEDIT_API int mobiedit_step(mobiedit_engine_t* h, mobiedit_forward_fn forward,
                               mobiedit_check_fn check, void* user, int32_t* status_out);
/* mobiedit_reset(h, x0) then step until done. NONFINITE etc. are results, not errors. */
MOBIEDIT_API int mobiedit_run(mobiedit_engine_t* h, const float* x0, mobiedit_forward_fn forward,
                              mobiedit_check_fn check, void* user, int32_t* status_out);
/* Borrowed view of the current state (see Lifetimes above). */
MOBIEDIT_API int mobiedit_result(const mobiedit_engine_t* h, mobiedit_result_t* out);
/* Release the engine (NULL is a no-op). */
MOBIEDIT_API void mobiedit_free(mobiedit_engine_t* h);
/* Message of the last failed call on h ("" if none); never NULL (also for h == NULL). */
MOBIEDIT_API const char* mobiedit_last_error(const mobiedit_engine_t* h);
/* Static name of a status ("SUCCESS_LOSS", ...; "UNKNOWN" if out of range). */
MOBIEDIT_API const char* mobiedit_status_name(int32_t status);

/* ROME rank-one factors: u = v - wk [d_out], w = c / (c . k) [d_in]; c NULL means c = k.
 * err (may be NULL) receives a NUL-terminated message of at most err_len bytes on failure. */
MOBIEDIT_API int mobiedit_rank_one(const float* k, const float* v, const float* wk,
                                   const float* c, int32_t d_in, int32_t d_out, float* u_out,
                                   float* w_out, char* err, size_t err_len);
/* Philox4x32-10 of one counter block. */
MOBIEDIT_API int mobiedit_philox4x32_10(const uint32_t counter[4], const uint32_t key[2],
                                        uint32_t out[4]);
/* n directions [n, d] of the given kind for (seed, step, stream), as the engine uses them. */
MOBIEDIT_API int mobiedit_directions(int32_t kind, uint64_t seed, uint32_t step, uint32_t stream,
                                     int32_t n, int32_t d, float* out);

#ifdef __cplusplus
}
#endif

#endif /* MOBIEDIT_MOBIEDIT_C_H */
