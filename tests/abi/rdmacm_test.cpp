// The librdmacm ABI of libiwcm_rdma, called as a C program calls it.
//
// Read first: src/abi/rdmacm_state.hpp, rdma_cm(7).
//
// rdma_getaddrinfo, rdma_event_str and the port accessors need no runtime.
// Everything else runs over the process's runtime on a TAP inside a network
// namespace of its own: the test environment unshares the process's network
// namespace (root only), makes the TAP with the kernel's side at 10.77.0.1/24,
// and sets IWCM_TAP / IWCM_IP so that the runtime takes 10.77.0.2/24. The
// namespace and the TAP end with the process. The kernel's side is the peer:
// it answers ARP, and tests/interop/mpa_peer.py speaks MPA over its TCP.
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

constexpr const char* kTap = "iwcmt0";
constexpr const char* kKernelIp = "10.77.0.1";
constexpr const char* kOurIp = "10.77.0.2";
// A second TAP for a child process's runtime (ProcessExit).
constexpr const char* kTap2 = "iwcmt1";
constexpr const char* kKernelIp2 = "10.78.0.1";
constexpr const char* kChildIp = "10.78.0.2";

std::string g_env_error;  // why the runtime cannot run here ("" when it can)

class NamespaceEnv : public ::testing::Environment {
public:
    void SetUp() override {
        if (geteuid() != 0) {
            g_env_error = "needs root (a network namespace of its own and a TAP)";
            return;
        }
        if (unshare(CLONE_NEWNET) != 0) {
            g_env_error = std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
            return;
        }
        const std::string cmds[] = {
            "ip link set lo up",
            std::string("ip tuntap add dev ") + kTap + " mode tap",
            std::string("ip link set ") + kTap + " up",
            std::string("ip addr add ") + kKernelIp + "/24 dev " + kTap,
            std::string("ip tuntap add dev ") + kTap2 + " mode tap",
            std::string("ip link set ") + kTap2 + " up",
            std::string("ip addr add ") + kKernelIp2 + "/24 dev " + kTap2,
        };
        for (const auto& c : cmds) {
            if (std::system(c.c_str()) != 0) {
                g_env_error = "failed: " + c;
                return;
            }
        }
        setenv("IWCM_TAP", kTap, 1);
        setenv("IWCM_IP", (std::string(kOurIp) + "/24").c_str(), 1);
    }
};

// The runtime must start here; a test that needs it fails with the reason.
#define NEED_RUNTIME()                                                               \
    do {                                                                             \
        ASSERT_TRUE(g_env_error.empty()) << g_env_error;                             \
        rdma_event_channel* probe = rdma_create_event_channel();                     \
        ASSERT_NE(probe, nullptr) << "the runtime did not start (its reason is the " \
                                     "\"iwcm:\" line on stderr): "                   \
                                  << std::strerror(errno);                           \
        rdma_destroy_event_channel(probe);                                           \
    } while (0)

sockaddr_in sin(const char* ip, std::uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

std::string ip_of(const sockaddr* sa) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
    return buf;
}

// The next event of the channel within `ms`, or nullptr.
rdma_cm_event* next_event(rdma_event_channel* ch, int ms = 5000) {
    pollfd p{ch->fd, POLLIN, 0};
    if (poll(&p, 1, ms) != 1) return nullptr;
    rdma_cm_event* ev = nullptr;
    return rdma_get_cm_event(ch, &ev) == 0 ? ev : nullptr;
}

// Expects the next event to be `type`; acknowledges it; returns its status.
int expect_event(rdma_event_channel* ch, rdma_cm_event_type type, int ms = 5000) {
    rdma_cm_event* ev = next_event(ch, ms);
    EXPECT_NE(ev, nullptr) << "no event within " << ms << " ms, expected " << rdma_event_str(type);
    if (ev == nullptr) return INT32_MIN;
    EXPECT_EQ(ev->event, type) << rdma_event_str(ev->event) << " instead of "
                               << rdma_event_str(type);
    const int status = ev->status;
    rdma_ack_cm_event(ev);
    return status;
}

// tests/interop/mpa_peer.py as a child process whose JSON lines we read.
class MpaPeer {
public:
    explicit MpaPeer(const std::vector<std::string>& args) {
        // The arguments are built before the fork: the runtime's thread may hold
        // an allocator lock at that moment, and the child must not allocate.
        std::vector<std::string> argv = {
            "python3", std::string(IWCM_SOURCE_DIR) + "/tests/interop/mpa_peer.py"};
        argv.insert(argv.end(), args.begin(), args.end());
        std::vector<char*> cargv;
        for (auto& a : argv) cargv.push_back(a.data());
        cargv.push_back(nullptr);
        int fds[2];
        if (pipe(fds) != 0) return;
        pid_ = fork();
        if (pid_ == 0) {
            dup2(fds[1], 1);
            close(fds[0]);
            execvp("python3", cargv.data());
            _exit(127);
        }
        close(fds[1]);
        fd_ = fds[0];
    }
    ~MpaPeer() {
        if (pid_ > 0) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
        if (fd_ >= 0) close(fd_);
    }
    MpaPeer(const MpaPeer&) = delete;
    MpaPeer& operator=(const MpaPeer&) = delete;

    // The first line that contains `what`, read within `ms`.
    std::optional<std::string> line_with(const std::string& what, int ms = 5000) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
        for (;;) {
            const auto nl = buf_.find('\n');
            if (nl != std::string::npos) {
                std::string line = buf_.substr(0, nl);
                buf_.erase(0, nl + 1);
                if (line.find(what) != std::string::npos) return line;
                continue;
            }
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) return std::nullopt;
            pollfd p{fd_, POLLIN, 0};
            if (poll(&p, 1, static_cast<int>(left.count())) != 1) return std::nullopt;
            char chunk[512];
            const ssize_t n = read(fd_, chunk, sizeof chunk);
            if (n <= 0) return std::nullopt;
            buf_.append(chunk, static_cast<std::size_t>(n));
        }
    }
    // Its exit status within `ms` (-1: still running).
    int exit_status(int ms = 5000) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
        while (std::chrono::steady_clock::now() < deadline) {
            int st = 0;
            if (waitpid(pid_, &st, WNOHANG) == pid_) {
                pid_ = -1;
                return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            }
            pollfd p{fd_, POLLIN, 0};
            if (poll(&p, 1, 10) == 1) {
                char chunk[512];
                const ssize_t n = read(fd_, chunk, sizeof chunk);
                if (n > 0) buf_.append(chunk, static_cast<std::size_t>(n));
            }
        }
        return -1;
    }

private:
    pid_t pid_ = -1;
    int fd_ = -1;
    std::string buf_;
};

// ---- no runtime needed ----

TEST(GetAddrInfo, NumericPassiveIsTheSource) {
    rdma_addrinfo hints{};
    hints.ai_flags = RAI_PASSIVE;
    hints.ai_port_space = RDMA_PS_TCP;
    rdma_addrinfo* res = nullptr;
    ASSERT_EQ(rdma_getaddrinfo("10.1.2.3", "7471", &hints, &res), 0);
    ASSERT_NE(res, nullptr);
    EXPECT_EQ(res->ai_flags & RAI_PASSIVE, RAI_PASSIVE);
    EXPECT_EQ(res->ai_family, AF_INET);
    EXPECT_EQ(res->ai_port_space, RDMA_PS_TCP);
    EXPECT_EQ(res->ai_qp_type, IBV_QPT_RC);
    ASSERT_NE(res->ai_src_addr, nullptr);
    EXPECT_EQ(res->ai_src_len, sizeof(sockaddr_in));
    EXPECT_EQ(ip_of(res->ai_src_addr), "10.1.2.3");
    EXPECT_EQ(ntohs(reinterpret_cast<sockaddr_in*>(res->ai_src_addr)->sin_port), 7471);
    EXPECT_EQ(res->ai_dst_addr, nullptr);
    EXPECT_EQ(res->ai_next, nullptr);
    rdma_freeaddrinfo(res);
}

