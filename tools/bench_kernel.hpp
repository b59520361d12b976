// The kernel-socket baseline of `iwarp-cm bench`: both ends of many TCP
// connections in one thread on one epoll set, doing what an iwarp-cm setup and
// its teardown do (MPA request and reply checked byte for byte, the client's
// reset). Over loopback for the in-memory figures, and across two network
// namespaces over a veth for `bench --wire` (the listener made in one, the
// clients in the other: a socket keeps the namespace it was made in).
//
// Read first: tools/bench.cpp (the parts of the bench), docs/perf.md.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tools/bench_clock.hpp"
#include "wire/mpa.hpp"

namespace iwcm::tools {

struct KernelSample {
    std::uint64_t setups = 0;
    double seconds = 0;  // wall
    double cpu_s = 0;    // thread CPU time, kernel time included
    std::uint64_t errors = 0;
    double rate() const { return cpu_s > 0 ? static_cast<double>(setups) / cpu_s : 0; }
    double wall_rate() const { return seconds > 0 ? static_cast<double>(setups) / seconds : 0; }
};

inline std::vector<std::uint8_t> mpa_frame(wire::MpaKind kind, std::size_t pdata_len) {
    std::vector<std::byte> pd(pdata_len, std::byte{'p'});
    wire::MpaRepr r;
    r.kind = kind;
    r.revision = 2;
    wire::MpaV2Params v2;
    v2.ird = 16;
    v2.ord = 16;
    v2.peer_to_peer = true;
    v2.rtr_send = true;
    r.v2 = v2;
    r.private_data = pd;
    std::vector<std::byte> out(r.buffer_len());
    r.emit(out);
    std::vector<std::uint8_t> bytes(out.size());
    std::memcpy(bytes.data(), out.data(), out.size());
    return bytes;
}

// Both ends of many loopback TCP connections in one thread on one epoll set, doing what
// the iwarp-cm side's setup and teardown do. Clients: socket and connect (non-blocking),
// write the MPA request when writable, read the reply and check it byte for byte, close
// with a reset (SO_LINGER 0), as the iwarp-cm initiator aborts. Server: accept, read the
// request and check it byte for byte, write the reply, and close when the client's reset
// comes, as the iwarp-cm responder's node ends on it.
class KernelBaseline {
public:
    KernelBaseline(std::size_t pdata, int concurrency)
        : req_(mpa_frame(wire::MpaKind::kRequest, pdata + 4)),
          rep_(mpa_frame(wire::MpaKind::kReply, pdata + 4)),
          concurrency_(concurrency) {}
    ~KernelBaseline() {
        for (std::size_t fd = 0; fd < conns_.size(); ++fd)
            if (conns_[fd].role != kNone) ::close(static_cast<int>(fd));
        if (lfd_ >= 0) ::close(lfd_);
        if (ep_ >= 0) ::close(ep_);
    }

    // The listener on `ipv4` (network order; 127.0.0.1 by default), any port.
    bool open(std::uint32_t ipv4 = htonl(INADDR_LOOPBACK)) {
        ep_ = epoll_create1(EPOLL_CLOEXEC);
        lfd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (ep_ < 0 || lfd_ < 0) return false;
        int one = 1;
        setsockopt(lfd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        addr_.sin_family = AF_INET;
        addr_.sin_addr.s_addr = ipv4;
        addr_.sin_port = 0;
        if (bind(lfd_, reinterpret_cast<sockaddr*>(&addr_), sizeof addr_) != 0) return false;
        if (listen(lfd_, 4096) != 0) return false;
        socklen_t len = sizeof addr_;
        if (getsockname(lfd_, reinterpret_cast<sockaddr*>(&addr_), &len) != 0) return false;
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = lfd_;
        return epoll_ctl(ep_, EPOLL_CTL_ADD, lfd_, &ev) == 0;
    }

    // Clients only, to a listener made elsewhere (in another namespace, by another
    // instance whose run() serves it).
    bool open_client(const sockaddr_in& to) {
        ep_ = epoll_create1(EPOLL_CLOEXEC);
        addr_ = to;
        return ep_ >= 0;
    }

    const sockaddr_in& address() const { return addr_; }

    KernelSample run(double seconds, std::uint64_t max_setups) {
        KernelSample s;
        done_ = errors_ = 0;
        const auto start = SteadyClock::now();
        const double cpu0 = thread_cpu_s();
        bool stop = false;
        int idle = 0;
        epoll_event evs[256];
        while (true) {
            while (!stop && in_flight_ < concurrency_) start_client();
            if (stop && in_flight_ == 0) break;
            int n = epoll_wait(ep_, evs, 256, 100);
            if (n <= 0) {
                if (++idle > 20) break;  // 2 s without progress: give up, count errors
                continue;
            }
            idle = 0;
            for (int i = 0; i < n; ++i) dispatch(evs[i]);
            stop = stop || done_ >= max_setups || seconds_since(start) >= seconds;
        }
        s.seconds = seconds_since(start);
        s.cpu_s = thread_cpu_s() - cpu0;
        s.setups = done_;
        s.errors = errors_ + static_cast<std::uint64_t>(in_flight_);
        return s;
    }

private:
    enum Role : std::uint8_t { kNone, kClient, kServer };
    struct Conn {
        Role role = kNone;
        bool sent = false;
        std::uint32_t got = 0;
        std::uint8_t buf[640];
    };

    Conn& track(int fd, Role role) {
        if (static_cast<std::size_t>(fd) >= conns_.size())
            conns_.resize(static_cast<std::size_t>(fd) + 64);
        Conn& c = conns_[static_cast<std::size_t>(fd)];
        c.role = role;
        c.sent = false;
        c.got = 0;
        return c;
    }

    void finish(int fd, bool ok, bool abortive) {
        Conn& c = conns_[static_cast<std::size_t>(fd)];
        if (c.role == kClient) --in_flight_;
        c.role = kNone;
        if (abortive) {
            linger l{1, 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
        }
        ::close(fd);
        if (!ok) ++errors_;
    }

    void start_client() {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            ++errors_;
            return;
        }
        if (connect(fd, reinterpret_cast<sockaddr*>(&addr_), sizeof addr_) != 0 &&
            errno != EINPROGRESS) {
            ::close(fd);
            ++errors_;
            return;
        }
        track(fd, kClient);
        ++in_flight_;
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLOUT | EPOLLET;
        ev.data.fd = fd;
        if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) != 0) finish(fd, false, true);
    }

