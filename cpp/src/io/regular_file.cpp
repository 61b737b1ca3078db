#include "io/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "pylookahead/errors.h"

namespace pylookahead {

namespace {

[[noreturn]] void fail(FileError kind, const std::string& msg) {
    if (kind == FileError::kConfig) throw ConfigError(msg);
    throw ModelLoadError(msg);
}

}  // namespace

std::optional<int> open_regular_file(const std::string& path, FileError kind, bool missing_ok) {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        const int err = errno;
        if (err == ENOENT && missing_ok) return std::nullopt;
        fail(kind, path + (err == ENOENT
                               ? ": missing file"
                               : ": cannot open file (" + std::string(std::strerror(err)) + ")"));
    }
    struct stat st{};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        fail(kind, path + ": not a regular file");
    }
    // Regular files never block; clear the flag anyway so that the descriptor reads normally.
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}

std::optional<std::string> read_regular_file(const std::string& path, FileError kind,
                                             bool missing_ok) {
    const std::optional<int> fd = open_regular_file(path, kind, missing_ok);
    if (!fd) return std::nullopt;
    std::string out;
    char buf[1 << 16];
    for (;;) {
        const ssize_t n = ::read(*fd, buf, sizeof buf);
        if (n == 0) break;
        if (n < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            ::close(*fd);
            fail(kind, path + ": read failed (" + std::strerror(err) + ")");
        }
        out.append(buf, static_cast<size_t>(n));
    }
    ::close(*fd);
    return out;
}

void replace_regular_file(const std::string& path, const std::string& data, const char* field) {
    const std::string name(field);
    std::string target = path;
    struct stat st{};
    if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
        char* resolved = ::realpath(path.c_str(), nullptr);
        if (resolved == nullptr) {
            throw ConfigError(name + ": '" + path +
                              "' is a symlink to a missing file or directory");
        }
        target = resolved;
        std::free(resolved);
    }
    if (::stat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
        throw ConfigError(name + ": '" + path +
                          "' exists and is not a regular file (refusing to replace it)");
    }
    const std::string tmp = target + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) throw ConfigError(name + ": cannot write '" + tmp + "'");
        out.write(data.data(), static_cast<std::streamsize>(data.size()));
        out.flush();
        if (!out) throw ConfigError(name + ": writing '" + tmp + "' failed");
    }
    if (std::rename(tmp.c_str(), target.c_str()) != 0) {
        std::remove(tmp.c_str());
        throw ConfigError(name + ": cannot rename '" + tmp + "' to '" + target + "'");
    }
}

}  // namespace pylookahead
