/* Decode attention of the local engine in bf16, one query token per row (engine/local/native.py).
 *
 * softmax(q.K^T * scale) . V for each row and query head, reading K and V as bf16 and widening
 * them in registers: every score, the softmax and the weighted sum are fp32, and the result is
 * rounded once to bf16 (round to nearest even, as torch's conversion). The query heads of one
 * key-value group share each pass over K and V. Each (row, key-value head) is computed alone, in
 * a fixed order, so the bits do not depend on the batch, on the thread count, or on how the work
 * is split between threads; nor on the length t a row is given beyond its unmasked positions (a
 * row alone at its length, or masked in a longer batch): every position's score is reduced the
 * same way wherever it falls, and the softmax's sum has a fixed order. The local engine's one-pass
 * replay of a resumed generation relies on it (docs/engine.md, "Exactness").
 *
 * Built by engine/local/native.py for the architecture's baseline, at install or at first use; the
 * AVX512-BF16 path (head_dim 64) is chosen on the CPU at run time (cpu.h). No torch headers.
 * The (row, key-value head) pairs are shared among the threads asked for by the kernels' own pool
 * (pool.c).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "bf16.h"
#include "cpu.h"
#include "tokenwire.h"

#define MAX_GROUP 32
#define MAX_DIM 512

/* exp(x) for x <= 0 (a score less the row's maximum): 2^n * p(r), r = x - n ln2, |r| <= ln2/2,
 * p of degree 6: within 2 ulp of expf, and a loop of these vectorizes. */
static inline float exp_nonpositive(float x) {
    x = x < -87.0f ? -87.0f : x;
    float n = floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.428606765330187045e-06f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union { uint32_t u; float f; } s;
    s.u = (uint32_t)((int32_t)n + 127) << 23;
    return p * s.f;
}

/* In place: each of the ``groups`` rows of ``t`` scores becomes its softmax; a masked position
 * (-INFINITY) becomes 0. */
static void softmax_rows(int64_t groups, int64_t t, float *scores) {
    for (int64_t g = 0; g < groups; g++) {
        float *sg = scores + g * t;
        float mx = -INFINITY;
        for (int64_t j = 0; j < t; j++) mx = sg[j] > mx ? sg[j] : mx;
        /* 16 partial sums, position j into lane j % 16, then one fixed tree: the same sum whatever t is
         * (a masked position adds 0), where a vectorized reduction's lanes and tail depend on t */
        float lane[16] = {0.0f};
        for (int64_t j = 0; j < t; j++) {
            float e = sg[j] == -INFINITY ? 0.0f : exp_nonpositive(sg[j] - mx);
            sg[j] = e;
            lane[j % 16] += e;
        }
        for (int w = 8; w > 0; w /= 2)
            for (int i = 0; i < w; i++) lane[i] += lane[i + w];
        const float inv = 1.0f / lane[0];
#pragma omp simd
        for (int64_t j = 0; j < t; j++) sg[j] *= inv;
    }
}

/* The arguments of one (row, key-value head). */
typedef struct {
    int64_t groups, t, d, qsh, kst, vst;
    float scale;
    const uint16_t *q, *k, *v; /* this row's first query head of the group; this head's K and V */
    const uint8_t *mask;       /* NULL or this row's t bytes */
    uint16_t *out;             /* groups * d */
    float *scores;             /* groups * t */
} Head;

/* Any head_dim: plain loops the compiler vectorizes (for the CPU's vector width: TW_CLONES). */
TW_CLONES static void head_portable(const Head *a) {
    const int64_t groups = a->groups, t = a->t, d = a->d;
    float qf[groups][d], acc[groups][d], kf[d];
    for (int64_t g = 0; g < groups; g++)
        for (int64_t i = 0; i < d; i++) qf[g][i] = bf16_to_f32(a->q[g * a->qsh + i]);
    for (int64_t j = 0; j < t; j++) {
        if (a->mask && !a->mask[j]) {
            for (int64_t g = 0; g < groups; g++) a->scores[g * t + j] = -INFINITY;
            continue;
        }
        const uint16_t *kj = a->k + j * a->kst;
        for (int64_t i = 0; i < d; i++) kf[i] = bf16_to_f32(kj[i]);
        for (int64_t g = 0; g < groups; g++) {
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int64_t i = 0; i < d; i++) s += qf[g][i] * kf[i];
            a->scores[g * t + j] = s * a->scale;
        }
    }
    softmax_rows(groups, t, a->scores);
    memset(acc, 0, sizeof(acc));
    for (int64_t j = 0; j < t; j++) {
        if (a->mask && !a->mask[j]) continue;
        const uint16_t *vj = a->v + j * a->vst;
        for (int64_t i = 0; i < d; i++) kf[i] = bf16_to_f32(vj[i]);
        for (int64_t g = 0; g < groups; g++) {
            const float p = a->scores[g * t + j];
#pragma omp simd
            for (int64_t i = 0; i < d; i++) acc[g][i] += p * kf[i];
        }
    }
    for (int64_t g = 0; g < groups; g++)
        for (int64_t i = 0; i < d; i++) a->out[g * d + i] = f32_to_bf16(acc[g][i]);
}

