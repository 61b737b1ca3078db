// Read-only memory map of a whole file (RAII). std-only (POSIX).
#pragma once

#include <cstddef>
#include <string>

namespace pylookahead {

class MmapFile {
  public:
    // Maps `path` read-only. Throws ModelLoadError naming the file if it cannot be opened or mapped.
    explicit MmapFile(const std::string& path);
    ~MmapFile();
    MmapFile(const MmapFile&) = delete;
    MmapFile& operator=(const MmapFile&) = delete;

    const unsigned char* data() const { return static_cast<const unsigned char*>(addr_); }
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }

  private:
    std::string path_;
    void* addr_ = nullptr;
    size_t size_ = 0;
};

}  // namespace pylookahead
