// pylookahead._core: thin pybind11 bindings of the public C++ API. Option structs are bound as
// structs (no flattened keyword lists); long calls release the GIL.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <c10/util/Exception.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include "pylookahead/pylookahead.h"

namespace py = pybind11;
using namespace pylookahead;

namespace {

// Python owns models through this handle (pybind11 cannot hold shared_ptr<const T> directly).
struct PyModel {
    std::shared_ptr<const Model> model;
};

std::string stop_reason_name(StopReason r) {
    switch (r) {
        case StopReason::kEndToken: return "end_token";
        case StopReason::kMaxNewTokens: return "max_new_tokens";
        case StopReason::kCallback: return "callback";
    }
    return "?";
}

// A Python int for an int field: ConfigError naming the field and the range when it is not an
// int or does not fit (instead of pybind11's TypeError "incompatible function arguments").
int64_t checked_int(const py::handle& v, const char* name, int64_t lo, int64_t hi) {
    if (!PyLong_Check(v.ptr()) || PyBool_Check(v.ptr())) {
        throw ConfigError(std::string(name) + " must be an int (got " + std::string(py::repr(v)) +
                          ")");
    }
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (overflow != 0 || x < lo || x > hi) {
        throw ConfigError(std::string(name) + " must be in [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "] (got " + std::string(py::str(v)) + ")");
    }
    return x;
}

constexpr int64_t kIntMin = std::numeric_limits<int>::min();
constexpr int64_t kIntMax = std::numeric_limits<int>::max();

// A uint64 seed from a Python int in [0, 2^64).
uint64_t checked_seed(const py::handle& v, const char* name) {
    if (!PyLong_Check(v.ptr()) || PyBool_Check(v.ptr())) {
        throw ConfigError(std::string(name) + " must be an int (got " + std::string(py::repr(v)) +
                          ")");
    }
    const unsigned long long x = PyLong_AsUnsignedLongLong(v.ptr());
    if (x == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
        PyErr_Clear();
        throw ConfigError(std::string(name) + " must be in [0, 18446744073709551615] (got " +
                          std::string(py::str(v)) + ")");
    }
    return x;
}

void bind_errors(py::module_& m) {
    static py::exception<ModelLoadError> model_load_error(m, "ModelLoadError", PyExc_RuntimeError);
    static py::exception<SessionBusyError> session_busy_error(m, "SessionBusyError",
                                                              PyExc_RuntimeError);
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const ModelLoadError& e) {
            py::set_error(model_load_error, e.what());
        } catch (const ConfigError& e) {
            py::set_error(PyExc_ValueError, e.what());
        } catch (const SessionBusyError& e) {
            py::set_error(session_busy_error, e.what());
        } catch (const InternalError& e) {
            py::set_error(PyExc_RuntimeError, (std::string("internal error: ") + e.what()).c_str());
        } catch (const c10::Error& e) {
            // libtorch's messages may quote bytes of a file: made valid UTF-8 as ours are.
            py::set_error(PyExc_RuntimeError,
                          printable_message(e.what_without_backtrace()).c_str());
        }
    });
}

