// The interface's switch and its clients. Read first: switch.hpp.
#include "io/shared/switch.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <map>
#include <optional>
#include <thread>
#include <tuple>

#include "io/net/netlink.hpp"
#include "iwcm/assert.hpp"

namespace iwcm::io {

namespace {

std::string errno_text(const std::string& what, int err = errno) {
    return what + ": " + std::strerror(err);
}

// ---------------------------------------------------------------- the rings

// One direction's ring in the shared memory: the indices count frames for
// ever (their difference is the fill), each on its own cache line; `waiting`
// is set by a consumer about to sleep on its eventfd.
struct alignas(64) RingHeader {
    std::atomic<std::uint64_t> head;  // next slot to consume (consumer's)
    char pad0[56];
    std::atomic<std::uint64_t> tail;  // next slot to fill (producer's)
    char pad1[56];
    std::atomic<std::uint32_t> waiting;
    char pad2[60];
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

struct Slot {
    std::uint32_t len;
    std::uint32_t pad;
    std::byte data[SwitchClient::kSlotBytes];
};

constexpr std::size_t kRingBytes = sizeof(RingHeader) + SwitchClient::kSlots * sizeof(Slot);
constexpr std::size_t kShmBytes = 2 * kRingBytes;  // [0]: switch -> client, [1]: client -> switch

class Ring {
public:
    Ring() = default;
    explicit Ring(std::byte* base)
        : h_(reinterpret_cast<RingHeader*>(base)),
          slots_(reinterpret_cast<Slot*>(base + sizeof(RingHeader))) {}

