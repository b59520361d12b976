// Interface options parsed and checked (interface.hpp).
#include "io/loop/interface.hpp"

#include <net/if.h>

#include "io/net/netlink.hpp"
#include "io/shared/shared_host.hpp"

namespace iwcm::io {

std::string not_unicast(const IpAddr& addr, const Interface& iface) {
    const auto& r = addr.raw();
    if (addr.is_unspecified()) return "the unspecified address";
    const unsigned bits = addr.is_v4() ? 32 : 128;
    if (addr.is_v6()) {
        if (r[0] == 0xFF) return "a multicast address";
        bool loopback = r[15] == 1;
        for (unsigned i = 0; i < 15; ++i) loopback = loopback && r[i] == 0;
        if (loopback) return "the loopback address";
    } else {
        if (r[0] == 127) return "a loopback address";
        if ((r[0] & 0xF0) == 0xE0) return "a multicast address";
        if (r[0] == 255 && r[1] == 255 && r[2] == 255 && r[3] == 255)
            return "the broadcast address";
    }
    // The host part of the prefix all ones (IPv4: the subnet's broadcast) or
    // all zeros (the network itself; IPv6's Subnet-Router anycast address,
    // RFC 4291 section 2.6.1). A /31 or /32 (IPv4), a /127 or /128 (IPv6)
    // has no such addresses (RFC 3021, RFC 6164).
    if (iface.prefix + 2 > bits || !iface.in_subnet(addr)) return "";
    bool all_ones = true;
    bool all_zeros = true;
    for (unsigned bit = iface.prefix; bit < bits; ++bit) {
        const bool set = (r[bit / 8] & (0x80u >> (bit % 8))) != 0;
        all_ones = all_ones && set;
        all_zeros = all_zeros && !set;
    }
    if (all_ones && addr.is_v4()) return "the subnet's broadcast address";
    if (all_zeros) return "the subnet's network address";
    return "";
}

bool Interface::in_subnet(const IpAddr& other) const {
    if (other.family() != addr.family()) return false;
    const auto& a = addr.raw();
    const auto& b = other.raw();
    for (unsigned bit = 0; bit < prefix; ++bit) {
        const auto mask = static_cast<std::uint8_t>(0x80u >> (bit % 8));
        if ((a[bit / 8] & mask) != (b[bit / 8] & mask)) return false;
    }
    return true;
}

std::optional<IpAddr> Interface::next_hop(const IpAddr& dest) const {
    if (in_subnet(dest)) return dest;
    return gateway;
}

namespace {

// --gateway: an address in our subnet that is unicast and not our own.
Expected<IpAddr, std::string> parse_gateway(const std::string& text, const Interface& i,
                                            const std::string& ip) {
    auto gw = IpAddr::parse(text);
    if (!gw) return fail("--gateway " + text + ": not an IPv4 or IPv6 address");
    if (const std::string why = not_unicast(*gw, i); !why.empty())
        return fail("--gateway " + text + ": " + why + " cannot be a gateway");
    if (*gw == i.addr) return fail("--gateway " + text + ": that is our own address (--ip)");
    if (!i.in_subnet(*gw)) return fail("--gateway " + text + ": not in the subnet of --ip " + ip);
    return *gw;
}

}  // namespace

namespace {

// --dev IF [--ip ADDR]: the interface's MAC and one of its addresses, from the kernel.
Expected<Interface, std::string> parse_shared(const InterfaceOptions& o) {
    auto rtnl = Rtnl::open();
    if (!rtnl) return fail("--dev " + o.dev + ": " + rtnl.error());
    auto link = SharedHost::probe(*rtnl, o.dev);
    if (!link) return fail(link.error());
    auto addrs = rtnl->addresses(link->index);
    if (!addrs) return fail("--dev " + o.dev + ": " + addrs.error());
    std::optional<IpAddr> want;
    if (!o.ip.empty()) {
        want = IpAddr::parse(o.ip.substr(0, o.ip.find('/')));
        if (!want) return fail("--ip " + o.ip + ": not an IPv4 or IPv6 address");
    }
    Interface i;
    i.dev = o.dev;
    i.mac = link->mac;
    for (const AddrInfo& a : *addrs) {
        if (a.tentative() || (want && a.addr != *want) || (!want && a.scope != 0)) continue;
        i.addr = a.addr;
        i.prefix = a.prefix;
        return i;
    }
    if (want) return fail("--ip " + o.ip + ": not an address of " + o.dev);
    return fail("--dev " + o.dev + ": the interface has no global address (add one, or give --ip)");
}

}  // namespace

Expected<Interface, std::string> parse_interface(const InterfaceOptions& o) {
    if (!o.dev.empty()) return parse_shared(o);
    if (o.tap.empty()) return fail(std::string("--tap or --dev is required"));
    // An interface name is at most IFNAMSIZ - 1 bytes: a usage error, found
    // before the device is touched (TUNSETIFF would refuse it).
    if (o.tap.size() >= IFNAMSIZ)
        return fail("--tap " + o.tap + ": a TAP name is 1 to " + std::to_string(IFNAMSIZ - 1) +
                    " characters");
    if (o.ip.empty()) return fail(std::string("--ip is required with --tap"));
    Interface i;
    auto slash = o.ip.find('/');
    if (slash == std::string::npos)
        return fail("--ip " + o.ip + ": expected ADDR/PREFIX, e.g. 10.99.1.2/24");
    auto addr = IpAddr::parse(o.ip.substr(0, slash));
    if (!addr) return fail("--ip " + o.ip + ": not an IPv4 or IPv6 address");
    i.addr = *addr;
    const unsigned max = addr->is_v4() ? 32 : 128;
    const std::string p = o.ip.substr(slash + 1);
    if (p.empty() || p.size() > 3 || p.find_first_not_of("0123456789") != std::string::npos ||
        std::stoul(p) > max)
        return fail("--ip " + o.ip + ": prefix must be 0 to " + std::to_string(max));
    i.prefix = static_cast<unsigned>(std::stoul(p));
    if (const std::string why = not_unicast(i.addr, i); !why.empty())
        return fail("--ip " + o.ip + ": " + why + " cannot be our own");
    if (o.mac.empty()) {
        const auto& r = i.addr.raw();
        const std::size_t at = i.addr.is_v4() ? 0 : 12;
        i.mac = MacAddr{{0x02, 0x00, r[at], r[at + 1], r[at + 2], r[at + 3]}};
    } else {
        auto m = MacAddr::parse(o.mac);
        if (!m || m->is_multicast() || *m == MacAddr{})
            return fail("--mac " + o.mac + ": not a unicast MAC");
        i.mac = *m;
    }
    if (o.vlan >= 0) i.vlan = static_cast<std::uint16_t>(o.vlan);
    if (!o.gateway.empty()) {
        auto gw = parse_gateway(o.gateway, i, o.ip);
        if (!gw) return fail(gw.error());
        i.gateway = *gw;
    }
    return i;
}

}  // namespace iwcm::io
