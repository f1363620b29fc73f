/* The functions the native kernels' library exports: engine/local/native.py binds each with the
 * ctypes types of native.PROTOTYPES, and tests/engine/local/test_engine_native_binding.py holds
 * that table to these declarations (every source includes this header, so the compiler holds the
 * definitions to them). */
#ifndef TOKENWIRE_H
#define TOKENWIRE_H
#include <stdint.h>

#include "pool.h"

/* decode_attention.c */
int tw_decode_attention(int64_t b, int64_t hq, int64_t hkv, int64_t t, int64_t d, float scale,
                        const uint16_t *q, int64_t qsb, int64_t qsh,
                        const uint16_t *k, int64_t ksb, int64_t ksh, int64_t kst,
                        const uint16_t *v, int64_t vsb, int64_t vsh, int64_t vst,
                        const uint8_t *mask, int64_t msb, uint16_t *out, float *scratch, int64_t threads);

/* linear.c */
int tw_linear_vector(void);
int64_t tw_linear_packed_size(int64_t n, int64_t k);
void tw_linear_pack(int64_t n, int64_t k, const uint16_t *w, int64_t ws, uint16_t *out);
int tw_linear(int64_t m, int64_t k, int64_t n, const uint16_t *x, int64_t xs, const uint16_t *w, const float *bias,
              uint16_t *out, int64_t os, int64_t threads);

/* pool.c (tw_pool_run: pool.h) */
void tw_pool_spin(int64_t ns);
int64_t tw_pool_threads(void);
int tw_pool_parallel(void);
#endif
