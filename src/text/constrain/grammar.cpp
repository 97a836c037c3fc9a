#include "text/constrain/grammar.h"

#include <algorithm>
#include <functional>
#include <string>
#include <unordered_map>

#include "core/error.h"

namespace tessera::text::constrain {

// ---------------------------------------------------------------------------------------------
// Builder

Grammar::Expr Grammar::add(Node n) {
  nodes_.push_back(std::move(n));
  return static_cast<Expr>(nodes_.size() - 1);
}

Grammar::Rule Grammar::add_rule(std::string name) {
  rule_names_.push_back(std::move(name));
  rule_bodies_.push_back(-1);
  return static_cast<Rule>(rule_names_.size() - 1);
}

void Grammar::define(Rule rule, Expr body) {
  TESSERA_CHECK(rule >= 0 && rule < num_rules(), "grammar: rule id {} out of range", rule);
  rule_bodies_[rule] = body;
}

Grammar::Expr Grammar::empty() { return add(Node{}); }

Grammar::Expr Grammar::literal(std::string_view text) {
  std::vector<Expr> items;
  for (unsigned char c : text) items.push_back(bytes({{c, c}}));
  return items.size() == 1 ? items[0] : seq(std::move(items));
}

Grammar::Expr Grammar::bytes(std::vector<ByteRange> ranges) {
  Node n;
  n.kind = Kind::kBytes;
  n.ranges = std::move(ranges);
  return add(std::move(n));
}

namespace {

// Splits the code point range [lo, hi] into sequences of byte ranges, each matching exactly the
// UTF-8 encodings of a sub-range (the construction RE2 and Rust's regex use).
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteRange>>& out) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {  // surrogates are not scalar values
    if (lo < 0xD800) utf8_sequences(lo, 0xD7FF, out);
    if (hi > 0xDFFF) utf8_sequences(0xE000, hi, out);
    return;
  }
  for (uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu}) {  // one encoded length per piece
    if (lo <= max && hi > max) {
      utf8_sequences(lo, max, out);
      utf8_sequences(max + 1, hi, out);
      return;
    }
  }
  if (hi <= 0x7F) {
    out.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  for (int i = 1; i < 4; ++i) {  // ranges whose continuation bytes are not full 0x80..0xBF
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  auto encode = [](uint32_t cp, uint8_t* b) {
    if (cp < 0x800) {
      b[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
      b[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      return 2;
    }
    if (cp < 0x10000) {
      b[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
      b[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      b[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      return 3;
    }
    b[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
    b[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
    b[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    b[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 4;
  };
  uint8_t a[4], b[4];
  const int n = encode(lo, a);
  encode(hi, b);
  std::vector<ByteRange> seq;
  for (int i = 0; i < n; ++i) seq.push_back({a[i], b[i]});
  out.push_back(std::move(seq));
}

}  // namespace

Grammar::Expr Grammar::chars(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negate) {
  std::sort(ranges.begin(), ranges.end());
  if (negate) {
    std::vector<std::pair<uint32_t, uint32_t>> inv;
    uint32_t next = 0;
    for (auto [lo, hi] : ranges) {
      if (lo > next) inv.push_back({next, lo - 1});
      next = std::max(next, hi + 1);
    }
    if (next <= 0x10FFFF) inv.push_back({next, 0x10FFFF});
    ranges = std::move(inv);
  }
  std::vector<std::vector<ByteRange>> seqs;
  for (auto [lo, hi] : ranges) utf8_sequences(lo, std::min<uint32_t>(hi, 0x10FFFF), seqs);
  // Single-byte sequences merge into one byte class; longer ones become sequences of classes.
  std::vector<ByteRange> single;
  std::vector<Expr> alts;
  for (auto& s : seqs) {
    if (s.size() == 1) {
      single.push_back(s[0]);
      continue;
    }
    std::vector<Expr> items;
    for (auto r : s) items.push_back(bytes({r}));
    alts.push_back(seq(std::move(items)));
  }
  if (!single.empty()) alts.insert(alts.begin(), bytes(std::move(single)));
  if (alts.empty()) return bytes({});  // matches nothing
  return alts.size() == 1 ? alts[0] : choice(std::move(alts));
}

Grammar::Expr Grammar::seq(std::vector<Expr> items) {
  Node n;
  n.kind = Kind::kSeq;
  n.items = std::move(items);
  return add(std::move(n));
}

Grammar::Expr Grammar::choice(std::vector<Expr> alternatives) {
  Node n;
  n.kind = Kind::kChoice;
  n.items = std::move(alternatives);
  return add(std::move(n));
}

Grammar::Expr Grammar::repeat(Expr item, uint32_t min, std::optional<uint32_t> max) {
  TESSERA_CHECK(!max || *max >= min, "grammar: repetition max {} is below min {}", max.value_or(0), min);
  Node n;
  n.kind = Kind::kRepeat;
  n.items = {item};
  n.min = min;
  n.max = max ? *max : kUnbounded;
  return add(std::move(n));
}

Grammar::Expr Grammar::embed(const Grammar& other, const std::string& prefix) {
  const auto expr_base = static_cast<Expr>(nodes_.size());
  const Rule rule_base = num_rules();
  for (const Node& n : other.nodes_) {
    Node c = n;
    for (Expr& e : c.items) e += expr_base;
    if (c.kind == Kind::kRef) c.rule += rule_base;
    nodes_.push_back(std::move(c));
  }
  for (Rule r = 0; r < other.num_rules(); ++r) {
    rule_names_.push_back(prefix + other.rule_names_[r]);
    rule_bodies_.push_back(other.rule_bodies_[r] < 0 ? -1 : other.rule_bodies_[r] + expr_base);
  }
  return ref(other.root_ + rule_base);
}

Grammar::Expr Grammar::ref(Rule rule) {
  Node n;
  n.kind = Kind::kRef;
  n.rule = rule;
  return add(std::move(n));
}

// ---------------------------------------------------------------------------------------------
// Compilation: Thompson construction per rule (with epsilon edges), then epsilon elimination and
// removal of unreachable states.

class GrammarBuilderAccess {
 public:
  static std::shared_ptr<const CompiledGrammar> compile(const Grammar& g, const GrammarLimits& limits);

 private:
  static void merge_equivalent_states(CompiledGrammar& g);
  static void trim(CompiledGrammar& g, const Grammar& grammar, const std::vector<int32_t>& rule_start);
};

namespace {

struct NfaEdge {
  enum Kind : uint8_t { kEps, kByte, kCall } kind;
  uint8_t lo, hi;
  int32_t rule;  // kCall
  int32_t target;
};

struct Nfa {
  std::vector<std::vector<NfaEdge>> edges;
  size_t max_states;
  const Grammar* g;
  int32_t add_state() {
    TESSERA_CHECK(edges.size() < max_states, "grammar: too large (more than {} automaton states)", max_states);
    edges.emplace_back();
    return static_cast<int32_t>(edges.size() - 1);
  }
  void eps(int32_t a, int32_t b) { edges[a].push_back({NfaEdge::kEps, 0, 0, -1, b}); }
  // Builds `e` starting at state `from`; returns the end state.
  int32_t build(Grammar::Expr e, int32_t from, int depth) {
    TESSERA_CHECK(depth < 10000, "grammar: expressions nested too deeply");
    const auto& n = g->node(e);
    switch (n.kind) {
      case Grammar::Kind::kEmpty:
        return from;
      case Grammar::Kind::kBytes: {
        const int32_t to = add_state();
        for (auto r : n.ranges) edges[from].push_back({NfaEdge::kByte, r.lo, r.hi, -1, to});
        return to;
      }
      case Grammar::Kind::kRef: {
        const int32_t to = add_state();
        edges[from].push_back({NfaEdge::kCall, 0, 0, n.rule, to});
        return to;
      }
      case Grammar::Kind::kSeq: {
        int32_t cur = from;
        for (auto item : n.items) cur = build(item, cur, depth + 1);
        return cur;
      }
      case Grammar::Kind::kChoice: {
        const int32_t to = add_state();
        for (auto item : n.items) {
          const int32_t s = add_state();
          eps(from, s);
          eps(build(item, s, depth + 1), to);
        }
        return to;
      }
      case Grammar::Kind::kRepeat: {
        int32_t cur = from;
        for (uint32_t i = 0; i < n.min; ++i) {
          const int32_t s = add_state();
          eps(cur, s);
          cur = build(n.items[0], s, depth + 1);
        }
        if (n.max == Grammar::kUnbounded) {
          const int32_t loop = add_state();
          eps(cur, loop);
          const int32_t s = add_state();
          eps(loop, s);
          eps(build(n.items[0], s, depth + 1), loop);
          return loop;
        }
        const int32_t to = add_state();
        eps(cur, to);
        for (uint32_t i = n.min; i < n.max; ++i) {  // nested optionals: (e (e (e)?)?)?
          const int32_t s = add_state();
          eps(cur, s);
          cur = build(n.items[0], s, depth + 1);
          eps(cur, to);
        }
        return to;
      }
    }
    return from;
  }
};

}  // namespace

std::shared_ptr<const CompiledGrammar> GrammarBuilderAccess::compile(const Grammar& g, const GrammarLimits& limits) {
  TESSERA_CHECK(g.num_rules() > 0, "grammar: no rules");
  TESSERA_CHECK(g.root() >= 0 && g.root() < g.num_rules(), "grammar: root rule {} out of range", g.root());
  for (int32_t r = 0; r < g.num_rules(); ++r)
    TESSERA_CHECK(g.body(r) >= 0 && static_cast<size_t>(g.body(r)) < g.num_exprs(), "grammar: rule '{}' is not defined",
                  g.rule_name(r));
  for (size_t e = 0; e < g.num_exprs(); ++e) {
    const auto& n = g.node(static_cast<int32_t>(e));
    if (n.kind == Grammar::Kind::kRef)
      TESSERA_CHECK(n.rule >= 0 && n.rule < g.num_rules(), "grammar: reference to unknown rule id {}", n.rule);
  }

  auto out = std::make_shared<CompiledGrammar>();  // filled here, then shared read-only
  out->rule_names_.resize(g.num_rules());
  for (int32_t r = 0; r < g.num_rules(); ++r) out->rule_names_[r] = g.rule_name(r);
  std::vector<int32_t> rule_start(g.num_rules());
  struct Pending {
    int32_t rule;
    int32_t callee_rule;
    size_t edge_index;
  };
  std::vector<Pending> calls;  // call edges whose callee start is known only at the end
  size_t total_nfa = 0;

  for (int32_t r = 0; r < g.num_rules(); ++r) {
    Nfa nfa{{}, limits.max_states > total_nfa ? limits.max_states - total_nfa : 0, &g};
    const int32_t start = nfa.add_state();
    const int32_t final_state = nfa.build(g.body(r), start, 0);
    total_nfa += nfa.edges.size();
    const size_t n = nfa.edges.size();
    // Epsilon closures.
    std::vector<std::vector<int32_t>> clos(n);
    std::vector<int32_t> mark(n, -1);
    for (size_t s = 0; s < n; ++s) {
      std::vector<int32_t> stack{static_cast<int32_t>(s)};
      mark[s] = static_cast<int32_t>(s);
      while (!stack.empty()) {
        const int32_t x = stack.back();
        stack.pop_back();
        clos[s].push_back(x);
        for (const auto& e : nfa.edges[x])
          if (e.kind == NfaEdge::kEps && mark[e.target] != static_cast<int32_t>(s)) {
            mark[e.target] = static_cast<int32_t>(s);
            stack.push_back(e.target);
          }
      }
    }
    // Keep states reachable from start through non-epsilon edges.
    std::vector<int32_t> id(n, -1);
    std::vector<int32_t> order{start};
    id[start] = 0;
    for (size_t i = 0; i < order.size(); ++i)
      for (int32_t x : clos[order[i]])
        for (const auto& e : nfa.edges[x])
          if (e.kind != NfaEdge::kEps && id[e.target] < 0) {
            id[e.target] = static_cast<int32_t>(order.size());
            order.push_back(e.target);
          }
    const int32_t base = out->num_states();
    TESSERA_CHECK(static_cast<size_t>(base) + order.size() <= limits.max_states,
                  "grammar: too large (more than {} automaton states)", limits.max_states);
    rule_start[r] = base;
    for (int32_t s : order) {
      bool acc = false;
      std::vector<CompiledGrammar::ByteEdge> be;
      std::vector<std::pair<int32_t, int32_t>> ce;  // (callee rule, ret)
      for (int32_t x : clos[s]) {
        acc = acc || x == final_state;
        for (const auto& e : nfa.edges[x]) {
          if (e.kind == NfaEdge::kByte) be.push_back({e.lo, e.hi, base + id[e.target]});
          if (e.kind == NfaEdge::kCall) ce.push_back({e.rule, base + id[e.target]});
        }
      }
      std::sort(be.begin(), be.end(), [](const auto& a, const auto& b) {
        return std::tie(a.lo, a.hi, a.target) < std::tie(b.lo, b.hi, b.target);
      });
      be.erase(std::unique(
                   be.begin(), be.end(),
                   [](const auto& a, const auto& b) { return a.lo == b.lo && a.hi == b.hi && a.target == b.target; }),
               be.end());
      std::sort(ce.begin(), ce.end());
      ce.erase(std::unique(ce.begin(), ce.end()), ce.end());
      out->accepting_.push_back(acc ? 1 : 0);
      out->state_rule_.push_back(r);
      if (out->byte_begin_.empty()) out->byte_begin_.push_back(0);
      if (out->call_begin_.empty()) out->call_begin_.push_back(0);
      out->byte_edges_.insert(out->byte_edges_.end(), be.begin(), be.end());
      out->byte_begin_.push_back(static_cast<uint32_t>(out->byte_edges_.size()));
      for (auto [callee, ret] : ce) {
        calls.push_back({r, callee, out->call_edges_.size()});
        out->call_edges_.push_back({-1, ret});
      }
      out->call_begin_.push_back(static_cast<uint32_t>(out->call_edges_.size()));
    }
  }
  for (const auto& p : calls) out->call_edges_[p.edge_index].callee_start = rule_start[p.callee_rule];
  out->start_ = rule_start[g.root()];

  // Left recursion would make the parser push frames forever without consuming a byte: refuse it.
  // nullable[r]: rule r can match the empty string (fixpoint).
  const int32_t nr = g.num_rules();
  std::vector<int32_t> rule_end(nr);
  for (int32_t r = 0; r < nr; ++r) rule_end[r] = r + 1 < nr ? rule_start[r + 1] : out->num_states();
  std::vector<char> nullable(nr, 0);
  // States reachable from a rule's start without consuming a byte (through calls of nullable rules).
  auto empty_reach = [&](int32_t r, std::vector<int32_t>* called) {
    std::vector<char> seen(rule_end[r] - rule_start[r], 0);
    std::vector<int32_t> stack{rule_start[r]};
    seen[0] = 1;
    bool acc = false;
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      acc = acc || out->accepting(s);
      for (const auto& c : out->call_edges(s)) {
        const int32_t callee = out->state_rule_[c.callee_start];
        if (called) called->push_back(callee);
        if (nullable[callee] && !seen[c.ret - rule_start[r]]) {
          seen[c.ret - rule_start[r]] = 1;
          stack.push_back(c.ret);
        }
      }
    }
    return acc;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < nr; ++r)
      if (!nullable[r] && empty_reach(r, nullptr)) nullable[r] = 1, changed = true;
  }
  std::vector<std::vector<int32_t>> first_calls(nr);
  for (int32_t r = 0; r < nr; ++r) empty_reach(r, &first_calls[r]);
  std::vector<char> color(nr, 0);  // 0 new, 1 on the DFS path, 2 done
  std::function<void(int32_t)> visit = [&](int32_t r) {
    color[r] = 1;
    for (int32_t c : first_calls[r]) {
      TESSERA_CHECK(color[c] != 1, "grammar: rule '{}' is left-recursive", g.rule_name(c));
      if (color[c] == 0) visit(c);
    }
    color[r] = 2;
  };
  for (int32_t r = 0; r < nr; ++r)
    if (color[r] == 0) visit(r);
  trim(*out, g, rule_start);
  merge_equivalent_states(*out);
  out->byte_sets_.assign(out->num_states(), {});
  for (int32_t s = 0; s < out->num_states(); ++s)
    for (const auto& e : out->byte_edges(s))
      for (int b = e.lo; b <= e.hi; ++b) out->byte_sets_[s][b >> 6] |= 1ull << (b & 63);
  return out;
}

// Removes dead ends, so that every text the parser accepts can still be completed (and a token mask
// is never empty before the text is complete, given a vocabulary with every single byte): a rule
// is productive when some finite text matches it; edges into states from which no accepting state
// can be reached (through bytes and calls of productive rules) are dropped, and so are calls of
// unproductive rules (e.g. a required property whose schema refers back to its own object).
void GrammarBuilderAccess::trim(CompiledGrammar& g, const Grammar& grammar, const std::vector<int32_t>& rule_start) {
  const int32_t nr = grammar.num_rules();
  const int32_t ns = g.num_states();
  auto rule_end = [&](int32_t r) { return r + 1 < nr ? rule_start[r + 1] : ns; };
  std::vector<char> productive(nr, 0), live(ns, 0);
  std::vector<std::vector<int32_t>> callers(nr);
  for (int32_t s = 0; s < ns; ++s)
    for (const auto& c : g.call_edges(s)) callers[g.state_rule_[c.callee_start]].push_back(g.state_rule_[s]);
  for (auto& c : callers) {
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
  }
  // live states of rule r given the productive rules so far; returns whether its start is live.
  std::vector<std::vector<int32_t>> rev;
  auto co_reach = [&](int32_t r) {
    const int32_t b = rule_start[r], n = rule_end(r) - b;
    rev.assign(n, {});
    std::vector<int32_t> stack;
    for (int32_t s = b; s < b + n; ++s) {
      live[s] = g.accepting(s);
      if (live[s]) stack.push_back(s);
      for (const auto& e : g.byte_edges(s)) rev[e.target - b].push_back(s);
      for (const auto& c : g.call_edges(s))
        if (productive[g.state_rule_[c.callee_start]]) rev[c.ret - b].push_back(s);
    }
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      for (int32_t p : rev[s - b])
        if (!live[p]) live[p] = 1, stack.push_back(p);
    }
    return live[b] != 0;
  };
  // Each rule is re-examined only when one of its (distinct) callees became productive. First in,
  // first out, in rule order: rules are mostly declared before their callers (the root last), so
  // one pass usually settles them.
  std::vector<int32_t> work(nr);
  std::vector<char> queued(nr, 1);
  for (int32_t r = 0; r < nr; ++r) work[r] = r;
  for (size_t head = 0; head < work.size(); ++head) {
    const int32_t r = work[head];
    queued[r] = 0;
    if (productive[r] || !co_reach(r)) continue;
    productive[r] = 1;
    for (int32_t c : callers[r])
      if (!productive[c] && !queued[c]) queued[c] = 1, work.push_back(c);
  }
  TESSERA_CHECK(productive[grammar.root()], "grammar: no finite text matches the root rule '{}'",
                grammar.rule_name(grammar.root()));
  for (int32_t r = 0; r < nr; ++r) co_reach(r);  // final live sets
  std::vector<CompiledGrammar::ByteEdge> bytes;
  std::vector<CompiledGrammar::CallEdge> calls;
  std::vector<uint32_t> byte_begin{0}, call_begin{0};
  for (int32_t s = 0; s < ns; ++s) {
    for (const auto& e : g.byte_edges(s))
      if (live[e.target]) bytes.push_back(e);
    for (const auto& c : g.call_edges(s))
      if (productive[g.state_rule_[c.callee_start]] && live[c.ret]) calls.push_back(c);
    byte_begin.push_back(static_cast<uint32_t>(bytes.size()));
    call_begin.push_back(static_cast<uint32_t>(calls.size()));
  }
  g.byte_edges_ = std::move(bytes);
  g.call_edges_ = std::move(calls);
  g.byte_begin_ = std::move(byte_begin);
  g.call_begin_ = std::move(call_begin);
}

// Merges states that read the same bytes into the same states, call the same rules and accept
// alike (they parse the same language). Epsilon elimination leaves many such copies (e.g. "after a
// plain character" and "after an escape" inside a string), and every byte-reading state costs a
// walk over the vocabulary when token masks are precomputed. Each round merges only states whose
// edges are already identical, so stopping after a bounded number of rounds is safe.
void GrammarBuilderAccess::merge_equivalent_states(CompiledGrammar& g) {
  for (int round = 0; round < 32; ++round) {
    const int32_t n = g.num_states();
    std::unordered_map<std::string, int32_t> classes;
    std::vector<int32_t> cls(n);
    std::vector<int32_t> first;  // representative of each class
    std::string key;
    for (int32_t s = 0; s < n; ++s) {
      key.assign(1, static_cast<char>(g.accepting_[s]));
      for (const auto& e : g.byte_edges(s)) {
        key.append({static_cast<char>(e.lo), static_cast<char>(e.hi)});
        key.append(reinterpret_cast<const char*>(&e.target), sizeof e.target);
      }
      key.push_back('|');
      for (const auto& c : g.call_edges(s)) {
        key.append(reinterpret_cast<const char*>(&c.callee_start), sizeof c.callee_start);
        key.append(reinterpret_cast<const char*>(&c.ret), sizeof c.ret);
      }
      auto [it, added] = classes.emplace(key, static_cast<int32_t>(first.size()));
      if (added) first.push_back(s);
      cls[s] = it->second;
    }
    if (static_cast<int32_t>(first.size()) == n) return;
    CompiledGrammar m;
    m.rule_names_ = std::move(g.rule_names_);
    m.start_ = cls[g.start_];
    m.byte_begin_.push_back(0);
    m.call_begin_.push_back(0);
    for (int32_t s : first) {
      m.accepting_.push_back(g.accepting_[s]);
      m.state_rule_.push_back(g.state_rule_[s]);
      std::vector<CompiledGrammar::ByteEdge> be;
      for (const auto& e : g.byte_edges(s)) be.push_back({e.lo, e.hi, cls[e.target]});
      std::sort(be.begin(), be.end(), [](const auto& a, const auto& b) {
        return std::tie(a.lo, a.hi, a.target) < std::tie(b.lo, b.hi, b.target);
      });
      be.erase(std::unique(
                   be.begin(), be.end(),
                   [](const auto& a, const auto& b) { return a.lo == b.lo && a.hi == b.hi && a.target == b.target; }),
               be.end());
      m.byte_edges_.insert(m.byte_edges_.end(), be.begin(), be.end());
      m.byte_begin_.push_back(static_cast<uint32_t>(m.byte_edges_.size()));
      std::vector<std::pair<int32_t, int32_t>> ce;
      for (const auto& c : g.call_edges(s)) ce.push_back({cls[c.callee_start], cls[c.ret]});
      std::sort(ce.begin(), ce.end());
      ce.erase(std::unique(ce.begin(), ce.end()), ce.end());
      for (auto [callee, ret] : ce) m.call_edges_.push_back({callee, ret});
      m.call_begin_.push_back(static_cast<uint32_t>(m.call_edges_.size()));
    }
    g = std::move(m);
  }
}

std::shared_ptr<const CompiledGrammar> CompiledGrammar::compile(const Grammar& grammar, const GrammarLimits& limits) {
  return GrammarBuilderAccess::compile(grammar, limits);
}

// ---------------------------------------------------------------------------------------------
// Parser

namespace {
// A step that visits more frames than this is a pathological (hugely ambiguous) grammar.
constexpr size_t kMaxStepWork = 1 << 20;
}  // namespace

Parser::Parser(std::shared_ptr<const CompiledGrammar> grammar) : grammar_(std::move(grammar)) {
  bool complete = false, escaped = false;
  std::vector<int32_t> tops;
  expand(grammar_->start_state(), kRootParent, tops, &complete, &escaped);
  set_state(std::move(tops), complete);
}

namespace {
constexpr uint64_t kFrameKey = 1ull << 63;  // frames and closures share the table
uint64_t pack(int32_t state, int32_t parent) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(state)) << 32) | static_cast<uint32_t>(parent);
}
}  // namespace

void Parser::new_step() {
  step_complete_ = step_escaped_ = false;
  step_work_ = 0;
  small_n_ = 0;
  if (!hashed_) return;
  hashed_ = false;
  if (++gen_ == 0) {  // wrapped: really clear
    std::fill(table_.begin(), table_.end(), Slot{});
    gen_ = 1;
  }
  used_ = 0;
}

std::pair<Parser::Slot*, bool> Parser::slot(uint64_t key) {
  if (!hashed_) {
    for (size_t i = 0; i < small_n_; ++i)
      if (small_[i].key == key) return {&small_[i], false};
    if (small_n_ < kSmall) {
      small_[small_n_] = {key, -1, 0};
      return {&small_[small_n_++], true};
    }
    hashed_ = true;  // overflow: move to the hash table for the rest of the step
    for (size_t i = 0; i < small_n_; ++i) {
      bool added = false;
      table_slot(small_[i].key, &added)->id = small_[i].id;
    }
  }
  bool added = false;
  Slot* s = table_slot(key, &added);
  return {s, added};
}

Parser::Slot* Parser::table_slot(uint64_t key, bool* added) {
  if (2 * (used_ + 1) > table_.size()) {  // grow, keeping this step's entries
    std::vector<Slot> old(table_.size() * 2);
    old.swap(table_);
    used_ = 0;
    for (const auto& s : old) {
      bool a = false;
      if (s.gen == gen_) table_slot(s.key, &a)->id = s.id;
    }
  }
  const size_t mask = table_.size() - 1;
  for (size_t i = (key * 0x9E3779B97F4A7C15ull) >> 20 & mask;; i = (i + 1) & mask) {
    Slot& s = table_[i];
    if (s.gen != gen_) {
      s = {key, -1, gen_};
      ++used_;
      *added = true;
      return &s;
    }
    if (s.key == key) {
      *added = false;
      return &s;
    }
  }
}

int32_t Parser::frame(int32_t state, int32_t parent) {
  auto [s, added] = slot(kFrameKey | pack(state, parent));
  if (added) {
    nodes_.push_back({state, parent});
    s->id = static_cast<int32_t>(nodes_.size() - 1);
  }
  return s->id;
}

void Parser::closure(int32_t state, int32_t parent, int32_t reuse, std::vector<int32_t>& out) {
  TESSERA_CHECK(++step_work_ < kMaxStepWork, "constrained decoding: grammar too ambiguous (over {} parse frames)",
                kMaxStepWork);
  if (!slot(pack(state, parent)).second) return;
  if (reuse >= 0) {  // an existing frame (popped to): later frames with the same content reuse it
    auto [s, added] = slot(kFrameKey | pack(state, parent));
    if (added) s->id = reuse;
  }
  const auto& g = *grammar_;
  if (!g.byte_edges(state).empty()) out.push_back(frame(state, parent));
  for (const auto& c : g.call_edges(state)) closure(c.callee_start, frame(c.ret, parent), -1, out);
  if (g.accepting(state)) {
    if (parent == kRootParent) {
      step_complete_ = true;
    } else if (parent == kUnknownParent) {
      step_escaped_ = true;
    } else {
      const Node p = nodes_[parent];
      closure(p.state, p.parent, parent, out);
    }
  }
}

void Parser::expand(int32_t state, int32_t parent, std::vector<int32_t>& out, bool* complete, bool* escaped) {
  out.clear();
  new_step();
  closure(state, parent, -1, out);
  *complete = step_complete_;
  *escaped = step_escaped_;
}

void Parser::step(std::span<const int32_t> tops, uint8_t byte, std::vector<int32_t>& out, bool* complete,
                  bool* escaped) {
  out.clear();
  new_step();
  const auto& g = *grammar_;
  for (int32_t t : tops) {
    const Node n = nodes_[t];
    for (const auto& e : g.byte_edges(n.state)) {
      if (byte < e.lo) break;  // edges are sorted by lo
      if (byte <= e.hi) closure(e.target, n.parent, -1, out);
    }
  }
  *complete = step_complete_;
  *escaped = step_escaped_;
}

bool Parser::accept_byte(uint8_t byte) {
  bool complete = false, escaped = false;
  const size_t mark = nodes_.size();
  step(tops_, byte, scratch_, &complete, &escaped);
  if (scratch_.empty() && !complete) {
    nodes_.resize(mark);
    return false;
  }
  tops_.swap(scratch_);
  complete_ = complete;
  return true;
}

bool Parser::accept_bytes(std::string_view bytes) {
  const Checkpoint c = checkpoint();
  for (unsigned char b : bytes) {
    if (!accept_byte(b)) {
      restore(c);
      return false;
    }
  }
  return true;
}

void Parser::restore(const Checkpoint& c) {
  nodes_.resize(c.arena_size);
  tops_ = c.tops;
  complete_ = c.complete;
}

}  // namespace tessera::text::constrain
