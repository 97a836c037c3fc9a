// Options shared by the subcommands that load a model.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace tessera::cli {

struct ModelOptions {
  std::string model_dir;
  std::string device = "cpu";
  std::string kv_cache_dtype = "auto";
  std::string kernels;
  bool enforce_eager = false;
  double latent_norm_eps = -1;  // < 0: the reference default

  // `model_required`: false for serve, which has a built-in demo model.
  void add_to(CLI::App& app, bool model_required = true);
  model::LoadOptions load_options() const;
  // The backend these options name (ops::make_backend).
  std::unique_ptr<ops::Ops> make_backend() const;
};

// Splits a list of numbers: "1,2, 3", "1 2 3" or "[1, 2]". An empty item (a leading, trailing or
// doubled comma) is an error naming `flag` and the item.
std::vector<std::string> split_list_items(const std::string& text, const std::string& flag);
// Parses "1,2,3" (spaces allowed) into non-negative ids; throws naming `flag` on anything else.
std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag);

}  // namespace tessera::cli