    void dispatch(const epoll_event& ev) {
        int fd = ev.data.fd;
        if (fd == lfd_) {
            accept_all();
            return;
        }
        Conn& c = conns_[static_cast<std::size_t>(fd)];
        if (c.role == kClient)
            on_client(fd, c, ev.events);
        else if (c.role == kServer)
            on_server(fd, c, ev.events);
    }

    void accept_all() {
        while (true) {
            int fd = accept4(lfd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) return;
            track(fd, kServer);
            epoll_event ev{};
            ev.events = EPOLLIN | EPOLLET;
            ev.data.fd = fd;
            if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) != 0) finish(fd, false, false);
        }
    }

    // Reads what is there into c.buf up to `want` bytes; false on EOF or error.
    static bool read_some(int fd, Conn& c, std::size_t want) {
        while (c.got < want) {
            ssize_t n = ::read(fd, c.buf + c.got, want - c.got);
            if (n > 0) {
                c.got += static_cast<std::uint32_t>(n);
            } else {
                return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
            }
        }
        return true;
    }

    void on_client(int fd, Conn& c, std::uint32_t events) {
        if (events & EPOLLERR) return finish(fd, false, true);
        if (!c.sent && (events & EPOLLOUT)) {
            if (::write(fd, req_.data(), req_.size()) != static_cast<ssize_t>(req_.size()))
                return finish(fd, false, true);
            c.sent = true;
        }
        if (!c.sent || !(events & (EPOLLIN | EPOLLHUP))) return;
        if (!read_some(fd, c, rep_.size())) return finish(fd, false, true);
        if (c.got < rep_.size()) return;
        if (std::memcmp(c.buf, rep_.data(), rep_.size()) != 0) return finish(fd, false, true);
        ++done_;
        finish(fd, true, true);
    }

    void on_server(int fd, Conn& c, std::uint32_t events) {
        if (c.sent) {
            // The reply went: what comes now is the client's reset (or its FIN).
            char b = 0;
            const ssize_t n = ::read(fd, &b, 1);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
            return finish(fd, n == 0 || (n < 0 && errno == ECONNRESET), false);
        }
        if (events & EPOLLERR) return finish(fd, false, false);
        std::size_t want = wire::kMpaHeaderLen;
        if (!read_some(fd, c, want)) return finish(fd, false, false);
        if (c.got < want) return;
        want += (std::size_t{c.buf[18]} << 8) | c.buf[19];
        if (want > sizeof c.buf || !read_some(fd, c, want)) return finish(fd, false, false);
        if (c.got < want) return;
        const bool ok = want == req_.size() && std::memcmp(c.buf, req_.data(), want) == 0 &&
                        ::write(fd, rep_.data(), rep_.size()) == static_cast<ssize_t>(rep_.size());
        if (!ok) return finish(fd, false, false);
        c.sent = true;
    }

    std::vector<std::uint8_t> req_;
    std::vector<std::uint8_t> rep_;
    int concurrency_;
    int ep_ = -1;
    int lfd_ = -1;
    sockaddr_in addr_{};
    std::vector<Conn> conns_;
    int in_flight_ = 0;
    std::uint64_t done_ = 0;
    std::uint64_t errors_ = 0;
};

}  // namespace iwcm::tools
