// Thin JNI bridge: dev.mobiedit.demo.jni.NativeEngine <-> the engine's plain C ABI
// (native/include/mobiedit/mobiedit_c.h). No engine logic lives here: only argument marshalling,
// the two callbacks (Java Forward / Check objects called from the loop) and error translation.
//
// Errors: every failing C call becomes a dev.mobiedit.demo.jni.NativeEngineException carrying the
// engine's code and its one-line message (which names the field and the fix). A Java exception
// thrown inside a callback ends the run with status ERROR; it is rethrown as the cause of the
// NativeEngineException. No C++ exception crosses this file (the C ABI never throws).
//
// Config marshalling (must match EngineConfig.reals() / ints()):
//   reals[10] = h, lr, lr_min, momentum, beta1, beta2, adam_eps, max_norm, loss_tol, min_rel_improve
//   ints[12]  = estimator, n_dirs, optimizer, lr_schedule, max_steps, max_evals, check_every,
//               patience, seed (uint64 bits), directions, normalise, check_at
#include <jni.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include "mobiedit/mobiedit_c.h"

namespace {

constexpr int kReals = 10;
constexpr int kInts = 12;
constexpr const char* kExceptionClass = "dev/mobiedit/demo/jni/NativeEngineException";

// Throw NativeEngineException(code, message, cause) (cause may be null).
void throw_engine(JNIEnv* env, int code, const std::string& message, jthrowable cause = nullptr) {
  if (env->ExceptionCheck()) return;
  jclass cls = env->FindClass(kExceptionClass);
  if (cls == nullptr) return;  // NoClassDefFoundError is pending
  jmethodID ctor =
      env->GetMethodID(cls, "<init>", "(ILjava/lang/String;Ljava/lang/Throwable;)V");
  if (ctor == nullptr) return;
  jstring msg = env->NewStringUTF(message.c_str());
  if (msg == nullptr) return;
  auto* ex = static_cast<jthrowable>(env->NewObject(cls, ctor, code, msg, cause));
  if (ex != nullptr) env->Throw(ex);
}

mobiedit_engine_t* handle(JNIEnv* env, jlong h) {
  auto* p = reinterpret_cast<mobiedit_engine_t*>(static_cast<intptr_t>(h));
  if (p == nullptr) {
    throw_engine(env, MOBIEDIT_ERR_STATE,
                 "engine handle is closed — fix: create a new NativeEngine");
  }
  return p;
}

// Check a float[] argument's length; throws and returns false when wrong.
bool check_len(JNIEnv* env, jfloatArray a, jsize want, const char* name, bool nullable) {
  if (a == nullptr) {
    if (nullable) return true;
    throw_engine(env, MOBIEDIT_ERR_INVALID_ARGUMENT,
                 std::string(name) + ": is null — fix: pass a float[" + std::to_string(want) + "]");
    return false;
  }
  const jsize got = env->GetArrayLength(a);
  if (got != want) {
    throw_engine(env, MOBIEDIT_ERR_INVALID_ARGUMENT,
                 std::string(name) + ": has length " + std::to_string(got) + " — fix: pass float[" +
                     std::to_string(want) + "]");
    return false;
  }
  return true;
}

bool read_config(JNIEnv* env, jdoubleArray reals, jlongArray ints, mobiedit_config_t* cfg) {
  if (reals == nullptr || ints == nullptr || env->GetArrayLength(reals) != kReals ||
      env->GetArrayLength(ints) != kInts) {
    throw_engine(env, MOBIEDIT_ERR_INVALID_ARGUMENT,
                 "config arrays: must be double[10] and long[12] — fix: use NativeEngine.Config");
    return false;
  }
  jdouble r[kReals];
  jlong n[kInts];
  env->GetDoubleArrayRegion(reals, 0, kReals, r);
  env->GetLongArrayRegion(ints, 0, kInts, n);
  mobiedit_config_default(cfg);
  cfg->h = r[0];
  cfg->lr = r[1];
  cfg->lr_min = r[2];
  cfg->momentum = r[3];
  cfg->beta1 = r[4];
  cfg->beta2 = r[5];
  cfg->adam_eps = r[6];
  cfg->max_norm = r[7];
  cfg->loss_tol = r[8];
  cfg->min_rel_improve = r[9];
  cfg->estimator = static_cast<int32_t>(n[0]);
  cfg->n_dirs = static_cast<int32_t>(n[1]);
  cfg->optimizer = static_cast<int32_t>(n[2]);
  cfg->lr_schedule = static_cast<int32_t>(n[3]);
  cfg->max_steps = n[4];
  cfg->max_evals = n[5];
  cfg->check_every = n[6];
  cfg->patience = n[7];
  cfg->seed = static_cast<uint64_t>(n[8]);
  cfg->directions = static_cast<int32_t>(n[9]);
  cfg->normalise = static_cast<int32_t>(n[10]);
  cfg->check_at = static_cast<int32_t>(n[11]);
  return true;
}

// State shared by the two callbacks during one nativeStep / nativeRun call (one JNI frame, so
// local references stay valid throughout).
struct Callbacks {
  JNIEnv* env;
  jobject forward;
  jobject check;  // may be null
  jmethodID forward_mid = nullptr;
  jmethodID check_mid = nullptr;
  jfloatArray deltas = nullptr;  // reused while the size stays the same
  jfloatArray losses = nullptr;
  jfloatArray x = nullptr;
  jthrowable pending = nullptr;  // first Java exception thrown by a callback

