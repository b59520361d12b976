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

// struct virtio_net_hdr and its values, as <linux/virtio_net.h> and the virtio specification
// (1.2, section 5.1.6 "Device Operation") give them. That header is not C++ (a member of
// another struct is named `class`), so they are written out here.
struct VnetHeader {
    std::uint8_t flags;
    std::uint8_t gso_type;
    std::uint16_t hdr_len;      // Ethernet, IP and TCP headers
    std::uint16_t gso_size;     // payload bytes per segment
    std::uint16_t csum_start;   // where the sum starts
    std::uint16_t csum_offset;  // where the checksum goes, from csum_start
};
static_assert(sizeof(VnetHeader) == 10);
constexpr std::uint8_t kVnetNeedsCsum = 1;  // VIRTIO_NET_HDR_F_NEEDS_CSUM
constexpr std::uint8_t kVnetDataValid = 2;  // VIRTIO_NET_HDR_F_DATA_VALID
constexpr std::uint8_t kVnetGsoTcpV4 = 1;   // VIRTIO_NET_HDR_GSO_TCPV4
constexpr std::uint8_t kVnetGsoTcpV6 = 4;   // VIRTIO_NET_HDR_GSO_TCPV6

// What the kernel may hand us and will take from us with the virtio-net header: checksums
// left to finish, TCP segments of up to 64 KiB over IPv4 and IPv6 (not TUN_F_TSO_ECN: the
// kernel would then hand a run of segments that a CWR flag starts as one that carries it
// throughout, and not UFO or USO: we send no UDP).
constexpr unsigned kTunOffloads = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6;

std::uint16_t be16_at(std::span<const std::byte> b, std::size_t at) {
    return static_cast<std::uint16_t>((std::to_integer<unsigned>(b[at]) << 8) |
                                      std::to_integer<unsigned>(b[at + 1]));
}

// NEEDS_CSUM: the TCP checksum is unfinished (the segment never left this host);
// DATA_VALID: the kernel checked it. A GSO frame has NEEDS_CSUM too.
bool vouched_by(std::uint8_t flags) {
    return (flags & (kVnetNeedsCsum | kVnetDataValid)) != 0;
}

void put_le16(std::byte* p, std::size_t v) {
    p[0] = static_cast<std::byte>(v & 0xFF);
    p[1] = static_cast<std::byte>((v >> 8) & 0xFF);
}

}  // namespace

std::array<std::byte, 10> vnet_header(std::span<const std::byte> headers, std::size_t frame_len,
                                      const TxOffload& offload) {
    // struct virtio_net_hdr: flags, gso_type, then hdr_len, gso_size, csum_start and
    // csum_offset, each 16 bits little-endian.
    std::array<std::byte, 10> h{};
    if (!offload.checksum || headers.size() < 14) return h;
    std::size_t l3 = 14;
    std::uint16_t type = be16_at(headers, 12);
    if (type == 0x8100 && headers.size() >= 18) {  // one 802.1Q tag
        type = be16_at(headers, 16);
        l3 = 18;
    }
    std::size_t l4 = 0;
    std::uint8_t gso = 0;
    if (type == 0x0800 && headers.size() >= l3 + 20 &&
        std::to_integer<unsigned>(headers[l3 + 9]) == 6) {
        l4 = l3 + 4 * (std::to_integer<std::size_t>(headers[l3]) & 0xF);
        gso = kVnetGsoTcpV4;
    } else if (type == 0x86DD && headers.size() >= l3 + 40 &&
               std::to_integer<unsigned>(headers[l3 + 6]) == 6) {
        l4 = l3 + 40;  // the core writes no extension headers
        gso = kVnetGsoTcpV6;
    }
    if (l4 == 0 || headers.size() < l4 + 20) return h;  // no TCP segment: nothing left
    const std::size_t tcp_headers = l4 + 4 * (std::to_integer<std::size_t>(headers[l4 + 12]) >> 4);
    h[0] = static_cast<std::byte>(kVnetNeedsCsum);
    put_le16(&h[6], l4);  // csum_start: the TCP header
    put_le16(&h[8], 16);  // csum_offset: its checksum field
    if (offload.segment_size != 0 && frame_len > tcp_headers + offload.segment_size) {
        h[1] = static_cast<std::byte>(gso);
        put_le16(&h[2], tcp_headers);  // hdr_len
        put_le16(&h[4], offload.segment_size);
    }
    return h;
}

