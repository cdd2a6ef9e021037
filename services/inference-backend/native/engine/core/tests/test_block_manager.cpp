// Block manager: accounting, prefix caching, tenant isolation, copy-on-write, LRU eviction.
// A shadow KV pool (one token id per slot) plays the backend, so a wrong table, a missed
// copy or a false prefix hit shows up as a wrong token read back.
#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <unordered_map>

#include "test_util.h"
#include "strata/block_manager.h"
#include "strata/hash_index.h"
#include "strata/sequence.h"

using namespace strata;

namespace {

std::unique_ptr<Sequence> make_seq(uint64_t id, std::vector<int32_t> tokens, uint64_t salt = 0) {
  SamplingParams p;
  p.max_tokens = 64;
  auto s = std::make_unique<Sequence>(id, std::move(tokens), p);
  s->tenant_salt = salt;
  return s;
}

std::vector<int32_t> range(int32_t from, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = from + i;
  return v;
}

// Plays the backend: runs copies, writes tokens [computed, computed + n) into their slots,
// then commits, as the engine does after a forward.
struct ShadowKv {
  int32_t block_size;
  std::vector<int32_t> slots;
  ShadowKv(int32_t num_blocks, int32_t bs) : block_size(bs), slots(static_cast<size_t>(num_blocks * bs), -1) {}

  void copy(const std::vector<CopyRequest>& copies) {
    for (auto c : copies) {
      std::copy_n(&slots[static_cast<size_t>(c.src * block_size)], block_size, &slots[static_cast<size_t>(c.dst * block_size)]);
    }
  }
  void compute(BlockManager& bm, Sequence& s, int32_t n) {
    for (int32_t pos = s.num_computed_tokens; pos < s.num_computed_tokens + n; ++pos) {
      slot(s, pos) = s.tokens[static_cast<size_t>(pos)];
    }
    s.num_computed_tokens += n;
    bm.commit_computed(s);
  }
  int32_t& slot(const Sequence& s, int32_t pos) {
    return slots[static_cast<size_t>(s.block_table[static_cast<size_t>(pos / block_size)] * block_size + pos % block_size)];
  }
  bool reads_back(const Sequence& s) {
    for (int32_t pos = 0; pos < s.num_computed_tokens; ++pos) {
      if (slot(s, pos) != s.tokens[static_cast<size_t>(pos)]) return false;
    }
    return true;
  }
};

}  // namespace

TEST_CASE("fresh pool: all blocks free, accounting holds") {
  BlockManager bm(10, 4);
  CHECK_EQ(bm.num_free(), 10);
  CHECK_EQ(bm.num_used(), 0);
  CHECK_EQ(bm.num_cached(), 0);
  CHECK(bm.check_invariants().empty());
}

TEST_CASE("admit allocates ceil(chunk / block_size) blocks and frees them back") {
  BlockManager bm(10, 4);
  std::vector<CopyRequest> copies;
  auto a = make_seq(1, range(100, 10));
  CHECK_EQ(bm.admit(*a, 6, copies), 6);  // chunk of 6 of 10 tokens: 2 blocks
  CHECK_EQ(a->block_table.size(), 2u);
  CHECK_EQ(bm.num_used(), 2);
  CHECK(bm.allocate_slots(*a, 0, copies));
  a->num_computed_tokens = 6;
  CHECK(bm.allocate_slots(*a, 4, copies));
  CHECK_EQ(a->block_table.size(), 3u);
  CHECK(copies.empty());
  bm.free(*a);
  CHECK_EQ(bm.num_used(), 0);
  CHECK_EQ(bm.num_free(), 10);  // nothing was committed, so nothing is cached
  CHECK(bm.check_invariants().empty());
}

TEST_CASE("prefix hit on a repeated prompt reuses its full blocks and counts tokens") {
  BlockManager bm(16, 4);
  ShadowKv kv(16, 4);
  std::vector<CopyRequest> copies;
  auto a = make_seq(1, range(100, 10));
  CHECK_EQ(bm.admit(*a, 100, copies), 10);
  kv.compute(bm, *a, 10);
  const std::vector<int32_t> a_blocks = a->block_table;
  bm.free(*a);
  CHECK_EQ(bm.num_cached(), 2);  // two full blocks; the partial third is plain free
  CHECK_EQ(bm.num_free(), 14);

  auto b = make_seq(2, range(100, 10));
  CHECK_EQ(bm.admit(*b, 100, copies), 2);
  CHECK_EQ(b->num_computed_tokens, 8);
  CHECK_EQ(b->block_table[0], a_blocks[0]);
  CHECK_EQ(b->block_table[1], a_blocks[1]);
  CHECK_EQ(bm.prefix_cache_queries(), 20);
  CHECK_EQ(bm.prefix_cache_hits(), 8);
  CHECK_EQ(bm.num_cached(), 0);
  kv.compute(bm, *b, 2);
  CHECK(kv.reads_back(*b));

  auto c = make_seq(3, {100, 101, 102, 103, 999, 998, 997, 996, 1});  // first block only
  CHECK_EQ(bm.admit(*c, 100, copies), 5);
  CHECK_EQ(c->block_table[0], a_blocks[0]);
  CHECK_EQ(bm.ref_count(a_blocks[0]), 2);
  CHECK(copies.empty());
  CHECK(bm.check_invariants().empty());
}

