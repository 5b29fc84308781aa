// pybind11 module mobiedit._native: the native ZO engine for Python (stub: mobiedit/_native.pyi).
//
// Contracts:
// * numpy inputs must be float32, C-contiguous, of the stated shape; anything else raises
//   TypeError (dtype / not an array) or ValueError (shape / layout) naming the argument. Nothing
//   is silently converted, and accepted inputs are used in place (no copy).
// * forward(D) receives a read-only float32 [K, d] view of the engine's buffer (no copy), valid
//   only during the call; it must return a float32 C-contiguous array of shape (K,).
// * check(x) receives a fresh float32 [d] copy of the current delta; its result is truthiness.
// * The GIL is released while the engine runs and re-acquired for each callback. An exception
//   raised in a callback stops the engine (status ERROR) and propagates unchanged.
// * mobiedit::Error maps to mobiedit.errors.ConfigError / NumericalError (Config / Numerical),
//   ValueError (InvalidArgument) and RuntimeError (State / Internal).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "mobiedit/engine.hpp"
#include "mobiedit/philox.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace {

using F32Array = py::array_t<float, py::array::c_style>;

std::string shape_str(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) {
    s += std::to_string(a.shape(i)) + (a.ndim() == 1 ? "," : (i + 1 < a.ndim() ? ", " : ""));
  }
  return s + ")";
}

// Shape as text; a -1 entry (any length) prints as "n".
std::string shape_str(const std::vector<py::ssize_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += (shape[i] < 0 ? std::string("n") : std::to_string(shape[i])) +
         (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
  }
  return s + ")";
}

// Return obj as a float32 C-contiguous array of `shape` (-1: any length >= 1), or raise naming
// `name`.
F32Array require_f32(py::handle obj, const char* name, const std::vector<py::ssize_t>& shape) {
  if (!py::isinstance<py::array>(obj)) {
    throw py::type_error(std::string(name) + " must be a numpy.ndarray of float32 with shape " +
                         shape_str(shape) + ", got " + std::string(py::str(py::type::handle_of(obj))) +
                         " — fix: np.asarray(value, dtype=np.float32)");
  }
  auto arr = py::reinterpret_borrow<py::array>(obj);
  if (!arr.dtype().is(py::dtype::of<float>())) {
    throw py::type_error(std::string(name) + " has dtype " + std::string(py::str(arr.dtype())) +
                         ", expected float32 — fix: .astype(np.float32)");
  }
  bool ok = arr.ndim() == static_cast<py::ssize_t>(shape.size());
  for (std::size_t i = 0; ok && i < shape.size(); ++i) {
    ok = shape[i] < 0 ? arr.shape(i) >= 1 : arr.shape(i) == shape[i];
  }
  if (!ok) {
    throw py::value_error(std::string(name) + " has shape " + shape_str(arr) + ", expected " +
                          shape_str(shape));
  }
  if (!(arr.flags() & py::array::c_style)) {
    throw py::value_error(std::string(name) +
                          " is not C-contiguous — fix: np.ascontiguousarray(value)");
  }
  return py::reinterpret_borrow<F32Array>(arr);
}

// Raise mobiedit.errors.<cls>(message, where=..., fix=...) as the current Python error.
void set_project_error(const char* cls, const mobiedit::Error& e) {
  try {
    py::object type = py::module_::import("mobiedit.errors").attr(cls);
    py::object inst = type(e.message(), "where"_a = e.where(), "fix"_a = e.fix());
    PyErr_SetObject(type.ptr(), inst.ptr());
  } catch (py::error_already_set&) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
}

void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const mobiedit::Error& e) {
    switch (e.code()) {
      case mobiedit::ErrorCode::Config: set_project_error("ConfigError", e); break;
      case mobiedit::ErrorCode::Numerical: set_project_error("NumericalError", e); break;
      case mobiedit::ErrorCode::InvalidArgument: PyErr_SetString(PyExc_ValueError, e.what()); break;
      default: PyErr_SetString(PyExc_RuntimeError, e.what()); break;
    }
  }
}

