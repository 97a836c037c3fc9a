// Grammars over bytes for constrained decoding, and an incremental byte-level parser for them.
//
// A Grammar is built in code (GBNF-like in spirit): rules whose bodies are expressions made of
// literals, byte classes, UTF-8 code point classes, sequences, choices, bounded or unbounded
// repetition and references to rules (recursion allowed, left recursion refused). compile() turns
// each rule into a small finite automaton over bytes whose edges are byte ranges or calls of other
// rules; the Parser runs these automata as a pushdown automaton: a set of stacks (one per live
// parse, since grammars may be ambiguous), each a chain of frames "in rule R at automaton state S",
// stored as immutable nodes in an arena so that saving and restoring a parser state is cheap
// (remember the arena size and the stack tops; restoring truncates the arena).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::text::constrain {

struct ByteRange {
  uint8_t lo = 0, hi = 0;
};

// Expression tree builder. Expressions are ids into the grammar; an expression may be used several
// times (each use becomes its own automaton states). Not thread-safe; immutable once compiled.
class Grammar {
 public:
  using Expr = int32_t;
  using Rule = int32_t;

  // Declares a rule (its body is given later by define(), so that rules can refer to each other).
  Rule add_rule(std::string name);
  void define(Rule rule, Expr body);
  void set_root(Rule rule) { root_ = rule; }

  Expr empty();
  // The exact bytes of `text`.
  Expr literal(std::string_view text);
  // One byte in one of `ranges`.
  Expr bytes(std::vector<ByteRange> ranges);
  // One UTF-8 encoded code point in one of the inclusive `ranges` (or outside all of them when
  // `negate`); surrogates are never matched.
  Expr chars(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negate = false);
  Expr seq(std::vector<Expr> items);
  Expr choice(std::vector<Expr> alternatives);
  // `min` to `max` (nullopt: unbounded) repetitions of `item`.
  Expr repeat(Expr item, uint32_t min, std::optional<uint32_t> max);
  Expr optional(Expr item) { return repeat(item, 0, 1); }
  Expr star(Expr item) { return repeat(item, 0, std::nullopt); }
  Expr ref(Rule rule);
  // Copies every rule of `other` into this grammar (names prefixed with `prefix`) and returns a
  // reference to its root: how a tool call's grammar holds each tool's argument schema.
  Expr embed(const Grammar& other, const std::string& prefix);

  int32_t num_rules() const { return static_cast<int32_t>(rule_names_.size()); }
  const std::string& rule_name(Rule r) const { return rule_names_[r]; }
  Rule root() const { return root_; }
  size_t num_exprs() const { return nodes_.size(); }

  enum class Kind : uint8_t { kEmpty, kBytes, kSeq, kChoice, kRepeat, kRef };
  struct Node {
    Kind kind = Kind::kEmpty;
    std::vector<ByteRange> ranges;  // kBytes
    std::vector<Expr> items;        // kSeq, kChoice, kRepeat (one item)
    uint32_t min = 0, max = 0;      // kRepeat; max == kUnbounded for no bound
    Rule rule = -1;                 // kRef
  };
  static constexpr uint32_t kUnbounded = UINT32_MAX;
  const Node& node(Expr e) const { return nodes_[e]; }
  Expr body(Rule r) const { return rule_bodies_[r]; }

 private:
  Expr add(Node n);
  std::vector<Node> nodes_;
  std::vector<std::string> rule_names_;
  std::vector<Expr> rule_bodies_;
  Rule root_ = 0;
};

// Caps that keep a hostile or runaway grammar from using unbounded memory or time when compiled.
struct GrammarLimits {
  size_t max_states = 200000;  // automaton states over all rules, before and after simplification
};

// The automata of a grammar: global state ids; a state's byte edges consume one byte, its call
// edges push a frame for another rule (returning to `ret`). Immutable, shared read-only.
class CompiledGrammar {
 public:
  struct ByteEdge {
    uint8_t lo, hi;
    int32_t target;
  };
  struct CallEdge {
    int32_t callee_start;  // start state of the called rule
    int32_t ret;           // state of the caller after the call
  };

  // Throws core::Error when a rule is undefined or left-recursive, or a limit is exceeded.
  static std::shared_ptr<const CompiledGrammar> compile(const Grammar& grammar, const GrammarLimits& limits = {});

  int32_t num_states() const { return static_cast<int32_t>(accepting_.size()); }
  int32_t start_state() const { return start_; }
  bool accepting(int32_t s) const { return accepting_[s] != 0; }
  std::span<const ByteEdge> byte_edges(int32_t s) const {
    return {byte_edges_.data() + byte_begin_[s], byte_edges_.data() + byte_begin_[s + 1]};
  }
  std::span<const CallEdge> call_edges(int32_t s) const {
    return {call_edges_.data() + call_begin_[s], call_edges_.data() + call_begin_[s + 1]};
  }
  // Bytes that some byte edge of state `s` takes, as a 256-bit set (word b / 64, bit b % 64).
  const std::array<uint64_t, 4>& byte_set(int32_t s) const { return byte_sets_[s]; }
  // Name of the rule that owns a state (for debugging and error messages).
  const std::string& rule_of(int32_t s) const { return rule_names_[state_rule_[s]]; }

