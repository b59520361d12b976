// The Linux kernel's TCP doing what the RDMA programs of bench/programs.py do,
// for the same run's baseline: per connection a connect and a disconnect (as
// cmtime times rdma_connect and rdma_disconnect), a stream of messages of one
// size (as ib_write_bw moves them), and a ping-pong of one size (as
// ib_write_lat times it: half the round trip).
//
//   tcp_peer serve PORT                       answers every mode, until killed
//   tcp_peer connect HOST PORT COUNT          "connect_us=A disconnect_us=B" (means)
//   tcp_peer stream HOST PORT SIZE COUNT      "mb_per_s=X" (10^6 bytes per second)
//   tcp_peer pingpong HOST PORT SIZE COUNT    "p50_us=X p99_us=Y" (half round trips)
//
// cmtime starts every connection at once and reports the total time over
// their number; the baseline does the same.
// A connection starts with a 9-byte hello: the mode ('c', 's', 'p'), the
// size and the count (big-endian 32-bit). Blocking sockets, TCP_NODELAY for
// the ping-pong (each message goes at once, as an RDMA Write does).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tools/fd_io.hpp"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* what) {
    std::perror(what);
    std::exit(1);
}

using iwcm::tools::read_all;
using iwcm::tools::write_all;

struct Hello {
    char mode = 0;
    std::uint32_t size = 0;
    std::uint32_t count = 0;
};

void serve_one(int fd) {
    unsigned char h[9];
    if (!read_all(fd, h, sizeof h)) {
        ::close(fd);
        return;
    }
    Hello hello{static_cast<char>(h[0]), 0, 0};
    std::memcpy(&hello.size, h + 1, 4);
    std::memcpy(&hello.count, h + 5, 4);
    hello.size = ntohl(hello.size);
    hello.count = ntohl(hello.count);
    std::vector<char> buf(std::max<std::uint32_t>(hello.size, 1));
    if (hello.mode == 's') {
        const std::uint64_t total = std::uint64_t{hello.size} * hello.count;
        std::vector<char> big(1 << 20);
        for (std::uint64_t got = 0; got < total;) {
            const ssize_t r = ::read(fd, big.data(), big.size());
            if (r <= 0) break;
            got += static_cast<std::uint64_t>(r);
        }
        (void)write_all(fd, "k", 1);
    } else if (hello.mode == 'p') {
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        for (std::uint32_t i = 0; i < hello.count; ++i)
            if (!read_all(fd, buf.data(), hello.size) || !write_all(fd, buf.data(), hello.size))
                break;
    } else {  // 'c': the peer closes first; we close on its FIN
        char c;
        while (::read(fd, &c, 1) > 0) {
        }
    }
    ::close(fd);
}

int serve(std::uint16_t port) {
    const int l = ::socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    ::setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    if (::bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) die("bind");
    if (::listen(l, 1024) != 0) die("listen");
    for (;;) {
        const int fd = ::accept(l, nullptr, nullptr);
        if (fd < 0) continue;
        std::thread(serve_one, fd).detach();
    }
}

int dial(const char* host, std::uint16_t port, const Hello& hello) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    if (::inet_pton(AF_INET, host, &sa.sin_addr) != 1) die("address");
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) die("connect");
    unsigned char h[9];
    h[0] = static_cast<unsigned char>(hello.mode);
    const std::uint32_t size = htonl(hello.size), count = htonl(hello.count);
    std::memcpy(h + 1, &size, 4);
    std::memcpy(h + 5, &count, 4);
    if (!write_all(fd, h, sizeof h)) die("hello");
    return fd;
}

double us(Clock::duration d) {
    return std::chrono::duration<double, std::micro>(d).count();
}

