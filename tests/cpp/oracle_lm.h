// A deterministic StepModel for tests: a "language model" whose greedy output is a fixed oracle
// sequence S (prompt followed by its continuation). It honours positions and the step mask
// exactly as a transformer with a KV cache would, and checks what the decode loop feeds it.
//
// For each wanted row it rebuilds the row's visible context: the committed rows plus the step
// rows the mask lets it see. Their positions must be exactly 0..pos (contiguous, no duplicates),
// otherwise the layout is broken (test failure). If the context equals S[0..pos], the row's
// argmax is S[pos + 1]; otherwise a "wrong" token hashed from the context. Commits must keep
// rows whose token is S at their position, in order, so the cache always holds a prefix of S.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "lookahead/decode_loop.h"
#include "lookahead/row_reads.h"

namespace pylookahead {

class OracleLm : public StepModel {
  public:
    OracleLm(std::vector<TokenId> sequence, int vocab_size, int capacity)
        : seq_(std::move(sequence)), vocab_size_(vocab_size), capacity_(capacity) {}

    void forward_step(const std::vector<TokenId>& tokens, const std::vector<int32_t>& positions,
                      const uint8_t* mask, const std::vector<int32_t>& out_rows,
                      const std::vector<int32_t>& exact_rows,
                      const std::vector<int32_t>& out_parent, std::vector<TokenId>* argmax,
                      TokenSampler* sampler = nullptr) override {
        ASSERT_EQ(sampler, nullptr) << "OracleLm has no logits to sample from";
        const int T = static_cast<int>(tokens.size());
        ++num_forward_;
        ASSERT_EQ(positions.size(), tokens.size());
        ASSERT_LE(kv_len_ + T, capacity_) << "step overflows the cache";
        ASSERT_TRUE(std::is_sorted(out_rows.begin(), out_rows.end()));
        ASSERT_TRUE(std::is_sorted(exact_rows.begin(), exact_rows.end()));
        for (int32_t r : exact_rows) ASSERT_LT(r, T);
        step_tokens_ = tokens;
        step_positions_ = positions;
        argmax->clear();
        std::vector<std::pair<int32_t, TokenId>> visible;  // (position, token) of step rows
        for (int32_t q : out_rows) {
            ASSERT_TRUE(q >= 0 && q < T);
            if (mask != nullptr) ASSERT_TRUE(mask[q * T + q]) << "row " << q << " misses itself";
            visible.clear();
            for (int k = 0; k < T; ++k) {
                if (mask != nullptr ? mask[q * T + k] != 0 : k <= q) {
                    visible.emplace_back(positions[k], tokens[k]);
                }
            }
            std::sort(visible.begin(), visible.end());
            bool on_oracle = true;
            uint64_t hash = 1469598103934665603ull ^ static_cast<uint64_t>(positions[q]);
            for (size_t i = 0; i < visible.size(); ++i) {
                ASSERT_EQ(visible[i].first, kv_len_ + static_cast<int>(i))
                    << "row " << q << ": visible positions are not contiguous after the cache";
                const TokenId t = visible[i].second;
                on_oracle = on_oracle && visible[i].first < static_cast<int>(seq_.size()) &&
                            seq_[visible[i].first] == t;
                hash = (hash ^ static_cast<uint64_t>(t)) * 1099511628211ull;
            }
            ASSERT_EQ(visible.back().first, positions[q]) << "row " << q << " sees a later row";
            const size_t next = static_cast<size_t>(positions[q]) + 1;
            argmax->push_back(on_oracle && next < seq_.size()
                                  ? seq_[next]
                                  : static_cast<TokenId>((hash >> 17) % vocab_size_));
        }
        if (!out_parent.empty()) {
            ASSERT_EQ(out_parent.size(), out_rows.size());
            skip_unread_rows(tokens, out_rows, out_parent, argmax);
        }
        successors_.clear();
        if (successors_k_ > 0 && !exact_rows.empty()) {
            for (size_t r = 0; r < out_rows.size(); ++r) {
                if ((*argmax)[r] < 0) {  // a skipped row: no successors either
                    successors_.insert(successors_.end(), successors_k_, -1);
                    continue;
                }
                successors_.push_back((*argmax)[r]);
                for (int j = 1; j < successors_k_; ++j) {
                    successors_.push_back(static_cast<TokenId>(
                        (static_cast<uint64_t>(positions[out_rows[r]]) * 31 + j * 7) %
                        vocab_size_));
                }
            }
        }
    }

