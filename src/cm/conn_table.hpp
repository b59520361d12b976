// The connection table: 4-tuple + VLAN -> node, open addressing.
//
// Read first: docs/design.md "Cost facts": a node-based std::unordered_map of 100k
// connections costs its cache misses on every frame. This table is one flat
// array of 16-byte slots (the owning NodeRef and the key's hash), linear
// probing, and backward-shift deletion (no tombstones), kept at most half
// full. A lookup touches one slot line, then the node itself to compare keys.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cm/node.hpp"

namespace iwcm::cm {

struct ConnKey {
    Endpoint local;
    Endpoint remote;
    std::uint16_t vlan = kNoVlan;
    friend bool operator==(const ConnKey&, const ConnKey&) = default;
};

// The table's secret, drawn from CoreConfig::isn_secret when the core starts.
struct ConnHashKey {
    std::uint64_t k0 = 0;
    std::uint64_t k1 = 0;
};

// The key's slot hash, keyed by `secret`. Inline: every frame asks it once.
//
// Why a keyed hash, and why this one. With an unkeyed hash a peer can work out offline a set
// of its own tuples (addresses and ports it may choose) that land in one run of the table, and
// make every lookup walk that run (a collision flood). Here the secret enters the first
// multiply and again before the second, so which tuples share a slot depends on 128 bits the
// peer never sees; hashes and slots never leave the core. The same reasoning is Linux's for
// inet_ehashfn (jhash of the tuple with a random seed). It is not a cryptographic PRF: the
// ISN, whose values a peer does see, takes SipHash-2-4 (isn.hpp); this hash only has to make
// a flood expensive, for the price of two multiplies. The addresses go in side by side (IPv4)
// or folded with a rotate (IPv6), which is one to one in the remote address for a given local
// one, the only part of the tuple a peer chooses besides its port.
inline std::uint32_t hash_key(const ConnHashKey& secret, const ConnKey& key) {
    const auto& l = key.local.addr.raw();
    const auto& r = key.remote.addr.raw();
    std::uint64_t l0;
    std::uint64_t r0;
    std::memcpy(&l0, l.data(), 8);
    std::memcpy(&r0, r.data(), 8);
    // A multiply carries a bit's effect only upwards: what the last one reads must have every
    // input in its low half, so the ports sit low and each product's high half is folded down.
    const std::uint64_t ports = std::uint64_t{key.local.port} |
                                (std::uint64_t{key.remote.port} << 16) |
                                (std::uint64_t{key.vlan} << 32) |
                                (static_cast<std::uint64_t>(key.local.addr.family()) << 48);
    // IPv4: the unused bytes are zero, so the two addresses fill one word without overlap.
    std::uint64_t h = (l0 ^ std::rotl(r0, 32) ^ secret.k0) * 0x9E3779B97F4A7C15ULL;
    h ^= h >> 32;
    if (key.local.addr.is_v6()) {
        std::uint64_t l1;
        std::uint64_t r1;
        std::memcpy(&l1, l.data() + 8, 8);
        std::memcpy(&r1, r.data() + 8, 8);
        h = (h ^ l1 ^ std::rotl(r1, 32)) * 0xD6E8FEB86659FD93ULL;
        h ^= h >> 32;
    }
    h = (h ^ ports ^ secret.k1) * 0xC2B2AE3D27D4EB4FULL;
    // The high half: its bits depend on every input bit below them.
    return static_cast<std::uint32_t>(h >> 32);
}

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
    explicit ConnTable(ConnHashKey secret = {});
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

    ConnHashKey secret_;
    std::vector<Slot> slots_;
    std::size_t size_ = 0;
};

}  // namespace iwcm::cm
