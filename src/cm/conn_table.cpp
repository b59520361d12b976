// The flat connection table. Read first: src/cm/conn_table.hpp (why open addressing).
#include "cm/conn_table.hpp"

namespace iwcm::cm {

ConnTable::ConnTable(ConnHashKey secret) : secret_(secret), slots_(std::size_t{1} << 6) {
    IWCM_ASSERT(slots_.size() == std::size_t{1} << (32 - shift_));
}

void ConnTable::insert(NodeRef node) {
    IWCM_ASSERT(node);
    const std::uint32_t h = hash_key(secret_, key_of(*node));
    insert(std::move(node), h);
}

void ConnTable::insert(NodeRef node, std::uint32_t h) {
    IWCM_ASSERT(node);
    const ConnKey key = key_of(*node);
    if ((size_ + 1) * 2 > slots_.size()) grow();
    for (std::size_t i = index(h);; i = (i + 1) & mask()) {
        Slot& s = slots_[i];
        if (!s.node) {
            s.node = std::move(node);
            s.hash = h;
            ++size_;
            return;
        }
        IWCM_ASSERT(!(s.hash == h && matches(*s.node, key)));
    }
}

NodeRef ConnTable::erase(const ConnKey& key) {
    const std::uint32_t h = hash_key(secret_, key);
    std::size_t i = index(h);
    for (;; i = (i + 1) & mask()) {
        if (!slots_[i].node) return {};
        if (slots_[i].hash == h && matches(*slots_[i].node, key)) break;
    }
    NodeRef out = std::move(slots_[i].node);
    IWCM_ASSERT(size_ > 0);
    --size_;
    // Backward-shift: pull later entries of the run into the hole when their
    // home slot allows it, so that no probe sequence is broken.
    std::size_t hole = i;
    for (std::size_t j = (i + 1) & mask(); slots_[j].node; j = (j + 1) & mask()) {
        std::size_t home = index(slots_[j].hash);
        bool movable = (j > hole) ? (home <= hole || home > j) : (home <= hole && home > j);
        if (movable) {
            slots_[hole] = std::move(slots_[j]);
            hole = j;
        }
    }
    IWCM_ASSERT(!slots_[hole].node);  // the hole left is empty
    return out;
}

void ConnTable::grow() {
    IWCM_ASSERT(shift_ > 0);
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    --shift_;
    size_ = 0;
    for (Slot& s : old) {
        if (!s.node) continue;
        for (std::size_t i = index(s.hash);; i = (i + 1) & mask()) {
            if (!slots_[i].node) {
                slots_[i] = std::move(s);
                ++size_;
                break;
            }
        }
    }
}

}  // namespace iwcm::cm