    // Producer: copies the frame in; false when full. Visible after publish().
    bool push(std::span<const std::byte> frame) {
        if (frame.size() > SwitchClient::kSlotBytes) return false;
        if (local_tail_ - h_->head.load(std::memory_order_acquire) >= SwitchClient::kSlots)
            return false;
        Slot& s = slots_[local_tail_ % SwitchClient::kSlots];
        std::memcpy(s.data, frame.data(), frame.size());
        s.len = static_cast<std::uint32_t>(frame.size());
        ++local_tail_;
        return true;
    }
    // Producer: makes the pushed frames visible; true when the consumer sleeps
    // and must be woken (its eventfd written).
    bool publish() {
        if (local_tail_ == published_) return false;
        h_->tail.store(local_tail_, std::memory_order_release);
        published_ = local_tail_;
        return h_->waiting.exchange(0, std::memory_order_seq_cst) != 0;
    }
    // Consumer: the next frame copied out, its length; -1 when empty.
    long pop(std::span<std::byte> buf) {
        const std::uint64_t head = h_->head.load(std::memory_order_relaxed);
        if (head == h_->tail.load(std::memory_order_acquire)) return -1;
        const Slot& s = slots_[head % SwitchClient::kSlots];
        const std::size_t len = std::min<std::size_t>(s.len, buf.size());
        std::memcpy(buf.data(), s.data, len);
        h_->head.store(head + 1, std::memory_order_release);
        return static_cast<long>(len);
    }
    // Consumer: about to sleep. False when a frame came meanwhile (do not).
    bool sleep_if_empty() {
        h_->waiting.store(1, std::memory_order_seq_cst);
        const std::uint64_t head = h_->head.load(std::memory_order_relaxed);
        if (head != h_->tail.load(std::memory_order_seq_cst)) {
            h_->waiting.store(0, std::memory_order_relaxed);
            return false;
        }
        return true;
    }
    void init() {
        h_->head.store(0);
        h_->tail.store(0);
        h_->waiting.store(1);
    }

private:
    RingHeader* h_ = nullptr;
    Slot* slots_ = nullptr;
    std::uint64_t local_tail_ = 0;
    std::uint64_t published_ = 0;
};

void wake(int efd) {
    const std::uint64_t one = 1;
    (void)!::write(efd, &one, sizeof one);
}

void drain(int efd) {
    std::uint64_t n = 0;
    (void)!::read(efd, &n, sizeof n);
}

// ---------------------------------------------------------------- the messages

enum class MsgType : std::uint32_t { kWelcome = 1, kAddPort, kRemovePort, kReply };

struct Msg {
    MsgType type{};
    std::uint32_t ok = 0;
    std::uint8_t family = 0;  // 4 or 6
    std::uint8_t pad = 0;
    std::uint16_t port = 0;
    std::array<std::uint8_t, 16> addr{};
    std::array<char, 96> text{};  // the welcome: the attach mode; a reply: the error
};

void set_text(Msg& m, const std::string& text) {
    const std::size_t n = std::min(text.size(), m.text.size() - 1);
    std::memcpy(m.text.data(), text.data(), n);
    m.text[n] = '\0';
}

// A port's key as the XDP program's map has it: IPv4 in the first 4 bytes.
struct PortId {
    std::uint8_t family = 0;
    std::uint16_t port = 0;
    std::array<std::uint8_t, 16> addr{};
    friend bool operator<(const PortId& a, const PortId& b) {
        return std::tie(a.family, a.port, a.addr) < std::tie(b.family, b.port, b.addr);
    }
};

PortId port_id(const IpAddr& addr, std::uint16_t port) {
    PortId id;
    id.family = addr.is_v4() ? 4 : 6;
    id.port = port;
    const auto& raw = addr.raw();
    std::memcpy(id.addr.data(), raw.data(), addr.is_v4() ? 4 : 16);
    return id;
}

IpAddr id_addr(const PortId& id) {
    if (id.family == 4) return Ipv4Addr{{id.addr[0], id.addr[1], id.addr[2], id.addr[3]}};
    return Ipv6Addr{id.addr};
}

// The destination (family, address, port) of a TCP segment, read as the XDP
// program reads it (bpf/steer.bpf.c); nullopt for anything else.
std::optional<PortId> destination(std::span<const std::byte> f) {
    const auto byte = [&](std::size_t i) { return static_cast<std::uint8_t>(f[i]); };
    const auto be16 = [&](std::size_t i) {
        return static_cast<std::uint16_t>(byte(i) << 8 | byte(i + 1));
    };
    std::size_t at = 12;
    if (f.size() < at + 2) return std::nullopt;
    std::uint16_t type = be16(at);
    if (type == 0x8100) {
        if (f.size() < at + 6) return std::nullopt;
        type = be16(at + 4);
        at += 4;
    }
    at += 2;
    PortId id;
    if (type == 0x0800) {
        if (f.size() < at + 20 || byte(at + 9) != 6) return std::nullopt;
        const std::size_t ihl = (byte(at) & 0x0F) * 4u;
        if (ihl < 20) return std::nullopt;
        id.family = 4;
        for (int i = 0; i < 4; ++i) id.addr[i] = byte(at + 16 + i);
        at += ihl;
    } else if (type == 0x86DD) {
        if (f.size() < at + 40 || byte(at + 6) != 6) return std::nullopt;
        id.family = 6;
        for (int i = 0; i < 16; ++i) id.addr[i] = byte(at + 24 + i);
        at += 40;
    } else {
        return std::nullopt;
    }
    if (f.size() < at + 4) return std::nullopt;
    id.port = be16(at + 2);
    return id;
}

sockaddr_un switch_address(int ifindex, socklen_t& len) {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    const std::string id = switch_socket_name(ifindex);
    std::memcpy(sa.sun_path + 1, id.data(), id.size());  // sun_path[0] = 0: abstract
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + id.size());
    return sa;
}

bool send_msg(int sock, const Msg& m, std::span<const int> fds = {}) {
    iovec iov{const_cast<Msg*>(&m), sizeof m};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)]{};
    if (!fds.empty()) {
        IWCM_ASSERT(fds.size() <= 4);
        mh.msg_control = control;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
        cmsghdr* c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
        std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    return ::sendmsg(sock, &mh, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof m);
}

// One message and up to `want` descriptors; false on EOF, error or a short message.
bool recv_msg(int sock, Msg& m, int* fds = nullptr, std::size_t want = 0) {
    iovec iov{&m, sizeof m};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)]{};
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    if (n != static_cast<ssize_t>(sizeof m)) return false;
    std::size_t got = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int in[4] = {-1, -1, -1, -1};
        std::memcpy(in, CMSG_DATA(c), sizeof(int) * std::min<std::size_t>(count, 4));
        for (std::size_t i = 0; i < count && i < 4; ++i) {
            if (fds != nullptr && got < want)
                fds[got++] = in[i];
            else
                ::close(in[i]);
        }
    }
    return fds == nullptr || got == want;
}