// As cmtime does: every connection started at once, the time until all are
// up divided by their number; then every one closed at once, the time until
// every peer's FIN came divided again.
int connects(const char* host, std::uint16_t port, std::uint32_t count) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    if (::inet_pton(AF_INET, host, &sa.sin_addr) != 1) die("address");
    std::vector<pollfd> fds(count);
    const auto t0 = Clock::now();
    for (auto& p : fds) {
        p.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (::connect(p.fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 &&
            errno != EINPROGRESS)
            die("connect");
        p.events = POLLOUT;
    }
    for (std::uint32_t up = 0; up < count;) {
        if (::poll(fds.data(), fds.size(), 10000) <= 0) die("poll (connect)");
        for (auto& p : fds) {
            if (p.events != POLLOUT || p.revents == 0) continue;
            if ((p.revents & (POLLERR | POLLHUP)) != 0) die("connect refused");
            p.events = 0;
            ++up;
        }
    }
    const auto t1 = Clock::now();
    const unsigned char hello[9] = {'c'};
    for (auto& p : fds) {
        if (!write_all(p.fd, hello, sizeof hello)) die("hello");
        ::shutdown(p.fd, SHUT_WR);
        p.events = POLLIN;
    }
    for (std::uint32_t down = 0; down < count;) {
        if (::poll(fds.data(), fds.size(), 10000) <= 0) die("poll (disconnect)");
        for (auto& p : fds) {
            if (p.events != POLLIN || p.revents == 0) continue;
            char c;
            if (::read(p.fd, &c, 1) > 0) continue;
            ::close(p.fd);
            p.fd = -1;
            p.events = 0;
            ++down;
        }
    }
    const auto t2 = Clock::now();
    std::printf("connect_us=%.2f disconnect_us=%.2f\n", us(t1 - t0) / count, us(t2 - t1) / count);
    return 0;
}

int stream(const char* host, std::uint16_t port, std::uint32_t size, std::uint32_t count) {
    std::vector<char> msg(size, 'x');
    const int fd = dial(host, port, {'s', size, count});
    const auto t0 = Clock::now();
    for (std::uint32_t i = 0; i < count; ++i)
        if (!write_all(fd, msg.data(), size)) die("write");
    char k;
    if (!read_all(fd, &k, 1)) die("ack");
    const auto t1 = Clock::now();
    ::close(fd);
    const double s = std::chrono::duration<double>(t1 - t0).count();
    std::printf("mb_per_s=%.2f\n", static_cast<double>(size) * count / s / 1e6);
    return 0;
}

int pingpong(const char* host, std::uint16_t port, std::uint32_t size, std::uint32_t count) {
    std::vector<char> msg(std::max<std::uint32_t>(size, 1), 'x');
    const int fd = dial(host, port, {'p', size, count});
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::vector<double> half;
    half.reserve(count);
    for (std::uint32_t i = 0; i < count; ++i) {
        const auto t0 = Clock::now();
        if (!write_all(fd, msg.data(), size) || !read_all(fd, msg.data(), size)) die("pingpong");
        half.push_back(us(Clock::now() - t0) / 2);
    }
    ::close(fd);
    std::sort(half.begin(), half.end());
    std::printf("p50_us=%.2f p99_us=%.2f\n", half[half.size() / 2], half[half.size() * 99 / 100]);
    return 0;
}

std::uint32_t number(const char* text) {
    return static_cast<std::uint32_t>(std::strtoul(text, nullptr, 10));
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "serve" && argc == 3) return serve(static_cast<std::uint16_t>(number(argv[2])));
    const auto port = argc > 3 ? static_cast<std::uint16_t>(number(argv[3])) : 0;
    if (mode == "connect" && argc == 5) return connects(argv[2], port, number(argv[4]));
    if (mode == "stream" && argc == 6)
        return stream(argv[2], port, number(argv[4]), number(argv[5]));
    if (mode == "pingpong" && argc == 6)
        return pingpong(argv[2], port, number(argv[4]), number(argv[5]));
    std::fprintf(stderr,
                 "usage: tcp_peer serve PORT | connect HOST PORT COUNT | stream HOST PORT SIZE "
                 "COUNT | pingpong HOST PORT SIZE COUNT\n");
    return 2;
}
