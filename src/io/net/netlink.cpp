// The kernel's tables over rtnetlink. Read first: netlink.hpp, netlink(7), rtnetlink(7).
#include "io/net/netlink.hpp"

#include <linux/if.h>
#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "iwcm/assert.hpp"

namespace iwcm::io {

namespace {

constexpr std::size_t kRecvBuffer = 65536;  // a dump message fits (netlink(7): 8 KiB at least)
constexpr std::size_t kMaxReplies = 4096;   // a bound on one dump's messages

std::string errno_text(int err) {
    return std::strerror(err);
}

// A request under construction: the header, the family's fixed struct, then
// attributes, each padded to NLMSG_ALIGNTO / RTA_ALIGNTO (4 bytes).
class Request {
public:
    Request(std::uint16_t type, std::uint16_t flags) {
        nlmsghdr h{};
        h.nlmsg_type = type;
        h.nlmsg_flags = static_cast<std::uint16_t>(NLM_F_REQUEST | flags);
        append(&h, sizeof h);
    }
    template <typename T>
    void body(const T& fixed) {
        append(&fixed, sizeof fixed);
    }
    void attr(std::uint16_t type, const void* data, std::size_t len) {
        IWCM_ASSERT(RTA_LENGTH(len) <= 0xffff);
        IWCM_ASSERT(data != nullptr || len == 0);
        rtattr a{};
        a.rta_type = type;
        a.rta_len = static_cast<std::uint16_t>(RTA_LENGTH(len));
        append(&a, sizeof a);
        append(data, len);
    }
    // The whole message with nlmsg_len set.
    std::span<std::byte> finish() {
        auto len = static_cast<std::uint32_t>(bytes_.size());
        std::memcpy(bytes_.data() + offsetof(nlmsghdr, nlmsg_len), &len, sizeof len);
        return bytes_;
    }

private:
    void append(const void* data, std::size_t len) {
        const auto* p = static_cast<const std::byte*>(data);
        bytes_.insert(bytes_.end(), p, p + len);
        bytes_.resize(NLMSG_ALIGN(bytes_.size()));
    }
    std::vector<std::byte> bytes_;
};

// One received message: its header and a view of its payload.
struct Message {
    const nlmsghdr* hdr;
    template <typename T>
    const T* fixed() const {
        if (hdr->nlmsg_len < NLMSG_LENGTH(sizeof(T))) return nullptr;
        return static_cast<const T*>(NLMSG_DATA(hdr));
    }
};

// The attributes that follow a message's fixed struct of `fixed_len` bytes,
// indexed by type (the last one of a type wins; types above kMax ignored).
class Attrs {
public:
    static constexpr std::size_t kMax = 64;
    Attrs(const nlmsghdr* hdr, std::size_t fixed_len) {
        if (hdr->nlmsg_len < NLMSG_LENGTH(fixed_len)) return;
        const auto* base = static_cast<const std::byte*>(NLMSG_DATA(hdr));
        auto* a = reinterpret_cast<const rtattr*>(base + NLMSG_ALIGN(fixed_len));
        int left = static_cast<int>(hdr->nlmsg_len - NLMSG_LENGTH(NLMSG_ALIGN(fixed_len)));
        for (; RTA_OK(a, left); a = RTA_NEXT(a, left)) {
            if (a->rta_type < kMax) table_[a->rta_type] = a;
        }
    }
    std::span<const std::byte> get(std::uint16_t type) const {
        if (type >= kMax || table_[type] == nullptr) return {};
        const rtattr* a = table_[type];
        return {static_cast<const std::byte*>(RTA_DATA(a)), RTA_PAYLOAD(a)};
    }
    bool has(std::uint16_t type) const { return type < kMax && table_[type] != nullptr; }
    template <typename T>
    std::optional<T> scalar(std::uint16_t type) const {
        auto b = get(type);
        if (b.size() < sizeof(T)) return std::nullopt;
        T v;
        std::memcpy(&v, b.data(), sizeof v);
        return v;
    }

private:
    const rtattr* table_[kMax] = {};
};

std::optional<IpAddr> ip_from(int family, std::span<const std::byte> b) {
    if (family == AF_INET && b.size() == 4) {
        Ipv4Addr a;
        std::memcpy(a.bytes.data(), b.data(), 4);
        return IpAddr(a);
    }
    if (family == AF_INET6 && b.size() == 16) {
        Ipv6Addr a;
        std::memcpy(a.bytes.data(), b.data(), 16);
        return IpAddr(a);
    }
    return std::nullopt;
}

std::optional<MacAddr> mac_from(std::span<const std::byte> b) {
    if (b.size() != 6) return std::nullopt;
    MacAddr m;
    std::memcpy(m.bytes.data(), b.data(), 6);
    return m;
}

unsigned char family_of(const IpAddr& ip) {
    return ip.is_v4() ? AF_INET : AF_INET6;
}
std::size_t length_of(const IpAddr& ip) {
    return ip.is_v4() ? 4 : 16;
}

// The kernel's extended ack text (NLMSGERR_ATTR_MSG), if the error carries one.
std::string ext_ack_text(const nlmsghdr* hdr) {
    if ((hdr->nlmsg_flags & NLM_F_ACK_TLVS) == 0) return {};
    const auto* err = static_cast<const nlmsgerr*>(NLMSG_DATA(hdr));
    std::size_t fixed = sizeof(nlmsgerr);
    if ((hdr->nlmsg_flags & NLM_F_CAPPED) == 0) fixed += err->msg.nlmsg_len - sizeof(nlmsghdr);
    Attrs attrs(hdr, fixed);
    auto text = attrs.get(NLMSGERR_ATTR_MSG);
    if (text.empty()) return {};
    std::string s(reinterpret_cast<const char*>(text.data()), text.size());
    while (!s.empty() && s.back() == '\0') s.pop_back();
    return s;
}

LinkInfo parse_link(const nlmsghdr* h) {
    LinkInfo info;
    const auto* ifi = Message{h}.fixed<ifinfomsg>();
    if (ifi == nullptr) return info;
    Attrs attrs(h, sizeof(ifinfomsg));
    info.index = ifi->ifi_index;
    info.admin_up = (ifi->ifi_flags & IFF_UP) != 0;
    info.carrier = (ifi->ifi_flags & IFF_LOWER_UP) != 0;
    auto name = attrs.get(IFLA_IFNAME);
    info.name.assign(reinterpret_cast<const char*>(name.data()), name.size());
    while (!info.name.empty() && info.name.back() == '\0') info.name.pop_back();
    if (auto mac = mac_from(attrs.get(IFLA_ADDRESS))) info.mac = *mac;
    info.mtu = attrs.scalar<std::uint32_t>(IFLA_MTU).value_or(0);
    info.operstate = attrs.scalar<std::uint8_t>(IFLA_OPERSTATE).value_or(IF_OPER_UNKNOWN);
    return info;
}

// An RTM_NEWADDR / RTM_DELADDR; empty for a family other than IPv4 / IPv6.
std::optional<AddrInfo> parse_addr(const nlmsghdr* h) {
    const auto* ifa = Message{h}.fixed<ifaddrmsg>();
    if (ifa == nullptr) return std::nullopt;
    Attrs attrs(h, sizeof(ifaddrmsg));
    // IPv4: IFA_LOCAL is the interface's own address, IFA_ADDRESS the peer's on a
    // point-to-point link (and equal to IFA_LOCAL otherwise). IPv6 has IFA_ADDRESS
    // only (IFA_LOCAL too, with a peer, and then it is ours).
    auto bytes = attrs.has(IFA_LOCAL) ? attrs.get(IFA_LOCAL) : attrs.get(IFA_ADDRESS);
    auto ip = ip_from(ifa->ifa_family, bytes);
    if (!ip) return std::nullopt;
    AddrInfo info;
    info.addr = *ip;
    info.prefix = ifa->ifa_prefixlen;
    info.ifindex = static_cast<int>(ifa->ifa_index);
    info.scope = ifa->ifa_scope;
    info.flags = attrs.scalar<std::uint32_t>(IFA_FLAGS).value_or(ifa->ifa_flags);
    return info;
}

// An RTM_NEWNEIGH / RTM_DELNEIGH of IPv4 / IPv6 (not a bridge's FDB entry).
struct NeighMsg {
    int ifindex;
    IpAddr ip;
    NeighborInfo info;
};
std::optional<NeighMsg> parse_neigh(const nlmsghdr* h) {
    const auto* ndm = Message{h}.fixed<ndmsg>();
    if (ndm == nullptr) return std::nullopt;
    Attrs attrs(h, sizeof(ndmsg));
    auto ip = ip_from(ndm->ndm_family, attrs.get(NDA_DST));
    if (!ip) return std::nullopt;
    NeighMsg n{ndm->ndm_ifindex, *ip, {}};
    n.info.state = ndm->ndm_state;
    if (NeighborInfo::has_valid_mac(n.info.state)) n.info.mac = mac_from(attrs.get(NDA_LLADDR));
    return n;
}

int open_socket(std::string& error) {
    int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0) {
        error = "rtnetlink: socket(AF_NETLINK, NETLINK_ROUTE): " + errno_text(errno);
        return -1;
    }
    sockaddr_nl local{};
    local.nl_family = AF_NETLINK;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
        error = "rtnetlink: bind: " + errno_text(errno);
        ::close(fd);
        return -1;
    }
    // Errors carry the kernel's text; acks do not echo the request back.
    int one = 1;
    ::setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one);
    ::setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
    return fd;
}

}  // namespace

