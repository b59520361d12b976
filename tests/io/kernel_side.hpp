// The kernel side of a TAP device in the tests: its IPv4 address.
// Read first: tests/io/tap_test.cpp.
#pragma once

#include <arpa/inet.h>
#include <linux/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
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

}  // namespace iwcm::io
