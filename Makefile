# `make demo` sets up .venv and runs the main job; `make test` runs the test suite.
# Both install the exact versions in requirements-test.txt (torch: the newest release supported);
# `make test-torch-oldest` runs the suite again at the oldest torch supported; `make test-latest` runs it
# against the newest releases of every dependency, torch included (in .venv-latest), so that drift shows
# before it bites. CI (.ci/run) runs `make test`, `make test-transformers` and `make test-torch-oldest`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP_VERSION := 26.3

# A side environment $(1): requirements-test.txt with the lines of every package the pins file $(2) names
# replaced by that file's, and also those matching the extended regex $(3) (a torch pins file replaces
# torch's whole stack: triton, nvidia-*, cuda-*).
define side_venv
	$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install -q pip==$(PIP_VERSION)
	sed -n 's/^\([A-Za-z0-9_.-]*\)==.*/\1==/p' $(2) > $(1)/overridden.txt
	grep -v -i -F -f $(1)/overridden.txt requirements-test.txt | grep -v -i -E '$(3)' > $(1)/requirements.txt
	$(1)/bin/python -m pip install -q -r $(1)/requirements.txt -r $(2)
	$(1)/bin/python -m pip install -q --no-deps -e .
	touch $(1)/.installed
endef

.PHONY: demo test test-latest bench bench-zoo bench-llm bench-depth bench-memory opinfo setup clean

demo: $(VENV)/.installed
	$(BIN)/onnxport demo

# The environment and the side runtimes install side by side (neither uses the other).
test:
	$(MAKE) --no-print-directory -j2 $(VENV)/.installed runtimes
	$(BIN)/python -m pytest -n auto --dist loadfile -m "not slow and not sweep" --durations=10

# The broad sweeps (marked `sweep`: all of torch's OpInfo database, the zoo without autograd (a case per family;
# the rest `slow`), the fuzz seeds past the first 30, the transformers.js matrix in Node and Chromium, the
# export-hf checkpoint variants, and variants of what make test checks once: the batch-1 zoo exports past a text encoder's and a decoder's, more
# killed-save stages), left out of `make test`; CI runs them once, here, at the newest torch and transformers.
.PHONY: test-sweep
test-sweep: $(VENV)/.installed
	$(BIN)/python -m pytest -n auto --dist loadfile -m "sweep and not slow" --durations=5

# The tests marked `slow` (a minute or more each: exports that fall back to strict capture), left out of
# `make test` and of CI.
.PHONY: test-slow
test-slow: $(VENV)/.installed
	$(BIN)/python -m pytest -n auto --dist loadfile -m slow

# The quantization tests on an emulated x86 CPU with AVX2 and no VNNI (QEMU's Haswell), where onnxruntime's
# uint8 x int8 kernels saturate their int16 pair sums; needs qemu-user (Debian: apt install qemu-user).
.PHONY: test-no-vnni
test-no-vnni: $(VENV)/.installed
	qemu-x86_64 -cpu Haswell $(BIN)/python -m pytest -n 0 -p no:cacheprovider -m "not slow" \
		tests/test_quantize_activations.py tests/test_quantize_kinds.py tests/ops/test_quantized.py

# The tests of the paths transformers' own code takes (marked `transformers`: capture with the cache, the
# decoders, encoder-decoders, the vision-language split, the task heads, the packed vision towers, the layers
# captured once), again, against the other end of the supported range: requirements-test.txt pins the oldest
# transformers supported, $(TF_PINS) the newest (and whatever it needs in other versions), in .venv-tf
# (layered on .venv, below). The sweeps are left out (`make test-sweep` runs them), and so are the transformers
# tests of onnxport's own machinery on a transformers model (quantization, streamed weights, checkpoints' files,
# the CLI, threads and workers), the runs of folders in other runtimes, the diffusers pipelines and the zoo,
# which make test runs at the oldest transformers: CI's budget holds one run of them.
TF_VENV := .venv-tf
TF_PINS := requirements-transformers-newest.txt
TF_TESTS := tests/test_export_hf.py tests/test_llm_cache.py tests/test_hf.py tests/test_cache_layers.py \
	tests/test_seq2seq_cache.py tests/test_export_hf_vlm.py tests/test_export_hf_vlm_qwen.py \
	tests/test_export_hf_tasks.py tests/test_export_hf_vision_tasks.py tests/test_packed_attention.py \
	tests/test_delta_rule.py tests/test_selective_scan.py tests/test_joined_pieces.py tests/test_blocks.py \
	tests/capture/test_transformers_patch.py tests/test_vision_grid_loops.py tests/test_any_resolution.py \
	tests/test_naflex.py