 private:
  friend class GrammarBuilderAccess;
  int32_t start_ = 0;
  std::vector<uint8_t> accepting_;
  std::vector<int32_t> state_rule_;
  std::vector<uint32_t> byte_begin_, call_begin_;
  std::vector<ByteEdge> byte_edges_;
  std::vector<CallEdge> call_edges_;
  std::vector<std::string> rule_names_;
  std::vector<std::array<uint64_t, 4>> byte_sets_;
};

// Incremental parser: feed bytes; knows whether the input so far is a complete sentence of the
// grammar and whether it can continue. Copyable; checkpoint()/restore() undo bytes cheaply. One
// parser per request (not thread-safe); the CompiledGrammar is shared.
class Parser {
 public:
  // Frame of a stack: automaton state and the frame below (kRootParent for the bottom frame).
  struct Node {
    int32_t state;
    int32_t parent;
  };
  static constexpr int32_t kRootParent = -1;
  // Bottom of a stack whose context is unknown (used to precompute token masks per state).
  static constexpr int32_t kUnknownParent = -2;

  explicit Parser(std::shared_ptr<const CompiledGrammar> grammar);

  // Consumes one byte; false (and the state unchanged) when no parse can take it.
  bool accept_byte(uint8_t byte);
  // Consumes all bytes or none.
  bool accept_bytes(std::string_view bytes);
  // The input so far is a sentence of the grammar.
  bool is_complete() const { return complete_; }
  // Some byte may follow.
  bool can_continue() const { return !tops_.empty(); }

  struct Checkpoint {
    size_t arena_size;
    std::vector<int32_t> tops;
    bool complete;
  };
  Checkpoint checkpoint() const { return {nodes_.size(), tops_, complete_}; }
  void restore(const Checkpoint& c);

  // ---- Low-level interface for the token matcher (token_matcher.cpp) ----
  // Each top is a frame whose state has byte edges; `step` follows `byte` from `tops` into `out`
  // (cleared first), creating frames in the arena; sets *complete when a bottom (root) frame
  // finished, *escaped when a kUnknownParent bottom frame finished.
  void step(std::span<const int32_t> tops, uint8_t byte, std::vector<int32_t>& out, bool* complete, bool* escaped);
  // A frame for `state` over `parent`, expanded (calls pushed, finished rules popped) into `out`.
  void expand(int32_t state, int32_t parent, std::vector<int32_t>& out, bool* complete, bool* escaped);
  const std::vector<int32_t>& tops() const { return tops_; }
  const Node& node(int32_t id) const { return nodes_[id]; }
  size_t arena_size() const { return nodes_.size(); }
  void truncate_arena(size_t size) { nodes_.resize(size); }
  int32_t new_node(int32_t state, int32_t parent) {
    nodes_.push_back({state, parent});
    return static_cast<int32_t>(nodes_.size() - 1);
  }
  const CompiledGrammar& grammar() const { return *grammar_; }
  // Replaces the current state (tops must be frames of this arena).
  void set_state(std::vector<int32_t> tops, bool complete) {
    tops_ = std::move(tops);
    complete_ = complete;
  }

 private:
  void closure(int32_t state, int32_t parent, int32_t reuse, std::vector<int32_t>& out);
  int32_t frame(int32_t state, int32_t parent);

  std::shared_ptr<const CompiledGrammar> grammar_;
  std::vector<Node> nodes_;
  std::vector<int32_t> tops_;
  bool complete_ = false;
  // Scratch of one step: closures already taken and frames created (state and parent -> node id),
  // so that equal stacks are merged and nullable loops terminate. An open-addressing table whose
  // entries of earlier steps are invalidated by bumping the generation (no clearing per step).
  struct Slot {
    uint64_t key = 0;
    int32_t id = 0;
    uint32_t gen = 0;
  };
  // Finds or inserts `key` in this step's table; returns the slot and whether it was new.
  std::pair<Slot*, bool> slot(uint64_t key);
  void new_step();
  // Most steps see a handful of frames: a linear scan of small_ until it overflows into table_.
  static constexpr size_t kSmall = 16;
  Slot small_[kSmall];
  size_t small_n_ = 0;
  bool hashed_ = false;
  std::vector<Slot> table_ = std::vector<Slot>(64);
  uint32_t gen_ = 1;
  size_t used_ = 0;
  Slot* table_slot(uint64_t key, bool* added);
  std::vector<int32_t> scratch_;
  bool step_complete_ = false, step_escaped_ = false;
  size_t step_work_ = 0;
};

}  // namespace tessera::text::constrain