bool LinkInfo::up() const {
    return admin_up && carrier && (operstate == IF_OPER_UP || operstate == IF_OPER_UNKNOWN);
}

bool AddrInfo::tentative() const {
    if ((flags & IFA_F_DADFAILED) != 0) return true;
    return (flags & IFA_F_TENTATIVE) != 0 && (flags & IFA_F_OPTIMISTIC) == 0;
}

bool NeighborInfo::has_valid_mac(std::uint16_t state) {
    // The kernel's NUD_VALID (include/net/neighbour.h), not exported to user space.
    constexpr std::uint16_t kValid =
        NUD_PERMANENT | NUD_NOARP | NUD_REACHABLE | NUD_PROBE | NUD_STALE | NUD_DELAY;
    return (state & kValid) != 0;
}

std::string nud_state_name(std::uint16_t state) {
    static constexpr std::pair<std::uint16_t, const char*> kNames[] = {
        {NUD_INCOMPLETE, "INCOMPLETE"}, {NUD_REACHABLE, "REACHABLE"}, {NUD_STALE, "STALE"},
        {NUD_DELAY, "DELAY"},           {NUD_PROBE, "PROBE"},         {NUD_FAILED, "FAILED"},
        {NUD_NOARP, "NOARP"},           {NUD_PERMANENT, "PERMANENT"},
    };
    if (state == NUD_NONE) return "NONE";
    std::string s;
    for (auto [bit, name] : kNames) {
        if ((state & bit) == 0) continue;
        if (!s.empty()) s += '|';
        s += name;
    }
    return s.empty() ? "0x" + std::to_string(state) : s;
}