// ---------------------------------------------------------------- the switch

struct Client {
    int sock = -1;
    int memfd = -1;
    int to_client = -1;  // eventfd: the switch wakes the client
    int to_switch = -1;  // eventfd: the client wakes the switch
    std::byte* shm = nullptr;
    Ring rx;  // switch -> client (we produce)
    Ring tx;  // client -> switch (we consume)
    std::vector<PortId> ports;
    bool got_frames = false;

    void close_all() {
        if (shm != nullptr) ::munmap(shm, kShmBytes);
        for (int fd : {sock, memfd, to_client, to_switch})
            if (fd >= 0) ::close(fd);
    }
};

class Switch {
public:
    Expected<void, std::string> run(const SwitchConfig& config);

private:
    Expected<void, std::string> accept_client();
    void on_message(std::uint64_t id);
    void drop_client(std::uint64_t id);
    void from_wire();
    void from_client(std::uint64_t id);
    bool watch(int fd, std::uint64_t tag);

    std::unique_ptr<XskDevice> xsk_;
    int epoll_ = -1;
    int listen_ = -1;
    int signals_ = -1;
    std::map<std::uint64_t, Client> clients_;  // by id; ids never reused
    std::map<PortId, std::uint64_t> owners_;
    std::uint64_t next_id_ = 1;
    std::string mode_;
    std::vector<std::byte> buf_ = std::vector<std::byte>(XskDevice::kFrameSize);
};

// epoll tags: 0 the wire, 1 the listening socket, 2 signals, then per client
// id * 2 + 2 (its socket) and id * 2 + 3 (its eventfd).
constexpr std::uint64_t kWireTag = 0, kListenTag = 1, kSignalTag = 2;

bool Switch::watch(int fd, std::uint64_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    return ::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) == 0;
}

Expected<void, std::string> Switch::accept_client() {
    const int sock = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
    if (sock < 0) return {};  // the client gave up meanwhile
    Client c;
    c.sock = sock;
    c.memfd = ::memfd_create("iwcm-switch-rings", MFD_CLOEXEC);
    c.to_client = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    c.to_switch = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c.memfd < 0 || c.to_client < 0 || c.to_switch < 0 ||
        ::ftruncate(c.memfd, static_cast<off_t>(kShmBytes)) != 0) {
        const std::string why = errno_text("a client's rings");
        c.close_all();
        return fail(why);
    }
    void* shm = ::mmap(nullptr, kShmBytes, PROT_READ | PROT_WRITE, MAP_SHARED, c.memfd, 0);
    if (shm == MAP_FAILED) {
        const std::string why = errno_text("mapping a client's rings");
        c.close_all();
        return fail(why);
    }
    c.shm = static_cast<std::byte*>(shm);
    c.rx = Ring(c.shm);
    c.tx = Ring(c.shm + kRingBytes);
    c.rx.init();
    c.tx.init();
    Msg welcome;
    welcome.type = MsgType::kWelcome;
    welcome.ok = 1;
    set_text(welcome, mode_);
    const int fds[3] = {c.memfd, c.to_client, c.to_switch};
    const std::uint64_t id = next_id_++;
    if (!send_msg(sock, welcome, fds) || !watch(sock, id * 2 + 2) ||
        !watch(c.to_switch, id * 2 + 3)) {
        c.close_all();
        return {};  // the client went already
    }
    clients_.emplace(id, std::move(c));
    return {};
}

