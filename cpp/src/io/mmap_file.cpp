#include "io/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/regular_file.h"
#include "pylookahead/errors.h"

namespace pylookahead {

MmapFile::MmapFile(const std::string& path) : path_(path) {
    const int fd = *open_regular_file(path, FileError::kLoad, /*missing_ok=*/false);
    struct stat st{};
    if (::fstat(fd, &st) != 0) {
        ::close(fd);
        throw ModelLoadError(path + ": cannot stat file (" + std::strerror(errno) + ")");
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
        addr_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (addr_ == MAP_FAILED) {
            int err = errno;
            ::close(fd);
            addr_ = nullptr;
            throw ModelLoadError(path + ": cannot mmap file (" + std::strerror(err) + ")");
        }
    }
    ::close(fd);
}

MmapFile::~MmapFile() {
    if (addr_ != nullptr) {
        ::munmap(addr_, size_);
    }
}

}  // namespace pylookahead
