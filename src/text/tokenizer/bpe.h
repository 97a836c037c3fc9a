// Byte-pair merging shared by both tokenizer kinds. A piece starts as one symbol per byte; the
// adjacent pair with the lowest rank is merged (the leftmost one on ties) until no pair has a
// rank. For tokenizer.json the rank of a pair is its index in `merges`; for tiktoken it is the
// rank of the concatenated token, which we precompute per pair of token ids at load time
// (tiktoken's parts are always tokens, so both formulations pick the same merges).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tessera::text {

// Open-addressing map (left id, right id) -> (rank, merged id). Lookups are the BPE hot path.
class PairMap {
 public:
  struct Value {
    int32_t rank;
    int32_t merged;
  };
  void reserve(size_t n);
  // Keeps the existing value when the pair is already present with a lower (better) rank.
  void insert(int32_t left, int32_t right, Value v);
  const Value* find(int32_t left, int32_t right) const {
    if (keys_.empty()) return nullptr;
    const uint64_t key = pack(left, right);
    size_t i = hash(key);
    while (true) {
      const uint64_t k = keys_[i];
      if (k == key) return &values_[i];
      if (k == kEmpty) return nullptr;
      i = (i + 1) & mask_;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t pack(int32_t l, int32_t r) {
    return (uint64_t{static_cast<uint32_t>(l)} << 32) | static_cast<uint32_t>(r);
  }
  size_t hash(uint64_t k) const { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> shift_); }
  void rehash(size_t capacity);
  std::vector<uint64_t> keys_;
  std::vector<Value> values_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using BytesToId = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  std::array<int32_t, 256> byte_ids{};  // id of each single byte, -1 when absent (byte is dropped)
  PairMap pairs;
  // Whole-piece lookup, used before merging when `whole_piece_first` (tiktoken always; HF with
  // ignore_merges).
  const BytesToId* whole = nullptr;
  bool whole_piece_first = false;

  void encode(std::string_view piece, std::vector<int32_t>& out) const;
  // Same result, without the per-thread cache of recent pieces (for tests and comparisons).
  void encode_uncached(std::string_view piece, std::vector<int32_t>& out) const;

  // Both merge strategies, exposed so tests can check that they agree.
  void merge_linear(std::vector<int32_t>& symbols) const;
  void merge_heap(std::vector<int32_t>& symbols) const;

  // Identifies this model in the per-thread piece cache (a fresh value per object, so a model
  // allocated where a destroyed one lived never sees its entries).
  const uint64_t cache_key = next_cache_key();

 private:
  static uint64_t next_cache_key();
};

}  // namespace tessera::text