const char* to_string(Change::Kind kind) {
    switch (kind) {
        case Change::Kind::kLinkUp: return "link-up";
        case Change::Kind::kLinkDown: return "link-down";
        case Change::Kind::kAddrAdded: return "addr-added";
        case Change::Kind::kAddrRemoved: return "addr-removed";
        case Change::Kind::kNeighbor: return "neighbor";
        case Change::Kind::kNeighborRemoved: return "neighbor-removed";
        case Change::Kind::kOverrun: return "overrun";
    }
    return "?";
}

Expected<Rtnl, std::string> Rtnl::open() {
    std::string error;
    int request = open_socket(error);
    if (request < 0) return fail(error);
    int notify = open_socket(error);
    if (notify < 0) {
        ::close(request);
        return fail(error);
    }
    return Rtnl(request, notify);
}

Rtnl::Rtnl(Rtnl&& other) noexcept
    : request_fd_(std::exchange(other.request_fd_, -1)),
      notify_fd_(std::exchange(other.notify_fd_, -1)),
      seq_(other.seq_),
      link_up_(std::move(other.link_up_)) {}

Rtnl& Rtnl::operator=(Rtnl&& other) noexcept {
    if (this != &other) {
        close_all();
        request_fd_ = std::exchange(other.request_fd_, -1);
        notify_fd_ = std::exchange(other.notify_fd_, -1);
        seq_ = other.seq_;
        link_up_ = std::move(other.link_up_);
    }
    return *this;
}

