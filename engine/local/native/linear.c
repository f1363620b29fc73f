/* Linear layers of the local engine in bf16: out = x . W^T (+ bias) (engine/local/native.py).
 *
 * W is packed once at load into panels of 64 outputs: for each pair of inputs (k, k+1), the 64
 * outputs' two weights side by side, [panel][k / 2][64][2] bf16, zero padded. With AVX512-BF16 one
 * 64-byte load is 16 outputs x 2 inputs, the operand of VDPBF16PS (exact bf16 products, fp32
 * sums); a block of up to 6 rows x 64 outputs lives in 24 registers, so each weight read from
 * memory serves 6 rows and no output needs a horizontal sum. On a CPU without them (cpu.h decides at
 * run time) a portable loop does the
 * same sums in the same layout. Sums are fp32 from the bias (or 0) in input order, rounded once to
 * bf16 (round to nearest even, as torch's conversion; the AVX512-BF16 instructions treat subnormal
 * inputs and results as zero).
 *
 * Every output is computed alone, in a fixed order: the bits do not depend on the number of rows,
 * on the thread count or on how the panels are split between threads. The panels are shared among
 * the threads asked for by the kernels' own pool (pool.c).
 */
#include <stdint.h>
#include <string.h>

#include "bf16.h"
#include "cpu.h"
#include "tokenwire.h"

#define PANEL 64 /* outputs per panel */
#define MAX_ROWS 6 /* rows per register block */

/* 1 where the AVX512-BF16 path runs on this CPU (cpu.h), else 0 (the portable loops). */
int tw_linear_vector(void) { return tw_cpu_bf16(); }

/* bf16 elements of the packed form of an n x k weight. */
int64_t tw_linear_packed_size(int64_t n, int64_t k) {
    return (n + PANEL - 1) / PANEL * ((k + 1) / 2) * PANEL * 2;
}

/* Pack the n x k weight ``w`` (row stride ``ws``) into ``out`` (tw_linear_packed_size elements). */
void tw_linear_pack(int64_t n, int64_t k, const uint16_t *w, int64_t ws, uint16_t *out) {
    const int64_t pairs = (k + 1) / 2, panels = (n + PANEL - 1) / PANEL;
    for (int64_t p = 0; p < panels; p++)
        for (int64_t j = 0; j < pairs; j++) {
            uint16_t *dst = out + (p * pairs + j) * PANEL * 2;
            for (int64_t c = 0; c < PANEL; c++) {
                const int64_t row = p * PANEL + c;
                for (int64_t h = 0; h < 2; h++) {
                    const int64_t col = 2 * j + h;
                    dst[2 * c + h] = row < n && col < k ? w[row * ws + col] : 0;
                }
            }
        }
}

/* The pair of inputs (2j, 2j+1) of a row as one 32-bit word; the missing second input of an odd
 * k is 0 (never read from past the row). */
static inline uint32_t input_pair(const uint16_t *x, int64_t j, int64_t k) {
    uint32_t v = x[2 * j];
    if (2 * j + 1 < k) v |= (uint32_t)x[2 * j + 1] << 16;
    return v;
}

#ifdef TW_X86_BF16
/* ``rows`` (1..MAX_ROWS, a constant at each call) rows x one panel. */
TW_BF16_TARGET static inline __attribute__((always_inline)) void block(const int rows, int64_t k, const uint16_t *x, int64_t xs,
                                                        const uint16_t *w, const float *bias, uint16_t *out,
                                                        int64_t os, int64_t cols) {
    const int64_t pairs = (k + 1) / 2, whole = k / 2;
    __m512 acc[MAX_ROWS][4];
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = bias ? _mm512_loadu_ps(bias + 16 * j) : _mm512_setzero_ps();
    for (int64_t p = 0; p < pairs; p++) {
        const uint16_t *b = w + p * PANEL * 2;
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b), b1 = (__m512bh)_mm512_loadu_si512(b + 32),
                       b2 = (__m512bh)_mm512_loadu_si512(b + 64), b3 = (__m512bh)_mm512_loadu_si512(b + 96);
        for (int i = 0; i < rows; i++) {
            uint32_t v;
            if (__builtin_expect(p < whole, 1)) memcpy(&v, x + i * xs + 2 * p, 4);
            else v = input_pair(x + i * xs, p, k);
            const __m512bh a = (__m512bh)_mm512_set1_epi32((int)v);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], a, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], a, b1);
            acc[i][2] = _mm512_dpbf16_ps(acc[i][2], a, b2);
            acc[i][3] = _mm512_dpbf16_ps(acc[i][3], a, b3);
        }
    }
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < 4; j++) {
            /* VCVTNEPS2BF16: round to nearest even, a NaN stays a NaN; a result under bf16's smallest
             * normal (1.2e-38) becomes 0, where torch would keep a subnormal */
            const __m256i r = (__m256i)_mm512_cvtneps_pbh(acc[i][j]);
            const int64_t c0 = 16 * j;
            if (c0 + 16 <= cols) _mm256_storeu_si256((__m256i *)(out + i * os + c0), r);
            else if (c0 < cols) _mm256_mask_storeu_epi16(out + i * os + c0, (__mmask16)((1u << (cols - c0)) - 1), r);
        }
}

