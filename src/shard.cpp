// The flow hash and the port filter of sharding.
//
// Read first: include/iwcm/shard.hpp (the hash and why it is symmetric).
#include "iwcm/shard.hpp"

#include <bit>
#include <cstring>

#include "iwcm/assert.hpp"

namespace iwcm {

namespace {

constexpr std::size_t kEthHeader = 14;
constexpr std::size_t kVlanTag = 4;
constexpr std::uint16_t kEtherIpv4 = 0x0800;
constexpr std::uint16_t kEtherIpv6 = 0x86dd;
constexpr std::uint16_t kEtherVlan = 0x8100;
constexpr std::uint8_t kProtoTcp = 6;
constexpr std::size_t kIpv6Header = 40;

// The splitmix64 finalizer (Steele, Lea, Flood: "Fast splittable
// pseudorandom number generators", 2014).
std::uint64_t mix64(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// Folds the commutative combinations of both sides (see the header).
std::uint64_t fold(std::uint64_t addr_lo, std::uint64_t addr_hi, std::uint16_t px, std::uint16_t py,
                   std::uint64_t key) {
    const std::uint64_t ports =
        std::uint64_t{static_cast<std::uint16_t>(px ^ py)} | (std::uint64_t{px} + py) << 32;
    return mix64((addr_lo ^ key) * 0x9e3779b97f4a7c15ULL + addr_hi * 0xc2b2ae3d27d4eb4fULL +
                 ports * 0x165667b19e3779f9ULL);
}

// 8 bytes of an address as flow_hash reads them from IpAddr::raw(): `len`
// (4 or 8) bytes at p, zero-padded to 8, in memory order.
std::uint64_t load_word(const std::byte* p, std::size_t len) {
    if (len == 4) {
        std::uint32_t v = 0;
        std::memcpy(&v, p, sizeof v);
        if constexpr (std::endian::native == std::endian::little) return v;
        return std::uint64_t{v} << 32;
    }
    std::uint64_t w = 0;
    std::memcpy(&w, p, sizeof w);
    return w;
}

std::uint16_t be16(const std::byte* p) {
    std::uint16_t v = 0;
    std::memcpy(&v, p, sizeof v);
    if constexpr (std::endian::native == std::endian::little) return __builtin_bswap16(v);
    return v;
}

}  // namespace

std::uint64_t flow_hash(const Endpoint& x, const Endpoint& y, std::uint64_t key) {
    const auto& a = x.addr.raw();
    const auto& b = y.addr.raw();
    const auto* pa = reinterpret_cast<const std::byte*>(a.data());
    const auto* pb = reinterpret_cast<const std::byte*>(b.data());
    return fold(load_word(pa, 8) ^ load_word(pb, 8), load_word(pa + 8, 8) ^ load_word(pb + 8, 8),
                x.port, y.port, key);
}

bool frame_flow_hash(std::span<const std::byte> frame, std::uint64_t key, std::uint64_t& hash) {
    std::size_t off = kEthHeader;
    if (frame.size() < off) return false;
    std::uint16_t type = be16(frame.data() + 12);
    if (type == kEtherVlan) {
        if (frame.size() < off + kVlanTag) return false;
        type = be16(frame.data() + 16);
        off += kVlanTag;
    }
    const std::byte* ip = frame.data() + off;
    const std::size_t left = frame.size() - off;
    if (type == kEtherIpv4) {
        if (left < 20) return false;
        const std::size_t ihl = (std::to_integer<std::size_t>(ip[0]) & 0x0f) * 4;
        // More-fragments bit or a fragment offset: no ports in every piece.
        const bool fragment = (be16(ip + 6) & 0x3fff) != 0;
        if (ihl < 20 || left < ihl + 4 || ip[9] != std::byte{kProtoTcp} || fragment) return false;
        hash = fold(load_word(ip + 12, 4) ^ load_word(ip + 16, 4), 0, be16(ip + ihl),
                    be16(ip + ihl + 2), key);
        return true;
    }
    if (type == kEtherIpv6) {
        if (left < kIpv6Header + 4 || ip[6] != std::byte{kProtoTcp}) return false;
        hash = fold(load_word(ip + 8, 8) ^ load_word(ip + 24, 8),
                    load_word(ip + 16, 8) ^ load_word(ip + 32, 8), be16(ip + kIpv6Header),
                    be16(ip + kIpv6Header + 2), key);
        return true;
    }
    return false;
}

std::function<bool(const Endpoint&, const Endpoint&)> shard_port_filter(std::uint32_t index,
                                                                        std::uint32_t shards,
                                                                        std::uint64_t key) {
    IWCM_ASSERT(shards >= 1);
    IWCM_ASSERT(index < shards);
    return [index, shards, key](const Endpoint& local, const Endpoint& remote) {
        return shard_of(flow_hash(local, remote, key), shards) == index;
    };
}

void add_stats(Stats& total, const Stats& shard) {
    // A counter added to Stats must be added here too: this size changes then.
    static_assert(sizeof(Stats) == 24 * sizeof(std::uint64_t) + sizeof(Stats::dropped));
    total.nodes_created += shard.nodes_created;
    total.nodes_destroyed += shard.nodes_destroyed;
    total.listeners_created += shard.listeners_created;
    total.listeners_destroyed += shard.listeners_destroyed;
    total.loopback_connections += shard.loopback_connections;
    total.accepts += shard.accepts;
    total.rejects += shard.rejects;
    total.connect_errors += shard.connect_errors;
    total.passive_errors += shard.passive_errors;
    total.retransmissions += shard.retransmissions;
    total.backlog_drops += shard.backlog_drops;
    total.syns_received += shard.syns_received;
    total.resets_sent += shard.resets_sent;
    total.resets_received += shard.resets_received;
    total.established += shard.established;
    total.frames_in += shard.frames_in;
    total.frames_out += shard.frames_out;
    total.mpa_v1_fallbacks += shard.mpa_v1_fallbacks;
    total.terminates_sent += shard.terminates_sent;
    total.syn_cookies_sent += shard.syn_cookies_sent;
    total.syn_cookies_accepted += shard.syn_cookies_accepted;
    total.syn_cookies_failed += shard.syn_cookies_failed;
    total.challenge_acks_sent += shard.challenge_acks_sent;
    total.challenge_acks_limited += shard.challenge_acks_limited;
    for (std::size_t i = 0; i < total.dropped.size(); ++i) total.dropped[i] += shard.dropped[i];
}

}  // namespace iwcm