TEST_CASE("a fully cached prompt still recomputes its last token") {
  BlockManager bm(16, 4);
  ShadowKv kv(16, 4);
  std::vector<CopyRequest> copies;
  auto a = make_seq(1, range(100, 8));  // exactly two full blocks
  bm.admit(*a, 100, copies);
  kv.compute(bm, *a, 8);
  const std::vector<int32_t> a_blocks = a->block_table;

  // Still held by a: b shares block 0 and gets a copy of block 1 to rewrite slot 7 in.
  auto b = make_seq(2, range(100, 8));
  CHECK_EQ(bm.admit(*b, 100, copies), 1);
  CHECK_EQ(b->num_computed_tokens, 7);
  CHECK_EQ(b->block_table[0], a_blocks[0]);
  CHECK(b->block_table[1] != a_blocks[1]);
  CHECK_EQ(copies.size(), 1u);
  CHECK(!copies.empty() && copies[0].src == a_blocks[1] && copies[0].dst == b->block_table[1]);
  CHECK_EQ(bm.ref_count(a_blocks[1]), 1);
  kv.copy(copies);
  kv.compute(bm, *b, 1);
  CHECK(kv.reads_back(*b));
  CHECK(kv.reads_back(*a));

  // Only in the cache: c takes block 1 itself out of the cache, no copy.
  bm.free(*a);
  bm.free(*b);
  copies.clear();
  auto c = make_seq(3, range(100, 8));
  CHECK_EQ(bm.admit(*c, 100, copies), 1);
  CHECK_EQ(c->num_computed_tokens, 7);
  CHECK(copies.empty());
  CHECK_EQ(c->block_table[1], a_blocks[1]);
  CHECK_EQ(bm.prefix_cache_hits(), 14);
  kv.compute(bm, *c, 1);  // registered again once computed
  bm.free(*c);
  auto d = make_seq(4, range(100, 9));
  CHECK_EQ(bm.admit(*d, 100, copies), 1);
  CHECK_EQ(d->num_computed_tokens, 8);
  CHECK(bm.check_invariants().empty());
}

TEST_CASE("different tenant salts never share blocks") {
  BlockManager bm(16, 4);
  ShadowKv kv(16, 4);
  std::vector<CopyRequest> copies;
  auto a = make_seq(1, range(100, 12), /*salt=*/1);
  bm.admit(*a, 100, copies);
  kv.compute(bm, *a, 12);
  auto b = make_seq(2, range(100, 12), /*salt=*/2);
  CHECK_EQ(bm.admit(*b, 100, copies), 12);
  CHECK_EQ(b->num_computed_tokens, 0);
  for (int32_t x : b->block_table) CHECK(std::find(a->block_table.begin(), a->block_table.end(), x) == a->block_table.end());
  CHECK_EQ(bm.prefix_cache_hits(), 0);
  auto c = make_seq(3, range(100, 12), /*salt=*/1);
  CHECK_EQ(bm.admit(*c, 100, copies), 1);  // same tenant: hits, all but the last token
  CHECK_EQ(bm.prefix_cache_hits(), 11);
}

TEST_CASE("copy-on-write when appending into a shared partial block") {
  BlockManager bm(16, 4);
  ShadowKv kv(16, 4);
  std::vector<CopyRequest> copies;
  auto a = make_seq(1, range(100, 6));
  bm.admit(*a, 100, copies);
  kv.compute(bm, *a, 6);
  auto b = make_seq(2, range(100, 6));
  bm.fork(*a, *b);
  CHECK_EQ(bm.ref_count(a->block_table[0]), 2);
  CHECK_EQ(bm.ref_count(a->block_table[1]), 2);
  CHECK_EQ(bm.num_used(), 2);

  b->append_token(7);
  CHECK(bm.allocate_slots(*b, 1, copies));
  CHECK_EQ(copies.size(), 1u);
  CHECK(!copies.empty() && copies[0].src == a->block_table[1] && copies[0].dst == b->block_table[1]);
  CHECK_EQ(b->block_table[0], a->block_table[0]);  // the full block stays shared
  CHECK_EQ(bm.ref_count(a->block_table[1]), 1);
  CHECK_EQ(bm.ref_count(b->block_table[1]), 1);
  kv.copy(copies);
  kv.compute(bm, *b, 1);

  copies.clear();
  a->append_token(8);
  CHECK(bm.allocate_slots(*a, 1, copies));
  CHECK(copies.empty());  // a is now the only holder
  kv.compute(bm, *a, 1);
  CHECK(kv.reads_back(*a));
  CHECK(kv.reads_back(*b));
}