bool TapDevice::kernel_offloads() {
    const int fd = ::open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0) return false;
    unsigned features = 0;
    const bool ok = ::ioctl(fd, TUNGETFEATURES, &features) == 0 && (features & IFF_VNET_HDR) != 0;
    ::close(fd);
    return ok;
}

Expected<TapDevice, std::string> TapDevice::open(const std::string& name, bool multi_queue,
                                                 bool offload, bool ring) {
    if (name.empty() || name.size() >= IFNAMSIZ)
        return fail("TAP device name '" + name + "': 1 to 15 characters");
    int fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return fail(why(name, "open /dev/net/tun (are you root?)"));
    ifreq ifr{};
    ifr.ifr_flags = static_cast<short>(IFF_TAP | IFF_NO_PI | (multi_queue ? IFF_MULTI_QUEUE : 0) |
                                       (offload ? IFF_VNET_HDR : 0));
    std::memcpy(ifr.ifr_name, name.c_str(), name.size());
    if (::ioctl(fd, TUNSETIFF, &ifr) != 0) {
        std::string e =
            why(name, multi_queue ? "TUNSETIFF (is it a multi-queue TAP device, and are you root?)"
                                  : "TUNSETIFF (is it a TAP device, free, and are you root?)");
        ::close(fd);
        return fail(e);
    }
    if (offload) {
        // The header's size set, not assumed: a persistent device keeps what it was given.
        int size = sizeof(VnetHeader);
        const char* step = nullptr;
        if (::ioctl(fd, TUNSETVNETHDRSZ, &size) != 0)
            step = "TUNSETVNETHDRSZ";
        else if (::ioctl(fd, TUNSETOFFLOAD, static_cast<unsigned long>(kTunOffloads)) != 0)
            step = "TUNSETOFFLOAD";
        if (step != nullptr) {
            std::string e = why(name, step);
            ::close(fd);
            return fail(e);
        }
    }
    MacAddr mac;
    std::string error;
    if (!bring_up(name, mac, error)) {
        ::close(fd);
        return fail(error);
    }
    TapDevice dev(fd, name, mac, offload);
    if (ring) {
        auto r = TapRing::open(fd, kMaxFrame + (offload ? sizeof(VnetHeader) : 0));
        if (r)
            dev.ring_ = std::move(*r);
        else
            dev.ring_error_ = r.error();
    }
    return dev;
}

TapDevice::TapDevice(TapDevice&& other) noexcept
    : fd_(other.fd_),
      name_(std::move(other.name_)),
      kernel_mac_(other.kernel_mac_),
      offload_(other.offload_),
      vouched_(other.vouched_),
      ring_(std::move(other.ring_)),
      ring_error_(std::move(other.ring_error_)),
      failed_taken_(other.failed_taken_) {
    other.fd_ = -1;
}

TapDevice& TapDevice::operator=(TapDevice&& other) noexcept {
    if (this != &other) {
        ring_.reset();  // before the descriptor it writes to
        if (fd_ >= 0) ::close(fd_);
        fd_ = other.fd_;
        name_ = std::move(other.name_);
        kernel_mac_ = other.kernel_mac_;
        offload_ = other.offload_;
        vouched_ = other.vouched_;
        ring_ = std::move(other.ring_);
        ring_error_ = std::move(other.ring_error_);
        failed_taken_ = other.failed_taken_;
        other.fd_ = -1;
    }
    return *this;
}

TapDevice::~TapDevice() {
    ring_.reset();  // its queued frames out first
    if (fd_ >= 0) ::close(fd_);
}

long TapDevice::frame_of(std::span<const std::byte> read, std::span<const std::byte>& frame) {
    if (!offload_) {
        frame = read;
        return static_cast<long>(read.size());
    }
    if (read.size() <= sizeof(VnetHeader)) return 0;
    vouched_ = vouched_by(std::to_integer<std::uint8_t>(read[0]));  // the header's flags
    frame = read.subspan(sizeof(VnetHeader));
    return static_cast<long>(frame.size());
}

long TapDevice::read_view(std::span<const std::byte>& frame) {
    IWCM_ASSERT(fd_ >= 0);
    if (!ring_) return FrameDevice::read_view(frame);
    for (;;) {
        std::span<const std::byte> got;
        const long n = ring_->read(got);
        if (n <= 0) return n;
        // A read shorter than the header (none is) would be no frame: the next.
        if (const long len = frame_of(got, frame); len > 0) return len;
    }
}

