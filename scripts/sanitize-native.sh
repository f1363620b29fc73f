#!/usr/bin/env bash
# The native kernels' tests (engine/local/native/, docs/engine-design.md "Building the native
# kernels") with the library built under AddressSanitizer + UBSan, then under ThreadSanitizer.
#   scripts/sanitize-native.sh            both runs
#   scripts/sanitize-native.sh asan|tsan  one of them
# Not in .ci/run (a few minutes on two cores): run it after any change to engine/local/native/.
# Needs gcc (or $CC) with its sanitizer runtimes (Debian: libasan8, libubsan1, libtsan2, which come
# with gcc). Exits non-zero on a failed test or on any sanitizer report.
#
# Python and torch are not instrumented: the runtime is preloaded (LD_PRELOAD) so that it comes
# first, and only the library's own code is checked. What is turned off, and why:
#   ASan detect_leaks=0      CPython and torch keep allocations until exit by design (interned
#                            objects, caches); leak reports would all be theirs, none the library's
#                            (it allocates nothing but its pool threads).
#   TSan ignore_noninstrumented_modules=1  the accesses TSan's interceptors (memcpy…) see made by
#                            torch, libgomp or CPython, which TSan cannot order: their
#                            synchronization (libgomp's barriers, the GIL) is not instrumented, so
#                            a tensor an OpenMP thread of torch wrote, then read by the kernel on
#                            the thread torch waited on, reads as a race. The library's own
#                            accesses are all checked, against each other (its threads and their
#                            callers meet only through its atomics, which TSan sees).
#   TSan die_after_fork=0    the pool test forks a child of a threaded process and starts a thread
#                            in it, which the library supports (pool.c's atfork handler); TSan would
#                            otherwise kill that child.
#   TSan report_signal_unsafe=0  CPython's signal handlers call malloc, outside the library.
# No report is suppressed by name or by source.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
cc="${CC:-cc}"
tests=(tests/engine/local/test_engine_native_pool.py tests/engine/local/test_engine_native_linear.py
       tests/engine/local/test_engine_native_binding.py tests/engine/local/test_engine_attention.py)
which="${1:-both}"
status=0

run() {  # run NAME RUNTIME CFLAGS OPTIONS_VAR=OPTIONS...
    local name=$1 runtime cflags=$3 log
    runtime="$("$cc" -print-file-name="$2")"
    if [ ! -e "$runtime" ]; then
        echo "sanitize-native: $cc has no $2; install its sanitizer runtime" >&2
        return 1
    fi
    shift 3
    log="$(mktemp -d)"
    local options=() option
    for option in "$@"; do options+=("${option//__LOG__/$log}"); done
    echo "sanitize-native: $name ($cflags)" >&2
    local start=$SECONDS rc=0
    # a fresh cache: the sanitized library is built here (its flags are in its key), and ASan's and
    # TSan's reports go to files, one per process (the pool test forks and spawns)
    env "${options[@]}" TOKENWIRE_CACHE_DIR="$log/cache" TOKENWIRE_NATIVE_CFLAGS="$cflags" LD_PRELOAD="$runtime" \
        .venv/bin/python -m pytest -q -x -p no:cacheprovider "${tests[@]}" || rc=$?
    if compgen -G "$log/report*" >/dev/null; then
        echo "sanitize-native: $name reported:" >&2
        cat "$log"/report* >&2
        rc=1
    fi
    echo "sanitize-native: $name $([ "$rc" = 0 ] && echo clean || echo FAILED) ($((SECONDS - start)) s)" >&2
    rm -rf "$log"
    return "$rc"
}

common="-g -fno-omit-frame-pointer"  # at the library's own -O3: the code as it ships
if [ "$which" = both ] || [ "$which" = asan ]; then
    run "AddressSanitizer + UBSan" libasan.so \
        "$common -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:halt_on_error=1:log_path=__LOG__/report" \
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=__LOG__/report" || status=1
fi
if [ "$which" = both ] || [ "$which" = tsan ]; then
    run "ThreadSanitizer" libtsan.so "$common -fsanitize=thread" \
        TSAN_OPTIONS="ignore_noninstrumented_modules=1:die_after_fork=0:report_signal_unsafe=0:halt_on_error=1:log_path=__LOG__/report" || status=1
fi
exit "$status"
