// The pool file (Session::save_pool / load_pool): a SharedPool's n-grams and texts, for one model
// (its vocab_size and architecture). std-only.
//
// Layout (little-endian uint32 fields): magic "PYLAPOOL", version (3), vocab_size, architecture
// length + bytes, the NgramPool (NgramPool::write), then the texts: count, and per text its
// length and token ids. Versions 1 (entries without contexts) and 2 (no texts) are still read.
// See docs/session.md.
#pragma once

#include <string>
#include <utility>

#include "lookahead/shared_pool.h"

namespace pylookahead {

// The model a pool file belongs to: a file is only loaded into a pool of the same model.
struct PoolFileOwner {
    int vocab_size = 0;
    std::string architecture;
};

// Writes `pool` (one consistent snapshot) to `path` via replace_regular_file. Throws ConfigError
// ("path: ...") when it cannot be written.
void write_pool_file(const std::string& path, const SharedPool& pool, const PoolFileOwner& owner);

// Reads the pool and texts saved in `path` (a version 1 or 2 file has no texts). Throws
// ConfigError naming the file and the field when it is missing, not a regular file, corrupt or
// truncated, or saved for another vocab_size or architecture.
std::pair<NgramPool, SharedPool::Texts> read_pool_file(const std::string& path,
                                                       const PoolFileOwner& owner);

}  // namespace pylookahead