void bind_config(py::module_& m) {
    py::class_<LookaheadConfig>(
        m, "LookaheadConfig",
        "Lookahead decoding options: W columns x (N-1) levels, G candidates; window_size=0 "
        "verifies pool candidates only (no Jacobi window). tree_rows=R > 0 merges the "
        "pool's G n-grams, suffix lookup (suffix_branches) and token recycling "
        "(recycle_top_k) into one draft tree of at most R rows.")
        .def(py::init([](const py::object& w, const py::object& n, const py::object& g,
                         bool seed_from_prompt, const py::object& seed, const py::object& tree_rows,
                         const py::object& suffix_branches, const py::object& recycle_top_k) {
                 LookaheadConfig c;
                 c.window_size = static_cast<int>(checked_int(w, "window_size", kIntMin, kIntMax));
                 c.ngram_size = static_cast<int>(checked_int(n, "ngram_size", kIntMin, kIntMax));
                 c.verification_set_size =
                     static_cast<int>(checked_int(g, "verification_set_size", kIntMin, kIntMax));
                 c.seed_from_prompt = seed_from_prompt;
                 c.seed = checked_seed(seed, "seed");
                 c.tree_rows =
                     static_cast<int>(checked_int(tree_rows, "tree_rows", kIntMin, kIntMax));
                 c.suffix_branches = static_cast<int>(
                     checked_int(suffix_branches, "suffix_branches", kIntMin, kIntMax));
                 c.recycle_top_k = static_cast<int>(
                     checked_int(recycle_top_k, "recycle_top_k", kIntMin, kIntMax));
                 c.validate();
                 return c;
             }),
             py::kw_only(), py::arg("window_size") = LookaheadConfig().window_size,
             py::arg("ngram_size") = LookaheadConfig().ngram_size,
             py::arg("verification_set_size") = LookaheadConfig().verification_set_size,
             py::arg("seed_from_prompt") = true, py::arg("seed") = 0, py::arg("tree_rows") = 0,
             py::arg("suffix_branches") = 0, py::arg("recycle_top_k") = 0)
        .def_readwrite("window_size", &LookaheadConfig::window_size)
        .def_readwrite("ngram_size", &LookaheadConfig::ngram_size)
        .def_readwrite("verification_set_size", &LookaheadConfig::verification_set_size)
        .def_readwrite("seed_from_prompt", &LookaheadConfig::seed_from_prompt)
        .def_readwrite("seed", &LookaheadConfig::seed)
        .def_readwrite("tree_rows", &LookaheadConfig::tree_rows)
        .def_readwrite("suffix_branches", &LookaheadConfig::suffix_branches)
        .def_readwrite("recycle_top_k", &LookaheadConfig::recycle_top_k)
        .def_property_readonly("tokens_per_step", &LookaheadConfig::tokens_per_step)
        .def("validate", &LookaheadConfig::validate)
        .def("__repr__", [](const LookaheadConfig& c) {
            std::string s = "LookaheadConfig(window_size=" + std::to_string(c.window_size) +
                            ", ngram_size=" + std::to_string(c.ngram_size) +
                            ", verification_set_size=" + std::to_string(c.verification_set_size);
            if (c.tree()) {
                s += ", tree_rows=" + std::to_string(c.tree_rows) +
                     ", suffix_branches=" + std::to_string(c.suffix_branches) +
                     ", recycle_top_k=" + std::to_string(c.recycle_top_k);
            }
            return s + ")";
        });

    py::class_<AutoLookahead>(
        m, "AutoLookahead",
        "Automatic lookahead: the engine picks greedy or (W, N, G) steps itself.")
        .def(py::init([](const py::object& replan_interval, double min_gain,
                         const py::object& max_tokens_per_step, const py::object& probe_after,
                         const py::object& probe_steps, const py::object& seed,
                         const py::object& tree_rows) {
                 AutoLookahead a;
                 a.replan_interval = static_cast<int>(
                     checked_int(replan_interval, "replan_interval", kIntMin, kIntMax));
                 a.min_gain = min_gain;
                 a.max_tokens_per_step = static_cast<int>(
                     checked_int(max_tokens_per_step, "max_tokens_per_step", kIntMin, kIntMax));
                 a.probe_after =
                     static_cast<int>(checked_int(probe_after, "probe_after", kIntMin, kIntMax));
                 a.probe_steps =
                     static_cast<int>(checked_int(probe_steps, "probe_steps", kIntMin, kIntMax));
                 a.seed = checked_seed(seed, "seed");
                 a.tree_rows =
                     static_cast<int>(checked_int(tree_rows, "tree_rows", kIntMin, kIntMax));
                 a.validate();
                 return a;
             }),
             py::kw_only(), py::arg("replan_interval") = AutoLookahead().replan_interval,
             py::arg("min_gain") = AutoLookahead().min_gain,
             py::arg("max_tokens_per_step") = AutoLookahead().max_tokens_per_step,
             py::arg("probe_after") = AutoLookahead().probe_after,
             py::arg("probe_steps") = AutoLookahead().probe_steps, py::arg("seed") = 0,
             py::arg("tree_rows") = AutoLookahead().tree_rows)
        .def_readwrite("replan_interval", &AutoLookahead::replan_interval)
        .def_readwrite("min_gain", &AutoLookahead::min_gain)
        .def_readwrite("max_tokens_per_step", &AutoLookahead::max_tokens_per_step)
        .def_readwrite("probe_after", &AutoLookahead::probe_after)
        .def_readwrite("probe_steps", &AutoLookahead::probe_steps)
        .def_readwrite("seed", &AutoLookahead::seed)
        .def_readwrite("tree_rows", &AutoLookahead::tree_rows)
        .def("validate", &AutoLookahead::validate)
        .def("__repr__", [](const AutoLookahead& a) {
            return "AutoLookahead(replan_interval=" + std::to_string(a.replan_interval) +
                   ", min_gain=" + std::to_string(a.min_gain) +
                   ", max_tokens_per_step=" + std::to_string(a.max_tokens_per_step) +
                   ", tree_rows=" + std::to_string(a.tree_rows) + ")";
        });

    py::class_<GenerationConfig>(m, "GenerationConfig")
        .def(py::init<>())
        .def_readwrite("max_new_tokens", &GenerationConfig::max_new_tokens)
        .def_readwrite("stop_token_ids", &GenerationConfig::stop_token_ids)
        .def_readwrite("use_model_end_ids", &GenerationConfig::use_model_end_ids)
        .def_readwrite("temperature", &GenerationConfig::temperature)
        .def_readwrite("top_k", &GenerationConfig::top_k)
        .def_readwrite("top_p", &GenerationConfig::top_p)
        .def_readwrite("seed", &GenerationConfig::seed)
        .def_readwrite("reuse_cache", &GenerationConfig::reuse_cache)
        .def_readwrite("keep_pool", &GenerationConfig::keep_pool)
        .def("validate", &GenerationConfig::validate);

    py::class_<EngineConfig>(m, "EngineConfig")
        .def(py::init<>())
        .def_readwrite("device", &EngineConfig::device)
        .def_readwrite("dtype", &EngineConfig::dtype)
        .def_readwrite("num_threads", &EngineConfig::num_threads)
        .def_readwrite("linear_kernel", &EngineConfig::linear_kernel)
        .def_readwrite("quantize", &EngineConfig::quantize)
        .def_readwrite("quantize_lm_head", &EngineConfig::quantize_lm_head)
        .def_readwrite("lm_head_screen", &EngineConfig::lm_head_screen)
        .def_readwrite("use_cuda_graphs", &EngineConfig::use_cuda_graphs)
        .def("validate", &EngineConfig::validate);

    py::class_<SessionConfig>(m, "SessionConfig")
        .def(py::init<>())
        .def_readwrite("kv_capacity", &SessionConfig::kv_capacity)
        .def_readwrite("cuda_step_rows", &SessionConfig::cuda_step_rows)
        .def("validate", &SessionConfig::validate);
}

