// Umbrella header of the pylookahead C++ API: Model::load, Session::generate, the option structs,
// the result types and the typed errors. Includes no torch header. Build and link with CMake:
// find_package(pylookahead) + target_link_libraries(app PRIVATE pylookahead::pylookahead)
// (docs/cpp.md).
#pragma once

#include "pylookahead/config.h"
#include "pylookahead/errors.h"
#include "pylookahead/gguf.h"
#include "pylookahead/session.h"
#include "pylookahead/types.h"
