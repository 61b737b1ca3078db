#include <gtest/gtest.h>

#include <string>

#include "pylookahead/config.h"
#include "pylookahead/errors.h"

namespace pylookahead {
namespace {

std::string error_of(const LookaheadConfig& c) {
    try {
        c.validate();
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "";
}

LookaheadConfig make(int W, int N, int G) {
    LookaheadConfig c;
    c.window_size = W;
    c.ngram_size = N;
    c.verification_set_size = G;
    return c;
}

TEST(LookaheadConfigValidate, AcceptsTheDefaultsAndTheEdges) {
    EXPECT_NO_THROW(LookaheadConfig{}.validate());
    EXPECT_NO_THROW(make(1, 2, 0).validate());
    EXPECT_NO_THROW(make(64, 2, 64).validate());
    EXPECT_NO_THROW(make(8, 64, 8).validate());  // (8 + 8) * 63 = 1008
}

TEST(LookaheadConfigValidate, NamesFieldValueAndRule) {
    EXPECT_EQ(error_of(make(0, 4, 4)), "window_size must be >= 1 (got 0)");
    EXPECT_EQ(error_of(make(65, 4, 4)), "window_size must be <= 64 (got 65)");
    EXPECT_EQ(error_of(make(4, 1, 4)), "ngram_size must be >= 2 (got 1)");
    EXPECT_EQ(error_of(make(4, 65, 4)), "ngram_size must be <= 64 (got 65)");
    EXPECT_EQ(error_of(make(4, 4, -1)), "verification_set_size must be >= 0 (got -1)");
    EXPECT_EQ(error_of(make(4, 4, 65)), "verification_set_size must be <= 64 (got 65)");
    const std::string too_many = error_of(make(32, 64, 32));
    EXPECT_NE(too_many.find("must be <= 1024 (got 4032"), std::string::npos) << too_many;
}

TEST(GenerationConfigValidate, Rules) {
    GenerationConfig g;
    EXPECT_NO_THROW(g.validate());
    g.max_new_tokens = 0;
    EXPECT_THROW(g.validate(), ConfigError);
    g.max_new_tokens = 1;
    g.stop_token_ids = {2, -3};
    try {
        g.validate();
        FAIL();
    } catch (const ConfigError& e) {
        EXPECT_EQ(std::string(e.what()), "stop_token_ids must be >= 0 (got -3 at index 1)");
    }
}

}  // namespace
}  // namespace pylookahead