void bind_results(py::module_& m) {
    py::class_<AutoDecision>(m, "AutoDecision",
                             "A switch of automatic lookahead: from `step` on, run `label`.")
        .def_readonly("step", &AutoDecision::step)
        .def_readonly("window_size", &AutoDecision::window_size)
        .def_readonly("ngram_size", &AutoDecision::ngram_size)
        .def_readonly("verification_set_size", &AutoDecision::verification_set_size)
        .def_readonly("reason", &AutoDecision::reason)
        .def_readonly("expected_tokens", &AutoDecision::expected_tokens)
        .def_readonly("predicted_speedup", &AutoDecision::predicted_speedup)
        .def_readonly("judged_speedup", &AutoDecision::judged_speedup)
        .def_readonly("greedy_step_s", &AutoDecision::greedy_step_s)
        .def_property_readonly("greedy", &AutoDecision::greedy)
        .def_property_readonly("label", &AutoDecision::label)
        .def_property_readonly("config",
                               [](const AutoDecision& d) -> std::optional<LookaheadConfig> {
                                   if (d.greedy()) return std::nullopt;
                                   LookaheadConfig c;
                                   c.window_size = d.window_size;
                                   c.ngram_size = d.ngram_size;
                                   c.verification_set_size = d.verification_set_size;
                                   return c;
                               })
        .def("__iter__",  // unpacks as (step, label)
             [](const AutoDecision& d) { return py::iter(py::make_tuple(d.step, d.label())); })
        .def("__repr__", [](const AutoDecision& d) {
            std::string judged;
            if (d.judged_speedup > 0.0) {
                char buf[32];
                std::snprintf(buf, sizeof buf, ", judged %.2fx", d.judged_speedup);
                judged = buf;
            }
            return "AutoDecision(step=" + std::to_string(d.step) + ", " + d.label() + ", " +
                   d.reason + judged + ")";
        });

    py::class_<GenerationStats>(m, "GenerationStats")
        .def_readonly("new_tokens", &GenerationStats::new_tokens)
        .def_readonly("steps", &GenerationStats::steps)
        .def_readonly("prompt_tokens", &GenerationStats::prompt_tokens)
        .def_readonly("reused_tokens", &GenerationStats::reused_tokens)
        .def_readonly("prefill_s", &GenerationStats::prefill_s)
        .def_readonly("decode_s", &GenerationStats::decode_s)
        .def_readonly("accept_histogram", &GenerationStats::accept_histogram)
        .def_readonly("accepted_from_prompt", &GenerationStats::accepted_from_prompt)
        .def_readonly("accepted_from_window", &GenerationStats::accepted_from_window)
        .def_property_readonly(
            "accepted_tokens_by_source",
            [](const GenerationStats& s) {
                py::dict d;
                for (size_t i = 0; i < s.accepted_tokens_by_source.size(); ++i) {
                    d[draft_source_names()[i]] = s.accepted_tokens_by_source[i];
                }
                return d;
            },
            "Accepted draft tokens (bonus tokens not counted) by source: history, "
            "window, suffix, recycle.")
        .def_readonly("pool_size", &GenerationStats::pool_size)
        .def_readonly("step_times_s", &GenerationStats::step_times_s)
        .def_readonly("lookahead_steps", &GenerationStats::lookahead_steps)
        .def_readonly("skipped_head_rows", &GenerationStats::skipped_head_rows)
        .def_readonly("auto_decisions", &GenerationStats::auto_decisions)
        .def_readonly("cuda_graphs", &GenerationStats::cuda_graphs)
        .def_readonly("cuda_graph_bytes", &GenerationStats::cuda_graph_bytes)
        .def_property_readonly("compression", &GenerationStats::compression);

    py::class_<GenerationResult>(m, "GenerationResult")
        .def_readonly("token_ids", &GenerationResult::token_ids)
        .def_readonly("stats", &GenerationResult::stats)
        .def_property_readonly("stop_reason", [](const GenerationResult& r) {
            return stop_reason_name(r.stop_reason);
        });

    py::class_<ModelInfo>(m, "ModelInfo")
        .def_readonly("architecture", &ModelInfo::architecture)
        .def_readonly("model_dir", &ModelInfo::model_dir)
        .def_readonly("device", &ModelInfo::device)
        .def_readonly("dtype", &ModelInfo::dtype)
        .def_readonly("num_layers", &ModelInfo::num_layers)
        .def_readonly("hidden_size", &ModelInfo::hidden_size)
        .def_readonly("num_attention_heads", &ModelInfo::num_attention_heads)
        .def_readonly("num_key_value_heads", &ModelInfo::num_key_value_heads)
        .def_readonly("head_dim", &ModelInfo::head_dim)
        .def_readonly("vocab_size", &ModelInfo::vocab_size)
        .def_readonly("max_position_embeddings", &ModelInfo::max_position_embeddings)
        .def_readonly("eos_token_ids", &ModelInfo::eos_token_ids)
        .def_readonly("packed_weights", &ModelInfo::packed_weights)
        .def_readonly("linear_kernel", &ModelInfo::linear_kernel)
        .def_readonly("linear_kernel_skipped", &ModelInfo::linear_kernel_skipped)
        .def_readonly("cpu_isa", &ModelInfo::cpu_isa)
        .def_readonly("quantize", &ModelInfo::quantize)
        .def_readonly("quantize_lm_head", &ModelInfo::quantize_lm_head)
        .def_readonly("lm_head_screen", &ModelInfo::lm_head_screen)
        .def_readonly("weight_bytes", &ModelInfo::weight_bytes)
        .def_readonly("cuda_graphs", &ModelInfo::cuda_graphs)
        .def_readonly("weight_notes", &ModelInfo::weight_notes)
        .def_readonly("load_seconds", &ModelInfo::load_seconds);
}