void Switch::drop_client(std::uint64_t id) {
    auto it = clients_.find(id);
    if (it == clients_.end()) return;
    for (const PortId& p : it->second.ports) {
        owners_.erase(p);
        xsk_->remove_port(id_addr(p), p.port);
    }
    it->second.close_all();  // closing removes them from the epoll set
    clients_.erase(it);
}

void Switch::on_message(std::uint64_t id) {
    Client& c = clients_.at(id);
    Msg m;
    if (!recv_msg(c.sock, m)) {
        drop_client(id);
        return;
    }
    PortId p;
    p.family = m.family;
    p.port = m.port;
    p.addr = m.addr;
    if (m.type == MsgType::kAddPort) {
        Msg reply;
        reply.type = MsgType::kReply;
        auto owner = owners_.find(p);
        if (owner != owners_.end() && owner->second != id) {
            set_text(reply, "port " + std::to_string(p.port) + " is another program's");
        } else if (auto r = xsk_->add_port(id_addr(p), p.port); !r) {
            set_text(reply, r.error());
        } else {
            if (owner == owners_.end()) c.ports.push_back(p);
            owners_[p] = id;
            reply.ok = 1;
        }
        if (!send_msg(c.sock, reply)) drop_client(id);
    } else if (m.type == MsgType::kRemovePort) {
        auto owner = owners_.find(p);
        if (owner == owners_.end() || owner->second != id) return;
        owners_.erase(owner);
        std::erase_if(c.ports, [&](const PortId& q) { return !(q < p) && !(p < q); });
        xsk_->remove_port(id_addr(p), p.port);
    } else {
        drop_client(id);  // no other message is ever sent to the switch
    }
}

// Segments from the wire to the clients whose ports they name.
void Switch::from_wire() {
    for (int k = 0; k < 256; ++k) {
        const long n = xsk_->read(buf_);
        if (n <= 0) break;
        const std::span<const std::byte> frame(buf_.data(), static_cast<std::size_t>(n));
        auto id = destination(frame);
        if (!id) continue;
        auto owner = owners_.find(*id);
        if (owner == owners_.end()) {
            PortId any = *id;
            any.addr = {};
            owner = owners_.find(any);
            if (owner == owners_.end()) continue;  // a port given back a moment ago
        }
        Client& c = clients_.at(owner->second);
        if (c.rx.push(frame)) c.got_frames = true;  // a full ring drops, as a NIC's would
    }
    for (auto& [cid, c] : clients_) {
        if (!c.got_frames) continue;
        c.got_frames = false;
        if (c.rx.publish()) wake(c.to_client);
    }
}

// A client's frames to the wire.
void Switch::from_client(std::uint64_t id) {
    Client& c = clients_.at(id);
    drain(c.to_switch);
    do {
        for (long n; (n = c.tx.pop(buf_)) >= 0;)
            (void)xsk_->write({buf_.data(), static_cast<std::size_t>(n)});
        xsk_->flush();
    } while (!c.tx.sleep_if_empty());
}