Rtnl::~Rtnl() {
    close_all();
}

Expected<void, std::string> Rtnl::transact(std::span<std::byte> request, const char* step,
                                           Replies& replies, int* kernel_error) {
    IWCM_ASSERT(request_fd_ >= 0);
    IWCM_ASSERT(request.size() >= sizeof(nlmsghdr));
    std::uint32_t seq = ++seq_;
    std::memcpy(request.data() + offsetof(nlmsghdr, nlmsg_seq), &seq, sizeof seq);
    if (::send(request_fd_, request.data(), request.size(), 0) < 0)
        return fail(std::string(step) + ": send: " + errno_text(errno));
    auto deadline = std::chrono::steady_clock::now() + kRequestTimeout;
    std::vector<std::byte> buf(kRecvBuffer);
    for (;;) {
        ssize_t n = ::recv(request_fd_, buf.data(), buf.size(), MSG_TRUNC);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) {
            auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) return fail(std::string(step) + ": no answer from the kernel");
            pollfd p{request_fd_, POLLIN, 0};
            ::poll(&p, 1, static_cast<int>(left.count()) + 1);
            continue;
        }
        if (n < 0) return fail(std::string(step) + ": recv: " + errno_text(errno));
        if (static_cast<std::size_t>(n) > buf.size())
            return fail(std::string(step) + ": answer larger than " + std::to_string(buf.size()));
        int left = static_cast<int>(n);
        for (auto* h = reinterpret_cast<const nlmsghdr*>(buf.data()); NLMSG_OK(h, left);
             h = NLMSG_NEXT(h, left)) {
            if (h->nlmsg_seq != seq) continue;  // a late answer to an earlier request
            if (h->nlmsg_type == NLMSG_ERROR) {
                const auto* err = Message{h}.fixed<nlmsgerr>();
                if (err == nullptr) return fail(std::string(step) + ": short error message");
                if (err->error == 0) return {};
                if (kernel_error != nullptr) *kernel_error = -err->error;
                std::string text = std::string(step) + ": " + errno_text(-err->error);
                std::string ext = ext_ack_text(h);
                if (!ext.empty()) text += " (" + ext + ")";
                return fail(text);
            }
            if (h->nlmsg_type == NLMSG_DONE) {
                // A dump that failed part-way carries the negative errno here.
                const auto* code = Message{h}.fixed<int>();
                if (code == nullptr || *code >= 0) return {};
                if (kernel_error != nullptr) *kernel_error = -*code;
                return fail(std::string(step) + ": " + errno_text(-*code));
            }
            if (replies.size() >= kMaxReplies)
                return fail(std::string(step) + ": more than " + std::to_string(kMaxReplies) +
                            " answers");
            const auto* p = reinterpret_cast<const std::byte*>(h);
            replies.emplace_back(p, p + h->nlmsg_len);
        }
    }
}

