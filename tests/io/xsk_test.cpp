// XskDevice on a veth pair in a network namespace of the test's own (left again at
// the end): what busy polling sets on the socket, and that a frame for a steered port
// still reaches read() when only read() drives the receive side. Needs root.
#include "io/shared/xsk.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "wire/frame.hpp"

// Only where shared-address mode is built (iwcm_io's IWCM_WITH_XDP).
#ifdef IWCM_WITH_XDP
namespace iwcm::io {
namespace {

const MacAddr kOurMac = *MacAddr::parse("02:00:0a:4d:00:01");
const MacAddr kPeerMac = *MacAddr::parse("02:00:0a:4d:00:02");
const IpAddr kOurAddr = *IpAddr::parse("10.77.0.1");
const IpAddr kPeerAddr = *IpAddr::parse("10.77.0.2");
constexpr std::uint16_t kPort = 7000;

int sh(const std::string& cmd) {
    const int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

int int_option(int fd, int option) {
    int v = -1;
    socklen_t len = sizeof v;
    return ::getsockopt(fd, SOL_SOCKET, option, &v, &len) == 0 ? v : -1;
}

// The test's namespace: entered in SetUp, left (and with it the veth pair) in TearDown.
class XskTest : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_EQ(::geteuid(), 0u) << "needs root: network namespaces, veth, XDP";
        home_ = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        ASSERT_GE(home_, 0);
        ASSERT_EQ(::unshare(CLONE_NEWNET), 0) << "unshare(CLONE_NEWNET)";
        ASSERT_EQ(sh("ip link add xa address " + kOurMac.to_string() +
                     " type veth peer name xb address " + kPeerMac.to_string() +
                     " && ip addr add 10.77.0.1/24 dev xa && ip link set xa up && "
                     "ip link set xb up"),
                  0);
    }
    void TearDown() override {
        if (home_ < 0) return;
        EXPECT_EQ(::setns(home_, CLONE_NEWNET), 0);
        ::close(home_);
    }

private:
    int home_ = -1;
};

// A SYN from the peer's end (xb) to our steered port, through a packet socket.
std::vector<std::byte> send_syn() {
    wire::FrameRepr r;
    r.eth.dst = kOurMac;
    r.eth.src = kPeerMac;
    r.ip.src = kPeerAddr;
    r.ip.dst = kOurAddr;
    r.tcp.src_port = 40000;
    r.tcp.dst_port = kPort;
    r.tcp.seq = wire::SeqNumber(1000);
    r.tcp.flags = wire::tcp_flags::kSyn;
    r.tcp.window = 1024;
    std::vector<std::byte> frame(wire::tcp_frame_len(r, 0));
    frame.resize(wire::emit_tcp_frame(r, {}, frame));
    const int s = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
    EXPECT_GE(s, 0);
    sockaddr_ll to{};
    to.sll_family = AF_PACKET;
    to.sll_ifindex = static_cast<int>(::if_nametoindex("xb"));
    to.sll_halen = 6;
    EXPECT_EQ(
        ::sendto(s, frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
        static_cast<ssize_t>(frame.size()));
    ::close(s);
    return frame;
}

TEST_F(XskTest, BusyPollingSetsTheSocketAndReadDrivesTheRing) {
    auto x = XskDevice::open("xa", XskDevice::Mode::kNative);
    ASSERT_TRUE(x) << x.error();
    XskDevice& d = **x;
    EXPECT_EQ(int_option(d.fd(), SO_PREFER_BUSY_POLL), 0) << "busy polling is not the default";
    ASSERT_TRUE(d.set_busy_poll(50));
    EXPECT_EQ(int_option(d.fd(), SO_PREFER_BUSY_POLL), 1);
    EXPECT_EQ(int_option(d.fd(), SO_BUSY_POLL), 50);
    // (SO_BUSY_POLL_BUDGET has no getsockopt: set_busy_poll fails if the kernel refuses it.)

    ASSERT_TRUE(d.add_port(kOurAddr, kPort));
    const std::vector<std::byte> sent = send_syn();
    std::array<std::byte, XskDevice::kFrameSize> buf{};
    long len = 0;
    // A bounded poll of the ring: the frame crosses the veth in the kernel meanwhile.
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while ((len = d.read(buf)) == 0 && std::chrono::steady_clock::now() < limit) {
    }
    ASSERT_EQ(len, static_cast<long>(sent.size()));
    EXPECT_EQ(std::vector<std::byte>(buf.begin(), buf.begin() + len), sent);
    EXPECT_EQ(d.read(buf), 0) << "one frame was sent";
}

}  // namespace
}  // namespace iwcm::io
#endif