.PHONY: test-transformers
test-transformers: $(TF_VENV)/.installed
	$(TF_VENV)/bin/python -c "import importlib.metadata as m; print(*(f'{p}=={m.version(p)}' for p in ('torch', 'transformers', 'huggingface_hub', 'tokenizers')))"
	$(TF_VENV)/bin/python -m pytest -n auto --dist loadfile -m "transformers and not slow and not sweep" $(TF_TESTS)

# .venv-tf is layered on .venv instead of a second copy of it (torch alone is 6 GB): its own site-packages holds
# only $(TF_PINS)'s packages, installed without dependencies (a pin that needs another release of a package
# pins that too), and a .pth file then adds .venv's site-packages after its own, so those pins shadow
# .venv's releases and everything else is .venv's.
# A layered environment $(1) holding the pins files $(2) installed without dependencies, .venv's site-packages
# after its own.
define layered_venv
	rm -rf $(1)
	$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install -q pip==$(PIP_VERSION)
	$(1)/bin/python -m pip install -q --no-deps $(foreach pins,$(2),-r $(pins))
	echo "import site; site.addsitedir('$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')')" \
		> "$$($(1)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_onnxport_base_venv.pth"
	touch $(1)/.installed
endef

$(TF_VENV)/.installed: $(VENV)/.installed $(TF_PINS)
	$(call layered_venv,$(TF_VENV),$(TF_PINS))

# `make test`'s suite (the slow tests and the sweeps left out) at the oldest torch supported, but for the runtimes
# test (files in other runtimes, whose forms do not depend on the torch that wrote them), the guides' examples
# (their text), the source's layout, the command line's parsing and exit codes, and the saves killed at each
# stage (files on disk), and the quantizers past round to nearest (GPTQ, activations, fused and other kinds: ONNX
# weights and calibration, whatever torch wrote them), which run at the newest torch only, and with the op tests at the
# default opset alone (an op's translation at each opset does not depend on the torch that captured it): torch
# 2.10 exports 1.6x slower, and CI's budget holds the rest: requirements-torch-oldest.txt's torch stack in
# place of requirements-test.txt's (the newest), everything else as pinned there.
OLDEST_VENV := .venv-torch-oldest
# Of the transformers tests, those of the paths every transformers export takes (capture with the cache, the
# decoders, the vision-language split): CI runs the others once at the newest torch (make test) and again at the
# newest transformers (make test-transformers), and could not hold a third run at torch 2.10's speed.
OLDEST_TRANSFORMERS_TESTS := tests/test_export_hf.py tests/test_llm_cache.py tests/test_hf.py \
	tests/test_cache_layers.py tests/test_export_hf_vlm_qwen.py tests/capture/test_transformers_patch.py
OLDEST_PINS := requirements-torch-oldest.txt

