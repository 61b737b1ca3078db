// Typed errors of the public C++ API.
//
// Library code never exits, aborts or returns error codes: every failure is thrown as one of the
// classes below (all derive from std::exception, so `catch (const std::exception&)` catches them
// all). Errors raised inside libtorch while running a model (e.g. device out of memory) may
// surface as c10::Error, which also derives from std::exception. After any exception from
// Session::generate the Session stays usable: the next call starts from an empty cache.
//
// Python sees ConfigError as ValueError, ModelLoadError as pylookahead.ModelLoadError (a
// RuntimeError), SessionBusyError as pylookahead.SessionBusyError (a RuntimeError) and
// InternalError as RuntimeError.
#pragma once

#include <stdexcept>
#include <string>

namespace pylookahead {

// Every message of the classes below is valid UTF-8 with no control character but \n and \t:
// any other byte (part of no valid UTF-8 sequence, a C0 control, NUL) reads as \xNN. Messages
// quote file contents (tensor names, JSON text), so this keeps them printable, whole (a NUL no
// longer ends what()) and decodable by Python.
inline std::string printable_message(const std::string& raw) {
    static const char* const hex = "0123456789abcdef";
    std::string out;
    out.reserve(raw.size());
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(raw[i]); };
    for (size_t i = 0; i < raw.size();) {
        const unsigned char c = byte(i);
        // Length of the valid UTF-8 sequence starting at i (0: not one).
        size_t len = 0;
        if (c >= 0x20 && c < 0x80) {
            len = 1;
        } else if (c == '\n' || c == '\t') {
            len = 1;
        } else if (c >= 0xC2 && c <= 0xF4) {
            const size_t need = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
            bool ok = i + need <= raw.size();
            for (size_t k = 1; ok && k < need; ++k) ok = (byte(i + k) & 0xC0) == 0x80;
            if (ok && need >= 3) {
                const unsigned char c1 = byte(i + 1);
                // No overlong forms, no UTF-16 surrogates, nothing above U+10FFFF.
                if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) ||
                    (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90)) {
                    ok = false;
                }
            }
            if (ok) len = need;
        }
        if (len > 0) {
            out.append(raw, i, len);
            i += len;
        } else {
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
            ++i;
        }
    }
    return out;
}

// A bad argument or option: a field of a config struct, an empty or out-of-vocabulary prompt,
// a request that does not fit the KV cache. The message names the field, the value and the
// rule, e.g. "ngram_size must be >= 2 (got 1)". Fix the input; retrying as-is fails again.
class ConfigError : public std::invalid_argument {
  public:
    explicit ConfigError(const std::string& msg) : std::invalid_argument(printable_message(msg)) {}
};

// A checkpoint that cannot be loaded: missing file, corrupt safetensors header,
// missing or unexpected tensor, shape mismatch, unsupported architecture or dtype.
// The message names the file and the tensor or key, what was expected and what was found.
class ModelLoadError : public std::runtime_error {
  public:
    explicit ModelLoadError(const std::string& msg) : std::runtime_error(printable_message(msg)) {}
};

// A Session called while it is already running a call: re-entered from its own OnTokens
// callback, or used from two threads at once. Nothing was changed; use one Session per thread.
class SessionBusyError : public std::logic_error {
  public:
    explicit SessionBusyError(const std::string& msg) : std::logic_error(printable_message(msg)) {}
};

// A broken internal invariant (a bug in pylookahead, please report it). The message starts with
// the source file:line of the failed check.
class InternalError : public std::logic_error {
  public:
    explicit InternalError(const std::string& msg) : std::logic_error(printable_message(msg)) {}
};

}  // namespace pylookahead
