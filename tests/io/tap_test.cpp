// The TAP device against the kernel: in a private network namespace (a
// forked child that unshares CLONE_NEWNET, so nothing touches the host), the
// test creates a TAP by name, gives the kernel side an address, and checks
// that an ARP request written to the TAP draws the kernel's reply out of it.
// Needs root, like the interop tests: without it the test fails, loudly.
// A second test runs the whole TapHost there and captures, with a packet
// socket on the TAP, the announcements it sends when an address is added.
//
// Read first: src/io/tap/tap.hpp, src/io/loop/event_loop.hpp.
#include <gtest/gtest.h>

#include <arpa/inet.h>
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
#include <cstring>
#include <mutex>

#include "io/kernel_side.hpp"
#include "io/loop/event_loop.hpp"
#include "io/tap/tap.hpp"
#include "iwcm/core.hpp"
#include "wire/arp.hpp"
#include "wire/bytes.hpp"
#include "wire/ethernet.hpp"

namespace iwcm::io {
namespace {

const char* kTap = "iwcmtap0";
const MacAddr kOurMac = *MacAddr::parse("02:00:0a:63:c8:02");

// Runs in the child, in its own namespace: 0 on success, else a line on stderr.
int child() {
    if (::unshare(CLONE_NEWNET) != 0) {
        std::perror("unshare(CLONE_NEWNET)");
        return 10;
    }
    auto tap = TapDevice::open(kTap);
    if (!tap) {
        std::fprintf(stderr, "%s\n", tap.error().c_str());
        return 11;
    }
    std::byte buf[TapDevice::kMaxFrame];
    if (tap->name() != kTap || tap->read(buf) < 0) return 12;
    if (!set_kernel_address(kTap, "10.99.200.1")) {
        std::perror("SIOCSIFADDR");
        return 13;
    }
    wire::EthernetRepr eth{MacAddr::broadcast(), kOurMac, std::nullopt, wire::kEtherTypeArp};
    wire::ArpRepr req{wire::ArpOp::kRequest, kOurMac, *Ipv4Addr::parse("10.99.200.2"), MacAddr{},
                      *Ipv4Addr::parse("10.99.200.1")};
    std::byte frame[wire::kEthernetHeaderLen + wire::kArpLen];
    eth.emit(frame);
    req.emit(std::span<std::byte>(frame).subspan(wire::kEthernetHeaderLen));
    // The kernel activates a new link (its qdisc) asynchronously: ask again
    // every 100 ms until the reply comes, for at most 5 s. Then once more with the
    // request written in two parts (write_parts: one writev), cut after the
    // Ethernet header: the kernel answers only a whole request.
    const std::span<const std::byte> whole(frame);
    for (bool parts : {false, true}) {
        bool answered = false;
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (!answered && std::chrono::steady_clock::now() < end) {
            const std::span<const std::byte> arp = whole.subspan(wire::kEthernetHeaderLen);
            const int w =
                parts ? tap->write_parts(whole.first(wire::kEthernetHeaderLen), std::span(&arp, 1))
                      : tap->write(whole);
            if (w != 0) return 14;
            pollfd p{tap->fd(), POLLIN, 0};
            if (::poll(&p, 1, 100) <= 0) continue;
            for (long n; (n = tap->read(buf)) > 0;) {
                auto e = wire::parse_ethernet(
                    std::span<const std::byte>(buf, static_cast<std::size_t>(n)));
                if (!e || e->repr.ethertype != wire::kEtherTypeArp) continue;  // IPv6 chatter
                auto arp = wire::parse_arp(e->payload);
                if (arp && arp->op == wire::ArpOp::kReply && e->repr.dst == kOurMac &&
                    arp->sender_mac == tap->kernel_mac() &&
                    IpAddr(arp->sender_ip) == *IpAddr::parse("10.99.200.1"))
                    answered = true;
            }
        }
        if (!answered) {
            std::fprintf(stderr, "no ARP reply from the kernel through %s%s\n", kTap,
                         parts ? " (request in two parts)" : "");
            return 15;
        }
    }
    return 0;
}

TEST(Tap, CreatesDeviceAndExchangesFramesWithTheKernel) {
    run_in_child(child);
}

// The TapHost announces 10.99.201.2 (gratuitous ARP) and fd99:201::2
// (unsolicited advertisement) when they are added, and each again
// `kInterval` later from its own timer; the captured frames are compared
// byte for byte with frames written out by hand.
int announce_child() {
    constexpr auto kInterval = std::chrono::milliseconds(300);
    const char* name = "iwcmtap1";
    if (::unshare(CLONE_NEWNET) != 0) {
        std::perror("unshare(CLONE_NEWNET)");
        return 20;
    }
    CoreConfig cfg;
    cfg.mac = kOurMac;
    Core core(cfg);
    TapHostConfig hc;
    hc.tap = name;
    hc.handle_signals = false;
    hc.neighbors.announce_interval = kInterval;
    auto host = TapHost::open(hc, core, kNoVlan);
    if (!host) {
        std::fprintf(stderr, "%s\n", host.error().c_str());
        return 21;
    }
    const int cap = packet_socket(name);
    if (cap < 0) {
        std::perror("packet socket");
        return 22;
    }
    const auto start = std::chrono::steady_clock::now();
    if (!(*host)->add_address(*IpAddr::parse("10.99.201.2")) ||
        !(*host)->add_address(*IpAddr::parse("fd99:201::2")))
        return 23;
    (*host)->flush();
    const auto garp = wire::hex_bytes(
        "ff ff ff ff ff ff 02 00 0a 63 c8 02 08 06 00 01 08 00 06 04 00 01"
        "02 00 0a 63 c8 02 0a 63 c9 02 00 00 00 00 00 00 0a 63 c9 02");
    // fd99:201::2 to ff02::1, hop limit 255, NA with O only, target option.
    const auto na = wire::hex_bytes(
        "33 33 00 00 00 01 02 00 0a 63 c8 02 86 dd 60 00 00 00 00 20 3a ff"
        "fd 99 02 01 00 00 00 00 00 00 00 00 00 00 00 02"
        "ff 02 00 00 00 00 00 00 00 00 00 00 00 00 00 01"
        "88 00 83 00 20 00 00 00 fd 99 02 01 00 00 00 00 00 00 00 00 00 00 00 02"
        "02 01 02 00 0a 63 c8 02");
    std::vector<std::vector<std::byte>> got;
    std::vector<std::chrono::steady_clock::duration> when;
    const auto end = start + std::chrono::seconds(3);
    while (std::chrono::steady_clock::now() < end && got.size() < 4) {
        (*host)->step(TapHost::now() + std::chrono::milliseconds(20));
        std::byte buf[TapDevice::kMaxFrame];
        for (long n; (n = ::recv(cap, buf, sizeof buf, 0)) > 0;) {
            std::vector<std::byte> f(buf, buf + n);
            if (f == garp || f == na) {
                got.push_back(f);
                when.push_back(std::chrono::steady_clock::now() - start);
            }
        }
    }
    ::close(cap);
    const auto& n = (*host)->neighbors().counters();
    if (got.size() != 4 || got[0] != garp || got[1] != na || got[2] != garp || got[3] != na) {
        std::fprintf(stderr, "captured %zu of the 4 announcements, in the wrong order or bytes\n",
                     got.size());
        return 24;
    }
    if (when[1] >= kInterval || when[2] < kInterval || n.announcements_sent != 4) {
        std::fprintf(stderr, "announcements at the wrong times or not counted\n");
        return 25;
    }
    return 0;
}

TEST(Tap, TapHostAnnouncesAddedAddressesTwice) {
    run_in_child(announce_child);
}

TEST(Tap, BadNameIsRefusedWithAReason) {
    auto t = TapDevice::open("a-name-that-is-far-too-long");
    ASSERT_FALSE(t);
    EXPECT_NE(t.error().find("1 to 15 characters"), std::string::npos);
}

// A device that moves nothing: enough for TapHost::open_device's checks.
class IdleDevice final : public FrameDevice {
public:
    IdleDevice() : fd_(::eventfd(0, EFD_NONBLOCK)) {}
    ~IdleDevice() override { ::close(fd_); }
    IdleDevice(const IdleDevice&) = delete;
    IdleDevice& operator=(const IdleDevice&) = delete;
    int fd() const override { return fd_; }
    const std::string& name() const override { return name_; }
    long read(std::span<std::byte>) override { return 0; }
    int write(std::span<const std::byte>) override { return 0; }
    std::size_t max_frame() const override { return TapDevice::kMaxFrame; }

private:
    int fd_;
    std::string name_ = "idle0";
};

// A device that keeps what it is given: FrameDevice::write_parts's default joins the parts
// into one frame for write().
class RecordingDevice final : public FrameDevice {
public:
    int fd() const override { return -1; }
    const std::string& name() const override { return name_; }
    long read(std::span<std::byte>) override { return 0; }
    int write(std::span<const std::byte> f) override {
        frames.emplace_back(f.begin(), f.end());
        return 0;
    }
    std::size_t max_frame() const override { return TapDevice::kMaxFrame; }
    std::vector<std::vector<std::byte>> frames;

private:
    std::string name_ = "rec0";
};

TEST(FrameDevice, WritePartsJoinsThePartsByDefault) {
    const auto head = wire::hex_bytes("01 02 03 04 05");
    const auto tail = wire::hex_bytes("06 07 08");
    RecordingDevice d;
    FrameDevice& dev = d;
    const std::span<const std::byte> pieces[] = {
        std::span(tail).first(1), {}, std::span(tail).subspan(1)};
    EXPECT_EQ(dev.write_parts(head, pieces), 0);
    EXPECT_EQ(dev.write_parts(head, {}), 0);
    ASSERT_EQ(d.frames.size(), 2u);
    EXPECT_EQ(d.frames[0], wire::hex_bytes("01 02 03 04 05 06 07 08"));
    EXPECT_EQ(d.frames[1], head);
}

// Offloaded segments exceed any real MTU: a host on a device refuses a core
// configured for them, and takes the same core without.
TEST(Tap, HostRefusesSegmentOffload) {
    CoreConfig cfg;
    cfg.mac = kOurMac;
    cfg.stream.segment_offload = 44 * 1460;
    Core offloading(cfg);
    TapHostConfig hc;
    hc.handle_signals = false;
    auto refused = TapHost::open_device(std::make_unique<IdleDevice>(), hc, offloading, kNoVlan);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error(),
              "segment offload is only for the in-memory link or a TAP with the virtio-net header, "
              "not idle0");
    cfg.stream.segment_offload = 0;
    Core plain(cfg);
    auto host = TapHost::open_device(std::make_unique<IdleDevice>(), hc, plain, kNoVlan);
    EXPECT_TRUE(host) << (host ? "" : host.error());
}

// Checksums left out (CoreConfig::checksum_offload) are for a link in memory only: a host on a
// device refuses such a core, whatever else it is configured for.
TEST(Tap, HostRefusesChecksumOffload) {
    CoreConfig cfg;
    cfg.mac = kOurMac;
    cfg.checksum_offload = true;
    Core offloading(cfg);
    TapHostConfig hc;
    hc.handle_signals = false;
    auto refused = TapHost::open_device(std::make_unique<IdleDevice>(), hc, offloading, kNoVlan);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error(), "checksum offload is only for the in-memory link, not idle0");
}