TEST(GetAddrInfo, ActiveIsTheDestinationWithTheHintsSource) {
    rdma_addrinfo hints{};
    hints.ai_port_space = RDMA_PS_TCP;
    sockaddr_in src = sin("10.9.9.9", 0);
    hints.ai_src_addr = reinterpret_cast<sockaddr*>(&src);
    hints.ai_src_len = sizeof src;
    rdma_addrinfo* res = nullptr;
    ASSERT_EQ(rdma_getaddrinfo("192.0.2.7", "4000", &hints, &res), 0);
    EXPECT_EQ(res->ai_flags & RAI_PASSIVE, 0);
    ASSERT_NE(res->ai_dst_addr, nullptr);
    EXPECT_EQ(ip_of(res->ai_dst_addr), "192.0.2.7");
    EXPECT_EQ(ntohs(reinterpret_cast<sockaddr_in*>(res->ai_dst_addr)->sin_port), 4000);
    ASSERT_NE(res->ai_src_addr, nullptr);
    EXPECT_EQ(ip_of(res->ai_src_addr), "10.9.9.9");
    rdma_freeaddrinfo(res);
}

TEST(GetAddrInfo, PassiveWithoutNodeIsTheWildcard) {
    rdma_addrinfo hints{};
    hints.ai_flags = RAI_PASSIVE;
    hints.ai_family = AF_INET;
    hints.ai_port_space = RDMA_PS_TCP;
    rdma_addrinfo* res = nullptr;
    ASSERT_EQ(rdma_getaddrinfo(nullptr, "7471", &hints, &res), 0);
    ASSERT_NE(res->ai_src_addr, nullptr);
    EXPECT_EQ(ip_of(res->ai_src_addr), "0.0.0.0");
    rdma_freeaddrinfo(res);
}

TEST(GetAddrInfo, NameFromHostsAndServiceName) {
    rdma_addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_port_space = RDMA_PS_TCP;
    rdma_addrinfo* res = nullptr;
    ASSERT_EQ(rdma_getaddrinfo("localhost", "ssh", &hints, &res), 0) << gai_strerror(errno);
    EXPECT_EQ(ip_of(res->ai_dst_addr), "127.0.0.1");
    EXPECT_EQ(ntohs(reinterpret_cast<sockaddr_in*>(res->ai_dst_addr)->sin_port), 22);
    rdma_freeaddrinfo(res);
}

TEST(GetAddrInfo, NumericHostRefusesAName) {
    rdma_addrinfo hints{};
    hints.ai_flags = RAI_NUMERICHOST;
    hints.ai_port_space = RDMA_PS_TCP;
    rdma_addrinfo* res = nullptr;
    EXPECT_EQ(rdma_getaddrinfo("localhost", "7471", &hints, &res), -1);
    EXPECT_EQ(errno, EAI_NONAME);
}

TEST(GetAddrInfo, NothingToLookUpIsEinval) {
    rdma_addrinfo* res = nullptr;
    EXPECT_EQ(rdma_getaddrinfo(nullptr, nullptr, nullptr, &res), -1);
    EXPECT_EQ(errno, EINVAL);
}

TEST(EventStr, NamesEveryEventAndUnknownOnes) {
    EXPECT_STREQ(rdma_event_str(RDMA_CM_EVENT_ADDR_RESOLVED), "RDMA_CM_EVENT_ADDR_RESOLVED");
    EXPECT_STREQ(rdma_event_str(RDMA_CM_EVENT_REJECTED), "RDMA_CM_EVENT_REJECTED");
    EXPECT_STREQ(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT), "RDMA_CM_EVENT_TIMEWAIT_EXIT");
    EXPECT_STREQ(rdma_event_str(static_cast<rdma_cm_event_type>(99)), "UNKNOWN EVENT");
}

// ---- over the runtime ----

TEST(EventChannel, FdIsPollableAndHonoursNonblocking) {
    NEED_RUNTIME();
    rdma_event_channel* ch = rdma_create_event_channel();
    ASSERT_NE(ch, nullptr);
    pollfd p{ch->fd, POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 0), 0) << "readable with no event";
    ASSERT_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
    rdma_cm_event* ev = nullptr;
    EXPECT_EQ(rdma_get_cm_event(ch, &ev), -1);
    EXPECT_EQ(errno, EAGAIN);
    rdma_destroy_event_channel(ch);
}

TEST(EventChannel, OneTokenPerEvent) {
    NEED_RUNTIME();
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id* a = nullptr;
    rdma_cm_id* b = nullptr;
    ASSERT_EQ(rdma_create_id(ch, &a, nullptr, RDMA_PS_TCP), 0);
    ASSERT_EQ(rdma_create_id(ch, &b, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in kernel = sin(kKernelIp, 0);
    ASSERT_EQ(rdma_resolve_addr(a, nullptr, reinterpret_cast<sockaddr*>(&kernel), 1000), 0);
    ASSERT_EQ(rdma_resolve_addr(b, nullptr, reinterpret_cast<sockaddr*>(&kernel), 1000), 0);
    rdma_cm_event* e1 = next_event(ch);
    rdma_cm_event* e2 = next_event(ch);
    ASSERT_NE(e1, nullptr);
    ASSERT_NE(e2, nullptr);
    EXPECT_NE(e1->id, e2->id);
    pollfd p{ch->fd, POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 0), 0) << "a token left after both events were taken";
    EXPECT_EQ(rdma_ack_cm_event(e1), 0);
    EXPECT_EQ(rdma_ack_cm_event(e2), 0);
    EXPECT_EQ(rdma_ack_cm_event(e2), -1) << "acknowledged twice";
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(rdma_destroy_id(a), 0);
    EXPECT_EQ(rdma_destroy_id(b), 0);
    rdma_destroy_event_channel(ch);
}

TEST(CreateId, PortSpacesAndBadArguments) {
    NEED_RUNTIME();
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    EXPECT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_UDP), -1);
    EXPECT_EQ(errno, ENOSYS);
    EXPECT_EQ(rdma_create_id(ch, &id, nullptr, static_cast<rdma_port_space>(0x1234)), -1);
    EXPECT_EQ(errno, EINVAL);
    rdma_event_channel foreign{};
    EXPECT_EQ(rdma_create_id(&foreign, &id, nullptr, RDMA_PS_TCP), -1);
    EXPECT_EQ(errno, EINVAL);
    int ctx = 0;
    ASSERT_EQ(rdma_create_id(ch, &id, &ctx, RDMA_PS_TCP), 0);
    EXPECT_EQ(id->channel, ch);
    EXPECT_EQ(id->context, &ctx);
    EXPECT_EQ(id->ps, RDMA_PS_TCP);
    EXPECT_EQ(id->qp_type, IBV_QPT_RC);
    EXPECT_EQ(id->verbs, nullptr) << "a device before an address";
    EXPECT_EQ(rdma_destroy_id(id), 0);
    rdma_cm_id stale{};
    EXPECT_EQ(rdma_destroy_id(&stale), -1);
    EXPECT_EQ(errno, EINVAL);
    rdma_destroy_event_channel(ch);
}

