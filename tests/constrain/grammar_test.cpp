// Grammar builder + byte-level Parser on small hand-written grammars: accepted and rejected inputs.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "text/constrain/grammar.h"

namespace tessera::text::constrain {
namespace {

// Index of the first byte the parser refuses, or -1 when all are taken.
int first_rejected(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  Parser p(g);
  for (size_t i = 0; i < text.size(); ++i)
    if (!p.accept_byte(static_cast<uint8_t>(text[i]))) return static_cast<int>(i);
  return -1;
}

bool accepts(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  Parser p(g);
  return p.accept_bytes(text) && p.is_complete();
}

// expr ::= term ("+" term)* ; term ::= [0-9]+ | "(" expr ")"
std::shared_ptr<const CompiledGrammar> arithmetic() {
  Grammar g;
  const auto expr = g.add_rule("expr");
  const auto term = g.add_rule("term");
  g.define(expr, g.seq({g.ref(term), g.star(g.seq({g.literal("+"), g.ref(term)}))}));
  g.define(term, g.choice({g.repeat(g.bytes({{'0', '9'}}), 1, std::nullopt),
                           g.seq({g.literal("("), g.ref(expr), g.literal(")")})}));
  g.set_root(expr);
  return CompiledGrammar::compile(g);
}

TEST(Grammar, RecursiveArithmetic) {
  const auto g = arithmetic();
  EXPECT_TRUE(accepts(g, "1"));
  EXPECT_TRUE(accepts(g, "12+3"));
  EXPECT_TRUE(accepts(g, "(1+(2+33))+4"));
  EXPECT_FALSE(accepts(g, "(1+2"));  // prefix, not complete
  EXPECT_EQ(first_rejected(g, "(1+2"), -1);
  EXPECT_EQ(first_rejected(g, "1++2"), 2);
  EXPECT_EQ(first_rejected(g, "(1))"), 3);
  EXPECT_EQ(first_rejected(g, "+1"), 0);
  EXPECT_FALSE(accepts(g, ""));
}

TEST(Grammar, CompleteAndContinue) {
  const auto g = arithmetic();
  Parser p(g);
  EXPECT_FALSE(p.is_complete());
  EXPECT_TRUE(p.accept_byte('7'));
  EXPECT_TRUE(p.is_complete());
  EXPECT_TRUE(p.can_continue());
  EXPECT_TRUE(p.accept_byte(')') == false);
  EXPECT_TRUE(p.is_complete());  // a refused byte leaves the state unchanged
}

TEST(Grammar, CheckpointRestore) {
  const auto g = arithmetic();
  Parser p(g);
  ASSERT_TRUE(p.accept_bytes("(1+"));
  const auto c = p.checkpoint();
  ASSERT_TRUE(p.accept_bytes("2)"));
  EXPECT_TRUE(p.is_complete());
  p.restore(c);
  EXPECT_FALSE(p.is_complete());
  EXPECT_FALSE(p.accept_byte(')'));
  EXPECT_TRUE(p.accept_bytes("(3))"));
  EXPECT_TRUE(p.is_complete());
  EXPECT_FALSE(p.accept_bytes("+x"));  // all or nothing
  EXPECT_TRUE(p.accept_bytes("+5"));
  EXPECT_TRUE(p.is_complete());
}

TEST(Grammar, BoundedRepetitionAndOptional) {
  Grammar g;
  const auto r = g.add_rule("r");
  // "a"{2,4} "b"?
  g.define(r, g.seq({g.repeat(g.literal("a"), 2, 4), g.optional(g.literal("b"))}));
  const auto c = CompiledGrammar::compile(g);
  EXPECT_FALSE(accepts(c, "a"));
  EXPECT_TRUE(accepts(c, "aa"));
  EXPECT_TRUE(accepts(c, "aaab"));
  EXPECT_TRUE(accepts(c, "aaaa"));
  EXPECT_EQ(first_rejected(c, "aaaaa"), 4);
  EXPECT_EQ(first_rejected(c, "abb"), 1);
  EXPECT_EQ(first_rejected(c, "aabb"), 3);
}

TEST(Grammar, Utf8CodePointClasses) {
  Grammar g;
  const auto r = g.add_rule("r");
  // Any code point except 'x' and U+00E9, one or more.
  g.define(r, g.repeat(g.chars({{'x', 'x'}, {0xE9, 0xE9}}, /*negate=*/true), 1, std::nullopt));
  const auto c = CompiledGrammar::compile(g);
  EXPECT_TRUE(accepts(c, "abc"));
  EXPECT_TRUE(accepts(c, "\xE4\xBD\xA0\xE5\xA5\xBD"));  // 你好
  EXPECT_TRUE(accepts(c, "\xF0\x9F\x98\x80"));          // U+1F600
  EXPECT_TRUE(accepts(c, "\xC3\xA8"));                  // U+00E8
  EXPECT_EQ(first_rejected(c, "ax"), 1);
  EXPECT_EQ(first_rejected(c, "a\xC3\xA9"), 2);         // U+00E9 refused at its second byte
  EXPECT_EQ(first_rejected(c, "\xC0\xAF"), 0);          // overlong
  EXPECT_EQ(first_rejected(c, "\xED\xA0\x80"), 1);      // surrogate U+D800
  EXPECT_EQ(first_rejected(c, "\xF4\x90\x80\x80"), 1);  // above U+10FFFF
  EXPECT_EQ(first_rejected(c, "\x80"), 0);              // lone continuation byte
  EXPECT_FALSE(accepts(c, "\xE4\xBD"));                 // truncated
}

TEST(Grammar, AmbiguousChoicesRunInParallel) {
  Grammar g;
  const auto r = g.add_rule("r");
  const auto a = g.add_rule("a");
  const auto b = g.add_rule("b");
  g.define(a, g.literal("abc"));
  g.define(b, g.literal("abd"));
  g.define(r, g.seq({g.choice({g.ref(a), g.ref(b), g.literal("ab")}), g.literal("!")}));
  g.set_root(r);
  const auto c = CompiledGrammar::compile(g);
  EXPECT_TRUE(accepts(c, "abc!"));
  EXPECT_TRUE(accepts(c, "abd!"));
  EXPECT_TRUE(accepts(c, "ab!"));
  EXPECT_EQ(first_rejected(c, "abe"), 2);
}

TEST(Grammar, NullableLoopsTerminate) {
  Grammar g;
  const auto r = g.add_rule("r");
  const auto e = g.add_rule("e");
  g.define(e, g.optional(g.literal("x")));
  g.define(r, g.seq({g.star(g.ref(e)), g.literal(";")}));
  g.set_root(r);
  const auto c = CompiledGrammar::compile(g);
  EXPECT_TRUE(accepts(c, ";"));
  EXPECT_TRUE(accepts(c, "xxx;"));
  EXPECT_EQ(first_rejected(c, "x;x"), 2);
}

// Branches that can never complete are removed, so that every accepted prefix can be completed.
TEST(Grammar, DeadEndsAreTrimmed) {
  Grammar g;
  const auto r = g.add_rule("r");
  const auto endless = g.add_rule("endless");
  g.define(endless, g.seq({g.literal("x"), g.ref(endless)}));  // no finite text
  g.define(r,
           g.choice({g.seq({g.literal("a"), g.ref(endless)}), g.literal("b"), g.seq({g.literal("c"), g.bytes({})})}));
  g.set_root(r);
  const auto c = CompiledGrammar::compile(g);
  EXPECT_TRUE(accepts(c, "b"));
  EXPECT_EQ(first_rejected(c, "ax"), 0);
  EXPECT_EQ(first_rejected(c, "c"), 0);
  Grammar only;
  const auto e = only.add_rule("e");
  only.define(e, only.seq({only.literal("x"), only.ref(e)}));
  try {
    CompiledGrammar::compile(only);
    FAIL() << "grammar without finite text accepted";
  } catch (const core::Error& err) {
    EXPECT_NE(std::string(err.what()).find("no finite text matches the root rule 'e'"), std::string::npos)
        << err.what();
  }
}

TEST(Grammar, Errors) {
  {
    Grammar g;
    const auto r = g.add_rule("list");
    g.define(r, g.choice({g.seq({g.ref(r), g.literal("a")}), g.literal("a")}));
    try {
      CompiledGrammar::compile(g);
      FAIL() << "left recursion accepted";
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("rule 'list' is left-recursive"), std::string::npos) << e.what();
    }
  }
  {
    Grammar g;
    g.add_rule("never_defined");
    EXPECT_THROW(CompiledGrammar::compile(g), core::Error);
  }
  {
    Grammar g;
    const auto r = g.add_rule("big");
    g.define(r, g.repeat(g.repeat(g.literal("ab"), 1000, 1000), 1000, 1000));
    try {
      CompiledGrammar::compile(g);
      FAIL() << "huge grammar accepted";
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("too large"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tessera::text::constrain
