// Sharding: one iwcm::Core per thread, frames steered to a thread by a hash of
// their TCP 4-tuple, as a NIC's RSS steers them to queues.
//
// Read first: docs/design.md ("Parts", "Sans-I/O surface": one core owns its
// connections and is not thread-safe), docs/perf.md ("Every core"). The I/O
// side that uses this is src/io/shard_net.hpp (the in-memory network on N
// threads).
//
// The hash. A connection's frames must land on one shard in both directions,
// so the hash is symmetric: it reads the two endpoints only through
// commutative combinations (the XOR of the two addresses, the XOR and the AND
// of the two ports, which together give back the unordered pair), folds them
// with a key into 64 bits and mixes them with the splitmix64 finalizer. The
// combinations are bitwise, so a frame's fields are read as the wire has them,
// without byte swaps: about 58 instructions per IPv4 frame, checks included.
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

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "iwcm/address.hpp"
#include "iwcm/stats.hpp"

namespace iwcm {

// The symmetric flow hash of a connection between two endpoints.
std::uint64_t flow_hash(const Endpoint& x, const Endpoint& y, std::uint64_t key = 0);

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
