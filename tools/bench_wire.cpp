// `iwarp-cm bench --wire`: the namespaces, the processes and the kernel's side.
//
// Read first: tools/bench_wire.hpp (the parts and the layout), docs/perf.md
// "The wire".
//
// Processes run under `ip netns exec NS` in a session of their own, their
// output in a memory file; their CPU time comes from wait4(). The kernel's
// side runs in threads of this process: a thread enters a namespace with
// setns(), and a socket keeps the namespace it was made in, so one thread can
// make a listener in one namespace and its clients in the other.
#include "tools/bench_wire.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <sstream>
#include <string_view>
#include <thread>

#include "iwcm/assert.hpp"
#include "tools/bench_clock.hpp"
#include "tools/bench_kernel.hpp"
#include "tools/bench_native.hpp"
#include "tools/fd_io.hpp"

extern char** environ;

namespace iwcm::tools {

namespace {

// The veth pair (va in namespace A, vb in B) and the two TAPs on a bridge (namespace T).
constexpr const char* kVethA = "10.83.0.1";
constexpr const char* kVethB = "10.83.0.2";
constexpr const char* kTapA = "10.84.0.1";
constexpr const char* kTapB = "10.84.0.2";
constexpr const char* kTapProbe = "10.84.0.254";  // the kernel's address on the bridge
constexpr std::uint16_t kSetupPort = 5000;
constexpr std::uint16_t kPerfPort = 18515;    // perftest's default
constexpr std::uint16_t kNativePort = 18516;  // the in-process runs' (tools/bench_native.hpp)
// perftest's "MB/sec" is 2^20 bytes per second (its format factor 0x100000).
constexpr double kPerftestMb = 1048576.0 / 1e6;

std::uint32_t ipv4(const char* text) {
    in_addr a{};
    const int ok = inet_pton(AF_INET, text, &a);
    IWCM_ASSERT(ok == 1);
    return a.s_addr;
}

double cpu_s(const rusage& ru) {
    auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
    return s(ru.ru_utime) + s(ru.ru_stime);
}

// One program run under `ip netns exec NS`, in a session of its own (its process
// group is its PID, killed whole), stdin from /dev/null, stdout and stderr into a
// memory file. The destructor kills it if it still runs.
class Process {
public:
    Process() = default;
    Process(const Process&) = delete;
    Process& operator=(const Process&) = delete;
    ~Process() {
        if (pid_ > 0) {
            ::kill(-pid_, SIGKILL);
            (void)finish(5);
        }
        if (pidfd_ >= 0) ::close(pidfd_);
        if (out_ >= 0) ::close(out_);
    }

    // `env` adds to (and overrides) this process's environment, less every
    // IWCM_ variable and LD_PRELOAD it has.
    bool start(const std::string& ns, const std::vector<std::string>& argv,
               const std::vector<std::string>& env, std::string& error) {
        IWCM_ASSERT(pid_ < 0 && !argv.empty());
        out_ = memfd_create("iwcm-bench-wire", MFD_CLOEXEC);
        if (out_ < 0) return fail("memfd_create", error);
        std::vector<std::string> args{"ip", "netns", "exec", ns};
        args.insert(args.end(), argv.begin(), argv.end());
        std::vector<std::string> vars;
        for (char** e = environ; *e != nullptr; ++e) {
            const std::string_view v(*e);
            if (v.starts_with("IWCM_") || v.starts_with("LD_PRELOAD=")) continue;
            vars.emplace_back(v);
        }
        vars.insert(vars.end(), env.begin(), env.end());
        std::vector<char*> cargv, cenv;
        for (std::string& a : args) cargv.push_back(a.data());
        for (std::string& v : vars) cenv.push_back(v.data());
        cargv.push_back(nullptr);
        cenv.push_back(nullptr);
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t at;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_adddup2(&fa, out_, 1);
        posix_spawn_file_actions_adddup2(&fa, out_, 2);
        posix_spawnattr_init(&at);
        posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID);
        const int rc = posix_spawnp(&pid_, "ip", &fa, &at, cargv.data(), cenv.data());
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&at);
        if (rc != 0) {
            pid_ = -1;
            errno = rc;
            return fail("ip netns exec", error);
        }
        name_ = argv[0];
        pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
        return true;
    }

    bool running() const { return pid_ > 0; }

    // What the program wrote so far.
    std::string output() const {
        std::string s;
        char buf[65536];
        for (off_t at = 0;;) {
            const ssize_t n = ::pread(out_, buf, sizeof buf, at);
            if (n <= 0) break;
            s.append(buf, static_cast<std::size_t>(n));
            at += n;
        }
        return s;
    }