Expected<void, std::string> Rtnl::dump(std::span<std::byte> request, const char* step,
                                       Replies& replies) {
    IWCM_ASSERT(request.size() >= sizeof(nlmsghdr));
    IWCM_ASSERT(reinterpret_cast<const nlmsghdr*>(request.data())->nlmsg_flags & NLM_F_DUMP);
    constexpr int kAttempts = 4;
    for (int attempt = 0; attempt < kAttempts; ++attempt) {
        replies.clear();
        if (auto r = transact(request, step, replies); !r) return r;
        bool consistent = true;
        for (const auto& m : replies)
            if (reinterpret_cast<const nlmsghdr*>(m.data())->nlmsg_flags & NLM_F_DUMP_INTR)
                consistent = false;
        if (consistent) return {};
    }
    return fail(std::string(step) + ": the table kept changing during " +
                std::to_string(kAttempts) + " dumps");
}

Expected<LinkInfo, std::string> Rtnl::link_query(std::span<std::byte> request,
                                                 const std::string& step) {
    Replies replies;
    if (auto r = transact(request, step.c_str(), replies); !r) return fail(r.error());
    for (const auto& m : replies) {
        const auto* h = reinterpret_cast<const nlmsghdr*>(m.data());
        if (h->nlmsg_type == RTM_NEWLINK) return parse_link(h);
    }
    return fail(step + ": no RTM_NEWLINK in the answer");
}

Expected<LinkInfo, std::string> Rtnl::link(const std::string& ifname) {
    if (ifname.empty() || ifname.size() >= IFNAMSIZ)
        return fail("link '" + ifname + "': a name of 1 to 15 characters");
    Request req(RTM_GETLINK, NLM_F_ACK);
    ifinfomsg ifi{};
    ifi.ifi_family = AF_UNSPEC;
    req.body(ifi);
    req.attr(IFLA_IFNAME, ifname.c_str(), ifname.size() + 1);
    return link_query(req.finish(), "link " + ifname + ": RTM_GETLINK");
}

Expected<LinkInfo, std::string> Rtnl::link(int ifindex) {
    if (ifindex <= 0) return fail("link #" + std::to_string(ifindex) + ": not an index");
    Request req(RTM_GETLINK, NLM_F_ACK);
    ifinfomsg ifi{};
    ifi.ifi_family = AF_UNSPEC;
    ifi.ifi_index = ifindex;
    req.body(ifi);
    return link_query(req.finish(), "link #" + std::to_string(ifindex) + ": RTM_GETLINK");
}

Expected<std::vector<AddrInfo>, std::string> Rtnl::addresses(int ifindex) {
    IWCM_ASSERT(ifindex > 0);
    Request req(RTM_GETADDR, NLM_F_DUMP);
    ifaddrmsg ifa{};
    ifa.ifa_family = AF_UNSPEC;
    req.body(ifa);
    Replies replies;
    std::string step = "addresses of link #" + std::to_string(ifindex) + ": RTM_GETADDR";
    if (auto r = dump(req.finish(), step.c_str(), replies); !r) return fail(r.error());
    std::vector<AddrInfo> out;
    for (const auto& m : replies) {
        const auto* h = reinterpret_cast<const nlmsghdr*>(m.data());
        if (h->nlmsg_type != RTM_NEWADDR) continue;
        auto a = parse_addr(h);
        if (a && a->ifindex == ifindex) out.push_back(*a);
    }
    return out;
}

