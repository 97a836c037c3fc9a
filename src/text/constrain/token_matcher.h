// Token masks for constrained decoding: which tokens of a vocabulary keep the generated text a valid
// prefix of a grammar's language.
//
// Three layers, each shared read-only across requests except the last:
//  - VocabIndex (once per tokenizer): the vocabulary's ordinary tokens in a byte trie, laid out in
//    preorder so that a walk visits each shared prefix once and skips a dead subtree in one jump.
//  - TokenGrammar (once per compiled grammar and vocabulary): for every automaton state that reads a
//    byte, the tokens accepted there whatever the stack below holds, and the tokens that depend on
//    the stack ("uncertain": they finish the state's rule and continue in the caller), kept as a
//    small trie (XGrammar's context-independent / context-dependent split). Tokens rejected inside
//    the rule are dropped.
//  - GrammarMatcher (one per request, not thread-safe): the parse state; a mask is the union over
//    the live stack tops of the precomputed accepted set plus the uncertain tokens re-checked
//    against the real stack.
// Special tokens are never allowed, except the stop tokens given to the matcher, which are allowed
// exactly when the text so far is complete.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "text/constrain/grammar.h"

namespace tessera::text {
class Tokenizer;
}

namespace tessera::text::constrain {

// A byte trie over a set of tokens, nodes in preorder (node 0 is the root, the empty prefix): a
// node's subtree is [index, end), its children follow it. Tokens are stored in the walk's order, so
// the tokens ending at a node and those of its subtree are contiguous ranges of `tokens`.
struct TokenTrie {
  struct Node {
    uint8_t byte;       // edge from the parent
    uint16_t depth;     // bytes from the root
    int32_t end;        // one past the last node of the subtree
    int32_t tok_begin;  // tokens ending here: [tok_begin, tok_end)
    int32_t tok_end;
    int32_t sub_tok_end;  // tokens of the subtree: [tok_begin, sub_tok_end)
  };
  std::vector<Node> nodes;
  std::vector<int32_t> tokens;
  int32_t max_depth = 0;
  // `sorted`: (bytes, id) ordered by bytes; bytes non-empty.
  static TokenTrie build(std::span<const std::pair<std::string_view, int32_t>> sorted);
};

// How a grammar spells a special token it may emit (a tool-call marker such as DeepSeek's
// <｜tool▁calls▁begin｜>): byte 0xFF then one byte for `index` (< 256). No UTF-8 text holds 0xFF,
// so no text grammar can match a spelling by accident, and the ordinary tokens holding that byte
// (byte-fallback tokens) are left out of a VocabIndex that has spellings, so that ordinary tokens
// cannot spell a marker either.
std::string special_token_spelling(int index);

class VocabIndex {
 public:
  // `spelled_specials`: special token ids that grammars may emit, the i-th spelled
  // special_token_spelling(i).
  static std::shared_ptr<const VocabIndex> build(const Tokenizer& tokenizer,
                                                 std::span<const int32_t> spelled_specials = {});
  int32_t vocab_size() const { return vocab_size_; }
  const TokenTrie& trie() const { return trie_; }
  // Bytes of an ordinary token (empty for special, unknown or empty tokens: never allowed).
  std::string_view bytes(int32_t id) const {
    return id >= 0 && id < vocab_size_ ? std::string_view(bytes_[id]) : std::string_view();
  }

 private:
  int32_t vocab_size_ = 0;
  std::vector<std::string> bytes_;
  TokenTrie trie_;
};

class TokenGrammar {
 public:
  // Precomputes the per-state token sets (cost: one trie walk per byte-reading state; the broad
  // ones, like the inside of a string, visit most of the vocabulary).
  static std::shared_ptr<const TokenGrammar> build(std::shared_ptr<const CompiledGrammar> grammar,
                                                   std::shared_ptr<const VocabIndex> vocab);

  struct StateTokens {
    std::vector<uint32_t> accepted_bits;  // dense form (many accepted), else empty
    std::vector<int32_t> accepted_ids;    // sparse form
    // Re-checked against the stack at run time: single tokens, and whole subtrees of the vocabulary
    // trie (all tokens below a prefix after which the state's rule can end, e.g. every token that
    // starts with a space after optional whitespace), kept by reference rather than copied.
    TokenTrie uncertain;
    struct Subtree {
      int32_t node;        // vocabulary trie node; its descendants are uncertain
      std::string prefix;  // bytes from the root to `node`
    };
    std::vector<Subtree> uncertain_subtrees;
  };
  const CompiledGrammar& grammar() const { return *grammar_; }
  const std::shared_ptr<const CompiledGrammar>& grammar_ptr() const { return grammar_; }
  const VocabIndex& vocab() const { return *vocab_; }
  // nullptr for a state without byte edges.
  const StateTokens* state_tokens(int32_t state) const {
    return index_[state] >= 0 ? &states_[index_[state]] : nullptr;
  }
  size_t num_byte_states() const { return states_.size(); }
  size_t num_uncertain_tokens() const;

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  std::shared_ptr<const VocabIndex> vocab_;
  std::vector<int32_t> index_;
  std::vector<StateTokens> states_;
};

// Words of a token bitmask over `vocab_size` tokens: bit (id % 32) of word (id / 32).
inline size_t mask_words(int32_t vocab_size) { return (static_cast<size_t>(vocab_size) + 31) / 32; }

class GrammarMatcher {
 public:
  // `stop_tokens` (e.g. EOS) are allowed once the text is complete and end the matcher.
  GrammarMatcher(std::shared_ptr<const TokenGrammar> grammar, std::vector<int32_t> stop_tokens);

  // Sets bit i of `bitmask` iff token i may come next. The span needs mask_words(vocab_size) words
  // (core::Error otherwise) and is overwritten whole: words past the vocabulary (a model's padded
  // logits row) come back 0. Leaves the parse state as it was.
  void fill_mask(std::span<uint32_t> bitmask);
  // Consumes a token; false (and the state unchanged) when it is not allowed.
  bool accept_token(int32_t id);
  // Consumes text that is forced (e.g. a prefix the server writes itself); all or nothing. Not a
  // token: rolling back past it undoes it together with the token before it.
  bool accept_text(std::string_view bytes);
  // The text so far is a complete sentence of the grammar (a stop token is allowed).
  bool is_complete() const { return !terminated_ && parser_.is_complete(); }
  // A stop token was accepted: nothing more is allowed.
  bool is_terminated() const { return terminated_; }
  // Undoes the last `num_tokens` accepted tokens (stop tokens included; at most num_accepted(),
  // core::Error otherwise).
  void rollback(size_t num_tokens);
  size_t num_accepted() const { return history_.size(); }

 private:
  struct Level {
    size_t arena = 0;
    std::vector<int32_t> tops;
    std::array<uint64_t, 4> next{};  // bytes some top can take (children outside it are dead)
  };
  // Walks trie nodes [begin, end) (all deeper than levels_[depth], which holds the parse state
  // before them) and allows the tokens whose bytes the parse takes.
  void walk(const TokenTrie& trie, int32_t begin, int32_t end, std::span<uint32_t> bitmask);
  void check_uncertain(int32_t top, const TokenGrammar::StateTokens& st, std::span<uint32_t> bitmask);

  std::shared_ptr<const TokenGrammar> grammar_;
  std::vector<int32_t> stop_tokens_;
  Parser parser_;
  bool terminated_ = false;
  struct History {
    Parser::Checkpoint checkpoint;
    bool terminated;
  };
  std::vector<History> history_;
  std::vector<Level> levels_;
};

}  // namespace tessera::text::constrain
