// The N-thread network of listen and connect. Read first: tap_threads.hpp.
#include "tools/tap_threads.hpp"

namespace iwcm::tools {

Expected<ThreadNet, std::string> open_thread_net(const WireOptions& o, const Interface& iface,
                                                 unsigned n) {
    ThreadNet t;
    if (!iface.dev.empty()) {
        auto rtnl = io::Rtnl::open();
        if (!rtnl) return fail("--dev " + iface.dev + ": " + rtnl.error());
        io::SharedShardsConfig sc;
        sc.dev = iface.dev;
        sc.mode = xdp_mode(o);
        sc.shards = n;
        auto shared =
            io::SharedShards::open(sc, std::move(*rtnl), core_config(o, iface), iface.addr);
        if (!shared) return fail("--dev " + iface.dev + ": " + shared.error());
        t.shared = std::move(*shared);
        return t;
    }
    io::TapShardsConfig tc;
    tc.tap = o.tap;
    tc.shards = n;
    auto opened = io::TapShards::open(tc, core_config(o, iface), iface.vlan);
    if (!opened) return fail(opened.error());
    t.tap = std::move(*opened);
    if (auto r = t.tap->add_address(iface.addr); !r)
        return fail("--ip: " + std::string(to_string(r.error())));
    return t;
}

std::vector<std::pair<std::string, std::string>> thread_fields(io::TapShards& net,
                                                               std::uint64_t handed_off) {
    std::string per = "[";
    for (std::uint32_t s = 0; s < net.shards(); ++s)
        per += (s ? "," : "") + std::to_string(net.core(s).stats().established);
    return {{"threads", std::to_string(net.shards())},
            {"handed_off", std::to_string(handed_off)},
            {"thread_established", per + "]"}};
}

}  // namespace iwcm::tools
