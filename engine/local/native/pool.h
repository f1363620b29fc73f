/* The native kernels' own threads (pool.c): shared by the kernels of engine/local/native.py. */
#ifndef TOKENWIRE_POOL_H
#define TOKENWIRE_POOL_H
#include <stdint.h>

/* One share of a job: units [begin, end), on the thread numbered ``slot`` (0 is the caller). */
typedef void (*tw_task)(void *ctx, int64_t begin, int64_t end, int64_t slot);

/* Run ``fn`` over units [0, n) in shares of ``chunk`` units, on the calling thread and up to
 * ``threads`` - 1 of the pool's; returns when every unit is done. Each unit runs exactly once. */
void tw_pool_run(int64_t threads, int64_t n, int64_t chunk, tw_task fn, void *ctx);
#endif
