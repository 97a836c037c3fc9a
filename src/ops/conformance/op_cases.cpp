#include "ops/conformance/op_cases.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"
#include "io/model_config.h"

namespace tessera::ops::conformance {

namespace {

using core::DType;
using core::Tensor;
using ops::Ops;

constexpr const char* kTiny = "tiny";
constexpr const char* kRagged = "ragged";

// FNV-1a: a seed from the case's id that is the same on every platform and build.
uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

// splitmix64: fast enough to fill the real shapes' weights (hundreds of millions of values) and
// defined by its code alone, so the inputs do not depend on the standard library's distributions.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) * 0x1p-24f; }  // [0, 1)
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
  // bf16-representable values in [-scale, scale): a bf16 GEMM input then loses nothing, so the only
  // differences left between backends are summation orders and the documented roundings.
  float bf16_value(float scale) { return core::round_to_bf16((2.0f * uniform() - 1.0f) * scale); }
  std::vector<float> values(int64_t n, float scale = 1.0f) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = bf16_value(scale);
    return v;
  }
  template <class T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[static_cast<size_t>(below(static_cast<int64_t>(i)))]);
  }

 private:
  uint64_t s_;
};

// A weight in host memory in a checkpoint format: the CPU backend reads it in place, a device
// backend gets it through upload_linear.
struct HostLinear {
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> bytes, scale_bytes;
  std::vector<float> scale_f32;
  ops::LinearWeight w;
};
using HostLinearPtr = std::shared_ptr<const HostLinear>;

HostLinearPtr bf16_linear(Rng& rng, int64_t out, int64_t in, float scale = 0.1f) {
  auto h = std::make_shared<HostLinear>();
  h->bf16.resize(static_cast<size_t>(out * in));
  for (auto& b : h->bf16) b = core::f32_to_bf16(rng.bf16_value(scale));
  h->w.name = "conformance";
  h->w.out = out;
  h->w.in = in;
  h->w.weight = Tensor::view(DType::kBF16, {out, in}, h->bf16.data());
  return h;
}

// An e4m3 byte that is a finite number (0x7f / 0xff are NaN), of either sign.
uint8_t finite_e4m3(Rng& rng, bool positive = false) {
  uint8_t b = static_cast<uint8_t>(rng.next());
  if (positive) b &= 0x7f;
  if ((b & 0x7f) == 0x7f) b ^= 0x01;
  return b;
}

// DeepSeek's FP8 block format: e4m3 weights, one fp32 scale per 128 x 128 block.
HostLinearPtr fp8_block_linear(Rng& rng, int64_t out, int64_t in) {
  auto h = std::make_shared<HostLinear>();
  h->bytes.resize(static_cast<size_t>(out * in));
  for (auto& b : h->bytes) b = finite_e4m3(rng);
  const int64_t sr = (out + 127) / 128, sc = (in + 127) / 128;
  h->scale_f32.resize(static_cast<size_t>(sr * sc));
  for (auto& s : h->scale_f32) s = 0.002f + 0.004f * rng.uniform();
  h->w.format = ops::LinearWeight::Format::kFp8Block;
  h->w.name = "conformance-fp8";
  h->w.out = out;
  h->w.in = in;
  h->w.weight = Tensor::view(DType::kF8E4M3, {out, in}, h->bytes.data());
  h->w.scale = Tensor::view(DType::kF32, {sr, sc}, h->scale_f32.data());
  return h;
}

// ModelOpt's NVFP4: two e2m1 codes a byte, an e4m3 scale per 16 elements and a global scale.
HostLinearPtr nvfp4_linear(Rng& rng, int64_t out, int64_t in) {
  auto h = std::make_shared<HostLinear>();
  h->bytes.resize(static_cast<size_t>(out * in / 2));
  for (auto& b : h->bytes) b = static_cast<uint8_t>(rng.next());
  h->scale_bytes.resize(static_cast<size_t>(out * in / 16));
  for (auto& b : h->scale_bytes) b = finite_e4m3(rng, /*positive=*/true);
  h->w.format = ops::LinearWeight::Format::kNvfp4;
  h->w.name = "conformance-nvfp4";
  h->w.out = out;
  h->w.in = in;
  h->w.weight = Tensor::view(DType::kU8, {out, in / 2}, h->bytes.data());
  h->w.scale = Tensor::view(DType::kF8E4M3, {out, in / 16}, h->scale_bytes.data());
  h->w.global_scale = 0.0123f;
  h->w.input_scale = 1.0f;
  return h;
}

// The fewest device bytes a linear of T tokens moves: the weight as the host holds it (a device
// backend keeps checkpoint formats as stored), fp32 x read once (`in` = 0: already counted) and fp32
// out written once.
double linear_bytes(const HostLinear& h, int64_t T, int64_t in, int64_t out) {
  const double weight = 2.0 * static_cast<double>(h.bf16.size()) + static_cast<double>(h.bytes.size()) +
                        static_cast<double>(h.scale_bytes.size()) + 4.0 * static_cast<double>(h.scale_f32.size());
  return weight + 4.0 * static_cast<double>(T) * static_cast<double>(in + out);
}

// A routed expert (or the shared one) in host memory.
struct HostExpert {
  HostLinearPtr gate, up, down;
};
// `format`: "bf16", "fp8-block" or "nvfp4" (the checkpoint formats of routed experts).
HostExpert host_expert(Rng& rng, int64_t hidden, int64_t inter, const std::string& format = "bf16") {
  auto make = [&](int64_t out, int64_t in) {
    return format == "nvfp4"       ? nvfp4_linear(rng, out, in)
           : format == "fp8-block" ? fp8_block_linear(rng, out, in)
                                   : bf16_linear(rng, out, in);
  };
  HostExpert e;
  e.gate = make(inter, hidden);
  e.up = make(inter, hidden);
  e.down = make(hidden, inter);
  return e;
}
ops::ExpertWeights upload_expert(Ops& o, const HostExpert& e) {
  return {o.upload_linear(e.gate->w), o.upload_linear(e.up->w), o.upload_linear(e.down->w)};
}

// What one setup works with: the backend and the case's random stream.
struct Ctx {
  const Target& target;
  Rng rng;
  Ops& o() const { return *target.ops; }
  Tensor f32(core::Shape s, const std::vector<float>& v) { return o().from_host_f32(std::move(s), v.data()); }
  Tensor rand(core::Shape s, float scale = 1.0f) {
    const auto v = rng.values(core::shape_numel(s), scale);
    return f32(std::move(s), v);
  }
  Tensor i32(core::Shape s, const std::vector<int32_t>& v) { return o().from_host_i32(std::move(s), v.data()); }
  // A vector of `n` values as a checkpoint holds it (bf16), handed over by upload_vector.
  Tensor vector(int64_t n, float scale = 1.0f, float offset = 0.0f) {
    auto bits = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(n));
    for (auto& b : *bits) b = core::f32_to_bf16(offset + rng.bf16_value(scale));
    keep.push_back(bits);
    return o().upload_vector(Tensor::view(DType::kBF16, {n}, bits->data()));
  }
  // Rotary tables of `T` tokens at positions `pos` (cos/sin of real angles, as the model makes them).
  ops::RopeTables rope(const std::vector<int64_t>& pos, int64_t rope_dim) {
    const int64_t half = rope_dim / 2, T = static_cast<int64_t>(pos.size());
    std::vector<float> c(static_cast<size_t>(T * half)), s(c.size());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(pos[t]) * std::pow(10000.0, -2.0 * i / rope_dim);
        c[t * half + i] = static_cast<float>(std::cos(angle));
        s[t * half + i] = static_cast<float>(std::sin(angle));
      }
    return {f32({T, half}, c), f32({T, half}, s)};
  }
  // Host memory a bound case's tensors view (CPU backend) and must outlive it.
  std::vector<std::shared_ptr<const void>> keep;
};

CaseOutput f32_out(Ops& o, std::string name, const Tensor& t, double tol = -1) {
  return {std::move(name), o.to_host_f32(t), tol};
}
CaseOutput i32_out(Ops& o, std::string name, const Tensor& t) {
  const auto v = o.to_host_i32(t);
  return {std::move(name), std::vector<float>(v.begin(), v.end()), 0.0};
}
CaseOutput flag(std::string name, bool ok) { return {std::move(name), {ok ? 1.0f : 0.0f}, 0.0}; }

// A KV cache's elements as fp32 (fp8: q · scale), read through the target's raw bytes.
std::vector<float> cache_values(const Target& t, const ops::KvLayerView& kv) {
  const std::vector<uint8_t> b = t.raw_bytes(kv.pages);
  const size_t n = static_cast<size_t>(kv.pages.numel());
  std::vector<float> v(n);
  switch (kv.pages.dtype()) {
    case DType::kF32:
      std::memcpy(v.data(), b.data(), n * 4);
      break;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, b.data() + 2 * i, 2);
        v[i] = core::bf16_to_f32(bits);
      }
      break;
    case DType::kU8:
      for (size_t i = 0; i < n; ++i) v[i] = core::fp8_e4m3_to_f32(b[i]) * kv.scale;
      break;
    default:
      core::fail("conformance: KV pages of dtype {}", core::dtype_name(kv.pages.dtype()));
  }
  return v;
}

// --- Paged steps: sequences with cached prefixes over pages handed out in a shuffled order.

struct Seq {
  int64_t cached, fresh;
};
std::string seqs_name(const std::vector<Seq>& seqs) {
  if (seqs.size() > 8)
    return fmt::format("{} seqs {}+{} .. {}+{}", seqs.size(), seqs.front().cached, seqs.front().fresh,
                       seqs.back().cached, seqs.back().fresh);
  std::string s;
  for (const auto& q : seqs) s += fmt::format("{}{}+{}", s.empty() ? "" : ",", q.cached, q.fresh);
  return s;
}

struct PagedStep {
  int64_t page = 0, entry = 0, pages = 0, T = 0;
  std::vector<Seq> seqs;
  std::vector<std::vector<int32_t>> tables;
  std::vector<ops::AttentionSeq> step;       // spans into `tables`
  std::vector<std::vector<float>> prefixes;  // each sequence's cached latents
  std::vector<int64_t> positions;            // of the step's tokens
};
std::shared_ptr<PagedStep> paged_step(Rng& rng, const std::vector<Seq>& seqs, int64_t page, int64_t entry) {
  auto p = std::make_shared<PagedStep>();
  p->page = page;
  p->entry = entry;
  p->seqs = seqs;
  for (const auto& s : seqs) p->pages += (s.cached + s.fresh + page - 1) / page;
  std::vector<int32_t> order(static_cast<size_t>(p->pages));
  std::iota(order.begin(), order.end(), 0);
  rng.shuffle(order);
  size_t next = 0;
  for (const auto& s : seqs) {
    std::vector<int32_t> t;
    for (int64_t i = 0; i < (s.cached + s.fresh + page - 1) / page; ++i) t.push_back(order[next++]);
    p->tables.push_back(std::move(t));
    p->prefixes.push_back(rng.values(s.cached * entry));
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    p->step.push_back({p->T, seqs[i].fresh, seqs[i].cached, p->tables[i]});
    for (int64_t j = 0; j < seqs[i].fresh; ++j) p->positions.push_back(seqs[i].cached + j);
    p->T += seqs[i].fresh;
  }
  return p;
}

// A cache for the step on the target (its native element type, or fp8 with `scale`) holding every
// sequence's cached prefix (written with kv_cache_write, which its own cases check).
ops::KvLayerView make_cache(Ctx& c, const PagedStep& p, bool fp8, float scale) {
  ops::KvLayerView kv{
      c.o().empty_kv_pages({p.pages, p.page, p.entry}, fp8 ? core::KvCacheDtype::kFp8E4M3 : c.o().default_kv_dtype()),
      p.page, fp8 ? scale : 1.0f};
  for (size_t i = 0; i < p.seqs.size(); ++i) {
    if (p.seqs[i].cached == 0) continue;
    const ops::AttentionSeq a{0, p.seqs[i].cached, 0, p.tables[i]};
    c.o().kv_cache_write(kv, c.f32({p.seqs[i].cached, p.entry}, p.prefixes[i]), std::span(&a, 1));
  }
  return kv;
}

