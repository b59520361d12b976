// The AF_XDP device. Read first: xsk.hpp, then bpf/steer.bpf.c.
#include "io/shared/xsk.hpp"

#include <cerrno>
#include <cstring>

#include "iwcm/assert.hpp"
#include "wire/pieces.hpp"

#ifdef IWCM_WITH_XDP

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <xdp/xsk.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <thread>
#include <tuple>
#include <vector>

#include "steer_bpf.hpp"

namespace iwcm::io {

namespace {

constexpr std::uint32_t kFrames = 2048;  // UMEM: half for receive, half for send
constexpr std::uint32_t kRing = kFrames / 2;
// The fill ring has room for twice the receive frames. The kernel publishes how far
// it has read the fill ring lazily (xsk_flush: after it has published the receive
// ring), so a frame just read from the receive ring may still count as in the fill
// ring: with a fill ring of exactly kRing, a refill then finds it full. Each frame
// is at most once in the fill ring or among the entries read but not yet published,
// so 2 * kRing always has room.
constexpr std::uint32_t kFillRing = 2 * kRing;
static_assert((kFillRing & (kFillRing - 1)) == 0, "AF_XDP ring sizes are powers of two");
// How long open() waits for the queue of a socket closed just before.
constexpr auto kBusyLimit = std::chrono::seconds(2);

// The key of the program's cm_ports map (struct cm_port_key in steer.bpf.c).
struct PortKey {
    std::uint8_t family;
    std::uint8_t pad;
    std::uint16_t port_be;
    std::uint8_t addr[16];
};
static_assert(sizeof(PortKey) == 20);

std::string errno_text(int err) {
    return std::strerror(err < 0 ? -err : err);
}

// libbpf's messages: the last warning is kept for an error text, none printed.
char g_libbpf_last[256];
int libbpf_print(enum libbpf_print_level level, const char* format, va_list args) {
    if (level != LIBBPF_DEBUG) std::vsnprintf(g_libbpf_last, sizeof g_libbpf_last, format, args);
    return 0;
}

// What is missing for an errno of a BPF or AF_XDP step.
std::string missing(int err) {
    err = err < 0 ? -err : err;
    if (err == EPERM || err == EACCES)
        return " (shared-address mode needs root: CAP_BPF, CAP_NET_ADMIN, CAP_NET_RAW)";
    if (err == ENOSYS) return " (this kernel has no BPF system call: CONFIG_BPF_SYSCALL)";
    if (err == EAFNOSUPPORT) return " (this kernel has no AF_XDP sockets: CONFIG_XDP_SOCKETS)";
    return "";
}

std::string step_error(const std::string& step, int err) {
    return step + ": " + errno_text(err) + missing(err);
}

PortKey port_key(const IpAddr& addr, std::uint16_t port) {
    PortKey k{};
    k.family = addr.is_v4() ? 4 : 6;
    k.port_be = static_cast<std::uint16_t>((port >> 8) | (port << 8));
    std::memcpy(k.addr, addr.raw().data(), addr.is_v4() ? 4 : 16);
    return k;
}

}  // namespace

struct XskDevice::Impl {
    std::string name;
    int ifindex = 0;
    int claim_fd = -1;
    bpf_object* obj = nullptr;
    int prog_fd = -1;
    int ports_fd = -1;
    int xsks_fd = -1;
    XskDevice::Mode mode = XskDevice::Mode::kAuto;
    std::uint32_t attach_flags = 0;  // XDP_FLAGS_DRV_MODE or XDP_FLAGS_SKB_MODE once attached
    void* area = nullptr;
    xsk_umem* umem = nullptr;
    xsk_socket* xsk = nullptr;
    xsk_ring_prod fill{};
    xsk_ring_cons comp{};
    xsk_ring_cons rx{};
    xsk_ring_prod tx{};
    std::vector<std::uint64_t> free_tx;  // UMEM frames not in flight on the send side
    bool zero_copy = false;
    bool busy_poll = false;                    // set_busy_poll(): read() drives the NAPI poll
    std::uint32_t queue = 0;                   // the receive queue the socket is bound to
    const XskDevice* borrowed_from = nullptr;  // open_queue(): the device with the program

