#include "lookahead/token_tree.h"

#include <algorithm>

#include "check.h"

namespace pylookahead {

void TokenTree::clear() {
    nodes_.clear();
    root_first_child_ = -1;
}

int TokenTree::add(int parent, TokenId token, double score, DraftSource source, int rank,
                   int grade) {
    PYLA_CHECK(parent >= kRoot && parent < size(), "tree parent " << parent << " of " << size());
    int32_t* link = parent == kRoot ? &root_first_child_ : &nodes_[parent].first_child;
    int32_t child = *link;
    while (child >= 0 && nodes_[child].node.token != token) child = nodes_[child].next_sibling;
    if (child < 0) {
        Entry e;
        e.node.token = token;
        e.node.parent = parent;
        e.node.depth = parent == kRoot ? 1 : nodes_[parent].node.depth + 1;
        e.node.source = source;
        e.node.rank = rank;
        e.node.grade = grade;
        e.score = score;
        e.next_sibling = *link;
        child = static_cast<int32_t>(nodes_.size());
        *link = child;
        nodes_.push_back(e);
        return child;
    }
    Entry& e = nodes_[child];
    if (score > e.score) {
        e.score = score;
        e.node.source = source;
        e.node.rank = rank;
        e.node.grade = grade;
    }
    return child;
}

void TokenTree::select(int budget, std::vector<TreeNode>* out) const {
    out->clear();
    // Best-first over the frontier (children of taken nodes): every taken node's parent was
    // taken before it, whatever the scores.
    auto worse = [&](int32_t a, int32_t b) {
        const Entry &ea = nodes_[a], &eb = nodes_[b];
        if (ea.score != eb.score) return ea.score < eb.score;
        if (ea.node.depth != eb.node.depth) return ea.node.depth > eb.node.depth;
        return a > b;
    };
    order_.clear();  // the frontier, a heap
    auto push_children = [&](int32_t first) {
        for (int32_t c = first; c >= 0; c = nodes_[c].next_sibling) {
            order_.push_back(c);
            std::push_heap(order_.begin(), order_.end(), worse);
        }
    };
    renumber_.assign(nodes_.size(), -1);
    push_children(root_first_child_);
    while (static_cast<int>(out->size()) < budget && !order_.empty()) {
        std::pop_heap(order_.begin(), order_.end(), worse);
        const int32_t i = order_.back();
        order_.pop_back();
        const TreeNode& node = nodes_[i].node;
        TreeNode copy = node;
        copy.parent = node.parent == kRoot ? -1 : renumber_[node.parent];
        copy.score = nodes_[i].score;
        renumber_[i] = static_cast<int32_t>(out->size());
        out->push_back(copy);
        push_children(nodes_[i].first_child);
    }
}

TreeVerdict verify_tree(TokenId t0, const std::vector<TreeNode>& nodes,
                        const TokenId* node_argmax) {
    const int n = static_cast<int>(nodes.size());
    TreeVerdict verdict;
    std::vector<uint8_t>& accepted = verdict.accepted;
    accepted.assign(n, 0);
    int best = -1;
    for (int i = 0; i < n; ++i) {
        const TreeNode& v = nodes[i];
        PYLA_CHECK(v.parent < i, "tree node " << i << " has parent " << v.parent);
        const bool parent_ok = v.parent < 0 || accepted[v.parent];
        if (!parent_ok) continue;
        const TokenId want = v.parent < 0 ? t0 : node_argmax[v.parent];
        if (v.token != want) continue;
        accepted[i] = 1;
        if (best < 0 || v.depth > nodes[best].depth) best = i;
    }
    for (int i = best; i >= 0; i = nodes[i].parent) verdict.path.push_back(i);
    std::reverse(verdict.path.begin(), verdict.path.end());
    for (int32_t i : verdict.path) verdict.emitted.push_back(nodes[i].token);
    verdict.emitted.push_back(best < 0 ? t0 : node_argmax[best]);
    return verdict;
}

}  // namespace pylookahead
