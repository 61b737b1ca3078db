// Software prefetch of weight streams, std-only (a GCC/Clang builtin; a no-op elsewhere).
//
// Contract: `p` is an address some later load of this thread will read (a weight line ahead in its
// stream); the line is asked into L2, not L1. A decode step streams each weight once, several streams
// per tile at a time, so a prefetch per line into L1 competes with the tile's own loads for the L1's
// few miss buffers; into L2 the requests queue where there is room, and the loads take the lines from
// L2 to L1 when they come (docs/benchmarks.md, "Weight prefetch"). Never changes a result.
#pragma once

namespace pylookahead {

inline __attribute__((always_inline)) void prefetch_weights(const void* p) {
#if defined(__GNUC__)
    __builtin_prefetch(p, /*rw=*/0, /*locality=*/2);
#else
    (void)p;
#endif
}

}  // namespace pylookahead
