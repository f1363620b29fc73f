/* bf16 <-> fp32 as torch converts them, shared by the native kernels (engine/local/native.py). */
#ifndef TOKENWIRE_BF16_H
#define TOKENWIRE_BF16_H
#include <stdint.h>

static inline float bf16_to_f32(uint16_t x) {
    union { uint32_t u; float f; } c;
    c.u = (uint32_t)x << 16;
    return c.f;
}

/* Round to nearest even; a NaN stays a NaN (0x7FC0, as c10::BFloat16). */
static inline uint16_t f32_to_bf16(float f) {
    union { uint32_t u; float f; } c;
    c.f = f;
    if (f != f) return 0x7FC0;
    return (uint16_t)((c.u + 0x7FFFu + ((c.u >> 16) & 1u)) >> 16);
}
#endif
