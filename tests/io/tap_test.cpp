// The TAP device against the kernel: in a private network namespace (a
// forked child that unshares CLONE_NEWNET, so nothing touches the host), the
// test creates a TAP by name, gives the kernel side an address, and checks
// that an ARP request written to the TAP draws the kernel's reply out of it.
// Needs root, like the interop tests: without it the test fails, loudly.
//
// Read first: src/io/tap.hpp.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <linux/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "io/tap.hpp"
#include "wire/arp.hpp"
#include "wire/ethernet.hpp"

namespace iwcm::io {
namespace {

const char* kTap = "iwcmtap0";
const MacAddr kOurMac = *MacAddr::parse("02:00:0a:63:c8:02");

bool set_kernel_address(const char* name, const char* addr) {
    int s = ::socket(AF_INET, SOCK_DGRAM, 0);
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
    auto* sin = reinterpret_cast<sockaddr_in*>(&ifr.ifr_addr);
    sin->sin_family = AF_INET;
    ::inet_pton(AF_INET, addr, &sin->sin_addr);
    bool ok = ::ioctl(s, SIOCSIFADDR, &ifr) == 0;
    ::inet_pton(AF_INET, "255.255.255.0", &sin->sin_addr);
    ok = ok && ::ioctl(s, SIOCSIFNETMASK, &ifr) == 0;
    ::close(s);
    return ok;
}

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
    // every 100 ms until the reply comes, for at most 5 s.
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < end) {
        if (tap->write(frame) != 0) return 14;
        pollfd p{tap->fd(), POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) continue;
        for (long n; (n = tap->read(buf)) > 0;) {
            auto e = wire::parse_ethernet(std::span<const std::byte>(buf, static_cast<std::size_t>(n)));
            if (!e || e->repr.ethertype != wire::kEtherTypeArp) continue;  // IPv6 chatter
            auto arp = wire::parse_arp(e->payload);
            if (arp && arp->op == wire::ArpOp::kReply && e->repr.dst == kOurMac &&
                arp->sender_mac == tap->kernel_mac() && IpAddr(arp->sender_ip) == *IpAddr::parse("10.99.200.1"))
                return 0;
        }
    }
    std::fprintf(stderr, "no ARP reply from the kernel through %s\n", kTap);
    return 15;
}

TEST(Tap, CreatesDeviceAndExchangesFramesWithTheKernel) {
    ASSERT_EQ(::geteuid(), 0u) << "needs root: TAP devices and network namespaces";
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) ::_exit(child());
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "see the child's message above";
}

TEST(Tap, BadNameIsRefusedWithAReason) {
    auto t = TapDevice::open("a-name-that-is-far-too-long");
    ASSERT_FALSE(t);
    EXPECT_NE(t.error().find("1 to 15 characters"), std::string::npos);
}

}  // namespace
}  // namespace iwcm::io
