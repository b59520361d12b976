// A TAP's reads and writes in batches through io_uring (TapDevice opened with `ring`),
// against the kernel in a network namespace of the test's own (a forked child, as
// tap_test.cpp does): frames written leave only at flush(), all in one io_uring_enter, in
// order and whole (a packet socket on the TAP sees what the kernel took); a frame longer
// than a slot leaves from its own memory with the ones queued before it; the kernel's
// answers are read in batches, far fewer calls than frames. Needs root: without it the test
// fails, loudly. In memory: the host loop handles frames a device holds before it sleeps,
// and IWCM_TAP_RING takes 0 or 1.
//
// Read first: src/io/tap/tap_ring.hpp.
#include <gtest/gtest.h>

#include <linux/if.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "io/kernel_side.hpp"
#include "io/loop/event_loop.hpp"
#include "io/tap/tap.hpp"
#include "iwcm/core.hpp"
#include "wire/arp.hpp"
#include "wire/ethernet.hpp"

namespace iwcm::io {
namespace {

const MacAddr kOurMac = *MacAddr::parse("02:00:0a:63:ca:02");
using Frame = std::vector<std::byte>;

// An ARP request from us for the kernel's 10.99.202.1, asked as if from 10.99.202.`host`,
// padded with zeros to `size` bytes (the kernel reads the request and ignores the rest).
Frame arp_request(unsigned host, std::size_t size = wire::kEthernetHeaderLen + wire::kArpLen) {
    Frame f(size);
    wire::EthernetRepr eth{MacAddr::broadcast(), kOurMac, std::nullopt, wire::kEtherTypeArp};
    const auto from = *Ipv4Addr::parse("10.99.202." + std::to_string(host));
    wire::ArpRepr req{wire::ArpOp::kRequest, kOurMac, from, MacAddr{},
                      *Ipv4Addr::parse("10.99.202.1")};
    eth.emit(f);
    req.emit(std::span<std::byte>(f).subspan(wire::kEthernetHeaderLen));
    return f;
}

// The frames the packet socket saw coming in from the TAP's writer (ours, by source MAC).
std::vector<Frame> ours_seen(int sock) {
    std::vector<Frame> seen;
    std::vector<std::byte> buf(TapDevice::kMaxFrame);
    sockaddr_ll from{};
    socklen_t len = sizeof from;
    for (long n; (n = ::recvfrom(sock, buf.data(), buf.size(), 0,
                                 reinterpret_cast<sockaddr*>(&from), &len)) > 0;
         len = sizeof from) {
        if (from.sll_pkttype == PACKET_OUTGOING) continue;  // the kernel's own
        Frame f(buf.begin(), buf.begin() + n);
        auto e = wire::parse_ethernet(f);
        if (e && e->repr.src == kOurMac) seen.push_back(std::move(f));
    }
    return seen;
}

#define CHECK(cond, code, ...)                      \
    do {                                            \
        if (!(cond)) {                              \
            std::fprintf(stderr, __VA_ARGS__);      \
            std::fprintf(stderr, " (%s)\n", #cond); \
            return code;                            \
        }                                           \
    } while (0)

int ring_child() {
    const char* name = "iwcmring0";
    CHECK(::unshare(CLONE_NEWNET) == 0, 10, "unshare(CLONE_NEWNET) failed");
    auto tap = TapDevice::open(name, false, false, true);
    CHECK(tap.has_value(), 11, "open: %s", tap ? "" : tap.error().c_str());
    CHECK(tap->batched(), 12, "io_uring unavailable: %s", tap->ring_error().c_str());
    CHECK(set_kernel_address(name, "10.99.202.1"), 13, "SIOCSIFADDR failed");
    const int sock = packet_socket(name);
    CHECK(sock >= 0, 14, "packet socket failed");
    const TapRingCounters& c = *tap->ring_counters();

    // The kernel takes frames once its new link is active (asynchronously): one request
    // at a time until one is answered, for at most 5 s.
    std::vector<std::byte> rx(TapDevice::kMaxFrame);
    auto replies = [&](std::vector<unsigned>* to) {
        unsigned n = 0;
        for (long len; (len = tap->read(rx)) > 0;) {
            auto e = wire::parse_ethernet(std::span<const std::byte>(rx.data(), len));
            if (!e || e->repr.ethertype != wire::kEtherTypeArp || e->repr.dst != kOurMac)
                continue;  // IPv6 chatter
            auto arp = wire::parse_arp(e->payload);
            if (!arp || arp->op != wire::ArpOp::kReply) continue;
            ++n;
            if (to != nullptr) to->push_back(arp->target_ip.bytes[3]);
        }
        return n;
    };
    bool active = false;
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
         !active && std::chrono::steady_clock::now() < end;) {
        CHECK(tap->write(arp_request(99)) == 0, 15, "write refused");
        tap->flush();
        pollfd p{tap->fd(), POLLIN, 0};
        if (::poll(&p, 1, 100) > 0) active = replies(nullptr) > 0;
    }
    CHECK(active, 16, "no ARP reply from the kernel");
    (void)ours_seen(sock);

    // Twenty requests queued: nothing leaves and no call is made until flush(), which makes
    // one call for all; they arrive whole and in order.
    constexpr unsigned kCount = 20;
    std::vector<Frame> sent;
    const std::uint64_t enters = c.enters;
    for (unsigned i = 0; i < kCount; ++i) {
        sent.push_back(arp_request(100 + i));
        CHECK(tap->write(sent.back()) == 0, 20, "write refused");
    }
    CHECK(c.enters == enters, 21, "a queued frame made a call");
    CHECK(ours_seen(sock).empty(), 22, "a frame left before flush()");
    tap->flush();
    CHECK(c.enters == enters + 1, 23, "flush() made %llu calls",
          static_cast<unsigned long long>(c.enters - enters));
    CHECK(ours_seen(sock) == sent, 24, "the frames seen differ from those written, or their order");

    // The kernel answers each: read in batches of 2, 4, 8, 16 ..., with fewer calls than
    // half the frames, every reply in the order asked.
    std::vector<unsigned> asked;
    const std::uint64_t before = c.enters;
    const std::uint64_t read_before = c.frames_read;
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
         asked.size() < kCount && std::chrono::steady_clock::now() < end;) {
        pollfd p{tap->fd(), POLLIN, 0};
        if (::poll(&p, 1, 100) > 0) (void)replies(&asked);
    }
    CHECK(asked.size() == kCount, 30, "%zu replies of %u", asked.size(), kCount);
    for (unsigned i = 0; i < kCount; ++i)
        CHECK(asked[i] == 100 + i, 31, "reply %u answers .%u", i, asked[i]);
    const std::uint64_t frames = c.frames_read - read_before;
    CHECK(2 * (c.enters - before) < frames, 32, "%llu calls for %llu frames",
          static_cast<unsigned long long>(c.enters - before),
          static_cast<unsigned long long>(frames));