// A device whose frames wait in memory, as AF_XDP's ring (reads_without_syscall
// as set), keeping what it is given.
class RingDevice final : public FrameDevice {
public:
    explicit RingDevice(bool ring) : ring_(ring), fd_(::eventfd(0, EFD_NONBLOCK)) {}
    ~RingDevice() override { ::close(fd_); }
    RingDevice(const RingDevice&) = delete;
    RingDevice& operator=(const RingDevice&) = delete;
    int fd() const override { return fd_; }
    const std::string& name() const override { return name_; }
    long read(std::span<std::byte> buf) override {
        if (waiting.empty()) return 0;
        const std::vector<std::byte> f = std::move(waiting.front());
        waiting.erase(waiting.begin());
        std::copy(f.begin(), f.end(), buf.begin());
        return static_cast<long>(f.size());
    }
    int write(std::span<const std::byte> f) override {
        sent.emplace_back(f.begin(), f.end());
        return 0;
    }
    bool reads_without_syscall() const override { return ring_; }
    std::size_t max_frame() const override { return TapDevice::kMaxFrame; }
    std::vector<std::vector<std::byte>> waiting;
    std::vector<std::vector<std::byte>> sent;

private:
    bool ring_;
    int fd_;
    std::string name_ = "ring0";
};

// An ARP request from 10.99.202.9 for our 10.99.202.2, and our reply.
constexpr const char* kArpRequest =
    "ff ff ff ff ff ff 02 00 0a 63 ca 09 08 06 00 01 08 00 06 04 00 01"
    "02 00 0a 63 ca 09 0a 63 ca 09 00 00 00 00 00 00 0a 63 ca 02";