.PHONY: test-torch-oldest
test-torch-oldest: $(OLDEST_VENV)/.installed
	$(OLDEST_VENV)/bin/python -m pip list --format=freeze | grep -i -E "^(torch|transformers)=="
	ONNXPORT_TEST_OPSETS=default $(OLDEST_VENV)/bin/python -m pytest -n auto --dist loadfile \
		-m "not slow and not sweep and not transformers" --durations=10 --ignore=tests/runtimes \
		--ignore=tests/test_docs.py --ignore=tests/test_layout.py --ignore=tests/test_cli.py \
		--ignore=tests/test_main_module.py --ignore=tests/test_saving.py --ignore=tests/test_quantize_gptq.py \
		--ignore=tests/test_quantize_activations.py --ignore=tests/test_quantize_fuse.py \
		--ignore=tests/test_quantize_kinds.py
	ONNXPORT_TEST_OPSETS=default $(OLDEST_VENV)/bin/python -m pytest -n auto --dist loadfile \
		-m "transformers and not slow and not sweep" --durations=5 $(OLDEST_TRANSFORMERS_TESTS)

$(OLDEST_VENV)/.installed: pyproject.toml requirements-test.txt $(OLDEST_PINS)
	$(call side_venv,$(OLDEST_VENV),$(OLDEST_PINS),^(torch|triton|nvidia-[a-z0-9-]*|cuda-[a-z-]*)==)

# Every dependency at its newest release, torch included: bumping requirements-test.txt's pins (and
# versions.TESTED) to what this runs green with is how a new release is met.
test-latest:
	$(PYTHON) -m venv .venv-latest
	.venv-latest/bin/python -m pip install -q --upgrade pip
	.venv-latest/bin/python -m pip install -q --upgrade torch -e ".[test]"
	.venv-latest/bin/python -m pip list --format=freeze | grep -i -E "^(torch|onnx|onnx-ir|onnxruntime|transformers|diffusers|numpy)=="
	.venv-latest/bin/python -m pytest -n auto --dist loadfile

bench: $(VENV)/.installed-bench
	$(BIN)/python bench/run.py --out bench/results.md

# One row per transformers model type (tiny random config, static and dynamic export, verified); resumes.
.PHONY: bench-census
bench-census: $(VENV)/.installed
	$(BIN)/python bench/census.py --resume

# export-hf over each task's model types (tiny random checkpoint -> the CLI -> onnxruntime-genai / onnxruntime vs
# eager transformers), one row per task and type; resumes.
.PHONY: bench-export-hf-census
bench-export-hf-census: $(VENV)/.installed
	OMP_NUM_THREADS=1 $(BIN)/python bench/export_hf_census.py --resume

# One row per image-text-to-text model type: export-hf as a user runs it, the same with the support check bypassed,
# generate_vlm against eager, and transformers.exporters beside it (needs onnxscript: the bench set-up); resumes.
# It runs at the newest transformers, with torchvision, timm and scipy (requirements-census.txt), in .venv-census,
# layered on .venv as .venv-tf is.
CENSUS_VENV := .venv-census

# export-hf --target transformers.js over transformers.js's registry (tiny random checkpoint -> the CLI -> its own
# class in Node, against transformers reloading the checkpoint), one row per task and type; resumes.
.PHONY: bench-transformers-js-census
bench-transformers-js-census: $(VENV)/.installed runtimes
	OMP_NUM_THREADS=1 $(BIN)/python bench/transformers_js_census.py --resume

# onnxport's --target transformers.js folders against optimum-onnx's (the exporter transformers.js's own conversion
# script calls), both loaded and timed by transformers.js in Node and headless Chromium: load, latency, first-token
# and per-token times, file sizes per dtype. optimum runs in .venv-optimum (requirements-optimum.txt), layered on
# .venv as .venv-tf is, but with the .pth file written first, so that requirements-optimum.txt's pins of .venv's
# own releases (torch, onnx, onnxruntime) are found satisfied there and not installed twice.
OPTIMUM_VENV := .venv-optimum
OPTIMUM_PINS := requirements-optimum.txt

.PHONY: bench-transformers-js
bench-transformers-js: $(VENV)/.installed $(OPTIMUM_VENV)/.installed runtimes
	$(BIN)/python bench/transformers_js.py --optimum-python $(OPTIMUM_VENV)/bin/python --out bench/transformers_js.md

