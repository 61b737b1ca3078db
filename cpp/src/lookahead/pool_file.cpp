#include "lookahead/pool_file.h"

#include <cstring>
#include <optional>
#include <sstream>

#include "io/binary_io.h"
#include "io/regular_file.h"
#include "pylookahead/errors.h"

namespace pylookahead {

namespace {

constexpr char kPoolMagic[8] = {'P', 'Y', 'L', 'A', 'P', 'O', 'O', 'L'};
// 2: entries carry their context (NgramPool::kContextLen ids); 3: the pool's texts follow it.
constexpr uint32_t kPoolVersion = 3;

uint32_t read_u32(std::istream& in, const std::string& path, const char* field) {
    uint32_t v = 0;
    if (!read_u32_le(in, &v)) {
        throw ConfigError(path + ": not a pylookahead pool file (truncated before " + field + ")");
    }
    return v;
}

}  // namespace

void write_pool_file(const std::string& path, const SharedPool& pool, const PoolFileOwner& owner) {
    const auto [ngrams, texts] = pool.snapshot();
    std::ostringstream out;
    out.write(kPoolMagic, sizeof(kPoolMagic));
    write_u32_le(out, kPoolVersion);
    write_u32_le(out, static_cast<uint32_t>(owner.vocab_size));
    write_u32_le(out, static_cast<uint32_t>(owner.architecture.size()));
    out.write(owner.architecture.data(), static_cast<std::streamsize>(owner.architecture.size()));
    ngrams.write(out);
    write_u32_le(out, static_cast<uint32_t>(texts.size()));
    for (const std::vector<TokenId>& text : texts) {
        write_u32_le(out, static_cast<uint32_t>(text.size()));
        for (TokenId id : text) write_u32_le(out, static_cast<uint32_t>(id));
    }
    replace_regular_file(path, out.str(), "path");
}

std::pair<NgramPool, SharedPool::Texts> read_pool_file(const std::string& path,
                                                       const PoolFileOwner& owner) {
    // Read whole (pool files are at most a few MiB) from a regular file: a FIFO would block.
    const std::optional<std::string> data = read_regular_file(path, FileError::kConfig, true);
    if (!data) throw ConfigError("path: cannot open the pool file '" + path + "' (missing)");
    std::istringstream in(*data);
    char magic[sizeof(kPoolMagic)] = {};
    if (!in.read(magic, sizeof(magic)) || std::memcmp(magic, kPoolMagic, sizeof(magic)) != 0) {
        throw ConfigError(path + ": not a pylookahead pool file (magic must be 'PYLAPOOL')");
    }
    const uint32_t version = read_u32(in, path, "version");
    if (version < 1 || version > kPoolVersion) {
        throw ConfigError(path + ": pool file version must be 1, 2 or " +
                          std::to_string(kPoolVersion) + " (got " + std::to_string(version) + ")");
    }
    const uint32_t vocab = read_u32(in, path, "vocab_size");
    if (vocab != static_cast<uint32_t>(owner.vocab_size)) {
        throw ConfigError(path + ": pool vocab_size must equal the model's " +
                          std::to_string(owner.vocab_size) + " (got " + std::to_string(vocab) +
                          ")");
    }
    const uint32_t arch_len = read_u32(in, path, "architecture");
    if (arch_len > 256) {
        throw ConfigError(path + ": pool architecture name length must be <= 256 (got " +
                          std::to_string(arch_len) + ")");
    }
    std::string arch(arch_len, '\0');
    if (!in.read(arch.data(), arch_len)) {
        throw ConfigError(path + ": not a pylookahead pool file (truncated in architecture)");
    }
    if (arch != owner.architecture) {
        throw ConfigError(path + ": pool architecture must equal the model's '" +
                          owner.architecture + "' (got '" + arch + "')");
    }
    NgramPool pool = NgramPool::read(in, path, owner.vocab_size, /*with_contexts=*/version >= 2);
    SharedPool::Texts texts;
    if (version >= 3) {
        const uint32_t count = read_u32(in, path, "text count");
        for (uint32_t t = 0; t < count; ++t) {
            const uint32_t len = read_u32(in, path, "text length");
            if (len < 1 || len > SharedPool::kMaxTextTokens) {
                throw ConfigError(path + ": pool text length must be in [1, " +
                                  std::to_string(SharedPool::kMaxTextTokens) + "] (got " +
                                  std::to_string(len) + " in text " + std::to_string(t) + ")");
            }
            std::vector<TokenId> text(len);
            for (uint32_t i = 0; i < len; ++i) {
                const uint32_t id = read_u32(in, path, "text token id");
                if (id >= static_cast<uint32_t>(owner.vocab_size)) {
                    throw ConfigError(path + ": pool text token id must be < vocab_size " +
                                      std::to_string(owner.vocab_size) + " (got " +
                                      std::to_string(id) + " in text " + std::to_string(t) + ")");
                }
                text[i] = static_cast<TokenId>(id);
            }
            texts.push_back(std::move(text));
        }
    }
    if (in.peek() != std::char_traits<char>::eof()) {
        throw ConfigError(path + ": trailing bytes after the pool data");
    }
    return {std::move(pool), std::move(texts)};
}

}  // namespace pylookahead