void TapDevice::flush() {
    if (ring_) ring_->flush();
}

std::uint64_t TapDevice::take_failed_writes() {
    if (!ring_) return 0;
    const std::uint64_t failed = ring_->counters().writes_failed;
    const std::uint64_t n = failed - failed_taken_;
    failed_taken_ = failed;
    return n;
}

long TapDevice::read(std::span<std::byte> buf) {
    IWCM_ASSERT(fd_ >= 0);
    IWCM_ASSERT(!buf.empty());
    if (ring_) {
        std::span<const std::byte> frame;
        const long n = read_view(frame);
        if (n <= 0) return n;
        if (frame.size() > buf.size()) return -EMSGSIZE;
        std::memcpy(buf.data(), frame.data(), frame.size());
        return n;
    }
    VnetHeader h{};
    iovec iov[2] = {{&h, sizeof h}, {buf.data(), buf.size()}};
    for (;;) {
        ssize_t n = offload_ ? ::readv(fd_, iov, 2) : ::read(fd_, buf.data(), buf.size());
        if (n >= 0) {
            if (!offload_) return static_cast<long>(n);
            vouched_ = vouched_by(h.flags);
            return n > static_cast<ssize_t>(sizeof h)
                       ? static_cast<long>(n) - static_cast<long>(sizeof h)
                       : 0;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        return -errno;
    }
}

int TapDevice::writev_all(std::size_t len) {
    IWCM_ASSERT(len <= kMaxFrame);
    // With `offload` the first iovec is the virtio-net header, which `len` does not count.
    if (ring_) return ring_->write(iov_, len + (offload_ ? sizeof(VnetHeader) : 0));
    for (;;) {
        ssize_t n = ::writev(fd_, iov_.data(), static_cast<int>(iov_.size()));
        if (n >= 0) return 0;
        if (errno == EINTR) continue;
        return -errno;
    }
}

int TapDevice::write(std::span<const std::byte> frame) {
    IWCM_ASSERT(fd_ >= 0);
    IWCM_ASSERT(frame.size() <= kMaxFrame);
    if (offload_) return write_offload(frame, {}, {});
    if (ring_) {
        iov_.assign(1, iovec{const_cast<std::byte*>(frame.data()), frame.size()});
        return writev_all(frame.size());
    }
    for (;;) {
        ssize_t n = ::write(fd_, frame.data(), frame.size());
        if (n >= 0) return 0;
        if (errno == EINTR) continue;
        return -errno;
    }
}

int TapDevice::write_parts(std::span<const std::byte> headers,
                           std::span<const std::span<const std::byte>> payload) {
    if (offload_) return write_offload(headers, payload, {});
    IWCM_ASSERT(fd_ >= 0);
    iov_.clear();
    iov_.push_back({const_cast<std::byte*>(headers.data()), headers.size()});
    std::size_t len = headers.size();
    for (auto piece : payload) {
        iov_.push_back({const_cast<std::byte*>(piece.data()), piece.size()});
        len += piece.size();
    }
    if (iov_.size() > IOV_MAX) return FrameDevice::write_parts(headers, payload);
    return writev_all(len);
}

int TapDevice::write_offload(std::span<const std::byte> headers,
                             std::span<const std::span<const std::byte>> payload,
                             const TxOffload& offload) {
    IWCM_ASSERT(fd_ >= 0);
    IWCM_ASSERT(offload_);
    IWCM_ASSERT(offload.segment_size == 0 || offload.checksum);
    std::size_t len = headers.size();
    for (auto piece : payload) len += piece.size();
    const std::array<std::byte, 10> h = vnet_header(headers, len, offload);
    iov_.clear();
    iov_.push_back({const_cast<std::byte*>(h.data()), h.size()});
    iov_.push_back({const_cast<std::byte*>(headers.data()), headers.size()});
    for (auto piece : payload) iov_.push_back({const_cast<std::byte*>(piece.data()), piece.size()});
    if (iov_.size() > IOV_MAX) {
        // Joined (FrameDevice::write_parts's way), behind the same header.
        joined_.assign(headers.begin(), headers.end());
        wire::append(joined_, payload);
        iov_.resize(1);
        iov_.push_back({joined_.data(), joined_.size()});
    }
    return writev_all(len);
}

DeviceOffloads TapDevice::offloads() const {
    if (!offload_) return {};
    return {true, kMaxSegment, true};
}

}  // namespace iwcm::io