$(OPTIMUM_VENV)/.installed: $(VENV)/.installed $(OPTIMUM_PINS)
	rm -rf $(OPTIMUM_VENV)
	$(PYTHON) -m venv $(OPTIMUM_VENV)
	$(OPTIMUM_VENV)/bin/python -m pip install -q pip==$(PIP_VERSION)
	echo "import site; site.addsitedir('$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')')" \
		> "$$($(OPTIMUM_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_onnxport_base_venv.pth"
	$(OPTIMUM_VENV)/bin/python -m pip install -q --no-deps -r $(OPTIMUM_PINS)
	$(OPTIMUM_VENV)/bin/optimum-cli export onnx --help > /dev/null
	touch $@

# The speech-recognition census: every type of transformers' speech-to-text mapping, at the newest transformers.
.PHONY: bench-speech-census
bench-speech-census: $(TF_VENV)/.installed
	OMP_NUM_THREADS=1 $(TF_VENV)/bin/python bench/speech_census.py

.PHONY: bench-image-text-census
bench-image-text-census: $(CENSUS_VENV)/.installed
	OMP_NUM_THREADS=1 $(CENSUS_VENV)/bin/python bench/image_text_census.py --resume

$(CENSUS_VENV)/.installed: $(VENV)/.installed-bench $(TF_PINS) requirements-census.txt
	$(call layered_venv,$(CENSUS_VENV),$(TF_PINS) requirements-census.txt)

bench-zoo: $(VENV)/.installed
	$(BIN)/python bench/zoo.py --out bench/zoo.md

opinfo: $(VENV)/.installed
	$(BIN)/python bench/opinfo.py --dtypes float32 float16 int64 int32 bool float64 bfloat16 --out bench/opinfo.md

bench-llm: $(VENV)/.installed
	$(BIN)/python bench/llm.py --out bench/llm.md

.PHONY: bench-quantize
bench-quantize: $(VENV)/.installed
	$(BIN)/python bench/quantize.py --out bench/quantize.md

# onnxruntime's quantize_static on onnxport's and torch.onnx's float Llama (logit error side by side).
.PHONY: bench-quantize-static
bench-quantize-static: $(VENV)/.installed-bench
	$(BIN)/python bench/quantize_static.py --out bench/quantize_static.md

.PHONY: bench-speed
bench-speed: $(VENV)/.installed-bench
	$(BIN)/python bench/speed.py --out bench/speed.md

bench-depth: $(VENV)/.installed-bench
	$(BIN)/python bench/depth.py --out bench/depth.md

bench-memory: $(VENV)/.installed-bench
	$(BIN)/python bench/memory.py --out bench/memory.md

.PHONY: bench-half
bench-half: $(VENV)/.installed
	$(BIN)/python bench/half.py --out bench/half.md

.PHONY: bench-targets
bench-targets: $(VENV)/.installed-bench
	$(BIN)/python bench/targets.py --out bench/targets.md

.PHONY: bench-verify
bench-verify: $(VENV)/.installed-bench
	$(BIN)/python bench/verify_cost.py --zoo --out bench/verify.md

setup: $(VENV)/.installed

# Older onnxruntime wheels (numpy + onnxruntime only) and onnxruntime-node/-web from npm, at pinned versions,
# for tests/runtimes; setup.sh skips what is already installed at its pins.
.PHONY: runtimes
runtimes:
	PYTHON=$(PYTHON) bash tests/runtimes/setup.sh .runtimes

.PHONY: bench-runtimes
bench-runtimes: $(VENV)/.installed runtimes
	$(BIN)/python bench/runtimes.py --out bench/runtimes.md

$(VENV)/.installed: pyproject.toml requirements-test.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q pip==$(PIP_VERSION)
	$(BIN)/python -m pip install -q -r requirements-test.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $@

$(VENV)/.installed-bench: $(VENV)/.installed requirements-bench.txt
	$(BIN)/python -m pip install -q -r requirements-bench.txt
	touch $@

clean:
	rm -rf $(VENV) .venv-latest $(TF_VENV) $(CENSUS_VENV) $(OLDEST_VENV) onnxport-demo build *.egg-info src/*.egg-info