    ~Impl();
    std::string claim();
    std::string remove_stale();
    std::string load_and_attach();
    std::string open_socket();
    void refill(std::uint64_t addr);
    void kick_tx();
    std::uint32_t unsent = 0;  // frames put on the TX ring since the kernel last emptied it
    void reclaim();
};

XskDevice::Impl::~Impl() {
    if (attach_flags != 0) {
        bpf_xdp_attach_opts opts{};
        opts.sz = sizeof opts;
        opts.old_prog_fd = prog_fd;
        (void)bpf_xdp_detach(ifindex, attach_flags | XDP_FLAGS_REPLACE, &opts);
    }
    if (xsk) xsk_socket__delete(xsk);
    if (umem) (void)xsk_umem__delete(umem);
    if (area) ::munmap(area, std::size_t{kFrames} * kFrameSize);
    if (obj) bpf_object__close(obj);
    if (claim_fd >= 0) ::close(claim_fd);
}

std::string XskDevice::Impl::claim() {
    claim_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (claim_fd < 0) return "claiming " + name + ": socket: " + errno_text(errno);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    const std::string id = "iwarp-cm-xdp-" + std::to_string(ifindex);
    std::memcpy(sa.sun_path + 1, id.data(), id.size());  // sun_path[0] = 0: abstract
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + id.size());
    if (::bind(claim_fd, reinterpret_cast<sockaddr*>(&sa), len) == 0) return "";
    if (errno == EADDRINUSE)
        return "another iwarp-cm already runs on " + name +
               " (shared-address mode takes the interface's XDP hook for one CM)";
    return "claiming " + name + ": bind: " + errno_text(errno);
}

// An XDP program left attached: ours from a dead CM goes, another is refused.
std::string XskDevice::Impl::remove_stale() {
    bpf_xdp_query_opts q{};
    q.sz = sizeof q;
    if (int r = bpf_xdp_query(ifindex, 0, &q); r < 0)
        return step_error("querying the XDP program of " + name, r);
    const std::pair<std::uint32_t, std::uint32_t> attached[] = {
        {q.drv_prog_id, XDP_FLAGS_DRV_MODE}, {q.skb_prog_id, XDP_FLAGS_SKB_MODE}};
    for (const auto& [id, mode] : attached) {
        if (id == 0) continue;
        const int fd = bpf_prog_get_fd_by_id(id);
        if (fd < 0) return step_error("reading XDP program " + std::to_string(id), errno);
        bpf_prog_info info{};
        std::uint32_t len = sizeof info;
        const int r = bpf_obj_get_info_by_fd(fd, &info, &len);
        ::close(fd);
        if (r < 0) return step_error("reading XDP program " + std::to_string(id), r);
        if (std::strcmp(info.name, kProgramName) != 0)
            return name + " already has an XDP program (" + info.name + ", id " +
                   std::to_string(id) + "); iwarp-cm will not replace it";
        if (int d = bpf_xdp_detach(ifindex, mode, nullptr); d < 0)
            return step_error("removing the XDP program a previous iwarp-cm left on " + name, d);
    }
    return "";
}

std::string XskDevice::Impl::load_and_attach() {
    libbpf_set_print(libbpf_print);
    bpf_object_open_opts oo{};
    oo.sz = sizeof oo;
    oo.object_name = kProgramName;
    obj = bpf_object__open_mem(kSteerBpf, kSteerBpf_size, &oo);
    if (obj == nullptr) return step_error("opening the XDP program", errno);
    if (int r = bpf_object__load(obj); r < 0)
        return step_error("loading the XDP program", r) +
               (g_libbpf_last[0] ? std::string(" [libbpf: ") + g_libbpf_last + "]" : "");
    bpf_program* prog = bpf_object__find_program_by_name(obj, kProgramName);
    IWCM_ASSERT(prog != nullptr);
    prog_fd = bpf_program__fd(prog);
    ports_fd = bpf_object__find_map_fd_by_name(obj, "cm_ports");
    xsks_fd = bpf_object__find_map_fd_by_name(obj, "cm_xsks");
    IWCM_ASSERT(prog_fd >= 0 && ports_fd >= 0 && xsks_fd >= 0);
    // Native first; generic (skb) mode where the driver has no XDP.
    int r = -EOPNOTSUPP;
    if (mode != XskDevice::Mode::kGeneric) {
        r = bpf_xdp_attach(ifindex, prog_fd, XDP_FLAGS_DRV_MODE | XDP_FLAGS_UPDATE_IF_NOEXIST,
                           nullptr);
        if (r == 0) {
            attach_flags = XDP_FLAGS_DRV_MODE;
            return "";
        }
        if (mode == XskDevice::Mode::kNative)
            return step_error("attaching the XDP program to " + name + " in native mode", r);
    }
    r = bpf_xdp_attach(ifindex, prog_fd, XDP_FLAGS_SKB_MODE | XDP_FLAGS_UPDATE_IF_NOEXIST, nullptr);
    if (r < 0) return step_error("attaching the XDP program to " + name, r);
    attach_flags = XDP_FLAGS_SKB_MODE;
    return "";
}

