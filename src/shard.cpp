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
constexpr std::uint8_t kProtoIcmp = 1;
constexpr std::uint8_t kProtoIcmpv6 = 58;
constexpr std::size_t kIcmpHeader = 8;
constexpr std::size_t kIpv4Header = 20;
constexpr std::size_t kIpv6Header = 40;

using flow::mix64;
using flow::port_word;
using flow::wire16;
using flow::wire_ports;

// Folds the commutative combinations of both sides (see the header): the XOR
// of the addresses' first and last 8 bytes, the port word, the key.
std::uint64_t fold(std::uint64_t addr_lo, std::uint64_t addr_hi, std::uint64_t ports,
                   std::uint64_t key) {
    return mix64((addr_lo ^ key ^ (ports << 32)) + addr_hi * 0x9e3779b97f4a7c15ULL);
}

template <class T>
T load(const std::byte* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// An ICMP error's type (RFC 792: destination unreachable, source quench,
// redirect, time exceeded, parameter problem): it quotes the IP header and
// the first 8 bytes of the datagram that caused it.
bool icmp_error(std::byte type) {
    const auto t = std::to_integer<unsigned>(type);
    return t == 3 || t == 4 || t == 5 || t == 11 || t == 12;
}

// ICMPv6 error types are 1 to 127 (RFC 4443 section 2.1): destination
// unreachable, packet too big, time exceeded, parameter problem; each quotes
// as much of the offending packet as fits.
bool icmpv6_error(std::byte type) {
    const auto t = std::to_integer<unsigned>(type);
    return t >= 1 && t <= 127;
}

bool ipv4_quote_hash(const std::byte* icmp, std::size_t left, std::uint64_t key,
                     std::uint64_t& hash);
bool ipv6_quote_hash(const std::byte* icmp, std::size_t left, std::uint64_t key,
                     std::uint64_t& hash);

// The hash of the IPv4 packet at `ip` (`left` bytes): its TCP 4-tuple's, or,
// for an ICMP error (when not `quoted` already), the 4-tuple of the TCP
// segment it quotes, which is the connection it is about. Inline: the TCP
// case is every frame's.
[[gnu::always_inline]] inline bool ipv4_hash(const std::byte* ip, std::size_t left,
                                             std::uint64_t key, std::uint64_t& hash, bool quoted) {
    if (left < kIpv4Header) return false;
    const std::size_t ihl = (std::to_integer<std::size_t>(ip[0]) & 0x0f) * 4;
    // More-fragments bit or a fragment offset: no ports in every piece.
    const bool fragment = (load<std::uint16_t>(ip + 6) & wire16(0x3fff)) != 0;
    if (ihl < kIpv4Header || left < ihl + 4 || fragment) return false;
    if (ip[9] != std::byte{kProtoTcp}) {
        if (quoted || ip[9] != std::byte{kProtoIcmp}) return false;
        return ipv4_quote_hash(ip + ihl, left - ihl, key, hash);
    }
    // Source and destination side by side: XOR the two halves of one load.
    const std::uint64_t both = load<std::uint64_t>(ip + 12);
    hash = flow::hash_v4(static_cast<std::uint32_t>(both ^ (both >> 32)),
                         port_word(load<std::uint32_t>(ip + ihl)), key);
    return true;
}

// The same for IPv6 (TCP as the first header; an ICMPv6 error quoting one).
[[gnu::always_inline]] inline bool ipv6_hash(const std::byte* ip, std::size_t left,
                                             std::uint64_t key, std::uint64_t& hash, bool quoted) {
    if (left < kIpv6Header + 4) return false;
    if (ip[6] != std::byte{kProtoTcp}) {
        if (quoted || ip[6] != std::byte{kProtoIcmpv6}) return false;
        return ipv6_quote_hash(ip + kIpv6Header, left - kIpv6Header, key, hash);
    }
    hash = fold(load<std::uint64_t>(ip + 8) ^ load<std::uint64_t>(ip + 24),
                load<std::uint64_t>(ip + 16) ^ load<std::uint64_t>(ip + 32),
                port_word(load<std::uint32_t>(ip + kIpv6Header)), key);
    return true;
}

// The ICMP message at `icmp` (`left` bytes): the hash of the TCP segment an
// error quotes. Out of line: rare.
[[gnu::noinline]] bool ipv4_quote_hash(const std::byte* icmp, std::size_t left, std::uint64_t key,
                                       std::uint64_t& hash) {
    if (left < kIcmpHeader || !icmp_error(icmp[0])) return false;
    return ipv4_hash(icmp + kIcmpHeader, left - kIcmpHeader, key, hash, true);
}

[[gnu::noinline]] bool ipv6_quote_hash(const std::byte* icmp, std::size_t left, std::uint64_t key,
                                       std::uint64_t& hash) {
    if (left < kIcmpHeader || !icmpv6_error(icmp[0])) return false;
    return ipv6_hash(icmp + kIcmpHeader, left - kIcmpHeader, key, hash, true);
}

}  // namespace