TEST(BindAddr, OursOnlyAndOnce) {
    NEED_RUNTIME();
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    rdma_cm_id* other = nullptr;
    ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
    ASSERT_EQ(rdma_create_id(ch, &other, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in not_ours = sin("10.77.0.50", 7000);
    EXPECT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&not_ours)), -1);
    EXPECT_EQ(errno, EADDRNOTAVAIL);
    sockaddr bad{};
    bad.sa_family = AF_UNIX;
    EXPECT_EQ(rdma_bind_addr(id, &bad), -1);
    EXPECT_EQ(errno, EINVAL);
    sockaddr_in ours = sin(kOurIp, 7000);
    ASSERT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&ours)), 0);
    EXPECT_EQ(ip_of(rdma_get_local_addr(id)), kOurIp);
    EXPECT_EQ(ntohs(rdma_get_src_port(id)), 7000);
    EXPECT_NE(id->verbs, nullptr);
    EXPECT_NE(id->pd, nullptr) << "librdmacm's default PD";
    EXPECT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&ours)), -1);
    EXPECT_EQ(errno, EINVAL) << "bound twice";
    EXPECT_EQ(rdma_bind_addr(other, reinterpret_cast<sockaddr*>(&ours)), -1);
    EXPECT_EQ(errno, EADDRINUSE);
    EXPECT_EQ(rdma_destroy_id(id), 0);
    EXPECT_EQ(rdma_bind_addr(other, reinterpret_cast<sockaddr*>(&ours)), 0) << "freed by destroy";
    EXPECT_EQ(rdma_destroy_id(other), 0);
    rdma_destroy_event_channel(ch);
}

// getaddrinfo(3) answers ::ffff:a.b.c.d for an IPv4 name on a host without
// an IPv4 address of its own (rping's rdma_getaddrinfo without hints does so
// in a namespace whose addresses are ours).
TEST(BindAddr, V4MappedIsTheV4Address) {
    NEED_RUNTIME();
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in6 mapped{};
    mapped.sin6_family = AF_INET6;
    mapped.sin6_port = htons(7001);
    ASSERT_EQ(inet_pton(AF_INET6, (std::string("::ffff:") + kOurIp).c_str(), &mapped.sin6_addr), 1);
    ASSERT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&mapped)), 0);
    EXPECT_EQ(ip_of(rdma_get_local_addr(id)), kOurIp);
    EXPECT_EQ(ntohs(rdma_get_src_port(id)), 7001);
    EXPECT_EQ(rdma_destroy_id(id), 0);
    rdma_destroy_event_channel(ch);
}

TEST(Listen, PortZeroTakesAPortAndListenTwiceIsFine) {
    NEED_RUNTIME();
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
    ASSERT_EQ(rdma_listen(id, 4), 0);
    EXPECT_NE(rdma_get_src_port(id), 0);
    EXPECT_EQ(rdma_listen(id, 4), 0);
    rdma_cm_id* other = nullptr;
    ASSERT_EQ(rdma_create_id(ch, &other, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in same = sin(kOurIp, ntohs(rdma_get_src_port(id)));
    EXPECT_EQ(rdma_bind_addr(other, reinterpret_cast<sockaddr*>(&same)), -1);
    EXPECT_EQ(errno, EADDRINUSE);
    EXPECT_EQ(rdma_disconnect(id), -1) << "a listener has no connection";
    EXPECT_EQ(rdma_destroy_id(other), 0);
    EXPECT_EQ(rdma_destroy_id(id), 0);
    rdma_destroy_event_channel(ch);
}

TEST(ResolveAddr, SilentNeighbourIsAddrErrorAfterTheTimeout) {
    NEED_RUNTIME();
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in silent = sin("10.77.0.99", 7000);
    const auto start = std::chrono::steady_clock::now();
    ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&silent), 300), 0);
    EXPECT_EQ(expect_event(ch, RDMA_CM_EVENT_ADDR_ERROR), -ETIMEDOUT);
    EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
    // Bound again: it may resolve anew, and the route needs an address first.
    EXPECT_EQ(rdma_resolve_route(id, 1000), -1);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(rdma_destroy_id(id), 0);
    rdma_destroy_event_channel(ch);
}

TEST(ResolveAddr, OffSubnetWithoutGatewayFailsAtOnce) {
    NEED_RUNTIME();
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in far = sin("192.0.2.1", 7000);
    EXPECT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&far), 1000), -1);
    EXPECT_EQ(errno, ENETUNREACH);
    sockaddr_in not_ours = sin("10.77.0.50", 0);
    rdma_cm_id* other = nullptr;
    ASSERT_EQ(rdma_create_id(ch, &other, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in near = sin(kKernelIp, 7000);
    EXPECT_EQ(rdma_resolve_addr(other, reinterpret_cast<sockaddr*>(&not_ours),
                                reinterpret_cast<sockaddr*>(&near), 1000),
              -1);
    EXPECT_EQ(errno, EADDRNOTAVAIL) << "a source address that is not ours";
    EXPECT_EQ(rdma_destroy_id(other), 0);
    EXPECT_EQ(rdma_destroy_id(id), 0);
    rdma_destroy_event_channel(ch);
}

TEST(ResolveAddr, OwnAddressIsNotSupported) {
    NEED_RUNTIME();
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in self = sin(kOurIp, 7000);
    EXPECT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&self), 1000), -1);
    EXPECT_EQ(errno, EOPNOTSUPP);
    pollfd p{ch->fd, POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 0), 0) << "an event after a failed call";
    EXPECT_EQ(rdma_destroy_id(id), 0);
    rdma_destroy_event_channel(ch);
}

TEST(ResolveAddr, NeighbourThenRoute) {
    NEED_RUNTIME();
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in kernel = sin(kKernelIp, 7000);
    ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&kernel), 2000), 0);
    EXPECT_EQ(expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
    EXPECT_NE(id->verbs, nullptr);
    EXPECT_EQ(ip_of(rdma_get_local_addr(id)), kOurIp);
    EXPECT_EQ(ip_of(rdma_get_peer_addr(id)), kKernelIp);
    EXPECT_EQ(ntohs(rdma_get_dst_port(id)), 7000);
    ASSERT_EQ(rdma_resolve_route(id, 2000), 0);
    EXPECT_EQ(expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED), 0);
    EXPECT_EQ(rdma_destroy_id(id), 0);
    rdma_destroy_event_channel(ch);
}

TEST(SyncId, ResolveBlocksAndReportsTheError) {
    NEED_RUNTIME();
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
    ASSERT_NE(id->channel, nullptr);
    sockaddr_in silent = sin("10.77.0.98", 7000);
    EXPECT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&silent), 200), -1);
    EXPECT_EQ(errno, ETIMEDOUT);
    ASSERT_NE(id->event, nullptr);
    EXPECT_EQ(id->event->event, RDMA_CM_EVENT_ADDR_ERROR);
    EXPECT_EQ(rdma_destroy_id(id), 0) << "its held event is acknowledged by destroy";
}

TEST(SetOption, WhatAppliesToIwarp) {
    NEED_RUNTIME();
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
    std::uint8_t tos = 0x28;
    EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos), 0);
    int one = 1;
    EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &one, sizeof one), -1);
    EXPECT_EQ(errno, EINVAL) << "TOS is one byte";
    EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one), 0);
    EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof one), 0);
    EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &one, sizeof one), -1);
    EXPECT_EQ(errno, EINVAL) << "no IB paths on iWARP";
    EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, 77, &one, sizeof one), -1);
    EXPECT_EQ(errno, ENOSYS);
    EXPECT_EQ(rdma_set_option(id, 9, 0, &one, sizeof one), -1);
    EXPECT_EQ(errno, ENOSYS);
    ASSERT_EQ(rdma_listen(id, 1), 0);
    EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one), -1);
    EXPECT_EQ(errno, EINVAL) << "a listener cannot share its port";
    EXPECT_EQ(rdma_destroy_id(id), 0);
    rdma_destroy_event_channel(ch);
}