std::string XskDevice::Impl::open_socket() {
    const std::size_t size = std::size_t{kFrames} * kFrameSize;
    area = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area == MAP_FAILED) {
        area = nullptr;
        return "mapping the AF_XDP frames: " + errno_text(errno);
    }
    xsk_umem_config uc{kFillRing, kRing, kFrameSize, 0, 0};
    xsk_socket_config sc{};
    sc.rx_size = kRing;
    sc.tx_size = kRing;
    sc.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
    sc.bind_flags = XDP_USE_NEED_WAKEUP;  // zero-copy if the driver offers it, else copy
    // The kernel frees the queue of a socket closed a moment ago (a CM that
    // just exited) after a grace period: until then bind says EBUSY. Bounded.
    const auto give_up = std::chrono::steady_clock::now() + kBusyLimit;
    for (;;) {
        if (int r = xsk_umem__create(&umem, area, size, &fill, &comp, &uc); r < 0)
            return step_error("registering the AF_XDP frames (UMEM)", r);
        const int r = xsk_socket__create(&xsk, name.c_str(), queue, umem, &rx, &tx, &sc);
        if (r == 0) break;
        (void)xsk_umem__delete(umem);
        umem = nullptr;
        xsk = nullptr;
        if (r != -EBUSY || std::chrono::steady_clock::now() >= give_up)
            return step_error(
                "creating the AF_XDP socket on " + name + " queue " + std::to_string(queue), r);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const int fd = xsk_socket__fd(xsk);
    xdp_options opts{};
    socklen_t len = sizeof opts;
    if (::getsockopt(fd, SOL_XDP, XDP_OPTIONS, &opts, &len) == 0)
        zero_copy = (opts.flags & XDP_OPTIONS_ZEROCOPY) != 0;
    if (int r = bpf_map_update_elem(xsks_fd, &queue, &fd, BPF_ANY); r < 0)
        return step_error("putting the AF_XDP socket in the XSKMAP", r);
    std::uint32_t idx = 0;
    if (xsk_ring_prod__reserve(&fill, kRing, &idx) != kRing) return "filling the AF_XDP fill ring";
    for (std::uint32_t i = 0; i < kRing; ++i)
        *xsk_ring_prod__fill_addr(&fill, idx + i) = std::uint64_t{i} * kFrameSize;
    xsk_ring_prod__submit(&fill, kRing);
    for (std::uint32_t i = kRing; i < kFrames; ++i)
        free_tx.push_back(std::uint64_t{i} * kFrameSize);
    return "";
}