// --- The real per-layer shapes.

struct ModelShape {
  const char* family;
  int64_t hidden, heads, q_lora, kv_lora, rope, nope, v;
  int64_t experts, inter, top_k, groups, top_groups, shared, vocab, dense_inter;
  float scaling;
};
// Kimi-K2.5 (text model of KimiK25ForConditionalGeneration) and DeepSeek-V3, from their configs.
constexpr ModelShape kKimi{"kimi-k2.5", 7168, 64, 1536, 512, 64,     128,   128,   384,
                           2048,        8,    1,  1,    1,   163840, 18432, 2.827f};
constexpr ModelShape kDsv3{"deepseek-v3", 7168, 128, 1536, 512, 64,     128,   128, 256,
                           2048,          8,    8,   4,    1,   129280, 18432, 2.5f};
// Routed experts of the real shapes share this many distinct weight sets (expert e uses set
// e % kDistinctExperts): the routing, the expert count and every width stay real while the weights
// take 8 x 88 MB instead of 384 x 88 MB (34 GB) of host and device memory.
constexpr int64_t kDistinctExperts = 8;

io::ModelConfig model_config(const ModelShape& m) {
  io::ModelConfig c;
  c.architecture = "DeepseekV3ForCausalLM";
  c.model_type = "deepseek_v3";
  c.vocab_size = m.vocab;
  c.hidden_size = m.hidden;
  c.intermediate_size = m.dense_inter;
  c.moe_intermediate_size = m.inter;
  c.num_hidden_layers = 61;
  c.num_attention_heads = m.heads;
  c.q_lora_rank = m.q_lora;
  c.kv_lora_rank = m.kv_lora;
  c.qk_nope_head_dim = m.nope;
  c.qk_rope_head_dim = m.rope;
  c.v_head_dim = m.v;
  c.n_routed_experts = m.experts;
  c.n_shared_experts = m.shared;
  c.num_experts_per_tok = m.top_k;
  c.n_group = m.groups;
  c.topk_group = m.top_groups;
  c.first_k_dense_replace = 3;
  c.routed_scaling_factor = m.scaling;
  c.max_position_embeddings = 163840;
  return c;
}

// --- The table.

class Table {
 public:
  using Setup = std::function<BoundCase(Ctx&)>;
  explicit Table(std::vector<std::string> families) : families_(std::move(families)) {}

  bool wants(const std::string& family) const {
    return families_.empty() || std::find(families_.begin(), families_.end(), family) != families_.end();
  }
  OpCase& add(std::string op, std::string family, std::string shape, double tol, Setup f) {
    OpCase c;
    c.op = std::move(op);
    c.family = std::move(family);
    c.shape_name = std::move(shape);
    c.max_rel_rms = tol;
    c.seed = fnv1a(c.id());
    c.setup = [seed = c.seed, f = std::move(f)](const Target& t) {
      Ctx ctx{t, Rng(seed), {}};
      BoundCase b = f(ctx);
      // The host memory the inputs view lives as long as the bound case.
      auto keep = std::make_shared<std::vector<std::shared_ptr<const void>>>(std::move(ctx.keep));
      b.run = [run = std::move(b.run), keep] { run(); };
      return b;
    };
    if (!wants(c.family)) {
      scratch_ = std::move(c);
      return scratch_;
    }
    cases.push_back(std::move(c));
    return cases.back();
  }

  std::vector<OpCase> cases;

 private:
  std::vector<std::string> families_;
  OpCase scratch_;  // a case of a family not asked for, built and dropped (builders need no filter)
};

// --- Data movement and backend queries.

void add_backend_queries(Table& tb) {
  tb.add("name", kTiny, "backend name", 0, [](Ctx& c) {
    auto s = std::make_shared<std::string>();
    Ops* o = &c.o();
    return BoundCase{[s, o] { *s = o->name(); }, [s] { return std::vector{flag("non-empty", !s->empty())}; }};
  });
  tb.add("device_memory", kTiny, "after a 1 MiB tensor", 0, [](Ctx& c) {
    struct S {
      Tensor held;
      std::optional<Ops::DeviceMemory> m;
    };
    auto s = std::make_shared<S>();
    Ops* o = &c.o();
    s->held = o->empty({256, 1024});
    // nullopt (host memory) or a device's free bytes and what the backend holds (at least the tensor).
    return BoundCase{
        [s, o] { s->m = o->device_memory(); },
        [s] { return std::vector{flag("contract", !s->m || (s->m->free_bytes > 0 && s->m->held_bytes >= 1u << 20))}; }};
  });
  tb.add("uploads_copy_weights", kTiny, "a copying backend is a device backend", 0, [](Ctx& c) {
    auto copies = std::make_shared<bool>();
    Ops* o = &c.o();
    // The staged loader hands uploads views valid only during the call: only a backend that keeps
    // its own copy (on a device) may say it copies; the CPU reference keeps the mapped views.
    return BoundCase{[copies, o] { *copies = o->uploads_copy_weights(); },
                     [copies, o] { return std::vector{flag("contract", *copies == o->device_memory().has_value())}; }};
  });
  tb.add("staging_host_buffer", kTiny, "4 MiB, written and read back", 0, [](Ctx& c) {
    auto buf = std::make_shared<std::shared_ptr<void>>();
    Ops* o = &c.o();
    constexpr size_t kBytes = size_t{4} << 20;
    return BoundCase{[buf, o] { *buf = o->staging_host_buffer(kBytes); },
                     [buf] {
                       bool ok = *buf != nullptr;
                       if (ok) {
                         auto* p = static_cast<uint8_t*>(buf->get());
                         for (size_t i = 0; i < kBytes; i += 4093) p[i] = static_cast<uint8_t>(i * 7);
                         for (size_t i = 0; i < kBytes; i += 4093) ok &= p[i] == static_cast<uint8_t>(i * 7);
                       }
                       return std::vector{flag("writable host memory", ok)};
                     }};
  });
  auto plan_case = [&](const char* family, io::ModelConfig cfg, const std::string& shape) {
    tb.add("plan", family, shape, 0, [cfg](Ctx& c) {
      struct S {
        ops::BackendPlan p;
        bool has_memory = false;
      };
      auto s = std::make_shared<S>();
      Ops* o = &c.o();
      return BoundCase{
          [s, o, cfg] { s->p = o->plan(cfg, o->default_kv_dtype()); },
          [s, o, cfg] {
            const auto& k = s->p.kernels;
            const uint64_t matrices = cfg.parameter_count() - cfg.vector_parameter_count();
            return std::vector{
                flag("every op has a kernel that runs",
                     !k.empty() && std::all_of(k.begin(), k.end(), [](const auto& r) { return r.available; })),
                flag("device named", !s->p.device.empty()),
                flag("free bytes iff device memory", s->p.free_bytes.has_value() == o->device_memory().has_value()),
                flag("weights mapped (0) or at least 2 bytes a matrix element",
                     s->p.weight_bytes == 0 || s->p.weight_bytes >= 2 * matrices)};
          }};
    });
  };
  if (tb.wants(kTiny)) {
    io::ModelConfig tiny = model_config(kKimi);
    tiny.vocab_size = 1000, tiny.hidden_size = 256, tiny.intermediate_size = 512, tiny.moe_intermediate_size = 64;
    tiny.num_hidden_layers = 2, tiny.num_attention_heads = 8, tiny.q_lora_rank = 64, tiny.kv_lora_rank = 64;
    tiny.qk_nope_head_dim = 32, tiny.qk_rope_head_dim = 16, tiny.v_head_dim = 32, tiny.n_routed_experts = 16;
    tiny.num_experts_per_tok = 4, tiny.first_k_dense_replace = 1;
    plan_case(kTiny, tiny, "8 heads, latent 64 + 16, 16 experts of 64");
  }
  for (const ModelShape* m : {&kKimi, &kDsv3})
    if (tb.wants(m->family)) plan_case(m->family, model_config(*m), "61 layers, native KV cache");

  for (const auto& family_shape : {std::pair<const char*, core::Shape>{kTiny, {5, 7}}, {kKimi.family, {4, 7168}}}) {
    // Named copies, not a structured binding: clang before 16 (the fuzz build) cannot capture one.
    const char* family = family_shape.first;
    const core::Shape shape = family_shape.second;
    const std::string sn = core::shape_str(shape);
    tb.add("empty", family, sn, 0, [shape](Ctx& c) {
      auto t = std::make_shared<Tensor>();
      Ops* o = &c.o();
      return BoundCase{[t, o, shape] { *t = o->empty(shape); },
                       [t, o, shape] {
                         return std::vector{flag("shape", t->shape() == shape), flag("F32", t->dtype() == DType::kF32),
                                            flag("to_host_f32 size", o->to_host_f32(*t).size() == size_t(t->numel()))};
                       }};
    });
    tb.add("empty_i32", family, sn, 0, [shape](Ctx& c) {
      auto t = std::make_shared<Tensor>();
      Ops* o = &c.o();
      return BoundCase{[t, o, shape] { *t = o->empty_i32(shape); },
                       [t, o, shape] {
                         return std::vector{flag("shape", t->shape() == shape), flag("I32", t->dtype() == DType::kI32),
                                            flag("to_host_i32 size", o->to_host_i32(*t).size() == size_t(t->numel()))};
                       }};
    });
    // Round trips: exact, including signed zero, subnormals and magnitudes bf16 would not keep.
    auto host_f32 = [shape](Rng& rng) {
      auto v = rng.values(core::shape_numel(shape));
      const float specials[] = {0.0f, -0.0f, 1e-40f, -3e38f, 1.0000001f, 123456.789f};
      for (size_t i = 0; i < std::size(specials) && i < v.size(); ++i) v[i] = specials[i];
      return v;
    };
    auto host_i32 = [shape](Rng& rng) {
      std::vector<int32_t> v(static_cast<size_t>(core::shape_numel(shape)));
      for (auto& x : v) x = static_cast<int32_t>(rng.below(1 << 24)) - (1 << 23);
      return v;
    };
    tb.add("from_host_f32", family, sn, 0, [shape, host_f32](Ctx& c) {
      auto v = std::make_shared<std::vector<float>>(host_f32(c.rng));
      auto t = std::make_shared<Tensor>();
      Ops* o = &c.o();
      return BoundCase{[v, t, o, shape] { *t = o->from_host_f32(shape, v->data()); },
                       [t, o] { return std::vector{f32_out(*o, "values", *t)}; }};
    });
    tb.add("to_host_f32", family, sn, 0, [shape, host_f32](Ctx& c) {
      auto h = std::make_shared<std::vector<float>>();
      const Tensor t = c.f32(shape, host_f32(c.rng));
      Ops* o = &c.o();
      return BoundCase{[h, t, o] { *h = o->to_host_f32(t); }, [h] { return std::vector{CaseOutput{"values", *h}}; }};
    });
    tb.add("from_host_i32", family, sn, 0, [shape, host_i32](Ctx& c) {
      auto v = std::make_shared<std::vector<int32_t>>(host_i32(c.rng));
      auto t = std::make_shared<Tensor>();
      Ops* o = &c.o();
      return BoundCase{[v, t, o, shape] { *t = o->from_host_i32(shape, v->data()); },
                       [t, o] { return std::vector{i32_out(*o, "values", *t)}; }};
    });
    tb.add("to_host_i32", family, sn, 0, [shape, host_i32](Ctx& c) {
      auto h = std::make_shared<std::vector<int32_t>>();
      const Tensor t = c.i32(shape, host_i32(c.rng));
      Ops* o = &c.o();
      return BoundCase{[h, t, o] { *h = o->to_host_i32(t); },
                       [h] {
                         return std::vector{CaseOutput{"values", std::vector<float>(h->begin(), h->end()), 0.0}};
                       }};
    });
    // The bytes of an fp32 tensor are its values; those of fp8 KV pages are the bytes the target's
    // own reader sees.
    tb.add("to_host_bytes", family, sn, 0, [shape, host_f32](Ctx& c) {
      auto h = std::make_shared<std::vector<uint8_t>>();
      const Tensor t = c.f32(shape, host_f32(c.rng));
      Ops* o = &c.o();
      return BoundCase{[h, t, o] { *h = o->to_host_bytes(t); },
                       [h, t] {
                         std::vector<float> v(h->size() / 4);
                         std::memcpy(v.data(), h->data(), v.size() * 4);
                         return std::vector{flag("size", h->size() == t.nbytes()), CaseOutput{"values", v, 0.0}};
                       }};
    });
  }
  tb.add("to_host_bytes", kTiny, "fp8 KV pages [2, 16, 48] after a write", 0, [](Ctx& c) {
    struct S {
      ops::KvLayerView kv;
      std::vector<uint8_t> bytes;
    };
    auto s = std::make_shared<S>();
    Ops* o = &c.o();
    s->kv.pages = o->empty_kv_pages({2, 16, 48}, core::KvCacheDtype::kFp8E4M3);
    s->kv.page_size = 16;
    s->kv.scale = 0.5f;
    const Tensor latent = c.rand({3, 48});
    static const int32_t table[] = {1};
    const ops::AttentionSeq seq{0, 3, 5, std::span<const int32_t>(table)};
    o->kv_cache_write(s->kv, latent, std::span<const ops::AttentionSeq>(&seq, 1));
    const Target* t = &c.target;
    return BoundCase{[s, o] { s->bytes = o->to_host_bytes(s->kv.pages); },
                     [s, t] {
                       return std::vector{
                           flag("the target's bytes", s->bytes == t->raw_bytes(s->kv.pages)),
                           CaseOutput{"bytes", std::vector<float>(s->bytes.begin(), s->bytes.end()), 0.0}};
                     }};
  });

  tb.add("supported_kv_dtypes", kTiny, "list", 0, [](Ctx& c) {
    auto v = std::make_shared<std::vector<core::KvCacheDtype>>();
    Ops* o = &c.o();
    auto has = [v](core::KvCacheDtype d) { return std::find(v->begin(), v->end(), d) != v->end(); };
    // Every backend so far stores fp8 e4m3 (the reference for the GPU's fp8 cache) and its default.
    return BoundCase{[v, o] { *v = o->supported_kv_dtypes(); },
                     [o, has] {
                       return std::vector{flag("fp8_e4m3", has(core::KvCacheDtype::kFp8E4M3)),
                                          flag("default listed", has(o->default_kv_dtype()))};
                     }};
  });
  tb.add("default_kv_dtype", kTiny, "makes pages", 0, [](Ctx& c) {
    auto d = std::make_shared<core::KvCacheDtype>();
    Ops* o = &c.o();
    return BoundCase{[d, o] { *d = o->default_kv_dtype(); },
                     [d, o] {
                       return std::vector{flag("pages", o->empty_kv_pages({2, 16, 48}, *d).numel() == 2 * 16 * 48)};
                     }};
  });
  for (const auto& family_shape :
       {std::pair<const char*, core::Shape>{kTiny, {3, 16, 48}}, {kKimi.family, {8, 64, 576}}})
    for (bool fp8 : {false, true}) {
      const char* family = family_shape.first;  // not a structured binding: see add_backend_queries
      const core::Shape shape = family_shape.second;
      tb.add("empty_kv_pages", family, core::shape_str(shape) + (fp8 ? " fp8" : " native"), 0, [shape, fp8](Ctx& c) {
        auto kv = std::make_shared<ops::KvLayerView>();
        Ops* o = &c.o();
        const Target* t = &c.target;
        return BoundCase{[kv, o, shape, fp8] {
                           kv->pages =
                               o->empty_kv_pages(shape, fp8 ? core::KvCacheDtype::kFp8E4M3 : o->default_kv_dtype());
                           kv->scale = fp8 ? 0.37f : 1.0f;
                         },
                         [kv, t, shape] {
                           return std::vector{flag("shape", kv->pages.shape() == shape),
                                              CaseOutput{"zeroed", cache_values(*t, *kv), 0.0}};
                         }};
      });
    }
}

