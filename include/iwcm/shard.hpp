// Sharding: one iwcm::Core per thread, frames steered to a thread by a hash of
// their TCP 4-tuple, as a NIC's RSS steers them to queues.
//
// Read first: docs/design.md ("Parts", "Sans-I/O surface": one core owns its
// connections and is not thread-safe), docs/perf.md ("Every core"). The I/O
// side that uses this is src/io/threads/shard_net.hpp (the in-memory network on N
// threads).
//
// The hash. A connection's frames must land on one shard in both directions,
// so the hash is symmetric: it reads the two endpoints only through
// commutative combinations (the XOR of the two addresses; the smaller and the
// larger of the two ports, which is the unordered pair itself), folds them
// with a key into 64 bits and mixes them with the splitmix64 finalizer. A
// frame's fields are read as the wire has them, without byte swaps: about 58
// instructions per IPv4 frame, checks included.
// A connection A:p -> B:q and its reply B:q -> A:p hash alike; so does the
// unrelated A:q -> B:p, which is harmless (it only shares a shard). A Toeplitz
// hash with a symmetric key would do the same job and is what NICs compute;
// this one costs two multiplications. The key (zero by default) makes the
// spread unpredictable to a peer that would pile its flows on one shard.
//
// The shard of a hash among n is (low 32 bits * n) >> 32, which spreads as
// evenly as a modulo without a division. An ICMP or ICMPv6 error that quotes a
// TCP segment (destination unreachable, packet too big, time exceeded ...) is
// about that segment's connection: it hashes as the quoted 4-tuple, so it
// reaches the shard that owns the connection (the quote is of a segment we
// sent, and the hash is symmetric; the core drops ICMP today, but a driver
// that hands it an error hands it to the right core). A frame that carries no
// TCP 4-tuple (ARP, neighbour discovery, an echo, an IP fragment, an IPv6
// extension header before TCP) belongs to shard 0.
//
// Ports that hash back. A core's connect() picks an ephemeral port; with
// CoreConfig::port_filter = shard_port_filter(i, n) it keeps only ports whose
// 4-tuple hashes to shard i (about one in n), so every frame of its
// connections, sent or received, belongs to its own shard.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>

#include "iwcm/address.hpp"
#include "iwcm/stats.hpp"

namespace iwcm {

// The symmetric flow hash of a connection between two endpoints.
std::uint64_t flow_hash(const Endpoint& x, const Endpoint& y, std::uint64_t key = 0);

// The pieces of the hash, inline for the core's connection table and its port choice
// (src/cm/conn_table.hpp), which compute it per frame and per candidate port.
namespace flow {

// The splitmix64 finalizer (Steele, Lea, Flood: "Fast splittable pseudorandom number
// generators", 2014). A bijection of 64 bits.
inline std::uint64_t mix64(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// The two ports of a segment as one symmetric word, from the 32 bits that hold them side by
// side (read as the wire has them: no byte swap): the smaller 16-bit half low, the larger
// high. That is the unordered pair itself, so two different pairs never share a word. (It
// was the XOR and the AND of the two, which are not: {1, 2} and {0, 3} agree on both, and
// so did a connection table's worth of an active side's ports, whose slots the flow hash
// also gives: the table's lookups at a million connections ran at half speed.)
inline std::uint64_t port_word(std::uint32_t both) {
    const std::uint32_t lo = both & 0xffffu;
    const std::uint32_t hi = both >> 16;
    return lo < hi ? (lo | hi << 16) : (hi | lo << 16);
}

// A 16-bit field as the wire has it (big-endian).
constexpr std::uint16_t wire16(std::uint16_t host) {
    if constexpr (std::endian::native == std::endian::little)
        return static_cast<std::uint16_t>(host >> 8 | host << 8);
    return host;
}

// Two ports side by side as a segment's header holds them.
inline std::uint32_t wire_ports(std::uint16_t a, std::uint16_t b) {
    return std::uint32_t{wire16(a)} | std::uint32_t{wire16(b)} << 16;
}

// The IPv4 fold: the XOR of the two addresses (as the wire has them) in the low half, the
// port word in the high half. For a given local endpoint it is one to one in the remote
// address and port (the XOR with a known word and port_word with a known port are both
// invertible), so two connections of one local endpoint never share a flow hash.
inline std::uint64_t hash_v4(std::uint32_t addr_xor, std::uint64_t ports, std::uint64_t key) {
    return mix64(addr_xor ^ key ^ (ports << 32));
}

// The XOR of two IPv4 addresses' bytes as the wire has them.
inline std::uint32_t addr_xor_v4(const IpAddr& x, const IpAddr& y) {
    std::uint32_t a;
    std::uint32_t b;
    std::memcpy(&a, x.raw().data(), 4);
    std::memcpy(&b, y.raw().data(), 4);
    return a ^ b;
}

}  // namespace flow

// flow_hash of two IPv4 endpoints, inline; given as their fields where they lie, or whole.
inline std::uint64_t flow_hash_v4(const IpAddr& x, std::uint16_t x_port, const IpAddr& y,
                                  std::uint16_t y_port, std::uint64_t key = 0) {
    return flow::hash_v4(flow::addr_xor_v4(x, y), flow::port_word(flow::wire_ports(x_port, y_port)),
                         key);
}
inline std::uint64_t flow_hash_v4(const Endpoint& x, const Endpoint& y, std::uint64_t key = 0) {
    return flow_hash_v4(x.addr, x.port, y.addr, y.port, key);
}

// The shard of a hash among `shards` (>= 1).
inline std::uint32_t shard_of(std::uint64_t hash, std::uint32_t shards) {
    return static_cast<std::uint32_t>(((hash & 0xffffffffu) * shards) >> 32);
}

// The flow hash of an Ethernet frame's TCP 4-tuple (untagged or one 802.1Q
// tag; IPv4 without fragmentation or IPv6 with TCP as the first header), or
// of the TCP 4-tuple an ICMP / ICMPv6 error quotes. false when the frame
// carries none.
bool frame_flow_hash(std::span<const std::byte> frame, std::uint64_t key, std::uint64_t& hash);

// The shard that owns a frame: its flow's, or 0 for a frame without a 4-tuple.
inline std::uint32_t frame_shard(std::span<const std::byte> frame, std::uint32_t shards,
                                 std::uint64_t key = 0) {
    std::uint64_t h = 0;
    return frame_flow_hash(frame, key, h) ? shard_of(h, shards) : 0;
}

// A CoreConfig::port_filter for the core of shard `index` of `shards`.
std::function<bool(const Endpoint&, const Endpoint&)> shard_port_filter(std::uint32_t index,
                                                                        std::uint32_t shards,
                                                                        std::uint64_t key = 0);

// Adds one shard's counters to a total (every counter, every drop reason).
void add_stats(Stats& total, const Stats& shard);

}  // namespace iwcm
