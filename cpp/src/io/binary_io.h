// Little-endian uint32 fields of the binary files the engine writes (the n-gram pool file).
#pragma once

#include <cstdint>
#include <istream>
#include <ostream>

namespace pylookahead {

inline void write_u32_le(std::ostream& out, uint32_t v) {
    const char b[4] = {static_cast<char>(v & 0xFF), static_cast<char>((v >> 8) & 0xFF),
                       static_cast<char>((v >> 16) & 0xFF), static_cast<char>((v >> 24) & 0xFF)};
    out.write(b, 4);
}

// False when the stream ends before 4 bytes.
inline bool read_u32_le(std::istream& in, uint32_t* v) {
    unsigned char b[4];
    if (!in.read(reinterpret_cast<char*>(b), 4)) return false;
    *v = static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 |
         static_cast<uint32_t>(b[2]) << 16 | static_cast<uint32_t>(b[3]) << 24;
    return true;
}

}  // namespace pylookahead