// upload_linear / upload_vector / upload_table, each observed through the op that reads what it made.
void add_uploads(Table& tb) {
  struct W {
    const char* family;
    const char* format;
    int64_t out, in;
  };
  // Dense bf16 passes unchanged (1e-5: summation order); fp8 and NVFP4 are dequantized and, on a
  // bf16 backend, rounded to bf16 (~2^-9 per weight, averaged over a dot product).
  for (const W w : {W{kTiny, "bf16", 40, 64}, W{kTiny, "fp8-block", 200, 300}, W{kTiny, "nvfp4", 48, 320},
                    W{kRagged, "fp8-block", 576, 1000}, W{kKimi.family, "nvfp4", 1536, 7168},
                    W{kDsv3.family, "fp8-block", 1536, 7168}, W{kDsv3.family, "fp8-block", 32768, 512}}) {
    const std::string fmt_name = w.format;
    const double tol = fmt_name == "bf16" ? 1e-5 : 4e-3;
    tb.add("upload_linear", w.family, fmt::format("{} {}x{}, 4 tokens", w.format, w.out, w.in), tol,
           [w, fmt_name](Ctx& c) {
             struct S {
               HostLinearPtr host;
               ops::LinearWeight dev;
               Tensor x, out;
             };
             auto s = std::make_shared<S>();
             s->host = fmt_name == "bf16"    ? bf16_linear(c.rng, w.out, w.in)
                       : fmt_name == "nvfp4" ? nvfp4_linear(c.rng, w.out, w.in)
                                             : fp8_block_linear(c.rng, w.out, w.in);
             s->x = c.rand({4, w.in});
             s->out = c.o().empty({4, w.out});
             Ops* o = &c.o();
             return BoundCase{[s, o] { s->dev = o->upload_linear(s->host->w); },
                              [s, o] {
                                o->linear(s->x, s->dev, s->out);
                                return std::vector{f32_out(*o, "x·Wᵀ", s->out)};
                              }};
           });
  }
  for (const auto& family_n : {std::pair<const char*, int64_t>{kTiny, 96}, {kKimi.family, 7168}}) {
    const char* family = family_n.first;  // not a structured binding: see add_backend_queries
    const int64_t n = family_n.second;
    tb.add("upload_vector", family, fmt::format("bf16 [{}] through rms_norm", n), 1e-6, [n](Ctx& c) {
      struct S {
        std::vector<uint16_t> bits;
        Tensor vec, x, out;
      };
      auto s = std::make_shared<S>();
      s->bits.resize(static_cast<size_t>(n));
      for (auto& b : s->bits) b = core::f32_to_bf16(c.rng.bf16_value(2.0f));
      s->x = c.rand({3, n});
      s->out = c.o().empty({3, n});
      Ops* o = &c.o();
      return BoundCase{[s, o, n] { s->vec = o->upload_vector(Tensor::view(DType::kBF16, {n}, s->bits.data())); },
                       [s, o] {
                         o->rms_norm(s->x, s->vec, 1e-6f, s->out);
                         return std::vector{f32_out(*o, "norm · vector", s->out)};
                       }};
    });
  }
  for (const auto& family_v_h :
       {std::tuple<const char*, int64_t, int64_t>{kTiny, 300, 96}, {kKimi.family, 1024, 7168}}) {
    const char* family = std::get<0>(family_v_h);  // not a structured binding: see add_backend_queries
    const int64_t V = std::get<1>(family_v_h), H = std::get<2>(family_v_h);
    tb.add("upload_table", family, fmt::format("bf16 {}x{} through embedding of every row", V, H), 0, [V, H](Ctx& c) {
      struct S {
        HostLinearPtr table;
        Tensor dev, out;
        std::vector<int32_t> ids;
      };
      auto s = std::make_shared<S>();
      s->table = bf16_linear(c.rng, V, H, 1.0f);
      s->ids.resize(static_cast<size_t>(V));
      std::iota(s->ids.begin(), s->ids.end(), 0);
      c.rng.shuffle(s->ids);
      s->out = c.o().empty({V, H});
      Ops* o = &c.o();
      return BoundCase{[s, o] { s->dev = o->upload_table(s->table->w.weight); },
                       [s, o] {
                         o->embedding(s->dev, s->ids, s->out);
                         return std::vector{f32_out(*o, "rows", s->out)};
                       }};
    });
  }
}

// graphed_step and step_boundary: a decode-sized chain of ops (norm, projection, activation,
// residual) run eagerly, then three times under one key (a GPU backend records it, then replays).
void add_steps(Table& tb) {
  for (auto [family, H, I] :
       {std::tuple<const char*, int64_t, int64_t>{kTiny, 256, 512}, {kKimi.family, kKimi.hidden, kKimi.inter}}) {
    struct S {
      HostLinearPtr wg, wu, wd;
      ops::LinearWeight g, u, d;
      Tensor x, norm;
      std::vector<std::vector<float>> results;
    };
    auto make = [H = H, I = I](Ctx& c) {
      auto s = std::make_shared<S>();
      s->wg = bf16_linear(c.rng, I, H), s->wu = bf16_linear(c.rng, I, H), s->wd = bf16_linear(c.rng, H, I);
      s->g = c.o().upload_linear(s->wg->w), s->u = c.o().upload_linear(s->wu->w), s->d = c.o().upload_linear(s->wd->w);
      s->x = c.rand({1, H});
      s->norm = c.vector(H, 0.5f, 1.0f);
      return s;
    };
    // One "layer": y = x + mlp(rms_norm(x)), with a step boundary after the norm.
    auto layer = [](Ops& o, S& s, const Tensor& x, bool boundary) {
      const int64_t H = x.dim(1), I = s.g.out;
      Tensor h = o.empty({1, H}), a = o.empty({1, I}), b = o.empty({1, I}), m = o.empty({1, I}), y = o.empty({1, H});
      o.rms_norm(x, s.norm, 1e-6f, h);
      if (boundary) o.step_boundary();
      o.linear(h, s.g, a);
      o.linear(h, s.u, b);
      o.silu_mul(a, b, m);
      o.linear(m, s.d, y);
      o.add_inplace(y, x);
      return y;
    };
    const std::string shape = fmt::format("1 token, hidden {}, mlp {}", H, I);
    tb.add("graphed_step", family, shape + ", 2 layers, key 1 x3 and key -1", 1e-5, [make, layer](Ctx& c) {
      auto s = make(c);
      Ops* o = &c.o();
      return BoundCase{[s, o, layer] {
                         s->results.clear();
                         for (int64_t key : {int64_t{1}, int64_t{1}, int64_t{1}, int64_t{-1}}) {
                           const Tensor r = o->graphed_step(key, [&] {
                             const Tensor y = layer(*o, *s, s->x, true);
                             o->step_boundary();
                             return layer(*o, *s, y, true);
                           });
                           s->results.push_back(o->to_host_f32(r));  // before the next step reuses its memory
                         }
                       },
                       [s] {
                         std::vector<CaseOutput> out;
                         const char* names[] = {"first (eager or recorded)", "second (replayed)", "third (replayed)",
                                                "key -1 (eager)"};
                         for (size_t i = 0; i < s->results.size(); ++i) out.push_back({names[i], s->results[i]});
                         return out;
                       }};
    });
    tb.add("step_boundary", family, shape + ", outside a step", 1e-5, [make, layer](Ctx& c) {
      auto s = make(c);
      auto y = std::make_shared<Tensor>();
      Ops* o = &c.o();
      return BoundCase{[s, o, y, layer] {
                         o->step_boundary();
                         *y = layer(*o, *s, s->x, true);
                       },
                       [o, y] { return std::vector{f32_out(*o, "y", *y)}; }};
    });
  }
}

