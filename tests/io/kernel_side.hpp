// The kernel side of a TAP device in the tests: its IPv4 address, a packet socket that sees
// its frames, and a child process in a namespace of its own to run the test in.
// Read first: tests/io/tap_test.cpp.
#pragma once

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <linux/if.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

namespace iwcm::io {

// Gives the kernel's side of device `name` the address `addr`/24.
inline bool set_kernel_address(const char* name, const char* addr) {
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

// A non-blocking packet socket bound to device `name`: every frame in and out of it; -1 on
// failure.
inline int packet_socket(const char* name) {
    int s = ::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(ETH_P_ALL));
    if (s < 0) return -1;
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    if (::ioctl(s, SIOCGIFINDEX, &ifr) == 0) sll.sll_ifindex = ifr.ifr_ifindex;
    if (sll.sll_ifindex == 0 || ::bind(s, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
        ::close(s);
        return -1;
    }
    return s;
}

// Runs `body` in a forked child (which unshares its network namespace itself) and checks
// that it exits 0; the child says on stderr why it did not.
inline void run_in_child(int (*body)()) {
    ASSERT_EQ(::geteuid(), 0u) << "needs root: TAP devices and network namespaces";
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) ::_exit(body());
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "see the child's message above";
}

}  // namespace iwcm::io