constexpr const char* kArpReply =
    "02 00 0a 63 ca 09 02 00 0a 63 c8 02 08 06 00 01 08 00 06 04 00 02"
    "02 00 0a 63 c8 02 0a 63 ca 02 02 00 0a 63 ca 09 0a 63 ca 09";

// A host on a RingDevice with our address 10.99.202.2, its announcements sent and
// forgotten; `device` is the device it owns.
std::unique_ptr<TapHost> ring_host(Core& core, bool ring, RingDevice*& device) {
    TapHostConfig hc;
    hc.handle_signals = false;
    auto dev = std::make_unique<RingDevice>(ring);
    device = dev.get();
    auto host = TapHost::open_device(std::move(dev), hc, core, kNoVlan);
    EXPECT_TRUE(host) << host.error();
    if (!host) return nullptr;
    EXPECT_TRUE((*host)->add_address(*IpAddr::parse("10.99.202.2")));
    (*host)->flush();
    device->sent.clear();
    return std::move(*host);
}

// poll_frames: over a ring it handles the frames waiting (here an ARP request for our
// address), runs the after_step hooks and sends what they caused (the reply) at once;
// over a device whose read is a system call it reads nothing.
TEST(Tap, PollFramesReadsARingAndNothingElse) {
    const auto request = wire::hex_bytes(kArpRequest);
    const auto reply = wire::hex_bytes(kArpReply);
    for (bool ring : {true, false}) {
        SCOPED_TRACE(ring ? "a ring" : "a device read by a system call");
        CoreConfig cfg;
        cfg.mac = kOurMac;
        Core core(cfg);
        RingDevice* dev = nullptr;
        auto host = ring_host(core, ring, dev);
        ASSERT_TRUE(host);
        RingDevice& d = *dev;
        int hooks = 0;
        host->after_step([&](Instant) { ++hooks; });
        EXPECT_FALSE(host->poll_frames()) << "nothing waits";
        EXPECT_EQ(hooks, 0);
        d.waiting.push_back(request);
        EXPECT_EQ(host->poll_frames(), ring);
        if (ring) {
            EXPECT_TRUE(d.waiting.empty());
            EXPECT_EQ(hooks, 1);
            ASSERT_EQ(d.sent.size(), 1u);
            EXPECT_EQ(d.sent[0], reply);
        } else {
            EXPECT_EQ(d.waiting.size(), 1u);
            EXPECT_EQ(hooks, 0);
            EXPECT_TRUE(d.sent.empty());
        }
    }
}