// --- Dense ops.

void add_embedding(Table& tb) {
  struct E {
    const char* family;
    int64_t V, H, T;
    const char* note;
  };
  for (const E e : {E{kTiny, 300, 96, 5, ""}, E{kRagged, 1000, 576, 50, ""},
                    E{kKimi.family, 2048, kKimi.hidden, 5, " (vocab reduced from 163840)"},
                    E{kDsv3.family, 2048, kDsv3.hidden, 5, " (vocab reduced from 129280)"}}) {
    tb.add("embedding", e.family, fmt::format("{}x{}{}, {} ids", e.V, e.H, e.note, e.T), 0, [e](Ctx& c) {
      struct S {
        HostLinearPtr host;
        Tensor table, out;
        std::vector<int32_t> ids;
      };
      auto s = std::make_shared<S>();
      s->host = bf16_linear(c.rng, e.V, e.H, 1.0f);
      s->table = c.o().upload_table(s->host->w.weight);
      for (int64_t t = 0; t < e.T; ++t) s->ids.push_back(static_cast<int32_t>(c.rng.below(e.V)));
      s->ids[0] = 0, s->ids[1] = static_cast<int32_t>(e.V - 1), s->ids[2] = s->ids[3];  // both ends, a repeat
      s->out = c.o().empty({e.T, e.H});
      Ops* o = &c.o();
      return BoundCase{[s, o] { o->embedding(s->table, s->ids, s->out); },
                       [s, o] { return std::vector{f32_out(*o, "rows", s->out)}; }};
    });
  }
}

void add_norms(Table& tb) {
  struct N {
    const char* family;
    int64_t rows, width, begin, d;
    bool in_place;
    const char* what;
  };
  // Dense outputs and column ranges normalised in place (the latent norm over c_kv of [c_kv | k_pe]).
  for (const N n :
       {N{kTiny, 7, 64, 0, 64, false, ""}, N{kTiny, 5, 100, 10, 50, true, ""}, N{kRagged, 50, 1000, 0, 1000, false, ""},
        N{kRagged, 50, 576, 0, 512, true, "latent norm"}, N{kKimi.family, 4, 7168, 0, 7168, false, "hidden norm"},
        N{kKimi.family, 4, 1536, 0, 1536, false, "q_a norm"}, N{kKimi.family, 4, 576, 0, 512, true, "latent norm"},
        N{kDsv3.family, 1, 7168, 0, 7168, false, "hidden norm"},
        N{kDsv3.family, 6, 576, 0, 512, true, "latent norm"}}) {
    const std::string shape = fmt::format("{}x{} cols [{}, {}){}{}{}", n.rows, n.width, n.begin, n.begin + n.d,
                                          n.in_place ? " in place" : "", *n.what ? " " : "", n.what);
    tb.add("rms_norm", n.family, shape, 1e-6, [n](Ctx& c) {
      struct S {
        Tensor x, w, out;
      };
      auto s = std::make_shared<S>();
      s->x = c.rand({n.rows, n.width}, 3.0f);
      s->w = c.vector(n.d, 0.5f, 1.0f);
      s->out = n.in_place ? s->x : c.o().empty({n.rows, n.d});
      Ops* o = &c.o();
      return BoundCase{[s, o, n] { o->rms_norm(s->x, s->w, 1e-6f, s->out, n.begin); },
                       [s, o] { return std::vector{f32_out(*o, "out", s->out)}; }};
    });
  }
  struct A {
    const char* family;
    int64_t T, W;
  };
  // 3 x 13: a count that is not a multiple of 4 (the kernels' one-element-a-thread path).
  for (const A a : {A{kTiny, 9, 144}, A{kRagged, 50, 1000}, A{kRagged, 3, 13}, A{kKimi.family, 4, 7168},
                    A{kDsv3.family, 1, 7168}}) {
    const std::string shape = fmt::format("{}x{}", a.T, a.W);
    tb.add("add_inplace", a.family, shape, 1e-7, [a](Ctx& c) {
      struct S {
        Tensor x, y;
      };
      auto s = std::make_shared<S>(S{c.rand({a.T, a.W}), c.rand({a.T, a.W})});
      Ops* o = &c.o();
      return BoundCase{[s, o] { o->add_inplace(s->x, s->y); }, [s, o] { return std::vector{f32_out(*o, "x", s->x)}; }};
    });
    // The fused residual add + norm: x updated (exact fp32 adds), out normalised.
    tb.add("add_rms_norm", a.family, shape, 1e-6, [a](Ctx& c) {
      struct S {
        Tensor x, y, w, out;
      };
      auto s = std::make_shared<S>(
          S{c.rand({a.T, a.W}), c.rand({a.T, a.W}), c.vector(a.W, 0.5f, 1.0f), c.o().empty({a.T, a.W})});
      Ops* o = &c.o();
      return BoundCase{[s, o] { o->add_rms_norm(s->x, s->y, s->w, 1e-6f, s->out); },
                       [s, o] {
                         return std::vector{f32_out(*o, "residual", s->x, 1e-7), f32_out(*o, "norm", s->out)};
                       }};
    });
  }
  for (const A a : {A{kTiny, 9, 144}, A{kRagged, 50, 1000}, A{kRagged, 3, 13}, A{kKimi.family, 4, kKimi.inter},
                    A{kDsv3.family, 1, kDsv3.dense_inter}}) {
    tb.add("silu_mul", a.family, fmt::format("{}x{}", a.T, a.W), 1e-6, [a](Ctx& c) {
      struct S {
        Tensor g, u, out;
      };
      auto s = std::make_shared<S>(S{c.rand({a.T, a.W}, 6.0f), c.rand({a.T, a.W}), c.o().empty({a.T, a.W})});
      Ops* o = &c.o();
      return BoundCase{[s, o] { o->silu_mul(s->g, s->u, s->out); },
                       [s, o] { return std::vector{f32_out(*o, "out", s->out)}; }};
    });
  }
}