TEST_CASE("cached blocks are evicted least recently freed first; a hit refreshes them") {
  BlockManager bm(6, 4);
  ShadowKv kv(6, 4);
  std::vector<CopyRequest> copies;
  auto a = make_seq(1, range(100, 9));
  auto b = make_seq(2, range(200, 9));
  bm.admit(*a, 100, copies);
  bm.admit(*b, 100, copies);
  kv.compute(bm, *a, 9);
  kv.compute(bm, *b, 9);
  const auto a_blocks = a->block_table, b_blocks = b->block_table;
  bm.free(*a);  // LRU order now: a1, a0
  bm.free(*b);  // then b1, b0
  CHECK_EQ(bm.num_cached(), 4);
  CHECK_EQ(bm.num_free(), 2);

  // a hits again, so its blocks move to the most recent end once freed: b1, b0, a1, a0.
  auto a2 = make_seq(3, range(100, 9));
  CHECK_EQ(bm.admit(*a2, 100, copies), 1);
  bm.free(*a2);
  CHECK_EQ(bm.num_cached(), 4);

  // Four fresh blocks: the two free ones, then b1 and b0 evicted, a's kept.
  auto c = make_seq(4, range(300, 16));
  CHECK_EQ(bm.admit(*c, 100, copies), 16);
  CHECK(!bm.is_cached(b_blocks[0]) && !bm.is_cached(b_blocks[1]));
  CHECK(bm.is_cached(a_blocks[0]) && bm.is_cached(a_blocks[1]));
  CHECK_EQ(c->block_table[2], b_blocks[1]);  // the tail of b went first
  CHECK_EQ(c->block_table[3], b_blocks[0]);

  auto b2 = make_seq(5, range(200, 9));
  CHECK_EQ(bm.admit(*b2, 100, copies), 0);  // full pool: b misses and does not fit
  CHECK(b2->block_table.empty());
  bm.free(*c);
  CHECK_EQ(bm.admit(*b2, 100, copies), 9);  // b's blocks are gone: a full recompute
  CHECK_EQ(b2->num_computed_tokens, 0);
  auto a3 = make_seq(6, range(100, 9));
  CHECK_EQ(bm.admit(*a3, 100, copies), 1);
  CHECK_EQ(a3->block_table[0], a_blocks[0]);
  CHECK(bm.check_invariants().empty());
}

TEST_CASE("admit fails without side effects when the pool is short") {
  BlockManager bm(4, 4);
  std::vector<CopyRequest> copies;
  auto a = make_seq(1, range(0, 12));
  CHECK_EQ(bm.admit(*a, 100, copies), 12);
  auto b = make_seq(2, range(50, 8));
  CHECK_EQ(bm.admit(*b, 100, copies), 0);
  CHECK_EQ(bm.admit(*b, 4, copies), 4);  // a smaller chunk fits in the last block
  CHECK_EQ(bm.num_free(), 0);
  b->num_computed_tokens = 4;
  CHECK(!bm.can_allocate(*b, 1));
  CHECK(!bm.allocate_slots(*b, 1, copies));
  CHECK_EQ(b->block_table.size(), 1u);
  CHECK_EQ(bm.max_new_tokens(*b), 0);
  CHECK(bm.check_invariants().empty());
}

