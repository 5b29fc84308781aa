// The three ZO estimators (spec §2) and FZOO's whole-gradient step scale for coordinate
// directions: Engine::propose and Engine::estimate.
// Mirrors mobiedit/zo/estimators.py operation for operation.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "mobiedit/engine.hpp"
#include "numeric.hpp"

namespace mobiedit {
namespace {

constexpr double kEpsSigma = 1e-8;

// acc[j] = sum_i f64(U[i, j]) * coef[i], accumulated over i in order.
void weighted_direction_sum(const float* U, const double* coef, int n, std::size_t d,
                            double* acc) noexcept {
  std::fill(acc, acc + d, 0.0);
  for (int i = 0; i < n; ++i) {
    const float* u = U + static_cast<std::size_t>(i) * d;
    const double c = coef[i];
    for (std::size_t j = 0; j < d; ++j) acc[j] += static_cast<double>(u[j]) * c;
  }
}

// g = f32((acc / n) / max(sigma / h, eps_sigma)) — FZOO's step normalisation.
void fzoo_normalise(const double* acc, int n, double sigma, double h, std::size_t d,
                    float* g) noexcept {
  const double scale = std::max(sigma / h, kEpsSigma);
  const double dn = static_cast<double>(n);
  for (std::size_t j = 0; j < d; ++j) g[j] = static_cast<float>((acc[j] / dn) / scale);
}

}  // namespace

// normalise=gradient (spec §2): row i measures the slope of its one coordinate p_i; the table
// keeps each coordinate's latest slope and the step moves only this step's coordinates, scaled by
// sqrt(d) / (sqrt(d / seen) * ||table||). Mirrors GradientScaledFzoo in mobiedit/zo/estimators.py.
double Engine::estimate_gradient_scaled() {
  const int n = cfg_.n_dirs;
  const auto d = static_cast<std::size_t>(d_);
  const float* L = L_.data();
  const double l0 = static_cast<double>(L[0]);
  for (int i = 0; i < n; ++i) {
    const float* u = U_.data() + static_cast<std::size_t>(i) * d;
    std::size_t p = 0;
    while (p + 1 < d && u[p] == 0.0f) ++p;  // the row's one nonzero
    coords_[static_cast<std::size_t>(i)] = p;
    slopes_[p] = (static_cast<double>(L[i + 1]) - l0) / (cfg_.h * static_cast<double>(u[p]));
    if (seen_[p] == 0) {
      seen_[p] = 1;
      ++n_seen_;
    }
  }
  std::fill(g_.begin(), g_.end(), 0.0f);
  double ss = 0.0;
  for (std::size_t j = 0; j < d; ++j) ss += slopes_[j] * slopes_[j];
  const double norm = std::sqrt(ss);
  if (!(norm > 0.0)) return l0;
  const double dd = static_cast<double>(d_);
  const double scale = std::sqrt(dd) / (std::sqrt(dd / static_cast<double>(n_seen_)) * norm);
  for (int i = 0; i < n; ++i) {
    const std::size_t p = coords_[static_cast<std::size_t>(i)];
    g_[p] = static_cast<float>(slopes_[p] * scale);
  }
  return l0;
}

void Engine::propose(std::int64_t step) {
  const int n = cfg_.n_dirs;
  const auto d = static_cast<std::size_t>(d_);
  if (cfg_.directions == Directions::Coordinates) {
    fill_coordinates(cfg_.seed, static_cast<std::uint32_t>(step), kStreamDirections, n, d_,
                     U_.data(), perm_.data(), sign_.data());
  } else {
    const DirectionKind kind =
        cfg_.estimator == Estimator::Paper ? DirectionKind::Gaussian : DirectionKind::Rademacher;
    fill_directions(kind, cfg_.seed, static_cast<std::uint32_t>(step), kStreamDirections, n, d_,
                    U_.data());
  }
  const float* x = x_.data();
  auto row = [&](int r) { return D_.data() + static_cast<std::size_t>(r) * d; };
  auto dir = [&](int i) { return U_.data() + static_cast<std::size_t>(i) * d; };
  for (int i = 0; i < n; ++i) {
    switch (cfg_.estimator) {
      case Estimator::Paper:
        detail::perturb(x, dir(i), cfg_.h, d, row(3 * i));
        detail::perturb(x, dir(i), -cfg_.h, d, row(3 * i + 1));
        std::memcpy(row(3 * i + 2), x, d * sizeof(float));
        break;
      case Estimator::Fzoo:
        detail::perturb(x, dir(i), cfg_.h, d, row(i + 1));
        break;
      case Estimator::Antithetic:
        detail::perturb(x, dir(i), cfg_.h, d, row(2 * i));
        detail::perturb(x, dir(i), -cfg_.h, d, row(2 * i + 1));
        break;
    }
  }
  if (cfg_.estimator == Estimator::Fzoo) std::memcpy(row(0), x, d * sizeof(float));
}

double Engine::estimate() {
  const int n = cfg_.n_dirs;
  const auto d = static_cast<std::size_t>(d_);
  const float* L = L_.data();
  double* coef = coef_.data();
  const double two_h = 2.0 * cfg_.h;
  switch (cfg_.estimator) {
    case Estimator::Paper: {
      for (int i = 0; i < n; ++i) {
        coef[i] = (static_cast<double>(L[3 * i]) - static_cast<double>(L[3 * i + 1])) / two_h;
      }
      weighted_direction_sum(U_.data(), coef, n, d, acc_.data());
      for (std::size_t j = 0; j < d; ++j) g_[j] = static_cast<float>(acc_[j]);
      return detail::seq_sum(L + 2, static_cast<std::size_t>(n), 3) / static_cast<double>(n);
    }
    case Estimator::Fzoo: {
      if (cfg_.normalise == Normalise::Gradient) return estimate_gradient_scaled();
      const double l0 = static_cast<double>(L[0]);
      for (int i = 0; i < n; ++i) coef[i] = (static_cast<double>(L[i + 1]) - l0) / cfg_.h;
      weighted_direction_sum(U_.data(), coef, n, d, acc_.data());
      const double sigma = detail::population_std(L + 1, static_cast<std::size_t>(n));
      fzoo_normalise(acc_.data(), n, sigma, cfg_.h, d, g_.data());
      return l0;
    }
    case Estimator::Antithetic: {
      for (int i = 0; i < n; ++i) {
        coef[i] = (static_cast<double>(L[2 * i]) - static_cast<double>(L[2 * i + 1])) / two_h;
      }
      weighted_direction_sum(U_.data(), coef, n, d, acc_.data());
      const auto k = static_cast<std::size_t>(K_);
      fzoo_normalise(acc_.data(), n, detail::population_std(L, k), cfg_.h, d, g_.data());
      return detail::seq_sum(L, k) / static_cast<double>(k);
    }
  }
  throw Error(ErrorCode::Internal, "Engine::estimate", "unknown estimator", "report a bug");
}

}  // namespace mobiedit
