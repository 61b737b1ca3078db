// Opening (and replacing) the files a checkpoint or a pool consists of, refusing anything that is not a regular
// file (a FIFO would block open() or read() forever, a directory or device reads garbage).
// std-only (POSIX).
#pragma once

#include <optional>
#include <string>

namespace pylookahead {

enum class FileError { kLoad, kConfig };  // which typed error: ModelLoadError or ConfigError

// An open file descriptor of the regular file `path` (O_RDONLY | O_CLOEXEC; never blocks on a
// FIFO: it is opened non-blocking, checked with fstat, and refused). The caller closes it.
// nullopt when `path` does not exist and `missing_ok`; otherwise throws (ModelLoadError or
// ConfigError per `kind`) naming the path: missing, not a regular file, or cannot be opened.
std::optional<int> open_regular_file(const std::string& path, FileError kind, bool missing_ok);

// The whole content of the regular file `path`, read through open_regular_file(); nullopt when
// it does not exist and `missing_ok`.
std::optional<std::string> read_regular_file(const std::string& path, FileError kind,
                                             bool missing_ok);

// Writes `data` to `path` through a temporary file beside it ("<path>.tmp") renamed over it, so a
// reader never sees half a file. A symlink is followed (the file it points to is replaced, the
// link stays); anything there that is not a regular file is refused, never replaced. Throws
// ConfigError naming `field` and the path when it cannot be written.
void replace_regular_file(const std::string& path, const std::string& data, const char* field);

}  // namespace pylookahead
