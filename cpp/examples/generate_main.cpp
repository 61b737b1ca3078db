// generate_main: load a checkpoint, run greedy and Lookahead decoding on the same prompt token ids,
// and print both outputs and their step statistics as `key: value` lines, e.g.
//
//   greedy_ids: 5 17 17 3
//   lookahead_ids: 5 17 17 3
//   identical: yes
//   lookahead_steps: 2
//   lookahead_accept_histogram: 0 1 1 0        (steps that emitted 1, 2, ..., N tokens)
//   lookahead_chunks: 1 2 1                     (tokens per on_tokens call: the streaming hook)
//
// With --temperature > 0 both runs sample with the same seed (and must still be identical);
// --stop-after K stops each run from its streaming callback once K tokens have arrived, keeping
// exactly K even when they end inside a multi-token step.
//
// Exit status: 0 when the two outputs are identical, 1 when they differ, 2 on any error.
#include <pylookahead/pylookahead.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace pla = pylookahead;

namespace {

struct Options {
    std::string model_dir;
    std::vector<pla::TokenId> prompt;
    pla::EngineConfig engine;
    pla::GenerationConfig gen;
    pla::LookaheadConfig lookahead;
    pla::SessionConfig session;
    int stop_after = 0;  // 0 = off
};

void print_usage(std::ostream& os) {
    const pla::LookaheadConfig la;
    const pla::GenerationConfig gen;
    const pla::EngineConfig engine;
    os << "usage: generate_main MODEL_DIR (--ids 1,2,3 | --ids-file FILE) [options]\n"
       << "  --ids LIST                       prompt token ids, comma-separated\n"
       << "  --ids-file FILE                  prompt token ids, comma- or whitespace-separated\n"
       << "  -W, --window-size INT            lookahead window W (default " << la.window_size
       << ")\n"
       << "  -N, --ngram-size INT             n-gram size N (default " << la.ngram_size << ")\n"
       << "  -G, --verification-set-size INT  candidates G (default " << la.verification_set_size
       << ")\n"
       << "  -R, --tree-rows INT              draft tree rows R, 0 = the paper's G slots (default "
       << la.tree_rows << ")\n"
       << "  --suffix-branches INT            draft tree: suffix lookup branches (default "
       << la.suffix_branches << ")\n"
       << "  --recycle-top-k INT              draft tree: token recycling successors (default "
       << la.recycle_top_k << ")\n"
       << "  --max-new-tokens INT             (default " << gen.max_new_tokens << ")\n"
       << "  --dtype NAME                     float32, bfloat16, float16 or float64 (default "
       << engine.dtype << ")\n"
       << "  --device NAME                    cpu, cuda or cuda:K (default " << engine.device
       << ")\n"
       << "  --cuda-step-rows INT             on CUDA: rows of every decode step (default "
       << pla::SessionConfig().cuda_step_rows << ")\n"
       << "  --no-cuda-graphs                 on CUDA: decode steps without CUDA graphs\n"
       << "  --threads INT                    CPU threads, 0 keeps libtorch's default\n"
       << "  --linear-kernel NAME             auto, bf16-avx512, avx2, onednn, generic or aten "
          "(default "
       << engine.linear_kernel << ")\n"
       << "  --quantize NAME                  auto, none, int8, int8-g32, int4 or w8a8 (default "
       << engine.quantize << ")\n"
       << "  --temperature FLOAT              0 = greedy (default); > 0 samples\n"
       << "  --top-k INT, --top-p FLOAT       sampling filters (default off)\n"
       << "  --seed INT                       sampling seed (default 0)\n"
       << "  --stop-after INT                 stop from the streaming callback after this many "
          "tokens\n";
}

long long parse_int(const std::string& text, const std::string& what, long long lo, long long hi) {
    size_t used = 0;
    long long v = 0;
    try {
        v = std::stoll(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (text.empty() || used != text.size()) {
        throw std::invalid_argument(what + " must be an integer (got '" + text + "')");
    }
    if (v < lo || v > hi) {
        throw std::invalid_argument(what + " must be in [" + std::to_string(lo) + ", " +
                                    std::to_string(hi) + "] (got " + text + ")");
    }
    return v;
}

double parse_double(const std::string& text, const std::string& what) {
    size_t used = 0;
    double v = 0.0;
    try {
        v = std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (text.empty() || used != text.size()) {
        throw std::invalid_argument(what + " must be a number (got '" + text + "')");
    }
    return v;  // ranges are checked by GenerationConfig::validate
}

// Token ids separated by commas and/or whitespace.
std::vector<pla::TokenId> parse_ids(std::string text, const std::string& source) {
    for (char& c : text) {
        if (c == ',') c = ' ';
    }
    std::istringstream is(text);
    std::vector<pla::TokenId> ids;
    std::string item;
    while (is >> item) {
        ids.push_back(static_cast<pla::TokenId>(
            parse_int(item, source + " token id", 0, std::numeric_limits<pla::TokenId>::max())));
    }
    if (ids.empty()) throw std::invalid_argument(source + " holds no token ids");
    return ids;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open ids file '" + path + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

Options parse_args(int argc, char** argv) {
    Options o;
    constexpr int kIntMax = std::numeric_limits<int>::max();
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
            return argv[++i];
        };
        if (arg == "--ids") {
            o.prompt = parse_ids(value(), "--ids");
        } else if (arg == "--ids-file") {
            const std::string path = value();
            o.prompt = parse_ids(read_file(path), path);
        } else if (arg == "-W" || arg == "--window-size") {
            o.lookahead.window_size = static_cast<int>(parse_int(value(), arg, 0, kIntMax));
        } else if (arg == "-N" || arg == "--ngram-size") {
            o.lookahead.ngram_size = static_cast<int>(parse_int(value(), arg, 0, kIntMax));
        } else if (arg == "-G" || arg == "--verification-set-size") {
            o.lookahead.verification_set_size =
                static_cast<int>(parse_int(value(), arg, 0, kIntMax));
        } else if (arg == "-R" || arg == "--tree-rows") {
            o.lookahead.tree_rows = static_cast<int>(parse_int(value(), arg, 0, kIntMax));
        } else if (arg == "--suffix-branches") {
            o.lookahead.suffix_branches = static_cast<int>(parse_int(value(), arg, 0, kIntMax));
        } else if (arg == "--recycle-top-k") {
            o.lookahead.recycle_top_k = static_cast<int>(parse_int(value(), arg, 0, kIntMax));
        } else if (arg == "--max-new-tokens") {
            o.gen.max_new_tokens = static_cast<int>(parse_int(value(), arg, 1, kIntMax));
        } else if (arg == "--dtype") {
            o.engine.dtype = value();
        } else if (arg == "--device") {
            o.engine.device = value();
        } else if (arg == "--cuda-step-rows") {
            o.session.cuda_step_rows = static_cast<int>(parse_int(value(), arg, 1, 1024));
        } else if (arg == "--no-cuda-graphs") {
            o.engine.use_cuda_graphs = false;
        } else if (arg == "--temperature") {
            o.gen.temperature = parse_double(value(), arg);
        } else if (arg == "--top-p") {
            o.gen.top_p = parse_double(value(), arg);
        } else if (arg == "--top-k") {
            o.gen.top_k = static_cast<int>(parse_int(value(), arg, 0, kIntMax));
        } else if (arg == "--seed") {
            o.gen.seed = static_cast<uint64_t>(
                parse_int(value(), arg, 0, std::numeric_limits<long long>::max()));
        } else if (arg == "--stop-after") {
            o.stop_after = static_cast<int>(parse_int(value(), arg, 1, kIntMax));
        } else if (arg == "--threads") {
            o.engine.num_threads = static_cast<int>(parse_int(value(), arg, 0, kIntMax));
        } else if (arg == "--linear-kernel") {
            o.engine.linear_kernel = value();
        } else if (arg == "--quantize") {
            o.engine.quantize = value();
        } else if (!arg.empty() && arg[0] == '-') {
            throw std::invalid_argument("unknown option " + arg);
        } else if (o.model_dir.empty()) {
            o.model_dir = arg;
        } else {
            throw std::invalid_argument("unexpected argument '" + arg + "'");
        }
    }
    if (o.model_dir.empty()) throw std::invalid_argument("MODEL_DIR is required");
    if (o.prompt.empty()) throw std::invalid_argument("--ids or --ids-file is required");
    return o;
}

const char* stop_reason_name(pla::StopReason r) {
    switch (r) {
        case pla::StopReason::kEndToken: return "end_token";
        case pla::StopReason::kMaxNewTokens: return "max_new_tokens";
        case pla::StopReason::kCallback: return "callback";
    }
    return "unknown";
}

template <typename T>
std::string join(const std::vector<T>& v, size_t from = 0) {
    std::string s;
    for (size_t i = from; i < v.size(); ++i) s += (i > from ? " " : "") + std::to_string(v[i]);
    return s;
}

void print_result(const std::string& label, const pla::GenerationResult& r) {
    const pla::GenerationStats& s = r.stats;
    std::printf("%s_ids: %s\n", label.c_str(), join(r.token_ids).c_str());
    std::printf("%s_stop_reason: %s\n", label.c_str(), stop_reason_name(r.stop_reason));
    std::printf("%s_steps: %lld\n", label.c_str(), static_cast<long long>(s.steps));
    std::printf("%s_compression: %.4f\n", label.c_str(), s.compression());
    // Index 0 of accept_histogram is unused: print the counts for 1, 2, ..., N tokens per step.
    std::printf("%s_accept_histogram: %s\n", label.c_str(), join(s.accept_histogram, 1).c_str());
    std::printf("%s_prefill_s: %.6f\n", label.c_str(), s.prefill_s);
    std::printf("%s_decode_s: %.6f\n", label.c_str(), s.decode_s);
    // Accepted draft tokens by source, in pla::draft_source_names() order.
    std::vector<int64_t> by_source(s.accepted_tokens_by_source.begin(),
                                   s.accepted_tokens_by_source.end());
    std::printf("%s_accepted_by_source: %s\n", label.c_str(), join(by_source).c_str());
}

int run(const Options& o) {
    std::shared_ptr<const pla::Model> model = pla::Model::load(o.model_dir, o.engine);
    pla::Session session(model, o.session);  // every generate() starts from an empty cache
    // The streaming hook: records each chunk's size and, with --stop-after, stops at exactly
    // that many tokens (keeping only part of the chunk that crosses the limit).
    std::vector<int> chunks;
    int received = 0;
    const pla::OnTokens on_tokens =
        [&](const std::vector<pla::TokenId>& tokens) -> pla::StreamControl {
        chunks.push_back(static_cast<int>(tokens.size()));
        const int before = received;
        received += static_cast<int>(tokens.size());
        if (o.stop_after > 0 && received >= o.stop_after) {
            return pla::StreamControl::stop_after(o.stop_after - before);
        }
        return true;
    };
    const pla::GenerationResult greedy = session.generate(o.prompt, o.gen, std::nullopt, on_tokens);
    const std::vector<int> greedy_chunks = chunks;
    chunks.clear();
    received = 0;
    const pla::GenerationResult lookahead =
        session.generate(o.prompt, o.gen, o.lookahead, on_tokens);
    const bool identical = greedy.token_ids == lookahead.token_ids;

    std::printf("model: %s\n", model->info().architecture.c_str());
    std::printf("linear_kernel: %s\n", model->info().linear_kernel.c_str());
    std::printf("cpu_isa: %s\n", model->info().cpu_isa.c_str());
    std::string skipped;
    for (const std::string& s : model->info().linear_kernel_skipped) {
        skipped += (skipped.empty() ? "" : " | ") + s;
    }
    std::printf("linear_kernel_skipped: %s\n", skipped.c_str());
    std::string notes;
    for (const std::string& s : model->info().weight_notes)
        notes += (notes.empty() ? "" : " | ") + s;
    std::printf("quantize: %s\n", model->info().quantize.c_str());
    std::printf("weight_notes: %s\n", notes.c_str());
    std::printf("prompt_ids: %s\n", join(o.prompt).c_str());
    std::printf("lookahead_config: W=%d N=%d G=%d\n", o.lookahead.window_size,
                o.lookahead.ngram_size, o.lookahead.verification_set_size);
    print_result("greedy", greedy);
    std::printf("greedy_chunks: %s\n", join(greedy_chunks).c_str());
    print_result("lookahead", lookahead);
    std::printf("lookahead_chunks: %s\n", join(chunks).c_str());
    std::printf("identical: %s\n", identical ? "yes" : "no");
    return identical ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "-h" || arg == "--help") {
            print_usage(std::cout);
            return 0;
        }
    }
    Options options;
    try {
        options = parse_args(argc, argv);
    } catch (const std::exception& e) {
        std::cerr << "generate_main: error: " << e.what() << "\n";
        print_usage(std::cerr);
        return 2;
    }
    try {
        return run(options);
    } catch (const pla::ConfigError& e) {  // bad option or prompt (ValueError in Python)
        std::cerr << "generate_main: invalid argument: " << e.what() << "\n";
    } catch (const pla::ModelLoadError& e) {  // unreadable or unsupported checkpoint
        std::cerr << "generate_main: cannot load model: " << e.what() << "\n";
    } catch (const std::exception& e) {  // InternalError, or an error from libtorch
        std::cerr << "generate_main: error: " << e.what() << "\n";
    }
    return 2;
}