void XskDevice::Impl::refill(std::uint64_t addr) {
    std::uint32_t idx = 0;
    // kFillRing leaves room for every receive frame, published as read or not.
    const auto got = xsk_ring_prod__reserve(&fill, 1, &idx);
    IWCM_ASSERT(got == 1);
    *xsk_ring_prod__fill_addr(&fill, idx) = addr;
    xsk_ring_prod__submit(&fill, 1);
    if (xsk_ring_prod__needs_wakeup(&fill))
        (void)::recvfrom(xsk_socket__fd(xsk), nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
}

// Hands the TX ring's frames to the kernel: no system call when none were put on it
// since it was last emptied, or when the driver polls the ring itself (need_wakeup
// clear). In copy mode one sendto sends at most 32 frames (the kernel's
// TX_BATCH_SIZE) and says EAGAIN while more wait, so it is called until the ring
// is empty; a completion ring it found full is reclaimed between the calls.
void XskDevice::Impl::kick_tx() {
    if (unsent == 0) return;
    if (!xsk_ring_prod__needs_wakeup(&tx)) {
        unsent = 0;
        return;
    }
    const int fd = xsk_socket__fd(xsk);
    for (std::uint32_t calls = 0; calls <= kRing / 32 + 1; ++calls) {
        if (::sendto(fd, nullptr, 0, MSG_DONTWAIT, nullptr, 0) >= 0) {
            unsent = 0;
            return;
        }
        if (errno != EAGAIN && errno != EBUSY) return;  // tried again at the next flush
        reclaim();
    }
}

void XskDevice::Impl::reclaim() {
    std::uint32_t idx = 0;
    const std::uint32_t n = xsk_ring_cons__peek(&comp, kRing, &idx);
    for (std::uint32_t i = 0; i < n; ++i)
        free_tx.push_back(*xsk_ring_cons__comp_addr(&comp, idx + i));
    if (n > 0) xsk_ring_cons__release(&comp, n);
    IWCM_ASSERT(free_tx.size() <= kFrames - kRing);
}

XskDevice::XskDevice(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
XskDevice::~XskDevice() = default;

Expected<std::unique_ptr<XskDevice>, std::string> XskDevice::open(const std::string& ifname,
                                                                  Mode mode) {
    auto impl = std::make_unique<Impl>();
    impl->name = ifname;
    impl->mode = mode;
    impl->ifindex = static_cast<int>(::if_nametoindex(ifname.c_str()));
    if (impl->ifindex == 0) return fail("--dev " + ifname + ": no such interface");
    for (auto step :
         {&Impl::claim, &Impl::remove_stale, &Impl::load_and_attach, &Impl::open_socket}) {
        if (std::string e = ((*impl).*step)(); !e.empty()) return fail(e);
    }
    return std::unique_ptr<XskDevice>(new XskDevice(std::move(impl)));
}

Expected<std::unique_ptr<XskDevice>, std::string> XskDevice::open_queue(std::uint32_t queue) {
    // The program, its maps and the claim stay this device's: the new one
    // only borrows the map descriptors, and detaches nothing when it goes.
    auto impl = std::make_unique<Impl>();
    impl->name = impl_->name;
    impl->mode = impl_->mode;
    impl->ifindex = impl_->ifindex;
    impl->ports_fd = impl_->ports_fd;
    impl->xsks_fd = impl_->xsks_fd;
    impl->queue = queue;
    if (std::string e = impl->open_socket(); !e.empty()) return fail(e);
    auto dev = std::unique_ptr<XskDevice>(new XskDevice(std::move(impl)));
    dev->impl_->borrowed_from = this;
    return dev;
}

std::uint32_t XskDevice::queue() const {
    return impl_->queue;
}

int XskDevice::fd() const {
    return xsk_socket__fd(impl_->xsk);
}
const std::string& XskDevice::name() const {
    return impl_->name;
}
int XskDevice::ifindex() const {
    return impl_->ifindex;
}
bool XskDevice::zero_copy() const {
    return impl_->zero_copy;
}
const char* XskDevice::attach_mode() const {
    const Impl& owner = impl_->borrowed_from ? *impl_->borrowed_from->impl_ : *impl_;
    return owner.attach_flags == XDP_FLAGS_DRV_MODE ? "native" : "generic";
}

Expected<void, std::string> XskDevice::set_busy_poll(std::uint32_t usec) {
    IWCM_ASSERT(usec > 0);
    const int fd = xsk_socket__fd(impl_->xsk);
    const int one = 1;
    const int timeout = static_cast<int>(usec);
    const int budget = kBusyPollBudget;
    for (const auto& [opt, value, what] :
         {std::tuple{SO_PREFER_BUSY_POLL, &one, "SO_PREFER_BUSY_POLL"},
          std::tuple{SO_BUSY_POLL, &timeout, "SO_BUSY_POLL"},
          std::tuple{SO_BUSY_POLL_BUDGET, &budget, "SO_BUSY_POLL_BUDGET"}}) {
        if (::setsockopt(fd, SOL_SOCKET, opt, value, sizeof *value) != 0)
            return fail("busy polling on " + impl_->name + ": " + what + ": " + errno_text(errno));
    }
    impl_->busy_poll = true;
    return {};
}

long XskDevice::read(std::span<std::byte> buf) {
    Impl& x = *impl_;
    std::uint32_t idx = 0;
    if (xsk_ring_cons__peek(&x.rx, 1, &idx) == 0) {
        if (!x.busy_poll) return 0;
        // The NAPI poll runs in this call (SO_PREFER_BUSY_POLL), for SO_BUSY_POLL at most.
        (void)::recvfrom(xsk_socket__fd(x.xsk), nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
        if (xsk_ring_cons__peek(&x.rx, 1, &idx) == 0) return 0;
    }
    const xdp_desc* d = xsk_ring_cons__rx_desc(&x.rx, idx);
    const std::uint64_t addr = d->addr;
    const std::size_t len = std::min<std::size_t>(d->len, buf.size());
    IWCM_ASSERT(addr + d->len <= std::uint64_t{kFrames} * kFrameSize);
    std::memcpy(buf.data(), xsk_umem__get_data(x.area, addr), len);
    xsk_ring_cons__release(&x.rx, 1);
    x.refill(addr & ~std::uint64_t{kFrameSize - 1});
    return static_cast<long>(len);
}

int XskDevice::write(std::span<const std::byte> frame) {
    return write_parts(frame, {});
}

int XskDevice::write_parts(std::span<const std::byte> headers,
                           std::span<const std::span<const std::byte>> payload) {
    Impl& x = *impl_;
    const std::size_t len = headers.size() + wire::total_size(payload);
    if (len > kFrameSize) return -EMSGSIZE;
    x.reclaim();
    if (x.free_tx.empty()) {
        x.kick_tx();
        x.reclaim();
        if (x.free_tx.empty()) return -EAGAIN;
    }
    std::uint32_t idx = 0;
    if (xsk_ring_prod__reserve(&x.tx, 1, &idx) != 1) return -EAGAIN;
    const std::uint64_t addr = x.free_tx.back();
    x.free_tx.pop_back();
    auto* to = static_cast<std::byte*>(xsk_umem__get_data(x.area, addr));
    std::memcpy(to, headers.data(), headers.size());
    wire::copy_pieces(to + headers.size(), payload);
    xdp_desc* d = xsk_ring_prod__tx_desc(&x.tx, idx);
    d->addr = addr;
    d->len = static_cast<std::uint32_t>(len);
    d->options = 0;
    xsk_ring_prod__submit(&x.tx, 1);
    ++x.unsent;
    return 0;
}

void XskDevice::flush() {
    impl_->kick_tx();
}

Expected<void, std::string> XskDevice::add_port(const IpAddr& addr, std::uint16_t port) {
    const PortKey k = port_key(addr, port);
    const std::uint32_t one = 1;
    if (int r = bpf_map_update_elem(impl_->ports_fd, &k, &one, BPF_ANY); r < 0)
        return fail(step_error("steering port " + std::to_string(port) + " to the CM", r));
    return {};
}

void XskDevice::remove_port(const IpAddr& addr, std::uint16_t port) {
    const PortKey k = port_key(addr, port);
    (void)bpf_map_delete_elem(impl_->ports_fd, &k);
}

}  // namespace iwcm::io

#else  // !IWCM_WITH_XDP

namespace iwcm::io {

struct XskDevice::Impl {};
XskDevice::XskDevice(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
XskDevice::~XskDevice() = default;
Expected<std::unique_ptr<XskDevice>, std::string> XskDevice::open(const std::string&, Mode) {
    return fail(std::string(
        "this iwarp-cm was built without shared-address mode (AF_XDP): rebuild with libxdp-dev, "
        "libbpf-dev and clang installed"));
}
Expected<std::unique_ptr<XskDevice>, std::string> XskDevice::open_queue(std::uint32_t) {
    return fail(std::string("built without AF_XDP"));
}
std::uint32_t XskDevice::queue() const {
    return 0;
}
int XskDevice::fd() const {
    return -1;
}
Expected<void, std::string> XskDevice::set_busy_poll(std::uint32_t) {
    return fail(std::string("built without AF_XDP"));
}
const std::string& XskDevice::name() const {
    static const std::string none;
    return none;
}
int XskDevice::ifindex() const {
    return 0;
}
bool XskDevice::zero_copy() const {
    return false;
}
const char* XskDevice::attach_mode() const {
    return "none";
}
long XskDevice::read(std::span<std::byte>) {
    return -ENODEV;
}
void XskDevice::flush() {}
int XskDevice::write(std::span<const std::byte>) {
    return -ENODEV;
}
int XskDevice::write_parts(std::span<const std::byte>,
                           std::span<const std::span<const std::byte>>) {
    return -ENODEV;
}
Expected<void, std::string> XskDevice::add_port(const IpAddr&, std::uint16_t) {
    return fail(std::string("built without AF_XDP"));
}
void XskDevice::remove_port(const IpAddr&, std::uint16_t) {}

}  // namespace iwcm::io

#endif
