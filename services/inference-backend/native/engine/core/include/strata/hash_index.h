// Map from a 64-bit block hash to a block id for the prefix cache: open addressing with
// linear probing, sized once for the pool, so no allocation and no pointer chasing per
// lookup. Keys are already well-mixed hashes and index the table directly.
#pragma once

#include <cstdint>
#include <vector>

namespace strata {

class HashIndex {
 public:
  explicit HashIndex(int32_t max_entries) {
    size_t n = 16;
    while (n < 2 * static_cast<size_t>(max_entries)) n *= 2;  // load factor <= 0.5
    slots_.assign(n, Slot{0, -1});
    mask_ = n - 1;
  }

  int32_t find(uint64_t key) const {
    for (size_t i = key & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.value < 0) return -1;
      if (s.key == key) return s.value;
    }
  }
  bool contains(uint64_t key) const { return find(key) >= 0; }

  // False when key is already present (the existing value is kept).
  bool insert(uint64_t key, int32_t value) {
    size_t i = key & mask_;
    for (; slots_[i].value >= 0; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return false;
    }
    slots_[i] = {key, value};
    ++size_;
    return true;
  }

  // Backward-shift deletion keeps every probe run unbroken without tombstones.
  void erase(uint64_t key) {
    size_t i = key & mask_;
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].value < 0) return;
      if (slots_[i].key == key) break;
    }
    for (size_t j = i;;) {
      j = (j + 1) & mask_;
      if (slots_[j].value < 0) break;
      const size_t home = slots_[j].key & mask_;
      // Move j back into the hole at i unless its home lies cyclically in (i, j].
      const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
      if (!stays) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i].value = -1;
    --size_;
  }

  size_t size() const { return size_; }
  template <class F>
  void for_each(F f) const {
    for (const Slot& s : slots_) {
      if (s.value >= 0) f(s.key, s.value);
    }
  }

 private:
  struct Slot {
    uint64_t key;
    int32_t value;  // -1 = empty
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace strata