TEST(DestroyId, WaitsForItsEventsToBeAcknowledged) {
    NEED_RUNTIME();
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in kernel = sin(kKernelIp, 0);
    ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&kernel), 1000), 0);
    rdma_cm_event* ev = next_event(ch);
    ASSERT_NE(ev, nullptr);
    auto destroyed = std::async(std::launch::async, [id] { return rdma_destroy_id(id); });
    EXPECT_EQ(destroyed.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout)
        << "rdma_destroy_id returned with an event of the id unacknowledged";
    EXPECT_EQ(ev->id, id) << "the event's id stays valid until acknowledged";
    EXPECT_EQ(rdma_ack_cm_event(ev), 0);
    ASSERT_EQ(destroyed.wait_for(std::chrono::seconds(5)), std::future_status::ready);
    EXPECT_EQ(destroyed.get(), 0);
    rdma_destroy_event_channel(ch);
}

TEST(DestroyId, DropsItsQueuedEvents) {
    NEED_RUNTIME();
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    rdma_cm_id* keep = nullptr;
    ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
    ASSERT_EQ(rdma_create_id(ch, &keep, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in kernel = sin(kKernelIp, 0);
    ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&kernel), 1000), 0);
    ASSERT_EQ(rdma_resolve_addr(keep, nullptr, reinterpret_cast<sockaddr*>(&kernel), 1000), 0);
    EXPECT_EQ(rdma_destroy_id(id), 0) << "returns: nothing of it was reported";
    rdma_cm_event* ev = next_event(ch);
    ASSERT_NE(ev, nullptr);
    EXPECT_EQ(ev->id, keep) << "the destroyed id's event was delivered";
    rdma_ack_cm_event(ev);
    EXPECT_EQ(rdma_destroy_id(keep), 0);
    rdma_destroy_event_channel(ch);
}

// ---- connections with the kernel's TCP and tests/interop/mpa_peer.py ----

// Resolves the kernel's side (no connection) on a channel of its own.
struct Resolved {
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    void resolve(std::uint16_t port) {
        ASSERT_NE(ch, nullptr);
        ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
        sockaddr_in to = sin(kKernelIp, port);
        ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&to), 2000), 0);
        ASSERT_EQ(expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
        ASSERT_EQ(rdma_resolve_route(id, 2000), 0);
        ASSERT_EQ(expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED), 0);
    }
    ~Resolved() {
        if (id != nullptr) rdma_destroy_id(id);
        if (ch != nullptr) rdma_destroy_event_channel(ch);
    }
};

struct Client : Resolved {
    // Resolves the kernel's side at `port` and connects with `pdata`.
    void connect(std::uint16_t port, const std::string& pdata) {
        resolve(port);
        rdma_conn_param p{};
        p.private_data = pdata.data();
        p.private_data_len = static_cast<std::uint8_t>(pdata.size());
        p.responder_resources = 1;
        p.initiator_depth = 1;
        ASSERT_EQ(rdma_connect(id, &p), 0);
    }
};

TEST(Connect, EstablishedWithThePeersPrivateDataThenDisconnected) {
    NEED_RUNTIME();
    MpaPeer peer({"server", "--bind", std::string(kKernelIp) + ":7101", "--pdata", "welcome"});
    ASSERT_TRUE(peer.line_with("listening"));
    Client c;
    c.connect(7101, "hello");
    rdma_cm_event* ev = next_event(c.ch);
    ASSERT_NE(ev, nullptr);
    ASSERT_EQ(ev->event, RDMA_CM_EVENT_ESTABLISHED) << rdma_event_str(ev->event);
    EXPECT_EQ(ev->status, 0);
    EXPECT_EQ(ev->id, c.id);
    ASSERT_EQ(ev->param.conn.private_data_len, 7);
    EXPECT_EQ(std::memcmp(ev->param.conn.private_data, "welcome", 7), 0);
    rdma_ack_cm_event(ev);
    EXPECT_EQ(ip_of(rdma_get_local_addr(c.id)), kOurIp);
    EXPECT_NE(rdma_get_src_port(c.id), 0) << "the connection's port fills the source";
    EXPECT_EQ(ntohs(rdma_get_dst_port(c.id)), 7101);
    auto req = peer.line_with("\"request\"");
    ASSERT_TRUE(req);
    EXPECT_NE(req->find("hello"), std::string::npos) << *req;
    ASSERT_EQ(rdma_disconnect(c.id), 0);
    EXPECT_EQ(expect_event(c.ch, RDMA_CM_EVENT_DISCONNECTED), 0);
    EXPECT_EQ(rdma_disconnect(c.id), 0) << "closed already: nothing to do, as iw_cm";
}

TEST(Connect, RejectedWithStatusAndPrivateData) {
    NEED_RUNTIME();
    MpaPeer peer(
        {"server", "--bind", std::string(kKernelIp) + ":7102", "--reject", "--pdata", "go away"});
    ASSERT_TRUE(peer.line_with("listening"));
    Client c;
    c.connect(7102, "hello");
    rdma_cm_event* ev = next_event(c.ch);
    ASSERT_NE(ev, nullptr);
    ASSERT_EQ(ev->event, RDMA_CM_EVENT_REJECTED) << rdma_event_str(ev->event);
    EXPECT_EQ(ev->status, -ECONNREFUSED) << "an MPA reject, as cma_iw_handler reports it";
    ASSERT_EQ(ev->param.conn.private_data_len, 7);
    EXPECT_EQ(std::memcmp(ev->param.conn.private_data, "go away", 7), 0);
    rdma_ack_cm_event(ev);
}

TEST(Connect, NoListenerIsRejectedByTheReset) {
    NEED_RUNTIME();
    Client c;
    c.connect(7103, "");
    rdma_cm_event* ev = next_event(c.ch);
    ASSERT_NE(ev, nullptr);
    EXPECT_EQ(ev->event, RDMA_CM_EVENT_REJECTED) << rdma_event_str(ev->event);
    // cma_iw_handler reports either status of a refused connect as REJECTED.
    EXPECT_TRUE(ev->status == -ECONNREFUSED || ev->status == -ECONNRESET) << ev->status;
    rdma_ack_cm_event(ev);
}

TEST(Connect, ConnectBeforeRouteIsEinval) {
    NEED_RUNTIME();
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
    rdma_conn_param p{};
    EXPECT_EQ(rdma_connect(id, &p), -1);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(rdma_connect(id, nullptr), -1) << "no QP and no parameters";
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(rdma_destroy_id(id), 0);
    rdma_destroy_event_channel(ch);
}

struct Server {
    rdma_event_channel* ch = nullptr;
    rdma_cm_id* listener = nullptr;
    void listen(std::uint16_t port) {
        ch = rdma_create_event_channel();
        ASSERT_NE(ch, nullptr);
        ASSERT_EQ(rdma_create_id(ch, &listener, nullptr, RDMA_PS_TCP), 0);
        sockaddr_in at = sin(kOurIp, port);
        ASSERT_EQ(rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&at)), 0);
        ASSERT_EQ(rdma_listen(listener, 8), 0);
    }
    ~Server() {
        if (listener != nullptr) rdma_destroy_id(listener);
        if (ch != nullptr) rdma_destroy_event_channel(ch);
    }
};

