// The connection table: 4-tuple + VLAN -> node, open addressing.
//
// Read first: docs/design.md "Cost facts": a node-based std::unordered_map of 100k
// connections costs its cache misses on every frame. This table is one flat
// array of 16-byte slots (the owning NodeRef and the key's hash), linear
// probing, and backward-shift deletion (no tombstones), kept at most half
// full. A lookup touches one slot line, then the node itself to compare keys.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cm/node.hpp"

namespace iwcm::cm {

struct ConnKey {
    Endpoint local;
    Endpoint remote;
    std::uint16_t vlan = kNoVlan;
    friend bool operator==(const ConnKey&, const ConnKey&) = default;
};

std::uint64_t hash_key(const ConnKey& key);

inline ConnKey key_of(const Node& node) {
    return {node.local, node.remote, node.vlan};
}

// The node's key equals `key` (compared in place, most selective field first).
inline bool matches(const Node& node, const ConnKey& key) {
    return node.remote.port == key.remote.port && node.local.port == key.local.port &&
           node.vlan == key.vlan && node.remote.addr == key.remote.addr &&
           node.local.addr == key.local.addr;
}

class ConnTable {
public:
    ConnTable();
    // Inserts; the table holds `node` until erase(). The key must be absent.
    void insert(NodeRef node);
    Node* find(const ConnKey& key) const;
    // Removes the node; returns its reference (the caller lets it go).
    NodeRef erase(const ConnKey& key);
    std::size_t size() const { return size_; }
    // Room for `n` entries without growing (the table stays at most half full).
    void reserve(std::size_t n) {
        while (slots_.size() < 2 * n) grow();
    }
    template <class Fn>
    void for_each(Fn&& fn) const {
        for (const Slot& s : slots_)
            if (s.node) fn(*s.node);
    }

private:
    struct Slot {
        NodeRef node;
        std::uint32_t hash = 0;
    };
    std::size_t mask() const { return slots_.size() - 1; }
    void grow();

    std::vector<Slot> slots_;
    std::size_t size_ = 0;
};

}  // namespace iwcm::cm