std::uint64_t flow_hash(const Endpoint& x, const Endpoint& y, std::uint64_t key) {
    const auto* pa = reinterpret_cast<const std::byte*>(x.addr.raw().data());
    const auto* pb = reinterpret_cast<const std::byte*>(y.addr.raw().data());
    const std::uint64_t ports = port_word(wire_ports(x.port, y.port));
    if (x.addr.is_v4() && y.addr.is_v4())
        return flow::hash_v4(load<std::uint32_t>(pa) ^ load<std::uint32_t>(pb), ports, key);
    return fold(load<std::uint64_t>(pa) ^ load<std::uint64_t>(pb),
                load<std::uint64_t>(pa + 8) ^ load<std::uint64_t>(pb + 8), ports, key);
}

bool frame_flow_hash(std::span<const std::byte> frame, std::uint64_t key, std::uint64_t& hash) {
    std::size_t off = kEthHeader;
    if (frame.size() < off + kIpv4Header + 4) return false;
    std::uint16_t type = load<std::uint16_t>(frame.data() + 12);
    if (type == wire16(kEtherVlan)) {
        type = load<std::uint16_t>(frame.data() + 16);
        off += kVlanTag;
    }
    const std::byte* ip = frame.data() + off;
    const std::size_t left = frame.size() - off;
    if (type == wire16(kEtherIpv4)) return ipv4_hash(ip, left, key, hash, false);
    if (type == wire16(kEtherIpv6)) return ipv6_hash(ip, left, key, hash, false);
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
    static_assert(sizeof(Stats) == 29 * sizeof(std::uint64_t) + sizeof(Stats::dropped));
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
    total.silent_shed += shard.silent_shed;
    total.syns_received += shard.syns_received;
    total.resets_sent += shard.resets_sent;
    total.resets_received += shard.resets_received;
    total.established += shard.established;
    total.frames_in += shard.frames_in;
    total.frames_out += shard.frames_out;
    total.mpa_v1_fallbacks += shard.mpa_v1_fallbacks;
    total.connect_refused_retries += shard.connect_refused_retries;
    total.terminates_sent += shard.terminates_sent;
    total.syn_cookies_sent += shard.syn_cookies_sent;
    total.syn_cookies_accepted += shard.syn_cookies_accepted;
    total.syn_cookies_failed += shard.syn_cookies_failed;
    total.challenge_acks_sent += shard.challenge_acks_sent;
    total.challenge_acks_limited += shard.challenge_acks_limited;
    total.window_probes += shard.window_probes;
    total.streams_folded += shard.streams_folded;
    total.streams_unfolded += shard.streams_unfolded;
    for (std::size_t i = 0; i < total.dropped.size(); ++i) total.dropped[i] += shard.dropped[i];
}

}  // namespace iwcm
