// Typed errors of the public C++ API.
//
// Library code never exits, aborts or returns error codes: every failure is thrown as one of the
// classes below (all derive from std::exception, so `catch (const std::exception&)` catches them
// all). Errors raised inside libtorch while running a model (e.g. device out of memory) may
// surface as c10::Error, which also derives from std::exception. After any exception from
// Session::generate the Session stays usable: the next call starts from an empty cache.
//
// Python sees ConfigError as ValueError, ModelLoadError as pylookahead.ModelLoadError (a
// RuntimeError) and InternalError as RuntimeError.
#pragma once

#include <stdexcept>
#include <string>

namespace pylookahead {

// A bad argument or option: a field of a config struct, an empty or out-of-vocabulary prompt,
// a request that does not fit the KV cache. The message names the field, the value and the
// rule, e.g. "ngram_size must be >= 2 (got 1)". Fix the input; retrying as-is fails again.
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

// A broken internal invariant (a bug in pylookahead, please report it). The message starts with
// the source file:line of the failed check.
class InternalError : public std::logic_error {
  public:
    explicit InternalError(const std::string& msg) : std::logic_error(msg) {}
};

}  // namespace pylookahead
