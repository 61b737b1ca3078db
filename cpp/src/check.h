// Internal invariant checks. PYLA_CHECK is always on and throws InternalError with file:line;
// it never aborts. User errors are ConfigError / ModelLoadError, thrown directly.
#pragma once

#include <sstream>
#include <string>

#include "pylookahead/errors.h"

#define PYLA_CHECK(cond, msg)                                                                 \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            std::ostringstream pyla_check_os_;                                                \
            pyla_check_os_ << __FILE__ << ":" << __LINE__ << ": check failed: " #cond << ": " \
                           << msg;                                                            \
            throw ::pylookahead::InternalError(pyla_check_os_.str());                         \
        }                                                                                     \
    } while (0)