Expected<RouteInfo, std::string> Rtnl::route(const IpAddr& dst, int oif) {
    IWCM_ASSERT(oif >= 0);
    Request req(RTM_GETROUTE, NLM_F_ACK);
    rtmsg rtm{};
    rtm.rtm_family = family_of(dst);
    rtm.rtm_dst_len = static_cast<unsigned char>(length_of(dst) * 8);
    req.body(rtm);
    req.attr(RTA_DST, dst.raw().data(), length_of(dst));
    if (oif != 0) {
        auto index = static_cast<std::uint32_t>(oif);
        req.attr(RTA_OIF, &index, sizeof index);
    }
    Replies replies;
    std::string step = "route to " + dst.to_string() + ": RTM_GETROUTE";
    if (auto r = transact(req.finish(), step.c_str(), replies); !r) return fail(r.error());
    for (const auto& m : replies) {
        const auto* h = reinterpret_cast<const nlmsghdr*>(m.data());
        const auto* got = Message{h}.fixed<rtmsg>();
        if (h->nlmsg_type != RTM_NEWROUTE || got == nullptr) continue;
        if (got->rtm_type == RTN_LOCAL) return fail(step + ": it is a local address");
        if (got->rtm_type != RTN_UNICAST)
            return fail(step + ": route type " + std::to_string(got->rtm_type) +
                        " (unreachable, blackhole, prohibit ...)");
        Attrs attrs(h, sizeof(rtmsg));
        RouteInfo info;
        info.oif = static_cast<int>(attrs.scalar<std::uint32_t>(RTA_OIF).value_or(0));
        info.gateway = ip_from(got->rtm_family, attrs.get(RTA_GATEWAY));
        info.prefsrc = ip_from(got->rtm_family, attrs.get(RTA_PREFSRC));
        if (info.oif == 0) return fail(step + ": the answer names no output interface");
        return info;
    }
    return fail(step + ": no RTM_NEWROUTE in the answer");
}

Expected<NeighborInfo, std::string> Rtnl::neighbor(int ifindex, const IpAddr& ip) {
    IWCM_ASSERT(ifindex > 0);
    Request req(RTM_GETNEIGH, NLM_F_ACK);
    ndmsg ndm{};
    ndm.ndm_family = family_of(ip);
    ndm.ndm_ifindex = ifindex;
    req.body(ndm);
    req.attr(NDA_DST, ip.raw().data(), length_of(ip));
    Replies replies;
    std::string step =
        "neighbor " + ip.to_string() + " on link #" + std::to_string(ifindex) + ": RTM_GETNEIGH";
    int kernel_error = 0;
    auto r = transact(req.finish(), step.c_str(), replies, &kernel_error);
    if (!r && kernel_error == ENOENT) return NeighborInfo{};  // no entry
    if (!r) return fail(r.error());
    for (const auto& m : replies) {
        const auto* h = reinterpret_cast<const nlmsghdr*>(m.data());
        if (h->nlmsg_type != RTM_NEWNEIGH) continue;
        if (auto n = parse_neigh(h)) return n->info;
    }
    return fail(step + ": no RTM_NEWNEIGH in the answer");
}

Expected<void, std::string> Rtnl::resolve(int ifindex, const IpAddr& ip) {
    IWCM_ASSERT(ifindex > 0);
    // NTF_USE on a PERMANENT entry turns it INCOMPLETE and starts probing
    // (seen on 6.18): leave such entries, and NOARP ones, alone.
    auto now = neighbor(ifindex, ip);
    if (!now) return fail(now.error());
    if ((now->state & (NUD_PERMANENT | NUD_NOARP)) != 0) return {};
    Request req(RTM_NEWNEIGH, NLM_F_ACK | NLM_F_CREATE);
    ndmsg ndm{};
    ndm.ndm_family = family_of(ip);
    ndm.ndm_ifindex = ifindex;
    ndm.ndm_state = NUD_NONE;
    ndm.ndm_flags = NTF_USE;
    req.body(ndm);
    req.attr(NDA_DST, ip.raw().data(), length_of(ip));
    Replies replies;
    std::string step = "resolve " + ip.to_string() + " on link #" + std::to_string(ifindex) +
                       ": RTM_NEWNEIGH NTF_USE";
    return transact(req.finish(), step.c_str(), replies);
}

