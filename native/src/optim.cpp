// Update rules, lr schedules and the norm clamp (spec §3): Engine::update and lr_at.
// Mirrors mobiedit/zo/optim.py: state is float32, each element computed in double, rounded once.
#include <cmath>
#include <cstddef>

#include "mobiedit/engine.hpp"
#include "numeric.hpp"

namespace mobiedit {
namespace {

constexpr double kPi = 3.14159265358979323846;

void sgd_update(const float* x, const float* g, double beta, double lr_t, std::size_t d,
                float* m, float* x_out) noexcept {
  for (std::size_t j = 0; j < d; ++j) {
    m[j] = static_cast<float>(beta * static_cast<double>(m[j]) + static_cast<double>(g[j]));
    x_out[j] = static_cast<float>(static_cast<double>(x[j]) - lr_t * static_cast<double>(m[j]));
  }
}

struct AdamParams {
  double b1, b2, eps, bc1, bc2, lr_t;
};

void adam_update(const float* x, const float* g, const AdamParams& p, std::size_t d, float* m,
                 float* v, float* x_out) noexcept {
  for (std::size_t j = 0; j < d; ++j) {
    const double gj = static_cast<double>(g[j]);
    m[j] = static_cast<float>(p.b1 * static_cast<double>(m[j]) + (1.0 - p.b1) * gj);
    v[j] = static_cast<float>(p.b2 * static_cast<double>(v[j]) + (1.0 - p.b2) * gj * gj);
    const double mhat = static_cast<double>(m[j]) / p.bc1;
    const double vhat = static_cast<double>(v[j]) / p.bc2;
    x_out[j] = static_cast<float>(static_cast<double>(x[j]) -
                                  p.lr_t * mhat / (std::sqrt(vhat) + p.eps));
  }
}

// If ||x|| > max_norm > 0: x = f32(f64(x) * (max_norm / ||x||)).
void clamp_norm(float* x, std::size_t d, double max_norm) noexcept {
  if (!(max_norm > 0.0)) return;
  const double norm = std::sqrt(detail::seq_dot(x, x, d));
  if (!(norm > max_norm)) return;
  const double scale = max_norm / norm;
  for (std::size_t j = 0; j < d; ++j) {
    x[j] = static_cast<float>(static_cast<double>(x[j]) * scale);
  }
}

}  // namespace

double lr_at(const Config& cfg, std::int64_t step) noexcept {
  if (cfg.lr_schedule == Schedule::Cosine) {
    const double t = static_cast<double>(step);
    const double T = static_cast<double>(cfg.max_steps);
    return cfg.lr_min + (cfg.lr - cfg.lr_min) * (1.0 + std::cos(kPi * t / T)) / 2.0;
  }
  return cfg.lr;
}

void Engine::update(std::int64_t step) {
  const auto d = static_cast<std::size_t>(d_);
  const double lr_t = lr_at(cfg_, step);
  if (cfg_.optimizer == Optimizer::Sgd) {
    sgd_update(x_.data(), g_.data(), cfg_.momentum, lr_t, d, m_.data(), x_new_.data());
  } else {
    const double t = static_cast<double>(step + 1);
    const AdamParams p{cfg_.beta1, cfg_.beta2, cfg_.adam_eps, 1.0 - std::pow(cfg_.beta1, t),
                       1.0 - std::pow(cfg_.beta2, t), lr_t};
    adam_update(x_.data(), g_.data(), p, d, m_.data(), v_.data(), x_new_.data());
  }
  clamp_norm(x_new_.data(), d, cfg_.max_norm);
}

}  // namespace mobiedit