// 10,000 random operations over a small pool with shared prefixes, two tenants and forks.
// After each one: the accounting invariant, ref counts equal to table references, no block
// shared across tenants, and every live sequence reads its own tokens back through its table.
TEST_CASE("randomized 10,000 operations keep exact accounting and correct contents") {
  constexpr int32_t kBlocks = 48, kBs = 4;
  BlockManager bm(kBlocks, kBs);
  ShadowKv kv(kBlocks, kBs);
  std::mt19937 rng(1234);
  auto pick = [&](int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng); };
  std::vector<std::unique_ptr<Sequence>> live;
  std::vector<CopyRequest> copies;
  const std::vector<int32_t> prefixes[3] = {range(10, 12), range(40, 8), range(70, 5)};
  uint64_t next_id = 0;
  int64_t num_copies = 0, num_rejected = 0;
  int failures_before = strata_test::failures();

  for (int op = 0; op < 10000 && strata_test::failures() == failures_before; ++op) {
    copies.clear();
    const int32_t kind = pick(0, 9);
    if (kind <= 2 || live.empty()) {  // new sequence, often with a shared prefix
      std::vector<int32_t> tokens = prefixes[pick(0, 2)];
      if (pick(0, 3) == 0) tokens.clear();
      const int32_t extra = pick(1, 14);
      for (int32_t i = 0; i < extra; ++i) tokens.push_back(pick(0, 3) == 0 ? 500 + pick(0, 3) : 1000 + static_cast<int32_t>(next_id));
      auto s = make_seq(++next_id, tokens, static_cast<uint64_t>(pick(0, 1)));
      if (bm.admit(*s, pick(1, 24), copies) > 0) {
        num_copies += static_cast<int64_t>(copies.size());
        kv.copy(copies);
        live.push_back(std::move(s));
      } else {
        ++num_rejected;
        CHECK(s->block_table.empty());
      }
    } else {
      const size_t i = static_cast<size_t>(pick(0, static_cast<int32_t>(live.size()) - 1));
      Sequence& s = *live[i];
      if (kind <= 4) {  // run what was allocated (a prefill chunk or a decode)
        const int32_t allocated = static_cast<int32_t>(s.block_table.size()) * kBs;
        if (s.num_computed_tokens < s.num_tokens()) {
          kv.compute(bm, s, std::min(s.num_tokens(), allocated) - s.num_computed_tokens);
        }
      } else if (kind == 5) {  // grow: sample a token if all are computed, then allocate
        if (s.num_computed_tokens == s.num_tokens()) s.append_token(2000 + pick(0, 5));
        const int32_t want = std::min(pick(1, 8), s.num_tokens() - s.num_computed_tokens);
        if (s.num_tokens() < 48 && bm.allocate_slots(s, want, copies)) {
          num_copies += static_cast<int64_t>(copies.size());
          kv.copy(copies);
        }
      } else if (kind == 6 && s.num_computed_tokens == s.num_tokens()) {  // fork
        auto child = make_seq(++next_id, s.tokens, s.tenant_salt);
        bm.fork(s, *child);
        live.push_back(std::move(child));
      } else {
        bm.free(s);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }

    const std::string err = bm.check_invariants();
    CHECK(err.empty());
    if (!err.empty()) std::printf("  op %d: %s\n", op, err.c_str());
    CHECK_EQ(bm.num_free() + bm.num_used() + bm.num_cached(), kBlocks);
    std::map<int32_t, int32_t> refs;
    std::map<int32_t, std::set<uint64_t>> salts;
    for (const auto& s : live) {
      for (int32_t b : s->block_table) {
        ++refs[b];
        salts[b].insert(s->tenant_salt);
      }
      CHECK(kv.reads_back(*s));
    }
    CHECK_EQ(static_cast<int32_t>(refs.size()), bm.num_used());
    for (const auto& [b, n] : refs) {
      CHECK_EQ(bm.ref_count(b), n);
      CHECK_EQ(salts[b].size(), 1u);
    }
  }
  CHECK(bm.prefix_cache_hits() > 0);
  CHECK(num_copies > 0);
  CHECK(num_rejected > 0);
  std::printf("  hits %lld of %lld tokens, %lld copies, %lld admissions rejected\n",
              static_cast<long long>(bm.prefix_cache_hits()), static_cast<long long>(bm.prefix_cache_queries()),
              static_cast<long long>(num_copies), static_cast<long long>(num_rejected));
  for (auto& s : live) bm.free(*s);
  CHECK_EQ(bm.num_used(), 0);
  CHECK_EQ(bm.num_free() + bm.num_cached(), kBlocks);
  CHECK(bm.check_invariants().empty());
}

// Keys crowd six home slots, two of them at the table's end, so probe runs collide and wrap.
TEST_CASE("HashIndex agrees with std::unordered_map under colliding, wrapping inserts and erases") {
  HashIndex index(64);  // 128 slots
  std::unordered_map<uint64_t, int32_t> reference;
  std::mt19937_64 rng(5);
  const uint64_t homes[] = {0, 1, 2, 125, 126, 127};
  const int failures_before = strata_test::failures();
  for (int op = 0; op < 20000 && strata_test::failures() == failures_before; ++op) {
    const uint64_t key = ((rng() % 40) << 7) | homes[rng() % 6];
    if (rng() % 2 && reference.size() < 64) {
      const bool fresh = !reference.contains(key);
      CHECK_EQ(index.insert(key, op), fresh);
      if (fresh) reference[key] = op;
    } else {
      index.erase(key);
      reference.erase(key);
    }
    CHECK_EQ(index.size(), reference.size());
    for (const auto& [k, v] : reference) CHECK_EQ(index.find(k), v);
  }
  int32_t seen = 0;
  index.for_each([&](uint64_t k, int32_t v) { seen += reference.contains(k) && reference[k] == v; });
  CHECK_EQ(seen, static_cast<int32_t>(reference.size()));
  CHECK_EQ(index.find(0xdeadbeefull << 7), -1);
}

TEST_MAIN()
