#include "text/tokenizer/bpe.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <climits>
#include <cstddef>
#include <queue>

namespace tessera::text {

void PairMap::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  if (cap > keys_.size()) rehash(cap);
}

void PairMap::rehash(size_t capacity) {
  std::vector<uint64_t> old_keys = std::move(keys_);
  std::vector<Value> old_values = std::move(values_);
  keys_.assign(capacity, kEmpty);
  values_.assign(capacity, Value{0, 0});
  mask_ = capacity - 1;
  shift_ = 64 - __builtin_ctzll(capacity);
  size_ = 0;
  for (size_t i = 0; i < old_keys.size(); ++i) {
    if (old_keys[i] != kEmpty) {
      insert(static_cast<int32_t>(old_keys[i] >> 32), static_cast<int32_t>(old_keys[i] & 0xFFFFFFFFu), old_values[i]);
    }
  }
}

void PairMap::insert(int32_t left, int32_t right, Value v) {
  if ((size_ + 1) * 2 > keys_.size()) rehash(keys_.empty() ? 16 : keys_.size() * 2);
  const uint64_t key = pack(left, right);
  size_t i = hash(key);
  while (true) {
    if (keys_[i] == key) {
      if (v.rank < values_[i].rank) values_[i] = v;
      return;
    }
    if (keys_[i] == kEmpty) {
      keys_[i] = key;
      values_[i] = v;
      ++size_;
      return;
    }
    i = (i + 1) & mask_;
  }
}

void BpeModel::merge_linear(std::vector<int32_t>& sym) const {
  // ranks[i] / merged[i] describe the pair (sym[i], sym[i+1]).
  const size_t n = sym.size();
  if (n < 2) return;
  thread_local std::vector<int32_t> ranks, merged;
  ranks.resize(n - 1);
  merged.resize(n - 1);
  auto fill = [&](size_t i) {
    const PairMap::Value* v = pairs.find(sym[i], sym[i + 1]);
    ranks[i] = v ? v->rank : INT_MAX;
    merged[i] = v ? v->merged : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) fill(i);
  size_t len = n;
  while (len > 1) {
    size_t best = 0;
    int32_t best_rank = ranks[0];
    for (size_t i = 1; i + 1 < len; ++i) {
      if (ranks[i] < best_rank) {
        best_rank = ranks[i];
        best = i;
      }
    }
    if (best_rank == INT_MAX) break;
    sym[best] = merged[best];
    // Remove symbol best+1 and pair best+1 (the pair (sym[best+1], sym[best+2]) is gone).
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    if (best + 1 < len - 1) {
      ranks.erase(ranks.begin() + static_cast<std::ptrdiff_t>(best) + 1);
      merged.erase(merged.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    --len;
    if (best + 1 < len) fill(best);
    if (best > 0) fill(best - 1);
  }
  sym.resize(len);
}

void BpeModel::merge_heap(std::vector<int32_t>& sym) const {
  // Doubly linked symbols; heap entries are validated on pop by the merged id they expect. The
  // concatenation at a given left position only ever grows, so a matching merged id means the
  // entry is current.
  const int n = static_cast<int>(sym.size());
  if (n < 2) return;
  struct Node {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Node> nodes(n);
  for (int i = 0; i < n; ++i) nodes[i] = {sym[i], i - 1, i + 1 < n ? i + 1 : -1, true};
  struct Entry {
    int32_t rank;
    int pos;
    int32_t merged;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](int pos) {
    const int nx = nodes[pos].next;
    if (nx < 0) return;
    if (const PairMap::Value* v = pairs.find(nodes[pos].id, nodes[nx].id)) heap.push({v->rank, pos, v->merged});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Entry top = heap.top();
    heap.pop();
    Node& left = nodes[top.pos];
    if (!left.alive || left.next < 0) continue;
    const PairMap::Value* v = pairs.find(left.id, nodes[left.next].id);
    if (!v || v->merged != top.merged) continue;
    Node& right = nodes[left.next];
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) nodes[right.next].prev = top.pos;
    if (left.prev >= 0) push(left.prev);
    push(top.pos);
  }
  sym.clear();
  for (int i = 0; i >= 0; i = nodes[i].next) sym.push_back(nodes[i].id);
}

uint64_t BpeModel::next_cache_key() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1);
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  // Natural text repeats its words constantly; a small direct-mapped per-thread cache of merged
  // pieces skips the merge loop for them (no locking: each thread has its own).
  constexpr size_t kSlots = 4096, kMaxLen = 24;
  struct Slot {
    uint64_t model = 0;
    std::string piece;
    std::vector<int32_t> ids;
  };
  if (piece.empty()) return;
  if (piece.size() > kMaxLen) return encode_uncached(piece, out);
  thread_local std::vector<Slot> cache(kSlots);
  Slot& slot = cache[std::hash<std::string_view>{}(piece) & (kSlots - 1)];
  if (slot.model == cache_key && slot.piece == piece) {
    out.insert(out.end(), slot.ids.begin(), slot.ids.end());
    return;
  }
  const size_t before = out.size();
  encode_uncached(piece, out);
  slot.model = cache_key;
  slot.piece.assign(piece);
  slot.ids.assign(out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
}

void BpeModel::encode_uncached(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (whole_piece_first && whole) {
    auto it = whole->find(piece);
    if (it != whole->end()) {
      out.push_back(it->second);
      return;
    }
  }
  thread_local std::vector<int32_t> sym;
  sym.clear();
  for (unsigned char b : piece) {
    if (byte_ids[b] >= 0) sym.push_back(byte_ids[b]);
  }
  // Linear scans win on short pieces; long runs (thousands of repeated chars) need the heap.
  if (sym.size() <= 48) {
    merge_linear(sym);
  } else {
    merge_heap(sym);
  }
  out.insert(out.end(), sym.begin(), sym.end());
}

}  // namespace tessera::text
