// ROME rank-one update factors (spec §5); mirrors mobiedit/zo/rank_one.py.
#include <cmath>
#include <cstddef>
#include <string>

#include "mobiedit/engine.hpp"
#include "numeric.hpp"

namespace mobiedit {
namespace {

constexpr double kMinRelDenom = 1e-12;

void require_finite(const char* name, const float* v, int n) {
  if (!detail::all_finite(v, static_cast<std::size_t>(n))) {
    throw Error(ErrorCode::Numerical, name, "contains NaN or Inf",
                "recompute the key/value statistics");
  }
}

}  // namespace

void rank_one(const float* k, const float* v, const float* wk, const float* c, int d_in,
              int d_out, float* u_out, float* w_out) {
  if (k == nullptr || v == nullptr || wk == nullptr || u_out == nullptr || w_out == nullptr) {
    throw Error(ErrorCode::InvalidArgument, "rank_one", "null pointer argument",
                "pass k, v, wk, u_out and w_out (c may be null)");
  }
  if (d_in < 1 || d_out < 1) {
    throw Error(ErrorCode::InvalidArgument, "rank_one",
                "sizes d_in=" + std::to_string(d_in) + ", d_out=" + std::to_string(d_out) +
                    " must be >= 1",
                "pass the key and value lengths");
  }
  const float* cc = c != nullptr ? c : k;
  require_finite("k_star", k, d_in);
  require_finite("v_star", v, d_out);
  require_finite("w_k", wk, d_out);
  require_finite("c", cc, d_in);
  const auto ni = static_cast<std::size_t>(d_in);
  const double denom = detail::seq_dot(cc, k, ni);
  const double scale = std::sqrt(detail::seq_dot(cc, cc, ni)) * std::sqrt(detail::seq_dot(k, k, ni));
  if (!std::isfinite(denom) || std::fabs(denom) <= kMinRelDenom * scale || denom == 0.0) {
    throw Error(ErrorCode::Numerical, "c", "c . k* is zero or negligible",
                "check the key vector and the covariance inverse");
  }
  for (int j = 0; j < d_out; ++j) {
    u_out[j] = static_cast<float>(static_cast<double>(v[j]) - static_cast<double>(wk[j]));
  }
  for (int j = 0; j < d_in; ++j) w_out[j] = static_cast<float>(static_cast<double>(cc[j]) / denom);
}

}  // namespace mobiedit