void add_linears(Table& tb) {
  struct L {
    const char* family;
    int64_t T, out, in;
    std::string what;
  };
  std::vector<L> list = {{kTiny, 1, 64, 64, ""},
                         {kTiny, 3, 7, 13, ""},
                         {kTiny, 4, 12, 512, ""},
                         {kRagged, 50, 1000, 576, ""},
                         {kRagged, 50, 576, 1024, ""}};
  for (const ModelShape* m : {&kKimi, &kDsv3}) {
    const int64_t qk = m->nope + m->rope;
    for (int64_t T : {int64_t{1}, int64_t{6}}) {
      list.push_back({m->family, T, m->q_lora, m->hidden, "q_a"});
      list.push_back({m->family, T, m->heads * qk, m->q_lora, "q_b"});
      list.push_back({m->family, T, m->hidden, m->heads * m->v, "o_proj"});
      list.push_back({m->family, T, m->hidden, m->inter, "expert down"});
    }
    list.push_back({m->family, 4, m->kv_lora + m->rope, m->hidden, "kv_a"});
    list.push_back({m->family, 2, m->inter, m->hidden, "shared expert gate"});
    list.push_back({m->family, 1, m->dense_inter, m->hidden, "dense mlp gate"});
  }
  // bf16 weights and bf16-representable inputs on both sides: summation order only.
  for (const L& l : list) {
    tb.add("linear", l.family, fmt::format("{}{}{}x{}x{}", l.what, l.what.empty() ? "" : " ", l.T, l.out, l.in), 1e-5,
           [l](Ctx& c) {
             struct S {
               HostLinearPtr host;
               ops::LinearWeight w;
               Tensor x, out;
             };
             auto s = std::make_shared<S>();
             s->host = bf16_linear(c.rng, l.out, l.in);
             s->w = c.o().upload_linear(s->host->w);
             s->x = c.rand({l.T, l.in});
             s->out = c.o().empty({l.T, l.out});
             Ops* o = &c.o();
             BoundCase b{[s, o] { o->linear(s->x, s->w, s->out); },
                         [s, o] { return std::vector{f32_out(*o, "out", s->out)}; }};
             b.bytes = linear_bytes(*s->host, l.T, l.in, l.out);
             b.flops = 2.0 * l.T * l.out * l.in;
             return b;
           });
  }
  // Weights in their checkpoint formats: DeepSeek-V3's FP8 projections and Kimi-K2.5's NVFP4 expert
  // matrices, over every token count of the quantized matrix-vector kernels (1-8: instances for
  // 1, 2, 4 and 8 rows of x) and past them (dequantized for a GEMM), and ragged widths (k a multiple
  // of 16 but not of 32, or of neither: converted at upload; n a multiple of 8 but not of the
  // 128-row FP8 block). A device backend that
  // keeps them quantized computes on exact weights; one that dequantizes rounds them to bf16 (~2^-9).
  struct Q {
    const char* family;
    const char* format;
    int64_t out, in;
    std::string what;
  };
  const std::vector<Q> quantized = {
      {kDsv3.family, "fp8-block", kDsv3.q_lora, kDsv3.hidden, "q_a"},
      {kDsv3.family, "fp8-block", kDsv3.heads * (kDsv3.nope + kDsv3.rope), kDsv3.q_lora, "q_b"},
      {kDsv3.family, "fp8-block", kDsv3.hidden, kDsv3.heads * kDsv3.v, "o_proj"},
      {kDsv3.family, "fp8-block", kDsv3.kv_lora + kDsv3.rope, kDsv3.hidden, "kv_a"},
      {kKimi.family, "nvfp4", kKimi.inter, kKimi.hidden, "expert gate"},
      {kKimi.family, "nvfp4", kKimi.hidden, kKimi.inter, "expert down"},
      {kRagged, "fp8-block", 200, 304, ""},
      {kRagged, "nvfp4", 36, 96, ""},
      {kRagged, "fp8-block", 44, 1000, ""},
      {kRagged, "fp8-block", 136, 384, ""},
      {kRagged, "nvfp4", 72, 256, ""},
      // Over kLinearRingMinRows and not a multiple of the ring kernel's 128-row boxes: its last box
      // is partly outside the matrix.
      {kRagged, "fp8-block", 4104, 512, ""},
      {kRagged, "nvfp4", 4104, 512, ""},
      // dsv3-tiny-fp8's own projections (q_a, kv_a, o_proj, dense gate/up and down) at its golden
      // prompts' 7 and 33 tokens.
      {kTiny, "fp8-block", 96, 256, "q_a"},
      {kTiny, "fp8-block", 80, 256, "kv_a"},
      {kTiny, "fp8-block", 256, 128, "o_proj"},
      {kTiny, "fp8-block", 512, 256, "mlp gate"},
      {kTiny, "fp8-block", 256, 512, "mlp down"}};
  for (const Q& q : quantized)
    for (int64_t T :
         {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{8}, int64_t{9}, int64_t{12}, int64_t{13},
          int64_t{16}, int64_t{17}, int64_t{40}, int64_t{64}, int64_t{65}, int64_t{7}, int64_t{33}}) {
      // The real shapes at every row count of the matrix-vector instances, either side of their
      // limit and at 16 (perf mode shows where each path overtakes the next); ragged ones at 3, 40,
      // 64 and 65 too, and either side of the tensor-core kernel's limits (two tiles sharing the
      // decode up to 12 tokens, the kernel up to 16).
      if ((q.family == kTiny) != (T == 7 || T == 33)) continue;
      if (q.family != kRagged && (T == 3 || T == 12 || T == 13 || T == 17 || T == 40 || T == 64 || T == 65)) continue;
      if (q.family == kRagged && (T == 4 || T == 5 || T == 16)) continue;
      tb.add("linear", q.family,
             fmt::format("{} {}{}{}x{}x{}", q.format, q.what, q.what.empty() ? "" : " ", T, q.out, q.in), 4e-3,
             [q, T](Ctx& c) {
               struct S {
                 HostLinearPtr host;
                 ops::LinearWeight w;
                 Tensor x, out;
               };
               auto s = std::make_shared<S>();
               s->host = std::string(q.format) == "nvfp4" ? nvfp4_linear(c.rng, q.out, q.in)
                                                          : fp8_block_linear(c.rng, q.out, q.in);
               s->w = c.o().upload_linear(s->host->w);
               s->x = c.rand({T, q.in});
               s->out = c.o().empty({T, q.out});
               Ops* o = &c.o();
               BoundCase b{[s, o] { o->linear(s->x, s->w, s->out); },
                           [s, o] { return std::vector{f32_out(*o, "out", s->out)}; }};
               b.bytes = linear_bytes(*s->host, T, q.in, q.out);
               b.flops = 2.0 * T * q.out * q.in;
               return b;
             });
    }
  struct P {
    const char* family;
    int64_t T, out1, out2, in;
    std::string format = "bf16";  // both matrices' checkpoint format
  };
  // Quantized pairs: DeepSeek-V3 FP8's q_a + kv_a and an NVFP4 pair at one token (one launch unless
  // TESSERA_QUANT_GEMV_PAIR=0), two tokens and widths the matrix-vector kernel does not take (two
  // projections).
  for (const P& p : {P{kTiny, 1, 64, 48, 256}, P{kTiny, 3, 7, 5, 13}, P{kRagged, 50, 192, 80, 512},
                     P{kKimi.family, 1, 1536, 576, 7168}, P{kKimi.family, 3, 1536, 576, 7168},
                     P{kDsv3.family, 1, 1536, 576, 7168}, P{kDsv3.family, 2, 1536, 576, 7168},
                     P{kDsv3.family, 1, 1536, 576, 7168, "fp8-block"}, P{kDsv3.family, 2, 1536, 576, 7168, "fp8-block"},
                     P{kTiny, 1, 64, 48, 256, "fp8-block"}, P{kRagged, 1, 6, 10, 160, "fp8-block"},
                     P{kKimi.family, 1, 2048, 2048, 7168, "nvfp4"}, P{kTiny, 1, 64, 48, 256, "nvfp4"}}) {
    const bool quant = p.format != "bf16";
    tb.add("linear_pair", p.family,
           fmt::format("{}x({}, {})x{}{}{}", p.T, p.out1, p.out2, p.in,
                       p.in == 7168 && p.out2 == 576 ? " q_a + kv_a" : "", quant ? ", " + p.format : ""),
           quant ? 4e-3 : 1e-5, [p](Ctx& c) {
             struct S {
               HostLinearPtr h1, h2;
               ops::LinearWeight w1, w2;
               Tensor x, o1, o2;
             };
             auto s = std::make_shared<S>();
             const auto make = [&](int64_t out) {
               return p.format == "nvfp4"       ? nvfp4_linear(c.rng, out, p.in)
                      : p.format == "fp8-block" ? fp8_block_linear(c.rng, out, p.in)
                                                : bf16_linear(c.rng, out, p.in);
             };
             s->h1 = make(p.out1), s->h2 = make(p.out2);
             s->w1 = c.o().upload_linear(s->h1->w), s->w2 = c.o().upload_linear(s->h2->w);
             s->x = c.rand({p.T, p.in});
             s->o1 = c.o().empty({p.T, p.out1}), s->o2 = c.o().empty({p.T, p.out2});
             Ops* o = &c.o();
             BoundCase b{[s, o] { o->linear_pair(s->x, s->w1, s->o1, s->w2, s->o2); },
                         [s, o] {
                           return std::vector{f32_out(*o, "first", s->o1), f32_out(*o, "second", s->o2)};
                         }};
             // x is read once for both.
             b.bytes = linear_bytes(*s->h1, p.T, p.in, p.out1) + linear_bytes(*s->h2, p.T, 0, p.out2);
             b.flops = 2.0 * p.T * (p.out1 + p.out2) * p.in;
             return b;
           });
  }
  // The matrix-vector path (1-2 tokens, K a multiple of 256) keeps the normalised row in fp32; the
  // GEMM path rounds it to bf16 as every GEMM input (~2^-9 relative).
  for (const P& p : {P{kTiny, 1, 64, 0, 256}, P{kTiny, 3, 5, 0, 24}, P{kRagged, 50, 256, 0, 512},
                     P{kKimi.family, 1, 64 * 192, 0, 1536}, P{kKimi.family, 4, 64 * 192, 0, 1536},
                     P{kDsv3.family, 2, 128 * 192, 0, 1536}, P{kDsv3.family, 5, 128 * 192, 0, 1536}}) {
    const bool fp32_row = p.T <= 2 && p.in % 256 == 0;
    tb.add("rms_norm_linear", p.family,
           fmt::format("{}x{}x{}{}", p.T, p.out1, p.in, p.in == 1536 ? " q_a norm + q_b" : ""), fp32_row ? 1e-5 : 4e-3,
           [p](Ctx& c) {
             struct S {
               HostLinearPtr h;
               ops::LinearWeight w;
               Tensor x, norm, out;
             };
             auto s = std::make_shared<S>();
             s->h = bf16_linear(c.rng, p.out1, p.in);
             s->w = c.o().upload_linear(s->h->w);
             s->x = c.rand({p.T, p.in}, 3.0f);
             s->norm = c.vector(p.in, 0.5f, 1.0f);
             s->out = c.o().empty({p.T, p.out1});
             Ops* o = &c.o();
             BoundCase b{[s, o] { o->rms_norm_linear(s->x, s->norm, 1e-6f, s->w, s->out); },
                         [s, o] { return std::vector{f32_out(*o, "out", s->out)}; }};
             b.bytes = linear_bytes(*s->h, p.T, p.in, p.out1) + 4.0 * p.in;  // + the norm weight
             b.flops = 2.0 * p.T * p.out1 * p.in;
             return b;
           });
  }
}

void add_rope_and_gather(Table& tb) {
  struct R {
    const char* family;
    int64_t T, width, rope, begin, stride, count;
    const char* what;
  };
  for (const R r :
       {R{kTiny, 9, 144, 16, 32, 48, 3, ""}, R{kRagged, 50, 16 * 192, 64, 128, 192, 16, "q"},
        R{kRagged, 50, 80, 16, 64, 16, 1, "latent"}, R{kKimi.family, 4, 64 * 192, 64, 128, 192, 64, "q"},
        R{kKimi.family, 4, 576, 64, 512, 64, 1, "latent"}, R{kDsv3.family, 3, 128 * 192, 64, 128, 192, 128, "q"}}) {
    tb.add("rope_inplace", r.family,
           fmt::format("{}x{}{}{}: {} x rope {} from col {} stride {}", r.T, r.width, *r.what ? " " : "", r.what,
                       r.count, r.rope, r.begin, r.stride),
           1e-6, [r](Ctx& c) {
             struct S {
               Tensor x;
               ops::RopeTables tables;
             };
             auto s = std::make_shared<S>();
             s->x = c.rand({r.T, r.width});
             std::vector<int64_t> pos;
             for (int64_t t = 0; t < r.T; ++t) pos.push_back(c.rng.below(5000));
             s->tables = c.rope(pos, r.rope);
             Ops* o = &c.o();
             return BoundCase{[s, o, r] { o->rope_inplace(s->x, s->tables, r.begin, r.stride, r.count); },
                              [s, o] { return std::vector{f32_out(*o, "x", s->x)}; }};
           });
  }
  struct G {
    const char* family;
    int64_t T, W;
    std::vector<int64_t> rows;
  };
  for (const G& g : {G{kTiny, 9, 144, {8, 0, 3}}, G{kRagged, 50, 1000, {4, 5, 45, 46, 47, 48, 49}},
                     G{kKimi.family, 5, 7168, {4, 0}}, G{kDsv3.family, 5, 7168, {1, 2, 3}}}) {
    std::string rows;
    for (int64_t r : g.rows) rows += fmt::format("{}{}", rows.empty() ? "" : ",", r);
    tb.add("gather_rows", g.family, fmt::format("{}x{} rows {}", g.T, g.W, rows), 0, [g](Ctx& c) {
      struct S {
        Tensor x, out;
      };
      auto s = std::make_shared<S>(S{c.rand({g.T, g.W}), c.o().empty({static_cast<int64_t>(g.rows.size()), g.W})});
      Ops* o = &c.o();
      return BoundCase{[s, o, rows = g.rows] { o->gather_rows(s->x, rows, s->out); },
                       [s, o] { return std::vector{f32_out(*o, "rows", s->out)}; }};
    });
  }
}

// --- MLA: cache writes, prepare and attention over paged steps.

struct MlaCase {
  const char* family;
  int64_t heads, nope, rope, v, latent;
  std::vector<Seq> seqs;
  int64_t page;
  bool fp8;
};

// The ragged steps: decode tokens at many context lengths (partial tiles, several tiles, a context
// long enough to be split) mixed with prefill chunks with and without a cached prefix; and a
// decode-only step (the path CUDA graphs record).
const std::vector<Seq> kRaggedMixed = {{0, 5}, {70, 1}, {3, 40}, {0, 1}, {128, 1}, {1500, 1}, {31, 1}};
const std::vector<Seq> kRaggedDecode = {{70, 1}, {1500, 1}, {4000, 1}, {63, 1}, {64, 1}};

std::vector<MlaCase> mla_cases() {
  std::vector<MlaCase> v = {
      {kTiny, 8, 16, 16, 24, 32, {{0, 3}, {5, 1}}, 16, false},
      {kTiny, 8, 16, 16, 24, 32, {{0, 3}, {5, 1}}, 16, true},
      {kRagged, 16, 128, 64, 128, 512, kRaggedMixed, 64, false},
      {kRagged, 16, 128, 64, 128, 512, kRaggedDecode, 64, false},
      {kRagged, 16, 128, 64, 128, 512, kRaggedMixed, 64, true},
      {kRagged, 20, 32, 16, 32, 64, kRaggedMixed, 16, false},
      {kRagged, 8, 16, 16, 24, 32, kRaggedMixed, 64, true},
      // One decode token with a long context and 8 heads: the most context splits (more than 128).
      {kRagged, 8, 128, 64, 128, 512, {{20000, 1}}, 64, false},
      {kRagged, 8, 128, 64, 128, 512, {{20000, 1}}, 64, true},
  };
  for (const ModelShape* m : {&kKimi, &kDsv3}) {
    // Decode at contexts around the 64-position tiles and a long one; a prefill chunk beside
    // decodes (with and without a cached prefix); pages of 32 (a tile spans two pages); fp8.
    const std::vector<Seq> decode = {{0, 1}, {69, 1}, {127, 1}, {1499, 1}, {4095, 1}};
    const std::vector<Seq> mixed = {{0, 6}, {200, 1}, {37, 3}, {1000, 1}};
    v.push_back({m->family, m->heads, m->nope, m->rope, m->v, m->kv_lora, decode, 64, false});
    v.push_back({m->family, m->heads, m->nope, m->rope, m->v, m->kv_lora, mixed, 64, false});
    v.push_back({m->family, m->heads, m->nope, m->rope, m->v, m->kv_lora, decode, 32, false});
    v.push_back({m->family, m->heads, m->nope, m->rope, m->v, m->kv_lora, decode, 64, true});
  }
  // A decode batch of 128 (Kimi-K2.5's 64 heads): one context split, where the wgmma and KV-major
  // kernels write the normalised output themselves and no combine runs.
  std::vector<Seq> batch;
  for (int64_t i = 0; i < 128; ++i) batch.push_back({(i * 37) % 200, 1});
  v.push_back({kKimi.family, kKimi.heads, kKimi.nope, kKimi.rope, kKimi.v, kKimi.kv_lora, batch, 64, false});
  return v;
}