    // A frame longer than a slot goes from its own memory, in one call with the three
    // queued before it, and all four arrive in order.
    sent.clear();
    for (unsigned i = 0; i < 3; ++i) {
        sent.push_back(arp_request(150 + i));
        CHECK(tap->write(sent.back()) == 0, 40, "write refused");
    }
    sent.push_back(arp_request(160, TapRing::kSlot + 1000));
    const std::uint64_t at = c.enters;
    CHECK(tap->write(sent.back()) == 0, 41, "write refused");
    CHECK(c.enters == at + 1 && c.writes_in_place == 1, 42, "the long frame was not sent at once");
    CHECK(ours_seen(sock) == sent, 43, "the four frames seen differ or are out of order");
    CHECK(c.writes_failed == 0 && tap->take_failed_writes() == 0, 44, "a write failed");
    ::close(sock);
    return 0;
}

TEST(TapRing, WritesLeaveAtFlushInOneCallAndReadsComeInBatches) {
    run_in_child(ring_child);
}

// A device that read its frames before (as a ring's batch does) and holds them: its
// descriptor, an eventfd never written, never says so.
class HoldingDevice final : public FrameDevice {
public:
    explicit HoldingDevice(std::size_t count) : fd_(::eventfd(0, EFD_NONBLOCK)), left_(count) {}
    ~HoldingDevice() override { ::close(fd_); }
    HoldingDevice(const HoldingDevice&) = delete;
    HoldingDevice& operator=(const HoldingDevice&) = delete;
    int fd() const override { return fd_; }
    const std::string& name() const override { return name_; }
    long read(std::span<std::byte>) override { return 0; }
    long read_view(std::span<const std::byte>& frame) override {
        if (left_ == 0) return 0;
        --left_;
        frame = frame_;
        return static_cast<long>(frame_.size());
    }
    int write(std::span<const std::byte>) override { return 0; }
    bool holds_frames() const override { return left_ > 0; }
    std::size_t max_frame() const override { return TapDevice::kMaxFrame; }

private:
    int fd_;
    std::size_t left_;
    Frame frame_ = arp_request(7);
    std::string name_ = "hold0";
};

// The host loop hands out at most 256 frames a wake-up, which may end inside a batch: the
// frames left in the device make no descriptor readable, so step() must handle them without
// sleeping. Of 270 held frames the first step() takes 256, the second the 14 left, each at
// once; a step that slept would return at its `until` with none handled.
TEST(TapRing, TheHostHandlesHeldFramesBeforeItSleeps) {
    CoreConfig cfg;
    cfg.mac = kOurMac;
    Core core(cfg);
    TapHostConfig hc;
    hc.handle_signals = false;
    auto host = TapHost::open_device(std::make_unique<HoldingDevice>(270), hc, core, kNoVlan);
    ASSERT_TRUE(host) << host.error();
    const auto& counters = (*host)->counters();
    EXPECT_EQ((*host)->step(TapHost::now() + std::chrono::milliseconds(200)), Wake::kOk);
    EXPECT_EQ(counters.frames_in, 256u);
    EXPECT_EQ((*host)->step(TapHost::now() + std::chrono::milliseconds(200)), Wake::kOk);
    EXPECT_EQ(counters.frames_in, 270u);
}

// IWCM_TAP_RING takes 0 or 1; anything else is refused before a device is opened.
TEST(TapRing, AnEnvironmentValueOtherThan0Or1IsRefused) {
    ASSERT_EQ(::setenv("IWCM_TAP_RING", "yes", 1), 0);
    CoreConfig cfg;
    cfg.mac = kOurMac;
    Core core(cfg);
    TapHostConfig hc;
    hc.tap = "iwcmring1";
    hc.handle_signals = false;
    auto host = TapHost::open(hc, core, kNoVlan);
    ::unsetenv("IWCM_TAP_RING");
    ASSERT_FALSE(host);
    EXPECT_EQ(host.error(), "IWCM_TAP_RING=yes: 0 or 1");
}

}  // namespace
}  // namespace iwcm::io