Expected<void, std::string> Switch::run(const SwitchConfig& config) {
    auto xsk = XskDevice::open(config.dev, config.mode);
    if (!xsk) return fail(xsk.error());
    if (config.busy_poll_us > 0)
        if (auto r = (*xsk)->set_busy_poll(config.busy_poll_us); !r) return fail(r.error());
    xsk_ = std::move(*xsk);
    mode_ = xsk_->attach_mode();
    listen_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (listen_ < 0) return fail(errno_text("the switch's socket"));
    socklen_t len = 0;
    sockaddr_un sa = switch_address(xsk_->ifindex(), len);
    if (::bind(listen_, reinterpret_cast<sockaddr*>(&sa), len) != 0)
        return fail(errno == EADDRINUSE ? "a switch already runs on " + config.dev
                                        : errno_text("binding the switch's socket"));
    if (::listen(listen_, 64) != 0) return fail(errno_text("listen"));
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
    signals_ = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_ < 0 || signals_ < 0 || !watch(xsk_->fd(), kWireTag) || !watch(listen_, kListenTag) ||
        !watch(signals_, kSignalTag))
        return fail(errno_text("the switch's event loop"));
    using Clock = std::chrono::steady_clock;
    auto idle_since = Clock::now();
    const auto linger = std::chrono::duration_cast<std::chrono::milliseconds>(config.linger);
    for (;;) {
        const std::size_t before = clients_.size();
        int timeout = -1;
        if (clients_.empty()) {
            const auto left = linger - std::chrono::duration_cast<std::chrono::milliseconds>(
                                           Clock::now() - idle_since);
            if (left.count() <= 0) break;
            timeout = static_cast<int>(left.count());
        } else if (config.busy_poll_us > 0) {
            timeout = 0;
        }
        epoll_event events[32];
        const int n = ::epoll_wait(epoll_, events, 32, timeout);
        if (n < 0 && errno != EINTR) return fail(errno_text("epoll_wait"));
        // Busy polling: the wire is read every round (the read moves the frames), not
        // when epoll saw them.
        if (timeout == 0) from_wire();
        for (int i = 0; i < n; ++i) {
            const std::uint64_t tag = events[i].data.u64;
            if (tag == kWireTag) {
                from_wire();
            } else if (tag == kListenTag) {
                if (auto r = accept_client(); !r) return r;
            } else if (tag == kSignalTag) {
                for (auto& [id, c] : clients_) c.close_all();
                return {};
            } else {
                const std::uint64_t id = (tag - 2) / 2;
                if (clients_.count(id) == 0) continue;  // dropped earlier in this round
                if (tag % 2 == 0)
                    on_message(id);
                else
                    from_client(id);
            }
        }
        if (before > 0 && clients_.empty()) idle_since = Clock::now();
    }
    return {};
}

}  // namespace

std::string switch_socket_name(int ifindex) {
    return "iwarp-cm-switch-" + std::to_string(ifindex);
}

Expected<void, std::string> run_switch(const SwitchConfig& config) {
    Switch s;
    return s.run(config);
}

// ---------------------------------------------------------------- the client

struct SwitchClient::Impl {
    std::string dev;
    int sock = -1;
    int memfd = -1;
    int from_switch = -1;  // readable when the switch woke us
    int to_switch = -1;
    std::byte* shm = nullptr;
    Ring rx;  // switch -> us (we consume)
    Ring tx;  // us -> switch (we produce)
    std::string mode;

    ~Impl() {
        if (shm != nullptr) ::munmap(shm, kShmBytes);
        for (int fd : {sock, memfd, from_switch, to_switch})
            if (fd >= 0) ::close(fd);
    }
};

namespace {

// Runs argv detached (a grandchild, so this process never waits for it).
// The child only calls what is safe after a fork in a process with threads:
// another thread may hold an allocator lock at that moment.
void spawn_detached(const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const pid_t child = ::fork();
    if (child < 0) return;
    if (child == 0) {
        ::setsid();
        if (::fork() != 0) ::_exit(0);
        const int null = ::open("/dev/null", O_RDWR);
        if (null >= 0) {
            ::dup2(null, 0);
            ::dup2(null, 1);
        }
        ::execv(args[0], args.data());
        ::_exit(127);
    }
    int status = 0;
    (void)::waitpid(child, &status, 0);
}

}  // namespace