Expected<void, std::string> Rtnl::subscribe() {
    IWCM_ASSERT(notify_fd_ >= 0);
    for (int group : {RTNLGRP_LINK, RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV6_IFADDR, RTNLGRP_NEIGH}) {
        if (::setsockopt(notify_fd_, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, &group, sizeof group) !=
            0)
            return fail("rtnetlink: joining group " + std::to_string(group) + ": " +
                        errno_text(errno));
    }
    int queue = 1 << 20;
    ::setsockopt(notify_fd_, SOL_SOCKET, SO_RCVBUF, &queue, sizeof queue);
    // Every link's state now: what later notifications are compared with.
    Request req(RTM_GETLINK, NLM_F_DUMP);
    ifinfomsg ifi{};
    ifi.ifi_family = AF_UNSPEC;
    req.body(ifi);
    Replies replies;
    if (auto r = dump(req.finish(), "links: RTM_GETLINK", replies); !r) return r;
    for (const auto& m : replies) {
        const auto* h = reinterpret_cast<const nlmsghdr*>(m.data());
        if (h->nlmsg_type != RTM_NEWLINK) continue;
        LinkInfo link = parse_link(h);
        if (link.index > 0) link_up_[link.index] = link.up();
    }
    return {};
}

std::vector<Change> Rtnl::poll_changes() {
    IWCM_ASSERT(notify_fd_ >= 0);
    std::vector<Change> out;
    std::vector<std::byte> buf(kRecvBuffer);
    for (;;) {
        ssize_t n = ::recv(notify_fd_, buf.data(), buf.size(), MSG_TRUNC);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == ENOBUFS) {
            // The kernel dropped notifications (our queue was full): say so.
            out.push_back(Change{});
            link_up_.clear();
            continue;
        }
        if (n < 0) break;  // EAGAIN: drained
        if (static_cast<std::size_t>(n) > buf.size()) {
            out.push_back(Change{});  // truncated: treat as lost
            continue;
        }
        int left = static_cast<int>(n);
        for (auto* h = reinterpret_cast<const nlmsghdr*>(buf.data()); NLMSG_OK(h, left);
             h = NLMSG_NEXT(h, left))
            decode(h, out);
    }
    return out;
}

void Rtnl::decode(const nlmsghdr* h, std::vector<Change>& out) {
    IWCM_ASSERT(h != nullptr);
    Change c;
    switch (h->nlmsg_type) {
        case RTM_NEWLINK:
        case RTM_DELLINK: {
            LinkInfo link = parse_link(h);
            if (link.index <= 0) return;
            bool up = h->nlmsg_type == RTM_NEWLINK && link.up();
            auto it = link_up_.find(link.index);
            if (it != link_up_.end() && it->second == up) return;  // no edge
            if (h->nlmsg_type == RTM_DELLINK)
                link_up_.erase(link.index);
            else
                link_up_[link.index] = up;
            c.kind = up ? Change::Kind::kLinkUp : Change::Kind::kLinkDown;
            c.ifindex = link.index;
            c.mac = link.mac;
            break;
        }
        case RTM_NEWADDR:
        case RTM_DELADDR: {
            auto a = parse_addr(h);
            if (!a) return;
            // Not usable yet: reported when the kernel announces it again after DAD.
            if (h->nlmsg_type == RTM_NEWADDR && a->tentative()) return;
            c.kind = h->nlmsg_type == RTM_NEWADDR ? Change::Kind::kAddrAdded
                                                  : Change::Kind::kAddrRemoved;
            c.ifindex = a->ifindex;
            c.addr = a->addr;
            c.prefix = a->prefix;
            c.flags = a->flags;
            break;
        }
        case RTM_NEWNEIGH:
        case RTM_DELNEIGH: {
            auto n = parse_neigh(h);
            if (!n) return;
            c.kind = h->nlmsg_type == RTM_NEWNEIGH ? Change::Kind::kNeighbor
                                                   : Change::Kind::kNeighborRemoved;
            c.ifindex = n->ifindex;
            c.addr = n->ip;
            c.state = n->info.state;
            if (n->info.mac) c.mac = *n->info.mac;
            break;
        }
        default: return;
    }
    out.push_back(c);
}

void Rtnl::close_all() {
    if (request_fd_ >= 0) ::close(request_fd_);
    if (notify_fd_ >= 0) ::close(notify_fd_);
    request_fd_ = -1;
    notify_fd_ = -1;
}

}  // namespace iwcm::io
