#!/usr/bin/env bash
# CI for the Android demo app (android_demo/), runnable from anywhere; `make test` calls it.
#   1. host build of the JNI bridge (app/src/main/cpp, compiled with the real native/ engine)
#   2. JVM tests (JUnit 5): app logic (core/), the JNI bridge against the real engine (jni/),
#      the edit pipeline with a Java objective (app/); prints "N passed, N failed" last
#   3. offline signed debug APK of the Java part, built without Gradle from Debian's tools
#      (aapt2, javac against android.jar API 23, dx, zipalign, apksigner), then checked with
#      `aapt dump badging` and `apksigner verify`
# Sets itself up: installs missing Debian packages (apt-get update only if something is
# missing) and fetches android.jar + dx from Debian bullseye with a private apt configuration
# under android_demo/build/ (the system's sources are never changed). Idempotent; all outputs
# under android_demo/build/. Exits non-zero on any failure.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BUILD="$HERE/build"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
PACKAGES=(cmake ninja-build g++ g++-aarch64-linux-gnu openjdk-17-jdk-headless junit5 aapt zipalign
  apksigner zip)
JUNIT=/usr/share/java/junit-platform-console-standalone.jar
PKG=dev.mobiedit.demo
TESTS_LINE=""

log() { printf '\n== android_demo/ci.sh: %s\n' "$*"; }
die() { echo "android_demo/ci.sh: $*" >&2; exit 1; }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
# The closing line CI reads is printed last, also when a later step fails.
trap '[[ -n "$TESTS_LINE" ]] && echo "$TESTS_LINE"' EXIT