constexpr float kFp8Scale = 0.37f;  // not a power of two: the scale must be applied, not just the bytes

std::string mla_name(const MlaCase& m) {
  return fmt::format("{}h nope {} rope {} v {} latent {}, page {}, {} cache, seqs {}", m.heads, m.nope, m.rope, m.v,
                     m.latent, m.page, m.fp8 ? "fp8" : "native", seqs_name(m.seqs));
}

// The parts of MLA over a cache sharded by position (Ops::mla_absorb_q .. mla_up_v).
// `parts`: the shapes of the parts that do not read the cache already added (each once).
void add_sharded_mla(Table& tb, const MlaCase& m, std::set<std::string>& parts) {
  const int64_t entry = m.latent + m.rope;
  // Each token of the step attends over its own causal prefix, as one sequence of one token; every
  // fourth sees nothing (a rank that holds none of its positions: o_lat 0, lse -inf).
  OpCase& oc = tb.add("mla_attend_latent", m.family, mla_name(m), 1e-2, [m, entry](Ctx& c) {
    struct S {
      std::shared_ptr<PagedStep> p;
      ops::KvLayerView kv;
      std::vector<ops::AttentionSeq> tokens;
      Tensor q_full, o_lat, lse;
      ops::MlaDims dims;
      bool decode = true;
    };
    auto s = std::make_shared<S>();
    s->p = paged_step(c.rng, m.seqs, m.page, entry);
    s->kv = make_cache(c, *s->p, m.fp8, kFp8Scale);
    const int64_t T = s->p->T;
    c.o().kv_cache_write(s->kv, c.rand({T, entry}), s->p->step);
    for (const ops::AttentionSeq& q : s->p->step) {
      if (q.num_tokens > 1) s->decode = false;
      for (int64_t j = 0; j < q.num_tokens; ++j) {
        const int64_t row = q.token_begin + j;
        s->tokens.push_back({row, 1, row % 4 == 3 ? -1 : q.start_pos + j, q.block_table});
      }
    }
    s->dims = {m.heads, m.nope, m.rope, m.v, m.latent, 1.0f / std::sqrt(static_cast<float>(m.nope + m.rope))};
    s->q_full = c.rand({T, m.heads * entry}, 0.5f);
    s->o_lat = c.o().empty({T, m.heads * m.latent});
    s->lse = c.o().empty({T, m.heads});
    Ops* o = &c.o();
    return BoundCase{
        [s, o] { o->mla_attend_latent(s->q_full, s->kv, s->dims, s->tokens, s->decode, s->o_lat, s->lse); },
        [s, o] {
          return std::vector{f32_out(*o, "o_lat", s->o_lat), f32_out(*o, "lse", s->lse, 1e-3)};
        }};
  });
  oc.kernels = KernelFamily::kMla;
  oc.mla = {m.heads, m.latent, m.rope, m.nope, m.v, m.fp8};
  oc.kernel_max_rel_rms = {{"cuda-core", 1e-4}};
  if (m.fp8) return;  // the other parts do not read the cache
  const int64_t T = static_cast<int64_t>(
      std::accumulate(m.seqs.begin(), m.seqs.end(), int64_t{0}, [](int64_t n, const Seq& q) { return n + q.fresh; }));
  const std::string shape =
      fmt::format("{} tokens, {}h nope {} rope {} v {} latent {}", T, m.heads, m.nope, m.rope, m.v, m.latent);
  if (!parts.insert(m.family + (" " + shape)).second) return;
  // W_UK and W_UV of a rank's heads: the tensor-core paths keep fp32 inputs as hi + lo bf16 parts.
  tb.add("mla_absorb_q", m.family, shape, 1e-4, [m, T](Ctx& c) {
    struct S {
      HostLinearPtr kv_b_host;
      ops::LinearWeight kv_b;
      Tensor q, q_full;
      ops::MlaDims dims;
    };
    auto s = std::make_shared<S>();
    s->kv_b_host = bf16_linear(c.rng, m.heads * (m.nope + m.v), m.latent);
    s->kv_b = c.o().upload_linear(s->kv_b_host->w, ops::LinearUse::kAttentionKvB);
    s->q = c.rand({T, m.heads * (m.nope + m.rope)});
    s->q_full = c.o().empty({T, m.heads * (m.latent + m.rope)});
    s->dims = {m.heads, m.nope, m.rope, m.v, m.latent, 1.0f};
    Ops* o = &c.o();
    return BoundCase{[s, o] { o->mla_absorb_q(s->q, s->kv_b, s->dims, s->q_full); },
                     [s, o] { return std::vector{f32_out(*o, "q_full", s->q_full)}; }};
  });
  // This rank's heads [heads / 4, heads / 2) of an o_lat of all heads.
  tb.add("mla_up_v", m.family, shape, 1e-4, [m, T](Ctx& c) {
    struct S {
      HostLinearPtr kv_b_host;
      ops::LinearWeight kv_b;
      Tensor o_lat, out;
      ops::MlaDims dims;
    };
    auto s = std::make_shared<S>();
    const int64_t mine = std::max<int64_t>(1, m.heads / 4);
    s->kv_b_host = bf16_linear(c.rng, mine * (m.nope + m.v), m.latent);
    s->kv_b = c.o().upload_linear(s->kv_b_host->w, ops::LinearUse::kAttentionKvB);
    s->o_lat = c.rand({T, m.heads * m.latent});
    s->out = c.o().empty({T, mine * m.v});
    s->dims = {mine, m.nope, m.rope, m.v, m.latent, 1.0f};
    Ops* o = &c.o();
    return BoundCase{[s, o, mine] { o->mla_up_v(s->o_lat, mine, s->kv_b, s->dims, s->out); },
                     [s, o] { return std::vector{f32_out(*o, "out", s->out)}; }};
  });
  // Weighing 3 ranks' partials, some of which saw nothing (lse -inf).
  tb.add("mla_rank_weigh", m.family, fmt::format("{} tokens, {}h latent {}, 3 ranks", T, m.heads, m.latent), 1e-5,
         [m, T](Ctx& c) {
           struct S {
             Tensor o_lat, lse, lse_all;
           };
           auto s = std::make_shared<S>();
           constexpr int64_t kRanks = 3, kMine = 1;
           std::vector<float> all = c.rng.values(T * kRanks * m.heads, 4.0f);
           for (size_t i = 0; i < all.size(); i += 5) all[i] = -std::numeric_limits<float>::infinity();
           std::vector<float> own(static_cast<size_t>(T * m.heads));
           for (int64_t t = 0; t < T; ++t)
             for (int64_t h = 0; h < m.heads; ++h) {
               // A rank that saw nothing for every rank is not a step the model makes: one stays finite.
               float& v = all[static_cast<size_t>((t * kRanks + (kMine + 1) % kRanks) * m.heads + h)];
               if (std::isinf(v)) v = 0.5f;
               own[static_cast<size_t>(t * m.heads + h)] = all[static_cast<size_t>((t * kRanks + kMine) * m.heads + h)];
             }
           s->o_lat = c.rand({T, m.heads * m.latent});
           s->lse = c.f32({T, m.heads}, own);
           s->lse_all = c.f32({T, kRanks * m.heads}, all);
           Ops* o = &c.o();
           return BoundCase{[s, o] { o->mla_rank_weigh(s->o_lat, s->lse, s->lse_all); },
                            [s, o] { return std::vector{f32_out(*o, "o_lat", s->o_lat)}; }};
         });
}

void add_mla(Table& tb) {
  std::set<std::string> written;  // kv_cache_write and mla_prepare: the cache geometry, once
  std::set<std::string> sharded_parts;
  for (const MlaCase& m : mla_cases()) {
    const int64_t entry = m.latent + m.rope;
    const std::string geometry =
        fmt::format("{} {} {} {} {} {}", m.family, entry, m.heads, m.page, m.fp8, seqs_name(m.seqs));
    if (written.insert(geometry).second) {
      // The step's latents into the cache (prefixes already there): bf16-representable values are
      // stored exactly in fp32 and bf16, and fp8 rounds the same way everywhere.
      tb.add("kv_cache_write", m.family,
             fmt::format("entry {}, page {}, {} cache, seqs {}", entry, m.page, m.fp8 ? "fp8" : "native",
                         seqs_name(m.seqs)),
             0, [m, entry](Ctx& c) {
               struct S {
                 std::shared_ptr<PagedStep> p;
                 ops::KvLayerView kv;
                 Tensor latent;
               };
               auto s = std::make_shared<S>();
               s->p = paged_step(c.rng, m.seqs, m.page, entry);
               s->kv = make_cache(c, *s->p, m.fp8, kFp8Scale);
               s->latent = c.rand({s->p->T, entry}, 2.0f);
               Ops* o = &c.o();
               const Target* t = &c.target;
               return BoundCase{[s, o] { o->kv_cache_write(s->kv, s->latent, s->p->step); },
                                [s, t] {
                                  return std::vector{CaseOutput{"cache", cache_values(*t, s->kv)}};
                                }};
             });
      // q's rope, the latent's norm and rope and the cache write; the cache holds the normalised
      // latent, rounded to bf16 (2^-9) or fp8 (rare ties broken differently by two summation orders).
      tb.add("mla_prepare", m.family,
             fmt::format("{}h nope {} rope {} latent {}, page {}, {} cache, seqs {}", m.heads, m.nope, m.rope, m.latent,
                         m.page, m.fp8 ? "fp8" : "native", seqs_name(m.seqs)),
             1e-6, [m, entry](Ctx& c) {
               struct S {
                 std::shared_ptr<PagedStep> p;
                 ops::KvLayerView kv;
                 Tensor q, latent, norm;
                 ops::RopeTables tables;
                 ops::MlaDims dims;
               };
               auto s = std::make_shared<S>();
               s->p = paged_step(c.rng, m.seqs, m.page, entry);
               s->kv = make_cache(c, *s->p, m.fp8, kFp8Scale);
               const int64_t T = s->p->T;
               s->q = c.rand({T, m.heads * (m.nope + m.rope)});
               s->latent = c.rand({T, entry}, 2.0f);
               s->norm = c.vector(m.latent, 0.5f, 1.0f);
               s->tables = c.rope(s->p->positions, m.rope);
               s->dims = {m.heads, m.nope, m.rope, m.v, m.latent, 0.1f};
               Ops* o = &c.o();
               const Target* t = &c.target;
               const double cache_tol = m.fp8 ? 2e-2 : 4e-3;
               return BoundCase{
                   [s, o] { o->mla_prepare(s->q, s->latent, s->norm, 1e-6f, s->tables, s->dims, s->kv, s->p->step); },
                   [s, o, t, cache_tol] {
                     return std::vector{f32_out(*o, "q", s->q), f32_out(*o, "latent", s->latent),
                                        CaseOutput{"cache", cache_values(*t, s->kv), cache_tol}};
                   }};
             });
    }
    // Attention over the cache (which holds the step's tokens). The fp32 CUDA-core kernel differs
    // from the CPU only in summation order; the tensor-core kernels and the decompressed prefill
    // also round the (absorbed, scaled) query and the probabilities to bf16 (~2^-9 each).
    OpCase& oc = tb.add("mla_attention", m.family, mla_name(m), 1e-2, [m, entry](Ctx& c) {
      struct S {
        std::shared_ptr<PagedStep> p;
        ops::KvLayerView kv;
        HostLinearPtr kv_b_host;
        ops::LinearWeight kv_b;
        Tensor q, out;
        ops::MlaDims dims;
      };
      auto s = std::make_shared<S>();
      s->p = paged_step(c.rng, m.seqs, m.page, entry);
      s->kv = make_cache(c, *s->p, m.fp8, kFp8Scale);
      const int64_t T = s->p->T;
      c.o().kv_cache_write(s->kv, c.rand({T, entry}), s->p->step);
      s->kv_b_host = bf16_linear(c.rng, m.heads * (m.nope + m.v), m.latent);
      s->kv_b = c.o().upload_linear(s->kv_b_host->w);
      s->q = c.rand({T, m.heads * (m.nope + m.rope)});
      s->dims = {m.heads, m.nope, m.rope, m.v, m.latent, 1.0f / std::sqrt(static_cast<float>(m.nope + m.rope))};
      s->out = c.o().empty({T, m.heads * m.v});
      Ops* o = &c.o();
      return BoundCase{[s, o] { o->mla_attention(s->q, s->kv, s->kv_b, s->dims, s->p->step, s->out); },
                       [s, o] { return std::vector{f32_out(*o, "out", s->out)}; }};
    });
    oc.kernels = KernelFamily::kMla;
    oc.mla = {m.heads, m.latent, m.rope, m.nope, m.v, m.fp8};
    oc.kernel_max_rel_rms = {{"cuda-core", 1e-4}};
    if (std::string(m.family) != kDsv3.family) add_sharded_mla(tb, m, sharded_parts);
  }
}

