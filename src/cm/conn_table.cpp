// The flat connection table. Read first: src/cm/conn_table.hpp (why open addressing).
#include "cm/conn_table.hpp"

#include <cstring>

namespace iwcm::cm {

namespace {

// A 64-bit mix (the murmur3 finaliser) over the key's words.
std::uint64_t mix(std::uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

std::uint64_t load64(const std::uint8_t* p) {
    std::uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

}  // namespace

std::uint64_t hash_key(const ConnKey& key) {
    // Ports and VLAN in one word, then the addresses' words, each folded in
    // with a multiply (the connection table needs spread, not secrecy: ISNs
    // are where RFC 6528's keyed hash matters).
    const auto& l = key.local.addr.raw();
    const auto& r = key.remote.addr.raw();
    std::uint64_t h = (std::uint64_t{key.local.port} << 48) |
                      (std::uint64_t{key.remote.port} << 32) | (std::uint64_t{key.vlan} << 16) |
                      static_cast<std::uint64_t>(key.local.addr.family());
    h = (h ^ load64(l.data())) * 0x9E3779B97F4A7C15ULL;
    h = (h ^ load64(r.data())) * 0xC2B2AE3D27D4EB4FULL;
    if (key.local.addr.is_v6()) {
        h = (h ^ load64(l.data() + 8)) * 0x9E3779B97F4A7C15ULL;
        h = (h ^ load64(r.data() + 8)) * 0xC2B2AE3D27D4EB4FULL;
    }
    return mix(h);
}

ConnTable::ConnTable() : slots_(64) {}

void ConnTable::insert(NodeRef node) {
    IWCM_ASSERT(node);
    if ((size_ + 1) * 2 > slots_.size()) grow();
    ConnKey key = key_of(*node);
    auto h = static_cast<std::uint32_t>(hash_key(key));
    for (std::size_t i = h & mask();; i = (i + 1) & mask()) {
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

Node* ConnTable::find(const ConnKey& key) const {
    auto h = static_cast<std::uint32_t>(hash_key(key));
    for (std::size_t i = h & mask();; i = (i + 1) & mask()) {
        const Slot& s = slots_[i];
        if (!s.node) return nullptr;
        if (s.hash == h && matches(*s.node, key)) return s.node.get();
    }
}

NodeRef ConnTable::erase(const ConnKey& key) {
    auto h = static_cast<std::uint32_t>(hash_key(key));
    std::size_t i = h & mask();
    for (;; i = (i + 1) & mask()) {
        if (!slots_[i].node) return {};
        if (slots_[i].hash == h && matches(*slots_[i].node, key)) break;
    }
    NodeRef out = std::move(slots_[i].node);
    --size_;
    // Backward-shift: pull later entries of the run into the hole when their
    // home slot allows it, so that no probe sequence is broken.
    std::size_t hole = i;
    for (std::size_t j = (i + 1) & mask(); slots_[j].node; j = (j + 1) & mask()) {
        std::size_t home = slots_[j].hash & mask();
        bool movable = (j > hole) ? (home <= hole || home > j) : (home <= hole && home > j);
        if (movable) {
            slots_[hole] = std::move(slots_[j]);
            hole = j;
        }
    }
    return out;
}

void ConnTable::grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    size_ = 0;
    for (Slot& s : old) {
        if (!s.node) continue;
        for (std::size_t i = s.hash & mask();; i = (i + 1) & mask()) {
            if (!slots_[i].node) {
                slots_[i] = std::move(s);
                ++size_;
                break;
            }
        }
    }
}

}  // namespace iwcm::cm
