#include "text/constrain/token_matcher.h"

#include <algorithm>

#include "core/error.h"
#include "text/tokenizer/tokenizer.h"

namespace tessera::text::constrain {

TokenTrie TokenTrie::build(std::span<const std::pair<std::string_view, int32_t>> sorted) {
  TokenTrie t;
  t.nodes.push_back({0, 0, 0, 0, 0, 0});
  std::vector<int32_t> open{0};  // open[d]: node of the current path at depth d
  std::string_view prev;
  auto close_to = [&](size_t depth) {  // closes the open nodes deeper than `depth`
    while (open.size() > depth + 1) {
      auto& n = t.nodes[open.back()];
      n.end = static_cast<int32_t>(t.nodes.size());
      n.sub_tok_end = static_cast<int32_t>(t.tokens.size());
      open.pop_back();
    }
  };
  for (const auto& [bytes, id] : sorted) {
    TESSERA_CHECK(!bytes.empty() && bytes.size() < UINT16_MAX, "token trie: token {} has {} bytes", id, bytes.size());
    size_t l = 0;
    while (l < prev.size() && l < bytes.size() && prev[l] == bytes[l]) ++l;
    close_to(l);
    for (size_t d = l; d < bytes.size(); ++d) {
      const auto at = static_cast<int32_t>(t.tokens.size());
      t.nodes.push_back({static_cast<uint8_t>(bytes[d]), static_cast<uint16_t>(d + 1), 0, at, at, at});
      open.push_back(static_cast<int32_t>(t.nodes.size() - 1));
    }
    t.tokens.push_back(id);
    t.nodes[open.back()].tok_end = static_cast<int32_t>(t.tokens.size());
    t.max_depth = std::max<int32_t>(t.max_depth, static_cast<int32_t>(bytes.size()));
    prev = bytes;
  }
  close_to(0);
  t.nodes[0].end = static_cast<int32_t>(t.nodes.size());
  t.nodes[0].sub_tok_end = static_cast<int32_t>(t.tokens.size());
  return t;
}

std::string special_token_spelling(int index) {
  TESSERA_CHECK(index >= 0 && index < 256, "special_token_spelling: index {} out of range", index);
  return std::string{'\xFF', static_cast<char>(index)};
}

std::shared_ptr<const VocabIndex> VocabIndex::build(const Tokenizer& tokenizer,
                                                    std::span<const int32_t> spelled_specials) {
  auto v = std::make_shared<VocabIndex>();
  v->vocab_size_ = tokenizer.vocab_size();
  v->bytes_.resize(v->vocab_size_);
  std::vector<std::pair<std::string_view, int32_t>> sorted;
  for (int32_t id = 0; id < v->vocab_size_; ++id) {
    if (!tokenizer.has_id(id) || tokenizer.is_special(id) ||
        std::find(spelled_specials.begin(), spelled_specials.end(), id) != spelled_specials.end())
      continue;
    v->bytes_[id] = std::string(tokenizer.token_bytes(id));
    if (!spelled_specials.empty() && v->bytes_[id].find('\xFF') != std::string::npos) v->bytes_[id].clear();
    if (!v->bytes_[id].empty()) sorted.push_back({v->bytes_[id], id});
  }
  for (size_t i = 0; i < spelled_specials.size(); ++i) {
    const int32_t id = spelled_specials[i];
    TESSERA_CHECK(id >= 0 && id < v->vocab_size_ && v->bytes_[id].empty(),
                  "VocabIndex: spelled special token {} is outside the vocabulary or given twice", id);
    v->bytes_[id] = special_token_spelling(static_cast<int>(i));
    sorted.push_back({v->bytes_[id], id});
  }
  std::sort(sorted.begin(), sorted.end());
  v->trie_ = TokenTrie::build(sorted);
  return v;
}

namespace {

// Walk state of one trie depth: the arena size and the stack tops after the path's bytes.
struct Level {
  size_t arena = 0;
  std::vector<int32_t> tops;
  std::array<uint64_t, 4> next{};  // bytes some top can take (children outside it are dead)
  bool escaped = false;            // some parse left the start state's rule at a shorter prefix
};

void next_bytes(const Parser& p, const std::vector<int32_t>& tops, std::array<uint64_t, 4>& out) {
  out = {};
  for (int32_t t : tops) {
    const auto& s = p.grammar().byte_set(p.node(t).state);
    for (int i = 0; i < 4; ++i) out[i] |= s[i];
  }
}

bool has_byte(const std::array<uint64_t, 4>& set, uint8_t b) { return (set[b >> 6] >> (b & 63)) & 1u; }

}  // namespace

std::shared_ptr<const TokenGrammar> TokenGrammar::build(std::shared_ptr<const CompiledGrammar> grammar,
                                                        std::shared_ptr<const VocabIndex> vocab) {
  auto out = std::make_shared<TokenGrammar>();
  out->grammar_ = grammar;
  out->vocab_ = vocab;
  const auto& g = *grammar;
  const auto& trie = vocab->trie();
  const int32_t vocab_size = vocab->vocab_size();
  out->index_.assign(g.num_states(), -1);
  Parser parser(grammar);
  const size_t base = parser.arena_size();
  std::vector<Level> levels(trie.max_depth + 1);
  std::vector<int32_t> accepted, uncertain;
  std::vector<StateTokens::Subtree> subtrees;
  std::string path;
  for (int32_t state = 0; state < g.num_states(); ++state) {
    if (g.byte_edges(state).empty()) continue;
    accepted.clear();
    uncertain.clear();
    subtrees.clear();
    parser.truncate_arena(base);
    levels[0].tops.assign(1, parser.new_node(state, Parser::kUnknownParent));
    levels[0].arena = parser.arena_size();
    levels[0].escaped = false;
    levels[0].next = g.byte_set(state);
    bool complete = false, escaped = false;
    for (int32_t k = 1; k < static_cast<int32_t>(trie.nodes.size());) {
      const auto& n = trie.nodes[k];
      const Level& up = levels[n.depth - 1];
      Level& here = levels[n.depth];
      if (has_byte(up.next, n.byte)) {
        parser.truncate_arena(up.arena);
        parser.step(up.tops, n.byte, here.tops, &complete, &escaped);
      } else {
        here.tops.clear();
        escaped = false;
      }
      // A token that ends here is accepted when a parse is still inside the rule (or finished it
      // exactly at the token's end); when a parse left the rule earlier, it depends on the caller.
      if (!here.tops.empty() || escaped) {
        accepted.insert(accepted.end(), trie.tokens.begin() + n.tok_begin, trie.tokens.begin() + n.tok_end);
      } else if (up.escaped) {
        uncertain.insert(uncertain.end(), trie.tokens.begin() + n.tok_begin, trie.tokens.begin() + n.tok_end);
      }
      here.escaped = up.escaped || escaped;
      path.resize(n.depth);
      path[n.depth - 1] = static_cast<char>(n.byte);
      if (here.tops.empty()) {
        if (here.escaped && n.sub_tok_end > n.tok_end) subtrees.push_back({k, path});
        k = n.end;
        continue;
      }
      here.arena = parser.arena_size();
      next_bytes(parser, here.tops, here.next);
      ++k;
    }
    StateTokens st;
    if (accepted.size() * 32 > static_cast<size_t>(vocab_size)) {
      st.accepted_bits.assign(mask_words(vocab_size), 0);
      for (int32_t id : accepted) st.accepted_bits[id >> 5] |= 1u << (id & 31);
    } else {
      st.accepted_ids = accepted;
    }
    std::vector<std::pair<std::string_view, int32_t>> sorted;
    sorted.reserve(uncertain.size());
    for (int32_t id : uncertain) sorted.push_back({vocab->bytes(id), id});
    st.uncertain = TokenTrie::build(sorted);  // already in trie (sorted) order
    st.uncertain_subtrees = subtrees;
    out->index_[state] = static_cast<int32_t>(out->states_.size());
    out->states_.push_back(std::move(st));
  }
  return out;
}

size_t TokenGrammar::num_uncertain_tokens() const {
  size_t n = 0;
  for (const auto& s : states_) {
    n += s.uncertain.tokens.size();
    for (const auto& sub : s.uncertain_subtrees) {
      const auto& node = vocab_->trie().nodes[sub.node];
      n += node.sub_tok_end - node.tok_end;
    }
  }
  return n;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const TokenGrammar> grammar, std::vector<int32_t> stop_tokens)
    : grammar_(std::move(grammar)), stop_tokens_(std::move(stop_tokens)), parser_(grammar_->grammar_ptr()) {
  levels_.resize(grammar_->vocab().trie().max_depth + 1);
}

void GrammarMatcher::check_uncertain(int32_t top, const TokenGrammar::StateTokens& st, std::span<uint32_t> bitmask) {
  const size_t base = parser_.arena_size();
  levels_[0].tops.assign(1, top);
  levels_[0].arena = base;
  levels_[0].next = parser_.grammar().byte_set(parser_.node(top).state);
  if (!st.uncertain.tokens.empty()) walk(st.uncertain, 1, static_cast<int32_t>(st.uncertain.nodes.size()), bitmask);
  const auto& vocab_trie = grammar_->vocab().trie();
  bool complete = false, escaped = false;
  for (const auto& sub : st.uncertain_subtrees) {
    // Replay the prefix, then walk the subtree below it.
    size_t d = 0;
    for (; d < sub.prefix.size(); ++d) {
      parser_.truncate_arena(levels_[d].arena);
      parser_.step(levels_[d].tops, static_cast<uint8_t>(sub.prefix[d]), levels_[d + 1].tops, &complete, &escaped);
      if (levels_[d + 1].tops.empty()) break;
      levels_[d + 1].arena = parser_.arena_size();
      next_bytes(parser_, levels_[d + 1].tops, levels_[d + 1].next);
    }
    if (d == sub.prefix.size()) walk(vocab_trie, sub.node + 1, vocab_trie.nodes[sub.node].end, bitmask);
  }
  parser_.truncate_arena(base);
}

void GrammarMatcher::walk(const TokenTrie& trie, int32_t begin, int32_t end, std::span<uint32_t> bitmask) {
  bool complete = false, escaped = false;
  for (int32_t k = begin; k < end;) {
    const auto& n = trie.nodes[k];
    const Level& up = levels_[n.depth - 1];
    Level& here = levels_[n.depth];
    if (!has_byte(up.next, n.byte)) {
      k = n.end;
      continue;
    }
    parser_.truncate_arena(up.arena);
    parser_.step(up.tops, n.byte, here.tops, &complete, &escaped);
    if (!here.tops.empty() || complete)
      for (int32_t i = n.tok_begin; i < n.tok_end; ++i) bitmask[trie.tokens[i] >> 5] |= 1u << (trie.tokens[i] & 31);
    if (here.tops.empty()) {
      k = n.end;
      continue;
    }
    here.arena = parser_.arena_size();
    next_bytes(parser_, here.tops, here.next);
    ++k;
  }
}

void GrammarMatcher::fill_mask(std::span<uint32_t> bitmask) {
  const int32_t vocab_size = grammar_->vocab().vocab_size();
  TESSERA_CHECK(bitmask.size() >= mask_words(vocab_size), "token mask: {} words given, {} needed", bitmask.size(),
                mask_words(vocab_size));
  std::fill(bitmask.begin(), bitmask.end(), 0u);
  if (terminated_) return;
  // Copy: check_uncertain steps the parser's arena (restored after each walk).
  const std::vector<int32_t> tops = parser_.tops();
  for (int32_t top : tops) {
    const auto* st = grammar_->state_tokens(parser_.node(top).state);
    if (!st) continue;
    if (!st->accepted_bits.empty()) {
      for (size_t w = 0; w < st->accepted_bits.size(); ++w) bitmask[w] |= st->accepted_bits[w];
    } else {
      for (int32_t id : st->accepted_ids) bitmask[id >> 5] |= 1u << (id & 31);
    }
    check_uncertain(top, *st, bitmask);
  }
  if (parser_.is_complete())
    for (int32_t id : stop_tokens_)
      if (id >= 0 && id < vocab_size) bitmask[id >> 5] |= 1u << (id & 31);
}

bool GrammarMatcher::accept_token(int32_t id) {
  if (terminated_) return false;
  if (std::find(stop_tokens_.begin(), stop_tokens_.end(), id) != stop_tokens_.end()) {
    if (!parser_.is_complete()) return false;
    history_.push_back({parser_.checkpoint(), terminated_});
    terminated_ = true;
    return true;
  }
  const std::string_view bytes = grammar_->vocab().bytes(id);
  if (bytes.empty()) return false;
  Parser::Checkpoint c = parser_.checkpoint();
  if (!parser_.accept_bytes(bytes)) return false;
  history_.push_back({std::move(c), terminated_});
  return true;
}

bool GrammarMatcher::accept_text(std::string_view bytes) {
  if (terminated_) return false;
  return parser_.accept_bytes(bytes);
}

void GrammarMatcher::rollback(size_t num_tokens) {
  TESSERA_CHECK(num_tokens <= history_.size(), "grammar matcher: cannot roll back {} tokens, {} accepted", num_tokens,
                history_.size());
  if (num_tokens == 0) return;
  const History& h = history_[history_.size() - num_tokens];
  parser_.restore(h.checkpoint);
  terminated_ = h.terminated;
  history_.resize(history_.size() - num_tokens);
}

}  // namespace tessera::text::constrain