constexpr std::chrono::milliseconds kSignalCheckInterval(50);

bool on_main_thread() {
    const py::module_ threading = py::module_::import("threading");
    return threading.attr("current_thread")().is(threading.attr("main_thread")());
}

void bind_session(py::module_& m) {
    py::class_<PyModel>(m, "Model", "Loaded weights, shared by every Session created from it.")
        .def(py::init([](const std::string& dir, const EngineConfig& engine) {
                 py::gil_scoped_release nogil;
                 return PyModel{Model::load(dir, engine)};
             }),
             py::arg("model_dir"), py::arg("engine") = EngineConfig())
        .def_property_readonly("info", [](const PyModel& pm) { return pm.model->info(); });

    py::class_<Session>(m, "Session", "Per-sequence state (KV cache, pool) over a shared Model.")
        .def(py::init([](const PyModel& pm, const SessionConfig& config) {
                 return std::make_unique<Session>(pm.model, config);
             }),
             py::arg("model"), py::arg("config") = SessionConfig())
        .def(
            "generate",
            [](Session& s, const std::vector<TokenId>& prompt, const GenerationConfig& gen,
               py::object lookahead, py::object on_tokens) {
                // lookahead: None (greedy), a LookaheadConfig, an AutoLookahead or "auto".
                std::optional<LookaheadConfig> fixed;
                std::optional<AutoLookahead> automatic;
                if (py::isinstance<py::str>(lookahead)) {
                    if (lookahead.cast<std::string>() != "auto") {
                        throw ConfigError(
                            "lookahead must be None, 'auto', a LookaheadConfig or an "
                            "AutoLookahead (got '" +
                            lookahead.cast<std::string>() + "')");
                    }
                    automatic = AutoLookahead();
                } else if (py::isinstance<AutoLookahead>(lookahead)) {
                    automatic = lookahead.cast<AutoLookahead>();
                } else if (py::isinstance<LookaheadConfig>(lookahead)) {
                    fixed = lookahead.cast<LookaheadConfig>();
                } else if (!lookahead.is_none()) {
                    throw ConfigError(
                        "lookahead must be None, 'auto', a LookaheadConfig or an "
                        "AutoLookahead (got " +
                        std::string(py::repr(lookahead)) + ")");
                }
                OnTokens cb;
                if (on_tokens.is_none() && on_main_thread()) {
                    // Without a Python callback Ctrl-C must still end a long generation: on the
                    // main thread (the one Python runs signal handlers on), take the GIL after a
                    // step at most every 50 ms and let pending handlers run; KeyboardInterrupt
                    // (or a handler's exception) then ends generate() after that step.
                    auto next = std::make_shared<std::chrono::steady_clock::time_point>(
                        std::chrono::steady_clock::now() + kSignalCheckInterval);
                    cb = [next](const std::vector<TokenId>&) -> StreamControl {
                        const auto now = std::chrono::steady_clock::now();
                        if (now < *next) return StreamControl(true);
                        *next = now + kSignalCheckInterval;
                        py::gil_scoped_acquire gil;
                        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
                        return StreamControl(true);
                    };
                } else if (!on_tokens.is_none()) {
                    // Runs on the calling thread with the GIL re-acquired for the Python call.
                    // Captures a pointer: copying a py::object without the GIL is unsafe,
                    // and `on_tokens` outlives the call.
                    const py::object* fn = &on_tokens;
                    // It answers None/True (go on), False (stop after this chunk) or an int k
                    // (stop, keeping the chunk's first k tokens).
                    cb = [fn](const std::vector<TokenId>& toks) -> StreamControl {
                        py::gil_scoped_acquire gil;
                        py::object r = (*fn)(toks);
                        if (r.is_none()) return StreamControl(true);
                        if (py::isinstance<py::bool_>(r)) return StreamControl(r.cast<bool>());
                        if (py::isinstance<py::int_>(r))
                            return StreamControl::stop_after(r.cast<int>());
                        throw ConfigError("on_tokens must return None, a bool or an int (got " +
                                          std::string(py::repr(r)) + ")");
                    };
                }
                py::gil_scoped_release nogil;
                if (automatic) return s.generate(prompt, gen, *automatic, cb);
                return s.generate(prompt, gen, fixed, cb);
            },
            py::arg("prompt"), py::arg("config") = GenerationConfig(),
            py::arg("lookahead") = py::none(), py::arg("on_tokens") = py::none())
        .def(
            "prompt_logits",
            [](Session& s, const std::vector<TokenId>& prompt) {
                std::vector<float> flat;
                {
                    py::gil_scoped_release nogil;
                    flat = s.prompt_logits(prompt);
                }
                const py::ssize_t v = s.model().info().vocab_size;
                py::array_t<float> out({static_cast<py::ssize_t>(prompt.size()), v});
                std::copy(flat.begin(), flat.end(), out.mutable_data());
                return out;
            },
            py::arg("prompt"))
        .def(
            "calibrate",
            [](Session& s) {
                std::vector<StepCost> t;
                {
                    py::gil_scoped_release nogil;
                    t = s.calibrate();
                }
                std::vector<std::pair<int, double>> out;
                for (const StepCost& c : t) out.emplace_back(c.tokens, c.seconds);
                return out;
            },
            "Measures the step-cost table once per session; returns [(tokens, seconds), ...].")
        .def(
            "set_step_costs",
            [](Session& s, const std::vector<std::pair<int, double>>& costs) {
                std::vector<StepCost> t;
                for (const auto& [tokens, seconds] : costs) t.push_back(StepCost{tokens, seconds});
                s.set_step_costs(t);
            },
            py::arg("costs"))
        .def("step_costs",
             [](const Session& s) {
                 std::vector<std::pair<int, double>> out;
                 for (const StepCost& c : s.step_costs()) out.emplace_back(c.tokens, c.seconds);
                 return out;
             })
        .def("reset", &Session::reset)
        .def_property_readonly("cached_tokens", &Session::cached_tokens)
        .def_property_readonly("pool_size", &Session::pool_size)
        .def("save_pool", &Session::save_pool, py::arg("path"),
             py::call_guard<py::gil_scoped_release>())
        .def("load_pool", &Session::load_pool, py::arg("path"),
             py::call_guard<py::gil_scoped_release>())
        .def("share_pool", &Session::share_pool, py::arg("other"))
        .def_property_readonly("kv_capacity", &Session::kv_capacity);
}

