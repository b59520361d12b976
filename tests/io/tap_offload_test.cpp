// The TAP's virtio-net header (TapDevice opened with `offload`). First the header written for
// each kind of frame, byte for byte. Then the kernel's side, in a private network namespace (a
// forked child that unshares CLONE_NEWNET; its devices go with it, also on a failure): three
// TAPs on a bridge, A written to with the header, B read with it (TUN_F_CSUM and TUN_F_TSO4
// offered), C without it. A segment of four MSS written to A as one GSO frame with its
// checksum left partial reaches B whole, the same bytes, its checksum still partial and vouched
// for; C gets the four segments the kernel cut from it, each of an MSS (the last shorter), at
// the right sequence numbers and with checksums the parser verifies. An MSS-sized partial
// segment reaches B so too, and C finished. Needs root, like tap_test.cpp.
//
// Read first: src/io/tap/tap.hpp, tests/io/tap_test.cpp.
#include <gtest/gtest.h>

#include <poll.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "io/kernel_side.hpp"
#include "io/tap/tap.hpp"
#include "wire/bytes.hpp"
#include "wire/frame.hpp"

namespace iwcm::io {
namespace {

using Buffer = std::vector<std::byte>;

const MacAddr kOurMac = *MacAddr::parse("02:00:0a:63:d2:02");
// Nobody's: the bridge floods the frame to every other port.
const MacAddr kNoOnesMac = *MacAddr::parse("02:00:0a:63:d2:99");
constexpr std::uint16_t kMss = 1460;

wire::FrameRepr segment_repr(bool v6, bool tagged) {
    wire::FrameRepr r;
    r.eth.dst = kNoOnesMac;
    r.eth.src = kOurMac;
    if (tagged) r.eth.vlan = wire::VlanTag{7, 0, false};
    r.ip.src = *IpAddr::parse(v6 ? "fd99:210::2" : "10.99.210.2");
    r.ip.dst = *IpAddr::parse(v6 ? "fd99:210::1" : "10.99.210.1");
    r.tcp.src_port = 40001;
    r.tcp.dst_port = 4791;
    r.tcp.seq = wire::SeqNumber(1000000);
    r.tcp.ack = wire::SeqNumber(2000000);
    r.tcp.flags = wire::tcp_flags::kAck | wire::tcp_flags::kPsh;
    r.tcp.window = 1024;
    return r;
}

Buffer payload_of(std::size_t n) {
    Buffer b(n);
    for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>(i * 11 + 5);
    return b;
}

// The frame of `repr` and `payload`, its TCP checksum left partial.
Buffer partial_frame(const wire::FrameRepr& repr, const Buffer& payload) {
    Buffer f(wire::tcp_frame_len(repr, payload.size()));
    wire::emit_tcp_frame(repr, payload, f, wire::Checksums::kPartial);
    return f;
}

// struct virtio_net_hdr's bytes from its fields (little-endian 16-bit words).
std::array<std::byte, 10> header(unsigned flags, unsigned gso_type, unsigned hdr_len,
                                 unsigned gso_size, unsigned csum_start, unsigned csum_offset) {
    std::array<std::byte, 10> h{};
    h[0] = static_cast<std::byte>(flags);
    h[1] = static_cast<std::byte>(gso_type);
    const unsigned words[] = {hdr_len, gso_size, csum_start, csum_offset};
    for (int i = 0; i < 4; ++i) {
        h[2 + 2 * i] = static_cast<std::byte>(words[i] & 0xFF);
        h[3 + 2 * i] = static_cast<std::byte>(words[i] >> 8);
    }
    return h;
}

constexpr unsigned kNeedsCsum = 1;  // VIRTIO_NET_HDR_F_NEEDS_CSUM
constexpr unsigned kGsoTcpV4 = 1;   // VIRTIO_NET_HDR_GSO_TCPV4
constexpr unsigned kGsoTcpV6 = 4;   // VIRTIO_NET_HDR_GSO_TCPV6

TEST(TapOffload, HeaderOfASegmentOfSegmentationOffload) {
    const Buffer payload = payload_of(3 * kMss + 100);
    const Buffer f = partial_frame(segment_repr(false, false), payload);
    const std::span<const std::byte> all(f);
    // In parts (headers, then the payload) and whole: the same header.
    EXPECT_EQ(vnet_header(all.first(54), f.size(), {true, kMss}),
              header(kNeedsCsum, kGsoTcpV4, 54, kMss, 34, 16));
    EXPECT_EQ(vnet_header(all, f.size(), {true, kMss}),
              header(kNeedsCsum, kGsoTcpV4, 54, kMss, 34, 16));
    // Tagged, IPv6: the TCP header 18 + 40 bytes in.
    const Buffer f6 = partial_frame(segment_repr(true, true), payload);
    EXPECT_EQ(vnet_header(f6, f6.size(), {true, kMss}),
              header(kNeedsCsum, kGsoTcpV6, 78, kMss, 58, 16));
}

TEST(TapOffload, HeaderOfAnMssSizedSegmentLeavesOnlyTheChecksum) {
    // Exactly an MSS, with or without a segment size: one segment, nothing to cut.
    const Buffer f = partial_frame(segment_repr(false, false), payload_of(kMss));
    EXPECT_EQ(vnet_header(f, f.size(), {true, kMss}), header(kNeedsCsum, 0, 0, 0, 34, 16));
    EXPECT_EQ(vnet_header(f, f.size(), {true, 0}), header(kNeedsCsum, 0, 0, 0, 34, 16));
    // A SYN with its MSS option: the TCP header is 24 bytes, the checksum where it always is.
    wire::FrameRepr syn = segment_repr(false, false);
    syn.tcp.flags = wire::tcp_flags::kSyn;
    syn.tcp.options.mss = kMss;
    const Buffer s = partial_frame(syn, {});
    EXPECT_EQ(vnet_header(s, s.size(), {true, 0}), header(kNeedsCsum, 0, 0, 0, 34, 16));
}

TEST(TapOffload, HeaderOfAFrameWithNothingLeftIsZero) {
    const std::array<std::byte, 10> none{};
    // Checksums computed: nothing left, whatever the frame.
    const Buffer f = partial_frame(segment_repr(false, false), payload_of(3 * kMss));
    EXPECT_EQ(vnet_header(f, f.size(), {}), none);
    // An ARP request is no TCP segment.
    const Buffer arp = wire::hex_bytes(
        "ff ff ff ff ff ff 02 00 0a 63 c8 02 08 06 00 01 08 00 06 04 00 01"
        "02 00 0a 63 c8 02 0a 63 c9 02 00 00 00 00 00 00 0a 63 c9 02");
    EXPECT_EQ(vnet_header(arp, arp.size(), {true, kMss}), none);
}

// ---- against the kernel

// Reads from `tap` until a frame `want` accepts, for at most 5 s: the frames it accepted, in
// order, up to `count` (other frames, IPv6 chatter of the new links, are skipped).
template <typename Want>
std::vector<std::pair<Buffer, bool>> read_frames(TapDevice& tap, std::size_t count, Want want) {
    std::vector<std::pair<Buffer, bool>> got;
    std::vector<std::byte> buf(TapDevice::kMaxFrame);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (got.size() < count && std::chrono::steady_clock::now() < end) {
        pollfd p{tap.fd(), POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) continue;
        for (long n; got.size() < count && (n = tap.read(buf)) > 0;) {
            Buffer f(buf.begin(), buf.begin() + n);
            if (want(f)) got.emplace_back(std::move(f), tap.checksum_vouched());
        }
    }
    return got;
}

bool sh(const char* command) {
    const int rc = std::system(command);
    if (rc != 0) std::fprintf(stderr, "failed (%d): %s\n", rc, command);
    return rc == 0;
}

// Whether f is a TCP segment from our test port (parsed without verifying anything).
bool ours(const Buffer& f) {
    auto p = wire::parse_tcp_frame(f, wire::Checksums::kOffload);
    return p && p->repr.tcp.src_port == 40001 && p->repr.eth.src == kOurMac;
}

int bridge_child() {
    if (::unshare(CLONE_NEWNET) != 0) {
        std::perror("unshare(CLONE_NEWNET)");
        return 30;
    }
    auto a = TapDevice::open("iwcmvA", false, true);
    auto b = TapDevice::open("iwcmvB", false, true);
    auto c = TapDevice::open("iwcmvC");
    if (!a || !b || !c) {
        std::fprintf(stderr, "%s %s %s\n", a ? "" : a.error().c_str(), b ? "" : b.error().c_str(),
                     c ? "" : c.error().c_str());
        return 31;
    }
    if (!a->offloads().checksum || a->offloads().max_segment == 0 || c->offloads().checksum)
        return 32;
    if (!sh("ip link add br0 type bridge forward_delay 0 mcast_snooping 0 && "
            "ip link set iwcmvA master br0 && ip link set iwcmvB master br0 && "
            "ip link set iwcmvC master br0 && ip link set br0 up"))
        return 33;
    const wire::FrameRepr repr = segment_repr(false, false);
    for (const std::size_t n : {std::size_t{4 * kMss - 60}, std::size_t{kMss}}) {
        const Buffer payload = payload_of(n);
        const Buffer frame = partial_frame(repr, payload);
        const std::span<const std::byte> all(frame);
        const std::span<const std::byte> body = all.subspan(54);
        // The bridge's ports forward once they are up: write until B has the frame.
        std::vector<std::pair<Buffer, bool>> at_b;
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (at_b.empty() && std::chrono::steady_clock::now() < end) {
            if (a->write_offload(all.first(54), std::span(&body, 1), {true, kMss}) != 0) return 34;
            at_b = read_frames(*b, 1, [](const Buffer& f) { return ours(f); });
        }
        if (at_b.empty()) {
            std::fprintf(stderr, "%zu bytes: nothing reached B\n", n);
            return 35;
        }
        if (at_b[0].first != frame || !at_b[0].second) {
            std::fprintf(stderr, "%zu bytes: B read %zu bytes (%s), vouched %d\n", n,
                         at_b[0].first.size(), at_b[0].first == frame ? "the same" : "others",
                         at_b[0].second);
            return 36;
        }
        // C: the segments the kernel cut, each verified by the parser (checksums computed).
        const std::size_t segments = (n + kMss - 1) / kMss;
        auto at_c = read_frames(*c, segments, [](const Buffer& f) { return ours(f); });
        if (at_c.size() != segments) {
            std::fprintf(stderr, "%zu bytes: C read %zu of %zu segments\n", n, at_c.size(),
                         segments);
            return 37;
        }
        for (std::size_t i = 0; i < segments; ++i) {
            const Buffer& f = at_c[i].first;
            auto p = wire::parse_tcp_frame(f, wire::Checksums::kFull);
            const std::size_t off = i * kMss;
            const std::size_t len = std::min<std::size_t>(kMss, n - off);
            if (!p || p->repr.tcp.seq != repr.tcp.seq + static_cast<std::uint32_t>(off) ||
                p->payload.size() != len ||
                !std::equal(p->payload.begin(), p->payload.end(), payload.begin() + off)) {
                std::fprintf(stderr, "%zu bytes: C's segment %zu is not bytes %zu..%zu (%s)\n", n,
                             i, off, off + len, p ? "parsed" : "bad checksum or malformed");
                return 38;
            }
        }
    }
    return 0;
}

TEST(TapOffload, BridgeCarriesAGsoFrameWholeAndCutsItAtTheMss) {
    run_in_child(bridge_child);
}

}  // namespace
}  // namespace iwcm::io