  bool take_exception() {
    if (!env->ExceptionCheck()) return false;
    jthrowable t = env->ExceptionOccurred();
    env->ExceptionClear();
    if (pending == nullptr) pending = t;
    return true;
  }

  static jfloatArray sized(JNIEnv* env, jfloatArray cur, jsize n) {
    if (cur != nullptr && env->GetArrayLength(cur) == n) return cur;
    if (cur != nullptr) env->DeleteLocalRef(cur);
    return env->NewFloatArray(n);
  }
};

int forward_cb(void* user, const float* deltas, int K, int d, float* losses_out) {
  auto* cb = static_cast<Callbacks*>(user);
  JNIEnv* env = cb->env;
  cb->deltas = Callbacks::sized(env, cb->deltas, static_cast<jsize>(K) * d);
  cb->losses = Callbacks::sized(env, cb->losses, K);
  if (cb->deltas == nullptr || cb->losses == nullptr) return cb->take_exception(), 1;
  env->SetFloatArrayRegion(cb->deltas, 0, static_cast<jsize>(K) * d, deltas);
  // Pre-fill with NaN: a callback that forgets a row makes the run stop as NONFINITE.
  for (int i = 0; i < K; ++i) losses_out[i] = __builtin_nanf("");
  env->SetFloatArrayRegion(cb->losses, 0, K, losses_out);
  env->CallVoidMethod(cb->forward, cb->forward_mid, cb->deltas, K, d, cb->losses);
  if (cb->take_exception()) return 1;
  env->GetFloatArrayRegion(cb->losses, 0, K, losses_out);
  return 0;
}

int check_cb(void* user, const float* x, int d, int* ok_out) {
  auto* cb = static_cast<Callbacks*>(user);
  JNIEnv* env = cb->env;
  cb->x = Callbacks::sized(env, cb->x, d);
  if (cb->x == nullptr) return cb->take_exception(), 1;
  env->SetFloatArrayRegion(cb->x, 0, d, x);
  const jboolean ok = env->CallBooleanMethod(cb->check, cb->check_mid, cb->x, d);
  if (cb->take_exception()) return 1;
  *ok_out = ok ? 1 : 0;
  return 0;
}

// Resolve the callback methods; false (with an exception pending) on failure.
bool bind(JNIEnv* env, Callbacks* cb) {
  if (cb->forward == nullptr) {
    throw_engine(env, MOBIEDIT_ERR_INVALID_ARGUMENT,
                 "forward: is null — fix: pass a NativeEngine.Forward");
    return false;
  }
  jclass fc = env->GetObjectClass(cb->forward);
  cb->forward_mid = env->GetMethodID(fc, "forward", "([FII[F)V");
  if (cb->forward_mid == nullptr) return false;
  if (cb->check != nullptr) {
    jclass cc = env->GetObjectClass(cb->check);
    cb->check_mid = env->GetMethodID(cc, "check", "([FI)Z");
    if (cb->check_mid == nullptr) return false;
  }
  return true;
}

// Translate the code of a step/run call into a Java return value or exception.
jint finish(JNIEnv* env, mobiedit_engine_t* h, int rc, int32_t status, Callbacks* cb) {
  if (rc == MOBIEDIT_OK) return status;
  std::string msg = mobiedit_last_error(h);
  if (msg.empty()) msg = "engine call failed";
  throw_engine(env, rc, msg, cb->pending);
  return status;
}

}  // namespace