// Busy polling: step() reads the device though epoll never says a frame waits (the
// device's descriptor stays unreadable here), does not wait for `until`, and tells
// application threads that no one sleeps (so none writes a wake-up).
TEST(Tap, BusyPollingReadsTheDeviceWithoutWaiting) {
    const auto request = wire::hex_bytes(kArpRequest);
    const auto reply = wire::hex_bytes(kArpReply);
    CoreConfig cfg;
    cfg.mac = kOurMac;
    Core core(cfg);
    RingDevice* dev = nullptr;
    auto host = ring_host(core, false, dev);
    ASSERT_TRUE(host);
    RingDevice& d = *dev;
    TapHost& h = *host;
    EXPECT_EQ(h.sleeping_until(), kInstantNever);
    h.set_busy_poll(true);
    EXPECT_TRUE(h.busy_poll());
    EXPECT_EQ(h.sleeping_until(), Instant::min());
    std::mutex lock;
    std::unique_lock held(lock);
    h.set_wait_lock(&lock);
    const Instant far = TapHost::now() + std::chrono::hours(1);
    EXPECT_EQ(h.step(far), Wake::kOk);  // nothing waits: back at once all the same
    EXPECT_TRUE(d.sent.empty());
    d.waiting.push_back(request);
    EXPECT_EQ(h.step(far), Wake::kOk);
    EXPECT_TRUE(d.waiting.empty());
    ASSERT_EQ(d.sent.size(), 1u);
    EXPECT_EQ(d.sent[0], reply);
    EXPECT_TRUE(held.owns_lock());
    EXPECT_EQ(h.sleeping_until(), Instant::min());
    h.set_wait_lock(nullptr);
    h.set_busy_poll(false);
    EXPECT_EQ(h.sleeping_until(), kInstantNever);
}

}  // namespace
}  // namespace iwcm::io