TEST(Listen, RequestAcceptedThenPeerCloses) {
    NEED_RUNTIME();
    Server srv;
    srv.listen(7201);
    MpaPeer peer({"client", "--to", std::string(kOurIp) + ":7201", "--pdata", "hi there", "--close",
                  "graceful"});
    rdma_cm_event* ev = next_event(srv.ch);
    ASSERT_NE(ev, nullptr);
    ASSERT_EQ(ev->event, RDMA_CM_EVENT_CONNECT_REQUEST) << rdma_event_str(ev->event);
    EXPECT_EQ(ev->listen_id, srv.listener);
    rdma_cm_id* conn = ev->id;
    ASSERT_NE(conn, nullptr);
    EXPECT_NE(conn, srv.listener);
    EXPECT_NE(conn->verbs, nullptr);
    EXPECT_EQ(conn->channel, srv.ch);
    ASSERT_EQ(ev->param.conn.private_data_len, 8);
    EXPECT_EQ(std::memcmp(ev->param.conn.private_data, "hi there", 8), 0);
    EXPECT_EQ(ip_of(rdma_get_peer_addr(conn)), kKernelIp);
    EXPECT_EQ(ntohs(rdma_get_src_port(conn)), 7201);
    rdma_ack_cm_event(ev);
    rdma_conn_param p{};
    p.private_data = "ok";
    p.private_data_len = 2;
    p.responder_resources = 1;
    p.initiator_depth = 1;
    ASSERT_EQ(rdma_accept(conn, &p), 0);
    EXPECT_EQ(expect_event(srv.ch, RDMA_CM_EVENT_ESTABLISHED), 0);
    auto reply = peer.line_with("\"reply\"");
    ASSERT_TRUE(reply);
    EXPECT_NE(reply->find("ok"), std::string::npos) << *reply;
    EXPECT_EQ(expect_event(srv.ch, RDMA_CM_EVENT_DISCONNECTED), 0);
    EXPECT_EQ(rdma_destroy_id(conn), 0);
}

// cma_iw_listen_handler: the request's initiator depth is the peer's IRD,
// its responder resources the peer's ORD; accepting with 0xFF answers what
// the peer asked (librdmacm's rdma_accept), which the MPA reply carries.
TEST(Listen, RequestCarriesThePeersIrdOrdAndAcceptAnswersThem) {
    NEED_RUNTIME();
    Server srv;
    srv.listen(7205);
    MpaPeer peer({"client", "--to", std::string(kOurIp) + ":7205", "--ird", "5", "--ord", "3",
                  "--close", "graceful"});
    rdma_cm_event* ev = next_event(srv.ch);
    ASSERT_NE(ev, nullptr);
    ASSERT_EQ(ev->event, RDMA_CM_EVENT_CONNECT_REQUEST);
    EXPECT_EQ(ev->param.conn.initiator_depth, 5);
    EXPECT_EQ(ev->param.conn.responder_resources, 3);
    rdma_cm_id* conn = ev->id;
    rdma_ack_cm_event(ev);
    rdma_conn_param p{};
    p.responder_resources = RDMA_MAX_RESP_RES;
    p.initiator_depth = RDMA_MAX_INIT_DEPTH;
    ASSERT_EQ(rdma_accept(conn, &p), 0);
    auto reply = peer.line_with("\"reply\"");
    ASSERT_TRUE(reply);
    EXPECT_NE(reply->find("\"ird\": 3"), std::string::npos) << *reply;
    EXPECT_NE(reply->find("\"ord\": 5"), std::string::npos) << *reply;
    EXPECT_EQ(expect_event(srv.ch, RDMA_CM_EVENT_ESTABLISHED), 0);
    EXPECT_EQ(expect_event(srv.ch, RDMA_CM_EVENT_DISCONNECTED), 0);
    EXPECT_EQ(rdma_destroy_id(conn), 0);
}

TEST(Listen, RequestRejectedWithPrivateData) {
    NEED_RUNTIME();
    Server srv;
    srv.listen(7202);
    MpaPeer peer({"client", "--to", std::string(kOurIp) + ":7202", "--pdata", "knock"});
    rdma_cm_event* ev = next_event(srv.ch);
    ASSERT_NE(ev, nullptr);
    ASSERT_EQ(ev->event, RDMA_CM_EVENT_CONNECT_REQUEST);
    rdma_cm_id* conn = ev->id;
    rdma_ack_cm_event(ev);
    ASSERT_EQ(rdma_reject(conn, "busy", 4), 0);
    EXPECT_EQ(rdma_accept(conn, nullptr), -1) << "rejected already";
    auto reply = peer.line_with("\"reply\"");
    ASSERT_TRUE(reply);
    EXPECT_NE(reply->find("\"reject\": true"), std::string::npos) << *reply;
    EXPECT_NE(reply->find("busy"), std::string::npos) << *reply;
    EXPECT_EQ(rdma_destroy_id(conn), 0);
}

TEST(Listen, DestroyingTheListenerRejectsWaitingRequests) {
    NEED_RUNTIME();
    auto* srv = new Server;
    srv->listen(7203);
    MpaPeer peer({"client", "--to", std::string(kOurIp) + ":7203"});
    pollfd p{srv->ch->fd, POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 5000), 1) << "no CONNECT_REQUEST";
    EXPECT_EQ(rdma_destroy_id(srv->listener), 0) << "a queued request holds no acknowledgement";
    srv->listener = nullptr;
    delete srv;
    // An MPA reject (the peer exits 0 after its "reply") or a reset ("error").
    auto end = peer.line_with("\"event\": \"reply\"", 5000);
    if (end) {
        EXPECT_NE(end->find("\"reject\": true"), std::string::npos) << *end;
    } else {
        EXPECT_EQ(peer.exit_status(), 1) << "the peer was neither rejected nor reset";
    }
}

// ---- QPs of ids, endpoints, the rest of the calls ----

ibv_qp_init_attr small_qp() {
    ibv_qp_init_attr a{};
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 4;
    a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    return a;
}

ibv_qp_state qp_state(ibv_qp* qp) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    EXPECT_EQ(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init), 0);
    return attr.qp_state;
}

TEST(CreateQp, DefaultPdAndCqsWithChannels) {
    NEED_RUNTIME();
    Resolved r;
    r.resolve(7401);
    ibv_qp_init_attr attr = small_qp();
    ASSERT_EQ(rdma_create_qp(r.id, nullptr, &attr), 0) << std::strerror(errno);
    ASSERT_NE(r.id->qp, nullptr);
    EXPECT_EQ(r.id->qp->pd, r.id->pd) << "a NULL PD is the id's default PD";
    ASSERT_NE(r.id->send_cq, nullptr);
    ASSERT_NE(r.id->recv_cq, nullptr);
    EXPECT_NE(r.id->send_cq_channel, nullptr);
    EXPECT_NE(r.id->recv_cq_channel, nullptr);
    EXPECT_EQ(attr.send_cq, r.id->send_cq) << "the attributes come back filled";
    EXPECT_EQ(attr.recv_cq, r.id->recv_cq);
    EXPECT_EQ(qp_state(r.id->qp), IBV_QPS_INIT);
    ibv_qp_init_attr again = small_qp();
    EXPECT_EQ(rdma_create_qp(r.id, nullptr, &again), -1) << "one QP per id";
    EXPECT_EQ(errno, EINVAL);
    rdma_destroy_qp(r.id);
    EXPECT_EQ(r.id->qp, nullptr);
    EXPECT_EQ(r.id->send_cq, nullptr);
    EXPECT_EQ(r.id->recv_cq_channel, nullptr);
}

