// safetensors header parsing on hand-built byte strings: valid files and every rejected case.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "pylookahead/errors.h"

namespace pylookahead {
namespace {

std::vector<unsigned char> make_file(const std::string& header, size_t data_bytes) {
    std::vector<unsigned char> out(8 + header.size() + data_bytes, 0);
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
    std::memcpy(out.data() + 8, header.data(), header.size());
    return out;
}

std::string parse_error(const std::vector<unsigned char>& bytes) {
    try {
        parse_safetensors(bytes.data(), bytes.size(), "x.safetensors");
    } catch (const ModelLoadError& e) {
        return e.what();
    }
    return "";
}

TEST(Safetensors, ParsesTensorsOfEachDtype) {
    auto f = make_file(R"({"__metadata__":{"format":"pt"},)"
                       R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                       R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]},)"
                       R"("c":{"dtype":"F16","shape":[],"data_offsets":[32,34]},)"
                       R"("d":{"dtype":"F64","shape":[1],"data_offsets":[34,42]}})",
                       42);
    auto ts = parse_safetensors(f.data(), f.size(), "x.safetensors");
    ASSERT_EQ(ts.size(), 4u);
    EXPECT_EQ(ts[0].name, "a");
    EXPECT_EQ(ts[0].shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(ts[0].nbytes, 24u);
    EXPECT_EQ(ts[1].dtype, StoredDType::kBF16);
    EXPECT_EQ(ts[2].shape.size(), 0u);
    EXPECT_EQ(ts[3].dtype, StoredDType::kF64);
    EXPECT_EQ(ts[3].data, f.data() + 8 + (f.size() - 8 - 42) + 34);
}

TEST(Safetensors, RejectsTruncatedFile) {
    std::vector<unsigned char> f = {1, 2, 3};
    EXPECT_NE(parse_error(f).find("truncated"), std::string::npos);
}

TEST(Safetensors, RejectsHeaderLengthPastEnd) {
    auto f = make_file("{}", 0);
    f[0] = 0xff;
    f[1] = 0xff;
    EXPECT_NE(parse_error(f).find("header length"), std::string::npos);
}

TEST(Safetensors, RejectsInvalidJson) {
    auto f = make_file("{\"a\":", 0);
    EXPECT_NE(parse_error(f).find("not valid JSON"), std::string::npos);
}

TEST(Safetensors, RejectsNonObjectHeader) {
    auto f = make_file("[1,2]", 0);
    EXPECT_NE(parse_error(f).find("expected a JSON object"), std::string::npos);
}

TEST(Safetensors, RejectsOffsetsOutOfRange) {
    auto f = make_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
    std::string msg = parse_error(f);
    EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
}

TEST(Safetensors, RejectsReversedOffsets) {
    auto f = make_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 8);
    EXPECT_NE(parse_error(f).find("out of range"), std::string::npos);
}

TEST(Safetensors, RejectsSizeThatDisagreesWithShape) {
    auto f = make_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8);
    std::string msg = parse_error(f);
    EXPECT_NE(msg.find("expected 12"), std::string::npos) << msg;
}

TEST(Safetensors, RejectsUnsupportedDtype) {
    auto f = make_file(R"({"w":{"dtype":"I8","shape":[8],"data_offsets":[0,8]}})", 8);
    std::string msg = parse_error(f);
    EXPECT_NE(msg.find("unsupported dtype 'I8'"), std::string::npos) << msg;
}

TEST(Safetensors, RejectsMissingFields) {
    auto f = make_file(R"({"w":{"dtype":"F32","shape":[2]}})", 8);
    EXPECT_NE(parse_error(f).find("data_offsets"), std::string::npos);
}

TEST(Safetensors, RejectsNegativeDimension) {
    auto f = make_file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8);
    EXPECT_NE(parse_error(f).find("dimension"), std::string::npos);
}

TEST(Safetensors, CheckpointDirectoryWithoutWeightsIsAnError) {
    try {
        SafetensorsCheckpoint ckpt("/nonexistent-dir-pylookahead");
        FAIL() << "expected ModelLoadError";
    } catch (const ModelLoadError& e) {
        EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos);
    }
}

}  // namespace
}  // namespace pylookahead
