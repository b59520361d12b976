// The connection table: 4-tuple + VLAN -> node, open addressing.
//
// Read first: docs/design.md "Cost facts": a node-based std::unordered_map of 100k
// connections costs its cache misses on every frame. This table is one flat
// array of 16-byte slots (the owning NodeRef and the key's hash), linear
// probing, and backward-shift deletion (no tombstones), kept at most half
// full. A lookup touches one slot line, then the node itself to compare keys.
//
// The slot of an IPv4 connection comes from its flow hash (include/iwcm/shard.hpp), the
// hash a driver already computes to steer the frame to a thread, as a NIC hands its RSS
// hash in the receive descriptor: Core::receive(now, frame, flow_hash) passes it down, and
// the table only multiplies it by its secret (hash_flow). Without it the core computes the
// flow hash itself. IPv6 keeps a hash of its own (hash_key says why).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cm/node.hpp"
#include "iwcm/shard.hpp"

namespace iwcm::cm {

struct ConnKey {
    Endpoint local;
    Endpoint remote;
    std::uint16_t vlan = kNoVlan;
    friend bool operator==(const ConnKey&, const ConnKey&) = default;
};

// The table's secret, drawn from CoreConfig::isn_secret when the core starts, and the key
// of the flow hash the core's driver computes (CoreConfig::flow_key).
struct ConnHashKey {
    std::uint64_t k0 = 0;
    std::uint64_t k1 = 0;
    std::uint64_t flow_key = 0;
};

// The slot hash of an IPv4 connection from its flow hash: the table's index is the top bits
// of this 32-bit value (ConnTable::index).
//
// Why keyed, and why this is enough. With an unkeyed slot function a peer can work out offline
// a set of its own tuples (addresses and ports it may choose) that land in one run of the
// table, and make every lookup walk that run (a collision flood). The flow hash alone is not
// secret: its key may be zero, and a peer can compute it. So the slot is the flow hash
// (with the VLAN) times a secret odd multiplier, top bits taken: Dietzfelbinger's
// multiply-shift (1997). For any two distinct 64-bit inputs the chance, over the multiplier,
// that they share a slot is at most 2 / slots, whatever the peer chose, since slots and
// hashes never leave the core. Distinct tuples give distinct inputs: the IPv4 flow hash is
// one to one in the XOR of the addresses and the unordered pair of ports (shard.hpp,
// flow::hash_v4, flow::port_word), so for a given local address tuples that share it are a
// tuple and its mirror image (A:p -> B:q, A:q -> B:p), and across local addresses at most a
// handful more (FlowHash.DistinctPortPairsNeverShareAHash). (Pairwise bounds are not the
// 5-independence linear probing needs for its worst case; they do keep a peer from choosing a run.)
// The same reasoning is Linux's for inet_ehashfn (jhash of the tuple with a random seed).
inline std::uint32_t hash_flow(const ConnHashKey& secret, std::uint64_t flow, std::uint16_t vlan) {
    return static_cast<std::uint32_t>(((flow ^ vlan) * (secret.k0 | 1)) >> 32);
}

// The key's slot hash, keyed by `secret`. Inline: every frame asks it once (unless its
// driver hands the flow hash).
//
// IPv4 goes through the flow hash (hash_flow). IPv6 does not: its flow hash folds 32 bytes of
// addresses into 64 bits by an addition a peer can solve (for chosen interface identifiers it
// makes any number of tuples with one flow hash, whatever the key), and no slot function
// after it can separate equal inputs. So IPv6 tuples are hashed whole: the secret enters the
// first multiply and again before the second, so which tuples share a slot depends on 128
// bits the peer never sees. It is not a cryptographic PRF (the ISN, whose values a peer does
// see, takes SipHash-2-4: isn.hpp); it only has to make a flood expensive, for the price of
// a few multiplies. The addresses are folded with a rotate, which is one to one in the remote
// address for a given local one.
inline std::uint32_t hash_key(const ConnHashKey& secret, const ConnKey& key) {
    if (!key.local.addr.is_v6())
        return hash_flow(secret, flow_hash_v4(key.local, key.remote, secret.flow_key), key.vlan);
    IWCM_ASSERT(key.remote.addr.is_v6());  // both ends of a connection share a family
    const auto& l = key.local.addr.raw();
    const auto& r = key.remote.addr.raw();
    std::uint64_t l0;
    std::uint64_t r0;
    std::uint64_t l1;
    std::uint64_t r1;
    std::memcpy(&l0, l.data(), 8);
    std::memcpy(&r0, r.data(), 8);
    std::memcpy(&l1, l.data() + 8, 8);
    std::memcpy(&r1, r.data() + 8, 8);
    // A multiply carries a bit's effect only upwards: what the last one reads must have every
    // input in its low half, so the ports sit low and each product's high half is folded down.
    const std::uint64_t ports = std::uint64_t{key.local.port} |
                                (std::uint64_t{key.remote.port} << 16) |
                                (std::uint64_t{key.vlan} << 32);
    std::uint64_t h = (l0 ^ std::rotl(r0, 32) ^ secret.k0) * 0x9E3779B97F4A7C15ULL;
    h ^= h >> 32;
    h = (h ^ l1 ^ std::rotl(r1, 32)) * 0xD6E8FEB86659FD93ULL;
    h ^= h >> 32;
    h = (h ^ ports ^ secret.k1) * 0xC2B2AE3D27D4EB4FULL;
    // The high half: its bits depend on every input bit below them.
    return static_cast<std::uint32_t>(h >> 32);
}

// The slot hash of `key` whose flow hash (with the table's flow key) is `flow`: hash_key
// without computing the flow hash again.
inline std::uint32_t hash_key(const ConnHashKey& secret, const ConnKey& key, std::uint64_t flow) {
    if (!key.local.addr.is_v6()) return hash_flow(secret, flow, key.vlan);
    return hash_key(secret, key);
}

inline ConnKey key_of(const Node& node) {
    return {node.local, node.remote, node.vlan};
}

// A key's fields where they already lie (the receive path reads them from the parsed
// frame): a lookup builds no ConnKey, a copy of 40 bytes on every frame.
struct ConnKeyView {
    const IpAddr& local_addr;
    std::uint16_t local_port;
    const IpAddr& remote_addr;
    std::uint16_t remote_port;
    std::uint16_t vlan;
};

inline ConnKeyView view_of(const ConnKey& key) {
    return {key.local.addr, key.local.port, key.remote.addr, key.remote.port, key.vlan};
}

// The node's key equals `key` (compared in place, most selective field first).
inline bool matches(const Node& node, const ConnKeyView& key) {
    return node.remote.port == key.remote_port && node.local.port == key.local_port &&
           node.vlan == key.vlan && node.remote.addr == key.remote_addr &&
           node.local.addr == key.local_addr;
}

inline bool matches(const Node& node, const ConnKey& key) {
    return matches(node, view_of(key));
}

class ConnTable {
public:
    explicit ConnTable(ConnHashKey secret = {});
    // Inserts; the table holds `node` until erase(). The key must be absent.
    void insert(NodeRef node);
    // The same with the key's slot hash already known (hash_key).
    void insert(NodeRef node, std::uint32_t h);
    Node* find(const ConnKey& key) const { return find(key, hash_key(secret_, key)); }
    // The same with the key's slot hash already known (hash_key).
    Node* find(const ConnKey& key, std::uint32_t h) const { return find(view_of(key), h); }
    Node* find(const ConnKeyView& key, std::uint32_t h) const {
        for (std::size_t i = index(h);; i = (i + 1) & mask()) {
            const Slot& s = slots_[i];
            if (!s.node) return nullptr;
            if (s.hash == h && matches(*s.node, key)) return s.node.get();
        }
    }
    // Starts loading the home slot of slot hash `h` into the cache: a caller that knows the
    // hash before it can look up (the receive path, from the driver's flow hash) overlaps the
    // slot's load with its other work instead of waiting for it in find().
    void prefetch(std::uint32_t h) const { __builtin_prefetch(&slots_[index(h)]); }
    // Removes the node; returns its reference (the caller lets it go).
    NodeRef erase(const ConnKey& key);
    std::size_t size() const { return size_; }
    const ConnHashKey& secret() const { return secret_; }
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
    // A hash's home slot: its top bits (the multiply-shift of hash_flow keeps its promise for
    // the top bits of the product).
    std::size_t index(std::uint32_t h) const { return h >> shift_; }
    void grow();

    ConnHashKey secret_;
    std::vector<Slot> slots_;
    std::size_t size_ = 0;
    unsigned shift_ = 32 - 6;  // 32 - log2(slots_.size())
};

}  // namespace iwcm::cm