TEST(CreateQp, NoDeviceBeforeAnAddress) {
    NEED_RUNTIME();
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
    ibv_qp_init_attr attr = small_qp();
    EXPECT_EQ(rdma_create_qp(id, nullptr, &attr), -1);
    EXPECT_EQ(errno, EINVAL);
    ibv_qp_init_attr_ex ex{};
    ex.comp_mask = IBV_QP_INIT_ATTR_CREATE_FLAGS;
    EXPECT_EQ(rdma_create_qp_ex(id, &ex), -1) << "extended attributes beyond the PD";
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(rdma_destroy_id(id), 0);
    rdma_destroy_event_channel(ch);
}

TEST(Connect, TheQpIsAttachedBeforeEstablishedAndFlushedAtTheEnd) {
    NEED_RUNTIME();
    MpaPeer peer({"server", "--bind", std::string(kKernelIp) + ":7402", "--close", "wait"});
    ASSERT_TRUE(peer.line_with("listening"));
    Resolved r;
    r.resolve(7402);
    ibv_qp_init_attr attr = small_qp();
    ASSERT_EQ(rdma_create_qp(r.id, nullptr, &attr), 0);
    rdma_conn_param p{};
    p.responder_resources = 1;
    p.initiator_depth = 1;
    ASSERT_EQ(rdma_connect(r.id, &p), 0);
    EXPECT_EQ(expect_event(r.ch, RDMA_CM_EVENT_ESTABLISHED), 0);
    EXPECT_EQ(qp_state(r.id->qp), IBV_QPS_RTS) << "ESTABLISHED with a QP that runs";
    ASSERT_EQ(rdma_disconnect(r.id), 0);
    EXPECT_EQ(expect_event(r.ch, RDMA_CM_EVENT_DISCONNECTED), 0);
    EXPECT_EQ(qp_state(r.id->qp), IBV_QPS_ERR) << "the QP of a closed connection";
    rdma_destroy_qp(r.id);
}

TEST(Connect, DestroyingTheQpWhileClosingStillReportsDisconnected) {
    NEED_RUNTIME();
    MpaPeer peer({"server", "--bind", std::string(kKernelIp) + ":7403", "--close", "wait"});
    ASSERT_TRUE(peer.line_with("listening"));
    Resolved r;
    r.resolve(7403);
    ibv_qp_init_attr attr = small_qp();
    ASSERT_EQ(rdma_create_qp(r.id, nullptr, &attr), 0);
    rdma_conn_param p{};
    ASSERT_EQ(rdma_connect(r.id, &p), 0);
    EXPECT_EQ(expect_event(r.ch, RDMA_CM_EVENT_ESTABLISHED), 0);
    // cmtime's order: the QP goes at once, the close is still under way.
    ASSERT_EQ(rdma_disconnect(r.id), 0);
    rdma_destroy_qp(r.id);
    EXPECT_EQ(expect_event(r.ch, RDMA_CM_EVENT_DISCONNECTED), 0);
}

TEST(Listen, QpMadeBeforeAcceptRunsAtEstablished) {
    NEED_RUNTIME();
    Server srv;
    srv.listen(7404);
    MpaPeer peer({"client", "--to", std::string(kOurIp) + ":7404", "--close", "wait"});
    rdma_cm_event* ev = next_event(srv.ch);
    ASSERT_NE(ev, nullptr);
    ASSERT_EQ(ev->event, RDMA_CM_EVENT_CONNECT_REQUEST);
    rdma_cm_id* conn = ev->id;
    rdma_ack_cm_event(ev);
    ibv_qp_init_attr attr = small_qp();
    ASSERT_EQ(rdma_create_qp(conn, nullptr, &attr), 0);
    ASSERT_EQ(rdma_accept(conn, nullptr), 0) << "a QP and no parameters: the peer's IRD/ORD";
    EXPECT_EQ(expect_event(srv.ch, RDMA_CM_EVENT_ESTABLISHED), 0);
    EXPECT_EQ(qp_state(conn->qp), IBV_QPS_RTS);
    ASSERT_EQ(rdma_disconnect(conn), 0);
    EXPECT_EQ(expect_event(srv.ch, RDMA_CM_EVENT_DISCONNECTED), 0);
    rdma_destroy_qp(conn);
    EXPECT_EQ(rdma_destroy_id(conn), 0);
}

TEST(CreateEp, PassiveEndpointGetRequestAndSynchronousAccept) {
    NEED_RUNTIME();
    rdma_addrinfo hints{};
    hints.ai_flags = RAI_PASSIVE;
    hints.ai_port_space = RDMA_PS_TCP;
    rdma_addrinfo* res = nullptr;
    ASSERT_EQ(rdma_getaddrinfo(kOurIp, "7405", &hints, &res), 0);
    rdma_cm_id* listen = nullptr;
    ibv_qp_init_attr attr = small_qp();
    ASSERT_EQ(rdma_create_ep(&listen, res, nullptr, &attr), 0) << std::strerror(errno);
    rdma_freeaddrinfo(res);
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_listen(listen, 1), 0);
    MpaPeer peer({"client", "--to", std::string(kOurIp) + ":7405", "--close", "wait"});
    ASSERT_EQ(rdma_get_request(listen, &id), 0);
    ASSERT_NE(id, nullptr);
    ASSERT_NE(id->event, nullptr);
    EXPECT_EQ(id->event->event, RDMA_CM_EVENT_CONNECT_REQUEST);
    EXPECT_NE(id->qp, nullptr) << "the endpoint's QP attributes make the request's QP";
    EXPECT_NE(id->recv_cq, nullptr);
    ASSERT_EQ(rdma_accept(id, nullptr), 0) << "returns once ESTABLISHED";
    ASSERT_NE(id->event, nullptr);
    EXPECT_EQ(id->event->event, RDMA_CM_EVENT_ESTABLISHED);
    EXPECT_EQ(rdma_disconnect(id), 0) << "returns once DISCONNECTED";
    EXPECT_EQ(id->event->event, RDMA_CM_EVENT_DISCONNECTED);
    rdma_destroy_ep(id);
    rdma_destroy_ep(listen);
}

TEST(CreateEp, ActiveEndpointConnectsOrIsRefused) {
    NEED_RUNTIME();
    rdma_addrinfo hints{};
    hints.ai_port_space = RDMA_PS_TCP;
    rdma_addrinfo* res = nullptr;
    ASSERT_EQ(rdma_getaddrinfo(kKernelIp, "7406", &hints, &res), 0);
    {
        MpaPeer peer({"server", "--bind", std::string(kKernelIp) + ":7406", "--close", "wait"});
        ASSERT_TRUE(peer.line_with("listening"));
        rdma_cm_id* id = nullptr;
        ibv_qp_init_attr attr = small_qp();
        ASSERT_EQ(rdma_create_ep(&id, res, nullptr, &attr), 0) << std::strerror(errno);
        EXPECT_NE(id->qp, nullptr);
        EXPECT_EQ(rdma_connect(id, nullptr), 0) << std::strerror(errno);
        EXPECT_EQ(rdma_disconnect(id), 0);
        rdma_destroy_ep(id);
    }
    MpaPeer refuse({"server", "--bind", std::string(kKernelIp) + ":7406", "--reject"});
    ASSERT_TRUE(refuse.line_with("listening"));
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_ep(&id, res, nullptr, nullptr), 0);
    rdma_conn_param p{};
    EXPECT_EQ(rdma_connect(id, &p), -1);
    EXPECT_EQ(errno, ECONNREFUSED) << "librdmacm's synchronous rejection";
    rdma_destroy_ep(id);
    rdma_freeaddrinfo(res);
}

