// The connection table's keyed hash: it spreads the tuples a peer can vary over the slots,
// and which tuples share a slot depends on the secret.
//
// Read first: src/cm/conn_table.hpp (hash_key and why it is keyed).
#include "cm/conn_table.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

namespace iwcm::cm {
namespace {

constexpr ConnHashKey kSecret{0x0123456789abcdefULL, 0xfedcba9876543210ULL};

ConnKey v4_key(std::uint16_t local_port, std::uint8_t remote_last, std::uint16_t remote_port) {
    return {{Ipv4Addr{{10, 0, 0, 1}}, local_port},
            {Ipv4Addr{{10, 0, 1, remote_last}}, remote_port},
            kNoVlan};
}

// How 4096 keys fall into 8192 slots (the table keeps at most half full): the slots used and
// the most keys in one. A random function uses about 3 222 and puts at most 5 or 6 in one; a
// hash blind to the varied field puts them all in one.
struct Spread {
    std::size_t used = 0;
    std::size_t fullest = 0;
};

Spread spread(const std::vector<ConnKey>& keys, const ConnHashKey& secret) {
    std::map<std::uint32_t, std::size_t> slots;
    Spread s;
    for (const ConnKey& k : keys)
        s.fullest = std::max(s.fullest, ++slots[hash_key(secret, k) >> (32 - 13)]);
    s.used = slots.size();
    return s;
}

TEST(ConnTableHash, EveryFieldAPeerOrWeVarySpreadsOverTheSlots) {
    std::vector<ConnKey> by_local_port, by_remote_port, by_remote_address;
    for (std::uint32_t i = 0; i < 4096; ++i) {
        by_local_port.push_back(v4_key(static_cast<std::uint16_t>(49152 + i), 2, 5000));
        by_remote_port.push_back(v4_key(5000, 2, static_cast<std::uint16_t>(1024 + i)));
        ConnKey k = v4_key(5000, static_cast<std::uint8_t>(i), static_cast<std::uint16_t>(i >> 8));
        by_remote_address.push_back(k);
    }
    for (const auto* keys : {&by_local_port, &by_remote_port, &by_remote_address}) {
        const Spread s = spread(*keys, kSecret);
        EXPECT_GT(s.used, 2500u);
        EXPECT_LE(s.fullest, 6u);
    }
}

TEST(ConnTableHash, TheSecretDecidesWhichTuplesShareASlot) {
    const ConnHashKey other{kSecret.k0 ^ 2, kSecret.k1};
    int same = 0;
    for (std::uint16_t port = 1024; port < 2048; ++port) {
        const ConnKey k = v4_key(5000, 7, port);
        same += (hash_key(kSecret, k) >> 19) == (hash_key(other, k) >> 19);
    }
    // A random pair of functions agrees on about 1024 / 8192 of them.
    EXPECT_LT(same, 10);
}

TEST(ConnTableHash, Ipv6AddressesCountWhole) {
    Ipv6Addr local{};
    local.bytes[0] = 0xfd;
    local.bytes[15] = 1;
    std::vector<ConnKey> keys;
    for (std::uint32_t i = 0; i < 4096; ++i) {
        Ipv6Addr remote{};
        remote.bytes[0] = 0xfd;
        remote.bytes[14] = static_cast<std::uint8_t>(i >> 8);
        remote.bytes[15] = static_cast<std::uint8_t>(i);
        keys.push_back({{local, 4791}, {remote, 40000}, kNoVlan});
    }
    const Spread s = spread(keys, kSecret);
    EXPECT_GT(s.used, 2500u);
    EXPECT_LE(s.fullest, 6u);
}

// A driver's flow hash (include/iwcm/shard.hpp) gives an IPv4 key the slot hash the table
// computes itself, under any flow key; IPv6 keys hash whole and ignore it.
TEST(ConnTableHash, TheDriversFlowHashGivesTheSameSlotHash) {
    for (const std::uint64_t flow_key : {std::uint64_t{0}, std::uint64_t{0xabcdef0123456789}}) {
        ConnHashKey secret = kSecret;
        secret.flow_key = flow_key;
        for (std::uint16_t port = 40000; port < 40100; ++port) {
            ConnKey k = v4_key(port, 9, 4791);
            k.vlan = static_cast<std::uint16_t>(port & 7);
            const std::uint64_t flow = flow_hash(k.remote, k.local, flow_key);
            EXPECT_EQ(hash_key(secret, k, flow), hash_key(secret, k));
            EXPECT_NE(hash_key(secret, k, ~flow), hash_key(secret, k));
        }
    }
    Ipv6Addr local{};
    local.bytes[0] = 0xfd;
    const ConnKey k6{{local, 4791}, {Ipv6Addr{}, 40000}, kNoVlan};
    EXPECT_EQ(hash_key(kSecret, k6, 12345), hash_key(kSecret, k6));
}

TEST(ConnTableHash, FindsWhatItHoldsUnderItsSecret) {
    NodePool pool([](void*, Node&) {}, nullptr);
    ConnTable table(kSecret);
    std::vector<NodeRef> nodes;
    for (std::uint16_t i = 0; i < 300; ++i) {
        NodeRef n = pool.create();
        const ConnKey k = v4_key(static_cast<std::uint16_t>(49152 + i), 2, 5000);
        n->local = k.local;
        n->remote = k.remote;
        n->vlan = k.vlan;
        table.insert(n);
        nodes.push_back(n);
    }
    for (const NodeRef& n : nodes) EXPECT_EQ(table.find(key_of(*n)), n.get());
    EXPECT_EQ(table.find(v4_key(40000, 2, 5000)), nullptr);
    EXPECT_TRUE(table.erase(key_of(*nodes[7])));
    EXPECT_EQ(table.find(key_of(*nodes[7])), nullptr);
    EXPECT_EQ(table.find(key_of(*nodes[8])), nodes[8].get());
}

}  // namespace
}  // namespace iwcm::cm
