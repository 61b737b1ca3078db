// The engine factory: EngineConfig (names, as users write them) -> a loaded Transformer and the
// ModelInfo that describes it. Parses and validates every EngineConfig field (EngineConfig::
// validate is defined here). Thread-safe, except that engine.num_threads > 0 changes libtorch's
// process-wide thread count.
#pragma once

#include <memory>
#include <string>

#include "model/transformer.h"
#include "pylookahead/session.h"

namespace pylookahead {

// Reads the checkpoint directory or GGUF file `model_dir` as `engine` says (Model::load's
// contract) and fills every field of `info` but load_seconds. Throws ConfigError for a bad
// `engine`, ModelLoadError for missing, corrupt or unsupported files.
std::unique_ptr<Transformer> load_transformer(const std::string& model_dir,
                                              const EngineConfig& engine, ModelInfo* info);

}  // namespace pylookahead