TEST(MigrateId, WaitingEventsFollowTheId) {
    NEED_RUNTIME();
    rdma_event_channel* from = rdma_create_event_channel();
    rdma_event_channel* to = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(from, &id, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in kernel = sin(kKernelIp, 0);
    ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&kernel), 1000), 0);
    ASSERT_EQ(rdma_migrate_id(id, to), 0);
    EXPECT_EQ(id->channel, to);
    EXPECT_EQ(expect_event(to, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
    ASSERT_EQ(fcntl(from->fd, F_SETFL, fcntl(from->fd, F_GETFL) | O_NONBLOCK), 0);
    rdma_cm_event* ev = nullptr;
    EXPECT_EQ(rdma_get_cm_event(from, &ev), -1) << "the event left the old channel";
    EXPECT_EQ(errno, EAGAIN);
    ASSERT_EQ(rdma_migrate_id(id, nullptr), 0) << "to a synchronous channel of its own";
    EXPECT_NE(id->channel, to);
    EXPECT_EQ(rdma_migrate_id(id, nullptr), -1) << "synchronous already";
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(rdma_destroy_id(id), 0);
    rdma_destroy_event_channel(from);
    rdma_destroy_event_channel(to);
}

TEST(InitQpAttr, IwarpStatesEstablishAndDevices) {
    NEED_RUNTIME();
    Resolved r;
    r.resolve(7407);
    ibv_qp_attr attr{};
    int mask = 0;
    attr.qp_state = IBV_QPS_INIT;
    ASSERT_EQ(rdma_init_qp_attr(r.id, &attr, &mask), 0);
    EXPECT_EQ(mask, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT);
    EXPECT_EQ(attr.port_num, 1);
    attr.qp_state = IBV_QPS_RTS;
    ASSERT_EQ(rdma_init_qp_attr(r.id, &attr, &mask), 0);
    EXPECT_EQ(mask, IBV_QP_PORT);
    attr.qp_state = IBV_QPS_SQD;
    EXPECT_EQ(rdma_init_qp_attr(r.id, &attr, &mask), -1);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(rdma_establish(r.id), 0) << "nothing to send on iWARP";
    ibv_qp_init_attr qp = small_qp();
    ASSERT_EQ(rdma_create_qp(r.id, nullptr, &qp), 0);
    EXPECT_EQ(rdma_establish(r.id), -1) << "librdmacm refuses an id with a QP";
    EXPECT_EQ(errno, EINVAL);
    rdma_destroy_qp(r.id);
    int n = 0;
    ibv_context** devs = rdma_get_devices(&n);
    ASSERT_NE(devs, nullptr);
    ASSERT_EQ(n, 1);
    EXPECT_EQ(devs[0], r.id->verbs);
    EXPECT_EQ(devs[1], nullptr);
    rdma_free_devices(devs);
}

// Ids made, resolved and destroyed on four threads while a fifth takes and
// acknowledges their events from the shared channel: every call succeeds,
// every event taken names an id of the run, nothing is left behind.
TEST(Threads, IdsComeAndGoWhileAnotherThreadTakesTheirEvents) {
    NEED_RUNTIME();
    rdma_event_channel* ch = rdma_create_event_channel();
    ASSERT_NE(ch, nullptr);
    ASSERT_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
    constexpr int kThreads = 4;
    constexpr int kIds = 25;
    std::atomic<int> failures{0};
    std::atomic<int> running{kThreads};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&] {
            for (int i = 0; i < kIds; ++i) {
                rdma_cm_id* id = nullptr;
                if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) {
                    ++failures;
                    continue;
                }
                sockaddr_in kernel = sin(kKernelIp, 7600);
                if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&kernel), 1000) != 0)
                    ++failures;
                if (rdma_destroy_id(id) != 0) ++failures;
            }
            --running;
        });
    }
    int taken = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
        pollfd p{ch->fd, POLLIN, 0};
        const bool done = running.load() == 0;
        if (poll(&p, 1, done ? 0 : 20) == 0 && done) break;
        rdma_cm_event* ev = nullptr;
        if (rdma_get_cm_event(ch, &ev) != 0) {
            EXPECT_EQ(errno, EAGAIN);
            continue;
        }
        ++taken;
        EXPECT_EQ(ev->event, RDMA_CM_EVENT_ADDR_RESOLVED);
        EXPECT_EQ(ev->status, 0);
        EXPECT_EQ(rdma_ack_cm_event(ev), 0);
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_LE(taken, kThreads * kIds);
    rdma_cm_event* ev = nullptr;
    EXPECT_EQ(rdma_get_cm_event(ch, &ev), -1) << "an event of a destroyed id was left";
    rdma_destroy_event_channel(ch);
}

