// Port reservation. Read first: ports.hpp.
#include "io/shared/ports.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "iwcm/assert.hpp"

namespace iwcm::io {

namespace {

socklen_t to_sockaddr(const IpAddr& addr, std::uint16_t port, sockaddr_storage& ss) {
    std::memset(&ss, 0, sizeof ss);
    if (addr.is_v4()) {
        auto* s = reinterpret_cast<sockaddr_in*>(&ss);
        s->sin_family = AF_INET;
        s->sin_port = htons(port);
        std::memcpy(&s->sin_addr, addr.raw().data(), 4);
        return sizeof(sockaddr_in);
    }
    auto* s = reinterpret_cast<sockaddr_in6*>(&ss);
    s->sin6_family = AF_INET6;
    s->sin6_port = htons(port);
    std::memcpy(&s->sin6_addr, addr.raw().data(), 16);
    return sizeof(sockaddr_in6);
}

}  // namespace

Expected<PortReservation, std::string> PortReservation::reserve(const IpAddr& addr,
                                                                std::uint16_t port) {
    const int family = addr.is_v4() ? AF_INET : AF_INET6;
    const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return fail("reserving a port: socket: " + std::string(std::strerror(errno)));
    if (family == AF_INET6) {
        // An IPv6 reservation holds the IPv6 port only; IPv4 has its own.
        const int on = 1;
        (void)::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
    }
    sockaddr_storage ss;
    const socklen_t len = to_sockaddr(addr, port, ss);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
        const int err = errno;
        ::close(fd);
        const std::string where = Endpoint{addr, port}.to_string();
        if (err == EADDRINUSE)
            return fail(port == 0 ? "no free port on " + addr.to_string() + " (all in use)"
                                  : "port " + std::to_string(port) + " on " + addr.to_string() +
                                        " is in use by the kernel");
        if (err == EADDRNOTAVAIL)
            return fail("reserving " + where + ": " + addr.to_string() +
                        " is not an address of this host");
        return fail("reserving " + where + ": " + std::strerror(err));
    }
    socklen_t got = sizeof ss;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &got) != 0) {
        const int err = errno;
        ::close(fd);
        return fail("reserving a port: getsockname: " + std::string(std::strerror(err)));
    }
    const std::uint16_t bound =
        ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
    IWCM_ASSERT(bound != 0);
    IWCM_ASSERT(port == 0 || bound == port);
    return PortReservation(fd, addr, bound);
}

PortReservation::PortReservation(PortReservation&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), addr_(other.addr_), port_(other.port_) {}

PortReservation& PortReservation::operator=(PortReservation&& other) noexcept {
    if (this != &other) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = std::exchange(other.fd_, -1);
        addr_ = other.addr_;
        port_ = other.port_;
    }
    return *this;
}

PortReservation::~PortReservation() {
    if (fd_ >= 0) ::close(fd_);
}

}  // namespace iwcm::io
