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
    EXPECT_NO_THROW(make(0, 2, 1).validate());   // verification only: 1 + 1 * 1 = 2
    EXPECT_EQ(make(0, 4, 3).tokens_per_step(), 10);
    EXPECT_NO_THROW(make(0, 17, 63).validate());  // 1 + 63 * 16 = 1009
}

TEST(LookaheadConfigValidate, NamesFieldValueAndRule) {
    EXPECT_EQ(error_of(make(-1, 4, 4)), "window_size must be >= 0 (got -1)");
    EXPECT_EQ(error_of(make(0, 4, 0)),
              "verification_set_size must be >= 1 when window_size is 0 (got 0): a step without "
              "window and candidates could only emit one token");
    EXPECT_EQ(error_of(make(65, 4, 4)), "window_size must be <= 64 (got 65)");
    EXPECT_EQ(error_of(make(4, 1, 4)), "ngram_size must be >= 2 (got 1)");
    EXPECT_EQ(error_of(make(4, 65, 4)), "ngram_size must be <= 64 (got 65)");
    EXPECT_EQ(error_of(make(4, 4, -1)), "verification_set_size must be >= 0 (got -1)");
    EXPECT_EQ(error_of(make(4, 4, 65)), "verification_set_size must be <= 64 (got 65)");
    const std::string too_many = error_of(make(32, 64, 32));
    EXPECT_NE(too_many.find("must be <= 1024 (got 4032"), std::string::npos) << too_many;
    const std::string too_many_w0 = error_of(make(0, 64, 17));
    EXPECT_NE(too_many_w0.find("1 + verification_set_size * (ngram_size - 1) must be <= 1024 (got "
                               "1072"),
              std::string::npos)
        << too_many_w0;
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
        EXPECT_EQ(std::string(e.what()), "stop_token_ids[1] must be >= 0 (got -3)");
    }
}

}  // namespace
}  // namespace pylookahead