    void commit(const std::vector<int32_t>& src_rows) override {
        for (size_t i = 0; i < src_rows.size(); ++i) {
            const int32_t row = src_rows[i];
            ASSERT_GE(row, static_cast<int32_t>(i));
            ASSERT_LT(row, static_cast<int32_t>(step_tokens_.size()));
            if (i > 0) ASSERT_GT(row, src_rows[i - 1]);
            ASSERT_EQ(step_positions_[row], kv_len_) << "committed row " << row << " out of place";
            ASSERT_LT(kv_len_, static_cast<int>(seq_.size()));
            ASSERT_EQ(step_tokens_[row], seq_[kv_len_]) << "committed a wrong token at " << kv_len_;
            ++kv_len_;
        }
        step_tokens_.clear();  // a step is committed once
    }

    // Successors: the argmax first, then k - 1 tokens hashed from the row's position.
    int set_successors(int k) override {
        successors_k_ = k;
        return k;
    }
    const std::vector<TokenId>& successors() const override { return successors_; }

    int kv_len() const override { return kv_len_; }
    int kv_capacity() const override { return capacity_; }
    void truncate(int rows) override {
        ASSERT_TRUE(rows >= 0 && rows <= kv_len_);
        kv_len_ = rows;
    }

    int num_forward() const { return num_forward_; }
    // Out rows this model left at -1 because nothing reads them (as TorchStepModel skips them).
    int64_t skipped_rows() const { return skipped_rows_; }

  private:
    // What TorchStepModel::choose_read_rows returns: the rows of the two passes of
    // lookahead/row_reads.h keep their choice, the others -1.
    void skip_unread_rows(const std::vector<TokenId>& tokens, const std::vector<int32_t>& out_rows,
                          const std::vector<int32_t>& out_parent, std::vector<TokenId>* argmax) {
        std::vector<TokenId> row_token(out_rows.size());
        for (size_t i = 0; i < out_rows.size(); ++i) row_token[i] = tokens[out_rows[i]];
        std::vector<int32_t> first, second;
        first_pass_rows(out_parent, &first);
        second_pass_rows(out_parent, row_token, *argmax, &second);
        std::vector<TokenId> kept(argmax->size(), -1);
        for (int32_t r : first) kept[r] = (*argmax)[r];
        for (int32_t r : second) kept[r] = (*argmax)[r];
        skipped_rows_ += std::count(kept.begin(), kept.end(), TokenId{-1});
        *argmax = std::move(kept);
    }

    std::vector<TokenId> seq_;  // [S] prompt + oracle continuation
    int vocab_size_;
    int capacity_;
    int kv_len_ = 0;
    int num_forward_ = 0;
    int64_t skipped_rows_ = 0;
    int successors_k_ = 0;
    std::vector<TokenId> successors_;      // [R * k] of the last forward_step
    std::vector<TokenId> step_tokens_;     // [T] of the last forward_step
    std::vector<int32_t> step_positions_;  // [T]
};

// The accept histogram adds up: its steps are stats.steps, and its tokens plus the prefill's one
// are stats.new_tokens.
inline void expect_histogram_adds_up(const GenerationStats& s) {
    int64_t steps = 0, tokens = 1;  // the first token comes from prefill
    for (size_t k = 0; k < s.accept_histogram.size(); ++k) {
        steps += s.accept_histogram[k];
        tokens += static_cast<int64_t>(k) * s.accept_histogram[k];
    }
    EXPECT_EQ(steps, s.steps);
    EXPECT_EQ(tokens, s.new_tokens);
}

}  // namespace pylookahead