    // Waits up to `timeout` seconds for the exit (the group is killed after it);
    // true when it exited by itself with status 0.
    bool finish(double timeout) {
        if (pid_ <= 0) return exited_ok_;
        if (pidfd_ >= 0) {
            pollfd p{pidfd_, POLLIN, 0};
            (void)::poll(&p, 1, static_cast<int>(timeout * 1000));
        }
        int st = 0;
        pid_t got = ::wait4(pid_, &st, WNOHANG, &usage_);
        if (got == 0) {
            ::kill(-pid_, SIGKILL);
            got = ::wait4(pid_, &st, 0, &usage_);
            st = -1;
        }
        pid_ = -1;
        exited_ok_ = got > 0 && st == 0;
        return exited_ok_;
    }

    double cpu() const { return cpu_s(usage_); }
    const std::string& name() const { return name_; }

private:
    static bool fail(const char* what, std::string& error) {
        error = std::string(what) + ": " + std::strerror(errno);
        return false;
    }

    pid_t pid_ = -1;
    int pidfd_ = -1;
    int out_ = -1;
    rusage usage_{};
    bool exited_ok_ = false;
    std::string name_;
};

// Runs a program to its end in this namespace; its exit status.
int run_program(const std::vector<std::string>& argv) {
    std::vector<std::string> a = argv;
    std::vector<char*> c;
    for (std::string& s : a) c.push_back(s.data());
    c.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    const int rc = posix_spawnp(&pid, c[0], &fa, nullptr, c.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return -1;
    int st = 0;
    if (::waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
}

bool enter_netns(const std::string& ns) {
    const int fd = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const int rc = ::setns(fd, CLONE_NEWNET);
    ::close(fd);
    return rc == 0;
}

namespace {

// `f` on a thread of its own in namespace `ns`, joined; false if it could not enter.
bool in_netns(const std::string& ns, const std::function<void()>& f) {
    bool entered = false;
    std::thread t([&] {
        entered = enter_netns(ns);
        if (entered) f();
    });
    t.join();
    return entered;
}

// The three namespaces and their links; removed (and every process in them
// killed) by the destructor.
class Layout {
public:
    Layout() {
        const std::string tag = std::to_string(::getpid());
        a = "iwcm-wa-" + tag;
        b = "iwcm-wb-" + tag;
        t = "iwcm-wt-" + tag;
    }
    Layout(const Layout&) = delete;
    Layout& operator=(const Layout&) = delete;
    ~Layout() {
        for (const std::string& ns : {a, b, t}) {
            // Anything left in a namespace (a program that outlived its kill): its PIDs.
            std::FILE* p = ::popen(("ip netns pids " + ns + " 2>/dev/null").c_str(), "r");
            if (p != nullptr) {
                long pid = 0;
                while (std::fscanf(p, "%ld", &pid) == 1) ::kill(static_cast<pid_t>(pid), SIGKILL);
                ::pclose(p);
            }
            (void)run_program({"ip", "netns", "del", ns});
        }
    }

    bool make(std::string& error) {
        const std::vector<std::vector<std::string>> steps = {
            {"ip", "netns", "add", a},
            {"ip", "netns", "add", b},
            {"ip", "netns", "add", t},
            {"ip", "-n", a, "link", "set", "lo", "up"},
            {"ip", "-n", b, "link", "set", "lo", "up"},
            {"ip", "-n", t, "link", "set", "lo", "up"},
            {"ip", "-n", a, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", b},
            {"ip", "-n", a, "addr", "add", std::string(kVethA) + "/24", "dev", "va"},
            {"ip", "-n", b, "addr", "add", std::string(kVethB) + "/24", "dev", "vb"},
            {"ip", "-n", a, "link", "set", "va", "up"},
            {"ip", "-n", b, "link", "set", "vb", "up"},
            {"ip", "-n", t, "link", "add", "br0", "type", "bridge"},
            {"ip", "-n", t, "addr", "add", std::string(kTapProbe) + "/24", "dev", "br0"},
            {"ip", "-n", t, "link", "set", "br0", "up"},
            {"ip", "-n", t, "tuntap", "add", "dev", "ta", "mode", "tap"},
            {"ip", "-n", t, "tuntap", "add", "dev", "tb", "mode", "tap"},
            {"ip", "-n", t, "link", "set", "ta", "master", "br0", "up"},
            {"ip", "-n", t, "link", "set", "tb", "master", "br0", "up"},
        };
        for (const auto& s : steps) {
            if (run_program(s) != 0) {
                std::string cmd;
                for (const std::string& w : s) cmd += (cmd.empty() ? "" : " ") + w;
                error = "`" + cmd + "` failed";
                return false;
            }
        }
        return true;
    }

    std::string a, b, t;
};

// The kernel computes the TCP checksum of its own segments in software from here
// on: left to the veth's "hardware" it would reach an AF_XDP socket unfilled
// (the probes of wait_listening are the kernel's). It also turns the veth's TSO
// off, so the kernel's own figures are taken before.
bool tx_checksum_off(const std::string& ns, const char* dev) {
    bool ok = false;
    in_netns(ns, [&] {
        const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (s < 0) return;
        ethtool_value v{};
        v.cmd = ETHTOOL_STXCSUM;
        v.data = 0;
        ifreq ifr{};
        std::snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", dev);
        ifr.ifr_data = reinterpret_cast<char*>(&v);
        ok = ::ioctl(s, SIOCETHTOOL, &ifr) == 0;
        ::close(s);
    });
    return ok;
}

sockaddr_in endpoint(const char* addr, std::uint16_t port) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = ipv4(addr);
    return sa;
}

// Until a TCP handshake with addr:port completes from namespace `ns` (reset at
// once, before any MPA request: the program never hears of it), or `server`
// exits, or `timeout` seconds pass: a bounded poll of the server's state.
bool wait_listening(const std::string& ns, const char* addr, std::uint16_t port, Process& server,
                    double timeout) {
    bool up = false;
    in_netns(ns, [&] {
        const sockaddr_in sa = endpoint(addr, port);
        const auto start = SteadyClock::now();
        while (!up && seconds_since(start) < timeout) {
            if (server.output().find("rror") != std::string::npos) return;
            const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (s < 0) return;
            if (::connect(s, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0 ||
                errno == EINPROGRESS) {
                pollfd p{s, POLLOUT, 0};
                int err = -1;
                socklen_t len = sizeof err;
                if (::poll(&p, 1, 500) == 1 &&
                    ::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
                    up = true;
            }
            linger l{1, 0};
            ::setsockopt(s, SOL_SOCKET, SO_LINGER, &l, sizeof l);
            ::close(s);
            if (!up) ::poll(nullptr, 0, 50);
        }
    });
    return up;
}

// The value after "key": in one JSON line of ours (a number).
double json_number(const std::string& line, const char* key) {
    const std::string k = std::string("\"") + key + "\":";
    const std::size_t at = line.find(k);
    return at == std::string::npos ? -1 : std::strtod(line.c_str() + at + k.size(), nullptr);
}

// The last line of `out` holding `"event":"<event>"`.
std::string last_event(const std::string& out, const char* event) {
    const std::string tag = std::string("\"event\":\"") + event + "\"";
    std::string found;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);)
        if (line.find(tag) != std::string::npos) found = line;
    return found;
}

std::string tail(const std::string& out) {
    return out.size() > 600 ? "..." + out.substr(out.size() - 600) : out;
}

// ---------------------------------------------------------------- setup rate

struct CmPath {
    const char* name;
    std::string ns_server, ns_client;
    std::vector<std::string> server_dev, client_dev;  // --dev ... or --tap ... --ip ...
    const char* server_addr;
};

bool cm_setup(const WireBenchOptions& o, const CmPath& p, WireSetup& out, std::string& error) {
    const std::string count = std::to_string(o.setups);
    const std::string pdata(o.pdata, 'p');
    Process server, client;
    std::vector<std::string> sargv{o.self, "listen"};
    sargv.insert(sargv.end(), p.server_dev.begin(), p.server_dev.end());
    for (const char* a : {"--port", "5000", "--json", "--no-progress", "--pdata"})
        sargv.emplace_back(a);
    sargv.insert(sargv.end(), {pdata, "--count", count, "--backlog", "4096"});
    if (!server.start(p.ns_server, sargv, {}, error)) return false;
    // The listener prints its "listening" line once its device is up.
    const auto start = SteadyClock::now();
    while (last_event(server.output(), "listening").empty()) {
        if (seconds_since(start) > 20 || !server.running()) {
            error = std::string(p.name) + ": the listener did not start: " + tail(server.output());
            return false;
        }
        ::poll(nullptr, 0, 20);
    }
    std::vector<std::string> cargv{o.self, "connect"};
    cargv.insert(cargv.end(), p.client_dev.begin(), p.client_dev.end());
    cargv.insert(cargv.end(),
                 {"--to", std::string(p.server_addr) + ":" + std::to_string(kSetupPort), "--count",
                  count, "--parallel", std::to_string(o.parallel), "--json", "--no-progress",
                  "--timeout", "30", "--pdata", pdata});
    if (!client.start(p.ns_client, cargv, {}, error)) return false;
    const bool client_ok = client.finish(300);
    const bool server_ok = server.finish(30);
    const std::string cm = last_event(client.output(), "cmtime");
    const std::string stats = last_event(client.output(), "stats");
    if (!client_ok || !server_ok || json_number(cm, "completed") != o.setups) {
        error = std::string(p.name) + ": connect --count " + count +
                " failed: " + tail(client.output()) +
                (server_ok ? "" : "; listen: " + tail(server.output()));
        return false;
    }
    const double seconds = json_number(stats, "time");  // first start to last close
    const double n = o.setups;
    out.rate_per_s = seconds > 0 ? n / seconds : 0;
    out.client_cpu_us = client.cpu() / n * 1e6;
    out.server_cpu_us = server.cpu() / n * 1e6;
    return true;
}

bool kernel_setup(const WireBenchOptions& o, const Layout& l, WireSetup& out, std::string& error) {
    KernelBaseline server(o.pdata, 0);
    KernelBaseline client(o.pdata, static_cast<int>(o.parallel));
    bool opened = false;
    in_netns(l.b, [&] { opened = server.open(ipv4(kVethB)); });
    if (!opened) {
        error = "kernel: no listener on " + std::string(kVethB);
        return false;
    }
    KernelSample srv, cli, warm;
    // The server serves until 2 s pass without a connection (KernelBaseline::run).
    std::thread st([&] { srv = server.run(1e9, UINT64_MAX); });
    const bool entered = in_netns(l.a, [&] {
        if (!client.open_client(server.address())) return;
        warm = client.run(0.05, 2000);
        cli = client.run(o.kernel_seconds, UINT64_MAX);
    });
    st.join();
    if (!entered || cli.setups == 0 || cli.errors + srv.errors != 0) {
        error = "kernel: " + std::to_string(cli.setups) + " setups, " +
                std::to_string(cli.errors + srv.errors) + " failed";
        return false;
    }
    const double n = static_cast<double>(cli.setups);
    out.rate_per_s = cli.wall_rate();
    out.client_cpu_us = cli.cpu_s / n * 1e6;
    // The server's thread also served the warm-up's setups.
    out.server_cpu_us = srv.cpu_s / (n + static_cast<double>(warm.setups)) * 1e6;
    return true;
}

// ---------------------------------------------------------------- the kernel's TCP

// A connected pair over the veth: the listener made in B, the client in A.
struct TcpPair {
    int client = -1;
    int server = -1;
    ~TcpPair() {
        if (client >= 0) ::close(client);
        if (server >= 0) ::close(server);
    }
};

bool tcp_pair(const Layout& l, bool nodelay, TcpPair& p) {
    int lfd = -1;
    sockaddr_in sa = endpoint(kVethB, 0);
    in_netns(l.b, [&] {
        lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        socklen_t len = sizeof sa;
        if (lfd >= 0 && (::bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
                         ::listen(lfd, 1) != 0 ||
                         ::getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &len) != 0)) {
            ::close(lfd);
            lfd = -1;
        }
    });
    if (lfd < 0) return false;
    in_netns(l.a, [&] {
        p.client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (p.client >= 0 &&
            ::connect(p.client, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
            ::close(p.client);
            p.client = -1;
        }
    });
    if (p.client >= 0) p.server = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    ::close(lfd);
    const int one = 1;
    for (int fd : {p.client, p.server})
        if (fd >= 0 && nodelay) ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return p.client >= 0 && p.server >= 0;
}

// One stream of `size`-byte messages, one write each (as a program sends them),
// read in 1 MiB reads; timed from the first write to the receiver's one-byte
// acknowledgement of the last.
bool kernel_stream(const WireBenchOptions& o, const Layout& l, std::size_t size, WireFlow& out,
                   std::string& error) {
    TcpPair p;
    if (!tcp_pair(l, false, p)) {
        error = "kernel stream: no connection over the veth";
        return false;
    }
    const std::uint64_t count = std::max<std::uint64_t>(1, o.flow_bytes / size);
    const std::uint64_t total = count * size;
    double recv_cpu = 0;
    bool recv_ok = false;
    std::thread rt([&] {
        const double c0 = thread_cpu_s();
        std::vector<char> buf(1 << 20);
        std::uint64_t got = 0;
        while (got < total) {
            const ssize_t r = ::read(p.server, buf.data(), buf.size());
            if (r <= 0) break;
            got += static_cast<std::uint64_t>(r);
        }
        recv_ok = got == total && write_all(p.server, "k", 1);
        recv_cpu = thread_cpu_s() - c0;
    });
    std::vector<char> msg(size, 'm');
    const double c0 = thread_cpu_s();
    const auto t0 = SteadyClock::now();
    bool ok = true;
    for (std::uint64_t i = 0; ok && i < count; ++i) ok = write_all(p.client, msg.data(), size);
    char k = 0;
    ok = ok && read_all(p.client, &k, 1);
    const double seconds = seconds_since(t0);
    const double send_cpu = thread_cpu_s() - c0;
    rt.join();
    if (!ok || !recv_ok) {
        error = "kernel stream: the transfer failed";
        return false;
    }
    const double bytes = static_cast<double>(total);
    out.mb_per_s = bytes / seconds / 1e6;
    out.sender_cpu_ns_per_byte = send_cpu / bytes * 1e9;
    out.receiver_cpu_ns_per_byte = recv_cpu / bytes * 1e9;
    return true;
}

// A 64-byte ping-pong, TCP_NODELAY both ways, blocking reads: the round trip of
// each exchange as the client sees it.
bool kernel_pingpong(const WireBenchOptions& o, const Layout& l, WireLatency& out,
                     std::string& error) {
    TcpPair p;
    if (!tcp_pair(l, true, p)) {
        error = "kernel ping-pong: no connection over the veth";
        return false;
    }
    const std::uint32_t iters = o.latency_iters;
    std::thread echo([&] {
        char buf[64];
        for (std::uint32_t i = 0; i < iters + 100; ++i)
            if (!read_all(p.server, buf, sizeof buf) || !write_all(p.server, buf, sizeof buf))
                return;
    });
    std::vector<double> rtt;
    rtt.reserve(iters);
    char buf[64] = {};
    bool ok = true;
    for (std::uint32_t i = 0; ok && i < iters + 100; ++i) {
        const auto t0 = SteadyClock::now();
        ok = write_all(p.client, buf, sizeof buf) && read_all(p.client, buf, sizeof buf);
        if (i >= 100) rtt.push_back(seconds_since(t0) * 1e6);  // after 100 to warm up
    }
    echo.join();
    if (!ok) {
        error = "kernel ping-pong failed";
        return false;
    }
    out.p50_us = percentile(rtt, 0.5);
    out.p99_us = percentile(rtt, 0.99);
    return true;
}

// ---------------------------------------------------------------- perftest over iwarp-cm

struct PerfPath {
    const char* name;
    std::string ns_server, ns_client, ns_probe;
    std::vector<std::string> server_env, client_env;
    const char* server_addr;
};

// A perftest server and client (`prog -R -F -s SIZE -n ITERS`), the client once
// the server listens; the client's result row split in columns, and both
// processes' CPU time. perftest -R may connect a second time before the server
// listens again (over --dev the kernel then resets it, REJECTED -111): both run
// again, at most four times.
bool perftest(const WireBenchOptions& o, const PerfPath& p, const std::string& prog,
              std::size_t size, std::uint64_t iters, bool crc, std::vector<std::string>& row,
              double& server_cpu, double& client_cpu, std::string& error) {
    std::vector<std::string> args{
        prog, "-R", "-F", "-s", std::to_string(size), "-n", std::to_string(iters)};
    auto env = [&](std::vector<std::string> e) {
        e.push_back("LD_PRELOAD=" + o.library);
        e.push_back(std::string("IWCM_CRC=") + (crc ? "1" : "0"));
        return e;
    };
    for (int attempt = 1; attempt <= 4; ++attempt) {
        Process server, client;
        if (!server.start(p.ns_server, args, env(p.server_env), error)) return false;
        if (!wait_listening(p.ns_probe, p.server_addr, kPerfPort, server, 20)) {
            error = std::string(p.name) + ": " + prog + " did not listen: " + tail(server.output());
            return false;
        }
        std::vector<std::string> cargs = args;
        cargs.emplace_back(p.server_addr);
        if (!client.start(p.ns_client, cargs, env(p.client_env), error)) return false;
        const bool client_ok = client.finish(300);
        const std::string out = client.output();
        if (!client_ok) {
            if (out.find("-111") != std::string::npos && attempt < 4) continue;
            error = std::string(p.name) + ": " + prog + " failed: " + tail(out);
            return false;
        }
        if (!server.finish(30)) {
            error = std::string(p.name) + ": " + prog + " server failed: " + tail(server.output());
            return false;
        }
        server_cpu = server.cpu();
        client_cpu = client.cpu();
        std::istringstream in(out);
        for (std::string line; std::getline(in, line);) {
            std::istringstream words(line);
            std::vector<std::string> cols;
            for (std::string w; words >> w;) cols.push_back(w);
            if (cols.size() >= 4 && cols[0] == std::to_string(size) &&
                cols[1] == std::to_string(iters)) {
                row = cols;
                return true;
            }
        }
        error = std::string(p.name) + ": no result row in " + prog + "'s output: " + tail(out);
        return false;
    }
    return false;
}

bool perf_flow(const WireBenchOptions& o, const PerfPath& p, bool write, std::size_t size, bool crc,
               WireFlow& out, std::string& error) {
    const std::uint64_t iters = std::max<std::uint64_t>(100, o.flow_bytes / size);
    const std::string prog = write ? "ib_write_bw" : "ib_send_bw";
    std::vector<std::string> row;
    double scpu = 0, ccpu = 0;
    // perftest now and then prints a row whose average rate is 0.00 (seen over TAP on a
    // loaded machine, the transfer complete): such a run has no figure and runs again.
    for (int attempt = 1;; ++attempt) {
        if (!perftest(o, p, prog, size, iters, crc, row, scpu, ccpu, error)) return false;
        out.mb_per_s = std::strtod(row[3].c_str(), nullptr) * kPerftestMb;
        if (out.mb_per_s > 0) break;
        if (attempt == 3) {
            error = std::string(p.name) + ": " + prog + " printed no rate three times";
            return false;
        }
    }
    const double bytes = static_cast<double>(iters * size);
    // The client posts the messages; the server's side receives them.
    out.sender_cpu_ns_per_byte = ccpu / bytes * 1e9;
    out.receiver_cpu_ns_per_byte = scpu / bytes * 1e9;
    return true;
}

// ib_send_lat or ib_write_lat, 64 bytes.
bool perf_latency(const WireBenchOptions& o, const PerfPath& p, const std::string& prog,
                  WireLatency& out, std::string& error) {
    std::vector<std::string> row;
    double scpu = 0, ccpu = 0;
    if (!perftest(o, p, prog, 64, o.latency_iters, false, row, scpu, ccpu, error)) return false;
    if (row.size() < 8) {
        error = std::string(p.name) + ": " + prog + "'s row is short";
        return false;
    }
    // perftest prints half the round trip: t_typical (the median) and the 99th percentile.
    out.p50_us = 2 * std::strtod(row[4].c_str(), nullptr);
    out.p99_us = 2 * std::strtod(row[7].c_str(), nullptr);
    return true;
}

const char* size_tag(std::size_t size) {
    return size == 4096 ? "4k" : "64k";
}

WireFlow mean_flow(const std::vector<WireFlow>& runs) {
    IWCM_ASSERT(!runs.empty());
    WireFlow m;
    for (const WireFlow& f : runs) {
        m.mb_per_s += f.mb_per_s;
        m.sender_cpu_ns_per_byte += f.sender_cpu_ns_per_byte;
        m.receiver_cpu_ns_per_byte += f.receiver_cpu_ns_per_byte;
    }
    const auto n = static_cast<double>(runs.size());
    m.mb_per_s /= n;
    m.sender_cpu_ns_per_byte /= n;
    m.receiver_cpu_ns_per_byte /= n;
    return m;
}

// The ABI's own cost over AF_XDP: ib_write_lat through the library, then RDMA
// Write and Send of 64 KiB (CRC off) and the Write ping-pong done by this
// process on the runtime's API (tools/bench_native.hpp) over the same veth.
bool abi_overhead(const WireBenchOptions& o, const Layout& l, const PerfPath& xdp, WireReport& r,
                  std::string& error) {
    auto say = [&](const char* what) {
        if (o.say) std::fprintf(stderr, "wire: %s\n", what);
    };
    say("xdp.write_64 latency");
    WireLatency lat;
    if (!perf_latency(o, xdp, "ib_write_lat", lat, error)) return false;
    r.latency.emplace_back("xdp.write_64", lat);
    const NativePeers peers{l.b, l.a, "vb", "va", kVethB, kNativePort};
    constexpr std::size_t kSize = 65536;
    const std::uint64_t iters = std::max<std::uint64_t>(100, o.flow_bytes / kSize);
    // Runs of one figure move by a third or more here, so each side is the mean of
    // o.abi_reps runs, perftest's and ours in turn: perftest's first is the run above, whose
    // figure becomes the mean.
    for (NativeTest t : {NativeTest::kWrite, NativeTest::kSend}) {
        const bool write = t == NativeTest::kWrite;
        const std::string op = std::string(write ? "write" : "send") + "_64k_crc_off";
        WireFlow* abi = nullptr;
        for (auto& [k, f] : r.throughput)
            if (k == "xdp." + op) abi = &f;
        IWCM_ASSERT(abi != nullptr);
        std::vector<WireFlow> ours, theirs{*abi};
        for (std::uint32_t rep = 0; rep < o.abi_reps; ++rep) {
            say(("xdp.native." + op).c_str());
            WireFlow f;
            WireLatency unused;
            if (!native_run(peers, t, kSize, iters, false, f, unused, error)) return false;
            ours.push_back(f);
            if (rep + 1 == o.abi_reps) break;
            say(("xdp." + op + " again").c_str());
            if (!perf_flow(o, xdp, write, kSize, false, f, error)) return false;
            theirs.push_back(f);
        }
        *abi = mean_flow(theirs);
        r.throughput.emplace_back("xdp.native." + op, mean_flow(ours));
    }
    say("xdp.native.write_64 latency");
    WireFlow unused;
    WireLatency nl;
    if (!native_run(peers, NativeTest::kWriteLatency, 64, o.latency_iters, false, unused, nl,
                    error))
        return false;
    r.latency.emplace_back("xdp.native.write_64", nl);
    return true;
}

template <class T>
const T* find(const std::vector<std::pair<std::string, T>>& v, const std::string& key) {
    for (const auto& [k, x] : v)
        if (k == key) return &x;
    return nullptr;
}

bool have_program(const std::string& name) {
    return run_program({"sh", "-c", "command -v " + name}) == 0;
}

}  // namespace

const WireSetup* WireReport::find_setup(const std::string& key) const {
    return find(setup, key);
}
const WireFlow* WireReport::find_flow(const std::string& key) const {
    return find(throughput, key);
}
const WireLatency* WireReport::find_latency(const std::string& key) const {
    return find(latency, key);
}

bool run_wire(const WireBenchOptions& o, WireReport& r, std::string& error) {
    if (::geteuid() != 0) {
        error = "--wire needs root (network namespaces, a veth with XDP, TAP devices)";
        return false;
    }
    for (const char* prog : {"ip", "ib_write_bw", "ib_send_bw", "ib_send_lat", "ib_write_lat"}) {
        if (!have_program(prog)) {
            error = std::string("--wire needs ") + prog + " in PATH (Debian: apt install " +
                    (prog[0] == 'i' && prog[1] == 'p' ? "iproute2" : "perftest") + ")";
            return false;
        }
    }
    if (::access(o.library.c_str(), R_OK) != 0) {
        error = "--wire needs " + o.library + " (the library built beside this program)";
        return false;
    }
    // The processes and threads here use every CPU, whatever the bench pinned.
    cpu_set_t all;
    CPU_ZERO(&all);
    for (unsigned c = 0; c < std::thread::hardware_concurrency(); ++c) CPU_SET(c, &all);
    (void)sched_setaffinity(0, sizeof all, &all);

    Layout l;
    if (!l.make(error)) return false;
    auto say = [&](const char* what) {
        if (o.say) std::fprintf(stderr, "wire: %s\n", what);
    };
    r.xdp_mode = "native";

    // The kernel's figures first, with the veth's offloads as a user has them.
    say("setup rate, kernel sockets over the veth");
    WireSetup ks;
    if (!kernel_setup(o, l, ks, error)) return false;
    for (std::size_t size : {std::size_t{4096}, std::size_t{65536}}) {
        say(size == 4096 ? "kernel TCP stream, 4 KiB writes" : "kernel TCP stream, 64 KiB writes");
        WireFlow f;
        if (!kernel_stream(o, l, size, f, error)) return false;
        r.throughput.emplace_back(std::string("kernel.") + size_tag(size), f);
    }
    say("kernel TCP ping-pong, 64 bytes");
    WireLatency kl;
    if (!kernel_pingpong(o, l, kl, error)) return false;

    if (!tx_checksum_off(l.a, "va") || !tx_checksum_off(l.b, "vb")) {
        error = "could not turn the veth's transmit checksum offload off";
        return false;
    }
    // The TAP's virtio-net header is the default; turned off for both of its ends.
    std::vector<std::string> tap_b{"--tap", "tb", "--ip", std::string(kTapB) + "/24"};
    std::vector<std::string> tap_a{"--tap", "ta", "--ip", std::string(kTapA) + "/24"};
    std::vector<std::string> env_b{"IWCM_TAP=tb", std::string("IWCM_IP=") + kTapB + "/24"};
    std::vector<std::string> env_a{"IWCM_TAP=ta", std::string("IWCM_IP=") + kTapA + "/24"};
    if (!o.tap_offload) {
        for (auto* v : {&tap_a, &tap_b}) v->emplace_back("--no-tap-offload");
        for (auto* v : {&env_a, &env_b}) v->emplace_back("IWCM_TAP_OFFLOAD=0");
    }
    const CmPath cm_paths[] = {
        {"xdp",
         l.b,
         l.a,
         {"--dev", "vb", "--xdp-mode", "native"},
         {"--dev", "va", "--xdp-mode", "native"},
         kVethB},
        {"tap", l.t, l.t, tap_b, tap_a, kTapB},
    };
    for (const CmPath& p : cm_paths) {
        say(p.name[0] == 'x' ? "setup rate, iwarp-cm over AF_XDP"
                             : "setup rate, iwarp-cm over TAP");
        WireSetup s;
        if (!cm_setup(o, p, s, error)) return false;
        r.setup.emplace_back(p.name, s);
    }
    r.setup.emplace_back("kernel", ks);

    const PerfPath perf_paths[] = {
        {"xdp",
         l.b,
         l.a,
         l.a,
         {"IWCM_DEV=vb", "IWCM_XDP_MODE=native"},
         {"IWCM_DEV=va", "IWCM_XDP_MODE=native"},
         kVethB},
        {"tap", l.t, l.t, l.t, env_b, env_a, kTapB},
    };
    for (const PerfPath& p : perf_paths) {
        for (bool write : {true, false}) {
            for (std::size_t size : {std::size_t{4096}, std::size_t{65536}}) {
                for (bool crc : {false, true}) {
                    const std::string key = std::string(p.name) + (write ? ".write_" : ".send_") +
                                            size_tag(size) + (crc ? "_crc_on" : "_crc_off");
                    say(key.c_str());
                    WireFlow f;
                    if (!perf_flow(o, p, write, size, crc, f, error)) return false;
                    r.throughput.emplace_back(key, f);
                }
            }
        }
        say((std::string(p.name) + ".send_64 latency").c_str());
        WireLatency lat;
        if (!perf_latency(o, p, "ib_send_lat", lat, error)) return false;
        r.latency.emplace_back(std::string(p.name) + ".send_64", lat);
    }
    // Busy polling (RuntimeConfig::busy_poll_us) over AF_XDP: off by default, measured here.
    say("xdp.send_64_busy_poll latency");
    PerfPath busy = perf_paths[0];
    busy.server_env.emplace_back("IWCM_BUSY_POLL=50");
    busy.client_env.emplace_back("IWCM_BUSY_POLL=50");
    WireLatency bl;
    if (!perf_latency(o, busy, "ib_send_lat", bl, error)) return false;
    r.latency.emplace_back("xdp.send_64_busy_poll", bl);
    if (!abi_overhead(o, l, perf_paths[0], r, error)) return false;
    r.latency.emplace_back("kernel.tcp_64", kl);
    return true;
}

std::string wire_json(const WireReport& r) {
    std::ostringstream j;
    char b[160];
    j << "{\"xdp_mode\": \"" << r.xdp_mode << "\", \"setup\": {";
    for (std::size_t i = 0; i < r.setup.size(); ++i) {
        const WireSetup& s = r.setup[i].second;
        std::snprintf(b, sizeof b,
                      "\"rate_per_s\": %.1f, \"client_cpu_us\": %.2f, \"server_cpu_us\": %.2f",
                      s.rate_per_s, s.client_cpu_us, s.server_cpu_us);
        j << (i ? ", " : "") << "\"" << r.setup[i].first << "\": {" << b << "}";
    }
    j << "}, \"throughput\": {";
    for (std::size_t i = 0; i < r.throughput.size(); ++i) {
        const WireFlow& f = r.throughput[i].second;
        std::snprintf(b, sizeof b,
                      "\"mb_per_s\": %.3f, \"sender_cpu_ns_per_byte\": %.3f, "
                      "\"receiver_cpu_ns_per_byte\": %.3f",
                      f.mb_per_s, f.sender_cpu_ns_per_byte, f.receiver_cpu_ns_per_byte);
        j << (i ? ", " : "") << "\"" << r.throughput[i].first << "\": {" << b << "}";
    }
    j << "}, \"latency\": {";
    for (std::size_t i = 0; i < r.latency.size(); ++i) {
        const WireLatency& x = r.latency[i].second;
        // Digits enough that a ratio of two figures read back is the target's to 1e-4.
        std::snprintf(b, sizeof b, "\"p50_us\": %.4f, \"p99_us\": %.4f", x.p50_us, x.p99_us);
        j << (i ? ", " : "") << "\"" << r.latency[i].first << "\": {" << b << "}";
    }
    j << "}}";
    return j.str();
}

void print_wire(const WireReport& r) {
    std::printf("on the wire (a veth with %s XDP between two namespaces; two TAPs on a bridge)\n",
                r.xdp_mode.c_str());
    std::printf("  %-34s %14s %16s %16s\n", "setup (TCP + MPA v2 + RTR)", "setups/s",
                "client CPU us", "server CPU us");
    for (const auto& [k, s] : r.setup)
        std::printf("  %-34s %14.0f %16.2f %16.2f\n", k.c_str(), s.rate_per_s, s.client_cpu_us,
                    s.server_cpu_us);
    std::printf("  %-34s %14s %16s %16s\n", "throughput", "MB/s", "sender ns/B", "receiver ns/B");
    for (const auto& [k, f] : r.throughput)
        std::printf("  %-34s %14.1f %16.3f %16.3f\n", k.c_str(), f.mb_per_s,
                    f.sender_cpu_ns_per_byte, f.receiver_cpu_ns_per_byte);
    std::printf("  %-34s %14s %16s\n", "round trip, 64 bytes", "p50 us", "p99 us");
    for (const auto& [k, x] : r.latency)
        std::printf("  %-34s %14.2f %16.2f\n", k.c_str(), x.p50_us, x.p99_us);
}

}  // namespace iwcm::tools
