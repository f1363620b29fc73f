/* Which vector paths run, decided on the CPU at run time: the library is built for its
 * architecture's baseline (no -march=native), so one build serves every CPU of it.
 *
 * TW_BF16_TARGET marks the AVX512-BF16 functions (compiled for those instructions whatever the
 * build's baseline); tw_cpu_bf16() says whether this CPU and its OS run them. TW_CLONES marks a
 * portable loop GCC compiles for x86-64-v4, v3 and the baseline, picking one at load (an ifunc).
 * Built with -DTW_PORTABLE, neither exists: the portable loops alone (for their tests). */
#ifndef TOKENWIRE_CPU_H
#define TOKENWIRE_CPU_H
#include <stdint.h>

#if defined(__x86_64__) && !defined(TW_PORTABLE) \
    && ((defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && __GNUC__ >= 10))
#include <immintrin.h>
#define TW_X86_BF16 1
#define TW_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))
static inline int tw_cpu_bf16(void) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
        && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
}
#else
static inline int tw_cpu_bf16(void) { return 0; }
#endif

#if defined(__x86_64__) && !defined(TW_PORTABLE) && defined(__linux__) && defined(__GLIBC__) \
    && !defined(__clang__) && __GNUC__ >= 12
#define TW_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TW_CLONES
#endif
#endif