TW_BF16_TARGET static void panel_bf16(int64_t m, int64_t k, const uint16_t *x, int64_t xs, const uint16_t *w,
                                     const float *bias, uint16_t *out, int64_t os, int64_t cols) {
    int64_t r = 0;
    for (; r + MAX_ROWS <= m; r += MAX_ROWS) block(MAX_ROWS, k, x + r * xs, xs, w, bias, out + r * os, os, cols);
    const uint16_t *xr = x + r * xs;
    uint16_t *o = out + r * os;
    switch (m - r) {
        case 5: block(5, k, xr, xs, w, bias, o, os, cols); break;
        case 4: block(4, k, xr, xs, w, bias, o, os, cols); break;
        case 3: block(3, k, xr, xs, w, bias, o, os, cols); break;
        case 2: block(2, k, xr, xs, w, bias, o, os, cols); break;
        case 1: block(1, k, xr, xs, w, bias, o, os, cols); break;
        default: break;
    }
}
#endif

static void panel_portable(int64_t m, int64_t k, const uint16_t *x, int64_t xs, const uint16_t *w, const float *bias,
                           uint16_t *out, int64_t os, int64_t cols) {
    const int64_t pairs = (k + 1) / 2;
    float acc[PANEL];
    for (int64_t r = 0; r < m; r++) {
        for (int c = 0; c < PANEL; c++) acc[c] = bias ? bias[c] : 0.0f;
        for (int64_t p = 0; p < pairs; p++) {
            const uint32_t v = input_pair(x + r * xs, p, k);
            const float a0 = bf16_to_f32((uint16_t)v), a1 = bf16_to_f32((uint16_t)(v >> 16));
            const uint16_t *b = w + p * PANEL * 2;
#pragma omp simd
            for (int c = 0; c < PANEL; c++) {
                acc[c] += a1 * bf16_to_f32(b[2 * c + 1]);
                acc[c] += a0 * bf16_to_f32(b[2 * c]);
            }
        }
        for (int64_t c = 0; c < cols; c++) out[r * os + c] = f32_to_bf16(acc[c]);
    }
}

typedef struct {
    int64_t m, k, n, xs, os, size;
    int bf16; /* the AVX512-BF16 path runs on this CPU */
    const uint16_t *x, *w;
    const float *bias;
    uint16_t *out;
} LinearJob;

static void linear_share(void *ctx, int64_t begin, int64_t end, int64_t slot) {
    const LinearJob *j = (const LinearJob *)ctx;
    (void)slot;
    for (int64_t p = begin; p < end; p++) {
        const int64_t cols = j->n - p * PANEL < PANEL ? j->n - p * PANEL : PANEL;
        const uint16_t *w = j->w + p * j->size;
        const float *bias = j->bias ? j->bias + p * PANEL : 0;
#ifdef TW_X86_BF16
        if (j->bf16) {
            panel_bf16(j->m, j->k, j->x, j->xs, w, bias, j->out + p * PANEL, j->os, cols);
            continue;
        }
#endif
        panel_portable(j->m, j->k, j->x, j->xs, w, bias, j->out + p * PANEL, j->os, cols);
    }
}

/* out[m][n] (row stride ``os``) = x[m][k] (row stride ``xs``) . W^T + bias, W packed by
 * tw_linear_pack, ``bias`` fp32 padded to whole panels or NULL. Returns 0, or -1 for a shape it
 * does not take. */
int tw_linear(int64_t m, int64_t k, int64_t n, const uint16_t *x, int64_t xs, const uint16_t *w, const float *bias,
              uint16_t *out, int64_t os, int64_t threads) {
    if (m < 0 || k <= 0 || n <= 0 || xs < k || os < n) return -1;
    const int64_t panels = (n + PANEL - 1) / PANEL, size = ((k + 1) / 2) * PANEL * 2;
    LinearJob job = {m, k, n, xs, os, size, tw_cpu_bf16(), x, w, bias, out};
    /* shares of about an eighth of each thread's part: a thread that starts late still gets some */
    tw_pool_run(threads, panels, threads > 1 ? panels / (threads * 8) : panels, linear_share, &job);
    return 0;
}
