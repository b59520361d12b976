// Port reservation in the kernel's port space for shared-address mode.
//
// Read first: xsk.hpp (why the CM shares an address with the kernel), and
// bind(2), ip(7) on ip_local_port_range. Each port the CM listens on or
// connects from is held by a bound, never listening, kernel TCP socket on the
// shared address, as iwpmd and the rdma_cm port space do for siw and cxgb4:
// the kernel then neither hands the port to one of its own connections (its
// ephemeral choice skips ports with a bound socket) nor lets a local program
// bind it, and a port the kernel already uses is refused at once. A
// reservation with port 0 takes the port the kernel picks from its ephemeral
// range, so the CM's active ports and the kernel's never collide. The socket
// closes with the reservation, or with the process (SIGKILL included).
#pragma once

#include <cstdint>
#include <string>

#include "iwcm/address.hpp"
#include "iwcm/result.hpp"

namespace iwcm::io {

class PortReservation {
public:
    // Binds a TCP socket to addr:port (port 0: an ephemeral port the kernel
    // picks). The error says who holds the port when it is in use.
    static Expected<PortReservation, std::string> reserve(const IpAddr& addr, std::uint16_t port);
    PortReservation(PortReservation&& other) noexcept;
    PortReservation& operator=(PortReservation&& other) noexcept;
    PortReservation(const PortReservation&) = delete;
    PortReservation& operator=(const PortReservation&) = delete;
    ~PortReservation();

    const IpAddr& addr() const { return addr_; }
    std::uint16_t port() const { return port_; }

private:
    PortReservation(int fd, IpAddr addr, std::uint16_t port) : fd_(fd), addr_(addr), port_(port) {}
    int fd_ = -1;
    IpAddr addr_;
    std::uint16_t port_ = 0;
};

}  // namespace iwcm::io