ensure_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do installed "$p" || missing+=("$p"); done
  ((${#missing[@]} == 0)) && return 0
  log "installing ${missing[*]}"
  local sudo=()
  [[ "$(id -u)" == 0 ]] || sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# android.jar (API 23) and dx exist only in bullseye (libandroid-23-java, dalvik-exchange).
# Download them with a private apt configuration and unpack them under build/android-sdk.
ANDROID_JAR="$BUILD/android-sdk/usr/share/java/com.android.android-23.jar"
DX_JAR="$BUILD/android-sdk/usr/share/java/com.android.dx-10.0.0.jar"
ensure_android_jars() {
  [[ -s "$ANDROID_JAR" && -s "$DX_JAR" ]] && return 0
  log "fetching android.jar (libandroid-23-java) and dx (dalvik-exchange) from Debian bullseye"
  local apt="$BUILD/bullseye-apt"
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/sources.list.d" "$apt/debs"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main" \
    >"$apt/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=$apt/sources.list.d"
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o "Dir::Cache::pkgcache="
    -o "Dir::Cache::srcpkgcache=" -o "APT::Sandbox::User=root" -q)
  apt-get "${opts[@]}" update >/dev/null
  (cd "$apt/debs" && apt-get "${opts[@]}" download libandroid-23-java dalvik-exchange >/dev/null)
  local deb
  for deb in "$apt"/debs/*.deb; do dpkg-deb -x "$deb" "$BUILD/android-sdk"; done
  [[ -s "$ANDROID_JAR" && -s "$DX_JAR" ]] || die "android.jar / dx.jar not found after download"
}

# JDK 17 (javac -source 8 and jni.h), whatever else is installed or first on PATH.
use_jdk17() {
  local jdk
  jdk="$(find /usr/lib/jvm -maxdepth 1 -name 'java-17-openjdk-*' -type d | head -n1)"
  [[ -x "$jdk/bin/javac" ]] || die "JDK 17 not found under /usr/lib/jvm (openjdk-17-jdk-headless)"
  export JAVA_HOME="$jdk" PATH="$jdk/bin:$PATH"
}

build_jni() {
  log "host build of libmobiedit_jni.so (JNI bridge + native engine)"
  cmake -S "$HERE/app/src/main/cpp" -B "$BUILD/jni-host" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DMOBIEDIT_JNI_WERROR=ON >/dev/null
  cmake --build "$BUILD/jni-host" -j "$JOBS"
  # Compile + link check for arm64 (glibc cross compiler, the phone's ABI minus bionic): the
  # same CMakeLists with the engine's aarch64 toolchain file; the NDK build itself needs Gradle.
  log "aarch64 cross build of the same JNI library (compile/link check only)"
  cmake -S "$HERE/app/src/main/cpp" -B "$BUILD/jni-aarch64" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DMOBIEDIT_JNI_WERROR=ON -DMOBIEDIT_JNI_INCLUDE="$JAVA_HOME/include" \
    -DMOBIEDIT_JNI_MD_INCLUDE="$JAVA_HOME/include/linux" \
    -DCMAKE_TOOLCHAIN_FILE="$HERE/../native/cmake/aarch64-linux-gnu.cmake" >/dev/null
  cmake --build "$BUILD/jni-aarch64" -j "$JOBS" >/dev/null
  local so="$BUILD/jni-aarch64/libmobiedit_jni.so"
  LC_ALL=C readelf -h "$so" | grep -q 'Machine:.*AArch64' || die "$so is not AArch64"
  local n
  n="$(LC_ALL=C readelf --dyn-syms -W "$so" | grep -c ' Java_dev_mobiedit_demo_jni_NativeEngine_' || true)"
  ((n == 16)) || die "$so exports $n JNI functions, expected 16"
  echo "aarch64 libmobiedit_jni.so: AArch64, $n JNI entry points exported"
}

# Sources of the plain-Java part (no Android imports): core, jni, app.
plain_sources() {
  find "$HERE/app/src/main/java" -name '*.java' -not -path '*/ui/*' -not -path '*/runtime/*'
}

run_jvm_tests() {
  log "JVM tests (JUnit 5): logic + JNI bridge against the real engine"
  local out="$BUILD/jvm"
  rm -rf "$out" && mkdir -p "$out/main" "$out/test"
  # shellcheck disable=SC2046
  javac -nowarn -Xlint:-options -source 8 -target 8 -encoding UTF-8 -d "$out/main" $(plain_sources)
  # shellcheck disable=SC2046
  javac -nowarn -encoding UTF-8 -cp "$out/main:$JUNIT" -d "$out/test" \
    $(find "$HERE/app/src/test/java" -name '*.java')
  local rc=0
  java -Dmobiedit.requireJni=true -Dmobiedit.jni.path="$BUILD/jni-host/libmobiedit_jni.so" \
    -jar "$JUNIT" -cp "$out/main:$out/test:$HERE/app/src/test/resources" --scan-classpath \
    --disable-banner --disable-ansi-colors --details=tree --fail-if-no-tests --reports-dir "$out/reports" \
    >"$out/junit.log" 2>&1 || rc=$?
  grep -E '^\[ *[0-9]+ tests (found|successful|failed|aborted) *\]$' "$out/junit.log" || true
  local passed failed aborted
  passed="$(sed -n 's/^\[ *\([0-9]*\) tests successful *\]$/\1/p' "$out/junit.log")"
  failed="$(sed -n 's/^\[ *\([0-9]*\) tests failed *\]$/\1/p' "$out/junit.log")"
  aborted="$(sed -n 's/^\[ *\([0-9]*\) tests aborted *\]$/\1/p' "$out/junit.log")"
  [[ -n "$passed" && -n "$failed" ]] || { cat "$out/junit.log"; die "no JUnit summary (see above)"; }
  TESTS_LINE="$passed passed, $failed failed"
  [[ "${aborted:-0}" != 0 ]] && TESTS_LINE="$TESTS_LINE, $aborted skipped"
  ((rc == 0 && failed == 0 && ${aborted:-0} == 0)) || { sed -n '1,200p' "$out/junit.log"; die "JVM tests failed"; }
}

build_apk() {
  log "offline debug APK (aapt2 + javac/android.jar 23 + dx + zipalign + apksigner)"
  local out="$BUILD/apk" keystore="$BUILD/debug.keystore"
  rm -rf "$out" && mkdir -p "$out/gen" "$out/stubs" "$out/classes"
  sed 's|<manifest |<manifest package="'"$PKG"'" |' "$HERE/app/src/main/AndroidManifest.xml" \
    >"$out/AndroidManifest.xml"
  aapt2 compile --dir "$HERE/app/src/main/res" -o "$out/res.zip"
  aapt2 link -o "$out/base.apk" -I "$ANDROID_JAR" --manifest "$out/AndroidManifest.xml" \
    --java "$out/gen" --min-sdk-version 23 --target-sdk-version 23 --version-code 1 \
    --version-name 0.1.0 "$out/res.zip"
  local jc=(javac -nowarn -Xlint:-options -source 8 -target 8 -encoding UTF-8 -bootclasspath "$ANDROID_JAR")
  # ExecuTorch's Java API: compile-only stubs (never packaged; see offline/executorch-stubs).
  # shellcheck disable=SC2046
  "${jc[@]}" -d "$out/stubs" $(find "$HERE/offline/executorch-stubs" -name '*.java')
  # shellcheck disable=SC2046
  "${jc[@]}" -cp "$out/stubs" -d "$out/classes" \
    $(find "$HERE/app/src/main/java" "$out/gen" -name '*.java')
  # No lambdas / method references in app code: with -target 8 they are the only invokedynamic.
  local indy
  indy="$(find "$out/classes" -name '*.class' -print0 | xargs -0 javap -c -p | grep -c invokedynamic || true)"
  [[ "$indy" == 0 ]] || die "app code uses $indy lambda/method-reference call sites (not allowed: API 23)"
  java -cp "$DX_JAR" com.android.dx.command.Main --dex --min-sdk-version=23 \
    --output="$out/classes.dex" "$out/classes"
  cp "$out/base.apk" "$out/unsigned.apk"
  (cd "$out" && zip -q -X unsigned.apk classes.dex)
  zipalign -p -f 4 "$out/unsigned.apk" "$out/aligned.apk"
  if [[ ! -s "$keystore" ]]; then
    keytool -genkeypair -keystore "$keystore" -storepass android -keypass android \
      -alias androiddebugkey -dname "CN=Android Debug,O=Android,C=US" -keyalg RSA -keysize 2048 \
      -validity 10000 >/dev/null 2>&1
  fi
  apksigner sign --ks "$keystore" --ks-pass pass:android --key-pass pass:android \
    --ks-key-alias androiddebugkey --out "$BUILD/mobiedit-demo-debug.apk" "$out/aligned.apk"
  check_apk "$BUILD/mobiedit-demo-debug.apk"
}

check_apk() {
  local apk="$1" badging
  log "checking $(basename "$apk")"
  apksigner verify --verbose "$apk" | tee "$BUILD/apk/verify.txt" | grep -E 'Verifies|v2 scheme'
  grep -q '^Verifies$' "$BUILD/apk/verify.txt" || die "apksigner verify failed"
  badging="$(aapt dump badging "$apk")"
  echo "$badging" | grep -E "^(package|sdkVersion|targetSdkVersion|launchable-activity|application-label):"
  grep -q "^package: name='$PKG' versionCode='1' versionName='0.1.0'" <<<"$badging" || die "badging: package"
  grep -q "^sdkVersion:'23'" <<<"$badging" || die "badging: minSdk"
  grep -q "^launchable-activity: name='$PKG.ui.MainActivity'" <<<"$badging" || die "badging: launcher"
  aapt list "$apk" | grep -qx classes.dex || die "APK has no classes.dex"
  if aapt list "$apk" | grep -q '^lib/'; then die "offline APK unexpectedly has native libraries"; fi
  echo "APK: $apk ($(stat -c %s "$apk") bytes), signed, aligned, no native code (see README)"
}

main() {
  local t0=$SECONDS
  ensure_packages
  use_jdk17
  ensure_android_jars
  build_jni
  run_jvm_tests
  build_apk
  log "done in $((SECONDS - t0)) s"
}

main "$@"