void bind_gguf(py::module_& m) {
    m.def(
        "read_gguf_info",
        [](const std::string& path) {
            GgufInfo info;
            {
                py::gil_scoped_release release;
                info = read_gguf_info(path);
            }
            py::list tensors;
            for (const GgufTensorInfo& t : info.tensors)
                tensors.append(py::make_tuple(t.name, t.type, t.shape));
            py::dict out;
            out["metadata"] = info.metadata;
            out["tensors"] = tensors;
            return out;
        },
        py::arg("path"),
        "{'metadata': {key: text}, 'tensors': [(name, type, shape)]} of a GGUF file, validated as "
        "Model loading validates it (ModelLoadError naming the key or tensor).");
    m.def(
        "read_gguf_tensor",
        [](const std::string& path, const std::string& name) {
            std::vector<float> values;
            std::vector<int64_t> shape;
            {
                py::gil_scoped_release release;
                values = read_gguf_tensor(path, name, &shape);
            }
            py::array_t<float> out(shape);
            std::memcpy(out.mutable_data(), values.data(), values.size() * sizeof(float));
            return out;
        },
        py::arg("path"), py::arg("name"),
        "Tensor `name` of a GGUF file dequantized to float32, rows as stored.");
}

}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "pylookahead native engine (libtorch)";
    m.attr("__version__") = PYLOOKAHEAD_VERSION;
    bind_errors(m);
    bind_config(m);
    bind_results(m);
    bind_session(m);
    bind_gguf(m);
}