// The Python-visible engine: the C++ engine plus a guard against concurrent / re-entrant use.
struct PyEngine {
  PyEngine(const mobiedit::Config& cfg, int d) : engine(cfg, d) {}
  mobiedit::Engine engine;
  std::atomic<bool> busy{false};
};

class BusyGuard {
 public:
  explicit BusyGuard(std::atomic<bool>& flag) : flag_(flag) {
    if (flag_.exchange(true)) {
      throw std::runtime_error(
          "mobiedit._native.Engine is already running (called from a callback or another "
          "thread) — fix: use one Engine per thread and do not re-enter it from a callback");
    }
  }
  ~BusyGuard() { flag_.store(false); }
  BusyGuard(const BusyGuard&) = delete;
  BusyGuard& operator=(const BusyGuard&) = delete;

 private:
  std::atomic<bool>& flag_;
};

// A read-only float32 [K, d] view of `data`, kept valid by holding `owner` (the Engine object).
py::array readonly_view(const float* data, int K, int d, py::handle owner) {
  const auto sz = static_cast<py::ssize_t>(sizeof(float));
  py::array view(py::dtype::of<float>(), {static_cast<py::ssize_t>(K), static_cast<py::ssize_t>(d)},
                 {static_cast<py::ssize_t>(d) * sz, sz}, data, owner);
  py::detail::array_proxy(view.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return view;
}

// Run one step (one_step) or the whole loop with the GIL released; rethrow a callback's error.
mobiedit::Status drive(PyEngine& self, py::handle owner, const py::object& forward,
                       const py::object& check, bool one_step) {
  std::exception_ptr err;
  mobiedit::ForwardFn fwd = [&](const float* D, int K, int d, float* L) -> int {
    py::gil_scoped_acquire gil;
    try {
      py::object out = forward(readonly_view(D, K, d, owner));
      F32Array losses = require_f32(out, "forward's return value", {static_cast<py::ssize_t>(K)});
      std::memcpy(L, losses.data(), static_cast<std::size_t>(K) * sizeof(float));
      return 0;
    } catch (...) {
      err = std::current_exception();
      return 1;
    }
  };
  mobiedit::CheckFn chk;
  if (!check.is_none()) {
    chk = [&](const float* x, int d, int* ok) -> int {
      py::gil_scoped_acquire gil;
      try {
        F32Array copy(static_cast<py::ssize_t>(d), x);
        py::object r = check(copy);
        const int truth = PyObject_IsTrue(r.ptr());
        if (truth < 0) throw py::error_already_set();
        *ok = truth;
        return 0;
      } catch (...) {
        err = std::current_exception();
        return 1;
      }
    };
  }
  mobiedit::Status s = mobiedit::Status::Running;
  {
    py::gil_scoped_release nogil;
    s = one_step ? self.engine.step(fwd, chk) : self.engine.run(fwd, chk);
  }
  if (err) std::rethrow_exception(err);
  return s;
}

void require_callables(const py::object& forward, const py::object& check) {
  if (!PyCallable_Check(forward.ptr())) {
    throw py::type_error("forward must be callable: forward(D: float32[K, d]) -> float32[K]");
  }
  if (!check.is_none() && !PyCallable_Check(check.ptr())) {
    throw py::type_error("check must be None or callable: check(x: float32[d]) -> bool");
  }
}

const float* optional_x0(const py::object& x0, int d, F32Array& keep) {
  if (x0.is_none()) return nullptr;
  keep = require_f32(x0, "x0", {static_cast<py::ssize_t>(d)});
  return keep.data();
}

void bind_config(py::module_& m) {
  py::class_<mobiedit::Config>(m, "Config", "Loop configuration (fields as mobiedit.zo.ZOConfig).")
      .def(py::init<>())
      .def_property(
          "estimator", [](const mobiedit::Config& c) { return mobiedit::estimator_name(c.estimator); },
          [](mobiedit::Config& c, const std::string& s) { c.estimator = mobiedit::parse_estimator(s); })
      .def_property(
          "optimizer", [](const mobiedit::Config& c) { return mobiedit::optimizer_name(c.optimizer); },
          [](mobiedit::Config& c, const std::string& s) { c.optimizer = mobiedit::parse_optimizer(s); })
      .def_property(
          "lr_schedule", [](const mobiedit::Config& c) { return mobiedit::schedule_name(c.lr_schedule); },
          [](mobiedit::Config& c, const std::string& s) { c.lr_schedule = mobiedit::parse_schedule(s); })
      .def_property(
          "directions", [](const mobiedit::Config& c) { return mobiedit::directions_name(c.directions); },
          [](mobiedit::Config& c, const std::string& s) { c.directions = mobiedit::parse_directions(s); })
      .def_property(
          "normalise", [](const mobiedit::Config& c) { return mobiedit::normalise_name(c.normalise); },
          [](mobiedit::Config& c, const std::string& s) { c.normalise = mobiedit::parse_normalise(s); })
      .def_property(
          "check_at", [](const mobiedit::Config& c) { return mobiedit::check_at_name(c.check_at); },
          [](mobiedit::Config& c, const std::string& s) { c.check_at = mobiedit::parse_check_at(s); })
      .def_readwrite("n_dirs", &mobiedit::Config::n_dirs)
      .def_readwrite("h", &mobiedit::Config::h)
      .def_readwrite("lr", &mobiedit::Config::lr)
      .def_readwrite("lr_min", &mobiedit::Config::lr_min)
      .def_readwrite("momentum", &mobiedit::Config::momentum)
      .def_readwrite("beta1", &mobiedit::Config::beta1)
      .def_readwrite("beta2", &mobiedit::Config::beta2)
      .def_readwrite("adam_eps", &mobiedit::Config::adam_eps)
      .def_readwrite("max_norm", &mobiedit::Config::max_norm)
      .def_readwrite("max_steps", &mobiedit::Config::max_steps)
      .def_readwrite("max_evals", &mobiedit::Config::max_evals)
      .def_readwrite("check_every", &mobiedit::Config::check_every)
      .def_readwrite("loss_tol", &mobiedit::Config::loss_tol)
      .def_readwrite("patience", &mobiedit::Config::patience)
      .def_readwrite("min_rel_improve", &mobiedit::Config::min_rel_improve)
      .def_readwrite("seed", &mobiedit::Config::seed)
      .def_property_readonly("K", &mobiedit::Config::rows)
      .def("validate", &mobiedit::Config::validate);
}

void bind_engine(py::module_& m) {
  py::class_<PyEngine>(m, "Engine", "One ZO value-search run (not thread-safe).")
      .def(py::init<const mobiedit::Config&, int>(), "config"_a, "d"_a)
      .def(
          "reset",
          [](PyEngine& self, const py::object& x0) {
            BusyGuard guard(self.busy);
            F32Array keep;
            self.engine.reset(optional_x0(x0, self.engine.d(), keep));
          },
          "x0"_a = py::none())
      .def(
          "step",
          [](py::object self_obj, const py::object& forward, const py::object& check) {
            PyEngine& self = self_obj.cast<PyEngine&>();
            require_callables(forward, check);
            BusyGuard guard(self.busy);
            return mobiedit::status_name(drive(self, self_obj, forward, check, true));
          },
          "forward"_a, "check"_a = py::none())
      .def(
          "run",
          [](py::object self_obj, const py::object& forward, const py::object& check,
             const py::object& x0) {
            PyEngine& self = self_obj.cast<PyEngine&>();
            require_callables(forward, check);
            BusyGuard guard(self.busy);
            F32Array keep;
            self.engine.reset(optional_x0(x0, self.engine.d(), keep));
            return mobiedit::status_name(drive(self, self_obj, forward, check, false));
          },
          "forward"_a, "check"_a = py::none(), "x0"_a = py::none())
      .def_property_readonly("status",
                             [](const PyEngine& s) { return mobiedit::status_name(s.engine.status()); })
      .def_property_readonly("x", [](const PyEngine& s) {
        return F32Array(static_cast<py::ssize_t>(s.engine.d()), s.engine.x().data());
      })
      .def_property_readonly("history", [](const PyEngine& s) { return s.engine.history(); })
      .def_property_readonly("steps", [](const PyEngine& s) { return s.engine.steps(); })
      .def_property_readonly("evals", [](const PyEngine& s) { return s.engine.evals(); })
      .def_property_readonly("checks", [](const PyEngine& s) { return s.engine.checks(); })
      .def_property_readonly("message", [](const PyEngine& s) { return s.engine.message(); })
      .def_property_readonly("K", [](const PyEngine& s) { return s.engine.K(); })
      .def_property_readonly("d", [](const PyEngine& s) { return s.engine.d(); })
      .def_property_readonly("config", [](const PyEngine& s) { return s.engine.config(); });
}

void bind_functions(py::module_& m) {
  m.def(
      "philox4x32_10",
      [](std::array<std::uint32_t, 4> counter, std::array<std::uint32_t, 2> key) {
        return mobiedit::philox4x32_10(counter, key);
      },
      "counter"_a, "key"_a, "Philox4x32-10 of one counter block.");
  m.def(
      "directions",
      [](const std::string& kind, std::uint64_t seed, std::uint32_t step, int n, int d,
         std::uint32_t stream) {
        mobiedit::DirectionKind k;
        if (kind == "rademacher") {
          k = mobiedit::DirectionKind::Rademacher;
        } else if (kind == "gaussian") {
          k = mobiedit::DirectionKind::Gaussian;
        } else if (kind == "coordinates") {
          k = mobiedit::DirectionKind::Coordinates;
        } else {
          throw py::value_error("kind must be 'rademacher', 'gaussian' or 'coordinates', got '" +
                                kind + "'");
        }
        if (n < 0 || d < 0) throw py::value_error("n and d must be >= 0");
        F32Array out({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(d)});
        float* p = out.mutable_data();
        {
          py::gil_scoped_release nogil;
          mobiedit::fill_directions(k, seed, step, stream, n, d, p);
        }
        return out;
      },
      "kind"_a, "seed"_a, "step"_a, "n"_a, "d"_a, "stream"_a = 0u,
      "n directions [n, d] float32 exactly as the engine draws them (spec §1).");
  m.def(
      "rank_one",
      [](const py::object& k, const py::object& v, const py::object& wk, const py::object& c) {
        F32Array ka = require_f32(k, "k_star", {-1});
        const auto d_in = static_cast<int>(ka.shape(0));
        F32Array va = require_f32(v, "v_star", {-1});
        const auto d_out = static_cast<int>(va.shape(0));
        F32Array wka = require_f32(wk, "w_k", {d_out});
        F32Array ca;
        if (!c.is_none()) ca = require_f32(c, "c", {d_in});
        F32Array u(d_out);
        F32Array w(d_in);
        mobiedit::rank_one(ka.data(), va.data(), wka.data(), c.is_none() ? nullptr : ca.data(),
                           d_in, d_out, u.mutable_data(), w.mutable_data());
        return py::make_tuple(u, w);
      },
      "k_star"_a, "v_star"_a, "w_k"_a, "c"_a = py::none(),
      "ROME factors (u = v* - W k*, w = c / (c . k*)); float32 1-D inputs (spec §5).");
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "MobiEdit native ZO engine (see docs/zo_spec.md and mobiedit/_native.pyi).";
  m.attr("ABI_VERSION") = 2;  // MOBIEDIT_ABI_VERSION
  py::register_exception_translator(&translate);
  bind_config(m);
  bind_engine(m);
  bind_functions(m);
}
