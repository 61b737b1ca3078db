// Umbrella header of the pylookahead C++ API.
#pragma once

#include "pylookahead/config.h"
#include "pylookahead/errors.h"
#include "pylookahead/session.h"
#include "pylookahead/types.h"