// Whether thread `tid` of this process is inside system call `want`
// (/proc/self/task/TID/syscall), polled for at most 5 s.
bool in_syscall(pid_t tid, long want) {
    const std::string path = "/proc/self/task/" + std::to_string(tid) + "/syscall";
    for (int i = 0; i < 500; ++i) {
        if (FILE* f = std::fopen(path.c_str(), "r")) {
            long nr = -1;
            const bool ok = std::fscanf(f, "%ld", &nr) == 1;
            std::fclose(f);
            if (ok && nr == want) return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a bounded poll
    }
    return false;
}

// Whether eventfd `fd` of this process holds no token (its fdinfo's
// "eventfd-count: 0"), polled for at most 5 s.
bool drained(int fd) {
    const std::string path = "/proc/self/fdinfo/" + std::to_string(fd);
    for (int i = 0; i < 500; ++i) {
        if (FILE* f = std::fopen(path.c_str(), "r")) {
            char line[128];
            bool zero = false;
            while (std::fgets(line, sizeof line, f) != nullptr) {
                unsigned long long n = 1;
                if (std::sscanf(line, "eventfd-count: %llx", &n) == 1) zero = n == 0;
            }
            std::fclose(f);
            if (zero) return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a bounded poll
    }
    return false;
}

// rping's CM thread waits in rdma_get_cm_event while its main thread destroys
// the channel and leaves: as with librdmacm the waiter stays waiting (it gets
// no EINVAL to exit the process on), a stale token wakes it only to wait
// again, and the fd it reads stays open until it leaves, so no fd number the
// process reuses is read under it.
TEST(Threads, ADestroyedChannelsWaiterWaitsOnAndItsFdStaysItsOwn) {
    NEED_RUNTIME();
    rdma_event_channel* ch = rdma_create_event_channel();
    ASSERT_NE(ch, nullptr);
    const int fd = ch->fd;
    std::atomic<pid_t> tid{0};
    std::atomic<bool> returned{false};
    int rc = 0;
    int err = 0;
    std::thread waiter([&] {
        tid = static_cast<pid_t>(syscall(SYS_gettid));
        rdma_cm_event* ev = nullptr;
        rc = rdma_get_cm_event(ch, &ev);
        err = errno;
        returned = true;
    });
    while (tid.load() == 0) std::this_thread::yield();
    ASSERT_TRUE(in_syscall(tid.load(), SYS_read)) << "the waiter never blocked";
    rdma_destroy_event_channel(ch);
    EXPECT_NE(fcntl(fd, F_GETFD), -1) << "the waiter's fd was closed under it";
    // A stale token (an event of an id destroyed meanwhile leaves one).
    const std::uint64_t one = 1;
    ASSERT_EQ(write(fd, &one, sizeof one), static_cast<ssize_t>(sizeof one));
    ASSERT_TRUE(drained(fd)) << "the waiter did not take the token";
    EXPECT_TRUE(in_syscall(tid.load(), SYS_read)) << "the waiter did not go back to waiting";
    EXPECT_FALSE(returned.load()) << "rc " << rc << " errno " << err;
    // Only a non-blocking fd lets it go, with EAGAIN, not EINVAL; the fd goes with it.
    ASSERT_EQ(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
    ASSERT_EQ(write(fd, &one, sizeof one), static_cast<ssize_t>(sizeof one));
    waiter.join();
    EXPECT_EQ(rc, -1);
    EXPECT_EQ(err, EAGAIN);
    EXPECT_EQ(fcntl(fd, F_GETFD), -1);
}

// rping's CM thread can also come back for its next event only after the main
// thread destroyed the channel: that call waits too (until the process ends),
// where a pointer that never was a channel is EINVAL.
TEST(Threads, ACallOnAJustDestroyedChannelWaits) {
    NEED_RUNTIME();
    rdma_event_channel* ch = rdma_create_event_channel();
    ASSERT_NE(ch, nullptr);
    rdma_destroy_event_channel(ch);
    // Static: the thread outlives this function.
    static std::atomic<pid_t> tid{0};
    static std::atomic<bool> returned{false};
    std::thread late([ch] {
        tid = static_cast<pid_t>(syscall(SYS_gettid));
        rdma_cm_event* ev = nullptr;
        (void)rdma_get_cm_event(ch, &ev);
        returned = true;
    });
    while (tid.load() == 0) std::this_thread::yield();
    EXPECT_TRUE(in_syscall(tid.load(), SYS_pause)) << "the late caller does not wait";
    EXPECT_FALSE(returned.load());
    late.detach();  // it waits until this test's process ends
    rdma_event_channel never{};
    never.fd = -1;
    rdma_cm_event* ev = nullptr;
    EXPECT_EQ(rdma_get_cm_event(&never, &ev), -1);
    EXPECT_EQ(errno, EINVAL);
}

// The child of ProcessExit (this binary run again): connects on the second TAP
// and returns from main with the connection open.
int connect_and_exit(const char* port) {
    setenv("IWCM_TAP", kTap2, 1);
    setenv("IWCM_IP", (std::string(kChildIp) + "/24").c_str(), 1);
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    if (ch == nullptr || rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) return 3;
    sockaddr_in to = sin(kKernelIp2, static_cast<std::uint16_t>(std::atoi(port)));
    if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&to), 2000) != 0) return 4;
    const rdma_cm_event_type steps[] = {RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_ROUTE_RESOLVED,
                                        RDMA_CM_EVENT_ESTABLISHED};
    for (auto step : steps) {
        rdma_cm_event* ev = next_event(ch);
        if (ev == nullptr || ev->event != step) return 5;
        rdma_ack_cm_event(ev);
        if (step == RDMA_CM_EVENT_ADDR_RESOLVED && rdma_resolve_route(id, 2000) != 0) return 6;
        if (step == RDMA_CM_EVENT_ROUTE_RESOLVED) {
            ibv_qp_init_attr attr = small_qp();
            rdma_conn_param p{};
            if (rdma_create_qp(id, nullptr, &attr) != 0 || rdma_connect(id, &p) != 0) return 7;
        }
    }
    return 0;  // the connection is open: the library closes it at exit
}

// The child of NoRuntime: without IWCM_* every call that needs the runtime
// fails as librdmacm does on a host without an RDMA device (ENODEV);
// rdma_getaddrinfo needs none. 0 when all of that held.
int calls_without_runtime() {
    for (const char* v : {"IWCM_TAP", "IWCM_IP", "IWCM_DEV"}) unsetenv(v);
    for (int i = 0; i < 2; ++i) {
        errno = 0;
        if (rdma_create_event_channel() != nullptr || errno != ENODEV) return 3;
    }
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP) != -1 || errno != ENODEV) return 4;
    rdma_addrinfo* res = nullptr;
    if (rdma_getaddrinfo("10.1.2.3", "7471", nullptr, &res) != 0) return 5;
    rdma_freeaddrinfo(res);
    return 0;
}

// Runs this binary again with `flag` (and `arg`); its exit status within
// 10 s and what it wrote on stderr.
std::pair<int, std::string> run_self(const std::string& flag, const std::string& arg = "") {
    int fds[2];
    if (pipe(fds) != 0) return {-1, ""};
    std::string self = "/proc/self/exe";
    std::string f = flag;
    std::string a = arg;
    char* argv[] = {self.data(), f.data(), a.empty() ? nullptr : a.data(), nullptr};
    const pid_t child = fork();
    if (child == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(fds[1]);
    std::string err;
    int status = -1;
    bool exited = false;
    for (int i = 0; i < 1000 && !exited; ++i) {
        pollfd p{fds[0], POLLIN, 0};
        if (poll(&p, 1, 10) == 1) {
            char chunk[512];
            const ssize_t n = read(fds[0], chunk, sizeof chunk);
            if (n > 0) err.append(chunk, static_cast<std::size_t>(n));
            // The end of its stderr: the child is exiting (its files close
            // before it can be waited for), so wait for it.
            if (n == 0) exited = waitpid(child, &status, 0) == child;
        }
        if (!exited) exited = waitpid(child, &status, WNOHANG) == child;
    }
    if (!exited) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
    }
    for (char chunk[512];;) {
        const ssize_t n = read(fds[0], chunk, sizeof chunk);
        if (n <= 0) break;
        err.append(chunk, static_cast<std::size_t>(n));
    }
    close(fds[0]);
    return {exited && WIFEXITED(status) ? WEXITSTATUS(status) : -1, err};
}

TEST(NoRuntime, EnodevAndTheReasonPrintedOnce) {
    auto [code, err] = run_self("--calls-without-runtime");
    EXPECT_EQ(code, 0) << "a call did not fail as librdmacm does without a device: " << err;
    const auto first = err.find("iwcm: ");
    ASSERT_NE(first, std::string::npos) << "no reason on stderr: " << err;
    EXPECT_EQ(err.find("iwcm: ", first + 1), std::string::npos) << "printed twice: " << err;
    EXPECT_NE(err.find("IWCM_TAP"), std::string::npos) << "the reason names the variables: " << err;
}

// A program that returns from main with a connection open: the peer sees it
// close gracefully (abi.cpp "Process exit"), not a silence until its timeout.
TEST(ProcessExit, OpenConnectionsCloseGracefully) {
    NEED_RUNTIME();
    MpaPeer peer({"server", "--bind", std::string(kKernelIp2) + ":7501", "--close", "wait"});
    ASSERT_TRUE(peer.line_with("listening"));
    auto [code, err] = run_self("--connect-and-exit", "7501");
    ASSERT_EQ(code, 0) << "the child's connection did not come up (or it did not exit): " << err;
    auto closed = peer.line_with("\"closed\"", 5000);
    ASSERT_TRUE(closed) << "the peer saw no close";
    EXPECT_NE(closed->find("\"peer_eof\": true"), std::string::npos) << *closed;
    EXPECT_NE(closed->find("\"reset_by_peer\": false"), std::string::npos) << *closed;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 3 && std::string(argv[1]) == "--connect-and-exit") return connect_and_exit(argv[2]);
    if (argc == 2 && std::string(argv[1]) == "--calls-without-runtime")
        return calls_without_runtime();
    ::testing::InitGoogleTest(&argc, argv);
    ::testing::AddGlobalTestEnvironment(new NamespaceEnv);
    return RUN_ALL_TESTS();
}
