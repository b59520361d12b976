// TAP device. Read first: tap.hpp.
#include "io/tap/tap.hpp"

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <net/if_arp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "iwcm/assert.hpp"

namespace iwcm::io {

namespace {

std::string why(const std::string& name, const char* step) {
    return "TAP device " + name + ": " + step + ": " + std::strerror(errno);
}

// IFF_UP through an ordinary socket, as `ip link set NAME up` does.
bool bring_up(const std::string& name, MacAddr& mac, std::string& error) {
    int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
        error = why(name, "socket for ioctl");
        return false;
    }
    ifreq ifr{};
    std::memcpy(ifr.ifr_name, name.c_str(), name.size());
    bool ok = ::ioctl(s, SIOCGIFFLAGS, &ifr) == 0;
    if (!ok) error = why(name, "SIOCGIFFLAGS");
    if (ok && (ifr.ifr_flags & IFF_UP) == 0) {
        ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
        ok = ::ioctl(s, SIOCSIFFLAGS, &ifr) == 0;
        if (!ok) error = why(name, "bringing it up (SIOCSIFFLAGS)");
    }
    if (ok) {
        ok = ::ioctl(s, SIOCGIFHWADDR, &ifr) == 0;
        if (!ok) error = why(name, "SIOCGIFHWADDR");
        for (std::size_t i = 0; ok && i < 6; ++i)
            mac.bytes[i] = static_cast<std::uint8_t>(ifr.ifr_hwaddr.sa_data[i]);
    }
    ::close(s);
    return ok;
}

}  // namespace

Expected<TapDevice, std::string> TapDevice::open(const std::string& name, bool multi_queue) {
    if (name.empty() || name.size() >= IFNAMSIZ)
        return fail("TAP device name '" + name + "': 1 to 15 characters");
    int fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return fail(why(name, "open /dev/net/tun (are you root?)"));
    ifreq ifr{};
    ifr.ifr_flags = static_cast<short>(IFF_TAP | IFF_NO_PI | (multi_queue ? IFF_MULTI_QUEUE : 0));
    std::memcpy(ifr.ifr_name, name.c_str(), name.size());
    if (::ioctl(fd, TUNSETIFF, &ifr) != 0) {
        std::string e =
            why(name, multi_queue ? "TUNSETIFF (is it a multi-queue TAP device, and are you root?)"
                                  : "TUNSETIFF (is it a TAP device, free, and are you root?)");
        ::close(fd);
        return fail(e);
    }
    MacAddr mac;
    std::string error;
    if (!bring_up(name, mac, error)) {
        ::close(fd);
        return fail(error);
    }
    return TapDevice(fd, name, mac);
}

TapDevice::TapDevice(TapDevice&& other) noexcept
    : fd_(other.fd_), name_(std::move(other.name_)), kernel_mac_(other.kernel_mac_) {
    other.fd_ = -1;
}

TapDevice& TapDevice::operator=(TapDevice&& other) noexcept {
    if (this != &other) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = other.fd_;
        name_ = std::move(other.name_);
        kernel_mac_ = other.kernel_mac_;
        other.fd_ = -1;
    }
    return *this;
}

TapDevice::~TapDevice() {
    if (fd_ >= 0) ::close(fd_);
}

long TapDevice::read(std::span<std::byte> buf) {
    IWCM_ASSERT(fd_ >= 0);
    IWCM_ASSERT(!buf.empty());
    for (;;) {
        ssize_t n = ::read(fd_, buf.data(), buf.size());
        if (n >= 0) return static_cast<long>(n);
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        return -errno;
    }
}

int TapDevice::write(std::span<const std::byte> frame) {
    IWCM_ASSERT(fd_ >= 0);
    IWCM_ASSERT(frame.size() <= kMaxFrame);
    for (;;) {
        ssize_t n = ::write(fd_, frame.data(), frame.size());
        if (n >= 0) return 0;
        if (errno == EINTR) continue;
        return -errno;
    }
}

int TapDevice::write_parts(std::span<const std::byte> headers,
                           std::span<const std::span<const std::byte>> payload) {
    IWCM_ASSERT(fd_ >= 0);
    iov_.clear();
    iov_.push_back({const_cast<std::byte*>(headers.data()), headers.size()});
    std::size_t len = headers.size();
    for (auto piece : payload) {
        iov_.push_back({const_cast<std::byte*>(piece.data()), piece.size()});
        len += piece.size();
    }
    IWCM_ASSERT(len <= kMaxFrame);
    if (iov_.size() > IOV_MAX) return FrameDevice::write_parts(headers, payload);
    for (;;) {
        ssize_t n = ::writev(fd_, iov_.data(), static_cast<int>(iov_.size()));
        if (n >= 0) return 0;
        if (errno == EINTR) continue;
        return -errno;
    }
}

}  // namespace iwcm::io