#ifdef TW_X86_BF16
TW_BF16_TARGET static inline __m512 widen16(const uint16_t *p) { /* 16 bf16 -> 16 fp32 */
    __m512i x = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
}

/* The 16 lane sums of v[0..15], in order, as one vector. */
TW_BF16_TARGET static inline __m512 sum16(const __m512 *v) {
    __m512 w[8], u[4];
    for (int i = 0; i < 8; i++)
        w[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; i++) {
        __m512d a = _mm512_castps_pd(w[2 * i]), b = _mm512_castps_pd(w[2 * i + 1]);
        u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    /* each 128-bit lane L of u[i] holds the partial sums over lane L of v[4i..4i+3] */
    __m512 t01 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
    __m512 t23 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(t01, t23, 0x88), _mm512_shuffle_f32x4(t01, t23, 0xDD));
}

/* exp(x) for x <= 0, 16 at a time: the same reduction and polynomial as exp_nonpositive, with
 * the power of two applied by VSCALEFPS; -INFINITY (a masked position) gives 0. */
TW_BF16_TARGET static inline __m512 exp512_nonpositive(__m512 x) {
    const __mmask16 masked = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
                                    _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps((__mmask16)~masked, _mm512_scalef_ps(p, n));
}

/* In place: each row of t scores becomes exp(score - the row's max); returns 1 / their sum per row. */
TW_BF16_TARGET static void exp_rows512(int64_t groups, int64_t t, float *scores, float *inv) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    const __mmask16 tail = (__mmask16)((1u << (t % 16)) - 1u);
    const int64_t full = t - t % 16;
    for (int64_t g = 0; g < groups; g++) {
        float *sg = scores + g * t;
        __m512 mx = ninf;
        for (int64_t j = 0; j < full; j += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(sg + j));
        if (tail) mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(ninf, tail, sg + full));
        const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
        __m512 sum = _mm512_setzero_ps();
        for (int64_t j = 0; j < full; j += 16) {
            __m512 e = exp512_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(sg + j), m));
            _mm512_storeu_ps(sg + j, e);
            sum = _mm512_add_ps(sum, e);
        }
        if (tail) {
            __m512 e = exp512_nonpositive(_mm512_sub_ps(_mm512_mask_loadu_ps(ninf, tail, sg + full), m));
            _mm512_mask_storeu_ps(sg + full, tail, e);
            sum = _mm512_add_ps(sum, e);
        }
        inv[g] = 1.0f / _mm512_reduce_add_ps(sum);
    }
}

/* head_dim 64: q.K by VDPBF16PS (exact bf16 products, fp32 sums), 16 positions per reduction;
 * the weighted sum of exp(score - max) over V widened in registers, divided by the sum once. */
TW_BF16_TARGET static void head64(const Head *a) {
    const int64_t groups = a->groups, t = a->t;
    float *scores = a->scores;
    __m512bh qv[groups][2];
    for (int64_t g = 0; g < groups; g++) {
        qv[g][0] = (__m512bh)_mm512_loadu_si512((const void *)(a->q + g * a->qsh));
        qv[g][1] = (__m512bh)_mm512_loadu_si512((const void *)(a->q + g * a->qsh + 32));
    }
    const __m512 scale = _mm512_set1_ps(a->scale);
    int64_t j = 0;
    for (; j + 16 <= t; j += 16) {
        for (int jj = 0; jj < 16 && j < 64; jj++) { /* V's first rows, while q.K runs */
            _mm_prefetch((const char *)(a->v + (j + jj) * a->vst), _MM_HINT_T1);
            _mm_prefetch((const char *)(a->v + (j + jj) * a->vst + 32), _MM_HINT_T1);
        }
        for (int64_t g = 0; g < groups; g++) {
            __m512 v[16];
            for (int jj = 0; jj < 16; jj++) {
                const uint16_t *kj = a->k + (j + jj) * a->kst;
                __m512 s = _mm512_dpbf16_ps(_mm512_setzero_ps(), qv[g][0], (__m512bh)_mm512_loadu_si512((const void *)kj));
                v[jj] = _mm512_dpbf16_ps(s, qv[g][1], (__m512bh)_mm512_loadu_si512((const void *)(kj + 32)));
            }
            _mm512_storeu_ps(scores + g * t + j, _mm512_mul_ps(sum16(v), scale));
        }
    }
    if (j < t) { /* the last t % 16 positions: summed by sum16 as in a whole block (zeros beside them), so a
                  * position's score is the same whatever t is (a row alone, or masked in a longer batch) */
        const int64_t rest = t - j;
        for (int64_t g = 0; g < groups; g++) {
            __m512 v[16];
            for (int jj = 0; jj < 16; jj++) {
                if (jj >= rest) {
                    v[jj] = _mm512_setzero_ps();
                    continue;
                }
                const uint16_t *kj = a->k + (j + jj) * a->kst;
                __m512 s = _mm512_dpbf16_ps(_mm512_setzero_ps(), qv[g][0], (__m512bh)_mm512_loadu_si512((const void *)kj));
                v[jj] = _mm512_dpbf16_ps(s, qv[g][1], (__m512bh)_mm512_loadu_si512((const void *)(kj + 32)));
            }
            float block[16];
            _mm512_storeu_ps(block, _mm512_mul_ps(sum16(v), scale));
            memcpy(scores + g * t + j, block, (size_t)rest * sizeof(float));
        }
    }
    if (a->mask)
        for (j = 0; j < t; j++)
            if (!a->mask[j])
                for (int64_t g = 0; g < groups; g++) scores[g * t + j] = -INFINITY;
    float inv[groups];
    exp_rows512(groups, t, scores, inv);
    __m512 acc[groups][4];
    for (int64_t g = 0; g < groups; g++)
        for (int c = 0; c < 4; c++) acc[g][c] = _mm512_setzero_ps();
    for (j = 0; j < t; j++) {
        if (a->mask && !a->mask[j]) continue;
        const uint16_t *vj = a->v + j * a->vst;
        __m512 v0 = widen16(vj), v1 = widen16(vj + 16), v2 = widen16(vj + 32), v3 = widen16(vj + 48);
        for (int64_t g = 0; g < groups; g++) {
            __m512 p = _mm512_set1_ps(scores[g * t + j]);
            acc[g][0] = _mm512_fmadd_ps(p, v0, acc[g][0]);
            acc[g][1] = _mm512_fmadd_ps(p, v1, acc[g][1]);
            acc[g][2] = _mm512_fmadd_ps(p, v2, acc[g][2]);
            acc[g][3] = _mm512_fmadd_ps(p, v3, acc[g][3]);
        }
    }
    for (int64_t g = 0; g < groups; g++) {
        float o[64];
        const __m512 scale_g = _mm512_set1_ps(inv[g]);
        for (int c = 0; c < 4; c++) _mm512_storeu_ps(o + 16 * c, _mm512_mul_ps(acc[g][c], scale_g));
        for (int i = 0; i < 64; i++) a->out[g * 64 + i] = f32_to_bf16(o[i]);
    }
}
#endif