// --- MoE.

struct RouteCase {
  const char* family;
  int64_t T, E, K, G, TG, H;
  float scaling;
};
std::vector<RouteCase> route_cases() {
  std::vector<RouteCase> v = {
      {kTiny, 1, 16, 4, 4, 2, 128, 2.5f}, {kTiny, 5, 160, 6, 1, 1, 128, 1.0f}, {kRagged, 50, 64, 6, 8, 4, 512, 2.5f}};
  for (const ModelShape* m : {&kKimi, &kDsv3})
    for (int64_t T : {int64_t{1}, int64_t{5}})
      v.push_back({m->family, T, m->experts, m->top_k, m->groups, m->top_groups, m->hidden, m->scaling});
  return v;
}

// The router's inputs: bf16 gate rows of scale 1 (spread-out scores, so no near-ties between the
// k-th and the next expert), a small positive selection bias.
struct Router {
  HostLinearPtr gate;
  ops::LinearWeight w;
  Tensor bias;
};
Router make_router(Ctx& c, int64_t E, int64_t H) {
  Router r;
  r.gate = bf16_linear(c.rng, E, H, 1.0f);
  r.w = c.o().upload_linear(r.gate->w);
  r.bias = c.vector(E, 0.025f, 0.025f);
  return r;
}

void add_moe(Table& tb) {
  for (const RouteCase& r : route_cases()) {
    tb.add("moe_route", r.family,
           fmt::format("{} tokens, {} experts, top-{}, {} groups (top {}), hidden {}", r.T, r.E, r.K, r.G, r.TG, r.H),
           1e-5, [r](Ctx& c) {
             struct S {
               Router router;
               Tensor x, ids, weights;
               ops::RouterConfig cfg;
             };
             auto s = std::make_shared<S>();
             s->router = make_router(c, r.E, r.H);
             s->x = c.rand({r.T, r.H});
             s->cfg = {r.E, r.K, r.G, r.TG, true, r.scaling};
             s->ids = c.o().empty_i32({r.T, r.K}), s->weights = c.o().empty({r.T, r.K});
             Ops* o = &c.o();
             return BoundCase{[s, o] { o->moe_route(s->x, s->router.w, s->router.bias, s->cfg, s->ids, s->weights); },
                              [s, o, r] {
                                // The order of a token's experts is free: compared as (id, weight) sorted by id.
                                const auto ids = o->to_host_i32(s->ids);
                                const auto w = o->to_host_f32(s->weights);
                                CaseOutput id_out{"expert ids (sorted)", {}, 0.0}, w_out{"weights (by id)", {}};
                                for (int64_t t = 0; t < r.T; ++t) {
                                  std::vector<std::pair<int32_t, float>> p;
                                  for (int64_t k = 0; k < r.K; ++k) p.emplace_back(ids[t * r.K + k], w[t * r.K + k]);
                                  std::sort(p.begin(), p.end());
                                  for (const auto& [i, x] : p)
                                    id_out.values.push_back(static_cast<float>(i)), w_out.values.push_back(x);
                                }
                                return std::vector{id_out, w_out};
                              }};
           });
  }

  struct Ex {
    const char* family;
    int64_t T, E, K, H, I, shared;  // shared: 0 none; == I beside the routed ones; else separately
    int64_t distinct;               // distinct weight sets (E: all)
    bool uneven;                    // most tokens to one expert, some experts empty
    std::string format = "bf16";    // routed experts' checkpoint format
    std::string shared_format = "bf16";
    // > 1: a tensor-parallel rank's share: routed expert i held only where i % ranks == 1 (rank 1),
    // the others empty (ExpertWeights::held), as load_model_ranks leaves them.
    int64_t ranks = 1;
  };
  std::vector<Ex> experts = {{kTiny, 5, 6, 2, 128, 64, 0, 6, true},
                             {kTiny, 3, 4, 2, 128, 48, 0, 4, false},
                             {kTiny, 1, 40, 8, 512, 256, 256, 40, false},
                             {kRagged, 50, 40, 8, 512, 96, 96, 40, false},
                             {kRagged, 300, 12, 4, 256, 64, 128, 12, false},
                             {kRagged, 40, 64, 8, 256, 512, 0, 64, true},
                             // 64 pairs an expert on average within the grouped limit: experts of several
                             // tiles of 16 pairs, whole and part (TESSERA_MOE_GROUPED_TILES groups them).
                             {kRagged, 128, 16, 8, 256, 128, 0, 16, false},
                             // Past the grouped limit (the per-expert GEMMs): a hidden of 96 (rows of 384 bytes, so the
                             // down projections' rows in the sorted order are not all 256-byte aligned), and a
                             // tensor-parallel rank's share (the sort drops the other ranks' experts).
                             {kRagged, 270, 8, 2, 96, 64, 0, 8, true},
                             {kRagged, 300, 12, 4, 256, 64, 0, 12, false, "bf16", "bf16", 4}};
  for (const ModelShape* m : {&kKimi, &kDsv3})
    for (int64_t T : {int64_t{1}, int64_t{5}})
      experts.push_back(
          {m->family, T, m->experts, m->top_k, m->hidden, m->inter, m->shared * m->inter, kDistinctExperts, false});
  // Experts in their checkpoint formats: Kimi-K2.5's NVFP4 routed experts beside a bf16 shared one,
  // DeepSeek-V3's FP8 everywhere; decode sizes (the grouped tensor-core or CUDA-core kernels), steps
  // past the grouped limit (the tensor-core kernels where the widths allow, else dequantized GEMMs per
  // expert), ragged widths, empty experts.
  const std::vector<Ex> quantized = {
      {kTiny, 5, 6, 2, 128, 64, 0, 6, true, "nvfp4"},
      {kTiny, 3, 8, 2, 256, 128, 128, 8, true, "fp8-block", "fp8-block"},
      {kRagged, 7, 40, 8, 320, 96, 96, 40, false, "nvfp4"},
      {kRagged, 300, 12, 4, 256, 64, 128, 12, false, "fp8-block", "fp8-block"},
      {kRagged, 260, 16, 4, 256, 64, 0, 16, false, "nvfp4"},
      // FP8 on tensor cores: one expert takes most pairs (several tiles of 16), others none; and
      // widths they do not take (K not a multiple of 128: the CUDA-core kernels)
      {kTiny, 40, 8, 2, 256, 128, 0, 8, true, "fp8-block"},
      {kRagged, 7, 16, 4, 320, 96, 0, 16, false, "fp8-block"},
      // Prefill sizes (more than 16 pairs an expert on average: 4 tiles a decoded fragment): one
      // expert with every token (a full group of 64 and a part one), others none; the real widths
      // with 48 pairs an expert.
      {kTiny, 100, 8, 2, 256, 128, 0, 8, true, "nvfp4"},
      {kRagged, 100, 8, 2, 384, 256, 0, 8, true, "fp8-block"},
      {kKimi.family, 96, 16, kKimi.top_k, kKimi.hidden, kKimi.inter, kKimi.shared * kKimi.inter, 4, false, "nvfp4"},
      {kDsv3.family, 96, 16, kDsv3.top_k, kDsv3.hidden, kDsv3.inter, kDsv3.shared * kDsv3.inter, 4, false, "fp8-block",
       "fp8-block"}};
  experts.insert(experts.end(), quantized.begin(), quantized.end());
  // Rank 1 of 4 with DeepSeek-V3-tiny-FP8's shapes (shared expert a quarter of 128 columns) and of
  // 8 with Kimi-K2.5-tiny-NVFP4's, at a decode step, a short prompt and a prefill.
  for (int64_t T : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{600}}) {
    experts.push_back({kTiny, T, 16, 4, 256, 128, 32, 16, false, "fp8-block", "fp8-block", 4});
    experts.push_back({kTiny, T, 12, 4, 256, 128, 16, 12, false, "nvfp4", "bf16", 8});
  }
  for (int64_t T : {int64_t{1}, int64_t{5}, int64_t{16}})
    experts.push_back({kKimi.family, T, kKimi.experts, kKimi.top_k, kKimi.hidden, kKimi.inter,
                       kKimi.shared * kKimi.inter, kDistinctExperts, false, "nvfp4"});
  for (int64_t T : {int64_t{1}, int64_t{5}, int64_t{16}})
    experts.push_back({kDsv3.family, T, kDsv3.experts, kDsv3.top_k, kDsv3.hidden, kDsv3.inter,
                       kDsv3.shared * kDsv3.inter, kDistinctExperts, false, "fp8-block", "fp8-block"});
  auto ex_name = [](const Ex& e) {
    return fmt::format("{} tokens, {} experts{}, top-{}, hidden {}, inter {}, {}{}{}{}", e.T, e.E,
                       e.distinct < e.E ? fmt::format(" ({} distinct weight sets)", e.distinct) : "", e.K, e.H, e.I,
                       e.shared ? fmt::format("shared {}", e.shared) : "no shared", e.uneven ? ", uneven routing" : "",
                       e.format == "bf16" ? "" : fmt::format(", experts {}, shared {}", e.format, e.shared_format),
                       e.ranks > 1 ? fmt::format(", rank 1 of {}", e.ranks) : "");
  };
  struct Weights {
    std::vector<HostExpert> host;
    std::vector<ops::ExpertWeights> experts;  // E entries over the distinct sets
    std::optional<HostExpert> shared_host;
    std::optional<ops::ExpertWeights> shared;
  };
  auto make_weights = [](Ctx& c, const Ex& e) {
    auto w = std::make_shared<Weights>();
    std::vector<ops::ExpertWeights> uploaded;
    for (int64_t i = 0; i < e.distinct; ++i) {
      w->host.push_back(host_expert(c.rng, e.H, e.I, e.format));
      uploaded.push_back(upload_expert(c.o(), w->host.back()));
    }
    for (int64_t i = 0; i < e.E; ++i)
      w->experts.push_back(e.ranks == 1 || i % e.ranks == 1 ? uploaded[static_cast<size_t>(i % e.distinct)]
                                                            : ops::ExpertWeights{});
    if (e.shared) {
      w->shared_host = host_expert(c.rng, e.H, e.shared, e.shared_format);
      w->shared = upload_expert(c.o(), *w->shared_host);
    }
    return w;
  };
  // The GPU rounds each GEMM input to bf16, including the silu(gate)*up activations that the CPU
  // keeps in fp32: ~2^-9 relative per element.
  for (const Ex& e : experts) {
    OpCase& oc = tb.add("moe_experts", e.family, ex_name(e), 5e-3, [e, make_weights](Ctx& c) {
      struct S {
        std::shared_ptr<Weights> w;
        Tensor x, ids, weights, out;
      };
      auto s = std::make_shared<S>();
      s->w = make_weights(c, e);
      s->x = c.rand({e.T, e.H});
      // Distinct experts a token; uneven: expert 1 takes every token, 3 or 4 most, 0 and 2 none.
      std::vector<int32_t> ids;
      std::vector<float> wts;
      for (int64_t t = 0; t < e.T; ++t) {
        std::vector<int32_t> all(static_cast<size_t>(e.E));
        std::iota(all.begin(), all.end(), 0);
        c.rng.shuffle(all);
        std::vector<int32_t> pick;
        if (e.uneven) pick = {1, t % 7 == 0 ? 4 : 3};
        for (int32_t x : all) {
          if (static_cast<int64_t>(pick.size()) == e.K) break;
          if (std::find(pick.begin(), pick.end(), x) != pick.end() || (e.uneven && (x == 0 || x == 2))) continue;
          pick.push_back(x);
        }
        for (int32_t x : pick) {
          ids.push_back(x);
          wts.push_back(0.05f + 0.95f * c.rng.uniform());
        }
      }
      s->ids = c.i32({e.T, e.K}, ids);
      s->weights = c.f32({e.T, e.K}, wts);
      s->out = c.o().empty({e.T, e.H});
      Ops* o = &c.o();
      return BoundCase{[s, o] {
                         o->moe_experts(s->x, s->w->experts, s->ids, s->weights, s->out,
                                        s->w->shared ? &*s->w->shared : nullptr);
                       },
                       [s, o] { return std::vector{f32_out(*o, "out", s->out)}; }};
    });
    oc.kernels = KernelFamily::kMoe;
    oc.moe = {e.E, e.H, e.I};
  }

  // The whole block (router, routed experts, shared expert beside the router).
  struct Block {
    Ex e;
    int64_t G, TG;
    float scaling;
  };
  std::vector<Block> blocks = {{{kTiny, 1, 16, 4, 128, 64, 64, 16, false}, 4, 2, 2.5f},
                               {{kTiny, 3, 24, 6, 512, 256, 256, 24, false}, 4, 2, 2.5f},
                               {{kRagged, 50, 24, 6, 512, 256, 128, 24, false}, 1, 1, 2.5f}};
  for (const ModelShape* m : {&kKimi, &kDsv3})
    for (int64_t T : {int64_t{1}, int64_t{4}})
      blocks.push_back(
          {{m->family, T, m->experts, m->top_k, m->hidden, m->inter, m->shared * m->inter, kDistinctExperts, false},
           m->groups,
           m->top_groups,
           m->scaling});
  // The checkpoint formats: Kimi-K2.5's NVFP4 routed experts with the bf16 shared expert on the second
  // stream (alone in the bf16 grouped kernels; also one twice as wide as the routed ones), at decode
  // sizes and past the grouped limit (the shared expert after the routed ones); DeepSeek-V3's FP8 shared
  // expert on the second stream at one token (its matrix-vector kernels), after the routed ones at 4.
  for (int64_t T : {int64_t{1}, int64_t{4}})
    blocks.push_back({{kKimi.family, T, kKimi.experts, kKimi.top_k, kKimi.hidden, kKimi.inter,
                       kKimi.shared * kKimi.inter, kDistinctExperts, false, "nvfp4"},
                      kKimi.groups,
                      kKimi.top_groups,
                      kKimi.scaling});
  blocks.push_back({{kTiny, 3, 16, 4, 256, 128, 256, 16, false, "nvfp4"}, 4, 2, 2.5f});
  blocks.push_back({{kRagged, 300, 12, 4, 256, 128, 128, 12, false, "nvfp4"}, 1, 1, 2.5f});
  for (int64_t T : {int64_t{1}, int64_t{4}})
    blocks.push_back({{kDsv3.family, T, kDsv3.experts, kDsv3.top_k, kDsv3.hidden, kDsv3.inter,
                       kDsv3.shared * kDsv3.inter, kDistinctExperts, false, "fp8-block", "fp8-block"},
                      kDsv3.groups,
                      kDsv3.top_groups,
                      kDsv3.scaling});
  for (const Block& b : blocks) {
    OpCase& oc = tb.add("moe", b.e.family, fmt::format("{}, {} groups (top {})", ex_name(b.e), b.G, b.TG), 5e-3,
                        [b, make_weights](Ctx& c) {
                          struct S {
                            std::shared_ptr<Weights> w;
                            Router router;
                            ops::RouterConfig cfg;
                            Tensor x, out;
                          };
                          auto s = std::make_shared<S>();
                          s->w = make_weights(c, b.e);
                          s->router = make_router(c, b.e.E, b.e.H);
                          s->cfg = {b.e.E, b.e.K, b.G, b.TG, true, b.scaling};
                          s->x = c.rand({b.e.T, b.e.H});
                          s->out = c.o().empty({b.e.T, b.e.H});
                          Ops* o = &c.o();
                          return BoundCase{[s, o] {
                                             o->moe(s->x, s->router.w, s->router.bias, s->cfg, s->w->experts,
                                                    s->w->shared ? &*s->w->shared : nullptr, s->out);
                                           },
                                           [s, o] { return std::vector{f32_out(*o, "out", s->out)}; }};
                        });
    oc.kernels = KernelFamily::kMoe;
    oc.moe = {b.e.E, b.e.H, b.e.I};
  }
}