#define JNI_FN(name) JNIEXPORT auto JNICALL Java_dev_mobiedit_demo_jni_NativeEngine_##name

extern "C" {

JNI_FN(nativeAbiVersion)(JNIEnv*, jclass) -> jint { return mobiedit_abi_version(); }

JNI_FN(nativeConfigDefault)(JNIEnv* env, jclass, jdoubleArray reals, jlongArray ints) -> void {
  if (reals == nullptr || ints == nullptr || env->GetArrayLength(reals) != kReals ||
      env->GetArrayLength(ints) != kInts) {
    throw_engine(env, MOBIEDIT_ERR_INVALID_ARGUMENT, "config arrays: must be double[10], long[12]");
    return;
  }
  mobiedit_config_t c;
  mobiedit_config_default(&c);
  const jdouble r[kReals] = {c.h,        c.lr,       c.lr_min,   c.momentum, c.beta1,
                             c.beta2,    c.adam_eps, c.max_norm, c.loss_tol, c.min_rel_improve};
  const jlong n[kInts] = {c.estimator,   c.n_dirs,   c.optimizer,
                          c.lr_schedule, c.max_steps, c.max_evals,
                          c.check_every, c.patience, static_cast<jlong>(c.seed),
                          c.directions,  c.normalise, c.check_at};
  env->SetDoubleArrayRegion(reals, 0, kReals, r);
  env->SetLongArrayRegion(ints, 0, kInts, n);
}

JNI_FN(nativeCreate)(JNIEnv* env, jclass) -> jlong {
  mobiedit_engine_t* h = mobiedit_create();
  if (h == nullptr) throw_engine(env, MOBIEDIT_ERR_INTERNAL, "out of memory creating the engine");
  return static_cast<jlong>(reinterpret_cast<intptr_t>(h));
}

JNI_FN(nativeFree)(JNIEnv*, jclass, jlong h) -> void {
  mobiedit_free(reinterpret_cast<mobiedit_engine_t*>(static_cast<intptr_t>(h)));
}

JNI_FN(nativeConfigure)(JNIEnv* env, jclass, jlong hp, jdoubleArray reals, jlongArray ints,
                        jint d) -> void {
  mobiedit_engine_t* h = handle(env, hp);
  mobiedit_config_t cfg;
  if (h == nullptr || !read_config(env, reals, ints, &cfg)) return;
  const int rc = mobiedit_configure(h, &cfg, d);
  if (rc != MOBIEDIT_OK) throw_engine(env, rc, mobiedit_last_error(h));
}

JNI_FN(nativeRows)(JNIEnv* env, jclass, jlong hp) -> jint {
  mobiedit_engine_t* h = handle(env, hp);
  return h == nullptr ? -1 : mobiedit_rows(h);
}

JNI_FN(nativeReset)(JNIEnv* env, jclass, jlong hp, jfloatArray x0, jint d) -> void {
  mobiedit_engine_t* h = handle(env, hp);
  if (h == nullptr || !check_len(env, x0, d, "x0", true)) return;
  int rc;
  if (x0 == nullptr) {
    rc = mobiedit_reset(h, nullptr);
  } else {
    jfloat* p = env->GetFloatArrayElements(x0, nullptr);
    if (p == nullptr) return;
    rc = mobiedit_reset(h, p);
    env->ReleaseFloatArrayElements(x0, p, JNI_ABORT);
  }
  if (rc != MOBIEDIT_OK) throw_engine(env, rc, mobiedit_last_error(h));
}

JNI_FN(nativeStep)(JNIEnv* env, jclass, jlong hp, jobject forward, jobject check) -> jint {
  mobiedit_engine_t* h = handle(env, hp);
  if (h == nullptr) return MOBIEDIT_ERROR;
  Callbacks cb{env, forward, check};
  if (!bind(env, &cb)) return MOBIEDIT_ERROR;
  int32_t status = MOBIEDIT_RUNNING;
  const int rc = mobiedit_step(h, forward_cb, check == nullptr ? nullptr : check_cb, &cb, &status);
  return finish(env, h, rc, status, &cb);
}

JNI_FN(nativeRun)(JNIEnv* env, jclass, jlong hp, jfloatArray x0, jint d, jobject forward,
                  jobject check) -> jint {
  mobiedit_engine_t* h = handle(env, hp);
  if (h == nullptr || !check_len(env, x0, d, "x0", true)) return MOBIEDIT_ERROR;
  Callbacks cb{env, forward, check};
  if (!bind(env, &cb)) return MOBIEDIT_ERROR;
  // x0 is copied: the engine reads it only inside mobiedit_reset, before any callback runs.
  jfloat* x = nullptr;
  jfloat* buf = nullptr;
  if (x0 != nullptr) {
    buf = new (std::nothrow) jfloat[static_cast<size_t>(d)];
    if (buf == nullptr) {
      throw_engine(env, MOBIEDIT_ERR_INTERNAL, "out of memory copying x0");
      return MOBIEDIT_ERROR;
    }
    env->GetFloatArrayRegion(x0, 0, d, buf);
    x = buf;
  }
  int32_t status = MOBIEDIT_RUNNING;
  const int rc =
      mobiedit_run(h, x, forward_cb, check == nullptr ? nullptr : check_cb, &cb, &status);
  delete[] buf;
  return finish(env, h, rc, status, &cb);
}

// counts = {status, d, steps, evals, checks}
JNI_FN(nativeCounts)(JNIEnv* env, jclass, jlong hp) -> jlongArray {
  mobiedit_engine_t* h = handle(env, hp);
  mobiedit_result_t r;
  if (h == nullptr) return nullptr;
  const int rc = mobiedit_result(h, &r);
  if (rc != MOBIEDIT_OK) {
    throw_engine(env, rc, "engine: not configured — fix: call configure() first");
    return nullptr;
  }
  const jlong v[5] = {r.status, r.d, r.steps, r.evals, r.checks};
  jlongArray out = env->NewLongArray(5);
  if (out != nullptr) env->SetLongArrayRegion(out, 0, 5, v);
  return out;
}

JNI_FN(nativeX)(JNIEnv* env, jclass, jlong hp) -> jfloatArray {
  mobiedit_engine_t* h = handle(env, hp);
  mobiedit_result_t r;
  if (h == nullptr) return nullptr;
  if (mobiedit_result(h, &r) != MOBIEDIT_OK) {
    throw_engine(env, MOBIEDIT_ERR_STATE, "engine: not configured — fix: call configure() first");
    return nullptr;
  }
  jfloatArray out = env->NewFloatArray(r.d);
  if (out != nullptr) env->SetFloatArrayRegion(out, 0, r.d, r.x);
  return out;
}

JNI_FN(nativeHistory)(JNIEnv* env, jclass, jlong hp) -> jdoubleArray {
  mobiedit_engine_t* h = handle(env, hp);
  mobiedit_result_t r;
  if (h == nullptr) return nullptr;
  if (mobiedit_result(h, &r) != MOBIEDIT_OK) {
    throw_engine(env, MOBIEDIT_ERR_STATE, "engine: not configured — fix: call configure() first");
    return nullptr;
  }
  const auto n = static_cast<jsize>(r.history_len);
  jdoubleArray out = env->NewDoubleArray(n);
  if (out != nullptr && n > 0) env->SetDoubleArrayRegion(out, 0, n, r.history);
  return out;
}

JNI_FN(nativeMessage)(JNIEnv* env, jclass, jlong hp) -> jstring {
  mobiedit_engine_t* h = handle(env, hp);
  mobiedit_result_t r;
  if (h == nullptr) return nullptr;
  if (mobiedit_result(h, &r) != MOBIEDIT_OK) return env->NewStringUTF("");
  return env->NewStringUTF(r.message == nullptr ? "" : r.message);
}

JNI_FN(nativeStatusName)(JNIEnv* env, jclass, jint status) -> jstring {
  return env->NewStringUTF(mobiedit_status_name(status));
}

JNI_FN(nativeRankOne)(JNIEnv* env, jclass, jfloatArray k, jfloatArray v, jfloatArray wk,
                      jfloatArray c, jfloatArray u_out, jfloatArray w_out) -> void {
  if (k == nullptr || v == nullptr) {
    throw_engine(env, MOBIEDIT_ERR_INVALID_ARGUMENT, "rankOne: k and v must not be null");
    return;
  }
  const jsize d_in = env->GetArrayLength(k);
  const jsize d_out = env->GetArrayLength(v);
  if (!check_len(env, wk, d_out, "wk", false) || !check_len(env, c, d_in, "c", true) ||
      !check_len(env, u_out, d_out, "uOut", false) || !check_len(env, w_out, d_in, "wOut", false)) {
    return;
  }
  jfloat* kp = env->GetFloatArrayElements(k, nullptr);
  jfloat* vp = env->GetFloatArrayElements(v, nullptr);
  jfloat* wkp = env->GetFloatArrayElements(wk, nullptr);
  jfloat* cp = c == nullptr ? nullptr : env->GetFloatArrayElements(c, nullptr);
  jfloat* up = env->GetFloatArrayElements(u_out, nullptr);
  jfloat* wp = env->GetFloatArrayElements(w_out, nullptr);
  char err[512] = {0};
  int rc = MOBIEDIT_ERR_INTERNAL;
  if (kp && vp && wkp && up && wp && (c == nullptr || cp)) {
    rc = mobiedit_rank_one(kp, vp, wkp, cp, d_in, d_out, up, wp, err, sizeof err);
  }
  const jint keep = rc == MOBIEDIT_OK ? 0 : JNI_ABORT;
  if (wp) env->ReleaseFloatArrayElements(w_out, wp, keep);
  if (up) env->ReleaseFloatArrayElements(u_out, up, keep);
  if (cp) env->ReleaseFloatArrayElements(c, cp, JNI_ABORT);
  if (wkp) env->ReleaseFloatArrayElements(wk, wkp, JNI_ABORT);
  if (vp) env->ReleaseFloatArrayElements(v, vp, JNI_ABORT);
  if (kp) env->ReleaseFloatArrayElements(k, kp, JNI_ABORT);
  if (rc != MOBIEDIT_OK) throw_engine(env, rc, err[0] ? err : "rank-one update failed");
}

JNI_FN(nativeDirections)(JNIEnv* env, jclass, jint kind, jlong seed, jint step, jint stream,
                         jint n, jint d, jfloatArray out) -> void {
  if (n < 0 || d < 0 || !check_len(env, out, n * d, "out", false)) return;
  jfloat* p = env->GetFloatArrayElements(out, nullptr);
  if (p == nullptr) return;
  const int rc = mobiedit_directions(kind, static_cast<uint64_t>(seed), static_cast<uint32_t>(step),
                                     static_cast<uint32_t>(stream), n, d, p);
  env->ReleaseFloatArrayElements(out, p, rc == MOBIEDIT_OK ? 0 : JNI_ABORT);
  if (rc != MOBIEDIT_OK) {
    throw_engine(env, rc, "directions: kind must be 0 (Rademacher) or 1 (Gaussian), n, d >= 0");
  }
}

}  // extern "C"