typedef struct {
    int64_t hq, hkv, t, d, groups;
    int bf16; /* the AVX512-BF16 path runs on this CPU (head_dim 64) */
    float scale;
    const uint16_t *q;
    int64_t qsb, qsh;
    const uint16_t *k;
    int64_t ksb, ksh, kst;
    const uint16_t *v;
    int64_t vsb, vsh, vst;
    const uint8_t *mask;
    int64_t msb;
    uint16_t *out;
    float *scratch;
} Job;

/* The (row, key-value head) pairs [begin, end) of a job, with scratch slot ``slot``. */
static void heads(void *ctx, int64_t begin, int64_t end, int64_t slot) {
    const Job *j = (const Job *)ctx;
    const int64_t hkv = j->hkv, groups = j->groups, t = j->t, d = j->d;
    for (int64_t w = begin; w < end; w++) {
        const int64_t row = w / hkv, h = w % hkv;
        Head a = {groups, t, d, j->qsh, j->kst, j->vst, j->scale,
                  j->q + row * j->qsb + h * groups * j->qsh, j->k + row * j->ksb + h * j->ksh,
                  j->v + row * j->vsb + h * j->vsh, j->mask ? j->mask + row * j->msb : NULL,
                  j->out + (row * j->hq + h * groups) * d, j->scratch + slot * groups * t};
#ifdef TW_X86_BF16
        if (d == 64 && j->bf16) {
            head64(&a);
            continue;
        }
#endif
        head_portable(&a);
    }
}

/* Returns 0, or -1 for shapes this kernel does not take (the caller checks them first).
 * q: [b, hq, d] at (qsb, qsh, 1); k, v: [b, hkv, t, d] at (sb, sh, st, 1); mask: NULL, or
 * [b, t] bytes at (msb, 1), nonzero attends; out: [b, hq, d] contiguous; scratch: threads *
 * (hq / hkv) * t floats. */
int tw_decode_attention(int64_t b, int64_t hq, int64_t hkv, int64_t t, int64_t d, float scale,
                        const uint16_t *q, int64_t qsb, int64_t qsh,
                        const uint16_t *k, int64_t ksb, int64_t ksh, int64_t kst,
                        const uint16_t *v, int64_t vsb, int64_t vsh, int64_t vst,
                        const uint8_t *mask, int64_t msb, uint16_t *out, float *scratch, int64_t threads) {
    const int64_t groups = hkv > 0 ? hq / hkv : 0;
    if (hkv <= 0 || groups <= 0 || groups * hkv != hq || groups > MAX_GROUP || d <= 0 || d > MAX_DIM || t <= 0
        || threads <= 0)
        return -1;
    const Job job = {hq, hkv, t, d, groups, tw_cpu_bf16(), scale, q, qsb, qsh, k, ksb, ksh, kst, v, vsb, vsh, vst, mask, msb, out, scratch};
    tw_pool_run(threads, b * hkv, 1, heads, (void *)&job);
    return 0;
}
