#include "io/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "pylookahead/errors.h"

namespace pylookahead {

MmapFile::MmapFile(const std::string& path) : path_(path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        throw ModelLoadError(path + ": cannot open file (" + std::strerror(errno) + ")");
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw ModelLoadError(path + ": not a regular file");
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
