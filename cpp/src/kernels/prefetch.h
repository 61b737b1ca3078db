// Software prefetch of weight streams, std-only (a GCC/Clang builtin; a no-op elsewhere).
//
// Contract: `p` is an address some later load of this thread will read (a weight line ahead in its
// stream); the line is asked into L2, not L1. A decode step streams each weight once, several streams
// per tile at a time, so a prefetch per line into L1 competes with the tile's own loads for the L1's
// few miss buffers; into L2 the requests queue where there is room, and the loads take the lines from
// L2 to L1 when they come (docs/benchmarks.md, "Weight prefetch"). Never changes a result.
#pragma once

#include <cstdint>

namespace pylookahead {

inline __attribute__((always_inline)) void prefetch_weights(const void* p) {
#if defined(__GNUC__)
    __builtin_prefetch(p, /*rw=*/0, /*locality=*/2);
#else
    (void)p;
#endif
}

// The line `ahead` bytes into one of a tile's weight streams: `stream` is its first byte, `len` its
// bytes, and the tile reads consecutive streams spanning `span` bytes from its first. Past the end
// of the stream the line is taken as far into the stream the next tile reads in its place (`span`
// bytes on), so every stream of the next tile starts with its first lines on their way, not only
// the one that continues this tile's last stream. A line past the weights is never loaded (a
// prefetch does not fault; the address is formed as an integer, not as a pointer past an array);
// one on another thread's share costs a line of bandwidth.
inline __attribute__((always_inline)) void prefetch_stream(const void* stream, int64_t ahead,
                                                           int64_t len, int64_t span) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(stream) +
                         static_cast<uintptr_t>(ahead < len ? ahead : ahead + (span - len));
    prefetch_weights(reinterpret_cast<const void*>(at));
}

}  // namespace pylookahead
