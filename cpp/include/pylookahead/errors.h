// Typed errors of the public C++ API. Python sees ConfigError as ValueError,
// ModelLoadError as pylookahead.ModelLoadError (a RuntimeError) and InternalError
// as RuntimeError. Library code never exits or aborts: every failure is one of these.
#pragma once

#include <stdexcept>
#include <string>

namespace pylookahead {

// A bad argument or option. The message names the field, the value and the rule,
// e.g. "ngram_size must be >= 2 (got 1)".
class ConfigError : public std::invalid_argument {
  public:
    explicit ConfigError(const std::string& msg) : std::invalid_argument(msg) {}
};

// A checkpoint that cannot be loaded: missing file, corrupt safetensors header,
// missing or unexpected tensor, shape mismatch, unsupported architecture or dtype.
// The message names the file and the tensor or key, what was expected and what was found.
class ModelLoadError : public std::runtime_error {
  public:
    explicit ModelLoadError(const std::string& msg) : std::runtime_error(msg) {}
};

// A broken internal invariant (a bug in pylookahead). Carries file:line.
class InternalError : public std::logic_error {
  public:
    explicit InternalError(const std::string& msg) : std::logic_error(msg) {}
};

}  // namespace pylookahead