Expected<std::unique_ptr<SwitchClient>, std::string> SwitchClient::connect(
    const std::string& dev, const std::vector<std::string>& spawn) {
    auto rtnl = Rtnl::open();
    if (!rtnl) return fail(dev + ": " + rtnl.error());
    auto link = rtnl->link(dev);
    if (!link) return fail(dev + ": " + link.error());
    auto impl = std::make_unique<Impl>();
    impl->dev = dev;
    socklen_t len = 0;
    const sockaddr_un sa = switch_address(link->index, len);
    bool spawned = false;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (;;) {
        impl->sock = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (impl->sock < 0) return fail(errno_text("the switch client's socket"));
        if (::connect(impl->sock, reinterpret_cast<const sockaddr*>(&sa), len) == 0) break;
        const int err = errno;
        ::close(impl->sock);
        impl->sock = -1;
        if (err != ECONNREFUSED && err != ENOENT)
            return fail(errno_text("connecting to the switch of " + dev, err));
        if (spawn.empty())
            return fail("no switch runs on " + dev + " (start one: iwarp-cm switch --dev " + dev +
                        ")");
        if (std::chrono::steady_clock::now() >= until)
            return fail("the switch of " + dev + " did not start within 5 s (try: " +
                        spawn.front() + " switch --dev " + dev + ")");
        if (!spawned) {
            spawn_detached(spawn);
            spawned = true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a bounded poll
    }
    Msg welcome;
    int fds[3] = {-1, -1, -1};
    if (!recv_msg(impl->sock, welcome, fds, 3) || welcome.type != MsgType::kWelcome)
        return fail("the switch of " + dev + " did not welcome us");
    impl->memfd = fds[0];
    impl->from_switch = fds[1];
    impl->to_switch = fds[2];
    void* shm = ::mmap(nullptr, kShmBytes, PROT_READ | PROT_WRITE, MAP_SHARED, impl->memfd, 0);
    if (shm == MAP_FAILED) return fail(errno_text("mapping the switch's rings"));
    impl->shm = static_cast<std::byte*>(shm);
    impl->rx = Ring(impl->shm);
    impl->tx = Ring(impl->shm + kRingBytes);
    impl->mode = welcome.text.data();
    timeval tv{5, 0};  // a reply to add_port: the switch answers at once, or is gone
    (void)::setsockopt(impl->sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return std::unique_ptr<SwitchClient>(new SwitchClient(std::move(impl)));
}

SwitchClient::SwitchClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SwitchClient::~SwitchClient() = default;

int SwitchClient::fd() const {
    return impl_->from_switch;
}

const std::string& SwitchClient::name() const {
    return impl_->dev;
}

long SwitchClient::read(std::span<std::byte> buf) {
    Impl& m = *impl_;
    long n = m.rx.pop(buf);
    if (n >= 0) return n;
    // Empty: clear the wake-up first, then say we sleep and look once more,
    // so a frame published in between is not left without a wake-up.
    drain(m.from_switch);
    if (m.rx.sleep_if_empty()) return 0;
    n = m.rx.pop(buf);
    return n >= 0 ? n : 0;
}

int SwitchClient::write(std::span<const std::byte> frame) {
    if (frame.size() > kSlotBytes) return -EMSGSIZE;
    if (impl_->tx.push(frame)) return 0;
    flush();
    return impl_->tx.push(frame) ? 0 : -EAGAIN;
}

void SwitchClient::flush() {
    if (impl_->tx.publish()) wake(impl_->to_switch);
}

namespace {

// A client's message naming one of its ports.
Msg port_msg(MsgType type, const IpAddr& addr, std::uint16_t port) {
    const PortId id = port_id(addr, port);
    Msg m;
    m.type = type;
    m.family = id.family;
    m.port = id.port;
    m.addr = id.addr;
    return m;
}

}  // namespace

Expected<void, std::string> SwitchClient::add_port(const IpAddr& addr, std::uint16_t port) {
    Msg reply;
    if (!send_msg(impl_->sock, port_msg(MsgType::kAddPort, addr, port)) ||
        !recv_msg(impl_->sock, reply) || reply.type != MsgType::kReply)
        return fail("the switch of " + impl_->dev + " is gone");
    if (reply.ok == 0) return fail(std::string(reply.text.data()));
    return {};
}

void SwitchClient::remove_port(const IpAddr& addr, std::uint16_t port) {
    (void)send_msg(impl_->sock, port_msg(MsgType::kRemovePort, addr, port));
}

const char* SwitchClient::attach_mode() const {
    return impl_->mode.c_str();
}

}  // namespace iwcm::io