// --- Constrained decoding's logit mask: exact (a copy or -inf).

void add_mask_logits(Table& tb) {
  struct Mk {
    const char* family;
    int64_t rows, vocab;
  };
  for (const Mk mk : {Mk{kTiny, 3, 1000}, Mk{kRagged, 2, 32001}, Mk{kDsv3.family, 4, kDsv3.vocab}}) {
    tb.add(
        "mask_logits", mk.family, fmt::format("{} rows, vocab {}, random masks", mk.rows, mk.vocab), 0.0, [mk](Ctx& c) {
          struct S {
            Tensor logits;
            std::vector<uint32_t> mask;
          };
          auto s = std::make_shared<S>();
          std::vector<float> logits(static_cast<size_t>(mk.rows * mk.vocab));
          for (auto& x : logits) x = 8.0f * c.rng.uniform() - 4.0f;
          const int64_t words = (mk.vocab + 31) / 32;
          s->mask.resize(static_cast<size_t>(mk.rows * words));
          for (int64_t r = 0; r < mk.rows; ++r)
            for (int64_t w = 0; w < words; ++w)  // row 0 sparse, then about half, ...
              s->mask[static_cast<size_t>(r * words + w)] = r == 0
                                                                ? (c.rng.uniform() < 0.05 ? 1u << (w % 32) : 0u)
                                                                : static_cast<uint32_t>(c.rng.uniform() * 4294967296.0);
          s->logits = c.f32({mk.rows, mk.vocab}, logits);
          Ops* o = &c.o();
          return BoundCase{[s, o] { o->mask_logits(s->logits, s->mask); },
                           [s, o] { return std::vector{f32_out(*o, "logits", s->logits)}; }};
        });
  }
}

// --- Sampling: ids must match exactly (fixed-point masses, sampling_rule.h); log-probabilities are
// fp32 reductions in different orders.

void add_sample(Table& tb) {
  struct Sm {
    const char* family;
    int64_t rows, vocab;
  };
  for (const Sm sm : {Sm{kTiny, 6, 1000}, Sm{kRagged, 7, 32000}, Sm{kKimi.family, 4, kKimi.vocab},
                      Sm{kDsv3.family, 4, kDsv3.vocab}}) {
    tb.add("sample", sm.family, fmt::format("{} rows, vocab {}, mixed parameters", sm.rows, sm.vocab), 1e-5,
           [sm](Ctx& c) {
             struct S {
               Tensor logits, ids, logprobs;
               std::vector<ops::SampleRow> rows;
             };
             auto s = std::make_shared<S>();
             std::vector<float> logits(static_cast<size_t>(sm.rows * sm.vocab));
             for (auto& x : logits) x = 8.0f * c.rng.uniform() - 4.0f;
             const ops::SampleRow params[] = {{0.0f, 0, 1.0f, 0.0},     {0.7f, 50, 1.0f, 0.37},  {1.0f, 0, 0.9f, 0.81},
                                              {1.3f, 1000, 0.5f, 0.05}, {0.3f, 5, 0.95f, 0.999}, {1.0f, 0, 1.0f, 0.5},
                                              {1.0f, 1, 1.0f, 0.5}};
             for (int64_t r = 0; r < sm.rows; ++r) s->rows.push_back(params[r % std::size(params)]);
             if (sm.rows > 5)  // a row of -inf only: token 0, logprob -inf
               std::fill(logits.begin() + 5 * sm.vocab, logits.begin() + 6 * sm.vocab, -INFINITY);
             s->logits = c.f32({sm.rows, sm.vocab}, logits);
             s->ids = c.o().empty_i32({sm.rows});
             s->logprobs = c.o().empty({sm.rows});
             Ops* o = &c.o();
             return BoundCase{[s, o] { o->sample(s->logits, s->rows, s->ids, &s->logprobs); },
                              [s, o] {
                                return std::vector{i32_out(*o, "ids", s->ids), f32_out(*o, "logprobs", s->logprobs)};
                              }};
           });
  }
}

}  // namespace

Target host_target(ops::Ops& ops) {
  return {&ops, [](const Tensor& t) {
            const auto* p = static_cast<const uint8_t*>(t.raw());
            return std::vector<uint8_t>(p, p + t.nbytes());
          }};
}

const std::vector<std::string>& ops_virtuals() {
  static const std::vector<std::string> v = {"name",
                                             "device_memory",
                                             "plan",
                                             "empty",
                                             "empty_i32",
                                             "upload_linear",
                                             "upload_vector",
                                             "upload_table",
                                             "uploads_copy_weights",
                                             "staging_host_buffer",
                                             "supported_kv_dtypes",
                                             "default_kv_dtype",
                                             "empty_kv_pages",
                                             "from_host_f32",
                                             "embedding",
                                             "rms_norm",
                                             "linear",
                                             "linear_pair",
                                             "rms_norm_linear",
                                             "add_inplace",
                                             "add_rms_norm",
                                             "silu_mul",
                                             "rope_inplace",
                                             "kv_cache_write",
                                             "mla_prepare",
                                             "mla_attention",
                                             "mla_absorb_q",
                                             "mla_attend_latent",
                                             "mla_rank_weigh",
                                             "mla_up_v",
                                             "moe_route",
                                             "moe_experts",
                                             "moe",
                                             "graphed_step",
                                             "step_boundary",
                                             "gather_rows",
                                             "sample",
                                             "mask_logits",
                                             "to_host_f32",
                                             "to_host_i32",
                                             "to_host_bytes",
                                             "from_host_i32"};
  return v;
}

const std::vector<std::string>& shape_families() {
  static const std::vector<std::string> v = {kTiny, kRagged, kKimi.family, kDsv3.family};
  return v;
}

std::vector<OpCase> op_cases(const std::vector<std::string>& families) {
  for (const auto& f : families)
    TESSERA_CHECK(std::find(shape_families().begin(), shape_families().end(), f) != shape_families().end(),
                  "op_cases: unknown shape family '{}'", f);
  Table tb(families);
  add_backend_queries(tb);
  add_uploads(tb);
  add_steps(tb);
  add_embedding(tb);
  add_norms(tb);
  add_linears(tb);
  add_rope_and_gather(tb);
  add_mla(tb);
  add_moe(tb);
  add_sample(tb);
  add_mask_logits(tb);
  return std::move(tb.cases);
}

Comparison compare(const std::vector<float>& got, const std::vector<float>& want) {
  Comparison c;
  if (got.size() != want.size()) {
    c.mismatched = static_cast<int64_t>(std::max(got.size(), want.size()));
    c.rel_rms = INFINITY;
    return c;
  }
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(want[i])) {
      const bool same = std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i];
      c.mismatched += !same;
      continue;
    }
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  c.rel_rms = num == 0 ? 0.0 : den == 0 ? INFINITY : std::sqrt(num / den);
  return c;
}

}  // namespace tessera::ops::conformance
